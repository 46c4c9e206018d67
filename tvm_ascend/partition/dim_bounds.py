"""The ranges of symbolic dimensions, put on each group's PrimFunc for the templates.

The frontend records the ranges given with ``--input_shape "x:2,1~64"`` on ``main``
(``ir_attrs.DIM_RANGES``); a template plans a kernel over symbolic shapes from its PrimFunc
alone, so every PrimFunc whose parameters hold a symbolic dimension carries the ranges of the
dimensions it uses (``ir_attrs.DIM_BOUNDS``). TVM's FuseTIR does not keep attributes, so the
merges copy them onto the PrimFuncs they make (``carry_bounds``).

Example
-------
>>> lowered = with_dim_bounds(lowered, main_ranges(mod))          # doctest: +SKIP
"""
from __future__ import annotations

import json

import tvm
from tvm import relax, tirx
from tvm.sym.analyzer import Analyzer

from .. import ir_attrs


def main_ranges(mod: tvm.IRModule) -> dict:
    """{dimension name: [lo, hi]} that the frontend recorded on ``main`` (none: {})."""
    attrs = mod["main"].attrs
    if not attrs or ir_attrs.DIM_RANGES not in attrs:
        return {}
    return json.loads(str(attrs[ir_attrs.DIM_RANGES]))


def _symbols(prim: tirx.PrimFunc) -> list[str]:
    names = []
    for param in prim.params:
        for dim in getattr(param, "shape", ()):
            if isinstance(dim, tirx.Var) and str(dim.name) not in names:
                names.append(str(dim.name))
    return names


def bounded(prim: tirx.PrimFunc, ranges: dict) -> tirx.PrimFunc:
    """``prim`` with the ranges of the symbolic dimensions its parameters hold (those the
    ranges name; a dimension without one is left for the template to refuse, naming it)."""
    used = {name: ranges[name] for name in _symbols(prim) if name in ranges}
    if not used:
        return prim
    return prim.with_attr(ir_attrs.DIM_BOUNDS, json.dumps(used, sort_keys=True))


def with_dim_bounds(mod: tvm.IRModule, ranges: dict) -> tvm.IRModule:
    """``mod`` with every PrimFunc over symbolic dimensions ``bounded``."""
    if not ranges:
        return mod
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc):
            mod[gv] = bounded(func, ranges)
    return mod


def prim_ranges(prim) -> dict:
    """{dimension name: [lo, hi]} a group's PrimFunc carries (``bounded``; none: {})."""
    if prim is None or not prim.attrs or ir_attrs.DIM_BOUNDS not in prim.attrs:
        return {}
    return json.loads(str(prim.attrs[ir_attrs.DIM_BOUNDS]))


def carry_bounds(prim: tirx.PrimFunc, *sources) -> tirx.PrimFunc:
    """``prim`` (made by FuseTIR from ``sources``) with the ranges the sources carried."""
    ranges: dict = {}
    for source in sources:
        if source is not None and source.attrs and ir_attrs.DIM_BOUNDS in source.attrs:
            ranges.update(json.loads(str(source.attrs[ir_attrs.DIM_BOUNDS])))
    return bounded(prim, ranges) if ranges else prim


_UNBOUNDED = 1 << 62  # const_int_bound's "no bound" (its kPosInf is 2^63 - 1)


def range_analyzer(types, ranges: dict) -> Analyzer:
    """An Analyzer that knows the range of every symbolic dimension in ``types`` (Relax
    tensor types) that ``ranges`` ({name: [lo, hi]}) names, bound to the Vars they hold."""
    analyzer = Analyzer()
    seen = set()
    for ty in types:
        for dim in getattr(getattr(ty, "shape", None), "values", None) or ():
            if isinstance(dim, tirx.IntImm):
                continue
            for var in tirx.analysis.undefined_vars(dim):
                name = str(var.name)
                if name in ranges and name not in seen:
                    low, high = ranges[name]
                    analyzer.bind(var, tvm.ir.Range(int(low), int(high) + 1))
                    seen.add(name)
    return analyzer


def bound_bytes(ty, analyzer: Analyzer | None = None) -> int:
    """Bytes of a tensor of Relax type ``ty``; a symbolic dimension (or an expression of
    several) counts at the largest value the ranges ``analyzer`` knows allow, for which the
    buffers are sized; one without a range, or no tensor type, is 0 (unknown)."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return 0
    try:
        size = tvm.runtime.DataType(str(ty.dtype)).bits // 8
        for dim in ty.shape.values:
            if isinstance(dim, tirx.IntImm) or analyzer is None:
                size *= int(dim)
                continue
            high = analyzer.const_int_bound(dim).max_value
            if high >= _UNBOUNDED:
                return 0
            size *= int(high)
    except (TypeError, AttributeError):
        return 0
    return size
