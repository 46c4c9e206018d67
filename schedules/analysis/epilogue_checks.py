"""What the cube and pool templates ask of the elementwise blocks after their main block.

MatMul, Conv and Pool each fold the blocks after their product or window into one epilogue
that runs on the vector unit before the single write to GM, and move every GM tensor in the
operands' dtype. ``epilogue_refusal`` is that check, shared so the three say the same thing.

Example
-------
>>> epilogue_refusal(func, blocks[1:], "matmul", "matmul", "float16")   # doctest: +SKIP
Decision(ok=False, reason='block T_sum reduces after the matmul')
"""
from __future__ import annotations

from tvm_ascend.decision import Decision

from .tile_values import unsupported_construct
from .tir_walk import param_buffers, reduce_iter_vars


def epilogue_refusal(func, blocks, after: str, template: str, dtype: str) -> Decision | None:
    """Decision.no with the first reason ``blocks`` (the epilogue after the ``after`` block of
    ``func``) cannot be printed by ``template`` computing in ``dtype``, else None: a block
    that reduces, that is not one store, or whose value has no vector instruction; more than
    one output; a GM tensor in another dtype (a Cast at the group's edge stays its own kernel
    or its neighbour's prologue)."""
    for block in blocks:
        if reduce_iter_vars(block):
            return Decision.no(f"block {block.name_hint} reduces after the {after}")
        if type(block.body).__name__ != "BufferStore":
            return Decision.no(f"block {block.name_hint} is not a single store")
        construct = unsupported_construct(block.body.value)
        if construct:
            return Decision.no(f"TIR construct {construct} has no vector instruction")
    inputs, outputs = param_buffers(func)
    if len(outputs) != 1:
        return Decision.no(f"the {template} template prints one output")
    other = sorted({str(b.dtype) for b in list(inputs) + list(outputs)} - {dtype})
    if other:
        return Decision.no(f"GM tensors in {', '.join(other)} next to {dtype} operands: the "
                           "kernel moves every GM tensor in its operands' dtype")
    return None


__all__ = ["epilogue_refusal"]
