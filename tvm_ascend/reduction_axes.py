"""Reductions over several axes, rewritten as rows the row-reduce kernel runs.

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

Example
-------
>>> mod = reductions_to_rows(mod)                                # doctest: +SKIP
>>> prepare_rewrites(mod)[0]["rewrite"]                          # doctest: +SKIP
'ReductionAxesToRows'
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_rewrite import RecordedRewrite, call_name, static_dims

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
class _ReductionRowsRewriter(PyExprMutator, RecordedRewrite):
    REWRITE = REDUCTION_AXES_TO_ROWS

    def __init__(self, mod, func):
        super().__init__(mod)
        self._setup(func, "reduce_rows")

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        super().visit_var_binding_(binding)

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
    rewriter = _ReductionRowsRewriter(mod, mod["main"])
    return rewriter.finish(mod, rewriter.visit_expr(mod["main"]))
