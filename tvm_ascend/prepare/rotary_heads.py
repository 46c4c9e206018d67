"""The rotary embeddings of Q and K as one rotary over their heads side by side.

After HorizontalFusion's QKV merge, Q and K are adjacent last-axis slices of one product
``y``, each split into heads (``reshape`` to ``[B, S, h, D]``, ``permute_dims`` to
``[B, h, S, D]``) and rotated by the same ``x * cos + rotate_half(x) * sin``, cos and sin
broadcast over the heads (``rotate_half`` as ``prepare/rotary.py`` left it: a Concat of the
two halves times a constant sign). Each rotary was a kernel of its own (two per layer). The
heads of both are one slice of ``y`` (``hq + hk`` heads of ``D``), and the rotation is the
same per head, so::

    rot(heads(y[..., a:b])), rot(heads(y[..., b:c]))
      ->  r = rot(heads(y[..., a:c])); r[:, :hq], r[:, hq:]

computes every element as before (the same ops on the same values: exact) in one kernel;
the head slices are data movement that the attention kernel's operand loads take (as they
take V's). Each rewrite leaves a ``RotaryHeadsJoined`` record in ``prepare_rewrites``.

Example
-------
>>> mod, joined = join_rotary_heads(mod)                          # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .relax_rewrite import (RecordedRewrite, bindings, call_name, const_value, replace_main,
                            static_dims, with_rewrite_records)

ROTARY_HEADS_JOINED = "RotaryHeadsJoined"


class _Rotary:
    """One matched rotary: ``out = x * cos + concat(x[.., D/2:], x[.., :D/2]) * sign * sin``
    with ``x = permute_dims(reshape(y[..., begin:end], [B, S, h, D]), [0, 2, 1, 3])``."""

    def __init__(self, out, x, y, begin, end, dims, consts, order):
        self.out, self.x, self.y, self.begin, self.end = out, x, y, begin, end
        self.dims = dims        # [B, S, h, D] of the reshape
        self.consts = consts    # (cos, sign, sin) numpy values
        self.order = order      # binding position of ``out``


def _mul_by_const(expr, values):
    """(tensor operand, constant value, constant expr) of ``multiply(t, c)`` or ``(c, t)``."""
    if call_name(expr) != "relax.multiply":
        return None
    a, b = expr.args
    for t, c in ((a, b), (b, a)):
        found = const_value(c, values)
        if found is not None and const_value(t, values) is None:
            return t, found, c
    return None


def _value(var, values):
    return values.get(var) if isinstance(var, relax.Var) else None


def _heads(x, values):
    """(y, begin, end, [B, S, h, D]) of ``x = permute(reshape(slice(y, last axis)))``."""
    perm = _value(x, values)
    if call_name(perm) != "relax.permute_dims" or perm.attrs.axes is None or \
            [int(a) for a in perm.attrs.axes] != [0, 2, 1, 3]:
        return None
    reshape = _value(perm.args[0], values)
    if call_name(reshape) != "relax.reshape":
        return None
    sliced = _value(reshape.args[0], values)
    dims = static_dims(reshape.ty)
    if call_name(sliced) != "relax.strided_slice" or dims is None or len(dims) != 4:
        return None
    src = static_dims(sliced.args[0].ty)
    axes, begin, end, strides = _slice_args(sliced)
    if src is None or len(src) != 3 or axes not in ([2], [-1]) or strides not in ([1], []) \
            or begin[0] < 0:
        return None
    width = min(end[0], src[2]) - begin[0]
    if dims[:2] != src[:2] or dims[2] * dims[3] != width:
        return None
    return sliced.args[0], begin[0], begin[0] + width, dims


def _match(binding, values, order):
    """The ``_Rotary`` that ``binding`` completes (its final Add), or None."""
    value = binding.value
    # a model output cannot become a head slice inside the dataflow block
    if call_name(value) != "relax.add" or not isinstance(binding.var, relax.DataflowVar):
        return None
    for first, second in (value.args, value.args[::-1]):
        cos_part = _mul_by_const(_value(first, values), values)
        sin_part = _mul_by_const(_value(second, values), values)
        if cos_part is None or sin_part is None:
            continue
        x, cos, _ = cos_part
        signed = _mul_by_const(_value(sin_part[0], values), values)
        if signed is None:
            continue
        concat, sign = _value(signed[0], values), signed[1]
        if call_name(concat) != "relax.concat" or int(concat.attrs.axis) not in (3, -1):
            continue
        fields = list(concat.args[0].fields)
        dims = static_dims(x.ty) if isinstance(x, relax.Var) else None
        if len(fields) != 2 or dims is None or len(dims) != 4 or dims[3] % 2:
            continue
        half = dims[3] // 2
        if not (_is_half(fields[0], x, half, dims[3], values)
                and _is_half(fields[1], x, 0, half, values)):
            continue
        heads = _heads(x, values)
        if heads is None:
            continue
        consts = (cos, sign, sin_part[1])
        # cos, sin and the sign must not vary over the heads: the joined rotary broadcasts them
        if any(c.ndim == 4 and c.shape[1] != 1 for c in consts):
            continue
        return _Rotary(binding.var, x, heads[0], heads[1], heads[2], heads[3], consts, order)
    return None


def _slice_args(call):
    """(axes, begin, end, strides) of a strided_slice, as lists of ints (its arguments are
    tuples of PrimValues in TVM 0.27)."""
    lists = [[int(f.value) for f in arg.fields] for arg in call.args[1:]]
    return lists[0], lists[1], lists[2], lists[3] if len(lists) > 3 else []


def _is_half(expr, x, begin, end, values):
    sliced = _value(expr, values)
    if call_name(sliced) != "relax.strided_slice" or not sliced.args[0].same_as(x):
        return False
    axes, lo, hi, strides = _slice_args(sliced)
    high = min(hi[0], static_dims(x.ty)[3])
    return axes in ([3], [-1]) and (lo[0], high) == (begin, end) and strides in ([1], [])


def _pairs(func) -> list[tuple[_Rotary, _Rotary]]:
    """Rotaries of adjacent slices of one product with equal constants, in pairs."""
    values = {b.var: b.value for b in bindings(func)}
    found = [r for i, b in enumerate(bindings(func)) if (r := _match(b, values, i))]
    pairs, used = [], set()
    for first in found:
        for second in found:
            if first is second or id(first) in used or id(second) in used:
                continue
            same = first.y.same_as(second.y) and first.end == second.begin and \
                [first.dims[0], first.dims[1], first.dims[3]] == \
                [second.dims[0], second.dims[1], second.dims[3]] and \
                all(a.shape == b.shape and np.array_equal(a, b)
                    for a, b in zip(first.consts, second.consts))
            if same:
                pairs.append((first, second))
                used |= {id(first), id(second)}
    return pairs


@mutator
class _RotaryJoiner(PyExprMutator, RecordedRewrite):
    """Emits each pair's joined rotary at the first of its two results and remaps both to
    head slices of it."""

    REWRITE = ROTARY_HEADS_JOINED

    def __init__(self, mod, func, pairs):
        super().__init__(mod)
        self._setup(func, "rotary_heads")
        self.values = {b.var: b.value for b in bindings(func)}
        self.at = {min(p, key=lambda r: r.order).out: p for p in pairs}
        # the later result of a pair is a head slice already: its old binding is dropped
        self.skip = {max(p, key=lambda r: r.order).out for p in pairs}

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        if binding.var in self.skip:
            return
        pair = self.at.get(binding.var)
        if pair is None:
            super().visit_var_binding_(binding)
            return
        self._emit_pair(pair)

    def _const(self, rotary, index):
        return relax.const(rotary.consts[index], str(rotary.out.ty.dtype))

    def _emit_pair(self, pair):
        first, second = pair
        b, s, hq, d = first.dims
        hk = second.dims[2]
        y = self.visit_expr(first.y)
        # the joined rotary computes both ONNX rotaries (newline-joined, as OpInfo reads it)
        self.nodes["__both"] = "\n".join(str(self.nodes.get(r.out.name, r.out.name))
                                          for r in pair)
        # the heads' split (slice, reshape, transpose) computes both head transposes
        self.nodes["__heads"] = "\n".join(str(self.nodes.get(r.x.name, r.x.name)) for r in pair)

        def emit(expr, node="__both"):
            return self._emit(expr, node)

        sliced = emit(relax.op.strided_slice(y, [2], [first.begin], [second.end]), "__heads")
        x = emit(relax.op.permute_dims(emit(relax.op.reshape(sliced, [b, s, hq + hk, d]),
                                            "__heads"), [0, 2, 1, 3]), "__heads")
        halves = [emit(relax.op.strided_slice(x, [3], [lo], [hi]))
                  for lo, hi in ((d // 2, d), (0, d // 2))]
        signed = emit(relax.op.multiply(emit(relax.op.concat(halves, 3)), self._const(first, 1)))
        out = emit(relax.op.add(emit(relax.op.multiply(x, self._const(first, 0))),
                                emit(relax.op.multiply(signed, self._const(first, 2)))))
        self.nodes.pop("__both")
        self.nodes.pop("__heads")
        for rotary, lo, hi in ((first, 0, hq), (second, hq, hq + hk)):
            node = str(self.nodes.get(rotary.out.name, rotary.out.name))
            piece = self._emit(relax.op.strided_slice(out, [1], [lo], [hi]), rotary.out.name)
            self.set_var_remap(rotary.out, piece)
            self.note(True, f"the rotary of {rotary.dims[2]} heads joins the other's: one rotary "
                            f"over {hq + hk} heads of {d} (cos and sin shared), a head slice "
                            "each", node=node)


def join_rotary_heads(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """``mod`` with each pair of rotaries of adjacent slices of one product (Q and K after
    the QKV merge) computed as one rotary over both's heads; returns (module, pairs joined).
    The rotaries left apart are those whose constants differ or vary over the heads."""
    func = mod["main"]
    pairs = _pairs(func)
    if not pairs:
        return mod, 0
    joiner = _RotaryJoiner(mod, func, pairs)
    new = joiner.visit_expr(func)
    out = replace_main(mod, with_rewrite_records(joiner._with_nodes(new), joiner.records))
    out = relax.transform.DeadCodeElimination(["main"])(out)
    return relax.transform.Normalize()(out), len(pairs)


__all__ = ["ROTARY_HEADS_JOINED", "join_rotary_heads"]
