"""Symbolic dimensions of a group's PrimFunc: their ranges, where a launcher reads them, and
the static function at one value of them.

A group whose shapes hold a symbolic dimension (``--input_shape "x:2,1~64,8"``) is planned
once for the whole range and its kernel is told the actual sizes at run time: the template
analyses the function specialised at the range's upper bound (UB tiles sized for it) and
checks that the kernel it prints would be the same at the lower bound (no extent of the
printed program depends on the dimension except those in the tiling struct); the host
launcher reads each dimension off an argument's shape and a host tiling function fills the
tiling struct from it (``codegen/tiling_func.py``, as AscendC's TilingFunc).

The ranges come from the PrimFunc's ``DIM_BOUNDS_ATTR`` (the partitioner copies main's
``ascend.dim_ranges`` there); a symbolic dimension without one cannot be planned, and a
shape entry that is an expression of a dimension (``s * 2``) is not supported yet: both are
``TilingError`` naming the dimension, so the group stays on the host with that reason.

Example
-------
>>> dims = symbolic_dims(prim_func)                         # doctest: +SKIP
>>> [(d.name, d.low, d.high, d.param, d.axis) for d in dims]  # doctest: +SKIP
[('s', 1, 64, 0, 1)]
>>> at_bound = specialize(prim_func, {"s": 64})             # doctest: +SKIP
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from tvm import tirx

from tvm_ascend.decision import DIM_BOUNDS_ATTR
from tvm_ascend.errors import TilingError


@dataclass(frozen=True)
class SymbolicDim:
    """One symbolic dimension: its name, range ``[low, high]``, and the kernel parameter
    ``param`` (index in the PrimFunc's parameters) whose axis ``axis`` it is, which the host
    launcher reads the actual size from."""

    name: str
    low: int
    high: int
    param: int
    axis: int


@dataclass(frozen=True)
class ShapeSpec:
    """The kernel parameters' shapes, each entry an int or a symbolic dimension's name, and
    the symbolic dimensions they hold (empty for a static kernel)."""

    dims: tuple[SymbolicDim, ...] = ()
    shapes: tuple[tuple[str, ...], ...] = ()  # per parameter, entries as text: "2", "s"

    @property
    def symbolic(self) -> bool:
        return bool(self.dims)

    def values(self, **sizes) -> dict:
        """{name: size} for every dimension, checked against its range."""
        out = {}
        for dim in self.dims:
            size = sizes[dim.name]
            if not dim.low <= size <= dim.high:
                raise TilingError(f"dimension {dim.name} = {size} is outside its range "
                                  f"{dim.low}~{dim.high}")
            out[dim.name] = int(size)
        return out

    def numel(self, param: int, values: dict) -> int:
        """Elements of parameter ``param`` at the dimensions' ``values``."""
        size = 1
        for entry in self.shapes[param]:
            size *= values[entry] if entry in values else int(entry)
        return size

    def samples(self) -> list[dict]:
        """The values the partitioner estimates a symbolic kernel at: every dimension at its
        lower end, its midpoint, its upper end."""
        points = []
        for pick in (lambda d: d.low, lambda d: (d.low + d.high) // 2, lambda d: d.high):
            point = {d.name: pick(d) for d in self.dims}
            if point not in points:
                points.append(point)
        return points

    def high(self) -> dict:
        return {d.name: d.high for d in self.dims}

    def low(self) -> dict:
        return {d.name: d.low for d in self.dims}


def checked_sizes(spec: ShapeSpec) -> tuple[list[int], list[int]]:
    """(every size a template analyses a kernel over one symbolic dimension at, those it
    compares with the upper bound's): the range's ends, midpoint and quarter points, and 2
    (the smallest size whose index maps tell rows from a broadcast)."""
    low, high = spec.dims[0].low, spec.dims[0].high
    between = {low + (high - low) * q // 4 for q in (1, 2, 3)}
    compared = sorted(({max(2, low), high} | between) & set(range(2, high + 1)))
    return sorted({p[spec.dims[0].name] for p in spec.samples()} | set(compared)), compared


def dim_bounds(func: tirx.PrimFunc) -> dict:
    """{name: (low, high)} of the ranges the PrimFunc's ``DIM_BOUNDS_ATTR`` records."""
    attrs = func.attrs
    if not attrs or DIM_BOUNDS_ATTR not in attrs:
        return {}
    ranges = json.loads(str(attrs[DIM_BOUNDS_ATTR]))
    return {str(k): (int(v[0]), int(v[1])) for k, v in ranges.items()}


def shape_spec(func: tirx.PrimFunc) -> ShapeSpec:
    """The ``ShapeSpec`` of ``func``'s parameters (``TilingError`` for a dimension without a
    range or a shape entry that is an expression of one)."""
    bounds = dim_bounds(func)
    dims: dict = {}
    shapes = []
    for index, param in enumerate(func.params):
        entries = []
        for axis, dim in enumerate(param.shape):
            if isinstance(dim, tirx.IntImm):
                entries.append(str(int(dim)))
                continue
            if not isinstance(dim, tirx.Var):
                raise TilingError(f"parameter {param.name} has the shape entry {dim} (axis "
                                  f"{axis}), an expression of symbolic dimensions; run-time "
                                  "tiling takes whole dimensions only")
            name = str(dim.name)
            if name not in bounds:
                raise TilingError(f"symbolic dimension {name} (parameter {param.name}, axis "
                                  f"{axis}) has no range; give one with --input_shape "
                                  f"\"...:lo~hi\" so its kernel can be planned")
            low, high = bounds[name]
            dims.setdefault(name, SymbolicDim(name, low, high, index, axis))
            entries.append(name)
        shapes.append(tuple(entries))
    return ShapeSpec(tuple(dims.values()), tuple(shapes))


def specialize(func: tirx.PrimFunc, values: dict) -> tirx.PrimFunc:
    """``func`` with every symbolic dimension replaced by its size in ``values`` (the
    parameter that holds each one is given a static buffer of the same name)."""
    spec = shape_spec(func)
    mapping = {}
    for dim in spec.dims:
        param = func.params[dim.param]
        if param in mapping:
            continue
        shape = [tirx.IntImm(str(d.ty.dtype) if hasattr(d, "ty") else "int64",
                             values[str(d.name)] if isinstance(d, tirx.Var) else int(d))
                 for d in param.shape]
        mapping[param] = tirx.decl_buffer(shape, str(param.dtype), param.name)
    return func.specialize(mapping) if mapping else func


__all__ = ["SymbolicDim", "ShapeSpec", "checked_sizes", "dim_bounds", "shape_spec",
           "specialize"]
