"""Pool2dSchedule: NCHW MaxPool / AveragePool on the vector unit, elementwise epilogue fused.

Takes the pool ``pool_window.py`` reads back from the PrimFunc that LegalizeOps (TOPI) makes for
``max_pool2d`` / ``avg_pool2d`` (an optional ``pad_temp`` block, a reduction over the window and,
for the average, a block dividing by the window's count); this file plans and schedules it.
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

The average divides by ``count_h(oh) * count_w(ow)``; ``pool_window.py`` checks that TOPI's
divisor is that product, with each axis counting taps inside ``[lo, hi)`` (the image for
``count_include_pad=0``, the padded image without the ceil-mode overhang for 1), so the kernel
builds the column counts once per core and scales each row with one ``Muls`` and one ``Div``
(one rounding, as TOPI's division). This costs ``kh - 1 + kw`` vector passes per output row
instead of ``kh * kw`` for a tap-by-tap gather, needs no transposition (the emulator has none)
and reads every input row from GM once per tile (rows shared by two tiles: twice).

Example
-------
>>> from tvm_ascend.schedules import Pool2dSchedule           # doctest: +SKIP
>>> scheduled, tiling = Pool2dSchedule.schedule(prim_func, get_soc("Ascend910B1"))
>>> tiling.plan.shape.kernel, tiling.plan.rows_per_tile       # doctest: +SKIP
((3, 3), 56)
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .analysis.epilogue_checks import epilogue_refusal
from .analysis.pool_window import PoolShape, pool_shape
from .analysis.row_program import RowAccessKind, program_dtypes, row_program
from .tiling import ceil_div, dtype_bytes, round_up
from .tiling import BLOCK_BYTES, CORE_LOOP_ANNOTATION, SUPPORTED_DTYPES, KernelWork, \
    TemplatePlan, Tiling, UB_RESERVED_BYTES
from .analysis.tir_walk import cached_by_identity, root_blocks, schedule_blocks
from .template import Template

MAX_BURSTS = 4095  # DataCopyPad blockCount limit: rows per copy
EPILOGUE_KINDS = (RowAccessKind.ROWS, RowAccessKind.ROW_SCALAR, RowAccessKind.SCALAR)


@dataclass(frozen=True)
class Pool2dKnobs:
    """Tunable choices of the pooling template (the cost model searches these)."""

    cores: int | None = None          # None: every vector block that gets work
    rows_per_tile: int | None = None  # None: as many output rows (or whole planes) as fit
    double_buffer: bool = True


@dataclass(frozen=True)
class PoolLayout:
    """UB row pitches in elements (``layout``): input rows ``in_pitch`` apart, output rows
    ``out_pitch``; the vertical-result row is ``v_pitch`` long, its data from ``v_left`` (32-byte
    aligned) with the pad value around it."""

    in_pitch: int
    out_pitch: int
    v_left: int
    v_pitch: int


@dataclass(frozen=True)
class Pool2dPlan(TemplatePlan, template="pool2d"):
    """What the pooling template decided for one kernel, read by its printer.

    ``shape``: the pool as ``pool_shape`` read it from the function the printer gets (the
    epilogue and prologue inlined into one block each); ``layout``: its UB pitches. The
    work: ``rows_per_tile`` output rows per chunk of a plane, ``chunks`` chunks per plane,
    ``planes_per_tile`` units per tile (whole planes when above 1), ``in_rows`` input rows a
    chunk copies (its windows', clipped to the image). ``copied_input``: the GM tensor whose
    rows CopyIn brings in (the pooled tensor, or the prologue's one streamed input).
    """

    shape: PoolShape
    layout: PoolLayout
    rows_per_tile: int
    chunks: int
    planes_per_tile: int
    in_rows: int
    copied_input: str


def epilogue_program(blocks, func, shape: PoolShape):
    """The epilogue (blocks after the pool, inlined into one) as a row program over the output
    rows ``(n, c, oh)`` of ``ow`` elements, or None without an epilogue.

    Examples
    --------
    >>> program = epilogue_program(schedule_blocks(sch), func, pool_shape(func))  # doctest: +SKIP
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
    >>> program = prologue_program(schedule_blocks(sch), func, pool_shape(func))  # doctest: +SKIP
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


@dataclass(frozen=True)
class PoolAnalysis:
    """What the pooling template reads from a group, once for all its plans: ``prepared``, the
    group with its epilogue and prologue inlined into one block each (the function ``apply``
    schedules and the printer reads), the pool read back from it (``shape``) and its
    epilogue and prologue row programs (None without one)."""

    shape: PoolShape
    program: object   # RowProgram | None: the epilogue
    prologue: object  # RowProgram | None
    prepared: tvm.tirx.PrimFunc


@cached_by_identity
def _applies(func) -> Decision:
    shape = pool_shape(func)
    if isinstance(shape, str):
        return Decision.no(f"not an NCHW max/avg pool the template prints: {shape}")
    if shape.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"pooling in {shape.dtype}; the vector kernel takes float16/float32")
    blocks = root_blocks(func)
    refusal = epilogue_refusal(func, blocks[:shape.prologue] + blocks[shape.out_index + 1:],
                               "pool", "pool2d", shape.dtype)
    if refusal is not None:
        return refusal
    (kh, kw), (sh, sw) = shape.kernel, shape.stride
    return Decision.yes(f"{shape.kind} pool {kh}x{kw} stride {sh}x{sw} on the vector unit "
                        "(vertical Max/Add over rows, horizontal Gather + Max/Add)")


@cached_by_identity
def _analyse(func) -> PoolAnalysis:
    decision = _applies(func)
    if not decision:
        raise TilingError(f"pool2d template does not apply: {decision.reason}")
    shape = pool_shape(func)
    sch = tvm.s_tir.Schedule(func)
    block_rvs = sch.get_child_blocks(sch.get_sblock("root"))
    # the epilogue and the prologue as one block each, as the printer reads them
    for block_rv in block_rvs[shape.out_index + 1:-1] + block_rvs[:max(0, shape.prologue - 1)]:
        sch.compute_inline(block_rv)
    inlined = sch.mod["main"]
    shape, blocks = pool_shape(inlined), schedule_blocks(sch)
    return PoolAnalysis(shape, epilogue_program(blocks, inlined, shape),
                        prologue_program(blocks, inlined, shape), inlined)


class Pool2dSchedule(Template):
    """Template for MaxPool / AveragePool groups (NCHW) with elementwise epilogues."""

    name = "pool2d"
    Knobs = Pool2dKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        """Decision: an NCHW max/avg pool of float16/float32 read from GM, with elementwise
        blocks after it only, and one output.

        Examples
        --------
        >>> Pool2dSchedule.applies(prim_func).reason    # doctest: +SKIP
        'max pool 3x3 stride 2x2 on the vector unit (...)'
        """
        return _applies(func)

    @staticmethod
    def analyse(func) -> PoolAnalysis:
        """The group with its epilogue and prologue inlined into one block each, as the
        printer reads it, and the pool, epilogue and prologue read back from that
        (``PoolAnalysis``); TilingError where the template does not take the group."""
        return _analyse(func)

    @staticmethod
    def plan(analysis: PoolAnalysis, soc, knobs: Pool2dKnobs | None = None) -> Tiling:
        """The Tiling of the analysed pool on ``soc`` (``plan`` below); ``knobs``
        (Pool2dKnobs) as the search chose, None for the defaults.

        Examples
        --------
        >>> tiling = Pool2dSchedule.plan(Pool2dSchedule.analyse(func), soc, Pool2dKnobs(cores=1))
        ... # doctest: +SKIP
        """
        return plan(analysis.shape, analysis.program, soc, knobs or Pool2dKnobs(),
                    analysis.prologue)

    @staticmethod
    def apply(analysis: PoolAnalysis, tiling: Tiling):
        """The window block's loops fused and split as the plan cuts the work,
        ``[cores, tiles_per_core, units per tile]`` over ``(plane, chunk)``, the core loop
        annotated ``ascend.block_idx``."""
        shape, p = analysis.shape, tiling.plan
        sch = tvm.s_tir.Schedule(analysis.prepared)
        pool_rv = sch.get_child_blocks(sch.get_sblock("root"))[shape.out_index - (
            1 if shape.kind == "avg" else 0)]
        n, c, y, *_ = sch.get_loops(pool_rv)
        plane = sch.fuse(n, c)
        chunk, _ = sch.split(y, [p.chunks, p.rows_per_tile])
        unit = sch.fuse(plane, chunk)
        core, _, _ = sch.split(unit, [tiling.cores, tiling.tiles_per_core, tiling.tile_len])
        sch.annotate(core, CORE_LOOP_ANNOTATION, 1)
        return sch.mod["main"]

    @staticmethod
    def knob_space(func, soc) -> list[Pool2dKnobs]:
        """Candidate knobs, the default first: fewer cores, fewer rows per tile, single
        buffering. ``plan`` may still refuse one (TilingError); searches drop it."""
        default = Pool2dSchedule.plan(Pool2dSchedule.analyse(func), soc)
        rows = default.plan.rows_per_tile
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
def layout(shape: PoolShape) -> PoolLayout:
    """UB row pitches (elements): input rows ``in_pitch``, output rows ``out_pitch``, and the
    vertical-result row ``v_pitch`` whose data start at ``v_left`` (32-byte aligned) with the
    pad value around it, so every horizontal tap ``v_left - left + ow*sw + kx*dw`` lies in it.

    Examples
    --------
    >>> layout(pool_shape(func))           # fp32, W = 15, 3x3 stride 1, pad 1  # doctest: +SKIP
    PoolLayout(in_pitch=16, out_pitch=16, v_left=8, v_pitch=24)
    """
    blk = BLOCK_BYTES // dtype_bytes(shape.dtype)
    (_, kw), (_, sw), (_, dw), (_, left) = shape.kernel, shape.stride, shape.dilation, shape.pad
    v_left = round_up(left, blk)
    last_tap = v_left - left + (shape.ow - 1) * sw + (kw - 1) * dw
    return PoolLayout(round_up(shape.w, blk), round_up(shape.ow, blk), v_left,
                      round_up(max(v_left + shape.w, last_tap + 1), blk))


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
    fixed = (tile(lay.v_pitch * elem) + tile(kw * lay.out_pitch * 4)
             + tile(kw * lay.out_pitch * elem) + tile(slots * lay.out_pitch * elem)
             + tile(_slots(prologue) * lay.in_pitch * elem))
    if shape.kind == "avg":
        fixed += 2 * tile(lay.out_pitch * elem)  # column counts, one row's divisors
    per_tile = tile(in_rows * lay.in_pitch * elem) + \
        (1 + streamed) * tile(out_rows * lay.out_pitch * elem)
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
    >>> t.cores, t.plan.chunks, t.plan.planes_per_tile
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
    source = copied_input(prologue) if prologue else shape.x_name
    pool_plan = Pool2dPlan(shape, layout(shape), rows, chunks, group, in_rows, source)
    return Tiling("pool2d", units, cores, block_len, group, tiles_per_core, nbuf,
                  program.temp_slots if program else 0,
                  _ub_bytes(shape, program, group * in_rows, group * rows, nbuf, prologue),
                  soc.ub_bytes,
                  read, write, shape.ow,
                  work=KernelWork(steps=tiles_per_core, vector_repeats=min(block_len, units)),
                  plan=pool_plan)


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


__all__ = ["Pool2dSchedule", "Pool2dKnobs", "Pool2dPlan", "PoolLayout", "epilogue_program", "prologue_program",
           "copied_input", "plan", "layout"]
