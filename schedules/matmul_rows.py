"""MatmulRowsSchedule: a MatMul whose epilogue reduces over the product's rows, as one kernel.

A transformer's out-projection (MatMul -> bias -> residual Add) feeds a LayerNorm whose result is
all the next layer reads; Softmax over the product's N axis is the same shape of work. The
epilogue needs whole rows of C, so the product is cut along M only: one ``baseM x baseN`` base
tile spans every column (``baseN = N`` rounded up to 16), the cube accumulates it in L0C
(``baseM x baseN`` float32), and ``GetTensorC`` brings it to the UB, where the row program of
``schedules/row_reduce.py`` (mean, variance, rsqrt, scale, shift, ...) runs row by row before
the single write to GM. Rows too wide for L0C or the UB are refused with the numbers; the
planner then keeps the matmul and the row kernel apart. SoCs without DataCopyPad (310P, 910A)
take it too: the tiles move as the matmul template's do there (whole blocks, then the tails
on the scalar unit), and 310P's 256 KB L0C holds twice the rows of 910B's. On 910B the tall
form (panels of whole rows through the GM workspace) may run in CANN's 1:2 mix
(``MatmulRowsKnobs.aiv_ratio`` 2): each AIV a client with panels of its own, the two of an
AIC sharing its cube, L0 and L1, so the row epilogue runs on both vector cores.

The Tiling's template is ``matmul_rows`` and its plan a ``MatmulRowsPlan``, printed by
``codegen/kernels/matmul_rows.py``; the cost model's features count it as a matmul kernel
(the shipped tuning model was trained so).

Example
-------
>>> from tvm_ascend.soc import get_soc                                   # doctest: +SKIP
>>> MatmulRowsSchedule.applies(func)                                     # doctest: +SKIP
Decision(ok=True, reason='matmul 128x768 @ 768x768 with a row epilogue over N=768')
>>> _, tiling = MatmulRowsSchedule.schedule(func, get_soc("Ascend910B1"))  # doctest: +SKIP
>>> tiling.plan.base_n, tiling.plan.base_m                               # doctest: +SKIP
(768, 16)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import tvm

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .matmul import _base_k as matmul_base_k
from .matmul import (FRACTAL, MAX_BASE, MatmulPlan, MatmulShape, _balanced_singles, aiv_ratio,
                     cube_work, epilogue_program, l1_footprint, l1_reuse, matmul_shape,
                     matmul_traffic, overlap, product_round_trip, scalar_tail_elems)
from .analysis.row_program import (RowAccessKind, check_program_dtypes, input_dtypes,
                                   is_full_row_block, program_dtypes)
from .row_reduce import inline_row_blocks
from .analysis.tile_values import unsupported_construct
from .tiling import ceil_div, dtype_bytes, pieces, round_up
from .tiling import (ASYNC_EVENT_FETCHES, BLOCK_BYTES, SUPPORTED_DTYPES, KernelWork,
                     TemplatePlan, Tiling, UB_RESERVED_BYTES)
from .analysis.tir_walk import (cached_by_identity, param_buffers, reduce_iter_vars,
                                reducer_of, root_blocks, schedule_blocks)
from .template import Template, mark_core_loop

# L0A/L0B are double-buffered and L0C single (the values the matmul printer's TCubeTiling
# carries: dbL0A = dbL0B = 2, dbL0C = 1, depthA1 = depthB1 = 2); L0C accumulates in float32.
L0AB_BUFFERS = 2
L1_DEPTH = 2
L0C_ELEM_BYTES = 4
# Row slots after the program's own: the ReduceSum work tensor and the reduced value.
EXTRA_SLOTS = 2
# The tall form's workspace slots per core: panel i + 1 is computed into one while panel i is
# read from the other.
TALL_SLOTS = 2
# Panels a core computes in the tall form that the partitioner estimates (the first the default).
TALL_PANELS = (4, 3, 2)
# The tall form's smallest UB chunk, where 16 rows do not fit twice (rows of 32-byte blocks).
HALF_CHUNK = 8


@dataclass(frozen=True)
class MatmulRowsKnobs:
    """Tunable choices of the matmul-rows template (the cost model searches these)."""

    base_m: int | None = None  # rows per base tile; None: the most that fit (<= 64 / 128 fp16)
    cores: int | None = None   # None: every AI core
    # most base tiles a round (single tile) may have, as MatmulKnobs.round_tiles: None:
    # ASYNC_EVENT_FETCHES where the rounds are asynchronous, no bound where synchronous; 0: none
    round_tiles: int | None = None
    # the tall form (910B): the cube computes panels of whole rows (IterateAll of singleM x N
    # in base_m x <=256 base tiles) into the GM workspace and the row epilogue streams them
    # through the UB in chunks: B is read once a panel instead of once a 16-row tile
    tall: bool = False
    # the tall form: panels a core computes (its rows cut so, where they balance): asynchronous
    # in two workspace slots, panel i + 1 on the cube while panel i's epilogue runs; more
    # panels overlap more of the cube but read B more often
    panels: int = 4
    # the tall form (910B): AIVs per AIC, as MatmulKnobs.aiv_ratio; 2 is CANN's 1:2 mix, each
    # AIV a client with panels of its own, so the row epilogue runs on both vector cores of
    # an AIC (the two share its cube, L0 and L1; ``cores`` then counts clients); None: 1
    aiv_ratio: int | None = None


@dataclass(frozen=True)
class MatmulRowsPlan(TemplatePlan, template="matmul_rows"):
    """What the matmul-rows template decided for one kernel; its printer reads only this.

    ``shape``: the product as the kernel tiles it (batch rows of A over shared weights folded
    into one taller matrix); ``group_shape``: the product as the group writes it, before that
    folding (the printer addresses A and B by it).

    The cube's tiles (TCubeTiling): ``single_m`` rows of all ``single_n`` = N columns a tile,
    computed as ``base_m x base_n`` pieces (``base_n``: N rounded up to 16, whole rows) over
    K steps of ``base_k``; ``max_base_m``: the most rows a base tile may take (L0C and the
    UB), the tuner's bound.

    L1 reuse (CFG_MDL): the walk goes down M (``iterate_order`` 0), keeping ``depth_a1`` /
    ``depth_b1`` base blocks of A / B in ``l1_bytes`` of L1.

    The row epilogue in the UB: a tile's rows are ``align_n`` elements apart; ``slots`` row
    slots (the program's intermediates and temporaries, ReduceSum's work, the reduced value)
    of ``slot_bytes`` bytes an element. ``data_copy_pad``: the tiles move by DataCopyPad (the
    SoC has it), else by whole blocks and scalar tails.

    ``chunk_m`` (the tall form, 910B): ``single_m x N`` panels computed by asynchronous
    IterateAll (``IterateAll<false>`` + ``WaitIterateAll``) in ``base_m x base_n`` cube tiles
    into two workspace slots of ``panel_bytes`` per core, panel i + 1 posted before panel i is
    waited, then read back ``chunk_m`` rows at a time (rows ``align_n`` apart in the UB) for the
    epilogue, the next chunk's copy issued before this one's epilogue where two fit the UB
    (``prefetch``).

    ``overlapped`` (910B, where two C tiles and two of each streamed input fit the UB): the
    rounds are asynchronous as the matmul template's (``MatmulPlan``: ``Iterate<false>`` into
    this core's ``workspace_bytes`` of GM workspace, ``GetTensorC<false>``, double-buffered
    queues); ``pipeline`` says why it is or is not.
    """

    shape: MatmulShape
    group_shape: MatmulShape
    single_m: int
    single_n: int
    base_m: int
    base_n: int
    base_k: int
    max_base_m: int
    iterate_order: int
    depth_a1: int
    depth_b1: int
    l1_bytes: int
    align_n: int
    slots: int
    slot_bytes: int
    data_copy_pad: bool
    overlapped: bool = False
    pipeline: str = ""
    chunk_m: int = 0  # the tall form: rows of a UB chunk of the panel (0: not tall)

    @property
    def tall(self) -> bool:
        """Whether the kernel is the tall form (IterateAll panels, the epilogue in chunks)."""
        return self.chunk_m > 0

    @property
    def panel_bytes(self) -> int:
        """GM workspace of one panel slot in the tall form (``single_m`` rows of N); a core
        has two (``TALL_SLOTS``)."""
        return self.single_m * self.shape.n * dtype_bytes(self.shape.dtype) if self.tall else 0

    # the matmul template's rounds and workspace slots, read from the same fields
    round_tiles = MatmulPlan.round_tiles
    workspace_bytes = MatmulPlan.workspace_bytes

    def cube_dims(self) -> tuple:
        s = self.shape
        return (s.m, s.n, s.k, self.base_m, self.base_n, self.single_m, self.single_n)


def _row_shape_decision(func, shape: MatmulShape) -> Decision:
    """Every block after the product works on rows of C: reductions over N into one value per
    row, full rows, or row values; at least one reduction (else the matmul template takes it)."""
    rows, cols = shape.batch * shape.m, shape.n
    reductions = 0
    for block in root_blocks(func)[1:]:
        store = block.body
        if type(store).__name__ != "BufferStore":
            return Decision.no(f"block {block.name_hint} is not a single store")
        if str(store.buffer.dtype) not in SUPPORTED_DTYPES + ("bool",):
            return Decision.no(f"block {block.name_hint} computes in {store.buffer.dtype}")
        extents = [int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 0]
        reduce_vars = reduce_iter_vars(block)
        if reduce_vars:
            found = reducer_of(store)
            if len(reduce_vars) != 1 or found is None:
                return Decision.no(f"block {block.name_hint} is not a sum/max/min over one axis")
            if int(reduce_vars[0].dom.extent) != cols or math.prod(extents) != rows:
                return Decision.no(f"block {block.name_hint} reduces {extents} over "
                                   f"{int(reduce_vars[0].dom.extent)}, not each of the {rows} "
                                   f"rows of the product over its N={cols}")
            reductions += 1
            expr = found[1]
        else:
            if math.prod(extents) != rows and not is_full_row_block(extents, rows, cols):
                return Decision.no(f"block {block.name_hint} iterates {extents}, not {rows} "
                                   f"rows of {cols}")
            expr = store.value
        construct = unsupported_construct(expr, masks=True)
        if construct:
            return Decision.no(f"TIR construct {construct} has no vector instruction")
    if not reductions:
        return Decision.no("no reduction after the matmul (the matmul template takes it)")
    return Decision.yes()


def _export_refusal(func) -> Decision | None:
    """Decision.no where an output besides the last is not one the kernel can write as a
    second tile (MultiOutputFusion: one full-row step of the epilogue; ``_check_program``
    checks its dtype), else None."""
    outputs = param_buffers(func)[1]
    blocks = root_blocks(func)
    for buffer in outputs[:-1]:
        writers = [b for b in blocks
                   if getattr(b.body, "buffer", None) is not None and b.body.buffer.same_as(buffer)]
        if len(writers) != 1 or reduce_iter_vars(writers[0]) or writers[0] is blocks[0]:
            return Decision.no(f"output {buffer.name} is not a row of the epilogue: the "
                               "matmul-rows template writes the product's rows and one "
                               "exported row result")
    if len(outputs) > 2:
        return Decision.no(f"{len(outputs)} outputs; the matmul-rows template writes the "
                           "epilogue's rows and at most one exported row result")
    return None


@dataclass(frozen=True)
class MatmulRowsAnalysis:
    """What the matmul-rows template reads from a group, once for all its plans: the product's
    ``shape`` as the group writes it, the row epilogue over C's rows (``program``) and
    ``prepared``, the group after the row template's inlining (row values and single-use full
    rows joined to their reader; the product stays the first block)."""

    shape: MatmulShape
    program: object  # RowProgram
    prepared: tvm.tirx.PrimFunc


@cached_by_identity
def _applies(func) -> Decision:
    shape = matmul_shape(func)
    if shape is None:
        return Decision.no("first block is not a matmul C += A[i, k] * B[k, j]")
    if shape.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"matmul in {shape.dtype}; the cube kernel takes float16/float32")
    if shape.b_batched:
        # a per-batch product of two activations followed by a row reduction is the first
        # half of attention: taking it here would leave the planner comparing the attention
        # kernel (scores kept on chip) against this one instead of against the split ops
        return Decision.no("B differs per batch (attention scores): the attention template "
                           "takes the product with its softmax and PV")
    decision = _row_shape_decision(func, shape)
    if not decision:
        return decision
    exported = _export_refusal(func)
    if exported is not None:
        return exported
    return Decision.yes(f"matmul {shape.m}x{shape.k} @ {shape.k}x{shape.n} with a row "
                        f"epilogue over N={shape.n}")


@cached_by_identity
def _analyse(func) -> MatmulRowsAnalysis:
    decision = _applies(func)
    if not decision:
        raise TilingError(f"matmul-rows template does not apply: {decision.reason}")
    shape = matmul_shape(func)
    sch = tvm.s_tir.Schedule(func)
    inline_row_blocks(sch, shape.batch * shape.m, shape.n)
    return MatmulRowsAnalysis(shape, epilogue_program(schedule_blocks(sch), func, shape),
                              sch.mod["main"])


class MatmulRowsSchedule(Template):
    """Template for a MatMul on the cube followed by row reductions over its N axis."""

    name = "matmul_rows"
    Knobs = MatmulRowsKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        return _applies(func)

    @staticmethod
    def analyse(func) -> MatmulRowsAnalysis:
        """The group's product, its row epilogue and the prepared function
        (``MatmulRowsAnalysis``); TilingError where the template does not take it."""
        return _analyse(func)

    @staticmethod
    def plan(analysis: MatmulRowsAnalysis, soc,
             knobs: MatmulRowsKnobs | None = None) -> Tiling:
        """The Tiling of the analysed group on ``soc``; ``knobs`` (MatmulRowsKnobs) as the
        search chose, None for the defaults. TilingError for an epilogue the kernel cannot
        print on ``soc`` or rows too wide for it."""
        _check_program(analysis.program, analysis.shape, soc)
        return _plan(analysis.shape, analysis.program, soc, knobs or MatmulRowsKnobs())

    @staticmethod
    def apply(analysis: MatmulRowsAnalysis, tiling: Tiling):
        """The prepared function with the product's outer loop as the core loop."""
        return mark_core_loop(analysis.prepared)

    @staticmethod
    def variants(func, soc) -> list[MatmulRowsKnobs]:
        """Knobs worth estimating beside the default (the partitioner keeps the fastest): on
        910B the tall form, which reads B once per panel of rows, with 4, 3 or 2 panels a
        client, in the 1:1 and the 1:2 mix (the row epilogue on one or both AIVs of an AIC)."""
        return [MatmulRowsKnobs()] + (_tall_knobs() if soc.npu_arch == 2201 else [])

    @staticmethod
    def knob_space(func, soc) -> list[MatmulRowsKnobs]:
        """Candidate knobs, the default first: base tiles of 16..128 rows that fit, all or half
        the AI cores, on 910B rounds of any number of tiles. ``plan`` may refuse one (TilingError); searches drop it."""
        default = MatmulRowsSchedule.plan(MatmulRowsSchedule.analyse(func), soc)
        top = default.plan.max_base_m
        space = [MatmulRowsKnobs()]
        if soc.npu_arch == 2201:  # rounds of any size: fewer rounds, later fetches; tall
            space += [MatmulRowsKnobs(round_tiles=0)] + _tall_knobs()
        for cores in (None, max(1, soc.ai_cores // 2)):
            for base_m in (b for b in (16, 32, 64, 128) if b <= top):
                knobs = MatmulRowsKnobs(base_m, cores)
                if knobs not in space:
                    space.append(knobs)
        return space


def _tall_knobs() -> list[MatmulRowsKnobs]:
    """The tall form's variants: ``TALL_PANELS`` panels a client in the 1:1 mix, then in the
    1:2 mix (BERT b16 s512's out-projection + residual + LayerNorm, fp16, 910B1: est. 77.3 us
    at 1:1 with 4 panels, vector-bound on one AIV an AIC; 65.9 us at 1:2 with 2 panels,
    against 77.6 us as a matmul and a LayerNorm kernel)."""
    return [MatmulRowsKnobs(tall=True, panels=p, aiv_ratio=r) for r in (None, 2)
            for p in TALL_PANELS]


def _folded(shape: MatmulShape) -> MatmulShape:
    """Batch rows of A over shared weights are one taller matrix (A is contiguous
    [batch * m, k]); a per-batch B (refused for now) would keep the batches apart."""
    if shape.a_batched and not shape.b_batched:
        return dataclasses.replace(shape, batch=1, m=shape.batch * shape.m, a_batched=False)
    return shape


def _check_program(program, shape: MatmulShape, soc) -> None:
    """Refuse programs the printer cannot print: it writes the output over C's tile in place
    and reads every epilogue input in C's dtype."""
    if program is None or not program.out_full:
        raise TilingError("the row epilogue ends in one value per row; the matmul-rows kernel "
                          "writes whole rows (not printed yet)")
    check_program_dtypes(program)
    if str(program.out_buffer.dtype) != shape.dtype:
        raise TilingError(f"the output is {program.out_buffer.dtype} and the product "
                          f"{shape.dtype}: the row epilogue writes over C's tile in place")
    for name, dtype in input_dtypes(program).items():
        if dtype != shape.dtype:
            raise TilingError(f"epilogue input {name} is {dtype}; the matmul-rows kernel reads "
                              f"its inputs in the product's {shape.dtype}")
    for index in program.exports:
        step = program.steps[index]
        if step.kind != "full" or str(step.buffer.dtype) != shape.dtype:
            raise TilingError(f"the exported result {step.buffer.name} is "
                              f"{step.buffer.dtype} {'rows' if step.kind == 'full' else 'values'}"
                              f"; the matmul-rows kernel writes exported rows in the product's "
                              f"{shape.dtype}")
    streamed = sum(1 for k in program.inputs.values()
                   if k in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE))
    if streamed > soc.max_live_buffers_per_position:
        raise TilingError(f"{streamed} row inputs exceed {soc.max_live_buffers_per_position} "
                          "live VECIN buffers")


def ub_bytes(program, n: int, elem: int, base_m: int, buffers: int = 1) -> int:
    """UB bytes the printed kernel reserves with InitBuffer: ``buffers`` tiles each of C,
    each exported result and each streamed input (``base_m`` rows of ``baseN``), resident
    columns, and the row slots (the program's intermediates and temporaries, the ReduceSum
    work tensor, the reduced value)."""
    base_n = round_up(n, FRACTAL)
    _, slot_bytes = _slots(program, elem)
    streamed = sum(1 for k in program.inputs.values()
                   if k in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE))
    columns = sum(1 for k in program.inputs.values() if k is RowAccessKind.COLUMN)
    tiles = 1 + streamed + len(program.exports)
    return (buffers * base_m * base_n * elem * tiles + columns * round_up(n * elem, BLOCK_BYTES)
            + row_slots(program) * base_n * slot_bytes)


def row_slots(program) -> int:
    """Row slots of ``baseN`` elements the kernel keeps: intermediates, temporaries, work and
    the reduced value (the last two each fit one slot: ReduceSum needs one element per
    256-byte repeat, the value 32 bytes)."""
    return len(program.intermediates) + program.temp_slots + EXTRA_SLOTS


def _slots(program, elem: int) -> tuple[int, int]:
    """(slots, bytes per element of a slot): a slot holds a row of the widest value (TOPI
    computes an fp16 LayerNorm's statistics in float32)."""
    return row_slots(program), max([elem] + [dtype_bytes(d) for d in program_dtypes(program)])


def _max_base_m(program, shape: MatmulShape, soc, buffers: int = 1, l0c: bool = True) -> int:
    """The most rows (a multiple of 16) per base tile that L0C (unless not ``l0c``: the
    tall form's chunks) and the UB hold, with ``buffers`` tiles of each queue."""
    elem = dtype_bytes(shape.dtype)
    base_n = round_up(shape.n, FRACTAL)
    by_l0c = soc.l0c_bytes // (base_n * L0C_ELEM_BYTES) // FRACTAL * FRACTAL if l0c else 1 << 30
    if by_l0c < FRACTAL:
        raise TilingError(f"N={shape.n} is too wide for one tile of whole rows: {FRACTAL} rows "
                          f"x {base_n} float32 need {FRACTAL * base_n * L0C_ELEM_BYTES} L0C bytes;"
                          f" {soc.name} has {soc.l0c_bytes}")
    budget = soc.ub_bytes - UB_RESERVED_BYTES
    fixed = ub_bytes(program, shape.n, elem, 0, buffers)
    per_row = ub_bytes(program, shape.n, elem, 1, buffers) - fixed
    by_ub = (budget - fixed) // per_row // FRACTAL * FRACTAL if budget > fixed else 0
    if by_ub < FRACTAL:
        raise TilingError(f"N={shape.n} is too wide for one UB tile of whole rows: {FRACTAL} "
                          f"rows and the row epilogue need "
                          f"{ub_bytes(program, shape.n, elem, 16, buffers)} "
                          f"UB bytes; {soc.name} has {budget} after its reserve")
    return min(by_l0c, by_ub)


def _overlap_top(program, shape: MatmulShape, soc) -> int:
    """The most rows per base tile with two tiles of each queue in the UB (asynchronous
    rounds), 0 where the SoC has none or not even 16 rows fit twice."""
    if soc.npu_arch != 2201:
        return 0
    try:
        return _max_base_m(program, shape, soc, buffers=2)
    except TilingError:
        return 0


def _base_k(shape: MatmulShape, base_m: int, soc) -> int:
    """The largest K step (a multiple of C0, at most 64) whose A and B tiles fit L0A, L0B and
    L1 as the TCubeTiling double-buffers them: a wide baseN leaves a short K step."""
    elem = dtype_bytes(shape.dtype)
    c0 = BLOCK_BYTES // elem
    base_n = round_up(shape.n, FRACTAL)
    for base_k in range(min(64, round_up(shape.k, c0)), 0, -c0):
        l0a = base_m * base_k * elem * L0AB_BUFFERS
        l0b = base_k * base_n * elem * L0AB_BUFFERS
        l1 = L1_DEPTH * (base_m + base_n) * base_k * elem
        if l0a <= soc.l0a_bytes and l0b <= soc.l0b_bytes and l1 <= soc.l1_bytes:
            return base_k
    raise TilingError(f"N={shape.n} is too wide for the cube: a {c0}-deep B tile of {base_n} "
                      f"columns needs {c0 * base_n * elem * L0AB_BUFFERS} L0B bytes; {soc.name} "
                      f"has {soc.l0b_bytes}")


def _plan(group_shape: MatmulShape, program, soc, knobs: MatmulRowsKnobs) -> Tiling:
    if knobs.tall:
        return _plan_tall(group_shape, program, soc, knobs)
    if (knobs.aiv_ratio or 1) != 1:
        raise TilingError(f"aiv_ratio={knobs.aiv_ratio}: the 1:2 mix is the tall form's; the "
                          "other holds a tile of whole rows in L0C, which two clients would "
                          "share (half the rows each)")
    shape = _folded(group_shape)
    elem = dtype_bytes(shape.dtype)
    c0 = BLOCK_BYTES // elem
    base_n = round_up(shape.n, FRACTAL)
    top = _max_base_m(program, shape, soc)
    cores = max(1, min(knobs.cores or soc.ai_cores, soc.ai_cores))
    capacity = soc.ub_bytes - UB_RESERVED_BYTES
    if knobs.base_m is not None:
        if knobs.base_m % FRACTAL or not FRACTAL <= knobs.base_m <= top:
            raise TilingError(f"base_m={knobs.base_m} must be a multiple of {FRACTAL} in "
                              f"{FRACTAL}..{top} for rows of {shape.n} on {soc.name}")
        base_m = knobs.base_m
    else:
        # the largest tile that still gives every core rows: the epilogue's vector work
        # scales with the rows a core holds, so cores beat a fuller cube tile; where the
        # rounds can be asynchronous, the largest that fits the UB twice
        base_m = min(_overlap_top(program, shape, soc) or top, 128 if elem == 2 else 64)
        while base_m > FRACTAL and shape.batch * ceil_div(shape.m, base_m) < cores:
            base_m -= FRACTAL
    base_m = min(base_m, round_up(shape.m, FRACTAL))
    overlapped, pipeline = overlap(soc, ub_bytes(program, shape.n, elem, base_m, 2), capacity,
                                   base_m, base_n)
    buffers = 2 if overlapped else 1
    if knobs.round_tiles is not None and knobs.round_tiles < 0:
        raise TilingError(f"round_tiles={knobs.round_tiles} must be >= 0 (0: no bound)")
    most = knobs.round_tiles if knobs.round_tiles is not None else \
        (ASYNC_EVENT_FETCHES if overlapped else 0)
    base_k = _base_k(shape, base_m, soc)
    # singleM x N tiles: the rows that give the busiest core the least work (the matmul
    # template's choice, N being one tile), a round at most `most` base tiles
    single_m, _ = _balanced_singles(shape, base_m, base_n, base_k, cores, soc.l1_bytes, most)
    total = shape.batch * ceil_div(shape.m, single_m)
    per_core = ceil_div(total, min(cores, total))
    used = ceil_div(total, per_core)
    slots, slot_bytes = _slots(program, elem)
    ub = ub_bytes(program, shape.n, elem, base_m, buffers)
    # one column of tiles: the walk goes down M, where only B's K panel can be reused
    reuse = l1_reuse(shape, soc.l1_bytes, base_m, base_n, base_k, single_m, shape.n,
                     orders=(0,))
    gm_read, gm_write = matmul_traffic(shape, program, soc, used, reuse)
    exported = len(program.exports) * shape.batch * shape.m  # rows written a second time
    gm_write += exported * shape.n * elem
    round_trip = product_round_trip(shape, soc)  # workspace bytes: L2
    rows = [m for m_single in pieces(shape.m, single_m) for m in pieces(m_single, base_m)]
    cube_macs = shape.batch * sum(round_up(m, FRACTAL) for m in rows) * base_n \
        * round_up(shape.k, c0)
    plan = MatmulRowsPlan(shape, group_shape, single_m, shape.n, base_m, base_n, base_k, top,
                          reuse.iterate_order, reuse.depth_a1, reuse.depth_b1,
                          l1_footprint(shape, base_m, base_n, base_k, reuse), base_n, slots,
                          slot_bytes, bool(soc.has_data_copy_pad), overlapped, pipeline)
    # a 1:1 mix (KernelWork's default aiv_ratio): a row of N float32 in L0C needs the whole
    # AIC's L0C per client
    work = cube_work(shape, soc, reuse, per_core, base_m, base_n, single_m, shape.n) + \
        KernelWork(cube_macs=cube_macs, workspace_read_bytes=round_trip,
                   workspace_write_bytes=round_trip,
                   scalar_elems=scalar_tail_elems(shape, program, soc, base_m, base_n,
                                                  single_m, shape.n, used)
                   + (0 if soc.has_data_copy_pad else exported * (shape.n % c0)),
                   round_tiles=plan.round_tiles if overlapped else 0,
                   # each row's reductions are read back on the scalar unit (V_S waits)
                   scalar_gated=True)
    return Tiling("matmul_rows", total, used, per_core, 1, per_core, buffers,
                  program.temp_slots, ub,
                  soc.ub_bytes, gm_read, gm_write, shape.n, work=work, plan=plan)


def _panel_rows(shape: MatmulShape, base_m: int, cores: int, panels: int = 1) -> int:
    """Rows of a tall panel: the multiple of ``base_m`` (8 in the tall form: the cube's last
    base tile of a panel may be short) that gives each core ``panels`` panels where the rows allow it, then
    the busiest core the fewest rows, the larger among equals (B is read once a panel)."""
    best = None
    for count in range(1, ceil_div(shape.m, base_m) + 1):
        size = round_up(ceil_div(shape.m, count), base_m)
        total = shape.batch * ceil_div(shape.m, size)
        per_core = ceil_div(total, min(cores, total))
        key = (per_core != panels, per_core * size, -size)
        if best is None or key < best[0]:
            best = (key, size)
    return best[1]


def _plan_tall(group_shape: MatmulShape, program, soc, knobs: MatmulRowsKnobs) -> Tiling:
    """The tall form: ``single_m x N`` panels by asynchronous IterateAll into two GM workspace
    slots a core (cube tiles of ``base_m`` rows by at most 256 columns, as the matmul
    template's), ``knobs.panels`` a core where the rows allow, each posted before the last is
    waited so its cube work overlaps the last one's epilogue; the row epilogue over
    ``chunk_m``-row chunks of a panel read back into the UB (two of each queue where they fit:
    the next chunk's copy then overlaps this one's epilogue). Split chips only: a coupled
    chip's product reaches the UB on chip. ``knobs.aiv_ratio`` 2: the 1:2 mix, twice the
    clients, each with half its AIC's L0 and L1 (narrower cube tiles, shorter K steps)."""
    if soc.npu_arch != 2201:
        raise TilingError(f"the tall form goes through the GM workspace; {soc.name} is a "
                          "coupled chip (the product reaches the UB on chip)")
    if knobs.round_tiles is not None:
        raise TilingError("the tall form's panels are one IterateAll each: no round_tiles")
    if knobs.panels < 1:
        raise TilingError(f"panels={knobs.panels} must be >= 1")
    shape = _folded(group_shape)
    elem = dtype_bytes(shape.dtype)
    c0 = BLOCK_BYTES // elem
    row_n = round_up(shape.n, FRACTAL)
    # a client of the 1:2 mix has half its AIC's L0 and L1 (the UB is its AIV's own)
    ratio = aiv_ratio(soc, knobs.aiv_ratio)
    top = _max_base_m(program, shape, soc, l0c=False)
    double = _max_base_m_or_zero(program, shape, soc)
    if not double and ub_bytes(program, shape.n, elem, HALF_CHUNK, 2) <= \
            soc.ub_bytes - UB_RESERVED_BYTES:
        # 16 rows do not fit twice but 8 do: half chunks keep the next chunk's copy under
        # this one's epilogue (a UB chunk is rows only, no cube fractal)
        double = HALF_CHUNK
    buffers = 2 if double else 1
    chunk_m = min(double or top, 128 if elem == 2 else 64, round_up(shape.m, FRACTAL))
    clients = soc.ai_cores * ratio
    cores = max(1, min(knobs.cores or clients, clients))
    base_m = min(knobs.base_m or (128 if elem == 2 else 64), round_up(shape.m, FRACTAL))
    if base_m % FRACTAL or not FRACTAL <= base_m <= MAX_BASE:
        raise TilingError(f"base_m={base_m} must be a multiple of {FRACTAL} in "
                          f"{FRACTAL}..{MAX_BASE}")
    # N in equal base tiles of at most 256 columns whose float32 block fits a client's L0C
    widest = min(MAX_BASE,
                 soc.l0c_bytes // ratio // (base_m * L0C_ELEM_BYTES) // FRACTAL * FRACTAL)
    if widest < FRACTAL:
        raise TilingError(f"base_m={base_m}: no 16-column float32 block fits a client's L0C")
    base_n = round_up(ceil_div(shape.n, ceil_div(shape.n, widest)), FRACTAL)
    base_k = matmul_base_k(shape, base_m, base_n, soc, ratio)
    # panels in 8-row steps (a panel's last cube tile is padded to 16 rows, which the MACs
    # count): 16-row steps left cores idle (4096 rows: 96-row panels, 22 of 24 cores)
    single_m = _panel_rows(shape, HALF_CHUNK, cores, knobs.panels)
    chunk_m = min(chunk_m, single_m)  # no larger than a panel
    total = shape.batch * ceil_div(shape.m, single_m)
    per_core = ceil_div(total, min(cores, total))
    used = ceil_div(total, per_core)
    slots, slot_bytes = _slots(program, elem)
    ub = ub_bytes(program, shape.n, elem, chunk_m, buffers)
    reuse = l1_reuse(shape, soc.l1_bytes // ratio, base_m, base_n, base_k, single_m, shape.n)
    gm_read, gm_write = matmul_traffic(shape, program, soc, used, reuse)
    exported = len(program.exports) * shape.batch * shape.m
    gm_write += exported * shape.n * elem
    round_trip = product_round_trip(shape, soc)
    chunks = ceil_div(single_m, chunk_m)
    pipeline = (f"tall: IterateAll<false> of {single_m}-row panels ({base_m}x{base_n} cube "
                f"tiles, {per_core} a core) into two GM workspace slots, panel i + 1 on the cube "
                f"during panel i's epilogue, the row epilogue over {chunk_m}-row chunks"
                + (", two of each in the UB, the next chunk's copy during this one's epilogue"
                   if buffers == 2 else ", one of each in the UB")
        + ("; a 1:2 mix: each AIV a client with panels of its own" if ratio == 2 else ""))
    plan = MatmulRowsPlan(shape, group_shape, single_m, shape.n, base_m, base_n, base_k, top,
                          reuse.iterate_order, reuse.depth_a1, reuse.depth_b1,
                          l1_footprint(shape, base_m, base_n, base_k, reuse), row_n, slots,
                          slot_bytes, bool(soc.has_data_copy_pad), False, pipeline, chunk_m)
    cube = cube_work(shape, soc, reuse, per_core, base_m, base_n, single_m, shape.n)
    # the AIV's steps are the chunks, a row of the epilogue a call
    work = dataclasses.replace(cube, steps=per_core * chunks,
                               vector_repeats=per_core * single_m) + KernelWork(
        cube_macs=shape.batch * sum(round_up(m, FRACTAL) for m in pieces(shape.m, single_m))
        * round_up(shape.n, FRACTAL) * round_up(shape.k, c0),
        workspace_read_bytes=round_trip, workspace_write_bytes=round_trip,
        panel_chunks=chunks, scalar_gated=True, aiv_ratio=ratio)
    return Tiling("matmul_rows", total, used, per_core, 1, per_core, buffers,
                  program.temp_slots, ub, soc.ub_bytes, gm_read, gm_write, shape.n, work=work,
                  plan=plan)


def _max_base_m_or_zero(program, shape: MatmulShape, soc) -> int:
    """The tall form's rows per chunk with two of each queue in the UB, 0 if not 16."""
    try:
        return _max_base_m(program, shape, soc, buffers=2, l0c=False)
    except TilingError:
        return 0


__all__ = ["MatmulRowsSchedule", "MatmulRowsKnobs", "MatmulRowsPlan", "ub_bytes", "row_slots"]
