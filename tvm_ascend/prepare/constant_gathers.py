"""A Gather whose indices are a constant ``0, 1, ..., n - 1`` over its whole axis is a Reshape
(and so is a GatherND whose constant index tuples enumerate its leading axes in order).

LLaMA's TorchScript export builds the padding mask by gathering the flattened attention mask
(shape ``[B * S, 1]``) with indices ``b * S + s`` laid out as ``[B, 1, 1, S]``: FoldConstant
makes those indices a constant, and the gather reads every row once, in order. As a gather of
a bool tensor it ran on the host; as a reshape it is a view (free on the host, free inside a
kernel on the NPU). A gather along axis ``a`` of ``x`` with such indices ``I`` has the shape
``x.shape[:a] + I.shape + x.shape[a + 1:]`` and the elements of ``x`` in their order, which is
exactly ``reshape(x, that shape)``. The dynamo export spells the same gather as a GatherND with
index tuples ``(b, s)``.

Each gather with constant indices leaves a record (``ConstantGatherAsReshape``) in the fusion
report's ``prepare_rewrites``: rewritten, or why not.

Example
-------
>>> mod = constant_gathers_as_reshapes(mod)                     # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import mutator

from .relax_rewrite import CallRewrite, bindings, call_name, const_value, run_rewrite, static_dims

CONSTANT_GATHER_AS_RESHAPE = "ConstantGatherAsReshape"


@mutator
class _ConstantGatherRewriter(CallRewrite):
    """``take(x, arange(n).reshape(S), axis=a)`` (n = x.shape[a]) -> ``reshape(x, ...)``."""

    REWRITE = CONSTANT_GATHER_AS_RESHAPE
    STEM = "gather_view"

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call_name(call) == "relax.gather_nd" and isinstance(call.args[1], Constant):
            return self._gather_nd(call)
        if call_name(call) != "relax.take" or not isinstance(call.args[1], Constant):
            return call
        dims, out = static_dims(call.args[0].ty), static_dims(call.ty)
        if dims is None or out is None:
            self.note(False, "Gather with constant indices of a tensor with a dynamic shape: "
                             "kept as a gather")
            return call
        axis = int(call.attrs.axis) if call.attrs.axis is not None else None
        indices = const_value(call.args[1], {}).reshape(-1)
        if axis is None or not _whole_axis_in_order(indices, dims[axis % len(dims)]):
            return call  # a real gather (an embedding table, a reordering): nothing to note
        self.note(True, f"Gather along axis {axis % len(dims)} of {tuple(dims)} with constant "
                        f"indices 0..{dims[axis % len(dims)] - 1} in order reads every row once: "
                        f"a reshape to {tuple(out)} (a view, no copy)")
        return relax.op.reshape(call.args[0], out)

    def _gather_nd(self, call):
        """GatherND (batch_dims 0) whose index tuples enumerate the leading ``k`` axes of
        ``x`` in row-major order (dynamo's spelling of the same padding-mask gather)."""
        dims, out = static_dims(call.args[0].ty), static_dims(call.ty)
        indices = const_value(call.args[1], {})
        if dims is None or out is None or int(call.attrs.batch_dims) != 0 \
                or indices.ndim < 1 or not 0 < indices.shape[-1] <= len(dims):
            return call
        k = indices.shape[-1]
        lead = dims[:k]
        tuples = np.where(indices < 0, indices + np.asarray(lead), indices).reshape(-1, k)
        every = np.stack(np.unravel_index(np.arange(int(np.prod(lead))), lead), axis=-1)
        if tuples.shape != every.shape or not np.array_equal(tuples, every):
            return call
        self.note(True, f"GatherND of {tuple(dims)} whose constant index tuples enumerate its "
                        f"first {k} axes in order reads every element once: a reshape to "
                        f"{tuple(out)} (a view, no copy)")
        return relax.op.reshape(call.args[0], out)


def _whole_axis_in_order(indices: np.ndarray, extent: int) -> bool:
    """Whether ``indices`` are ``0, 1, ..., extent - 1`` (negative ones counted from the end)."""
    if indices.size != extent or not np.issubdtype(indices.dtype, np.integer):
        return False
    return bool(np.array_equal(np.where(indices < 0, indices + extent, indices),
                               np.arange(extent)))


def constant_gathers_as_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every Gather of ``main`` whose constant indices read its whole axis in order
    replaced by a Reshape (a view), with a record per such gather."""
    if not any(call_name(b.value) in ("relax.take", "relax.gather_nd")
               for b in bindings(mod["main"])):
        return mod
    return run_rewrite(mod, _ConstantGatherRewriter)


__all__ = ["CONSTANT_GATHER_AS_RESHAPE", "constant_gathers_as_reshapes"]
