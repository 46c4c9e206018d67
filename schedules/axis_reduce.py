"""AxisReduceSchedule: ReduceSum/Mean/Max/Min over adjacent axes that are not the last one.

After flattening, such a group computes ``out[o, i] = reduce_r f(x[o, r, i])`` followed by an
elementwise epilogue ``g(out[o, i], ...)``, with ``O`` the product of the axes before the
reduced ones, ``R`` the product of the reduced axes and ``I > 1`` the product of the axes after
them (keepdims only adds axes of length 1; several adjacent reduced axes are one ``R``).

Why this method: for a fixed ``(o, r)`` the inner elements ``x[o, r, i0:i0 + chunk]`` are
contiguous in GM, so every input row of a tile is one full-bandwidth DataCopy burst (one
multi-burst DataCopyPad per tile on SoCs that have it) and the reduction is plain elementwise
vector Add/Max/Min of whole rows into a UB accumulator: no transpose, no scalar work, no
per-element reduction instruction. A unit of work is one ``(o, chunk of I)`` pair; units are
split over the AI cores. For each unit the ``R`` rows stream through the UB ``tile_rows`` at a
time (double-buffered), the prologue (Abs, Pow, Cast, ... inlined into the reduction) runs on
the whole tile at once, the tile's rows are folded pairwise into its first row (log2 of the
rows in vector instructions), and that row is combined into the accumulator. After the last
tile the epilogue (the mean's scale, fused elementwise ops) runs on the accumulator and the
chunk is written once. ``R`` may be any size: the accumulation streams. A prologue that reads
one value per reduced row (a mask ``[B, S, 1]`` over ``[B, S, H]``) runs row by row with that
value as a scalar operand; the epilogue may read ``[O, I]`` and ``[I]`` tensors chunk by chunk
and one value per outer index (a count to divide by) on the scalar unit.

Example
-------
>>> from tvm_ascend.schedules import AxisReduceSchedule      # doctest: +SKIP
>>> scheduled, tiling = AxisReduceSchedule.schedule(prim_func, get_soc("Ascend910B1"))
>>> tiling.plan.outer, tiling.plan.reduce, tiling.plan.inner   # doctest: +SKIP
(6, 9, 10)
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import tvm
from tvm import tirx

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .analysis.tile_values import (FLOAT_DTYPES, Access, AccessKind, child_exprs, buffer_size,
                                   expr_key, flat_offset, make_analyzer, plan_tile_values,
                                   unsupported_construct, uses_var)
from .tiling import ceil_div, dtype_bytes, knob_grid, round_up
from .tiling import (BLOCK_BYTES, CORE_LOOP_ANNOTATION, KernelWork, TemplatePlan, Tiling,
                     UB_RESERVED_BYTES)
from .analysis.tir_walk import (BufferLoad, cached_by_identity, expr_dtype, load_buffer,
                                param_buffers, reduce_iter_vars, reducer_of, root_blocks,
                                schedule_blocks)
from .template import Template

MAX_BURSTS = 4095      # DataCopyPad blockCount limit: rows per tile
REPEAT_BYTES = 256     # one vector repeat: the smallest chunk worth splitting I into
MIN_TILE_ROWS = 8      # fewer rows per tile than this: halve the chunk instead


@dataclass(frozen=True)
class AxisReduceKnobs:
    """Tunable choices of the axis-reduce template (the cost model searches these)."""

    cores: int | None = None    # None: every vector block that gets a unit
    chunk: int | None = None    # inner elements per unit; None: planned (whole I when it fits)
    double_buffer: bool = True


@dataclass(frozen=True)
class AxisReducePlan(TemplatePlan, template="axis_reduce"):
    """What the axis-reduce template decided for one kernel, read by its printer.

    The shape ``out[o, i] = reduce_r x[o, r, i]``: ``outer`` (O), ``reduce`` (R), ``inner``
    (I). The units: ``chunk`` inner elements per unit (the Tiling's ``cols``; a multiple of
    ``align``, the elements of one 32-byte block of the narrowest value), ``chunks`` units per
    outer index. The row tiles: ``tile_rows`` reduced rows per UB tile, ``row_tiles`` tiles per
    unit. ``epilogue_temp_buffers``: the epilogue's temps (one chunk each; the prologue's are
    the Tiling's ``temp_buffers``). ``reducer``: sum, max or min. ``row_by_row``: the prologue
    reads one value per reduced row and runs row by row. ``data_copy_pad``: the row copies are
    DataCopyPad bursts (the SoC has it).
    """

    outer: int
    reduce: int
    inner: int
    chunk: int
    chunks: int
    tile_rows: int
    row_tiles: int
    align: int
    epilogue_temp_buffers: int
    data_copy_pad: bool
    reducer: str
    row_by_row: bool


class AxisInput(enum.Enum):
    STREAMED = "streamed"  # [O, R, I] read by the prologue: row tiles through a VECIN queue
    OUTER_INNER = "oi"     # [O, I] read by the epilogue, like the output: one chunk per unit
    INNER = "inner"        # [I] read by the epilogue (a bias over the inner axes)
    SCALAR = "scalar"      # one value for the kernel, read once per core
    ROW_VALUE = "row"      # one value per reduced row (o, r) read by the prologue (a mask
    #                        [B, S, 1] over [B, S, H]): read on the scalar unit, row by row
    OUTER_VALUE = "outer"  # one value per outer index read by the epilogue: read per unit
    REDUCED = "reduced"    # the accumulator (the reduction's result) read by the epilogue


@dataclass
class AxisProgram:
    """The reduction and its epilogue, as the template sizes them and the printer prints them."""

    outer: int
    reduce: int
    inner: int
    reducer: str                  # "sum", "max" or "min"
    acc_buffer: object            # the buffer the reduction writes
    prologue: object              # TileValuePlan of the reduction's operand (over row tiles)
    epilogue: object = None       # TileValuePlan of the output block's value, or None
    out_buffer: object = None
    inputs: dict = field(default_factory=dict)   # GM input name -> AxisInput
    buffers: dict = field(default_factory=dict)  # GM input name -> buffer
    scalars: dict = field(default_factory=dict)  # load key -> (buffer, flat offset expr)
    values: dict = field(default_factory=dict)   # ROW_VALUE / OUTER_VALUE load key -> same
    loads: dict = field(default_factory=dict)    # load key -> AxisInput

    @property
    def prologue_slots(self) -> int:
        """Row-tile temps: the prologue's, plus one for its root when it computes anything."""
        return self.prologue.n_slots + (1 if self.prologue.order else 0)

    @property
    def epilogue_slots(self) -> int:
        return self.epilogue.n_slots if self.epilogue is not None else 0

    def names(self, *kinds) -> list[str]:
        return [name for name, kind in self.inputs.items() if kind in kinds]

    @property
    def row_by_row(self) -> bool:
        """Whether the prologue reads one value per row (then it is printed row by row)."""
        return AxisInput.ROW_VALUE in self.inputs.values()

    def dtypes(self) -> set:
        """Every dtype a value of the kernel has (inputs, computed values, accumulator)."""
        found = {str(b.dtype) for b in self.buffers.values()}
        found.update({str(self.acc_buffer.dtype), str(self.out_buffer.dtype)})
        for plan in (self.prologue, self.epilogue):
            if plan is not None:
                found.update(expr_dtype(node) for node in plan.order)
        return found

    @property
    def align(self) -> int:
        """Elements per 32 bytes of the narrowest dtype: every UB row starts 32-byte aligned."""
        return BLOCK_BYTES // min(dtype_bytes(d) for d in self.dtypes())

    @property
    def slot_bytes(self) -> int:
        return max(dtype_bytes(d) for d in self.dtypes())


def _spatial_vars(block) -> list:
    return [iv for iv in block.iter_vars if int(iv.iter_type) == 0]


def _first_reduced_load(expr, reduce_vars):
    """The first load in ``expr`` whose indices use a reduction variable, or None."""
    if isinstance(expr, BufferLoad):
        if any(uses_var(index, iv.var) for index in expr.indices for iv in reduce_vars):
            return expr
        return None
    for child in child_exprs(expr):
        found = _first_reduced_load(child, reduce_vars)
        if found is not None:
            return found
    return None


def axis_shape(block) -> tuple[int, int, int]:
    """(O, R, I) of a reduction block, from the input it reduces; TilingError when the reduced
    axes are not adjacent or include the last one (the row template's case).

    Example
    -------
    >>> axis_shape(block_reducing_axes_1_2_of_3x5x4x7)             # doctest: +SKIP
    (3, 20, 7)
    """
    reduce_vars = reduce_iter_vars(block)
    found = reducer_of(block.body)
    if found is None:
        raise TilingError(f"block {block.name_hint} is not a sum/max/min")
    load = _first_reduced_load(found[1], reduce_vars)
    if load is None:
        raise TilingError(f"block {block.name_hint} reduces no input")
    shape = [int(d) for d in load_buffer(load).shape]
    reduced = [p for p, index in enumerate(load.indices)
               if any(uses_var(index, iv.var) for iv in reduce_vars)]
    if reduced != list(range(reduced[0], reduced[-1] + 1)):
        raise TilingError(f"{load_buffer(load).name} is reduced over axes {reduced}, which are "
                          "not adjacent")
    outer = math.prod(shape[:reduced[0]])
    red = math.prod(shape[reduced[0]:reduced[-1] + 1])
    inner = math.prod(shape[reduced[-1] + 1:])
    if inner == 1:
        raise TilingError(f"{load_buffer(load).name} is reduced over its last axes (the "
                          "row-reduce template's case)")
    if red != math.prod(int(iv.dom.extent) for iv in reduce_vars) or \
            outer * inner != math.prod(int(iv.dom.extent) for iv in _spatial_vars(block)):
        raise TilingError(f"block {block.name_hint} does not reduce {load_buffer(load).name} "
                          "as [outer, reduced, inner]")
    return outer, red, inner


def _bind_flat(block, flat, reduced=None) -> dict:
    """Block variables as functions of the flat output index ``flat`` (and ``reduced``)."""
    bindings = {}
    for ivs, value in ((_spatial_vars(block), flat), (reduce_iter_vars(block), reduced)):
        stride = 1
        for iv in reversed(ivs):
            extent = int(iv.dom.extent)
            bindings[iv.var] = tirx.FloorMod(tirx.FloorDiv(value, tirx.IntImm("int64", stride)),
                                             tirx.IntImm("int64", extent)) if extent > 1 \
                else tirx.IntImm("int64", 0)
            stride *= extent
    return bindings


class _Classifier:
    """Classifies the loads of the prologue and the epilogue against (o, r, i)."""

    def __init__(self, program: AxisProgram, acc_buffer):
        self.program, self.acc = program, acc_buffer
        self.o, self.r, self.i = (tirx.Var(n, "int64") for n in ("o", "r", "i"))

    def analyzer(self, block, with_reduce: bool):
        p = self.program
        flat = self.o * p.inner + self.i
        analyzer = make_analyzer(self.o, p.outer, _bind_flat(block, flat, self.r
                                                             if with_reduce else None))
        analyzer.bind(self.i, tvm.ir.Range(0, p.inner))
        analyzer.bind(self.r, tvm.ir.Range(0, p.reduce))
        return analyzer

    def classify(self, load, analyzer, prologue: bool) -> Access:
        p, buffer = self.program, load_buffer(load)
        offset = analyzer.simplify(flat_offset(buffer, load.indices))
        kind = self._kind(buffer, offset, analyzer, prologue)
        p.loads[expr_key(load)] = kind
        if kind is AxisInput.SCALAR:
            p.scalars[expr_key(load)] = (buffer, offset)
        elif kind in (AxisInput.ROW_VALUE, AxisInput.OUTER_VALUE):
            p.values[expr_key(load)] = (buffer, offset)
        if kind is not AxisInput.REDUCED:
            known = p.inputs.get(buffer.name)
            if known is not None and known is not kind:
                raise TilingError(f"{buffer.name} is read in two ways ({known.value}, "
                                  f"{kind.value}) in one axis-reduce kernel")
            p.inputs[buffer.name], p.buffers[buffer.name] = kind, buffer
        tile = kind not in (AxisInput.SCALAR, AxisInput.ROW_VALUE, AxisInput.OUTER_VALUE)
        return Access(AccessKind.FULL if tile else AccessKind.SCALAR, buffer, offset)

    def _kind(self, buffer, offset, analyzer, prologue: bool) -> AxisInput:
        p, o, r, i = self.program, self.o, self.r, self.i
        if not any(uses_var(offset, v) for v in (o, r, i)):
            if buffer.same_as(self.acc):
                raise TilingError("the epilogue reads one element of the reduction")
            return AxisInput.SCALAR
        if not uses_var(offset, i) and not buffer.same_as(self.acc):
            return AxisInput.ROW_VALUE if prologue else AxisInput.OUTER_VALUE
        size = buffer_size(buffer)
        if prologue:
            if size == p.outer * p.reduce * p.inner and analyzer.can_prove_equal(
                    offset, (o * p.reduce + r) * p.inner + i):
                return AxisInput.STREAMED
        elif buffer.same_as(self.acc):
            if analyzer.can_prove_equal(offset, o * p.inner + i):
                return AxisInput.REDUCED
        elif size == p.outer * p.inner and analyzer.can_prove_equal(offset, o * p.inner + i):
            return AxisInput.OUTER_INNER
        elif size == p.inner and analyzer.can_prove_equal(offset, i):
            return AxisInput.INNER
        where = "before" if prologue else "after"
        raise TilingError(f"{buffer.name} is read {where} the reduction at flat offset {offset}, "
                          "not as [outer, reduced, inner] / [outer, inner] / [inner] / one value "
                          "per row / a scalar")


def axis_program(blocks, func) -> AxisProgram:
    """The program of the inlined blocks ``[reduction, epilogue?]``, from their iteration
    variables and bodies only, so the template and the printer (which sees the scheduled
    function, same blocks) derive the same program.

    Example
    -------
    >>> program = axis_program(inlined_blocks, func)                # doctest: +SKIP
    >>> program.outer, program.reduce, program.inner, program.reducer
    (4, 9, 10, 'sum')
    """
    if not blocks or not reduce_iter_vars(blocks[0]) or len(blocks) > 2 or \
            any(reduce_iter_vars(b) for b in blocks[1:]):
        raise TilingError("not one reduction followed by at most one elementwise block")
    red_block = blocks[0]
    outer, reduce, inner = axis_shape(red_block)
    reducer, operand = reducer_of(red_block.body)
    _, outputs = param_buffers(func)
    program = AxisProgram(outer, reduce, inner, reducer, red_block.body.buffer, None,
                          out_buffer=outputs[0])
    classifier = _Classifier(program, red_block.body.buffer)
    analyzer = classifier.analyzer(red_block, True)
    program.prologue = plan_tile_values(
        operand, lambda load: classifier.classify(load, analyzer, True))
    if not program.prologue.is_tile(program.prologue.root):
        raise TilingError("the reduction's operand does not depend on its input")
    if len(blocks) == 2:
        epi = blocks[1]
        if math.prod(int(iv.dom.extent) for iv in _spatial_vars(epi)) != outer * inner:
            raise TilingError(f"block {epi.name_hint} does not iterate the reduced shape")
        epi_analyzer = classifier.analyzer(epi, False)
        program.epilogue = plan_tile_values(
            epi.body.value, lambda load: classifier.classify(load, epi_analyzer, False))
    return program


def check_program(program: AxisProgram, func_name: str = "") -> None:
    """Refuse what the axis-reduce kernels cannot print (dtypes, an unused reduction)."""
    unsupported = sorted(d for d in program.dtypes() if d not in FLOAT_DTYPES)
    if unsupported:
        raise TilingError(f"axis-reduce kernels compute in {' and '.join(FLOAT_DTYPES)}; this "
                          f"group uses {', '.join(unsupported)}")
    if program.epilogue is not None and AxisInput.REDUCED not in program.loads.values():
        raise TilingError("the output block does not read the reduction")
    if program.epilogue is None and str(program.acc_buffer.dtype) != \
            str(program.out_buffer.dtype):
        raise TilingError("the reduction is the output but has another dtype")


def _inline(sch) -> None:
    """Inline every elementwise block but the output into its consumer (the prologue into the
    reduction, the epilogue chain into the output block)."""
    changed = True
    while changed:
        changed = False
        block_rvs = sch.get_child_blocks(sch.get_sblock("root"))
        for block_rv in block_rvs[:-1]:
            if reduce_iter_vars(sch.get(block_rv)):
                continue
            try:
                sch.compute_inline(block_rv)
                changed = True
                break
            except Exception:  # noqa: BLE001 - TVM refuses some inlines; the block stays
                continue


@cached_by_identity
def _inlined(func) -> tuple:
    """(``func`` with every elementwise block inlined, its AxisProgram), kept for the last few
    functions: ``applies`` and ``analyse`` both read it (shared: never modify it)."""
    sch = tvm.s_tir.Schedule(func)
    _inline(sch)
    return sch.mod["main"], axis_program(schedule_blocks(sch), func)


@cached_by_identity
def _legal(func) -> Decision:
    """Hard constraints on the unscheduled function (no tiling)."""
    reductions = [b for b in root_blocks(func) if reduce_iter_vars(b)]
    if len(reductions) != 1:
        return Decision.no(f"{len(reductions)} reductions; the axis-reduce template takes one "
                           "(a softmax over another axis reads its reductions back: two passes)")
    if len(param_buffers(func)[1]) != 1:
        return Decision.no("the axis-reduce template prints one output")
    for block in root_blocks(func):
        store = block.body
        if type(store).__name__ != "BufferStore":
            return Decision.no(f"block {block.name_hint} is not a single store")
        if str(store.buffer.dtype) not in FLOAT_DTYPES:
            return Decision.no(f"block {block.name_hint} computes in {store.buffer.dtype}")
        expr = store.value
        if reduce_iter_vars(block):
            found = reducer_of(store)
            if found is None:
                return Decision.no(f"block {block.name_hint} is not a sum/max/min")
            expr = found[1]
        construct = unsupported_construct(expr)
        if construct:
            return Decision.no(f"TIR construct {construct} has no vector instruction")
    try:
        axis_shape(reductions[0])
        check_program(_inlined(func)[1])
    except TilingError as err:
        return Decision.no(str(err))
    return Decision.yes("one reduction over adjacent non-last axes with elementwise prologue "
                        "and epilogue")


@dataclass(frozen=True)
class AxisReduceAnalysis:
    """What the axis-reduce template reads from a group, shared by every plan of it:
    ``prepared``, the function with its prologue inlined into the reduction and its epilogue
    into the output block (what every plan tiles), and its ``program``."""

    prepared: object
    program: AxisProgram


class AxisReduceSchedule(Template):
    """Template for reductions over adjacent non-last axes (``out[o, i] = reduce_r x[o, r, i]``)
    with elementwise prologues and epilogues."""

    name = "axis_reduce"
    Knobs = AxisReduceKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        """Decision: one sum/max/min over adjacent axes with inner axes after them, elementwise
        blocks around it, one float output (legality only, no tiling).

        Example
        -------
        >>> AxisReduceSchedule.applies(sum_over_axis_1_of_4x9x10)   # doctest: +SKIP
        Decision(ok=True, reason='one reduction over adjacent non-last axes ...')
        """
        return _legal(func)

    @classmethod
    def analyse(cls, func) -> AxisReduceAnalysis:
        """The inlined function and its program (TilingError: not this template's group)."""
        decision = _legal(func)
        if not decision:
            raise TilingError(f"axis-reduce template does not apply: {decision.reason}")
        return AxisReduceAnalysis(*_inlined(func))

    @classmethod
    def plan(cls, analysis: AxisReduceAnalysis, soc,
             knobs: AxisReduceKnobs | None = None) -> Tiling:
        """The Tiling on ``soc``; ``knobs`` as the search chose (``chunk=16``: ``cols`` 16)."""
        return _plan(analysis.program, soc, knobs or AxisReduceKnobs())

    @classmethod
    def apply(cls, analysis: AxisReduceAnalysis, tiling: Tiling):
        """The reduction's spatial loops become ``[O, I]``, ``I`` is split into chunks, the
        ``(o, chunk)`` units are split over the cores (``ascend.block_idx``) with the reduction
        loop inside each unit, and the epilogue is computed at the unit."""
        sch = tvm.s_tir.Schedule(analysis.prepared)
        _tile_loops(sch, analysis.program, tiling)
        return sch.mod["main"]

    @staticmethod
    def knob_space(func, soc) -> list[AxisReduceKnobs]:
        """Candidate knobs, the default first: core counts halving from every vector block,
        chunks halving from the planned one (whole 32-byte blocks), single and double
        buffering. ``plan`` may still refuse one (TilingError); searches drop it.

        Example
        -------
        >>> AxisReduceSchedule.knob_space(func, soc)[0]             # doctest: +SKIP
        AxisReduceKnobs(cores=None, chunk=None, double_buffer=True)
        """
        default = AxisReduceSchedule.plan(AxisReduceSchedule.analyse(func), soc)
        align = default.plan.align
        cores = sorted({max(1, soc.vector_blocks // d) for d in (1, 2, 4)}, reverse=True)
        chunks = [None] + sorted({round_up(max(1, default.cols // d), align) for d in (2, 4)
                                  if default.cols // d >= align}, reverse=True)
        return knob_grid(AxisReduceKnobs, soc.vector_blocks, cores, chunks)


def _tile_loops(sch, program: AxisProgram, tiling: Tiling) -> None:
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    red = blocks[0]
    loops = sch.get_loops(red)
    n_spatial = len(_spatial_vars(sch.get(red)))
    spatial, reduced = loops[:n_spatial], loops[n_spatial:]
    flat = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    o, i = sch.split(flat, [program.outer, program.inner])
    c, ii = sch.split(i, [None, tiling.cols])
    r = sch.fuse(*reduced) if len(reduced) > 1 else reduced[0]
    sch.reorder(c, r, ii)
    unit = sch.fuse(o, c)
    core, _ = sch.split(unit, [tiling.cores, tiling.block_len])
    if len(blocks) > 1:
        sch.reverse_compute_at(blocks[1], sch.get_loops(red)[1])
    sch.annotate(core, CORE_LOOP_ANNOTATION, 1)


@dataclass(frozen=True)
class _Footprint:
    """UB bytes as a function of the chunk and the rows per tile (exactly what InitBuffer
    reserves in the printed kernel)."""

    streamed: int       # bytes per element of every streamed input, summed
    epi_inputs: int     # likewise for the epilogue's [O, I] / [I] inputs
    out_bytes: int
    acc_bytes: int
    slot_bytes: int
    row_slots: int      # prologue temps (row tiles)
    epi_slots: int      # epilogue temps (one chunk)
    buffer_num: int

    def ub_bytes(self, chunk: int, rows: int) -> int:
        per_row = self.buffer_num * self.streamed + self.row_slots * self.slot_bytes
        per_chunk = (self.buffer_num * (self.epi_inputs + self.out_bytes) + self.acc_bytes
                     + self.epi_slots * self.slot_bytes)
        return chunk * (rows * per_row + per_chunk)

    def rows_that_fit(self, chunk: int, budget: int) -> int:
        per_row = self.ub_bytes(chunk, 2) - self.ub_bytes(chunk, 1)
        return (budget - self.ub_bytes(chunk, 0)) // max(per_row, 1)


def _footprint(program: AxisProgram, buffer_num: int) -> _Footprint:
    def elem(name):
        return dtype_bytes(program.buffers[name].dtype)

    return _Footprint(sum(elem(n) for n in program.names(AxisInput.STREAMED)),
                      sum(elem(n) for n in program.names(AxisInput.OUTER_INNER, AxisInput.INNER)),
                      dtype_bytes(program.out_buffer.dtype), dtype_bytes(program.acc_buffer.dtype),
                      program.slot_bytes, program.prologue_slots, program.epilogue_slots,
                      buffer_num)


def _chunk(program: AxisProgram, fp: _Footprint, soc, budget: int, knobs) -> int:
    """Inner elements per unit: the whole (aligned) ``I`` when it fits, split further so every
    core gets a unit (not below one vector repeat) and so a tile holds enough rows."""
    align, inner = program.align, program.inner
    whole = round_up(inner, align)
    if knobs.chunk is not None:
        if knobs.chunk % align or not align <= knobs.chunk <= whole:
            raise TilingError(f"chunk={knobs.chunk} must be a multiple of {align} in "
                              f"{align}..{whole}")
        return knobs.chunk
    chunk = whole
    cores = min(knobs.cores or soc.vector_blocks, soc.vector_blocks)
    floor = max(align, REPEAT_BYTES // program.slot_bytes)
    if program.outer < cores:
        wanted = round_up(ceil_div(inner, ceil_div(cores, program.outer)), align)
        chunk = min(chunk, max(wanted, floor))
    want_rows = min(program.reduce, MIN_TILE_ROWS)
    while chunk > align and fp.rows_that_fit(chunk, budget) < want_rows:
        chunk = round_up(chunk // 2, align)
    return chunk


def _plan(program: AxisProgram, soc, knobs: AxisReduceKnobs) -> Tiling:
    streamed = len(program.names(AxisInput.STREAMED))
    epi_in = len(program.names(AxisInput.OUTER_INNER, AxisInput.INNER))
    if max(streamed, epi_in) > soc.max_live_buffers_per_position:
        raise TilingError(f"{max(streamed, epi_in)} inputs would be live at once in VECIN; "
                          f"{soc.name} allows {soc.max_live_buffers_per_position}")
    nbuf = 2 if knobs.double_buffer else 1
    fp = _footprint(program, nbuf)
    budget = soc.ub_bytes - UB_RESERVED_BYTES
    chunk = _chunk(program, fp, soc, budget, knobs)
    fits = fp.rows_that_fit(chunk, budget)
    if fits < 1:
        raise TilingError(f"one row of a chunk of {chunk} elements needs "
                          f"{fp.ub_bytes(chunk, 1)} UB bytes; {soc.name} has {budget}")
    tile_rows = min(program.reduce, fits, MAX_BURSTS)
    tile_rows = ceil_div(program.reduce, ceil_div(program.reduce, tile_rows))  # even tiles
    chunks = ceil_div(program.inner, chunk)
    units = program.outer * chunks
    cores = max(1, min(knobs.cores or soc.vector_blocks, soc.vector_blocks, units))
    per_core = ceil_div(units, cores)
    cores = ceil_div(units, per_core)
    plan = AxisReducePlan(program.outer, program.reduce, program.inner, chunk, chunks,
                          tile_rows, ceil_div(program.reduce, tile_rows), program.align,
                          program.epilogue_slots, bool(soc.has_data_copy_pad), program.reducer,
                          program.row_by_row)
    # values read on the scalar unit per unit (per row, per outer index): the timing model
    # charges them, and plan_template prefers templates that read fewer
    scalar = sum(units * (program.reduce if program.loads[key] is AxisInput.ROW_VALUE else 1)
                 for key in program.values)
    return Tiling("axis_reduce", units, cores, per_core, 1, per_core, nbuf,
                  program.prologue_slots, fp.ub_bytes(chunk, tile_rows), soc.ub_bytes,
                  gm_read_bytes(program, cores, chunks), gm_write_bytes(program), chunk,
                  work=KernelWork(steps=per_core, vector_repeats=min(per_core, units),
                                  scalar_elems=scalar), plan=plan)


def gm_read_bytes(program: AxisProgram, cores: int, chunks: int) -> int:
    """GM bytes the kernel reads: every streamed element once, the epilogue's inputs once per
    output element, each scalar once per core, each per-row value once per unit and row, each
    per-outer value once per unit (``chunks`` units per outer index)."""
    p = program
    read = 0
    for name, kind in p.inputs.items():
        elem = dtype_bytes(p.buffers[name].dtype)
        if kind is AxisInput.STREAMED:
            read += p.outer * p.reduce * p.inner * elem
        elif kind in (AxisInput.OUTER_INNER, AxisInput.INNER):
            read += p.outer * p.inner * elem
    read += sum(cores * dtype_bytes(buffer.dtype) for buffer, _ in p.scalars.values())
    for key, (buffer, _) in p.values.items():
        rows = p.reduce if p.loads[key] is AxisInput.ROW_VALUE else 1
        read += p.outer * chunks * rows * dtype_bytes(buffer.dtype)
    return read


def gm_write_bytes(program: AxisProgram) -> int:
    """The output, written once."""
    return program.outer * program.inner * dtype_bytes(program.out_buffer.dtype)


__all__ = ["AxisReduceSchedule", "AxisReduceKnobs", "AxisReducePlan", "AxisProgram", "AxisInput",
           "axis_program", "axis_shape", "check_program", "gm_read_bytes", "gm_write_bytes"]
