"""DataMovementSchedule: slices, concats, pads, expands, gathers and transposes as row copies.

The group's PrimFunc is inlined into its output block, whose value is viewed per output row
``r`` (the leading axes) and column ``c`` (the last axis). Every maximal data-movement subtree
(a load, or an ``if_then_else`` over loads and constants: concat, pad) is an *operand* that is
assembled in the UB as a ``[tileRows, ROW_STRIDE]`` tile; the consumer's elementwise compute then
runs on the operand tiles and the result is written to GM once.

Columns are cut into *segments* where a condition on ``c`` changes (a concat on the last axis,
pad borders). In a segment, a load's element offset is ``base(r) + stride * c``:

* stride 1 (a run): one DataCopyPad burst per row, or one multi-burst copy per tile where the
  rows' bases are a fixed pitch apart;
* stride 0: one element per row (an Expand of ``[R, 1]``);
* any other stride (a transpose that moves the last axis, a slice with a step on it): when the
  rows' bases are consecutive (a transpose) a *box* copy brings ``tileRows`` elements of every
  column in one multi-burst DataCopyPad, else each row copies the span it needs;
* a constant (pad value) is written with Duplicate.

Copies land 32-byte aligned in a staging buffer; unless the staging layout already is the
operand tile (one segment of runs), one vector ``Gather`` with an offset tensor built once per
core permutes it into the operand tile. Conditions on ``r`` only (a concat or pad on an outer
axis) choose per row which source is copied. Nothing is gathered on the scalar unit except the
index values of a Gather (``take``), read once per row.

The rows, operands, segments and sources are read back from the TIR by ``movement_program.py``;
this file plans the tiles (UB bytes, GM bytes, cores) and schedules the output block's loops.

Example
-------
>>> from tvm_ascend.schedules import DataMovementSchedule     # doctest: +SKIP
>>> scheduled, tiling = DataMovementSchedule.schedule(prim_func, get_soc("Ascend910B1"))
>>> tiling.template, tiling.cols                              # doctest: +SKIP
('data_movement', 4)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import tvm

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .analysis.movement_program import (MAX_BURSTS, Choice, MovementProgram, evaluate, index_loads,
                                        prepared_movement)
from .analysis.tir_walk import load_buffer, param_buffers
from .symbolic import ShapeSpec, shape_spec, specialize
from .tiling import ceil_div, dtype_bytes, knob_grid
from .tiling import CORE_LOOP_ANNOTATION, KernelWork, TemplatePlan, Tiling, UB_RESERVED_BYTES
from .template import Template


# ---- the template ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataMovementKnobs:
    """Tunable choices of the template."""

    cores: int | None = None       # None: every vector block that gets a row
    tile_rows: int | None = None   # None: as many rows as fit the UB
    double_buffer: bool = True


@dataclass(frozen=True)
class DataMovementPlan(TemplatePlan, template="data_movement"):
    """What the data-movement template decided beyond the Tiling's rows and tiles.

    ``gathered_operands``: operand tiles that a vector Gather permutes out of their staging
    copy (each costs a second tile and an offset tensor in the UB); the others are copied
    straight into their tile.
    """

    gathered_operands: int = 0
    runtime: "DataMovementRuntime | None" = None  # symbolic rows: tiled per call


@dataclass(frozen=True)
class DataMovementRuntime:
    """How a data-movement kernel over symbolic rows is tiled per call
    (``data_movement_tiling_at``; its host tiling function, ``emit_row_tiling_body``, does
    the same in C++): a call's rows are the output's elements over ``out_cols``, split over
    at most ``max_cores`` cores in tiles of at most ``rows_cap`` rows (the staging layout
    and the UB stay the upper bound's: ``TILE_ROWS`` is a constant of the kernel). GM bytes
    read per row and per core (scalars read once a core), written per row."""

    shapes: ShapeSpec
    rows_cap: int
    max_cores: int
    out_cols: int
    read_per_row: int
    read_per_core: int
    write_per_row: int
    cols_dim: str = ""  # rows of run-time length: not taken (the columns are segments)

    def base_dims(self) -> list:
        """Dimensions the row offsets read at run time: none (they are the same at every
        size, ``_symbolic_movement`` checks)."""
        return []


@dataclass(frozen=True)
class DataMovementAnalysis:
    """What the data-movement template reads from a group, shared by every plan of it:
    ``program`` (its rows, operands, segments and sources) and ``prepared``, the function with
    every block inlined into the output block (what every plan splits); over symbolic
    dimensions both are the range's upper bound's, ``shapes`` says which."""

    program: MovementProgram
    prepared: object
    shapes: ShapeSpec = ShapeSpec()


class DataMovementSchedule(Template):
    """Template for groups that move data (and compute elementwise on what they moved)."""

    name = "data_movement"
    Knobs = DataMovementKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        """Whether the output is rows assembled from contiguous runs, strided columns and
        constants, with elementwise compute on top."""
        if len(param_buffers(func)[1]) != 1:
            return Decision.no("the data-movement template prints one output")
        try:
            spec = shape_spec(func)
            program, _ = prepared_movement(specialize(func, spec.high()) if spec.symbolic
                                           else func)
        except TilingError as err:
            return Decision.no(str(err))
        kinds = sorted({leaf.kind for seg in program.segments() for leaf in seg.leaves()})
        return Decision.yes(f"rows of {program.cols} assembled from {', '.join(kinds)} copies")

    @classmethod
    def analyse(cls, func) -> DataMovementAnalysis:
        """The movement program and the inlined function (TilingError: not this template's)."""
        if len(param_buffers(func)[1]) != 1:
            raise TilingError("data-movement template does not apply: several outputs")
        spec = shape_spec(func)
        if spec.symbolic:
            return _symbolic_movement(func, spec)
        return DataMovementAnalysis(*prepared_movement(func))

    @classmethod
    def plan(cls, analysis: DataMovementAnalysis, soc,
             knobs: DataMovementKnobs | None = None) -> Tiling:
        """Cores and rows per tile (``plan_tiling``) on ``soc``; over symbolic dimensions the
        upper bound's, its plan telling how each call tiles (``DataMovementRuntime``)."""
        knobs = knobs or DataMovementKnobs()
        tiling = plan_tiling(analysis.program, soc, knobs)
        if analysis.shapes.symbolic:
            tiling = _with_runtime(analysis, tiling, knobs, soc)
        return tiling

    @classmethod
    def apply(cls, analysis: DataMovementAnalysis, tiling: Tiling):
        """The output's row loops fused and split ``[cores, tiles_per_core, tile_rows]``, the
        core loop annotated (a one-row output keeps its loop)."""
        sch = tvm.s_tir.Schedule(analysis.prepared)
        loops = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[-1])
        if len(loops) > 1:
            row_loop = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
            core, _, _ = sch.split(row_loop, [tiling.cores, tiling.tiles_per_core,
                                              tiling.tile_len])
            sch.annotate(core, CORE_LOOP_ANNOTATION, 1)
        return sch.mod["main"]

    @staticmethod
    def knob_space(func, soc) -> list[DataMovementKnobs]:
        """Candidate knobs for the tuner, the default first: core counts halving from every
        vector block, rows per tile halving from the most that fit, single and double
        buffering. A candidate ``plan`` refuses (TilingError) is dropped by the search.

        Example
        -------
        >>> DataMovementSchedule.knob_space(func, soc)[0]            # doctest: +SKIP
        DataMovementKnobs(cores=None, tile_rows=None, double_buffer=True)
        """
        default = DataMovementSchedule.plan(DataMovementSchedule.analyse(func), soc)
        cores = sorted({max(1, default.cores // d) for d in (1, 2, 4)}, reverse=True)
        rows = [None] + sorted({default.tile_len // d for d in (2, 4, 8)
                                if default.tile_len // d >= 1}, reverse=True)
        return knob_grid(DataMovementKnobs, default.cores, cores, rows)


def ub_bytes(program: MovementProgram, tile_rows: int, buffer_num: int) -> int:
    """UB bytes the printed kernel reserves with InitBuffer (checked against the emulator)."""
    elem = dtype_bytes(program.dtype)
    tile = tile_rows * program.row_stride * elem
    staged = sum(op.layout(tile_rows, program.align) * elem for op in program.operands)
    gathered = sum(1 for op in program.operands if not op.direct)
    return (buffer_num * (staged + tile) + gathered * (tile + tile_rows * program.row_stride * 4)
            + program.plan.n_slots * tile)


def _tree_bytes(tree, mask: np.ndarray, row_bytes: int) -> int:
    if not mask.any():
        return 0
    if isinstance(tree, Choice):
        chosen = mask & np.broadcast_to(np.asarray(evaluate(tree.cond, {
            "r": np.arange(mask.size, dtype=np.int64)})), mask.shape).astype(bool)
        return (_tree_bytes(tree.then, chosen, row_bytes)
                + _tree_bytes(tree.other, mask & ~chosen, row_bytes))
    if tree.kind == "const":
        return 0
    index = sum(dtype_bytes(load_buffer(ld).dtype) for ld in tree.index_loads)
    return int(mask.sum()) * (row_bytes + index)


def gm_read_bytes(program: MovementProgram, cores: int) -> int:
    """GM bytes the kernel reads: every copy of every segment, index values, scalars per core."""
    elem = dtype_bytes(program.dtype)
    total = 0
    for seg in program.segments():
        if seg.layout == "box":
            total += program.rows * seg.width * elem
        else:
            total += _tree_bytes(seg.tree, np.ones(program.rows, bool), seg.row_len * elem)
    total += cores * sum(dtype_bytes(b.dtype) for b, _ in program.scalars.values())
    total += cores * sum(dtype_bytes(load_buffer(ld).dtype)  # ids that address a scalar
                         for _, offset in program.scalars.values() for ld in index_loads(offset))
    return total


def plan_tiling(program: MovementProgram, soc, knobs: DataMovementKnobs) -> Tiling:
    """Cores and rows per tile: as many rows as fit the UB, box copies within their runs."""
    nbuf = 2 if knobs.double_buffer else 1
    live = len(program.operands)
    if live > soc.max_live_buffers_per_position:
        raise TilingError(f"{live} operand tiles exceed {soc.max_live_buffers_per_position} "
                          f"live VECIN buffers on {soc.name}")
    rows = program.rows
    cores = max(1, min(knobs.cores or soc.vector_blocks, soc.vector_blocks, rows))
    cap = min(MAX_BURSTS, ceil_div(rows, cores), program.max_box_rows)
    if knobs.tile_rows is not None:
        cap = min(cap, knobs.tile_rows)
    budget = soc.ub_bytes - UB_RESERVED_BYTES
    runs = program.box_runs
    candidates = [t for t in range(cap, 0, -1) if runs % t == 0] if any(
        seg.layout == "box" for seg in program.segments()) else None
    tile_rows = _largest_fit(program, candidates, cap, budget, nbuf)
    if tile_rows is None:
        raise TilingError(f"one row of {program.cols} elements needs "
                          f"{ub_bytes(program, 1, nbuf)} UB bytes; {soc.name} has {budget} "
                          "(rows longer than the UB need a multi-pass kernel, not written yet)")
    per_core = ceil_div(rows, cores)
    tiles_per_core = ceil_div(per_core, tile_rows)
    block_rows = tiles_per_core * tile_rows
    cores = ceil_div(rows, block_rows)
    elem = dtype_bytes(program.dtype)
    ub = ub_bytes(program, tile_rows, nbuf)
    return Tiling("data_movement", rows, cores, block_rows, tile_rows, tiles_per_core, nbuf,
                  program.plan.n_slots, ub, soc.ub_bytes, gm_read_bytes(program, cores),
                  rows * program.cols * elem, program.cols,
                  plan=DataMovementPlan(sum(not op.direct for op in program.operands)),
                  work=KernelWork(steps=tiles_per_core, vector_repeats=min(block_rows, rows)))


# ---- symbolic rows: one kernel for the whole range --------------------------------------------
def _copy_shape(program: MovementProgram) -> list:
    """What the printed kernel's copies are made of, apart from the row count and the row
    offsets: per operand, per segment its columns, layout, row length and pitch, and each
    source's kind, stride and buffer (by name, whatever its shape)."""
    shape = [program.cols, program.dtype,
             sorted((b.name, str(offset)) for b, offset in program.scalars.values())]
    for op in program.operands:
        for seg in op.segments:
            sources = [(leaf.kind, leaf.stride, leaf.buffer.name if leaf.buffer is not None
                        else None, str(leaf.value)) for leaf in seg.leaves()]
            shape.append((op.index, op.direct, seg.c0, seg.c1, seg.layout, seg.row_len,
                          seg.pitch, sources))
    return shape


def _offsets(leaf, rows: int) -> np.ndarray:
    """The element offsets ``leaf`` reads at rows ``0..rows-1``; a memory read inside them (a
    Gather's ids) reads a fixed pseudo-random table by flat offset, so two offsets agree where
    they read the same ids from the same positions."""
    def table(buffer, flat):
        flat = np.asarray(flat, np.int64)
        return (flat * 2654435761 + 97) % 1000003  # the same "ids" at the same position
    return np.broadcast_to(np.asarray(evaluate(leaf.base, {"r": np.arange(rows, dtype=np.int64)},
                                               table)), (rows,))


def _symbolic_movement(func, spec: ShapeSpec) -> DataMovementAnalysis:
    """The analysis at the range's upper bound of a movement over symbolic rows, once the
    kernel it prints is known to serve the lower end and the midpoint: the same columns,
    segments and sources, every row offset the bound's kernel computes equal to the one of
    the function at that size over its rows (a Gather's ``ids[r // s, r % s]`` is ``ids``'s
    flat element ``r`` at every ``s``), no row-dependent choice of source (a concat over rows)
    and no box or multi-burst copy whose runs depend on the row count. Only the rows change
    with the dimension; they come from the tiling struct."""
    points = spec.samples()
    ends = [prepared_movement(specialize(func, point)) for point in points]
    program, prepared = ends[-1]
    last = spec.shapes[-1][-1] if spec.shapes[-1] else "1"
    if not last.isdigit():
        raise TilingError(f"the output's last axis is the symbolic dimension {last}: its "
                          "columns (segments, box copies) are static only; not tiled at run time")
    shape = _copy_shape(program)
    for point, (other, _) in zip(points, ends):
        for seg in other.segments():
            if isinstance(seg.tree, Choice):
                raise TilingError(f"columns {seg.c0}..{seg.c1} choose their source per row at "
                                  f"{point} (a concat or pad over rows): not tiled at run time")
            if seg.layout == "box" or (seg.pitch is not None and seg.pitch_runs != other.rows):
                raise TilingError(f"columns {seg.c0}..{seg.c1} are copied in runs whose length "
                                  f"depends on the rows at {point}: not tiled at run time")
        if _copy_shape(other) != shape:
            raise TilingError(f"the data-movement kernel differs at {point} and at "
                              f"{spec.high()}; run-time tiling needs one kernel")
        for mine, theirs in zip(program.segments(), other.segments()):
            for at_bound, here in zip(mine.leaves(), theirs.leaves()):
                if here.base is None:
                    continue
                if not np.array_equal(_offsets(at_bound, other.rows),
                                      _offsets(here, other.rows)):
                    raise TilingError(f"{here.buffer.name}'s row offsets depend on the symbolic "
                                      f"dimensions ({here.base} at {point}, {at_bound.base} at "
                                      f"{spec.high()}): not tiled at run time")
    return DataMovementAnalysis(program, prepared, spec)


def _with_runtime(analysis: DataMovementAnalysis, tiling: Tiling, knobs, soc) -> Tiling:
    """The upper bound's Tiling with the plan of each call (``DataMovementRuntime``); its GM
    bytes, affine in the rows and the cores, are checked against ``gm_read_bytes``."""
    program = analysis.program
    elem = dtype_bytes(program.dtype)
    rows_bytes = gm_read_bytes(program, 0)  # no core: what the rows read
    per_core = gm_read_bytes(program, 1) - rows_bytes
    per_row = rows_bytes // program.rows
    if per_row * program.rows != rows_bytes:
        raise TilingError("the data-movement kernel's GM reads are not the same for every row; "
                          "not tiled at run time")
    runtime = DataMovementRuntime(analysis.shapes, tiling.tile_len,
                                  min(knobs.cores or soc.vector_blocks, soc.vector_blocks),
                                  program.cols, per_row, per_core, program.cols * elem)
    return dataclasses.replace(tiling, plan=dataclasses.replace(tiling.plan, runtime=runtime))


def data_movement_tiling_at(tiling: Tiling, values: dict) -> Tiling:
    """The Tiling one call of a data-movement kernel over symbolic rows runs with at
    ``values`` ({name: size}): its rows, cores and tiles; the UB stays the bound's."""
    rt = tiling.plan.runtime
    spec = rt.shapes
    rows = spec.numel(len(spec.shapes) - 1, spec.values(**values)) // rt.out_cols
    cores = max(1, min(rt.max_cores, rows))
    per_core = ceil_div(rows, cores)
    tile_rows = min(rt.rows_cap, per_core)
    tiles_per_core = ceil_div(per_core, tile_rows)
    block_rows = tiles_per_core * tile_rows
    cores = ceil_div(rows, block_rows)
    return Tiling("data_movement", rows, cores, block_rows, tile_rows, tiles_per_core,
                  tiling.buffer_num, tiling.temp_buffers, tiling.ub_bytes, tiling.ub_capacity,
                  rows * rt.read_per_row + cores * rt.read_per_core, rows * rt.write_per_row,
                  tiling.cols, plan=dataclasses.replace(tiling.plan, runtime=None),
                  work=KernelWork(steps=tiles_per_core, vector_repeats=min(block_rows, rows)))


def _largest_fit(program, candidates, cap: int, budget: int, nbuf: int) -> int | None:
    fits = lambda t: ub_bytes(program, t, nbuf) <= budget  # noqa: E731
    if candidates is not None:
        return next((t for t in candidates if fits(t)), None)
    if not fits(1):
        return None
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


__all__ = ["DataMovementSchedule", "DataMovementKnobs", "DataMovementPlan", "DataMovementRuntime",
           "plan_tiling", "gm_read_bytes", "ub_bytes", "data_movement_tiling_at"]
