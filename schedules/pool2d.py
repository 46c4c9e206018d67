"""Pool2dSchedule: NCHW MaxPool / AveragePool on the vector unit, elementwise epilogue fused.

Recognises the PrimFunc that LegalizeOps (TOPI) makes for ``max_pool2d`` / ``avg_pool2d``: an
optional ``pad_temp`` block (``if_then_else(in range, x, pad value)``), a reduction over the
window (``max`` or ``+``) and, for the average, a block dividing by the window's count.
Elementwise blocks after it (ReLU, a per-channel scale, a residual Add) are the epilogue, run
on each output row; elementwise blocks before it that read one whole tensor (ReLU, a folded
scale) are the prologue, run in place on each input row copied into the UB.

Method. An output row (one plane ``n * C + c``, one ``oh``) is the unit of work; a tile is
either ``rows_per_tile`` output rows of one plane, or ``planes_per_tile`` whole planes when a
plane fits the UB. Tiles go to the AI cores in contiguous ranges. Per tile the input rows the
windows need (``kh + (rows - 1) * sh`` rows, clipped to the image) are copied into the UB once
(one multi-burst DataCopyPad, each row 32-byte aligned). Per output row the window is reduced
separably, because vector instructions only take 32-byte aligned, contiguous operands:

1. vertically, ``Max``/``Add`` of the ``kh`` input rows (whole aligned rows, any stride and
   dilation; rows in the padding are skipped, which is what their pad value would give) into a
   row buffer whose left/right padding columns hold the pad value (filled once per core);
2. horizontally, one vector ``Gather`` with byte offsets built once per core puts the ``kw``
   taps of every output column side by side (strided views: ``ow * sw + kx * dw``), then
   ``kw - 1`` count-form ``Max``/``Add`` over ``OW`` elements reduce them.

The average divides by ``count_h(oh) * count_w(ow)``; the template checks that TOPI's divisor
is that product, with each axis counting taps inside ``[lo, hi)`` (the image for
``count_include_pad=0``, the padded image without the ceil-mode overhang for 1), so the kernel
builds the column counts once per core and scales each row with one ``Muls`` and one ``Div``
(one rounding, as TOPI's division). This costs ``kh - 1 + kw`` vector passes per output row
instead of ``kh * kw`` for a tap-by-tap gather, needs no transposition (the emulator has none)
and reads every input row from GM once per tile (rows shared by two tiles: twice).

Example
-------
>>> from tvm_ascend.schedules import Pool2dSchedule           # doctest: +SKIP
>>> scheduled, tiling = Pool2dSchedule.schedule(prim_func, get_soc("Ascend910B1"))
>>> tiling.params["kernel"], tiling.params["rows_per_tile"]  # doctest: +SKIP
([3, 3], 56)
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import tvm
from tvm.sym.analyzer import Analyzer

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .conv2d import _at
from .row_reduce import RowAccessKind, _blocks, _reduce_vars, _reducer, program_dtypes, \
    row_program
from .tile_values import unsupported_construct, uses_var
from .tiling import ceil_div, dtype_bytes, round_up
from .tiling import BLOCK_BYTES, CORE_LOOP_ANNOTATION, SUPPORTED_DTYPES, Tiling, \
    UB_RESERVED_BYTES
from .tir_walk import BufferLoad, Call, load_buffer, param_buffers

MAX_BURSTS = 4095  # DataCopyPad blockCount limit: rows per copy
EPILOGUE_KINDS = (RowAccessKind.ROWS, RowAccessKind.ROW_SCALAR, RowAccessKind.SCALAR)
_SHAPES: OrderedDict = OrderedDict()  # pool_shape's memo
_SHAPES_LOCK = threading.Lock()


@dataclass(frozen=True)
class Pool2dKnobs:
    """Tunable choices of the pooling template (the cost model searches these)."""

    cores: int | None = None          # None: every vector block that gets work
    rows_per_tile: int | None = None  # None: as many output rows (or whole planes) as fit
    double_buffer: bool = True


@dataclass(frozen=True)
class PoolShape:
    """One NCHW pooling ``out[n, c, oh, ow] = reduce x[n, c, oh*sh - pt + ky*dh, ...]``."""

    kind: str        # "max" or "avg"
    n: int
    c: int
    h: int
    w: int
    oh: int
    ow: int
    kernel: tuple    # (kh, kw)
    stride: tuple
    dilation: tuple
    pad: tuple       # (top, left); bottom/right (and ceil mode) only show as output size
    pad_value: float  # what a tap in the padding reads (the reduction's identity or 0)
    init: float      # the reduction's initial value (max: lowest finite value)
    count_bounds: tuple  # avg: ((lo_h, hi_h), (lo_w, hi_w)) of the taps the divisor counts
    dtype: str
    x_name: str      # the pooled tensor: a GM input, or what the prologue computes
    out_index: int   # index of the pool's output block (the divide for avg)
    prologue: int = 0  # elementwise blocks before the pool (and its padding)

    @property
    def planes(self) -> int:
        return self.n * self.c

    def input_rows(self, oh0: int, oh1: int) -> tuple[int, int]:
        """[lo, hi) of the input rows that output rows [oh0, oh1) read, clipped to the image."""
        (kh, _), (sh, _), (dh, _), (pt, _) = self.kernel, self.stride, self.dilation, self.pad
        lo = max(0, oh0 * sh - pt)
        hi = min(self.h, (oh1 - 1) * sh - pt + (kh - 1) * dh + 1)
        return lo, max(lo, hi)


# ---- recognising the TOPI PrimFunc ---------------------------------------------------------
_NP_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Min": np.minimum,
              "Max": np.maximum, "FloorDiv": np.floor_divide, "FloorMod": np.mod,
              "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
              "EQ": np.equal, "NE": np.not_equal, "And": np.logical_and, "Or": np.logical_or}


def evaluate(expr, values: list) -> np.ndarray:
    """``expr`` (index arithmetic, comparisons, logic, min/max, casts) evaluated on numpy
    arrays; ``values``: ``(var, array)`` for every free variable. ValueError for another
    construct.

    Examples
    --------
    >>> y = tvm.tirx.Var("y", "int64")                            # doctest: +SKIP
    >>> evaluate(tvm.tirx.min(y * 2, 5), [(y, np.arange(4))])     # doctest: +SKIP
    array([0, 2, 4, 5])
    """
    kind = type(expr).__name__
    if kind in ("IntImm", "FloatImm"):
        return np.asarray(expr.value)
    if kind == "Var":
        for var, value in values:
            if var.same_as(expr):
                return value
        raise ValueError(f"free variable {expr}")
    if kind in _NP_BINARY:
        return _NP_BINARY[kind](evaluate(expr.a, values), evaluate(expr.b, values))
    if kind == "Cast":
        return evaluate(expr.value, values)
    if kind == "Not":
        return np.logical_not(evaluate(expr.a, values))
    raise ValueError(f"{kind} in an index expression")


def _axis_counts(extent_out, stride, dilation, pad, kernel, lo, hi) -> np.ndarray:
    """Per output coordinate, the taps at input coordinates in ``[lo, hi)``."""
    pos = np.arange(extent_out)[:, None] * stride - pad + np.arange(kernel)[None, :] * dilation
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


def _pad_block(block):
    """(x load, (top, left), pad value, condition or None) of a pad_temp block, or a reason."""
    store = block.body
    if type(store).__name__ != "BufferStore":
        return "the pad block is not one store"
    value, pad_value, cond = store.value, None, None
    if isinstance(value, Call) and value.op.name.endswith("if_then_else"):
        cond, value, other = value.args
        if type(other).__name__ not in ("FloatImm", "IntImm"):
            return "the padding is not a constant"
        pad_value = float(other.value)
    if not isinstance(value, BufferLoad) or len(value.indices) != 4:
        return "the pad block does not copy a 4-D tensor"
    ivs = [iv.var for iv in block.iter_vars]
    if len(ivs) != 4:
        return "the pad block is not 4-D"
    zero = {v: 0 for v in ivs}
    offsets = [_at(idx, zero) for idx in value.indices]
    if None in offsets or offsets[0] != 0 or offsets[1] != 0:
        return "the pad block shifts the batch or channel axis"
    for axis, idx in enumerate(value.indices):  # x[i0, i1, i2 - top, i3 - left]
        if _at(idx, {**zero, ivs[axis]: 1}) != offsets[axis] + 1:
            return "the pad block is not a shifted copy"
    return value, (-offsets[2], -offsets[3]), pad_value, cond


def _check_pad_condition(block, cond, pad, x) -> bool:
    """Whether ``pad_temp[h, w]`` reads x exactly where ``(h - top, w - left)`` is inside x."""
    ivs = [iv.var for iv in block.iter_vars]
    ph, pw = (int(iv.dom.extent) for iv in block.iter_vars[2:])
    h_idx, w_idx = np.arange(ph)[:, None], np.arange(pw)[None, :]
    inside = ((h_idx - pad[0] >= 0) & (h_idx - pad[0] < int(x.shape[2]))
              & (w_idx - pad[1] >= 0) & (w_idx - pad[1] < int(x.shape[3])))
    if cond is None:
        return bool(inside.all())
    try:
        mask = evaluate(cond, [(ivs[0], np.asarray(0)), (ivs[1], np.asarray(0)),
                               (ivs[2], h_idx), (ivs[3], w_idx)])
    except ValueError:
        return False
    return bool(np.array_equal(np.broadcast_to(mask, inside.shape), inside))


def _window(pool, source_load):
    """(stride, dilation) of ``source[n, c, y*sh + ry*dh, x*sw + rx*dw]`` or a reason."""
    spatial = [iv.var for iv in pool.iter_vars if int(iv.iter_type) == 0]
    reduce_vars = [iv.var for iv in _reduce_vars(pool)]
    if len(spatial) != 4 or len(reduce_vars) != 2:
        return "the window reduction is not over (n, c, oh, ow) x (kh, kw)"
    nn, cc, yy, xx = spatial
    ry, rx = reduce_vars
    zero = {v: 0 for v in spatial + reduce_vars}
    idx = source_load.indices
    sh, dh = _at(idx[2], {**zero, yy: 1}), _at(idx[2], {**zero, ry: 1})
    sw, dw = _at(idx[3], {**zero, xx: 1}), _at(idx[3], {**zero, rx: 1})
    if None in (sh, dh, sw, dw) or min(sh, dh, sw, dw) < 1:
        return "the window is not strided over (oh, ow) and (kh, kw)"
    analyzer = Analyzer()
    for iv in pool.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    expected = [nn, cc, yy * sh + ry * dh, xx * sw + rx * dw]
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(idx, expected)):
        return "the window reads another layout than NCHW"
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(pool.body.indices, spatial)):
        return "the window result is not stored at (n, c, oh, ow)"
    return (sh, sw), (dh, dw)


def _divisor_bounds(divide, pool, shape_args):
    """((lo_h, hi_h), (lo_w, hi_w)) whose tap counts multiply to TOPI's divisor, or a reason."""
    value = divide.body.value
    if type(value).__name__ != "Div" or not isinstance(value.a, BufferLoad) or \
            not load_buffer(value.a).same_as(pool.body.buffer):
        return "the block after the window sum is not a division of it"
    spatial = [iv.var for iv in divide.iter_vars]
    if len(spatial) != 4:
        return "the average is not 4-D"
    analyzer = Analyzer()
    for iv in divide.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(value.a.indices, spatial)):
        return "the average reads the window sum in another layout"
    if any(uses_var(value.b, v) for v in spatial[:2]):
        return "the divisor depends on the batch or channel"
    h, w, oh, ow, (kh, kw), (sh, sw), (dh, dw), (pt, pl) = shape_args
    try:
        divisor = evaluate(value.b, [(spatial[2], np.arange(oh)[:, None]),
                                     (spatial[3], np.arange(ow)[None, :])])
    except ValueError as err:
        return f"the divisor is not an index expression ({err})"
    divisor = np.broadcast_to(np.asarray(divisor, dtype=np.float64), (oh, ow))
    fits = []
    for extent, out, s, d, p, k in ((h, oh, sh, dh, pt, kh), (w, ow, sw, dw, pl, kw)):
        fits.append([(lo, hi, _axis_counts(out, s, d, p, k, lo, hi))
                     for lo in (0, -p) for hi in range(extent, extent + k * d + s + p + 1)])
    for lo_h, hi_h, ch in fits[0]:
        if ch.min() < 1:
            continue
        for lo_w, hi_w, cw in fits[1]:
            if cw.min() >= 1 and np.array_equal(np.outer(ch, cw), divisor):
                return (lo_h, hi_h), (lo_w, hi_w)
    return "the divisor is not a product of per-axis window counts"


def _prologue_reason(blocks, x) -> str:
    """Why ``blocks`` (everything before the padding and the window) is not an elementwise
    prologue computing ``x`` over its own (n, c, h, w), or "" when it is one."""
    if not blocks or not blocks[-1].body.buffer.same_as(x):
        return "the pooled tensor is computed in the group by something else than a prologue"
    for block in blocks:
        if _reduce_vars(block) or type(block.body).__name__ != "BufferStore":
            return f"block {block.name_hint} before the pool is not elementwise"
    extents = [int(iv.dom.extent) for iv in blocks[-1].iter_vars]
    if extents != [int(d) for d in x.shape]:
        return f"the prologue iterates {extents}, not the pooled tensor's shape"
    return ""


def pool_shape(func):
    """The pooling of ``func`` as a ``PoolShape``, or a string saying why it is not one.

    Memoised per function object: the planner, the template and the printer ask again.

    Examples
    --------
    >>> shape = pool_shape(prim_func)                  # doctest: +SKIP
    >>> shape.kind, shape.kernel, shape.stride, shape.pad
    ('max', (3, 3), (2, 2), (1, 1))
    """
    key = func.__hash__()
    with _SHAPES_LOCK:
        hit = _SHAPES.get(key)
        if hit is not None and hit[0].same_as(func):
            return hit[1]
    shape = _analyse(func)
    with _SHAPES_LOCK:
        _SHAPES[key] = (func, shape)  # the function is kept so its address is not reused
        while len(_SHAPES) > 256:
            _SHAPES.popitem(last=False)
    return shape


def _analyse(func):
    blocks = _blocks(tvm.s_tir.Schedule(func))
    index = next((i for i, b in enumerate(blocks) if len(_reduce_vars(b)) == 2), None)
    if index is None:
        return "no reduction over a 2-D window"
    pool = blocks[index]
    if type(pool.body).__name__ != "BufferStore":
        return "the window reduction is not one store"
    found = _reducer(pool.body)
    if found is None or found[0] not in ("max", "sum"):
        return "the window reduction is not a max or a sum"
    if not isinstance(found[1], BufferLoad):
        return ("the window reads a value computed in the group (a prologue before the pool); "
                "the kernel copies its input rows from GM")
    kind, source_load = found
    source = load_buffer(source_load)
    if len(source.shape) != 4:
        return "the pooled tensor is not 4-D (NCHW)"
    pad, pad_value, first = (0, 0), None, index
    inputs = {b.name for b in param_buffers(func)[0]}
    x = source
    if source.name not in inputs and index >= 1 and \
            blocks[index - 1].body.buffer.same_as(source):
        parsed = _pad_block(blocks[index - 1])
        if not isinstance(parsed, str):  # else the block before is a prologue, not padding
            x_load, pad, pad_value, cond = parsed
            x = load_buffer(x_load)
            if not _check_pad_condition(blocks[index - 1], cond, pad, x):
                return "the pad block is not the input padded with a constant"
            first = index - 1
    if x.name not in inputs:
        reason = _prologue_reason(blocks[:first], x)
        if reason:
            return reason
    window = _window(pool, source_load)
    if isinstance(window, str):
        return window
    stride, dilation = window
    init = pool.init.value if pool.init is not None else None
    if type(init).__name__ not in ("FloatImm", "IntImm"):
        return "the window reduction starts from a computed value"
    init = float(init.value)
    n, c, h, w = (int(d) for d in x.shape)
    _, _, oh, ow = (int(d) for d in pool.body.buffer.shape)
    kh, kw = (int(iv.dom.extent) for iv in _reduce_vars(pool))
    if kind == "sum" and (init != 0.0 or (pad_value or 0.0) != 0.0):
        return "a window sum that does not start from zero / pad with zero"
    pad_value = init if pad_value is None else pad_value
    bounds, out_index = (), index
    if kind == "sum":
        if index + 1 >= len(blocks):
            return "a window sum without the division of an average"
        bounds = _divisor_bounds(blocks[index + 1], pool, (h, w, oh, ow, (kh, kw), stride,
                                                           dilation, pad))
        if isinstance(bounds, str):
            return bounds
        out_index = index + 1
    dtypes = {str(x.dtype), str(pool.body.buffer.dtype), str(source.dtype),
              str(blocks[out_index].body.buffer.dtype)}
    if len(dtypes) != 1:
        return f"the pool mixes dtypes {sorted(dtypes)}"
    return PoolShape("max" if kind == "max" else "avg", n, c, h, w, oh, ow, (kh, kw), stride,
                     dilation, pad, pad_value, init, bounds, dtypes.pop(), x.name, out_index,
                     first)


def epilogue_program(blocks, func, shape: PoolShape):
    """The epilogue (blocks after the pool, inlined into one) as a row program over the output
    rows ``(n, c, oh)`` of ``ow`` elements, or None without an epilogue.

    Examples
    --------
    >>> program = epilogue_program(_blocks(sch), func, pool_shape(func))  # doctest: +SKIP
    >>> program.inputs                        # a per-channel scale: one value per row
    {'p1': <RowAccessKind.ROW_SCALAR: 'row'>}
    """
    if len(blocks) <= shape.out_index + 1:
        return None
    program = row_program(blocks[shape.out_index + 1:], func, shape.planes * shape.oh,
                          shape.ow, given=[blocks[shape.out_index].body.buffer])
    for name, kind in program.inputs.items():
        if kind not in EPILOGUE_KINDS:
            raise TilingError(f"pool epilogue input {name} read as {kind.value}: not printed yet")
    return program


def prologue_program(blocks, func, shape: PoolShape):
    """The prologue (blocks before the pool, inlined into one) as a row program over the input
    rows ``(n, c, h)`` of ``w`` elements, or None without a prologue. It runs in place on the
    input rows in the UB, before the padding (TOPI pads the prologue's result).

    Examples
    --------
    >>> program = prologue_program(_blocks(sch), func, pool_shape(func))  # doctest: +SKIP
    >>> copied_input(program)                  # the one tensor the kernel copies rows of
    'p0'
    """
    if not shape.prologue:
        return None
    program = row_program(blocks[:shape.prologue], func, shape.planes * shape.h, shape.w)
    for name, kind in program.inputs.items():
        if kind not in EPILOGUE_KINDS:
            raise TilingError(f"pool prologue input {name} read as {kind.value}: not printed yet")
    copied_input(program)
    return program


def copied_input(prologue) -> str:
    """The GM tensor whose rows a prologue reads (the kernel copies it, as it copies x)."""
    rows = [n for n, k in prologue.inputs.items() if k is RowAccessKind.ROWS]
    if len(rows) != 1:
        raise TilingError(f"the pool's prologue reads {len(rows)} whole tensors; the kernel "
                          "copies the rows of one")
    return rows[0]


class Pool2dSchedule:
    """Template for MaxPool / AveragePool groups (NCHW) with elementwise epilogues."""

    name = "pool2d"

    @staticmethod
    def applies(func) -> Decision:
        """Decision: an NCHW max/avg pool of float16/float32 read from GM, with elementwise
        blocks after it only, and one output.

        Examples
        --------
        >>> Pool2dSchedule.applies(prim_func).reason    # doctest: +SKIP
        'max pool 3x3 stride 2x2 on the vector unit (...)'
        """
        shape = pool_shape(func)
        if isinstance(shape, str):
            return Decision.no(f"not an NCHW max/avg pool the template prints: {shape}")
        if shape.dtype not in SUPPORTED_DTYPES:
            return Decision.no(f"pooling in {shape.dtype}; the vector kernel takes "
                               "float16/float32")
        blocks = _blocks(tvm.s_tir.Schedule(func))
        for block in blocks[:shape.prologue] + blocks[shape.out_index + 1:]:
            if _reduce_vars(block):
                return Decision.no(f"block {block.name_hint} reduces after the pool")
            if type(block.body).__name__ != "BufferStore":
                return Decision.no(f"block {block.name_hint} is not a single store")
            construct = unsupported_construct(block.body.value)
            if construct:
                return Decision.no(f"TIR construct {construct} has no vector instruction")
        inputs, outputs = param_buffers(func)
        if len(outputs) != 1:
            return Decision.no("the pool2d template prints one output")
        other = sorted({str(b.dtype) for b in list(inputs) + list(outputs)} - {shape.dtype})
        if other:
            return Decision.no(f"GM tensors in {', '.join(other)} next to {shape.dtype} "
                               "operands: the kernel computes in one dtype")
        (kh, kw), (sh, sw) = shape.kernel, shape.stride
        return Decision.yes(f"{shape.kind} pool {kh}x{kw} stride {sh}x{sw} on the vector unit "
                            "(vertical Max/Add over rows, horizontal Gather + Max/Add)")

    @staticmethod
    def schedule(func, soc, knobs: Pool2dKnobs | None = None):
        """(scheduled PrimFunc, Tiling); ``knobs`` (Pool2dKnobs) as the search chose.

        The epilogue is inlined into one block; the window block's loops are fused and split
        as the plan cuts the work, ``[cores, tiles_per_core, units per tile]`` over
        ``(plane, chunk)``, the core loop annotated ``ascend.block_idx``.

        Examples
        --------
        >>> scheduled, tiling = Pool2dSchedule.schedule(func, soc, Pool2dKnobs(cores=1))
        ... # doctest: +SKIP
        """
        knobs = knobs or Pool2dKnobs()
        decision = Pool2dSchedule.applies(func)
        if not decision:
            raise TilingError(f"pool2d template does not apply: {decision.reason}")
        shape = pool_shape(func)
        sch = tvm.s_tir.Schedule(func)
        block_rvs = sch.get_child_blocks(sch.get_sblock("root"))
        # the epilogue and the prologue as one block each, as the printer reads them
        for block_rv in block_rvs[shape.out_index + 1:-1] + block_rvs[:max(0, shape.prologue
                                                                            - 1)]:
            sch.compute_inline(block_rv)
        inlined = sch.mod["main"]
        shape, blocks = pool_shape(inlined), _blocks(sch)
        tiling = plan(shape, epilogue_program(blocks, inlined, shape), soc, knobs,
                      prologue_program(blocks, inlined, shape))
        p = tiling.params
        pool_rv = sch.get_child_blocks(sch.get_sblock("root"))[shape.out_index - (
            1 if shape.kind == "avg" else 0)]
        n, c, y, *_ = sch.get_loops(pool_rv)
        plane = sch.fuse(n, c)
        chunk, _ = sch.split(y, [p["chunks"], p["rows_per_tile"]])
        unit = sch.fuse(plane, chunk)
        core, _, _ = sch.split(unit, [tiling.cores, tiling.tiles_per_core, tiling.tile_len])
        sch.annotate(core, CORE_LOOP_ANNOTATION, 1)
        return sch.mod["main"], tiling

    @staticmethod
    def knob_space(func, soc) -> list[Pool2dKnobs]:
        """Candidate knobs, the default first: fewer cores, fewer rows per tile, single
        buffering. ``schedule`` may still refuse one (TilingError); searches drop it."""
        _, default = Pool2dSchedule.schedule(func, soc)
        rows = default.params["rows_per_tile"]
        space = [Pool2dKnobs()]
        for double in (True, False):
            for cores in sorted({max(1, soc.vector_blocks // d) for d in (1, 2, 4)},
                                reverse=True):
                for tile in [None] + sorted({rows // d for d in (2, 4) if rows // d >= 1},
                                            reverse=True):
                    knobs = Pool2dKnobs(None if cores == soc.vector_blocks else cores, tile,
                                        double)
                    if knobs not in space:
                        space.append(knobs)
        return space


# ---- planning ------------------------------------------------------------------------------
def layout(shape: PoolShape) -> dict:
    """UB row pitches (elements): input rows ``in_pitch``, output rows ``out_pitch``, and the
    vertical-result row ``v_pitch`` whose data start at ``v_left`` (32-byte aligned) with the
    pad value around it, so every horizontal tap ``v_left - left + ow*sw + kx*dw`` lies in it.

    Examples
    --------
    >>> layout(pool_shape(func))           # fp32, W = 15, 3x3 stride 1, pad 1  # doctest: +SKIP
    {'in_pitch': 16, 'out_pitch': 16, 'v_left': 8, 'v_pitch': 24}
    """
    blk = BLOCK_BYTES // dtype_bytes(shape.dtype)
    (_, kw), (_, sw), (_, dw), (_, left) = shape.kernel, shape.stride, shape.dilation, shape.pad
    v_left = round_up(left, blk)
    last_tap = v_left - left + (shape.ow - 1) * sw + (kw - 1) * dw
    return {"in_pitch": round_up(shape.w, blk), "out_pitch": round_up(shape.ow, blk),
            "v_left": v_left, "v_pitch": round_up(max(v_left + shape.w, last_tap + 1), blk)}


def _slots(program) -> int:
    """Row buffers a row program needs: intermediates and temporaries."""
    return (len(program.intermediates) + program.temp_slots) if program else 0


def _ub_bytes(shape: PoolShape, program, in_rows: int, out_rows: int, nbuf: int,
              prologue=None) -> int:
    """UB bytes the printed kernel reserves with InitBuffer (checked against the emulator)."""
    elem, lay = dtype_bytes(shape.dtype), layout(shape)
    kw = shape.kernel[1]
    streamed = sum(1 for k in program.inputs.values() if k is RowAccessKind.ROWS) \
        if program else 0
    slots = _slots(program)
    tile = lambda n: round_up(n, BLOCK_BYTES)  # noqa: E731 - InitBuffer rounds every buffer
    fixed = (tile(lay["v_pitch"] * elem) + tile(kw * lay["out_pitch"] * 4)
             + tile(kw * lay["out_pitch"] * elem) + tile(slots * lay["out_pitch"] * elem)
             + tile(_slots(prologue) * lay["in_pitch"] * elem))
    if shape.kind == "avg":
        fixed += 2 * tile(lay["out_pitch"] * elem)  # column counts, one row's divisors
    per_tile = tile(in_rows * lay["in_pitch"] * elem) + \
        (1 + streamed) * tile(out_rows * lay["out_pitch"] * elem)
    return fixed + nbuf * per_tile


def plan(shape: PoolShape, program, soc, knobs: Pool2dKnobs = Pool2dKnobs(),
         prologue=None) -> Tiling:
    """The tiling of ``shape`` on ``soc``: rows or planes per tile, cores, UB bytes, GM bytes.

    Units are (plane, chunk of ``rows_per_tile`` output rows); a tile is one unit, or
    ``planes_per_tile`` whole planes when a plane fits the UB. With fewer planes than cores the
    planes are cut into chunks so every core works. GM bytes are what the printed kernel moves:
    each chunk's input rows (clipped to the image; rows shared by two chunks twice), the
    epilogue's inputs, the output once. Raises TilingError when one output row does not fit.

    Examples
    --------
    >>> t = plan(pool_shape(func), None, get_soc("Ascend910B1"))   # doctest: +SKIP
    >>> t.cores, t.params["chunks"], t.params["planes_per_tile"]
    (40, 1, 2)
    """
    for where, prog in (("prologue", prologue), ("epilogue", program)):
        if prog is not None and any(dtype_bytes(d) > dtype_bytes(shape.dtype)
                                    for d in program_dtypes(prog)):
            raise TilingError(f"the pool {where} computes in a wider dtype than the pool")
    if program is not None:
        streamed = sum(1 for k in program.inputs.values() if k is RowAccessKind.ROWS)
        if 1 + streamed > soc.max_live_buffers_per_position:
            raise TilingError(f"{streamed} streamed epilogue inputs exceed the live VECIN "
                              "buffers")
    nbuf = 2 if knobs.double_buffer else 1
    budget = soc.ub_bytes - UB_RESERVED_BYTES
    planes, oh = shape.planes, shape.oh

    def rows_in(rows):
        return max(hi - lo for lo, hi in (shape.input_rows(o, min(oh, o + rows))
                                          for o in range(0, oh, rows)))

    def fits(planes_per_tile, rows):
        bursts = planes_per_tile * max(rows_in(rows), rows)  # one DataCopyPad per tile
        return bursts <= MAX_BURSTS and _ub_bytes(
            shape, program, planes_per_tile * rows_in(rows), planes_per_tile * rows, nbuf,
            prologue) <= budget

    cores_max = max(1, min(knobs.cores or soc.vector_blocks, soc.vector_blocks))
    if not fits(1, 1):
        raise TilingError(f"one output row of {shape.ow} (input rows of {shape.w}) needs "
                          f"{_ub_bytes(shape, program, rows_in(1), 1, nbuf, prologue)} UB bytes, "
                          f"more than {budget} on {soc.name}: rows wider than the UB are not "
                          "split")
    row_cap = min(oh, MAX_BURSTS)
    if knobs.rows_per_tile is not None:
        if not 1 <= knobs.rows_per_tile <= row_cap:
            raise TilingError(f"rows_per_tile={knobs.rows_per_tile} must be in 1..{row_cap}")
        row_cap = knobs.rows_per_tile
    rows, too_many = 1, row_cap + 1  # fits(1, rows) holds, fits(1, too_many) does not
    while too_many - rows > 1:  # the UB bytes grow with the rows: bisect
        mid = (rows + too_many) // 2
        rows, too_many = (mid, too_many) if fits(1, mid) else (rows, mid)
    if planes < cores_max and knobs.rows_per_tile is None:
        # fewer planes than cores: cut the planes into row chunks so that every core works
        rows = min(rows, ceil_div(oh, ceil_div(cores_max, planes)))
    chunks = ceil_div(oh, rows)
    rows = ceil_div(oh, chunks)  # balanced chunks
    group = 1
    if chunks == 1:
        cap = min(ceil_div(planes, cores_max), MAX_BURSTS // max(oh, shape.h, 1))
        while group < cap and fits(group + 1, rows):
            group += 1
    units = planes * chunks
    cores = min(cores_max, ceil_div(units, group))
    tiles_per_core = ceil_div(ceil_div(units, cores), group)
    block_len = tiles_per_core * group
    cores = ceil_div(units, block_len)
    in_rows = rows_in(rows)
    elem = dtype_bytes(shape.dtype)
    copied = planes * sum(hi - lo for lo, hi in (shape.input_rows(o, min(oh, o + rows))
                                                 for o in range(0, oh, rows)))
    read = copied * shape.w * elem + _program_reads(program, planes * oh, shape.ow) + \
        _program_reads(prologue, copied, 0)
    # a scalar input is read once per core at Init, whichever program reads it
    read += cores * sum(dtype_bytes(b.dtype) for b in _scalar_inputs(program, prologue))
    write = planes * oh * shape.ow * elem
    lay = layout(shape)
    params = {"kind": shape.kind, "n": shape.n, "c": shape.c, "h": shape.h, "w": shape.w,
              "oh": oh, "ow": shape.ow, "kernel": list(shape.kernel),
              "stride": list(shape.stride), "dilation": list(shape.dilation),
              "pad": list(shape.pad), "rows_per_tile": rows, "chunks": chunks,
              "planes_per_tile": group, "in_rows": in_rows,
              "count_bounds": [list(b) for b in shape.count_bounds], **lay}
    return Tiling("pool2d", units, cores, block_len, group, tiles_per_core, nbuf,
                  program.temp_slots if program else 0,
                  _ub_bytes(shape, program, group * in_rows, group * rows, nbuf, prologue),
                  soc.ub_bytes,
                  read, write, shape.ow, params)


def _program_reads(program, rows: int, cols: int) -> int:
    """GM bytes a row program reads per row: streamed rows (none for the prologue, whose rows
    are the copied input, ``cols`` 0) and one value per row."""
    if program is None:
        return 0
    read, seen = 0, set()
    for kind, buffer, _ in program.loads.values():
        if buffer.name in seen or buffer.name not in program.inputs:
            continue
        seen.add(buffer.name)
        elem = dtype_bytes(buffer.dtype)
        read += {RowAccessKind.ROWS: rows * cols * elem, RowAccessKind.ROW_SCALAR: rows * elem,
                 RowAccessKind.SCALAR: 0}[kind]
    return read


def _scalar_inputs(*programs) -> list:
    """The SCALAR input buffers of ``programs``, once each by name."""
    found = {}
    for program in programs:
        for kind, buffer, _ in (program.loads.values() if program else ()):
            if program.inputs.get(buffer.name) is RowAccessKind.SCALAR:
                found.setdefault(buffer.name, buffer)
    return list(found.values())


__all__ = ["Pool2dSchedule", "Pool2dKnobs", "PoolShape", "pool_shape", "epilogue_program",
           "prologue_program", "copied_input", "plan", "layout", "evaluate"]
