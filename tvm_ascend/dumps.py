"""Numbered dumps of each stage (``DUMP_GRAPH=1`` / ``--dump_graph``), written atomically.

    000_imported.py      Relax module as imported from ONNX
    010_partitioned.py   after grouping: NPU groups as Codegen functions
    020_scheduled.py     every NPU group's scheduled TIR
    fusion_report.json   the report; fusion_report.txt the same as a table
    fusion_result.json   ATC's per-rule match_times / effect_times, for ATC users' scripts
    fusion_plan.json     the groups as an editable plan (CompileConfig.fusion_plan_file)
    kernels/<name>.cpp   every AscendC kernel, standalone
    graphs/              graphs before and after fusion: JSON, DOT (SVG with Graphviz), and
                         graph_after.onnx with FusionGroup nodes (see graph_dumps.py)
"""
from __future__ import annotations

import os
import tempfile

from . import ir_attrs
from .graph_dumps import write_graph_dumps
from .partition.fusion_result import write_fusion_result
from .partition.plan_file import export_plan
from .partition.report import report_table, write_json_atomic


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


class Dumper:
    """Writes the dumps of one build when ``enabled``; does nothing otherwise."""

    def __init__(self, enabled: bool, folder: str):
        self.enabled, self.folder = enabled, folder

    def module(self, name: str, mod) -> None:
        if self.enabled:
            _write_text(os.path.join(self.folder, name), _script(mod))

    def scheduled(self, mod) -> None:
        if not self.enabled:
            return
        parts = []
        for gv, func in mod.functions.items():
            if func.attrs and ir_attrs.PRIM_FUNC in func.attrs:
                tiling = func.attrs.get(ir_attrs.TILING, "")
                parts.append(f"# {gv.name_hint}\n# tiling {tiling}\n"
                             + func.attrs[ir_attrs.PRIM_FUNC].script())
        _write_text(os.path.join(self.folder, "020_scheduled.py"), "\n\n".join(parts))

    def report(self, report: dict) -> None:
        if self.enabled:
            write_json_atomic(os.path.join(self.folder, "fusion_report.json"), report)
            _write_text(os.path.join(self.folder, "fusion_report.txt"), report_table(report))
            write_fusion_result(report, os.path.join(self.folder, "fusion_result.json"))
            export_plan(report, os.path.join(self.folder, "fusion_plan.json"))

    def kernels(self, sources: dict) -> None:
        if self.enabled:
            for symbol, text in sources.items():
                _write_text(os.path.join(self.folder, "kernels", f"{symbol}.cpp"), text)

    def graphs(self, model, report: dict) -> None:
        """Graph dumps before/after fusion into ``<folder>/graphs`` (``model``: the ONNX
        ModelProto compiled, or None for a Relax module)."""
        if self.enabled:
            write_graph_dumps(model, report, os.path.join(self.folder, "graphs"))
