"""A Concat of negated pieces as a Concat times a constant sign: rotate_half without a kernel.

LLaMA's rotary embedding is ``x * cos + rotate_half(x) * sin`` with
``rotate_half(x) = concat(-x2, x1)`` (x1, x2 the halves of the last axis). The data-movement
template copies slices into a Concat but computes nothing before it, so ``-x2`` was a kernel
of its own that wrote its half to GM for the Concat kernel to read back (two kernels per
rotary, four per layer). Negation is a multiplication by -1, exact in floating point, so::

    concat([negative(a), b], axis)  ->  multiply(concat([a, b], axis), sign)

with ``sign`` a constant of -1 over the negated pieces and +1 elsewhere along ``axis`` (1 on
every other axis). The Concat then reads slices only, and the multiply is an elementwise op
that fuses with ``* sin`` and ``+ x * cos`` after it: one kernel per rotary.

Each rewrite leaves a record (``NegatedConcatAsSign``) in the fusion report's
``prepare_rewrites``.

Example
-------
>>> mod = negated_concats_as_signs(mod)                          # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import mutator

from .relax_rewrite import CallRewrite, bindings, call_name, run_rewrite, static_dims

NEGATED_CONCAT_AS_SIGN = "NegatedConcatAsSign"


@mutator
class _NegatedConcatRewriter(CallRewrite):
    """``concat([.., negative(a), ..])`` -> ``concat([.., a, ..]) * sign``."""

    REWRITE = NEGATED_CONCAT_AS_SIGN
    STEM = "signed_concat"

    def __init__(self, mod, func):
        super().__init__(mod, func)
        self.values = {b.var: b.value for b in bindings(func)}

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call_name(call) != "relax.concat" or not isinstance(call.args[0], relax.Tuple):
            return call
        fields = list(call.args[0].fields)
        negated = [call_name(self.values.get(f)) == "relax.negative" for f in fields]
        dims = static_dims(call.ty)
        if not any(negated) or dims is None or str(call.ty.dtype) not in ("float32", "float16"):
            return call
        axis = int(call.attrs.axis) % len(dims)
        extents = [static_dims(f.ty) for f in fields]
        if any(e is None for e in extents):
            return call
        sign = np.concatenate([np.full(e[axis], -1.0 if neg else 1.0)
                               for e, neg in zip(extents, negated)])
        shape = [1] * len(dims)
        shape[axis] = dims[axis]
        sources = [self.values[f].args[0] if neg else f for f, neg in zip(fields, negated)]
        self.note(True, f"Concat along axis {axis} of {sum(negated)} negated piece(s): a Concat "
                        "of the pieces times a constant sign (-1 / +1), so the negation fuses "
                        "with the elementwise ops after it instead of being a kernel of its own")
        # the product keeps the Concat's binding; it computes the Negates' ONNX nodes too
        removed = [str(self.nodes.get(f.name, "")) for f, neg in zip(fields, negated) if neg]
        own = str(self.nodes.get(self.current, self.current))
        self.new_nodes[self.current] = "\n".join([own] + [n for n in removed if n])
        joined = self._emit(relax.op.concat(sources, axis))
        return relax.op.multiply(joined, relax.const(sign.reshape(shape).astype(str(call.ty.dtype))))


def negated_concats_as_signs(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every Concat of ``main`` that joins negated pieces (rotate_half) rewritten
    as the Concat of the pieces times a constant sign; the Negates left unread are removed."""
    func = mod["main"]
    if not any(call_name(b.value) == "relax.negative" for b in bindings(func)):
        return mod
    out = run_rewrite(mod, _NegatedConcatRewriter)
    return out if out is mod else relax.transform.DeadCodeElimination(["main"])(out)


__all__ = ["NEGATED_CONCAT_AS_SIGN", "negated_concats_as_signs"]
