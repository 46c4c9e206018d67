"""What a real ATC run wrote: its ``fusion_result.json`` and its graph dump after the build.

This module only reads files (it runs nothing and imports no stage above it); the run itself is
``tvm_ascend.atc_run`` and the side-by-side with a tvm-ascend build ``tvm_ascend.atc_compare``.

Sources of the two formats
--------------------------
``fusion_result.json`` (CANN ATC documentation, ``--export_compile_stat``, atlasatcparam_16_0098):
one object per ``session_and_graph_id_<session>_<graph>``, each with a ``graph_fusion`` and a
``ub_fusion`` section of ``{pass name: {"match_times", "effect_times"[, "repository_hit_times"]}}``,
counts written as strings. ATC writes it into the folder ``atc`` runs in (or
``$ASCEND_WORK_PATH/FE/<pid>/`` when that variable is set). ``partition/fusion_result.py`` writes
the same layout for our builds.

Graph dumps (CANN environment-variable reference ``DUMP_GE_GRAPH`` / ``DUMP_GRAPH_LEVEL`` /
``DUMP_GRAPH_PATH``, ATC guide "Dump Graph Details", and GE's dumper, metadef
``graph/utils/ge_ir_utils.cc`` ``OnnxUtils::EncodeNode``):
``ge_onnx_<index>_graph_<id>_<stage>.pbtxt``, an ONNX ``ModelProto`` in protobuf text format.
Each GE node is a ``node`` with its GE name, its GE type prefixed ``ge:`` (``ge:MatMulV2``),
inputs ``<producer>:<output index>`` and the op's attributes sorted by name. A node that fusion
made carries ``_datadump_original_op_names`` (the framework ops it replaces; FE's
``GraphPassUtil`` keeps it through every pass) and ``pass_name`` (the passes that formed it,
same source, metadef ``register/graph_optimizer/graph_fusion/graph_pass_util.cc``).
String-list attributes are written only at ``DUMP_GE_GRAPH=1`` (``AddListAttrProto`` skips them
at 2 and 3), so a run for this reader dumps at level 1. Nodes a UB fusion scope joins before
they are merged carry ``fusion_scope`` (an int; FE's ``SCOPE_ID_ATTR``): nodes of one scope are
read as one fused op. Which dump is read: the highest index, the last graph dumped.

Example
-------
>>> from tvm_ascend.partition.atc_result import read_atc_output
>>> run = read_atc_output("tests/fixtures/atc_recording/matmul_softmax")  # doctest: +SKIP
>>> run.rules["ub_fusion"]["TbeEltwiseFusionPass"]                         # doctest: +SKIP
{'match_times': 1, 'effect_times': 1, 'repository_hit_times': 0}
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AscendError

FUSION_RESULT = "fusion_result.json"
_SECTIONS = ("graph_fusion", "ub_fusion")
_COUNTS = ("match_times", "effect_times", "repository_hit_times")
# ge_onnx_<index>_graph_<graph id>_<stage>.pbtxt (older GE: ge_onnx_<index>_<stage>.pbtxt)
_DUMP_NAME = re.compile(r"^ge_onnx_(\d+)_(?:graph_(\d+)_)?(.+)\.pbtxt$")
# GE node types that are graph plumbing, not ops of the model
_PLUMBING = frozenset({"Data", "RefData", "Const", "Constant", "Variable", "NetOutput",
                       "AippData"})
ORIGINAL_NAMES = "_datadump_original_op_names"
PASS_NAME = "pass_name"
FUSION_SCOPE = "fusion_scope"


@dataclass
class AtcOp:
    """One op of ATC's graph after the build: its GE name and type, the framework (ONNX) ops it
    stands for and the fusion passes that formed it (empty when ATC did not record them)."""

    name: str
    type: str
    original_names: list = field(default_factory=list)
    passes: list = field(default_factory=list)


@dataclass
class AtcRun:
    """What one ATC run wrote: per-pass counts (``rules[section][pass]`` of int counts), the ops
    of its final graph and the files they were read from."""

    rules: dict
    ops: list
    fusion_result_path: str
    graph_path: str
    stage: str = ""

    def op_of(self) -> dict:
        """Original op name -> the AtcOp that holds it."""
        return {name: op for op in self.ops for name in op.original_names}


def read_fusion_result(path) -> dict:
    """Counts of an ATC ``fusion_result.json``: ``{section: {pass: {count: int}}}``, summed over
    its ``session_and_graph_id_*`` entries (a model partitioned into several graphs has one per
    graph). Raises AscendError naming the file and the key at fault."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise AscendError(f"cannot read ATC's fusion result {path}: {err}") from err
    if not isinstance(document, dict):
        raise AscendError(f"{path}: not a JSON object of session_and_graph_id_* entries")
    rules: dict = {section: {} for section in _SECTIONS}
    for graph_key, graph in document.items():
        if not str(graph_key).startswith("session_and_graph_id_") or not isinstance(graph, dict):
            raise AscendError(f"{path}: entry {graph_key!r} is not a session_and_graph_id_* "
                              "object (ATC's layout)")
        for section, passes in graph.items():
            if section not in _SECTIONS or not isinstance(passes, dict):
                raise AscendError(f"{path}: {graph_key}.{section} is not one of "
                                  f"{', '.join(_SECTIONS)}")
            for name, counts in passes.items():
                total = rules[section].setdefault(name, dict.fromkeys(_COUNTS, 0))
                for key in _COUNTS:
                    total[key] += _count(counts, key, f"{path}: {graph_key}.{section}.{name}")
    return {section: passes for section, passes in rules.items() if passes}


def _count(counts, key: str, where: str) -> int:
    if not isinstance(counts, dict):
        raise AscendError(f"{where} is {counts!r}, not an object of counts")
    value = counts.get(key, "0")  # graph_fusion entries have no repository_hit_times
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or isinstance(value, bool):
        raise AscendError(f"{where}.{key} is {value!r}, not a count")
    return number


def read_graph_dump(path) -> list:
    """The ops (AtcOp) of one ``ge_onnx_*.pbtxt`` dump, plumbing (Data, Const, NetOutput) left
    out. Nodes of one UB ``fusion_scope`` are one op. Raises AscendError naming the file."""
    import onnx
    from google.protobuf import text_format

    path = Path(path)
    model = onnx.ModelProto()
    try:
        # GE's onnx proto is a copy of ONNX's under another package: the text is the same
        text_format.Parse(path.read_text(), model, allow_unknown_field=True)
    except (OSError, text_format.ParseError) as err:
        raise AscendError(f"cannot read ATC's graph dump {path}: {err}") from err
    ops, scopes = [], {}
    for node in model.graph.node:
        kind = node.op_type[3:] if node.op_type.startswith("ge:") else node.op_type
        if kind in _PLUMBING or kind == "subgraph":
            continue
        attrs = {a.name: a for a in node.attribute}
        names = _strings(attrs.get(ORIGINAL_NAMES)) or [node.name]
        op = AtcOp(node.name, kind, names, _strings(attrs.get(PASS_NAME)))
        scope = attrs.get(FUSION_SCOPE)
        if scope is not None and scope.i >= 0:
            if scope.i in scopes:  # joined to the scope's first op, as the kernel is one
                first = scopes[scope.i]
                first.name += node.name
                first.type = kind  # a merged UB op takes its last op's type
                first.original_names += [n for n in names if n not in first.original_names]
                first.passes += [p for p in op.passes if p not in first.passes]
                continue
            scopes[scope.i] = op
        ops.append(op)
    return ops


def _strings(attribute) -> list:
    if attribute is None:
        return []
    return [s.decode() if isinstance(s, bytes) else str(s) for s in attribute.strings]


def final_dump(folder) -> tuple:
    """(path, stage) of the last graph ATC dumped under ``folder`` (any depth): the highest
    dump index, which at ``DUMP_GRAPH_LEVEL=3`` is the graph after the build. Raises AscendError
    listing what the folder holds when there is none."""
    folder = Path(folder)
    found = []
    for path in folder.rglob("ge_onnx_*.pbtxt"):
        match = _DUMP_NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), str(path), match.group(3)))
    if not found:
        held = sorted(p.name for p in folder.rglob("*") if p.is_file())[:10]
        raise AscendError(f"no ATC graph dump (ge_onnx_*.pbtxt) under {folder}; it holds "
                          f"{held or 'nothing'} (ATC dumps with DUMP_GE_GRAPH=1, "
                          "DUMP_GRAPH_FORMAT containing onnx)")
    _, path, stage = max(found)
    return path, stage


def read_atc_output(folder) -> AtcRun:
    """The AtcRun of a folder ATC ran in: its ``fusion_result.json`` (at the top, or under
    ``FE/<pid>/`` as ``ASCEND_WORK_PATH`` places it) and its last ``ge_onnx_*.pbtxt`` dump."""
    folder = Path(folder)
    results = [folder / FUSION_RESULT] if (folder / FUSION_RESULT).is_file() else \
        sorted(folder.glob(f"FE/*/{FUSION_RESULT}"))
    if not results:
        raise AscendError(f"no {FUSION_RESULT} in {folder} (ATC writes it with "
                          "--export_compile_stat=1 into the folder it runs in)")
    graph, stage = final_dump(folder)
    return AtcRun(read_fusion_result(results[0]), read_graph_dump(graph), str(results[0]),
                  graph, stage)


__all__ = ["AtcOp", "AtcRun", "FUSION_RESULT", "final_dump", "read_atc_output",
           "read_fusion_result", "read_graph_dump"]
