"""RowReduceSchedule: reductions over the last axis with their prologue and epilogue.

Softmax, LayerNorm/RMSNorm written as op chains, ReduceSum/Mean/Max/Min over the last axis: every
block works on rows of ``C`` elements. Row-valued blocks (a mean, ``sqrt(var + eps)``) and full
blocks with one consumer are inlined; each row is one unit of work: rows are split over the AI
cores, ``rows_per_tile`` rows share one UB tile (each row padded to 32 bytes), and the remaining
blocks are computed at the row loop, in order. The row program (``row_program.py``) is shared
with the printer so UB sizing and the printed kernel agree; this file plans and schedules it.

A row longer than the UB runs in passes over column chunks (``row_passes``, ``_plan_chunked``):
each pass streams the row's inputs from GM chunk by chunk, recomputes the full-row steps it needs
from them, and accumulates its reductions; row values (a mean, an rsqrt) are computed once per row
between passes; the last pass writes the output chunk by chunk. Softmax is therefore three passes
(max, sum of exp(x - max), the output), not the two of an "online" max/sum pair: the passes fall
out of the row program's own dependencies for every chain (LogSoftmax, LayerNorm, ...) instead
of a softmax-specific rewrite, and each value is computed exactly as the one-pass kernel does
(no exp(m_old - m_new) rescaling of partial sums, which adds rounding per chunk), for one more
read of the row from GM. Rows that fit keep the one-pass kernel.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import tvm
import tvm_ffi

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .analysis.row_program import (RowAccessKind, RowProgram, check_program_dtypes, input_dtypes,
                                   is_full_row_block, program_dtypes, row_program)
from .analysis.tile_values import unsupported_construct
from .l2_reuse import l2_served, walk_distance
from .tiling import ceil_div, dtype_bytes, round_up
from .tiling import (BLOCK_BYTES, CORE_LOOP_ANNOTATION, SUPPORTED_DTYPES, KernelWork, TemplatePlan,
                     Tiling, UB_RESERVED_BYTES)
from .analysis.tir_walk import (BufferLoad, cached_by_identity, param_buffers, reduce_iter_vars,
                                reducer_of, root_blocks, schedule_blocks)
from .symbolic import ShapeSpec, shape_spec, specialize
from .symbolic_index import index_from_json, index_names, index_to_json, symbolic_row_bases
from .template import Template

MAX_BURSTS = 4095  # DataCopyPad blockCount limit: rows per tile
# default chunks are whole multiples of this many columns: whole 256-byte Compare repeats in
# float32 and float16, and 32-byte DataCopy blocks for every dtype
CHUNK_UNIT = 128


@dataclass(frozen=True)
class RowReduceKnobs:
    """Tunable choices of the row template (the cost model searches these)."""

    cores: int | None = None          # None: every vector block that gets a row
    rows_per_tile: int | None = None  # None: as many rows as fit the UB
    double_buffer: bool = True
    # columns per chunk of a multi-pass row: None gives the largest that fits the UB, for rows
    # longer than the UB only; a value below C forces chunks on a row that would fit
    chunk_cols: int | None = None


def _row_shape(func) -> tuple[int, int] | None:
    """(rows, C) from the first reduction block: every reduction runs over the last axis.

    Without a reduction, the rows of the output (a data-movement group such as a Transpose
    that keeps the last axis: every row is one contiguous slice of its input).
    """
    blocks = root_blocks(func)
    reductions = [b for b in blocks if reduce_iter_vars(b)]
    if not reductions:
        extents = [int(iv.dom.extent) for iv in blocks[-1].iter_vars]
        if len(extents) < 2 or extents[-1] < 2:
            return None
        return math.prod(extents[:-1]), extents[-1]
    first = reductions[0]
    spatial = [int(iv.dom.extent) for iv in first.iter_vars if int(iv.iter_type) == 0]
    return math.prod(spatial), int(reduce_iter_vars(first)[0].dom.extent)


@cached_by_identity
def _legal(func) -> Decision:
    """``applies`` (kept for the last few functions: ``analyse`` asks it again)."""
    shape = _row_shape(func)
    if shape is None:
        return Decision.no("neither a reduction nor rows of a multi-dimensional output")
    rows, cols = shape
    for block in root_blocks(func):
        store = block.body
        if type(store).__name__ != "BufferStore":
            return Decision.no(f"block {block.name_hint} is not a single store")
        if str(store.buffer.dtype) not in SUPPORTED_DTYPES + ("bool",):
            return Decision.no(f"block {block.name_hint} computes in {store.buffer.dtype}")
        reduce_vars = reduce_iter_vars(block)
        if reduce_vars:
            found = reducer_of(store)
            if len(reduce_vars) != 1 or found is None:
                return Decision.no(f"block {block.name_hint} is not a sum/max/min over one "
                                   "axis")
            if int(reduce_vars[0].dom.extent) != cols:
                return Decision.no(f"block {block.name_hint} reduces over another length")
            expr = found[1]
        else:
            expr = store.value
        construct = unsupported_construct(expr, masks=True)
        if construct:
            return Decision.no(f"TIR construct {construct} has no vector instruction")
        extents = [int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 0]
        if math.prod(extents) != rows and not is_full_row_block(extents, rows, cols):
            return Decision.no(f"block {block.name_hint} iterates {extents}, not "
                               f"{rows} rows of {cols}")
    if len(param_buffers(func)[1]) != 1:
        return Decision.no("the row-reduce template prints one output")
    return Decision.yes(f"last-axis reduction over rows of {cols}")


@dataclass(frozen=True)
class RowReduceAnalysis:
    """What the row template reads from a group, shared by every plan of it: ``prepared``,
    the function with its row-valued and single-consumer blocks inlined and the output's row
    loops fused into one (what every plan splits), and its ``program`` over ``rows`` rows of
    ``cols``."""

    prepared: object
    program: RowProgram
    rows: int
    cols: int
    shapes: ShapeSpec = ShapeSpec()  # symbolic dimensions: the others are at the upper bound
    cols_dim: str = ""  # the symbolic dimension rows are as long as ("" for a static length)
    # (input, row offset over ``row`` and the dimensions as JSON) of inputs whose row offset
    # depends on the symbolic dimensions (schedules/symbolic_index.py)
    bases: tuple = ()


class RowReduceSchedule(Template):
    """Template for last-axis reductions with elementwise prologues and epilogues."""

    name = "row_reduce"
    Knobs = RowReduceKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        """Decision: every block a single store over rows of the first reduction's length (or
        rows of the output without one), computed in a vector dtype, one output (over
        symbolic dimensions: so at the range's upper bound)."""
        spec = shape_spec(func)
        return _legal(specialize(func, spec.high()) if spec.symbolic else func)

    @classmethod
    def analyse(cls, func) -> RowReduceAnalysis:
        """Inline what the row program does not keep, fuse the output's row loops, read the
        row program."""
        decision = cls.applies(func)
        if not decision:
            raise TilingError(f"row-reduce template does not apply: {decision.reason}")
        spec = shape_spec(func)
        if spec.symbolic:
            return _symbolic_rows(func, spec)
        return _static_rows(func)


    @classmethod
    def plan(cls, analysis: RowReduceAnalysis, soc,
             knobs: RowReduceKnobs | None = None) -> Tiling:
        """The Tiling on ``soc``; ``knobs`` (RowReduceKnobs) as the search chose.

        A row longer than the UB (or a ``chunk_cols`` knob below C) gets the multi-pass plan:
        one row per step, ``tiling.plan.chunked`` (RowChunks: the passes and the chunks); a
        row that fits keeps the one-pass plan (``chunked`` None).

        Example
        -------
        >>> _, tiling = RowReduceSchedule.schedule(softmax_100k, soc)   # doctest: +SKIP
        >>> tiling.plan.chunked.passes.count   # max, sum of exp, output
        3
        """
        tiling = _plan(analysis.program, soc, analysis.rows, analysis.cols,
                       knobs or RowReduceKnobs())
        if analysis.shapes.symbolic:
            tiling = _with_runtime(analysis, tiling, knobs or RowReduceKnobs(), soc)
        return tiling

    @classmethod
    def apply(cls, analysis: RowReduceAnalysis, tiling: Tiling):
        """The row loop split ``[cores, tiles_per_core, rows_per_tile]``, every other block
        computed at the row, the core loop annotated."""
        sch = tvm.s_tir.Schedule(analysis.prepared)
        block_rvs = sch.get_child_blocks(sch.get_sblock("root"))
        row_loop = sch.get_loops(block_rvs[-1])[0]
        core, _, row = sch.split(row_loop, [tiling.cores, tiling.tiles_per_core,
                                            tiling.tile_len])
        for block_rv in reversed(block_rvs[:-1]):
            sch.compute_at(block_rv, row)
        sch.annotate(core, CORE_LOOP_ANNOTATION, 1)
        return sch.mod["main"]

    @staticmethod
    def knob_space(func, soc) -> list[RowReduceKnobs]:
        """Candidate knobs, the default first: core counts halving from every vector block,
        rows per tile (rows longer than the UB: columns per chunk) shrinking from the most that
        fit by powers of two, single and double buffering. ``plan`` may still refuse one
        (TilingError); searches drop it."""
        default = RowReduceSchedule.plan(RowReduceSchedule.analyse(func), soc)
        cores = sorted({max(1, soc.vector_blocks // d) for d in (1, 2, 4)}, reverse=True)
        rows, chunks = [None], [None]
        chunk = default.plan.chunked.chunk_cols if default.plan.chunked else None
        if chunk:
            chunks += sorted({chunk // d // CHUNK_UNIT * CHUNK_UNIT for d in (2, 4, 8)
                              if chunk // d >= CHUNK_UNIT}, reverse=True)
        else:
            rows += sorted({default.tile_len // d for d in (2, 4, 8)
                            if default.tile_len // d >= 1}, reverse=True)
        space = [RowReduceKnobs()]
        for double in (True, False):
            for n in cores:
                for tile in rows:
                    for cols in chunks:
                        knobs = RowReduceKnobs(None if n == soc.vector_blocks else n, tile,
                                               double, cols)
                        if knobs not in space:
                            space.append(knobs)
        return space


def _static_rows(func) -> RowReduceAnalysis:
    rows, cols = _row_shape(func)
    sch = tvm.s_tir.Schedule(func)
    inline_row_blocks(sch, rows, cols)
    out_rv = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    out_block = sch.get(out_rv)
    extents = [int(iv.dom.extent) for iv in out_block.iter_vars if int(iv.iter_type) == 0]
    loops = sch.get_loops(out_rv)
    if reduce_iter_vars(out_block):
        loops = loops[:-1]  # the reduction loop stays inside the row
    row_loops = loops[:-1] if is_full_row_block(extents, rows, cols) else loops
    if len(row_loops) > 1:
        sch.fuse(*row_loops)  # the outermost loop from here on: apply splits it
    elif not row_loops:
        # a reduction to one value has no row loop to split; refused with the IndexError
        # that indexing the empty list always raised here, so the fusion reports that
        # quote it stay as they were (a sentence instead is a change of its own)
        raise IndexError("list index out of range")
    program = row_program(schedule_blocks(sch), func, rows, cols)
    return RowReduceAnalysis(sch.mod["main"], program, rows, cols)


def _symbolic_rows(func, spec: ShapeSpec) -> RowReduceAnalysis:
    """The analysis at the range's upper bound of a row function over symbolic dimensions,
    once its row program is known to be the same at the lower end, the midpoint and the
    upper end: rows of one static length, every input read the same way at the same offsets
    of row ``row`` (the printed kernel then serves every size; its row counts come from the
    tiling struct). Its ``prepared`` function is the one at the upper bound: the printer
    reads the program's structure from it, the launcher the sizes from the call."""
    points = spec.samples()
    ends = [_static_rows(specialize(func, point)) for point in points]
    high = ends[-1]
    cols_dim = _cols_dim(spec, ends, points)
    moving: set = set()  # inputs whose row offset depends on the dimensions
    for point, other in zip(points, ends):
        if other.cols != high.cols and not cols_dim:
            raise TilingError(f"rows are {other.cols} long at {point} and {high.cols} at "
                              f"{spec.high()}: run-time tiling takes rows of one static length")
        if cols_dim and _value_constants(other.program) != _value_constants(high.program):
            raise TilingError(f"the row program's constants differ at {point} and at "
                              f"{spec.high()} (a mean over the symbolic row length {cols_dim}?); "
                              "run-time tiling needs one program")
        mine, theirs = high.program, other.program
        # a slice read as whole rows at one size (a transpose of [B, 1, H, D]) is still a
        # slice: the symbolic row offset below is checked to give those rows there too
        sliced = {name for name, kind in mine.inputs.items() if kind is RowAccessKind.ROW_SLICE
                  and theirs.inputs.get(name) is RowAccessKind.ROWS}
        theirs_inputs = {**theirs.inputs, **{name: RowAccessKind.ROW_SLICE for name in sliced}}
        if not _same_inputs(mine.inputs, theirs_inputs, other.rows) or \
                mine.temp_slots != theirs.temp_slots or mine.out_full != theirs.out_full:
            raise TilingError(f"the row program differs at {point} and at {spec.high()}; "
                              "run-time tiling needs one program")
        moving |= sliced
        for name, base in mine.bases.items():
            if name in sliced or (name not in theirs.bases and other.rows == 1):
                continue  # one value per row read as the kernel's one value (_ONE_ROW_ALIKE)
            if not tvm_ffi.structural_equal(base, theirs.bases[name], map_free_vars=True):
                moving.add(name)
    if moving and cols_dim:
        raise TilingError(f"the row offsets of {', '.join(sorted(moving))} depend on the "
                          f"symbolic dimensions and rows are {cols_dim} long: not tiled at "
                          "run time")
    bases = _symbolic_bases(func, spec, sorted(moving), points, ends) if moving else ()
    return dataclasses.replace(high, shapes=spec, cols_dim=cols_dim, bases=bases)


def _symbolic_bases(func, spec: ShapeSpec, names: list, points: list, ends: list) -> tuple:
    """((input, row offset as JSON), ...) of the inputs whose row offset depends on the
    symbolic dimensions (a transpose over ``s``): read from ``func`` over the symbols and
    checked at every row of each sampled size (``symbolic_row_bases``)."""
    samples = []
    for point, end in zip(points, ends):
        static = dict(end.program.bases)
        row = end.program.row_var
        for name in names:  # whole rows at this size: row r starts at r * cols
            static.setdefault(name, row * tvm.tirx.IntImm("int64", end.cols))
        samples.append((point, end.rows, static))
    try:
        found = symbolic_row_bases(func, names, samples)
    except TilingError as err:
        raise TilingError(f"the row offsets of {', '.join(names)} depend on the symbolic "
                          f"dimensions {[d.name for d in spec.dims]}: {err}") from err
    return tuple((name, index_to_json(found[name])) for name in names)


def _cols_dim(spec: ShapeSpec, ends: list, points: list) -> str:
    """The symbolic dimension rows are as long as ("" for rows of one static length): the
    output's last axis, when each sampled point's rows are that long and the output is full
    rows (a row-valued output over rows of run-time length would need an input's axis)."""
    last = spec.shapes[-1][-1] if spec.shapes and spec.shapes[-1] else ""
    if last.isdigit() or not all(e.program.out_full for e in ends):
        return ""
    if all(e.cols == p[last] for e, p in zip(ends, points)):
        return last
    return ""


def _value_constants(program: RowProgram) -> list:
    """The constants in the row program's values (not in load indices, whose offsets are
    checked apart): a constant of a row of run-time length (1 / C of a mean) would be the
    upper bound's in the printed kernel."""
    found: list = []

    def walk_value(expr) -> None:
        if isinstance(expr, BufferLoad):
            return
        if isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            found.append((str(expr.dtype), expr.value))
            return
        for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(expr, attr, None)
            if isinstance(child, tvm.tirx.Expr):
                walk_value(child)
        for child in getattr(expr, "args", None) or ():
            if isinstance(child, tvm.tirx.Expr):
                walk_value(child)

    for step in program.steps:
        walk_value(step.expr)
    return found


# At one row the row classifier cannot tell some reads apart, and picks the first that fits:
# a [C] input (gamma, beta) is the whole row as well as a column, and a value per row is the
# kernel's one value. Their elements are the same, so the program at the upper bound (which
# does tell them apart) reads them right at one row too: (at one row, at the bound) pairs.
_ONE_ROW_ALIKE = {(RowAccessKind.ROWS, RowAccessKind.COLUMN),
                  (RowAccessKind.SCALAR, RowAccessKind.ROW_SCALAR)}


def _same_inputs(at_bound: dict, other: dict, other_rows: int) -> bool:
    """Whether a row program's inputs at another point read as they do at the upper bound
    (``_ONE_ROW_ALIKE`` where that point has one row)."""
    if at_bound.keys() != other.keys():
        return False
    return all(kind is other[name] or (other_rows == 1 and (other[name], kind) in _ONE_ROW_ALIKE)
               for name, kind in at_bound.items())


def inline_row_blocks(sch, rows: int, cols: int) -> None:
    """Inline row-valued elementwise blocks and full blocks read by one consumer, in place in
    the TIR Schedule ``sch`` over ``rows`` rows of ``cols``: what stays are the reductions, the
    output and the full rows more than one step reads, the steps of the row program.

    Examples
    --------
    >>> sch = tvm.s_tir.Schedule(layernorm_func)   # a TOPI chain  # doctest: +SKIP
    >>> inline_row_blocks(sch, 128, 768)
    >>> [b.name_hint for b in schedule_blocks(sch)]  # sum, centred rows, sum of squares, output
    ['x_red', 'T_subtract', 'T_multiply_red', 'T_multiply_1']
    """
    changed = True
    while changed:
        changed = False
        block_rvs = sch.get_child_blocks(sch.get_sblock("root"))
        for block_rv in block_rvs[:-1]:
            block = sch.get(block_rv)
            if reduce_iter_vars(block):
                continue
            consumers = sch.get_consumers(block_rv)
            extents = [int(iv.dom.extent) for iv in block.iter_vars]
            if not is_full_row_block(extents, rows, cols) or len(consumers) == 1:
                try:
                    sch.compute_inline(block_rv)
                    changed = True
                    break
                except Exception:  # noqa: BLE001 - TVM refuses some inlines; keep the block
                    continue


def row_layout(program: RowProgram) -> tuple[int, int]:
    """(ROW_STRIDE in elements, bytes per element of a row slot): every row of every dtype in
    the UB starts 32-byte aligned, and a slot holds a row of the widest value."""
    sizes = _elem_sizes(program)
    stride = round_up(program.cols, BLOCK_BYTES // min(sizes))
    return stride, max(sizes)


def _elem_sizes(program: RowProgram) -> set:
    sizes = {dtype_bytes(d) for d in program_dtypes(program)}
    sizes.update(dtype_bytes(step.buffer.dtype) for step in program.steps)
    sizes.update(dtype_bytes(d) for d in input_dtypes(program).values())
    return sizes


def chunk_align(program: RowProgram) -> int:
    """Columns per 32-byte block of the narrowest value: chunks of a multiple of it keep every
    chunk slot of every dtype 32-byte aligned."""
    return BLOCK_BYTES // min(_elem_sizes(program))


def _footprint(program: RowProgram, rows_per_tile: int, buffer_num: int = 2) -> int:
    """UB bytes the printed kernel reserves with InitBuffer (checked against the emulator)."""
    stride, slot_bytes = row_layout(program)
    dtypes = input_dtypes(program)
    out_elem = dtype_bytes(program.out_buffer.dtype)
    streamed = sum(dtype_bytes(dtypes[name]) for name, k in program.inputs.items()
                   if k in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE))
    columns = sum(round_up(stride * dtype_bytes(dtypes[name]), BLOCK_BYTES)
                  for name, k in program.inputs.items() if k is RowAccessKind.COLUMN)
    out_tile = rows_per_tile * stride * out_elem if program.out_full \
        else round_up(rows_per_tile * out_elem, BLOCK_BYTES)
    row_slots = len(program.intermediates) + program.temp_slots
    return (buffer_num * (streamed * rows_per_tile * stride + out_tile) + columns
            + (row_slots + 1) * stride * slot_bytes + BLOCK_BYTES)  # + work + the reduced value



def _plan(program: RowProgram, soc, rows: int, cols: int, knobs: RowReduceKnobs) -> Tiling:
    check_program_dtypes(program)
    streamed = sum(1 for k in program.inputs.values()
                   if k in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE))
    if streamed > soc.max_live_buffers_per_position:
        raise TilingError(f"{streamed} row inputs exceed {soc.max_live_buffers_per_position} "
                          "live VECIN buffers")
    budget = soc.ub_bytes - UB_RESERVED_BYTES
    nbuf = 2 if knobs.double_buffer else 1
    one_row = _footprint(program, 1, nbuf)
    if one_row > budget or (knobs.chunk_cols is not None and knobs.chunk_cols < cols):
        return _plan_chunked(program, soc, knobs, budget)
    per_row = _footprint(program, 2, nbuf) - one_row
    max_rows = min(MAX_BURSTS, 1 + (budget - one_row) // max(per_row, 1))
    if knobs.rows_per_tile is not None:
        if not 1 <= knobs.rows_per_tile <= max_rows:
            raise TilingError(f"rows_per_tile={knobs.rows_per_tile} must be in 1..{max_rows} "
                              f"on {soc.name}")
        max_rows = knobs.rows_per_tile
    cores, block_rows, rows_per_tile, tiles_per_core = _row_tiles(
        rows, max_rows, min(knobs.cores or soc.vector_blocks, soc.vector_blocks))
    write = (rows * cols if program.out_full else rows) * dtype_bytes(program.out_buffer.dtype)
    return Tiling("row_reduce", rows, cores, block_rows, rows_per_tile, tiles_per_core, nbuf,
                  program.temp_slots, _footprint(program, rows_per_tile, nbuf), soc.ub_bytes,
                  _row_reads(program, rows, cols, cores), write, cols,
                  work=KernelWork(steps=tiles_per_core, vector_repeats=min(block_rows, rows)),
                  plan=RowReducePlan(*row_layout(program)))


def _row_tiles(rows: int, max_rows: int, max_cores: int) -> tuple:
    """(cores, block_rows, rows_per_tile, tiles_per_core) of ``rows`` rows (what ``_plan``
    and the host tiling function of a symbolic kernel compute)."""
    cores = max(1, min(max_cores, rows))
    per_core = ceil_div(rows, cores)
    rows_per_tile = min(max_rows, per_core)
    tiles_per_core = ceil_div(per_core, rows_per_tile)
    block_rows = tiles_per_core * rows_per_tile
    return ceil_div(rows, block_rows), block_rows, rows_per_tile, tiles_per_core


def _with_runtime(analysis: RowReduceAnalysis, tiling: Tiling, knobs, soc) -> Tiling:
    """The upper bound's Tiling with the plan of each call (``RowReduceRuntime``)."""
    program, cols = analysis.program, analysis.cols
    if tiling.plan.chunked is not None:
        raise TilingError(f"rows of {cols} elements do not fit the UB whole; multi-pass rows "
                          "are not tiled at run time yet")
    nbuf = tiling.buffer_num
    one, two = _footprint(program, 1, nbuf), _footprint(program, 2, nbuf)
    if _footprint(program, tiling.tile_len, nbuf) != one + (tiling.tile_len - 1) * (two - one):
        raise TilingError("the row kernel's UB footprint is not affine in its rows a tile; "
                          "not tiled at run time")
    out_cols = cols if program.out_full else 1
    write_row = out_cols * dtype_bytes(program.out_buffer.dtype)
    max_cores = min(knobs.cores or soc.vector_blocks, soc.vector_blocks)
    if analysis.cols_dim:
        # rows of run-time length: GM bytes affine in it (0 and 1 column apart); the UB's row
        # slots stay ROW_STRIDE apart, the upper bound's, so its footprint is the bound's
        fixed_row, fixed_core = _row_reads(program, 1, 0, 0), _row_reads(program, 0, 0, 1)
        runtime = RowReduceRuntime(
            analysis.shapes, tiling.tile_len, max_cores, out_cols, fixed_row, fixed_core, 0,
            one, two - one, analysis.cols_dim, _row_reads(program, 1, 1, 0) - fixed_row,
            _row_reads(program, 0, 1, 1) - fixed_core, dtype_bytes(program.out_buffer.dtype))
    else:
        runtime = RowReduceRuntime(
            analysis.shapes, tiling.tile_len, max_cores, out_cols,
            _row_reads(program, 1, cols, 0), _row_reads(program, 0, cols, 1), write_row,
            one, two - one, bases=analysis.bases)
    return dataclasses.replace(tiling, plan=dataclasses.replace(tiling.plan, runtime=runtime))


def row_reduce_tiling_at(tiling: Tiling, values: dict) -> Tiling:
    """The Tiling one call of a symbolic row kernel runs with at ``values`` ({name: size})."""
    rt = tiling.plan.runtime
    spec = rt.shapes
    sizes = spec.values(**values)
    cols = sizes[rt.cols_dim] if rt.cols_dim else tiling.cols
    rows = spec.numel(len(spec.shapes) - 1, sizes) // (cols if rt.cols_dim else rt.out_cols)
    cores, block_rows, rows_per_tile, tiles_per_core = _row_tiles(rows, rt.rows_cap,
                                                                  rt.max_cores)
    read = rows * (rt.read_per_row + cols * rt.read_per_row_col) + \
        cores * (rt.read_per_core + cols * rt.read_per_core_col)
    write = rows * (rt.write_per_row + cols * rt.write_per_col)
    return Tiling("row_reduce", rows, cores, block_rows, rows_per_tile, tiles_per_core,
                  tiling.buffer_num, tiling.temp_buffers,
                  rt.ub_one_row + (rows_per_tile - 1) * rt.ub_per_row, tiling.ub_capacity,
                  read, write, cols, work=KernelWork(steps=tiles_per_core,
                                               vector_repeats=min(block_rows, rows)),
                  plan=dataclasses.replace(tiling.plan, runtime=None))


def _row_reads(program: RowProgram, rows, cols, cores) -> int:
    read, seen = 0, set()
    for kind, buffer, _ in program.loads.values():
        if buffer.name in seen or buffer.name not in program.inputs:
            continue
        seen.add(buffer.name)
        elem = dtype_bytes(buffer.dtype)
        read += {RowAccessKind.ROWS: rows * cols * elem,
                 RowAccessKind.ROW_SLICE: rows * cols * elem,
                 RowAccessKind.COLUMN: cores * cols * elem,
                 RowAccessKind.ROW_SCALAR: rows * elem,
                 RowAccessKind.SCALAR: cores * elem}[kind]
    return read


# inputs a multi-pass kernel copies in chunk by chunk: a broadcast column is as long as a row
CHUNK_STREAMED = (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE, RowAccessKind.COLUMN)


@dataclass(frozen=True)
class RowPasses:
    """The passes of a row longer than the UB, derived from the row program's dependencies.

    A reduction runs in the pass after the last pass that makes a row value it depends on
    (through full steps, which are recomputed chunk by chunk wherever they are needed); a row
    step is computed once, right after the pass that completes its inputs (0: at the row's
    start); a full output is written by the pass after its row values are known. The step
    maps are (step index, pass) pairs, so that the plan's JSON form reads back as it was.
    """

    count: int
    reduce_pass: tuple  # (reduce step index, the pass (1-based) that accumulates it), ...
    row_after: tuple    # (row step index, the pass after which it is computed), ...
    out_pass: int       # the pass writing a full output chunk by chunk (0: a row-valued output)
    computed: tuple     # per pass: indices of the steps computed on each chunk, in order
    streamed: tuple     # per pass: inputs copied in chunk by chunk, in program.inputs order

    def reduced_in(self, index: int) -> int | None:
        """The pass that accumulates reduce step ``index`` (None: not a reduce step)."""
        return dict(self.reduce_pass).get(index)

    def computed_after(self, index: int) -> int | None:
        """The pass after which row step ``index`` is computed (None: not a row step)."""
        return dict(self.row_after).get(index)


@dataclass(frozen=True)
class RowChunks:
    """The multi-pass plan of a row longer than the UB (or chunked by the knob): every pass
    sweeps the row in ``chunks_per_row`` chunks of ``chunk_cols`` columns; ``passes`` says
    what each pass computes and streams."""

    passes: RowPasses
    chunk_cols: int
    chunks_per_row: int


@dataclass(frozen=True)
class RowReducePlan(TemplatePlan, template="row_reduce"):
    """What the row template decided for one kernel, read by its printer.

    The UB layout of a row (``row_layout``): ``row_stride`` elements from one row to the next
    (every row of every dtype 32-byte aligned) and ``slot_bytes`` per element of a row slot
    (the widest value). ``chunked``: the multi-pass plan of a row longer than the UB (its
    slots hold one chunk each, ``chunk_cols`` apart, instead of rows ``row_stride`` apart);
    None for rows that fit, one pass over whole rows.
    """

    row_stride: int
    slot_bytes: int
    chunked: RowChunks | None = None
    runtime: "RowReduceRuntime | None" = None  # symbolic rows: tiled per call


@dataclass(frozen=True)
class RowReduceRuntime:
    """How a row kernel over symbolic rows is tiled per call (``row_reduce_tiling_at``; its
    host tiling function does the same in C++): ``rows_cap`` rows a tile at most (what the UB
    was sized for at the upper bound), ``max_cores``; a call's rows are the output's elements
    over ``out_cols``. GM bytes per row and per core, UB bytes of a one-row tile and per
    further row (the footprint is affine in the rows of a tile)."""

    shapes: ShapeSpec
    rows_cap: int
    max_cores: int
    out_cols: int
    read_per_row: int
    read_per_core: int
    write_per_row: int
    ub_one_row: int
    ub_per_row: int
    # rows of run-time length (Softmax over a symbolic key axis): the dimension they are as
    # long as, and the GM bytes per row / per core / written per row for each of its columns
    cols_dim: str = ""
    read_per_row_col: int = 0
    read_per_core_col: int = 0
    write_per_col: int = 0
    # inputs whose row offset depends on the dimensions (a transpose over s): (input, offset
    # of row ``row`` as JSON, schedules/symbolic_index.py); the kernel reads the dimensions
    # they name from its tiling struct (``dim_<name>``)
    bases: tuple[tuple[str, str], ...] = ()

    def base_dims(self) -> list:
        """The dimensions the symbolic row offsets name, in the ShapeSpec's order."""
        named = set().union(*(index_names(index_from_json(text)) for _, text in self.bases))
        return [d.name for d in self.shapes.dims if d.name in named]


def row_passes(program: RowProgram) -> RowPasses:
    """The passes of ``program`` (see RowPasses); shared by the plan and the printer.

    Example
    -------
    >>> row_passes(softmax_program).count   # max, sum of exp, output  # doctest: +SKIP
    3
    """
    need, avail, deps = {}, {}, {}
    for step in program.steps:
        deps[step.index] = [program.loads[key] for key in step.plan.accesses]
        ready = 0
        for kind, _, producer in deps[step.index]:
            if kind is RowAccessKind.REDUCED:
                ready = max(ready, avail[producer])
            elif kind is RowAccessKind.INTERMEDIATE:
                ready = max(ready, need[producer])
        need[step.index] = ready
        avail[step.index] = ready + 1 if step.kind == "reduce" else ready
    out = program.steps[-1]
    reduce_pass = {s.index: avail[s.index] for s in program.steps if s.kind == "reduce"}
    out_pass = need[out.index] + 1 if out.kind == "full" else 0
    count = max([1, out_pass] + list(reduce_pass.values()))
    computed, streamed = [], []
    for p in range(1, count + 1):
        todo = [i for i, q in reduce_pass.items() if q == p] + ([out.index] if out_pass == p
                                                              else [])
        steps = set()
        while todo:
            index = todo.pop()
            if index not in steps:
                steps.add(index)
                todo += [producer for kind, _, producer in deps[index]
                         if kind is RowAccessKind.INTERMEDIATE]
        names = {buffer.name for i in steps for kind, buffer, _ in deps[i]
                 if kind in CHUNK_STREAMED}
        computed.append(tuple(sorted(steps)))
        streamed.append(tuple(n for n in program.inputs if n in names))
    row_after = tuple((s.index, need[s.index]) for s in program.steps if s.kind == "row")
    return RowPasses(count, tuple(reduce_pass.items()), row_after, out_pass, tuple(computed),
                     tuple(streamed))


def _chunked_footprint(program: RowProgram, chunk: int, buffer_num: int) -> int:
    """UB bytes a multi-pass kernel reserves: a queue per streamed input and the output, and
    the row program's slots, each ``chunk`` columns (a multiple of ``chunk_align``)."""
    _, slot_bytes = row_layout(program)
    dtypes = input_dtypes(program)
    streamed = sum(dtype_bytes(dtypes[name]) for name, k in program.inputs.items()
                   if k in CHUNK_STREAMED)
    out_elem = dtype_bytes(program.out_buffer.dtype)
    out_tile = chunk * out_elem if program.out_full else round_up(out_elem, BLOCK_BYTES)
    row_slots = len(program.intermediates) + program.temp_slots
    return (buffer_num * (streamed * chunk + out_tile)
            + (row_slots + 1) * chunk * slot_bytes + BLOCK_BYTES)  # + work + the reduced value


def _largest_chunk(program: RowProgram, budget: int, buffer_num: int, soc) -> int:
    fixed = _chunked_footprint(program, 0, buffer_num)
    per_col = _chunked_footprint(program, 1, buffer_num) - fixed
    chunk = (budget - fixed) // per_col // CHUNK_UNIT * CHUNK_UNIT
    if chunk < CHUNK_UNIT:
        raise TilingError(f"a chunk of {CHUNK_UNIT} columns needs "
                          f"{_chunked_footprint(program, CHUNK_UNIT, buffer_num)} UB bytes, more "
                          f"than {soc.name}'s {budget}")
    return chunk


def _chunked_l2_bytes(program: RowProgram, passes: RowPasses, cores: int, soc) -> int:
    """The streamed bytes of a multi-pass row that L2 serves (``l2_reuse``): a row input
    read again in a later pass and a broadcast column read again for every row; the first
    read of each comes from HBM. Between two reads of one chunk each working core reads one
    row's chunks of one pass (the reuse distance)."""
    rows, cols = program.rows, program.cols
    dtypes = input_dtypes(program)
    times = {}
    for names in passes.streamed:
        for name in names:
            times[name] = times.get(name, 0) + 1
    rereads = 0
    for name, count in times.items():
        row_bytes = cols * dtype_bytes(dtypes[name])
        first = row_bytes if program.inputs[name] is RowAccessKind.COLUMN else rows * row_bytes
        rereads += count * rows * row_bytes - first
    per_pass = max(sum(cols * dtype_bytes(dtypes[name]) for name in names)
                   for names in passes.streamed)
    return l2_served(rereads, walk_distance([(cores, per_pass)]), soc)


def _plan_chunked(program: RowProgram, soc, knobs: RowReduceKnobs, budget: int) -> Tiling:
    """The multi-pass plan of a row longer than the UB (or of a row chunked by the knob): one
    row per step, ``passes`` sweeps of ``chunk_cols`` columns each; the GM bytes count every
    pass's reads."""
    rows, cols = program.rows, program.cols
    streamed = sum(1 for k in program.inputs.values() if k in CHUNK_STREAMED)
    if streamed > soc.max_live_buffers_per_position:
        raise TilingError(f"{streamed} streamed inputs of a multi-pass row exceed "
                          f"{soc.max_live_buffers_per_position} live VECIN buffers")
    if knobs.rows_per_tile not in (None, 1):
        raise TilingError(f"rows_per_tile={knobs.rows_per_tile}: a row longer than the UB "
                          "is one row per step (rows_per_tile 1)")
    nbuf = 2 if knobs.double_buffer else 1
    largest = _largest_chunk(program, budget, nbuf, soc)
    chunk = knobs.chunk_cols or largest
    align = chunk_align(program)
    if chunk % align or not align <= chunk <= largest:
        raise TilingError(f"chunk_cols={chunk} must be a multiple of {align} in {align}.."
                          f"{largest} for rows of {cols} on {soc.name}")
    passes = row_passes(program)
    cores = max(1, min(knobs.cores or soc.vector_blocks, soc.vector_blocks, rows))
    per_core = ceil_div(rows, cores)
    cores = ceil_div(rows, per_core)
    dtypes = input_dtypes(program)
    read = sum(rows * cols * dtype_bytes(dtypes[name]) for names in passes.streamed
               for name in names)
    read += sum((rows if kind is RowAccessKind.ROW_SCALAR else cores) * dtype_bytes(dtypes[name])
                for name, kind in program.inputs.items()
                if kind in (RowAccessKind.ROW_SCALAR, RowAccessKind.SCALAR))
    write = (rows * cols if program.out_full else rows) * dtype_bytes(program.out_buffer.dtype)
    return Tiling("row_reduce", rows, cores, per_core, 1, per_core, nbuf, program.temp_slots,
                  _chunked_footprint(program, chunk, nbuf), soc.ub_bytes, read, write, cols,
                  # a row longer than the UB is streamed in chunks, once per pass: each chunk
                  # is one step
                  work=KernelWork(steps=per_core * passes.count * ceil_div(cols, chunk),
                                  vector_repeats=min(per_core, rows),
                                  l2_operand_bytes=_chunked_l2_bytes(program, passes, cores,
                                                                     soc)),
                  plan=RowReducePlan(*row_layout(program),
                                     RowChunks(passes, chunk, ceil_div(cols, chunk))))


__all__ = ["RowReduceSchedule", "RowReduceKnobs", "RowReducePlan", "RowChunks",
           "inline_row_blocks", "row_layout", "RowPasses", "row_passes", "chunk_align",
           "CHUNK_STREAMED", "CHUNK_UNIT"]
