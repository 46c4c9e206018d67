"""The kernel record: one kernel's decisions, carried down the flow as one IR attribute.

The partitioner writes what it decided (the template, the knobs its estimate chose and the
group's provenance), the schedule stage completes the record once with the tiling it applied,
and ``codegen/ext_codegen.py`` reads it once. It stands on the ground, below every stage that
writes or reads it, so it holds JSON values only: the knobs and the tiling as their JSON
objects. The template classes that decode them (``schedules``) stand above it.

Example
-------
>>> record = KernelRecord("elementwise", None, None, {"name": "fused_relu"})
>>> KernelRecord.from_json(record.to_json()) == record
True
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from . import ir_attrs
from .errors import CodegenError


@dataclass(frozen=True)
class KernelRecord:
    """A kernel's template, knobs (None: the template's defaults), tiling (None until the
    schedule stage applied it) and group provenance (``KernelGroup.to_json``)."""

    template: str
    knobs: dict | None
    tiling: dict | None
    group: dict

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "KernelRecord":
        values = json.loads(text)
        names = {f.name for f in dataclasses.fields(KernelRecord)}
        if not isinstance(values, dict) or set(values) != names:
            got = sorted(values) if isinstance(values, dict) else type(values).__name__
            raise CodegenError(f"a kernel record holds {sorted(names)}, not {got}")
        return KernelRecord(**values)

    def with_tiling(self, tiling: dict) -> "KernelRecord":
        """This record completed by the schedule stage with the tiling it applied."""
        return dataclasses.replace(self, tiling=tiling)


def record_of(func) -> KernelRecord:
    """The kernel record on a ``Codegen="ascend"`` function (``ir_attrs.KERNEL``)."""
    attrs = func.attrs
    if not attrs or ir_attrs.KERNEL not in attrs:
        symbol = attrs.get("global_symbol", "?") if attrs else "?"
        raise CodegenError(f"codegen function {symbol} carries no kernel record "
                           f"({ir_attrs.KERNEL}); the partitioner writes one on every NPU group")
    return KernelRecord.from_json(str(attrs[ir_attrs.KERNEL]))


# The function a library exports beside each kernel tiled at run time, ``<symbol>__tiling(d0,
# ...)``: printed by codegen/tiling_func.py, called by runtime/module.py's ``kernel_tiling``;
# the name is their contract, so it stands on the ground both read.
TILING_SUFFIX = "__tiling"

__all__ = ["KernelRecord", "TILING_SUFFIX", "record_of"]
