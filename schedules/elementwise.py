"""ElementwiseSchedule: elementwise / broadcast groups, split over AI cores and UB tiles.

The fused PrimFunc's producer blocks are inlined into the one output block, its loops are fused
into one flat loop and split into ``[cores, tiles_per_core, tile_len]``; the core loop carries the
annotation ``ascend.block_idx`` (on the NPU it is GetBlockIdx(); compiled for llvm it is a serial
loop, so the same tiling gives the reference result on the CPU).

Example
-------
>>> from tvm_ascend.schedules import ElementwiseSchedule     # doctest: +SKIP
>>> scheduled, tiling = ElementwiseSchedule.schedule(prim_func, get_soc("Ascend910B1"))
>>> tiling.cores, tiling.tile_len                            # doctest: +SKIP
(48, 2048)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .analysis.tile_values import (AccessKind, buffer_size, classify_load, make_analyzer,
                                   plan_tile_values, unsupported_construct)
from .analysis.tir_walk import expr_dtype, first_block_realize, param_buffers, root_blocks, walk
from .l2_reuse import l2_served, walk_distance
from .tiling import ceil_div, dtype_bytes, knob_grid, round_up
from .tiling import (BLOCK_BYTES, CORE_LOOP_ANNOTATION, SUPPORTED_DTYPES, KernelWork, TemplatePlan,
                     Tiling, UB_RESERVED_BYTES)
from .symbolic import ShapeSpec, shape_spec, specialize
from .template import Template

RESIDENT_GATHER_MAX_BYTES = 16384  # broadcast sources up to this size stay in the UB per core
REPEAT_BYTES = 256               # one vector repeat


@dataclass(frozen=True)
class ElementwiseKnobs:
    """Tunable choices of the template (the cost model searches these)."""

    cores: int | None = None      # None: as many as keep every core busy
    tile_len: int | None = None   # None: the largest tile that fits the UB
    double_buffer: bool = True


@dataclass(frozen=True)
class ElementwisePlan(TemplatePlan, template="elementwise"):
    """What the elementwise template decided beyond the Tiling's tiles, read by its printer.

    ``slot_bytes``: bytes per element of a temp slot (the widest value the expression makes or
    reads). ``resident_inputs``: the broadcast sources (buffer names) small enough that each
    core keeps them whole in the UB and gathers from there instead of from GM.
    """

    slot_bytes: int
    resident_inputs: tuple[str, ...] = ()
    runtime: "ElementwiseRuntime | None" = None  # symbolic shapes: tiled per call


@dataclass(frozen=True)
class ElementwiseRuntime:
    """How a kernel over symbolic shapes is tiled per call (``tiling_at``; the host tiling
    function printed by ``codegen/tiling_func.py`` does the same arithmetic in C++).

    ``shapes``: the parameters' shapes and the symbolic dimensions; the output's elements are
    the last parameter's. ``tile_cap``: the tile the UB buffers were sized for at the range's
    upper bound (no call's tile is longer); ``align`` / ``max_cores``: as the static plan's.
    What a call moves, per output element and per core (``tiling_at``'s GM bytes):
    ``read_per_elem``, ``read_per_core``, ``write_per_elem``; its UB bytes: ``tile_bytes``
    (bytes per element of each queue's tile), ``resident_bytes``; ``gathers``: inputs
    gathered element by element on the scalar unit.
    """

    shapes: ShapeSpec
    tile_cap: int
    align: int
    max_cores: int
    read_per_elem: int
    read_per_core: int
    write_per_elem: int
    tile_bytes: tuple[int, ...]
    resident_bytes: int
    gathers: int


@dataclass(frozen=True)
class ElementwiseAnalysis:
    """What the elementwise template reads from a group, shared by every plan of it.

    ``prepared``: the function with every block inlined into the output block and that block's
    loops fused into one (what every plan splits). ``total``: the flat loop's extent.
    ``values``: the output expression's TileValuePlan, each load classified against the flat
    index. ``out_dtype``: the output's dtype.
    """

    prepared: tirx.PrimFunc
    total: int
    values: object
    out_dtype: str
    # symbolic shapes: ``prepared``/``total``/``values`` are those at the range's upper bound,
    # ``symbolic`` the prepared function over the symbols (what ``apply`` splits)
    shapes: ShapeSpec = ShapeSpec()
    symbolic: tirx.PrimFunc | None = None


class ElementwiseSchedule(Template):
    """Template for groups of elementwise, broadcast and scalar operations."""

    name = "elementwise"
    Knobs = ElementwiseKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func: tirx.PrimFunc) -> Decision:
        """Whether every block is spatial and the function has exactly one output."""
        for block in root_blocks(func):
            if any(int(iv.iter_type) != 0 for iv in block.iter_vars):
                return Decision.no(f"block {block.name_hint} reduces; not an elementwise group")
        n_out = len(param_buffers(func)[1])
        if n_out != 1:
            return Decision.no(f"{n_out} outputs; the elementwise template prints one")
        stores = []
        walk(func.body, lambda s: stores.append(s) if type(s).__name__ == "BufferStore" else None)
        for store in stores:
            dtype = str(store.buffer.dtype)
            if dtype not in SUPPORTED_DTYPES + ("bool",):
                return Decision.no(f"computes in {dtype}; vector kernels take "
                                   f"{' or '.join(SUPPORTED_DTYPES)} (and bool masks)")
            construct = unsupported_construct(store.value, masks=True)
            if construct:
                return Decision.no(f"TIR construct {construct} has no vector instruction")
        return Decision.yes("all blocks spatial, one output, every construct vectorisable")

    @classmethod
    def analyse(cls, func: tirx.PrimFunc) -> ElementwiseAnalysis:
        """Inline the group into its output block, fuse its loops, classify its loads. A
        function over symbolic dimensions is analysed at its range's upper bound, after
        checking that it reads its inputs the same way at the ends and the midpoint
        (``_symbolic_analysis``)."""
        decision = cls.applies(func)
        if not decision:
            raise TilingError(f"elementwise template does not apply: {decision.reason}")
        spec = shape_spec(func)
        if spec.symbolic:
            return _symbolic_analysis(cls, func, spec)
        return _static_analysis(func)

    @classmethod
    def plan(cls, analysis: ElementwiseAnalysis, soc,
             knobs: ElementwiseKnobs | None = None) -> Tiling:
        """The Tiling of the analysed group on ``soc`` (TilingError where ``knobs`` do not
        fit); over symbolic dimensions, the one at the range's upper bound, its plan telling
        how each call tiles (``ElementwiseRuntime``)."""
        return _plan(analysis, soc, knobs or ElementwiseKnobs())

    @classmethod
    def apply(cls, analysis: ElementwiseAnalysis, tiling: Tiling) -> tirx.PrimFunc:
        """The flat loop split into ``[cores, tiles_per_core, tile_len]``, the core loop
        annotated (over symbolic dimensions the core loop's extent is what remains: the
        printed kernel reads its sizes from the tiling struct, never from these loops)."""
        symbolic = analysis.symbolic is not None
        sch = tvm.s_tir.Schedule(analysis.symbolic if symbolic else analysis.prepared)
        (out_block,) = sch.get_child_blocks(sch.get_sblock("root"))
        (flat_loop,) = sch.get_loops(out_block)
        factors = [None if symbolic else tiling.cores, tiling.tiles_per_core, tiling.tile_len]
        core, _, _ = sch.split(flat_loop, factors)
        sch.annotate(core, CORE_LOOP_ANNOTATION, 1)
        return sch.mod["main"]

    @staticmethod
    def knob_space(func: tirx.PrimFunc, soc) -> list[ElementwiseKnobs]:
        """Candidate knobs for the cost model's search, the default first.

        Core counts halve from every vector block; tiles shrink from the largest that fits by
        powers of two (whole 256-byte repeats); single and double buffering. A candidate may
        still be refused by ``plan`` (TilingError) where it does not fit; searches drop it.
        """
        default = ElementwiseSchedule.plan(ElementwiseSchedule.analyse(func), soc)
        cores = sorted({max(1, soc.vector_blocks // d) for d in (1, 2, 4)}, reverse=True)
        tiles = [None] + sorted({default.tile_len // d // 128 * 128 for d in (2, 4, 8, 16)
                                 if default.tile_len // d >= 128}, reverse=True)
        return knob_grid(ElementwiseKnobs, soc.vector_blocks, cores, tiles)


def _inline_and_fuse(func: tirx.PrimFunc):
    """(schedule, flat loop): every block inlined into the output block, its loops fused."""
    sch = tvm.s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for block_rv in blocks[:-1]:
        sch.compute_inline(block_rv)
    loops = sch.get_loops(blocks[-1])
    return sch, (sch.fuse(*loops) if len(loops) > 1 else loops[0])


def _static_analysis(func: tirx.PrimFunc) -> ElementwiseAnalysis:
    sch, flat_loop = _inline_and_fuse(func)
    loop = sch.get(flat_loop)
    total = int(loop.extent)
    flat = tirx.Var("flat", "int64")
    realize = first_block_realize(loop)
    bindings = {iv.var: value for iv, value in zip(realize.block.iter_vars,
                                                   realize.iter_values)}
    bindings[loop.loop_var] = flat
    analyzer = make_analyzer(flat, total, bindings)
    store = realize.block.body
    values = plan_tile_values(store.value,
                              lambda ld: classify_load(ld, analyzer, flat, total))
    return ElementwiseAnalysis(sch.mod["main"], total, values, str(store.buffer.dtype))


def _symbolic_analysis(cls, func: tirx.PrimFunc, spec: ShapeSpec) -> ElementwiseAnalysis:
    """The analysis at the range's upper bound of a function over symbolic dimensions, once
    the kernel printed from it is known to be right at every size of the range: each input
    is read the same way at the lower end, the midpoint and the upper end (a whole tensor
    along the output, one scalar at the same place, or a gather at the same offsets of a
    tensor of static shape); a read whose place depends on a dimension (a (2, 1, 8) operand
    broadcast over (2, s, 8)) is refused, naming the input."""
    names = [p.name for p in func.params]
    out_shape = spec.shapes[names.index(param_buffers(func)[1][0].name)]
    points = spec.samples()
    ends = [_static_analysis(specialize(func, point)) for point in points]
    high = ends[-1]
    reads = list(high.values.accesses.values())
    for point, other in zip(points, ends):
        theirs = list(other.values.accesses.values())
        if other.values.n_slots != high.values.n_slots or len(theirs) != len(reads):
            raise TilingError(f"the elementwise program differs at {point} and at "
                              f"{spec.high()}; run-time tiling needs one program")
        for mine, their in zip(reads, theirs):
            shape = spec.shapes[names.index(mine.buffer.name)]
            where = f"input {mine.buffer.name} (shape {', '.join(shape)})"
            if mine.kind is not their.kind:
                raise TilingError(f"{where} is read as {their.kind.name} at {point} and "
                                  f"as {mine.kind.name} at {spec.high()}")
            if mine.kind is AccessKind.FULL:
                if shape != out_shape:
                    raise TilingError(f"{where} is streamed along an output of shape "
                                      f"{', '.join(out_shape)}")
                continue
            if not all(entry.isdigit() for entry in shape):
                raise TilingError(f"{where} is broadcast and its shape holds a symbolic "
                                  "dimension; run-time tiling streams those only whole")
            if not tvm_ffi.structural_equal(mine.offset, their.offset, map_free_vars=True):
                raise TilingError(f"{where} is read at an offset that depends on the "
                                  f"symbolic dimensions ({their.offset} at {point}, "
                                  f"{mine.offset} at {spec.high()}); not tiled at run time")
    sch, _ = _inline_and_fuse(func)
    return dataclasses.replace(high, shapes=spec, symbolic=sch.mod["main"])


@dataclass(frozen=True)
class _Footprint:
    """Per-element and fixed UB needs of one elementwise expression."""

    streamed: tuple      # element bytes of each input tile that goes through a VECIN queue
    out_bytes: int
    slots: int
    slot_bytes: int
    resident_bytes: int  # broadcast sources kept whole in the UB

    def per_element(self, buffer_num: int) -> int:
        return buffer_num * (sum(self.streamed) + self.out_bytes) + self.slots * self.slot_bytes

    def ub_bytes(self, tile_len: int, buffer_num: int) -> int:
        tiles = [*self.streamed, self.out_bytes]
        return (buffer_num * sum(round_up(tile_len * b, BLOCK_BYTES) for b in tiles)
                + self.slots * round_up(tile_len * self.slot_bytes, BLOCK_BYTES)
                + self.resident_bytes)


def is_resident(access) -> bool:
    """A gathered broadcast source small enough to stay whole in each core's UB."""
    size = buffer_size(access.buffer) * dtype_bytes(access.buffer.dtype)
    return access.kind is AccessKind.GATHER and size <= RESIDENT_GATHER_MAX_BYTES


def _footprint(plan, out_dtype) -> _Footprint:
    streamed, resident = [], 0
    for access in plan.accesses.values():  # one entry per distinct load, as the printer does
        elem = dtype_bytes(access.buffer.dtype)
        if access.kind is not AccessKind.SCALAR:
            streamed.append(elem)
        if is_resident(access):
            resident += round_up(buffer_size(access.buffer) * elem, BLOCK_BYTES)
    out_bytes = dtype_bytes(out_dtype)
    slot_bytes = max([out_bytes] + [dtype_bytes(expr_dtype(n)) for n in plan.order]
                     + [dtype_bytes(a.buffer.dtype) for a in plan.accesses.values()])
    return _Footprint(tuple(streamed), out_bytes, plan.n_slots, slot_bytes, resident)


def _gm_read_bytes(plan, total: int, cores: int) -> int:
    """GM bytes the kernel reads: streamed inputs once, scalars and resident sources per core."""
    read = 0
    for access in plan.accesses.values():
        elem = dtype_bytes(access.buffer.dtype)
        if access.kind is AccessKind.FULL:
            read += total * elem
        elif access.kind is AccessKind.SCALAR:
            read += cores * elem
        elif is_resident(access):
            read += cores * buffer_size(access.buffer) * elem
        else:
            read += total * elem
    return read


def _per_core_copies_l2(plan, cores: int, soc) -> int:
    """The GM bytes L2 serves of the copies every core reads of one block (``l2_reuse``):
    each scalar and each resident source is read whole by every working core, all of them
    at the start; the first copy comes from HBM, the other ``cores - 1`` find it in L2 (the
    reuse distance is that one block). Without this the report charged a 16 KB resident
    source read by 47 cores as 770 KB of HBM traffic, more than the unfused plan moved."""
    served = 0
    for access in plan.accesses.values():
        elem = dtype_bytes(access.buffer.dtype)
        if access.kind is AccessKind.SCALAR:
            block = elem
        elif is_resident(access):
            block = buffer_size(access.buffer) * elem
        else:
            continue
        served += l2_served((cores - 1) * block, walk_distance([(1, block)]), soc)
    return served


def _max_tile(fp: _Footprint, soc, buffer_num: int, knobs) -> tuple[int, int]:
    """(largest tile that fits the UB, element alignment of a tile)."""
    min_bytes = min([*fp.streamed, fp.out_bytes, fp.slot_bytes])
    align = BLOCK_BYTES // min_bytes
    budget = soc.ub_bytes - UB_RESERVED_BYTES - fp.resident_bytes
    max_tile = (budget // fp.per_element(buffer_num)) // align * align
    if max_tile < align:
        raise TilingError(f"elementwise kernel needs {fp.per_element(buffer_num)} UB bytes per "
                          f"element and {fp.resident_bytes} resident bytes; no tile fits "
                          f"{soc.name}'s {soc.ub_bytes} B UB")
    repeat = REPEAT_BYTES // min_bytes
    if max_tile >= repeat:
        max_tile = max_tile // repeat * repeat
    if knobs.tile_len:
        if knobs.tile_len % align or knobs.tile_len > max_tile:
            raise TilingError(f"tile_len={knobs.tile_len} must be a multiple of {align} and at "
                              f"most {max_tile} on {soc.name}")
        max_tile = knobs.tile_len
    return max_tile, align


def _tiles(total: int, align: int, max_tile: int, max_cores: int) -> tuple:
    """(cores, block_len, tile_len, tiles_per_core) of ``total`` elements: as many cores as
    have ``align`` elements each (at most ``max_cores``), tiles of at most ``max_tile``. The
    host tiling function of a symbolic kernel runs the same arithmetic (tiling_func.py)."""
    cores = max(1, min(max_cores, ceil_div(total, align)))
    per_core = round_up(ceil_div(total, cores), align)
    tile_len = min(max_tile, per_core)
    tiles_per_core = ceil_div(per_core, tile_len)
    block_len = tiles_per_core * tile_len
    return ceil_div(total, block_len), block_len, tile_len, tiles_per_core


def _plan(analysis: ElementwiseAnalysis, soc, knobs: ElementwiseKnobs) -> Tiling:
    total, plan = analysis.total, analysis.values
    fp = _footprint(plan, analysis.out_dtype)
    if len(fp.streamed) > soc.max_live_buffers_per_position:
        raise TilingError(f"{len(fp.streamed)} input tiles would be live at once in VECIN; "
                          f"{soc.name} allows {soc.max_live_buffers_per_position} per position")
    buffer_num = 2 if knobs.double_buffer else 1
    max_tile, align = _max_tile(fp, soc, buffer_num, knobs)
    max_cores = min(knobs.cores or soc.vector_blocks, soc.vector_blocks)
    cores, block_len, tile_len, tiles_per_core = _tiles(total, align, max_tile, max_cores)
    runtime = None
    if analysis.shapes.symbolic:
        # per element of the output: FULL and gathered inputs; per core: scalars, residents
        per_elem = _gm_read_bytes(plan, 1, 0)
        runtime = ElementwiseRuntime(
            analysis.shapes, tile_len, align, max_cores, per_elem,
            _gm_read_bytes(plan, 0, 1), fp.out_bytes, (*fp.streamed, fp.out_bytes),
            fp.resident_bytes, sum(a.kind is AccessKind.GATHER for a in plan.accesses.values()))
    return _tiling(total, cores, block_len, tile_len, tiles_per_core, buffer_num, fp, soc,
                   _gm_read_bytes(plan, total, cores), _gathered(plan) * total,
                   ElementwisePlan(fp.slot_bytes, _resident_inputs(plan), runtime),
                   _per_core_copies_l2(plan, cores, soc))


def _gathered(plan) -> int:
    return sum(a.kind is AccessKind.GATHER for a in plan.accesses.values())


def _tiling(total, cores, block_len, tile_len, tiles_per_core, buffer_num, fp, soc, read_bytes,
            gathered, plan, l2_operand_bytes=0) -> Tiling:
    return Tiling("elementwise", total, cores, block_len, tile_len, tiles_per_core, buffer_num,
                  fp.slots, fp.ub_bytes(tile_len, buffer_num), soc.ub_bytes,
                  read_bytes, total * fp.out_bytes,
                  work=KernelWork(steps=tiles_per_core, vector_repeats=tiles_per_core,
                                  scalar_elems=gathered, per_output_element=True,
                                  l2_operand_bytes=l2_operand_bytes),
                  plan=plan)


def elementwise_tiling_at(tiling: Tiling, values: dict) -> Tiling:
    """The Tiling one call of a symbolic elementwise kernel runs with, at the dimensions'
    ``values`` ({name: size}, each in its range): what its host tiling function fills in."""
    rt = tiling.plan.runtime
    spec = rt.shapes
    total = spec.numel(len(spec.shapes) - 1, spec.values(**values))
    cores, block_len, tile_len, tiles_per_core = _tiles(total, rt.align, rt.tile_cap,
                                                        rt.max_cores)
    fp = _Footprint(rt.tile_bytes[:-1], rt.tile_bytes[-1], tiling.temp_buffers,
                    tiling.plan.slot_bytes, rt.resident_bytes)
    return _tiling(total, cores, block_len, tile_len, tiles_per_core, tiling.buffer_num, fp,
                   _Capacity(tiling.ub_capacity), total * rt.read_per_elem + cores *
                   rt.read_per_core, rt.gathers * total,
                   # this call's, static; the L2 credit for per-core copies of resident
                   # sources is not taken per call yet (charged at HBM: conservative)
                   dataclasses.replace(tiling.plan, runtime=None))


@dataclass(frozen=True)
class _Capacity:
    """What ``_tiling`` reads of a SoC: its UB size (a call's tiling keeps the plan's)."""

    ub_bytes: int


def _resident_inputs(plan) -> tuple:
    """Names of the buffers ``is_resident`` keeps in the UB, in the order they are loaded."""
    names = [a.buffer.name for a in plan.accesses.values() if is_resident(a)]
    return tuple(dict.fromkeys(names))
