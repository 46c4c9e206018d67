"""Reductions the kernels do not take as they are, rewritten as work they do.

``reductions_to_rows``: reductions over several axes, as rows the row-reduce kernel runs.
The row-reduce template reduces the last axis and the axis-reduce template adjacent axes
before it; a Sum/Mean/Max/Min over several axes that include the last (``ReduceSum`` over
``[2, 3]`` of NCHW that is not a global mean, ``ReduceMax`` over ``[1, 2, 3]``) or over axes
that are not adjacent (``[1, 3]``) had no kernel and ran on the host. ``reductions_to_rows``
rewrites them:

* reduced axes that end the shape: ``reshape`` to ``(kept..., prod(reduced))`` (a view, no
  copy), reduce the last axis, ``reshape`` to the result's shape;
* reduced axes that are not adjacent: ``permute_dims`` moving them last (one copy, which the
  planner may fuse into the reduction), then as above.

Adjacent axes before the last (the axis-reduce kernel's case) and single-axis reductions are
left alone. Every rewrite, applied or not, is a ``ReductionAxesToRows`` record in the report's
``prepare_rewrites``, with the reason.

``window_sums_to_slices``: a window average along one axis, as shifted slices added up.
ONNX's LRN imports as ``x / (bias + alpha * avg_pool3d(x^2))^beta`` where the 3-D pool has a
``[size, 1, 1]`` window over the channels (an axis added in front of them): no pooling kernel
takes a window along the channel axis, so that pool ran on the host, cutting the LRN in two.
``window_sums_to_slices`` rewrites such a pool (stride 1, no dilation, padding counted in the
average, floor mode) as

    padded = concat(zeros, x, zeros along the window axis)
    out = (padded[0:n] + padded[1:n+1] + ... + padded[size-1:n+size-1]) * (1 / size)

which is data movement and elementwise work that the NPU runs and the planner fuses. A pool
that is not of that kind is left alone; one of that kind that cannot be rewritten (dynamic
extents, a dtype the vector unit does not take) stays on the host with the reason in the
report's ``prepare_rewrites`` (rewrite ``WindowSumAsSlices``).

Example
-------
>>> mod = window_sums_to_slices(reductions_to_rows(mod))         # doctest: +SKIP
>>> prepare_rewrites(mod)[0]["rewrite"]                          # doctest: +SKIP
'ReductionAxesToRows'
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import mutator

from .relax_rewrite import CallRewrite, call_name, run_rewrite, static_dims

REDUCTION_AXES_TO_ROWS = "ReductionAxesToRows"
_OPS = {"relax.sum": relax.op.sum, "relax.mean": relax.op.mean, "relax.max": relax.op.max,
        "relax.min": relax.op.min}
_ROW_DTYPES = ("float16", "float32")


def _reduced_axes(call, rank: int) -> list[int]:
    axes = call.attrs.axis
    if axes is None:
        return list(range(rank))
    return sorted({int(a) % rank for a in axes})


def _plan(axes: list[int], rank: int) -> str | None:
    """'reshape', 'permute' or None (another kernel takes it, or nothing to do)."""
    if len(axes) < 2:
        return None  # one axis: the row or the axis-reduce kernel already takes it
    adjacent = axes == list(range(axes[0], axes[-1] + 1))
    if adjacent and axes[-1] == rank - 1:
        return "reshape"
    if adjacent:
        return None  # adjacent axes before the last: the axis-reduce kernel
    return "permute"


@mutator
class _ReductionRowsRewriter(CallRewrite):
    REWRITE = REDUCTION_AXES_TO_ROWS
    STEM = "reduce_rows"

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = call_name(call)
        if name not in _OPS:
            return call
        ty = call.args[0].ty
        dims = static_dims(ty)
        rank = ty.ndim if isinstance(ty, relax.TensorType) else -1
        if rank < 1:
            return call
        axes = _reduced_axes(call, rank)
        how = _plan(axes, rank)
        if how is None:
            return call
        op = name.split(".")[-1]
        if dims is None:
            self.note(False, f"{op} over axes {axes} of a tensor with dynamic extents: the "
                              "reshape to rows needs static shapes; it runs on the host")
            return call
        if str(ty.dtype) not in _ROW_DTYPES:
            self.note(False, f"{op} over axes {axes} in {ty.dtype}: the row-reduce kernel "
                              "takes float16/float32; it runs on the host")
            return call
        source = call.args[0]
        kept = [a for a in range(rank) if a not in axes]
        if how == "permute":
            source = self._emit(relax.op.permute_dims(source, kept + axes))
        row = 1
        for a in axes:
            row *= dims[a]
        rows = self._emit(relax.op.reshape(source, [dims[a] for a in kept] + [row]))
        keepdims = bool(call.attrs.keepdims)
        reduced = self._emit(_OPS[name](rows, axis=[-1], keepdims=False))
        out_shape = [1 if a in axes else dims[a] for a in range(rank)] if keepdims else \
            [dims[a] for a in kept]
        self.note(True, f"{op} over axes {axes}: "
                         + ("a transpose moves them last, then " if how == "permute" else "")
                         + f"rows of {row} reduced on the last axis (row-reduce kernel)")
        return relax.op.reshape(reduced, out_shape)


def reductions_to_rows(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite Sum/Mean/Max/Min over several trailing or non-adjacent axes into a last-axis
    reduction over rows (see the module docstring); other reductions are left as they are.

    Example
    -------
    >>> mod = reductions_to_rows(mod)                            # doctest: +SKIP
    """
    return run_rewrite(mod, _ReductionRowsRewriter)


WINDOW_SUM_AS_SLICES = "WindowSumAsSlices"
_VECTOR_DTYPES = ("float16", "float32")
_MAX_WINDOW = 16  # one Add per window element: wider windows would make long add chains


def _window_axis(attrs) -> tuple[int, int, int, int] | None:
    """(axis of the window in NCDHW, size, padding before, padding after) of a pool3d that is
    a 1-D window average of the rewritable kind, else None."""
    if str(attrs.layout) != "NCDHW" or str(attrs.out_layout) != "NCDHW" or attrs.ceil_mode:
        return None
    size = [int(v) for v in attrs.pool_size]
    if [int(v) for v in attrs.strides] != [1, 1, 1] or \
            [int(v) for v in attrs.dilation] != [1, 1, 1]:
        return None
    pad = [int(v) for v in attrs.padding]
    wide = [k for k in range(3) if size[k] != 1 or pad[k] or pad[k + 3]]
    if len(wide) != 1:
        return None
    k = wide[0]
    if (pad[k] or pad[k + 3]) and not attrs.count_include_pad:
        return None  # the average would divide by the in-bounds count instead
    return 2 + k, size[k], pad[k], pad[k + 3]


@mutator
class _WindowSumRewriter(CallRewrite):
    REWRITE = WINDOW_SUM_AS_SLICES
    STEM = "window"

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call_name(call) != "relax.nn.avg_pool3d":
            return call
        window = _window_axis(call.attrs)
        if window is None:
            return call
        axis, size, before, after = window
        ty = call.args[0].ty
        dims = static_dims(ty)
        if dims is None:
            self.note(False, "a window average over a tensor with dynamic extents stays on "
                              "the host (the slices need static shapes)")
            return call
        if str(ty.dtype) not in _VECTOR_DTYPES or size > _MAX_WINDOW:
            why = (f"in {ty.dtype}: the vector unit takes float16/float32"
                   if size <= _MAX_WINDOW else f"a window of {size} (> {_MAX_WINDOW}) would be "
                   f"{size} adds")
            self.note(False, f"window average along axis {axis} {why}; it stays on the host")
            return call
        source = call.args[0]
        if before or after:
            # zero padding as a Concat with constant zeros: Concat is data movement the NPU
            # runs (a Pad op is not claimed)
            parts = [source]
            for where, width in ((0, before), (1, after)):
                if width:
                    shape = list(dims)
                    shape[axis] = width
                    zeros = relax.const(np.zeros(shape, str(ty.dtype)), str(ty.dtype))
                    parts.insert(0 if where == 0 else len(parts), zeros)
            source = self._emit(relax.op.concat(parts, axis=axis))
        extent = dims[axis] + before + after - size + 1
        total = None
        for shift in range(size):
            part = self._emit(relax.op.strided_slice(source, [axis], [shift], [shift + extent]))
            total = part if total is None else self._emit(relax.op.add(total, part))
        self.note(True, f"window average of {size} along axis {axis} (padding {before}, "
                         f"{after}) as {size} shifted slices added up: data movement and "
                         "elementwise kernels instead of a host pool")
        return relax.op.multiply(total, relax.const(1.0 / size, str(ty.dtype)))


def window_sums_to_slices(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite 1-D window averages (LRN's channel window) of ``main`` as shifted slices added
    up; see the module docstring.

    Example
    -------
    >>> mod = window_sums_to_slices(mod)                         # doctest: +SKIP
    """
    return run_rewrite(mod, _WindowSumRewriter)
