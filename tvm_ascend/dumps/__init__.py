"""Numbered dumps of each stage (``DUMP_GRAPH=1`` / ``--dump_graph``), written atomically.

    000_imported.py      Relax module as imported from ONNX
    010_partitioned.py   after grouping: NPU groups as Codegen functions
    020_scheduled.py     every NPU group's scheduled TIR
    fusion_report.json   the report; fusion_report.txt the same as a table
    fusion_result.json   ATC's per-rule match_times / effect_times, for ATC users' scripts
    fusion_plan.json     the groups as an editable plan (CompileConfig.fusion_plan_file)
    kernels/<name>.cpp   every AscendC kernel, standalone
    graphs/              graphs before and after fusion: JSON, DOT (SVG with Graphviz), and
                         graph_after.onnx with FusionGroup nodes (see dumps/graphs.py)

A dump is for reading, never a reason for a build to fail: a writer that raises (a folder that
is read-only or a regular file, a full disk, a report a writer cannot draw) logs a warning
naming the file it could not write, and the build goes on (``write_or_warn``).
"""
from __future__ import annotations

import json
import logging
import os
import tempfile

from .. import ir_attrs
from ..kernel_record import record_of
from ..partition.fusion_result import write_fusion_result
from ..partition.plan_file import export_plan
from ..partition.report import report_table, write_json_atomic
from .graphs import write_graph_dumps

logger = logging.getLogger("tvm_ascend.dumps")


def write_or_warn(path: str, write) -> bool:
    """Run ``write()``, which writes ``path``; on any error log a warning naming ``path`` and
    return False (the build goes on without that file), else return True.

    Example
    -------
    >>> write_or_warn("dump/fusion_plan.json", lambda: export_plan(report, "dump/fusion_plan.json"))  # doctest: +SKIP
    True
    """
    try:
        write()
    except Exception as err:  # noqa: BLE001 - any writer failure: a warning, never a failed build
        logger.warning("could not write %s (%s: %s); the build goes on without it", path,
                       type(err).__name__, err)
        return False
    return True


def _write_text(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a dump is for everyone who builds
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _script(mod) -> str:
    """Module text; Codegen functions print without their PrimFunc attribute (shown in 020)."""
    stripped = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if func.attrs and ir_attrs.PRIM_FUNC in func.attrs:
            stripped[gv] = func.without_attr(ir_attrs.PRIM_FUNC)
    return stripped.script(show_meta=False)


def _scheduled_text(mod) -> str:
    parts = []
    for gv, func in mod.functions.items():
        if func.attrs and ir_attrs.PRIM_FUNC in func.attrs:
            tiling = record_of(func).tiling if ir_attrs.KERNEL in func.attrs else None
            tiling = json.dumps(tiling, sort_keys=True) if tiling is not None else ""
            parts.append(f"# {gv.name_hint}\n# tiling {tiling}\n"
                         + func.attrs[ir_attrs.PRIM_FUNC].script())
    return "\n\n".join(parts)


class Dumper:
    """Writes the dumps of one build when ``enabled``; does nothing otherwise. A file it
    cannot write is a warning (``write_or_warn``); ``failed`` lists the paths."""

    def __init__(self, enabled: bool, folder: str):
        self.enabled, self.folder = enabled, folder
        self.failed: list[str] = []
        self._folder_made = False

    def _write(self, name: str, write) -> None:
        """``write(path)`` for ``<folder>/<name>``, a warning if it raises."""
        if not self._folder_made:  # a folder that cannot be made: one warning, not one a file
            if not write_or_warn(self.folder, lambda: os.makedirs(self.folder, exist_ok=True)):
                self.enabled = False
                self.failed.append(self.folder)
                return
            self._folder_made = True
        path = os.path.join(self.folder, name)
        if not write_or_warn(path, lambda: write(path)):
            self.failed.append(path)

    def module(self, name: str, mod) -> None:
        if self.enabled:
            self._write(name, lambda path: _write_text(path, _script(mod)))

    def scheduled(self, mod) -> None:
        if self.enabled:
            self._write("020_scheduled.py", lambda path: _write_text(path, _scheduled_text(mod)))

    def report(self, report: dict) -> None:
        if not self.enabled:
            return
        self._write("fusion_report.json", lambda path: write_json_atomic(path, report))
        self._write("fusion_report.txt", lambda path: _write_text(path, report_table(report)))
        self._write("fusion_result.json", lambda path: write_fusion_result(report, path))
        self._write("fusion_plan.json", lambda path: export_plan(report, path))

    def kernels(self, sources: dict) -> None:
        if self.enabled:
            for symbol, text in sources.items():
                self._write(os.path.join("kernels", f"{symbol}.cpp"),
                            lambda path, text=text: _write_text(path, text))

    def graphs(self, model, report: dict) -> None:
        """Graph dumps before/after fusion into ``<folder>/graphs`` (``model``: the ONNX
        ModelProto compiled, or None for a Relax module)."""
        if self.enabled:
            self._write("graphs", lambda path: write_graph_dumps(model, report, path,
                                                                 self._write_graph_file))

    def _write_graph_file(self, path: str, write) -> None:
        if not write_or_warn(path, write):
            self.failed.append(path)
