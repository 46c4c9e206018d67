"""AttentionSchedule: scores -> scale -> mask -> softmax -> product with V as ONE kernel.

The group (after FuseTIR) is ``S = Q @ K^T`` (a matmul block), elementwise blocks that scale
``S`` by a constant, add a mask and may take a ``Where(keep, ..., fill)`` on a bool tensor (a
causal mask, as GPT-2's TorchScript export writes it), TOPI's four softmax blocks (max, exp,
sum, normalise) over the last axis, and ``O = P @ V``; copies (Reshape/Transpose) may sit
before the products and after the last one. The template reads all of that back as index
maps: every operand is an affine map of (batch..., row, column) onto its parameter buffer, so
the head transposes turn into strides and disappear into the kernel.

The kernel (codegen/kernels/attention.py) computes it FlashAttention-style: each work item is a
block of ``base_q`` query rows of one batch*head; it walks the keys in blocks of ``base_kv``:
the cube computes a ``base_q x base_kv`` score tile (Matmul API, K read in place with
isTransposeB), the vector unit scales and masks it (the Where's condition block read as bytes,
made a bit mask by Cast and Compares, and applied by Select), and exponentiates it against a
running row maximum
(online softmax), and the cube multiplies the probabilities (A from the UB) with the V block;
the vector unit rescales and accumulates the output rows, divides by the running sums once and
writes them. The seq x seq scores never go to GM as a tensor. On split 2201 chips (910B) the
cube (AIC) and vector (AIV) exchange tiles through the GM workspace (L2), as CANN's fused
attention kernels do; the plan counts those bytes apart (``workspace_*_bytes`` in the params).
On coupled chips (310P) the tiles stay on chip, and without DataCopyPad the mask and output
rows move as whole 32-byte blocks plus scalar tails (``params["data_copy_pad"]``).

K and V are read once per query block (``seq_q / base_q`` times in all): the FlashAttention
I/O bound, Theta(S^2 d^2 / M) for on-chip memory M. Keeping a head's K and V resident in L1
across query blocks needs an AIC-side program that owns L1 beside the AIV's (CANN's fused
attention kernels are written that way); the Matmul API this kernel uses reloads its operands
per call, and the emulator models no cross-core programs, so that is not done here.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.sym.analyzer import Analyzer

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .matmul import product_loads
from .tile_values import bool_behind_int_test, buffer_size, flat_offset
from .tiling import FRACTAL, ceil_div, dtype_bytes, pieces, round_up
from .tiling import CORE_LOOP_ANNOTATION, SUPPORTED_DTYPES, Tiling, UB_RESERVED_BYTES
from .tir_walk import (BufferLoad, load_buffer, param_buffers, reduce_iter_vars, reducer_of,
                       root_blocks)

SCORE_BYTES = 4  # scores, probabilities' statistics and the output accumulator are float


@dataclass(frozen=True)
class AttentionKnobs:
    """Tunable choices of the attention template."""

    base_q: int | None = None   # query rows per work item; None: 64 (at most seq_q rounded)
    base_kv: int | None = None  # keys per score tile; None: 128 (fp16) / 64 (fp32)
    cores: int | None = None    # None: every AI core


@dataclass(frozen=True)
class OperandMap:
    """Where element (batch..., row, col) of an operand lives in its parameter buffer:
    ``base + sum(batch_coefs * batch) + row * row_stride + col * col_stride``."""

    param: str
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
    fill_param: str | None = None
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


class AttentionSchedule:
    """Template for attention groups: two cube products around an online softmax."""

    name = "attention"

    @staticmethod
    def applies(func) -> Decision:
        try:
            shape = attention_shape(func)
        except _NotAttention as err:
            return Decision.no(str(err))
        if shape.dtype not in SUPPORTED_DTYPES:
            return Decision.no(f"attention in {shape.dtype}; the kernel takes float16/float32")
        for name, op in (("Q", shape.q), ("V", shape.v), ("output", shape.out)):
            if op.col_stride != 1:
                return Decision.no(f"{name} ({op.param}) is not contiguous along the head dim")
        if shape.k.col_stride != 1 and shape.k.row_stride != 1:
            return Decision.no(f"K ({shape.k.param}) is contiguous along neither keys nor dim")
        return Decision.yes(f"attention {shape.batch} x {shape.seq_q} x {shape.seq_kv} x "
                            f"{shape.head_dim}: both products on the cube, online softmax")

    @staticmethod
    def schedule(func, soc, knobs: AttentionKnobs | None = None):
        """(PrimFunc, Tiling) for ``soc``. The PrimFunc is ``func`` with its first loop marked
        as the core loop: the kernel's structure comes from the plan, not from loop nests."""
        decision = AttentionSchedule.applies(func)
        if not decision:
            raise TilingError(f"attention template does not apply: {decision.reason}")
        shape = attention_shape(func)
        tiling = plan_attention(shape, soc, knobs or AttentionKnobs())
        sch = tvm.s_tir.Schedule(func)
        loops = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[0])
        sch.annotate(loops[0], CORE_LOOP_ANNOTATION, 1)
        return sch.mod["main"], tiling

    @staticmethod
    def knob_space(func, soc) -> list[AttentionKnobs]:
        """The default first, then query/key blocks of 32..128 and half the cores."""
        space = [AttentionKnobs()]
        for base_q in (32, 64, 128):
            for base_kv in (32, 64, 128):
                for cores in (None, max(1, soc.ai_cores // 2)):
                    knobs = AttentionKnobs(base_q, base_kv, cores)
                    if knobs not in space:
                        space.append(knobs)
        return space


def _cube_fits(shape, soc, base_q, base_kv, d16, base_k_qk) -> str:
    """Why the two Matmul objects' L1/L0 reservations do not fit together ('' when they do)."""
    e = dtype_bytes(shape.dtype)
    need = {
        "L1": (base_q * base_k_qk + base_k_qk * base_kv) * e + (base_q * base_kv
                                                                 + base_kv * d16) * e,
        "L0A": (base_q * base_k_qk + base_q * base_kv) * e,
        "L0B": (base_k_qk * base_kv + base_kv * d16) * e,
        "L0C": (base_q * base_kv + base_q * d16) * 4,
    }
    have = {"L1": soc.l1_bytes, "L0A": soc.l0a_bytes, "L0B": soc.l0b_bytes, "L0C": soc.l0c_bytes}
    over = [f"{k} {need[k]} > {have[k]}" for k in need if need[k] > have[k]]
    return ", ".join(over)


def ub_layout(shape, base_q: int, base_kv: int) -> dict:
    """Bytes of every UB buffer the kernel reserves (InitBuffer), by buffer name."""
    e = dtype_bytes(shape.dtype)
    pitch_kv = round_up(base_kv, 8)
    pitch_d = round_up(shape.head_dim, 8)  # float rows of the product tiles (ND_ALIGN)
    layout = {"sBuf": base_q * pitch_kv * 4, "oBuf": base_q * pitch_d * 4,
              "accBuf": base_q * pitch_d * 4, "statBuf": 5 * round_up(base_q, 8) * 4,
              "workBuf": 64 * 4}
    if e == 2:
        layout["pBuf"] = base_q * pitch_kv * 2
        layout["outBuf"] = base_q * round_up(shape.head_dim, 16) * 2
    if shape.mask is not None:
        rows = 1 if shape.mask.row_stride == 0 else base_q
        layout["maskBuf"] = rows * round_up(base_kv, 32 // e) * e
        if e == 2:
            layout["maskFBuf"] = rows * pitch_kv * 4
    if shape.keep is not None:  # bool bytes, then a row of them as half, then its bit mask
        rows = 1 if shape.keep.row_stride == 0 else base_q
        layout["keepBuf"] = rows * round_up(base_kv, 32)
        layout["keepHBuf"] = round_up(base_kv, 16) * 2
        layout["keepBitsBuf"] = ceil_div(base_kv, 8)
    return {k: round_up(v, 32) for k, v in layout.items()}


def plan_attention(shape: AttentionShape, soc, knobs: AttentionKnobs) -> Tiling:
    """Blocks, cores, UB and the exact GM traffic of the kernel for ``shape`` on ``soc``."""
    e = dtype_bytes(shape.dtype)
    c0 = 32 // e
    for name in ("base_q", "base_kv"):
        value = getattr(knobs, name)
        if value is not None and (value % FRACTAL or not FRACTAL <= value <= 128):
            raise TilingError(f"{name}={value} must be a multiple of {FRACTAL} in 16..128")
    if shape.head_dim > 256:
        raise TilingError(f"head dim {shape.head_dim} > 256: the PV tile would not fit L0C")
    base_q = min(knobs.base_q or 64, round_up(shape.seq_q, FRACTAL))
    base_kv = min(knobs.base_kv or (128 if e == 2 else 64), round_up(shape.seq_kv, FRACTAL))
    d16 = round_up(shape.head_dim, FRACTAL)
    base_k_qk = min(64, round_up(shape.head_dim, c0))
    while True:
        over = _cube_fits(shape, soc, base_q, base_kv, d16, base_k_qk)
        if not over:
            break
        if base_kv > FRACTAL and knobs.base_kv is None:
            base_kv -= FRACTAL
        else:
            raise TilingError(f"the two Matmul objects do not fit {soc.name}: {over}")
    ub = sum(ub_layout(shape, base_q, base_kv).values())
    if ub > soc.ub_bytes - UB_RESERVED_BYTES:
        raise TilingError(f"attention needs {ub} UB bytes; {soc.name} has {soc.ub_bytes}")
    blocks_q = ceil_div(shape.seq_q, base_q)
    total = shape.batch * blocks_q
    cores = max(1, min(knobs.cores or soc.ai_cores, soc.ai_cores, total))
    per_core = ceil_div(total, cores)
    used = ceil_div(total, per_core)
    traffic = _traffic(shape, soc, base_q, base_kv, base_k_qk)
    if shape.fill_param is not None:  # the Where's fill: read once per core
        traffic["tensor_read_bytes"] += used * e
    params = {"batch": shape.batch, "seq_q": shape.seq_q, "seq_kv": shape.seq_kv,
              "head_dim": shape.head_dim, "base_q": base_q, "base_kv": base_kv,
              "base_k_qk": base_k_qk, "d16": d16, "blocks_q": blocks_q,
              "scale": shape.scale, "mask_coef": shape.mask_coef,
              "keep": shape.keep is not None, "mask_inside": shape.mask_inside,
              "data_copy_pad": bool(soc.has_data_copy_pad),
              "scalar_gather_elems": _scalar_tails(shape, soc, base_q, base_kv), **traffic}
    return Tiling("attention", total, used, per_core, 1, per_core, 1, 0, ub, soc.ub_bytes,
                  traffic["tensor_read_bytes"] + traffic["workspace_read_bytes"],
                  traffic["tensor_write_bytes"] + traffic["workspace_write_bytes"],
                  shape.head_dim, params)


def _scalar_tails(shape, soc, base_q, base_kv) -> int:
    """Elements moved on the scalar unit where ``soc`` lacks DataCopyPad: each output row's,
    each mask and keep block row's part past its whole 32-byte blocks (0 with DataCopyPad)."""
    if soc.has_data_copy_pad:
        return 0
    c0 = 32 // dtype_bytes(shape.dtype)
    tails = shape.seq_q * (shape.head_dim % c0)
    if shape.mask is not None:
        for q in pieces(shape.seq_q, base_q):
            rows = 1 if shape.mask.row_stride == 0 else q
            tails += sum(rows * (kv % c0) for kv in pieces(shape.seq_kv, base_kv))
    if shape.keep is not None:  # bool bytes: 32 a block
        for q in pieces(shape.seq_q, base_q):
            rows = 1 if shape.keep.row_stride == 0 else q
            tails += sum(rows * (kv % 32) for kv in pieces(shape.seq_kv, base_kv))
    return shape.batch * tails


def _traffic(shape, soc, base_q, base_kv, base_k_qk) -> dict:
    """GM bytes as the kernel moves them (emulator README, "Cube"): per score tile, Q's rows
    and K's block over the head dim; the mask block; V's block; the output rows once. On 2201
    the score tile and the product tile go AIC -> workspace -> UB and the probabilities
    UB -> workspace -> L1 (A from the UB): workspace bytes, counted apart from the tensors'."""
    e = dtype_bytes(shape.dtype)
    c0 = 32 // e
    split = soc.npu_arch == 2201
    t_read = w_read = w_write = macs = 0
    for q in pieces(shape.seq_q, base_q):
        for kv in pieces(shape.seq_kv, base_kv):
            t_read += (q + kv) * shape.head_dim * e + kv * shape.head_dim * e
            if shape.mask is not None:
                t_read += (1 if shape.mask.row_stride == 0 else q) * kv * e
            if shape.keep is not None:  # the Where's bool condition, a byte an element
                t_read += (1 if shape.keep.row_stride == 0 else q) * kv
            macs += round_up(q, FRACTAL) * round_up(kv, FRACTAL) * sum(
                round_up(k, c0) for k in pieces(shape.head_dim, base_k_qk))
            macs += round_up(q, FRACTAL) * round_up(shape.head_dim, FRACTAL) * \
                round_up(kv, c0)
            if split:
                staged = q * kv * SCORE_BYTES + q * kv * e + q * shape.head_dim * SCORE_BYTES
                w_read += staged
                w_write += staged
    b = shape.batch
    return {"tensor_read_bytes": b * t_read,
            "tensor_write_bytes": b * shape.seq_q * shape.head_dim * e,
            "workspace_read_bytes": b * w_read, "workspace_write_bytes": b * w_write,
            "cube_macs": b * macs}
