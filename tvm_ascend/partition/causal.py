"""Causal constants among a group's call arguments, found from their values.

A causal attention's condition (GPT-2's ``tril`` buffer through a Where) or additive mask
reaches the fused group as a constant argument of its call; the group's PrimFunc only sees a
parameter. Here the call's constants are read: one whose last two axes ``[i, j]`` are
"kept" exactly where ``j <= i + offset`` (true for a bool condition; 0 for an additive mask,
every other element at most ``MASKED_AT_MOST``) becomes a ``CausalOperand`` fact, attached to
the PrimFunc (``ir_attrs.CAUSAL``) so that the plan, the kernel it shares with equal groups
and the schedule stage all see the same fact. The op names play no part: a random bool
constant, or a triangle off by one element, is no fact.
"""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir.expr import Constant

from .. import ir_attrs
from ..decision import CausalOperand, causal_facts_json

# an additive mask's masked elements: exp(score + mask - row max) is 0 in float for any
# score within 1e4 of the row's maximum (float's exp underflows below -104)
MASKED_AT_MOST = -1e4


def causal_fact(param: str, values: np.ndarray) -> CausalOperand | None:
    """The fact about the constant ``values`` bound to ``param``, or None when it is not a
    causal lower-triangular constant (of at least 2 axes, its leading axes of extent 1)."""
    if values.ndim < 2 or any(d != 1 for d in values.shape[:-2]) or values.size == 0:
        return None
    rows, cols = values.shape[-2:]
    plane = values.reshape(rows, cols)
    # Every constant of every group comes here (weights too, up to an LM head's 10^8 values):
    # row 0 alone must already be a prefix of kept keys, which rejects a weight before the
    # whole-plane comparisons below make their temporaries.
    if plane.dtype == np.bool_:
        first = plane[0]
    elif np.issubdtype(plane.dtype, np.floating):
        first = plane[0] == 0
    else:
        return None
    seen = int(np.count_nonzero(first))
    if seen == 0 or seen == cols or not first[:seen].all():
        return None
    if plane.dtype == np.bool_:
        kept, additive, below = plane, False, 0.0
    elif np.issubdtype(plane.dtype, np.floating):
        kept = plane == 0
        masked = plane[~kept]
        if masked.size and not np.all(masked <= MASKED_AT_MOST):
            return None
        additive, below = True, float(masked.max()) if masked.size else MASKED_AT_MOST
    else:
        return None
    # row 0 keeps keys 0..offset: its count of kept keys, less one
    offset = int(np.count_nonzero(kept[0])) - 1
    if offset < 0 or offset >= cols:
        return None  # row 0 sees no key (or every key): no triangle to use
    if not np.array_equal(kept, np.tri(rows, cols, offset, dtype=bool)):
        return None
    return CausalOperand(param, offset, cols, additive, below)


def _worth_reading(arg: Constant) -> bool:
    """Whether the constant ``arg`` may be a Where's one-element fill or a causal constant,
    judged from its type alone (no copy of its values): a float scalar, or a bool / float
    tensor of at least 2 axes, its leading axes of extent 1, whose last two (queries, keys)
    are square-ish as a causal attention's are: at least as many keys as queries (a key
    cache's offset), at most twice as many. Weights (a projection's [768, 2304], an LM
    head's [768, 50257]) are not copied; a square float weight still is, and
    ``causal_fact`` rejects it on its first row."""
    ty = arg.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return False
    try:
        shape = [int(d) for d in ty.shape.values]
    except (TypeError, AttributeError):  # a symbolic extent: not a constant we can read
        return False
    dtype = str(ty.dtype)
    floating = dtype.startswith(("float", "bfloat"))
    if int(np.prod(shape)) == 1:
        return floating  # a Where's fill
    if len(shape) < 2 or any(d != 1 for d in shape[:-2]) or not (floating or dtype == "bool"):
        return False
    rows, cols = shape[-2:]
    return 2 <= rows <= cols <= 2 * rows


def with_causal_facts(prim, args: list):
    """``prim`` with the ``CausalOperand`` facts of its call's constant ``args`` (one per
    parameter, in order) as its ``ir_attrs.CAUSAL`` attribute, beside the values of the
    call's one-element constants (a Where's fill: what the masked scores become);
    ``prim`` itself when no argument is causal."""
    if prim is None:
        return prim
    facts, scalars = [], {}
    for param, arg in zip(prim.params, args):
        if not isinstance(arg, Constant) or not _worth_reading(arg):
            continue  # a weight: its type alone rules it out, no copy of its values
        values = arg.value.numpy()
        if values.size == 1 and np.issubdtype(values.dtype, np.floating):
            scalars[param.name] = float(values.reshape(()))
        fact = causal_fact(param.name, values)
        if fact is not None:
            facts.append(fact)
    if not facts:
        return prim
    return prim.with_attr(ir_attrs.CAUSAL, causal_facts_json(facts, scalars))
