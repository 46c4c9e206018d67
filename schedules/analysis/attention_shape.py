"""The attention a group computes, read back from its TIR as index maps (``AttentionShape``).

``attention_shape`` follows the group (after FuseTIR) from ``S = Q @ K^T`` through the scale,
the mask, an optional ``Where(keep, ..., fill)`` and TOPI's four softmax blocks to ``O = P @ V``,
through the copies (Reshape/Transpose) before the products and after the last one, and writes
every operand as an affine map of (batch..., row, column) onto its parameter buffer
(``OperandMap``); it raises ``_NotAttention`` with the reason for anything else. The template
(``attention.py``) plans from the shape and the printer prints from it; reading it needs only
TIR and index arithmetic, not the SoC, so it lives apart from the planning.

Example
-------
>>> shape = attention_shape(prim_func)                          # doctest: +SKIP
>>> shape.seq_q, shape.seq_kv, shape.head_dim, shape.k_transposed
(128, 128, 64, True)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import tirx
from tvm.sym.analyzer import Analyzer

from .tile_values import bool_behind_int_test, buffer_size, flat_offset
from .tir_walk import (BufferLoad, load_buffer, param_buffers, product_loads, reduce_iter_vars,
                       reducer_of, root_blocks)


@dataclass(frozen=True)
class OperandMap:
    """Where element (batch..., row, col) of an operand lives in its parameter buffer:
    ``base + sum(batch_coefs * batch) + row * row_stride + col * col_stride``.

    ``param`` binds the map to the PrimFunc it was read from and takes no part in equality:
    structurally equal groups (the planner's cache answers one with another's plan) have
    equal maps, shapes and plans."""

    param: str = field(compare=False)
    batch_coefs: tuple
    row_stride: int
    col_stride: int
    base: int = 0


@dataclass(frozen=True)
class AttentionShape:
    """What the kernel computes: ``out = softmax(scale * Q K^T + mask_coef * mask) V``."""

    batch_extents: tuple
    seq_q: int
    seq_kv: int
    head_dim: int
    dtype: str
    q: OperandMap      # rows: queries, cols: head dim
    k: OperandMap      # rows: keys, cols: head dim
    v: OperandMap      # rows: keys, cols: head dim
    out: OperandMap    # rows: queries, cols: head dim
    mask: OperandMap | None  # rows: queries (stride 0 when broadcast), cols: keys
    scale: float
    mask_coef: float
    # Where(keep, scores..., fill) before the softmax (a causal mask): keep is a bool tensor
    # (rows, cols as the mask's), fill a constant or a one-element parameter (``fill_param``);
    # the additive mask is added inside the Where (``mask_inside``) or after it
    keep: OperandMap | None = None
    fill: float = 0.0
    fill_param: str | None = field(default=None, compare=False)  # a name, as OperandMap.param
    mask_inside: bool = False

    @property
    def batch(self) -> int:
        total = 1
        for extent in self.batch_extents:
            total *= extent
        return total

    @property
    def k_transposed(self) -> bool:
        """K is read as B = K^T in place: rows of keys, contiguous along the head dim."""
        return self.k.col_stride == 1


class _NotAttention(Exception):
    """Internal: why a PrimFunc is not the attention pattern (becomes a Decision)."""


class _Resolver:
    """Follows loads of intermediate buffers back through the copy/elementwise blocks that
    produced them (FuseTIR keeps Reshape/Transpose as blocks), so every load is expressed on
    parameters, the score matmul's output or softmax's statistics."""

    def __init__(self, blocks, params):
        # by identity: pairwise FuseTIR merges may leave intermediates with equal names
        self.producers = [(b.body.buffer, b) for b in blocks if not reduce_iter_vars(b)]
        self.params = list(params)

    def is_param(self, buffer) -> bool:
        return any(buffer.same_as(p) for p in self.params)

    def producer(self, buffer):
        return next((b for buf, b in self.producers if buf.same_as(buffer)), None)

    def indices(self, load, env, bounds):
        analyzer = Analyzer()
        for var, extent in bounds.items():
            analyzer.bind(var, tvm.ir.Range(0, extent))
        for var, value in env.items():
            analyzer.bind(var, value)
        return [analyzer.simplify(i) for i in load.indices]

    def follow(self, load, env, bounds, stop):
        """(buffer, resolved indices, producing value or None) of ``load``."""
        buffer = load_buffer(load)
        indices = self.indices(load, env, bounds)
        block = self.producer(buffer)
        if self.is_param(buffer) or any(buffer.same_as(b) for b in stop) or block is None:
            return buffer, indices, None
        inner = {iv.var: idx for iv, idx in zip(block.iter_vars, indices)}
        if len(block.body.indices) != len(block.iter_vars) or \
                not all(a.same_as(b.var) for a, b in zip(block.body.indices, block.iter_vars)):
            raise _NotAttention(f"block {block.name_hint} does not store at its own indices")
        return buffer, indices, (block.body.value, inner)

    def leaf(self, load, env, bounds, stop):
        """Follow pure copies down to a parameter or a stop buffer: (buffer, indices)."""
        buffer, indices, produced = self.follow(load, env, bounds, stop)
        while produced is not None:
            value, inner = produced
            if not isinstance(value, BufferLoad):
                raise _NotAttention(f"{buffer.name} is computed, not copied, on the way to an "
                                    "operand")
            buffer, indices, produced = self.follow(value, inner, bounds, stop)
        return buffer, indices


def _linear_map(buffer, indices, axes, bounds) -> OperandMap:
    """Coefficients of ``axes`` (batch vars..., row, col) in the flat offset of ``indices``."""
    analyzer = Analyzer()
    for var, extent in bounds.items():
        analyzer.bind(var, tvm.ir.Range(0, extent))
    name = buffer.name
    flat = analyzer.simplify(flat_offset(buffer, indices))
    coefs = tvm.sym.detect_linear_equation(flat, list(axes))
    if len(coefs) != len(axes) + 1 or not all(isinstance(c, tirx.IntImm) for c in coefs):
        raise _NotAttention(f"{name} is not read at an affine offset of (batch, row, col): {flat}")
    values = [int(c) for c in coefs]
    if min(values) < 0:
        raise _NotAttention(f"{name} is read with a negative stride")
    return OperandMap(name, tuple(values[:-3]), values[-3], values[-2], values[-1])


def _matmul_operands(block):
    found = product_loads(block.body) if len(reduce_iter_vars(block)) == 1 else None
    if found is None:
        raise _NotAttention(f"block {block.name_hint} is not a matmul C += A * B")
    return found[1], found[2]


def _score_terms(expr, resolver, env, bounds, scores, terms, coef=1.0, select=None):
    """Collect ``expr`` (elementwise over the scores) as ``a * S + b * mask``: terms[key] += c.
    One ``Select(keep, x, fill)`` may wrap part of it (ONNX Where with a bool keep mask, as
    GPT-2's causal mask): ``select`` then records the keep load, the fill (times the
    coefficient outside) and the terms inside."""
    kind = type(expr).__name__
    if kind == "Select":
        if select is None or select:  # None: the caller takes no Where here
            raise _NotAttention("more than one Where between the scores and the softmax")
        keep = bool_behind_int_test(expr.condition)
        keep = expr.condition if keep is None else keep
        if not isinstance(keep, BufferLoad) or str(keep.ty.dtype) != "bool":
            raise _NotAttention("the Where before the softmax does not test a bool tensor")
        buffer, indices = resolver.leaf(keep, env, bounds, [])
        if not resolver.is_param(buffer):
            raise _NotAttention(f"{buffer.name} (the Where's condition) is computed in the group")
        select["keep"] = (buffer, tuple(indices))
        select["fill"] = _fill_of(expr.false_value, resolver, env, bounds, coef)
        before = dict(terms)
        _score_terms(expr.true_value, resolver, env, bounds, scores, terms, coef)
        select["inside"] = {k for k in terms if terms[k] != before.get(k)}
        return
    if isinstance(expr, BufferLoad):
        buffer, indices, produced = resolver.follow(expr, env, bounds, [scores])
        if produced is not None:
            return _score_terms(produced[0], resolver, produced[1], bounds, scores, terms, coef,
                                select)
        is_scores = buffer.same_as(scores)
        analyzer = Analyzer()
        for var, extent in bounds.items():
            analyzer.bind(var, tvm.ir.Range(0, extent))
        if is_scores and not all(  # an extent-1 axis reads as 0, which equals its variable
                analyzer.can_prove_equal(i, v) for i, v in zip(indices, bounds)):
            raise _NotAttention("the softmax reads the scores at other indices than its own")
        if not is_scores and not resolver.is_param(buffer):
            raise _NotAttention(f"{buffer.name}, added to the scores, is computed in the group")
        key = "scores" if is_scores else (buffer, tuple(indices))
        terms[key] = terms.get(key, 0.0) + coef
        return
    if kind == "Cast" and str(expr.ty.dtype) == "float32":
        # a float16 softmax legalizes to float32 (tvm_ascend/partition/legalize.py); the
        # kernel keeps the scores in float anyway
        _score_terms(expr.value, resolver, env, bounds, scores, terms, coef, select)
        return
    if kind in ("Add", "Sub"):
        _score_terms(expr.a, resolver, env, bounds, scores, terms, coef, select)
        _score_terms(expr.b, resolver, env, bounds, scores, terms,
                     coef if kind == "Add" else -coef, select)
        return
    if kind in ("Mul", "Div"):
        const = expr.b if isinstance(expr.b, tirx.FloatImm) else \
            expr.a if kind == "Mul" and isinstance(expr.a, tirx.FloatImm) else None
        if const is None:
            tensors = [load_buffer(x).name for x in (expr.a, expr.b)
                       if isinstance(x, BufferLoad) and resolver.is_param(load_buffer(x))]
            raise _NotAttention(f"the scores are {'multiplied' if kind == 'Mul' else 'divided'} "
                                f"by {' and '.join(tensors) or 'a computed value'}, not a "
                                "compile-time constant (the kernel's scale is an immediate)")
        if float(const.value) == 0.0:
            raise _NotAttention("the scores are scaled by 0")
        other = expr.a if const.same_as(expr.b) else expr.b
        factor = float(const.value) if kind == "Mul" else 1.0 / float(const.value)
        _score_terms(other, resolver, env, bounds, scores, terms, coef * factor, select)
        return
    raise _NotAttention(f"{kind} between the scores and the softmax is not scale/mask")


def _fill_of(expr, resolver, env, bounds, coef):
    """The Where's other value, times ``coef``: a float constant, or ``(param, coef)`` for a
    one-element parameter (ONNX constants that stay initializers)."""
    if isinstance(expr, tirx.FloatImm):
        return float(expr.value) * coef
    if isinstance(expr, BufferLoad):
        buffer, _ = resolver.leaf(expr, env, bounds, [])
        if resolver.is_param(buffer) and buffer_size(buffer) == 1:
            return (buffer.name, coef)
    raise _NotAttention("the Where before the softmax fills with something other than a "
                        "constant")


def attention_shape(func) -> AttentionShape:
    """The attention computed by ``func``; raises _NotAttention with the reason otherwise."""
    blocks = root_blocks(func)
    inputs, outputs = param_buffers(func)
    if len(outputs) != 1:
        raise _NotAttention("the attention template prints one output")
    resolver = _Resolver(blocks, func.params)
    matmuls = [b for b in blocks if len(reduce_iter_vars(b)) == 1 and product_loads(b.body)]
    if len(matmuls) != 2:
        raise _NotAttention(f"{len(matmuls)} matmul block(s); attention has two (QK^T and PV)")
    qk, pv = matmuls
    reduces = [b for b in blocks if reduce_iter_vars(b) and b not in matmuls]
    if len(reduces) != 2 or [reducer_of(b.body)[0] if reducer_of(b.body) else None
                             for b in reduces] != ["max", "sum"]:
        raise _NotAttention("no softmax (row max then row sum) between the two matmuls")
    max_block, sum_block = reduces
    order = [b.name_hint for b in blocks]
    if not order.index(qk.name_hint) < order.index(max_block.name_hint) < \
            order.index(sum_block.name_hint) < order.index(pv.name_hint):
        raise _NotAttention("the blocks are not in the order scores, softmax, product")
    scores = qk.body.buffer
    spatial = [iv for iv in qk.iter_vars if int(iv.iter_type) == 0]
    if len(spatial) < 3:
        raise _NotAttention("the score matmul has no batch/head dimension")
    *batch, row, col = spatial
    red = reduce_iter_vars(qk)[0]
    bounds = {iv.var: int(iv.dom.extent) for iv in qk.iter_vars}
    a_load, b_load = _matmul_operands(qk)
    q_buf, q_idx = resolver.leaf(a_load, {}, bounds, [])
    k_buf, k_idx = resolver.leaf(b_load, {}, bounds, [])
    for buffer in (q_buf, k_buf):
        if not resolver.is_param(buffer):
            raise _NotAttention(f"{buffer.name} (a matmul operand) is computed inside the group")
    axes_q = [iv.var for iv in batch] + [row.var, red.var]
    q = _linear_map(q_buf, q_idx, axes_q, bounds)
    k = _linear_map(k_buf, k_idx, [iv.var for iv in batch] + [col.var, red.var], bounds)
    # softmax: the max block reduces scale * S + mask over the keys
    max_spatial = [iv for iv in max_block.iter_vars if int(iv.iter_type) == 0]
    m_red = reduce_iter_vars(max_block)[0]
    if [int(iv.dom.extent) for iv in max_spatial] + [int(m_red.dom.extent)] != \
            [int(iv.dom.extent) for iv in spatial]:
        raise _NotAttention("the softmax does not run over the keys of the scores")
    m_bounds = {iv.var: int(iv.dom.extent) for iv in max_block.iter_vars}
    terms: dict = {}
    select: dict = {}
    _score_terms(reducer_of(max_block.body)[1], resolver, {}, m_bounds, scores, terms,
                 select=select)
    if select and "scores" not in select["inside"]:
        raise _NotAttention("the scores are not inside the Where before the softmax")
    scale = terms.pop("scores", 0.0)
    if scale <= 0.0:
        raise _NotAttention("the softmax input has no positive multiple of the scores")
    if len(terms) > 1:
        raise _NotAttention("more than one mask is added to the scores")
    mask = None
    mask_coef = 0.0
    m_axes = [iv.var for iv in max_spatial] + [m_red.var]
    if terms:
        ((mask_buf, mask_idx), mask_coef), = terms.items()
        mask = _linear_map(mask_buf, list(mask_idx), m_axes, m_bounds)
        if mask.col_stride != 1:
            raise _NotAttention("the mask is not contiguous along the keys")
    keep, fill, fill_param = None, 0.0, None
    if select:
        keep_buf, keep_idx = select["keep"]
        keep = _linear_map(keep_buf, list(keep_idx), m_axes, m_bounds)
        if keep.col_stride != 1:
            raise _NotAttention("the Where's condition is not contiguous along the keys")
        if isinstance(select["fill"], tuple):
            fill_param, fill = select["fill"]  # the value is read in the kernel, times fill
        else:
            fill = select["fill"]
    # the product: P (softmax output) @ V
    p_load, v_load = _matmul_operands(pv)
    pv_spatial = [iv for iv in pv.iter_vars if int(iv.iter_type) == 0]
    pv_bounds = {iv.var: int(iv.dom.extent) for iv in pv.iter_vars}
    pv_red = reduce_iter_vars(pv)[0]
    if int(pv_red.dom.extent) != int(col.dom.extent) or \
            [int(iv.dom.extent) for iv in pv_spatial[:-1]] != \
            [int(iv.dom.extent) for iv in spatial[:-1]]:
        raise _NotAttention("the second matmul does not take the probabilities as A")
    v_buf, v_idx = resolver.leaf(v_load, {}, pv_bounds, [])
    if not resolver.is_param(v_buf):
        raise _NotAttention(f"{v_buf.name} (V) is computed inside the group")
    v = _linear_map(v_buf, v_idx,
                    [iv.var for iv in pv_spatial[:-2]] + [pv_red.var, pv_spatial[-1].var],
                    pv_bounds)
    out = _output_map(blocks, pv, outputs[0], resolver)
    head_dim = int(red.dom.extent)
    if int(pv_spatial[-1].dom.extent) != head_dim:
        raise _NotAttention("V's head dim differs from Q's (not printed yet)")
    dtypes = {str(b.dtype) for b in (q_buf, k_buf, v_buf, outputs[0])}
    if mask is not None:
        dtypes.add(str(mask_buf.dtype))
    if fill_param is not None:
        dtypes.add(str(next(p for p in func.params if p.name == fill_param).dtype))
    if len(dtypes) != 1:
        raise _NotAttention(f"operands of several dtypes {sorted(dtypes)}")
    return AttentionShape(tuple(int(iv.dom.extent) for iv in batch), int(row.dom.extent),
                          int(col.dom.extent), head_dim, dtypes.pop(), q, k, v, out, mask,
                          scale, mask_coef, keep, fill, fill_param,
                          bool(select) and mask is not None and
                          any(k != "scores" for k in select["inside"]))


def _output_map(blocks, pv, out_buffer, resolver) -> OperandMap:
    """Where O[batch..., row, d] (the PV result) lands in the output, through the copies."""
    pv_spatial = [iv for iv in pv.iter_vars if int(iv.iter_type) == 0]
    bounds = {iv.var: int(iv.dom.extent) for iv in pv_spatial}
    axes = [iv.var for iv in pv_spatial]
    if pv.body.buffer.same_as(out_buffer):
        return _linear_map(out_buffer, list(pv.body.indices), axes, bounds)
    last = blocks[-1]
    if not last.body.buffer.same_as(out_buffer) or reduce_iter_vars(last):
        raise _NotAttention("the output is not written by a copy of the product")
    # The last block copies: out[f(w)] = O[g(w)] with g a map of the block's vars w. Invert g
    # with TVM's iter-map analysis, so out's offset is an expression of O's indices.
    l_bounds = {iv.var: int(iv.dom.extent) for iv in last.iter_vars}
    source, indices = resolver.leaf(last.body.value, {}, l_bounds, [pv.body.buffer]) \
        if isinstance(last.body.value, BufferLoad) else (None, None)
    if source is None or not source.same_as(pv.body.buffer):
        raise _NotAttention("the output is not a copy of the product")
    iter_map = tvm.sym.detect_iter_map(indices, {iv.var: tvm.ir.Range(0, int(iv.dom.extent))
                                                 for iv in last.iter_vars})
    if not iter_map.indices:
        raise _NotAttention("the copy after the product is not a bijective index map")
    inverse = tvm.sym.inverse_affine_iter_map(iter_map.indices, axes)
    analyzer = Analyzer()
    for var, extent in bounds.items():
        analyzer.bind(var, tvm.ir.Range(0, extent))
    for var, value in inverse.items():
        analyzer.bind(var, value)
    for iv in last.iter_vars:  # the inverse leaves out axes of extent 1
        if int(iv.dom.extent) == 1 and not any(iv.var.same_as(v) for v in inverse):
            analyzer.bind(iv.var, tirx.IntImm(iv.var.ty.dtype if hasattr(iv.var, "ty")
                                              else iv.var.dtype, 0))
    out_indices = [analyzer.simplify(i) for i in last.body.indices]
    return _linear_map(out_buffer, out_indices, axes, bounds)


__all__ = ["AttentionShape", "OperandMap", "attention_shape"]
