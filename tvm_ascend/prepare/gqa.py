"""Grouped-query attention without the repeated K and V: query heads grouped by their KV head.

LLaMA-style decoders with fewer KV heads than query heads (``num_key_value_heads``) repeat K
and V ``g = H / Hkv`` times before attention (``repeat_kv``: Unsqueeze, Expand, Reshape), a
data-movement kernel per layer for V (and a broadcast inside K's rotary kernel that keeps K's
transpose a kernel of its own). Query head ``h`` reads KV head ``h // g``, so the ``g`` query
heads of one KV head are contiguous: ``Q`` viewed as ``[B, Hkv, g, S, D]`` (a reshape, no
copy) attends to K and V broadcast along a group axis (``expand_dims`` + ``broadcast_to``,
which the attention kernel reads as a stride-0 index map, so nothing is copied)::

    scores = matmul(Q, permute(repeat(K)))      [B, H, S, S]
    out    = matmul(softmax(f(scores)), repeat(V))
      ->
    scores = matmul(reshape(Q, [B, Hkv, g, S, D]), permute(bcast(K)))   [B, Hkv, g, S, S]
    out    = reshape(matmul(softmax(f'(scores)), bcast(V)), [B, H, S, D])

The group stays an axis of its own (not ``g * S`` rows of one head) so the attention's output
``[B, Hkv, g, S, D]`` is an affine map of the heads' join after it (Transpose, Reshape to
``[B, S, H * D]``): the join stays inside the attention kernel. K's transpose comes after its
broadcast, so the kernel writing K (its rotary) keeps K's layout and K's head transpose.

``f`` is the chain of elementwise ops between the scores and the Softmax (the scale, the mask
Add); an operand of it with a head axis of 1 (the mask, ``[B, 1, S, S]``) gains the group axis
as a unit axis (a reshape, once per model: the layers share the mask); one of rank 2 or less
broadcasts as it is. The arithmetic is the same, element for element.

Each rewrite leaves a record (``GroupedQueryAttention``) in the fusion report's
``prepare_rewrites``; an attention that repeats K and V but does not fit the pattern (an
operand with one row per query head, a dynamic shape) says why it was left.

Example
-------
>>> mod = grouped_query_attention(mod)                            # doctest: +SKIP
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..partition.patterns.elementwise import ELEMENTWISE_OPS
from .relax_rewrite import (RecordedRewrite, bindings, call_name, const_value, static_dims)

GROUPED_QUERY_ATTENTION = "GroupedQueryAttention"


def _uses(func) -> dict:
    counts: dict = {}
    for binding in bindings(func):
        for var in relax.analysis.free_vars(binding.value):
            counts[var] = counts.get(var, 0) + 1
    for var in relax.analysis.free_vars(func.body.body):
        counts[var] = counts.get(var, 0) + 2  # a model output is never folded away
    return counts


class _Match:
    """One attention over repeated K and V, as found: the vars it reads and what it removes."""

    def __init__(self, q, k, v, groups, chain, softmax_axis, removed, casts=()):
        self.q, self.k, self.v, self.groups = q, k, v, groups
        self.chain = chain            # [(binding of the op, index of the scores operand)]
        self.casts = list(casts)      # dtypes the probabilities are cast to, in order
        self.softmax_axis = softmax_axis
        self.removed = removed        # bindings whose ONNX nodes the new bindings take over


class _Finder:
    """Finds, for each ``matmul(P, repeat(V))``, the whole grouped-query pattern behind it."""

    def __init__(self, func):
        self.values = {b.var: b.value for b in bindings(func)}
        self.binding_of = {b.var: b for b in bindings(func)}
        self.uses = _uses(func)

    def _single(self, var) -> bool:
        return isinstance(var, relax.DataflowVar) and self.uses.get(var, 0) == 1

    def repeat(self, var):
        """(source, g, bindings) when ``var`` is repeat_kv(source) used once, else None."""
        chain = []
        value = self.values.get(var)
        if call_name(value) != "relax.reshape" or not self._single(var):
            return None
        chain.append(self.binding_of[var])
        wide = value.args[0]
        value = self.values.get(wide)
        if call_name(value) != "relax.broadcast_to" or not self._single(wide):
            return None
        chain.append(self.binding_of[wide])
        inserted = value.args[0]
        value = self.values.get(inserted)
        if call_name(value) != "relax.expand_dims" or not self._single(inserted) \
                or [int(a) for a in value.attrs.axis] != [2]:
            return None
        chain.append(self.binding_of[inserted])
        source = value.args[0]
        src, rep, mid = (static_dims(source.ty), static_dims(var.ty), static_dims(wide.ty))
        if src is None or rep is None or mid is None or len(src) != 4 or len(mid) != 5:
            return None
        b, hkv, s, d = src
        if mid != [b, hkv, mid[2], s, d] or rep != [b, hkv * mid[2], s, d] or mid[2] < 2:
            return None
        return source, mid[2], chain

    def match(self, binding) -> _Match | None:
        value = binding.value
        if call_name(value) != "relax.matmul":
            return None
        probs, v_rep = value.args
        v = self.repeat(v_rep)
        # Casts of the probabilities before the PV matmul (TorchScript's float16 export casts
        # them to float32 and back): elementwise, so they are re-emitted on the grouped rows
        casts, cast_bindings = [], []
        while call_name(self.values.get(probs)) == "relax.astype" and self._single(probs):
            casts.append(str(self.values[probs].attrs.dtype))
            cast_bindings.append(self.binding_of[probs])
            probs = self.values[probs].args[0]
        soft = self.values.get(probs)
        if v is None or call_name(soft) != "relax.nn.softmax" or not self._single(probs):
            return None
        rank = len(static_dims(probs.ty) or [])
        if rank != 4 or int(soft.attrs.axis) % rank != 3:
            return None
        chain, removed = [], [*cast_bindings, self.binding_of[probs]]
        current = soft.args[0]
        while call_name(self.values.get(current)) in ELEMENTWISE_OPS:
            op = self.values[current]
            inner = [i for i, a in enumerate(op.args) if isinstance(a, relax.Var)
                     and static_dims(a.ty) == static_dims(current.ty)
                     and call_name(self.values.get(a)) is not None]
            if not self._single(current) or len(inner) < 1:
                return None
            chain.append((self.binding_of[current], inner[0]))
            removed.append(self.binding_of[current])
            current = op.args[inner[0]]
        scores = self.values.get(current)
        if call_name(scores) != "relax.matmul" or not self._single(current):
            return None
        removed.append(self.binding_of[current])
        q, k_t = scores.args
        perm = self.values.get(k_t)
        if call_name(perm) != "relax.permute_dims" or not self._single(k_t) \
                or [int(a) for a in perm.attrs.axes] != [0, 1, 3, 2]:
            return None
        k = self.repeat(perm.args[0])
        if k is None or k[1] != v[1] or static_dims(q.ty) != static_dims(v_rep.ty):
            return None
        removed += [self.binding_of[k_t], *k[2], *v[2], binding]
        return _Match(q, k[0], v[0], v[1], chain[::-1], int(soft.attrs.axis), removed,
                      casts[::-1])


@mutator
class _GroupedQueryRewriter(PyExprMutator, RecordedRewrite):
    """Rewrites each matched attention as attention over the KV heads (see the module)."""

    REWRITE = GROUPED_QUERY_ATTENTION

    def __init__(self, mod, func):
        super().__init__(mod)
        self._setup(func, "gqa")
        self.finder = _Finder(func)
        self.five: dict = {}  # side operand var -> it with the group axis (shared)

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        match = self.finder.match(binding)
        if match is None:
            super().visit_var_binding_(binding)
            return
        sides = [self._side_shape(b.value.args[1 - i] if len(b.value.args) == 2 else None,
                                  match) for b, i in match.chain]
        refusal = next((s for s in sides if s is not None), None)
        if refusal:
            self.note(False, f"attention over repeated K and V kept: {refusal}")
            super().visit_var_binding_(binding)
            return
        self.set_var_remap(binding.var, self._emit_grouped(match))

    def _side_shape(self, side, match):
        """None when ``side`` broadcasts against the grouped scores (as it is or with the
        group axis added), else the reason it does not."""
        if side is None:
            return None
        dims = static_dims(side.ty if isinstance(side, relax.Var) else side.ty)
        if dims is None:
            return "an operand of the scores' elementwise chain has a dynamic shape"
        dims = [1] * (4 - len(dims)) + dims
        if len(dims) != 4 or dims[1] != 1:
            return "an operand of the scores' elementwise chain differs per query head"
        return None

    def _node(self, key: str, members) -> str:
        names = [str(self.nodes.get(b.var.name, "")) for b in members]
        self.nodes[key] = "\n".join(dict.fromkeys(n for n in names if n))
        return key

    def _emit_grouped(self, match):
        b, heads, seq, depth = static_dims(match.q.ty)
        hkv, g = heads // match.groups, match.groups
        removed = match.removed
        key = self._node("__gqa", removed)
        # Q as [B, Hkv, g, S, D] (a view); K and V broadcast along the group axis g
        q = self._emit(relax.op.reshape(self.visit_expr(match.q), [b, hkv, g, seq, depth]), key)
        # K's transpose last: a kernel writing K (its rotary) keeps K's own layout, and the
        # attention reads the broadcast and the transpose as strides
        k = self._emit(relax.op.expand_dims(self.visit_expr(match.k), [2]), key)
        k = self._emit(relax.op.broadcast_to(k, [b, hkv, g, seq, depth]), key)
        k_t = self._emit(relax.op.permute_dims(k, [0, 1, 2, 4, 3]), key)
        scores = self._emit(relax.op.matmul(q, k_t), key)
        for op_binding, index in match.chain:
            op = op_binding.value
            args = [scores if i == index else self._grouped_side(a, op_binding)
                    for i, a in enumerate(op.args)]
            scores = self._emit(relax.Call(op.op, args, op.attrs), key)
        probs = self._emit(relax.op.nn.softmax(scores, axis=-1), key)
        for dtype in match.casts:
            probs = self._emit(relax.op.astype(probs, dtype), key)
        v = self._emit(relax.op.expand_dims(self.visit_expr(match.v), [2]), key)
        v = self._emit(relax.op.broadcast_to(v, [b, hkv, g, seq, depth]), key)
        out = self._emit(relax.op.matmul(probs, v), key)
        out = self._emit(relax.op.reshape(out, [b, heads, seq, depth]), key)
        self.nodes.pop("__gqa")
        self.note(True, f"attention of {heads} query heads over {hkv} KV heads repeated {g}x: "
                        f"the {g} query heads of each KV head share its K and V (a broadcast "
                        "axis), so K and V are read as they are and not repeated")
        return out

    def _grouped_side(self, side, reader):
        """``side`` (an operand of the scores' chain) against the grouped scores
        [B, Hkv, g, S, S]: one with a head axis (of 1) gains the group axis as a unit axis
        (a view), so it broadcasts over the group; lower ranks broadcast as they are."""
        dims = static_dims(side.ty)
        if len(dims) < 3:
            return self.visit_expr(side)
        full = [1] * (4 - len(dims)) + dims
        five = [full[0], 1, 1, full[2], full[3]]
        value = const_value(side, {}) if isinstance(side, Constant) else None
        if value is not None:
            return relax.const(value.reshape(five), str(side.ty.dtype))
        if side not in self.five:
            key = self._node("__five", [reader])  # the mask's reshape is its reader's (the Add)
            self.five[side] = self._emit(relax.op.reshape(self.visit_expr(side), five), key)
            self.nodes.pop(key)
        return self.five[side]


def grouped_query_attention(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every attention of ``main`` over repeated K and V (repeat_kv) rewritten to
    attend over the KV heads with the query heads grouped (see the module docstring)."""
    func = mod["main"]
    if not any(call_name(b.value) == "relax.expand_dims" for b in bindings(func)):
        return mod
    rewriter = _GroupedQueryRewriter(mod, func)
    new = rewriter.visit_expr(func)
    out = rewriter.finish(mod, new)
    return out if out is mod else relax.transform.DeadCodeElimination(["main"])(out)


__all__ = ["GROUPED_QUERY_ATTENTION", "grouped_query_attention"]
