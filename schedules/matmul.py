"""MatmulSchedule: MatMul / batched MatMul on the cube unit with its elementwise epilogue.

The group's first block is ``C[b, i, j] += A[b, i, k] * B[(b,) k, j]``; the blocks after it are
elementwise over C (bias, activation, residual) and are inlined into one epilogue block. The
output is cut into ``singleM x singleN`` tiles per batch, spread in contiguous ranges over the
Matmul clients: one per AI core (a 1:1 mix), or on 910B, when the knobs ask for CANN's 1:2 mix
(``aiv_ratio`` 2), one per AIV (two clients share an AIC's cube, L1 and L0, each has its own UB
and vector unit for its epilogue). On a client the high-level Matmul API computes a tile as
``baseM x baseN`` pieces, each fetched into the UB, where the epilogue runs over as many rows a
vector call as its temporaries fit in the UB (``epilogue_rows``) before the single write to
GM. The Matmul object runs CFG_MDL: L1 keeps as many operand blocks across pieces as ``l1_reuse``
chooses (the walk order and depths that read the fewest A and B bytes and fit L1), and the
re-reads left over are L2 traffic where the walk's reuse distance fits in L2 (``l2_reuse``).

Every SoC profile takes it: where DataCopyPad exists (910B, 310B) a tile moves between GM and
the UB as one multi-burst copy; without it (310P, 910A) each row moves its whole 32-byte blocks
by DataCopy and its tail element by element on the scalar unit, so no block reaches into
another core's columns. The GM bytes are the same either way (the emulator counts a scalar
GetValue/SetValue as its element's bytes); ``KernelWork.scalar_elems`` counts the tail
elements for the timing model, ``MatmulPlan.data_copy_pad`` tells the printer which path to
print. On coupled chips (310P, 910A) the product reaches the UB on chip; on 910B it goes
through the GM workspace and those bytes are in the plan.

On 910B the rounds are asynchronous where two C tiles (and two of each streamed epilogue
input) fit the UB (``overlap``): the AIC computes a round's tiles ahead into the client's GM
workspace while the AIV runs the epilogue and copy-out of the ones before, and a round has at
most ``ASYNC_EVENT_FETCHES`` tiles by default (CANN's client waits for each of a round's
first 14 tiles, the later ones for the whole round). Where two whole tiles of a residual do
not fit beside two C tiles (deep-K FFN-down's 128 x 256 tiles), the residual moves in
double-buffered chunks of the epilogue's rows instead (``streams_rows``), so the tile still
overlaps. The plan says which form it chose and why (``MatmulPlan.pipeline``); the timing
model runs the same rounds (``_overlapped_cycles``).

Example
-------
>>> from tvm_ascend.soc import get_soc                                     # doctest: +SKIP
>>> _, tiling = MatmulSchedule.schedule(func, get_soc("Ascend310P3"))     # doctest: +SKIP
>>> tiling.plan.data_copy_pad, tiling.cores                               # doctest: +SKIP
(False, 8)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir.expr import Expr

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .analysis.epilogue_checks import epilogue_refusal
from .analysis.row_program import RowAccessKind, program_dtypes, row_program
from .analysis.symbolic_offsets import lift_offset
from .analysis.tile_values import buffer_size
from .symbolic import ShapeSpec, checked_sizes, shape_spec, specialize
from .l2_reuse import l2_served, walk_distance
from .tiling import FRACTAL, ceil_div, dtype_bytes, pieces, round_up
from .tiling import (ASYNC_EVENT_FETCHES, SUPPORTED_DTYPES, KernelWork, TemplatePlan, Tiling,
                     UB_RESERVED_BYTES)
from .analysis.tir_walk import (BufferLoad, cached_by_identity, load_buffer, product_loads,
                                reduce_iter_vars, root_blocks, schedule_blocks)
from .template import Template, mark_core_loop

MAX_BASE = 256  # 128 x 256 float32 accumulators fill a 910B L0C (128 KB)
SPLIT_CHOICES = (2, 4, 8)  # split-K slice counts the tuner searches
MIN_SLICE_K = 256  # the shortest K slice worth a split (4 K steps of 64: L1 still pipelines)
STREAM_K_MIN_K = 3072  # CATLASS' stream-K threshold on K (cores < tiles < 8 cores)
FLIGHT_STEPS = 256  # steps of the walk blocks_in_flight looks at (the rest scaled from them)


@dataclass(frozen=True)
class MatmulKnobs:
    """Tunable choices of the matmul template (the cost model searches these)."""

    base_m: int | None = None  # None: 128 (fp16) / 64 (fp32), at most M rounded to 16
    base_n: int | None = None  # None: likewise for N
    cores: int | None = None   # None: every Matmul client (AIV of a 1:2 mix, else AI core)
    aiv_ratio: int | None = None  # 1 or 2 AIVs per AIC on 910B; None: 1
    # most base tiles a round (single tile) may have; None: ASYNC_EVENT_FETCHES where the
    # rounds are asynchronous (each fetch then waits for its own tile, not the round), no
    # bound where synchronous; 0: no bound
    round_tiles: int | None = None
    # split-K: K cut into this many base_k-aligned slices, each output tile's slices spread
    # over the cores with the tiles (stream-K's balance where the cores take contiguous
    # ranges of them), every slice adding into C atomically; None or 1: no split
    k_splits: int | None = None


@dataclass(frozen=True)
class L1Reuse:
    """How the kernel's Matmul object (CFG_MDL) keeps operand blocks in L1 within a single tile:
    the tile walk and how many base blocks of A and of B L1 holds (TCubeTiling's iterateOrder,
    depthA1, depthB1). A block still held is not read from GM again (emulator README "Cube")."""

    iterate_order: int  # 0: M fastest (a column's B panel is reused), 1: N fastest (A's row panel)
    depth_a1: int
    depth_b1: int
    operand_bytes: int = 0  # A and B bytes read with this reuse (``l1_reuse`` fills it in)


@dataclass(frozen=True)
class MatmulShape:
    """Sizes of ``C[batch, m, n] = A[batch?, m, k] @ B[batch?, k, n]``."""

    batch: int
    m: int
    n: int
    k: int
    a_batched: bool
    b_batched: bool
    dtype: str
    # the operands' buffer names: one tensor may be both (``x @ x``), so a printer takes them
    # from the product's loads, never from the parameters' order. They bind the shape to the
    # PrimFunc it was read from and take no part in equality: structurally equal groups (the
    # planner's cache answers one with another's plan) have equal shapes and plans
    a_name: str = field(default="", compare=False)
    b_name: str = field(default="", compare=False)


@dataclass(frozen=True)
class MatmulPlan(TemplatePlan, template="matmul"):
    """What the matmul template decided for one kernel; its printer reads only this.

    ``shape``: the product, as ``matmul_shape`` read it from the group (sizes, batch, which
    operands are batched, their buffer names).

    The cube's tiles (TCubeTiling): each client computes ``single_m x single_n`` output tiles,
    each as ``base_m x base_n`` pieces over K steps of ``base_k``.

    L1 reuse (CFG_MDL, ``l1_reuse``): the walk order (0: M fastest, 1: N fastest), how many
    base blocks of A and of B L1 keeps (``depth_a1``, ``depth_b1``) and the L1 bytes they take.

    The epilogue in the UB: a base tile's rows are ``align_n`` elements apart (32-byte
    aligned); ``slots`` row slots of temporaries, ``slot_bytes`` bytes an element (the widest
    dtype computed in); one vector call covers ``epilogue_rows`` rows. ``data_copy_pad``: the
    tiles move by DataCopyPad (the SoC has it), else by whole blocks and scalar tails.

    ``overlapped``: the kernel iterates asynchronously (``Iterate<false>``: the AIC computes a
    round's tiles ahead into this core's GM workspace, ``workspace_bytes``) and holds two C
    tiles (and two of each streamed input) in the UB, so tile i's epilogue and copy-out
    overlap the cube work of the tiles after it; ``pipeline`` says why it is or is not.
    ``stream_rows``: the epilogue's row inputs (a residual) move in chunks of
    ``epilogue_rows`` rows, two chunks in the UB, not as whole base tiles (``streams_rows``:
    where that lets a deep-K tile with a residual overlap).
    """

    shape: MatmulShape
    single_m: int
    single_n: int
    base_m: int
    base_n: int
    base_k: int
    iterate_order: int
    depth_a1: int
    depth_b1: int
    l1_bytes: int
    align_n: int
    slots: int
    slot_bytes: int
    epilogue_rows: int
    data_copy_pad: bool
    overlapped: bool = False
    pipeline: str = ""
    stream_rows: bool = False
    # split-K (``split_k``): K slices per output tile, the K extent of each (a multiple of
    # base_k; the last one takes the rest), what a slice but the first multiplies its partial
    # product by (the epilogue is ``split_scale * C + t``: the first slice runs it whole,
    # adding t once), and why
    k_splits: int = 1
    k_slice: int = 0
    split_scale: float = 1.0
    split: str = ""
    runtime: "MatmulRuntime | None" = None  # symbolic M: tiled per call (matmul_tiling_at)

    @property
    def round_tiles(self) -> int:
        """Base tiles of a round (one single tile): the slots an asynchronous round caches."""
        return ceil_div(self.single_m, self.base_m) * ceil_div(self.single_n, self.base_n)

    @property
    def workspace_bytes(self) -> int:
        """GM workspace of one Matmul client's asynchronous round (0 when synchronous): a
        ``base_m x base_n`` slot of C per tile of the round, as CANN's server writes them."""
        if not self.overlapped:
            return 0
        return self.round_tiles * self.base_m * self.base_n * dtype_bytes(self.shape.dtype)

    @property
    def group_shape(self) -> MatmulShape:
        """The product as the group writes it (the printer addresses A and B by it): the
        shape the template tiled."""
        return self.shape

    def cube_dims(self) -> tuple:
        s = self.shape
        return (s.m, s.n, s.k, self.base_m, self.base_n, self.single_m, self.single_n)


@dataclass(frozen=True)
class MatmulRuntime:
    """How a matmul kernel over a symbolic M, N or K is tiled per call (``matmul_tiling_at``;
    its host tiling function does the same in C++). ``axes``: which of the product's "m",
    "n", "k" are the dimension ``dim`` (Q @ K^T over a symbolic sequence: M and N; P @ V: M
    and K). The bound's plan fixes everything but the symbolic axes' tiles: the walk order,
    the L1 depths, the epilogue's rows, and each static axis' base tile (and singleN); a
    call's baseM, baseN and K step are the bound's, or its M, N rounded up to the fractal and
    its K to the 32-byte block where that is less (as a static plan of that size takes them:
    no cube work on padding, smaller UB tiles), it cuts M (and a symbolic N or K: N too) into
    tiles of one base block (the tails the last ones' ``SetTail``, a K tail the Matmul API's
    last K step) and spreads ``batch x tilesM x tilesN`` tiles over at most ``max_cores``
    clients; a symbolic K changes the MDL steps its K steps give (``mdl_steps``).
    ``whole_tiles``: the UB queues of a whole base tile (C's, each streamed input's), which
    shrink with baseM (and baseN).
    ``soc``: the SoC planned for (the call's L2 and tail arithmetic);
    ``epilogue_row_bytes`` / ``epilogue_core_bytes``: GM bytes the epilogue reads per row of
    C and per core (a residual's rows, a bias column once a core); ``streamed`` / ``columns``:
    its inputs copied as tiles and kept as columns (scalar tails without DataCopyPad)."""

    shapes: ShapeSpec
    soc: str
    dim: str
    max_cores: int
    epilogue_row_bytes: int
    epilogue_core_bytes: int
    streamed: int
    columns: int
    row_inputs: int
    whole_tiles: int
    axes: tuple[str, ...] = ("m",)

    @property
    def single_n_at_run_time(self) -> bool:
        """Whether singleN is one base block of the call (a symbolic N or K) rather than the
        bound's."""
        return "n" in self.axes or "k" in self.axes


@cached_by_identity
def matmul_shape(func) -> MatmulShape | None:
    """The matmul of ``func``'s first block, if it is one the cube template takes.

    Leading dimensions of C are batch dimensions (flattened); A and B either index all of them
    in order or none (weights shared by every batch).
    """
    return block_matmul_shape(root_blocks(func)[0])


def block_matmul_shape(first) -> MatmulShape | None:
    """The matmul ``first`` (one root block) computes, if it is one the cube template takes
    (``matmul_shape`` of the block; the gated template reads its two products so)."""
    found = product_loads(first.body) if len(reduce_iter_vars(first)) == 1 else None
    if found is None:
        return None
    _, a_load, b_load = found
    spatial = [iv for iv in first.iter_vars if int(iv.iter_type) == 0]
    k_var = reduce_iter_vars(first)[0].var
    if len(spatial) < 2:
        return None
    batch_vars = [iv.var for iv in spatial[:-2]]
    i_var, j_var = spatial[-2].var, spatial[-1].var
    a_idx, b_idx = list(a_load.indices), list(b_load.indices)
    if not (a_idx[-2:][0].same_as(i_var) and a_idx[-1].same_as(k_var)
            and b_idx[-2].same_as(k_var) and b_idx[-1].same_as(j_var)):
        return None
    a_batched, b_batched = len(a_idx) > 2, len(b_idx) > 2
    for batched, idx in ((a_batched, a_idx), (b_batched, b_idx)):
        if batched and not (len(idx) - 2 == len(batch_vars)
                            and all(x.same_as(v) for x, v in zip(idx, batch_vars))):
            return None  # a broadcast batch: not printed yet
    batch = 1
    for iv in spatial[:-2]:
        batch *= int(iv.dom.extent)
    dtype = str(first.body.buffer.dtype)
    if {dtype, str(load_buffer(a_load).dtype), str(load_buffer(b_load).dtype)} != {dtype}:
        return None
    return MatmulShape(batch, int(spatial[-2].dom.extent), int(spatial[-1].dom.extent),
                       int(reduce_iter_vars(first)[0].dom.extent), a_batched, b_batched, dtype,
                       load_buffer(a_load).name, load_buffer(b_load).name)


@dataclass(frozen=True)
class MatmulAnalysis:
    """What the matmul template reads from a group, once for all its plans: the product's
    ``shape``, the epilogue as a row program over C's rows (``program``, None without one) and
    ``prepared``, the group with its epilogue inlined into one block (the function ``apply``
    schedules and the printer reads)."""

    shape: MatmulShape
    program: object  # RowProgram | None
    prepared: tvm.tirx.PrimFunc
    # the epilogue as ``scale * C + t`` (t free of C): (scale, "") where it is affine, else
    # (None, why not); split-K needs it (``split_k``)
    affine: tuple = (1.0, "")
    # a symbolic M: ``shape``/``program``/``prepared`` are those at the range's upper bound,
    # ``symbolic`` the prepared function over the symbol (what ``apply`` marks and prints)
    shapes: ShapeSpec = ShapeSpec()
    symbolic: tvm.tirx.PrimFunc | None = None
    axes: tuple = ("m",)  # which of the product's m, n, k are the symbolic dimension

    def report_note(self, tiling=None, soc=None) -> str:
        """What the fusion report adds to the template's decision (the same for every plan):
        a kernel over a symbolic M (N, K) is run-time tiled (its host tiling function counts
        each call's tiles)."""
        if not self.shapes.symbolic:
            return ""
        (dim,) = self.shapes.dims
        names = " and ".join(a.upper() for a in self.axes)
        return (f"run-time tiled: {names} over {dim.name} in {dim.low}~{dim.high}, planned "
                f"at {dim.high}, each call's tiles counted by its host tiling function")


class MatmulSchedule(Template):
    """Template for MatMul groups (cube) with elementwise epilogues (vector)."""

    name = "matmul"
    Knobs = MatmulKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        """Decision: the first block a matmul the cube takes, the rest an epilogue it prints
        (over a symbolic M: so at the range's upper bound)."""
        spec = shape_spec(func)
        return _applies(specialize(func, spec.high()) if spec.symbolic else func)

    @staticmethod
    def analyse(func) -> MatmulAnalysis:
        """The group's product, epilogue program and prepared function (``MatmulAnalysis``);
        TilingError where the template does not take it or cannot print its epilogue."""
        spec = shape_spec(func)
        return _symbolic_analysis(func, spec) if spec.symbolic else _analyse(func)

    @staticmethod
    def plan(analysis: MatmulAnalysis, soc, knobs: MatmulKnobs | None = None) -> Tiling:
        """The Tiling of the analysed group on ``soc``; ``knobs`` (MatmulKnobs) as the search
        chose, None for the defaults. Over a symbolic M: the Tiling at the range's upper
        bound, its plan telling how each call tiles (``MatmulRuntime``)."""
        if analysis.shapes.symbolic:
            return _runtime_plan(analysis, soc, knobs or MatmulKnobs())
        return _plan(analysis.shape, analysis.program, soc, knobs or MatmulKnobs(),
                     analysis.affine)

    @staticmethod
    def apply(analysis: MatmulAnalysis, tiling: Tiling):
        """The prepared function with the product's outer loop as the core loop: the kernel's
        tiles come from the plan, not from loop nests."""
        return mark_core_loop(analysis.symbolic if analysis.symbolic is not None
                              else analysis.prepared)

    @staticmethod
    def variants(func, soc) -> list[MatmulKnobs]:
        """Knobs worth estimating beside the default for every group (the partitioner keeps the
        fastest; ``plan`` may refuse one): twice the base tile along M or N (fewer
        re-reads of the other operand where its K panel does not stay in L1), on 910B the
        1:2 mix (twice the vector units for a heavy epilogue, half the L1 each), and split-K
        in 2 up to ``suggested_splits`` slices where it finds the output tiles too few for the
        cores (or a last wave unbalanced) and the epilogue is affine."""
        func = _at_bound(func)
        shape = matmul_shape(func)
        if shape is None:
            return [MatmulKnobs()]
        base = 128 if dtype_bytes(shape.dtype) == 2 else 64
        found = [MatmulKnobs()]
        if shape.m >= 2 * base:
            found.append(MatmulKnobs(base_m=2 * base, base_n=base))
        if shape.n >= 2 * base:
            found.append(MatmulKnobs(base_m=base, base_n=2 * base))
        if soc.npu_arch == 2201:
            found.append(MatmulKnobs(aiv_ratio=2))
        # split-K up to the suggested slices: more cores cost the launch more start-up (and
        # C a zero fill), so fewer slices may be faster; the timing model judges
        splits = suggested_splits(shape, soc)
        if splits > 1 and _applies(func) and _analyse(func).affine[0] is not None:
            found += [MatmulKnobs(k_splits=s) for s in SPLIT_CHOICES if s <= splits]
        return found

    @staticmethod
    def knob_space(func, soc) -> list[MatmulKnobs]:
        """Candidate knobs, the default first: base tiles of 32..128 (64 for float32) along
        M and N, plus the default's variants (``variants``), all or half the clients, on 910B
        a 1:1 or 1:2 mix and rounds of any number of tiles, and split-K in 2, 4 or 8 slices.
        ``plan`` may refuse one (TilingError)."""
        func = _at_bound(func)
        shape = matmul_shape(func)
        if shape is None:
            return [MatmulKnobs()]
        top = 128 if dtype_bytes(shape.dtype) == 2 else 64
        bases_m = [b for b in (32, 64, 128) if b <= top and b <= round_up(shape.m, FRACTAL)]
        bases_n = [b for b in (32, 64, 128) if b <= top and b <= round_up(shape.n, FRACTAL)]
        space = [MatmulKnobs()] + [k for k in MatmulSchedule.variants(func, soc)
                                   if k != MatmulKnobs()]
        if soc.npu_arch == 2201:  # rounds of any size: fewer operand re-reads, later fetches
            space.append(MatmulKnobs(round_tiles=0))
        for splits in SPLIT_CHOICES:  # split-K: more work items than output tiles
            if MatmulKnobs(k_splits=splits) not in space:
                space.append(MatmulKnobs(k_splits=splits))
        ratios = (None, 1, 2) if soc.npu_arch == 2201 else (None,)
        for ratio in ratios:
            for cores in (None, max(1, soc.ai_cores * (ratio or 1) // 2)):
                for base_m in bases_m or [None]:
                    for base_n in bases_n or [None]:
                        knobs = MatmulKnobs(base_m, base_n, cores, ratio)
                        if knobs not in space:
                            space.append(knobs)
        return space


def _at_bound(func):
    """``func`` at its range's upper bound where it has symbolic dimensions (the knobs
    worth trying are those of the largest call), else ``func``."""
    spec = shape_spec(func)
    return specialize(func, spec.high()) if spec.symbolic else func


@cached_by_identity
def _applies(func) -> Decision:
    shape = matmul_shape(func)
    if shape is None:
        return Decision.no("first block is not a matmul C += A[i, k] * B[k, j]")
    if shape.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"matmul in {shape.dtype}; the cube kernel takes float16/float32")
    refusal = epilogue_refusal(func, root_blocks(func)[1:], "matmul", "matmul", shape.dtype)
    if refusal is not None:
        return refusal
    return Decision.yes(f"matmul {shape.m}x{shape.k} @ {shape.k}x{shape.n} on the cube")


@cached_by_identity
def _analyse(func) -> MatmulAnalysis:
    decision = _applies(func)
    if not decision:
        raise TilingError(f"matmul template does not apply: {decision.reason}")
    shape = matmul_shape(func)
    sch = tvm.s_tir.Schedule(func)
    for block_rv in sch.get_child_blocks(sch.get_sblock("root"))[1:-1]:
        sch.compute_inline(block_rv)
    blocks = schedule_blocks(sch)
    return MatmulAnalysis(shape, epilogue_program(blocks, func, shape), sch.mod["main"],
                          epilogue_affine(blocks, shape))


def epilogue_affine(blocks, shape: MatmulShape) -> tuple:
    """(scale, "") where the epilogue (the blocks after the product, inlined into one) is
    ``scale * C + t`` with a constant scale and t free of C; (None, why) where it is not.
    Without an epilogue: (1.0, ""). Split-K sums the slices' outputs, so it needs the
    epilogue's linear part on every slice and its offset once.

    >>> epilogue_affine([product_block, bias_add_block], shape)        # doctest: +SKIP
    (1.0, '')
    """
    if len(blocks) < 2:
        return (1.0, "")
    c_name = blocks[0].body.buffer.name
    found = _affine(blocks[-1].body.value, c_name)
    if found is None:
        return (None, "the epilogue is not scale * C + t in the product C (an activation, or "
                      "C times a tensor)")
    if found == 0.0:
        return (None, "the epilogue does not use the product")
    return (float(found), "")


def _constant(expr):
    while isinstance(expr, tvm.tirx.Cast):
        expr = expr.value
    if isinstance(expr, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):
        return float(expr.value)
    return None


def _uses(expr, name: str) -> bool:
    """Whether ``expr`` loads buffer ``name`` anywhere (TVM 0.27 has no expression visitor
    in Python: the operands are walked by their fields)."""
    if isinstance(expr, BufferLoad):
        return load_buffer(expr).name == name or any(_uses(i, name) for i in expr.indices)
    for field_name in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(expr, field_name, None)
        if isinstance(child, Expr) and _uses(child, name):
            return True
    args = getattr(expr, "args", None)
    return bool(args) and any(isinstance(x, Expr) and _uses(x, name) for x in args)


def _affine(expr, c_name: str):
    """The scale s of ``expr == s * C + t`` (t free of C; 0.0 where C is not used), or None
    where ``expr`` is not affine in C with a constant s."""
    if not _uses(expr, c_name):
        return 0.0
    if isinstance(expr, BufferLoad):
        return 1.0
    if isinstance(expr, tvm.tirx.Cast):  # a float cast (fp16 <-> fp32) keeps it linear
        return _affine(expr.value, c_name) if "float" in str(expr.dtype) else None
    if isinstance(expr, (tvm.tirx.Add, tvm.tirx.Sub)):
        a, b = _affine(expr.a, c_name), _affine(expr.b, c_name)
        if a is None or b is None:
            return None
        return a + b if isinstance(expr, tvm.tirx.Add) else a - b
    if isinstance(expr, tvm.tirx.Mul):
        for c_side, other in ((expr.a, expr.b), (expr.b, expr.a)):
            value = _constant(other)
            if value is not None:
                inner = _affine(c_side, c_name)
                return None if inner is None else inner * value
        return None
    if isinstance(expr, tvm.tirx.Div):
        value = _constant(expr.b)
        inner = _affine(expr.a, c_name)
        return None if inner is None or not value else inner / value
    return None


def epilogue_program(blocks, func, shape: MatmulShape):
    """The epilogue as a row program over C's rows (batch * m rows of n), or None."""
    if len(blocks) < 2:
        return None
    program = row_program(blocks[1:], func, shape.batch * shape.m, shape.n,
                          given=[blocks[0].body.buffer])
    for kind in program.inputs.values():
        if kind not in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE, RowAccessKind.COLUMN,
                        RowAccessKind.SCALAR, RowAccessKind.ROW_SCALAR):
            raise TilingError(f"matmul epilogue input read as {kind.value}: not printed yet")
    return program


def suggested_splits(shape: MatmulShape, soc, base: int | None = None) -> int:
    """K slices the partitioner tries for ``shape`` on ``soc`` (1: none), as CATLASS picks its
    kernels: split-K where the output has fewer tiles than the AI cores (each tile cut into
    as many slices as leave no core idle, each slice at least ``MIN_SLICE_K`` deep), stream-K
    where ``cores < tiles < 8 x cores`` and K > ``STREAM_K_MIN_K`` (the slices that balance
    the last wave best: the busiest core's tile work ``ceil(tiles x s / cores) / s`` least).
    The timing model then judges the variant (zero fill, atomic writes).

    BERT-base s128 QKV (128 x 768 x 768 fp16, 910B1): 6 tiles of 128 x 128 on 24 cores: 2
    (768 / 4 = 192 < 256)."""
    elem = dtype_bytes(shape.dtype)
    base = base or (128 if elem == 2 else 64)
    cores = soc.ai_cores
    tiles = shape.batch * ceil_div(shape.m, min(base, round_up(shape.m, FRACTAL))) * \
        ceil_div(shape.n, min(base, round_up(shape.n, FRACTAL)))
    deep = [s for s in SPLIT_CHOICES if shape.k // s >= MIN_SLICE_K]
    if tiles < cores:
        fits = [s for s in deep if tiles * s <= cores]
        return max(fits) if fits else 1
    if cores < tiles < 8 * cores and shape.k > STREAM_K_MIN_K:
        def load(s):
            return ceil_div(tiles * s, cores) / s
        best = min([1] + deep, key=lambda s: (load(s), s))
        return best
    return 1


def split_k(shape: MatmulShape, soc, splits: int, base_k: int,
            affine: tuple) -> tuple[int, int, float, str]:
    """(slices, slice K, scale, why) of a split-K plan asked for ``splits`` slices: each
    slice's K range starts at a multiple of ``base_k`` (whole K steps: the Matmul API reads
    A and B at the slice's offset), the last takes the rest; TilingError where split-K
    cannot be printed: an epilogue that is not affine (``epilogue_affine``: the slices'
    outputs are summed, so each slice but the first applies only the scale, the first the
    whole epilogue), or, on a SoC without DataCopyPad (310P, 910A), a row of C that is not a
    whole number of 32-byte blocks: its tail is written element by element by the scalar
    unit, which does not add atomically (atomic add is an MTE3/FIXPIPE mode)."""
    if splits < 1:
        raise TilingError(f"k_splits={splits} must be >= 1")
    elem = dtype_bytes(shape.dtype)
    scale, why = affine
    if scale is None:
        raise TilingError(f"k_splits={splits}: {why}; split-K sums the slices' outputs, so "
                          "the epilogue must be scale * C + t")
    if not soc.has_data_copy_pad and (shape.n * elem) % 32:
        raise TilingError(f"k_splits={splits}: on {soc.name} a row of C ({shape.n} x {elem} B) "
                          "ends in a partial 32-byte block written by the scalar unit, which "
                          "cannot add atomically (no DataCopyPad)")
    k_slice = round_up(ceil_div(shape.k, splits), base_k)
    slices = ceil_div(shape.k, k_slice)
    if slices < 2:
        raise TilingError(f"k_splits={splits}: K={shape.k} is one K step of {base_k}; "
                          "nothing to split")
    offset = "" if scale == 1.0 else f", the others scale theirs by {scale:g}"
    why = (f"split-K: {slices} slices of K={k_slice} (the last {shape.k - (slices - 1) * k_slice})"
           f" per output tile, spread over the cores with the tiles; the launcher zeroes C, "
           f"each slice adds its product atomically (the first runs the epilogue{offset})")
    return slices, k_slice, scale, why


def _plan(shape: MatmulShape, program, soc, knobs: MatmulKnobs,
          affine: tuple = (1.0, ""), products: int = 1,
          m_at_run_time: bool = False, n_at_run_time: bool = False) -> Tiling:
    """The matmul Tiling; ``products`` > 1 (the gated template: gate and up, two products of
    one A by two weights of one shape, each its own Matmul object walking the same tiles)
    holds a C tile of each in the UB, gives each object half the L1 and L0, moves each product's
    operands and workspace round trip, and runs synchronously (``pipeline`` says so)."""
    elem = dtype_bytes(shape.dtype)
    # temporaries may be wider than C (TOPI computes an fp16 erf in float32)
    slot_bytes = max([elem] + [dtype_bytes(d) for d in program_dtypes(program)]) \
        if program is not None else elem
    c0 = 32 // elem
    for name in ("base_m", "base_n"):
        value = getattr(knobs, name)
        if value is not None and (value % FRACTAL or not FRACTAL <= value <= MAX_BASE):
            raise TilingError(f"{name}={value} must be a multiple of {FRACTAL} in "
                              f"{FRACTAL}..{MAX_BASE}")
    base_m = min(knobs.base_m or (128 if elem == 2 else 64), round_up(shape.m, FRACTAL))
    base_n = min(knobs.base_n or (128 if elem == 2 else 64), round_up(shape.n, FRACTAL))
    ratio = aiv_ratio(soc, knobs.aiv_ratio)
    # a client's Matmul objects share its L0A, L0B and L0C as the clients of an AIC do
    base_k = _base_k(shape, base_m, base_n, soc, ratio * products)
    clients = soc.ai_cores * ratio
    cores = max(1, min(knobs.cores or clients, clients))
    # the two clients of one AIC share its L1, and so do a client's Matmul objects
    l1_bytes = soc.l1_bytes // ratio // products
    align_n = round_up(base_n * elem, 32) // elem
    slots = (len(program.intermediates) + program.temp_slots) if program else 0
    columns = sum(1 for k in program.inputs.values() if k is RowAccessKind.COLUMN) \
        if program else 0
    row_inputs = sum(1 for k in program.inputs.values() if k is RowAccessKind.ROWS) \
        if program else 0
    slices = sum(1 for k in program.inputs.values() if k is RowAccessKind.ROW_SLICE) \
        if program else 0
    capacity = soc.ub_bytes - UB_RESERVED_BYTES

    def ub_of(rows, buffers, chunked=False):
        # C's tiles and each whole-tile input's; a chunked row input holds `rows` rows a
        # buffer; temporaries hold `rows` rows; a column repeated over them if > 1
        whole = products + slices + (0 if chunked else row_inputs)
        return (buffers * base_m * align_n * elem * whole
                + (buffers * rows * align_n * elem * row_inputs if chunked else 0)
                + columns * round_up(shape.n * elem, 32)
                + rows * align_n * (slots * slot_bytes + (columns * elem if rows > 1 else 0)))

    chunked = products == 1 and streams_rows(soc, row_inputs, ub_of(1, 2) <= capacity,
                                             ub_of(1, 2, True) <= capacity)
    overlapped, pipeline = overlap(soc, ub_of(1, 2, chunked), capacity, base_m, base_n,
                                   chunked)
    if products > 1:  # the printer iterates both objects in step (no asynchronous rounds)
        overlapped, pipeline = False, (
            f"{products} products a tile (gate and up): each computed and fetched in step "
            "(Iterate / GetTensorC<true>), single-buffered")
    buffers = 2 if overlapped else 1
    if knobs.round_tiles is not None and knobs.round_tiles < 0:
        raise TilingError(f"round_tiles={knobs.round_tiles} must be >= 0 (0: no bound)")
    most = knobs.round_tiles if knobs.round_tiles is not None else \
        (ASYNC_EVENT_FETCHES if overlapped else 0)
    splits, k_slice, scale, split_why = (1, shape.k, 1.0, "") if (knobs.k_splits or 1) == 1 \
        else split_k(shape, soc, knobs.k_splits, base_k, affine)
    sliced = replace(shape, k=k_slice)  # a work item's product: one K slice of a tile
    # M at run time: tiles of one base block along M (a call's M is not known here; its
    # tiles, their tail and the cores they spread over are the host tiling function's); a
    # symbolic N or K: one base block along N too (the L1 walk then keeps two blocks of each
    # operand whatever K is, so only the MDL steps follow a call's K)
    single_m, single_n = _balanced_singles(sliced, base_m, base_n, base_k, cores, l1_bytes,
                                           most, splits, base_m if m_at_run_time else 0,
                                           base_n if n_at_run_time else 0)
    reuse = l1_reuse(sliced, l1_bytes, base_m, base_n, base_k, single_m, single_n)
    if splits > 1:  # the operands' bytes over every slice, the last one shorter
        tail = replace(shape, k=shape.k - (splits - 1) * k_slice)
        reuse = replace(reuse, operand_bytes=(splits - 1) * reuse.operand_bytes + operand_reads(
            tail, base_m, base_n, base_k, single_m, single_n, reuse))
    total = shape.batch * ceil_div(shape.m, single_m) * ceil_div(shape.n, single_n) * splits
    per_core = ceil_div(total, min(cores, total))
    used = ceil_div(total, per_core)
    ub = ub_of(1, buffers, chunked)
    if ub > capacity:
        raise TilingError(f"matmul epilogue needs {ub} UB bytes; {soc.name} has {soc.ub_bytes}")
    rows = epilogue_rows(program, min(base_m, single_m),
                         lambda r: ub_of(r, buffers, chunked) <= capacity)
    ub = ub_of(rows, buffers, chunked)
    one_reuse = reuse  # one Matmul object's walk (the plan's L1 fields)
    reuse = replace(reuse, operand_bytes=reuse.operand_bytes * products)
    gm_read, gm_write = matmul_traffic(shape, program, soc, used, reuse, splits)
    round_trip = product_round_trip(shape, soc) * splits * products  # workspace bytes: L2
    gm_read += round_trip - product_round_trip(shape, soc) * splits
    gm_write += round_trip - product_round_trip(shape, soc) * splits
    plan = MatmulPlan(shape, single_m, single_n, base_m, base_n, base_k,
                      reuse.iterate_order, reuse.depth_a1, reuse.depth_b1,
                      l1_footprint(shape, base_m, base_n, base_k, one_reuse), align_n, slots,
                      slot_bytes, rows, bool(soc.has_data_copy_pad), overlapped, pipeline,
                      chunked, splits, k_slice if splits > 1 else 0, scale, split_why)
    fill_rows = columns * min(rows, base_m, single_m) if rows > 1 else 0
    work = cube_work(shape, soc, one_reuse, per_core, base_m, base_n, single_m, single_n,
                     rows, fill_rows, splits, program is not None and scale != 1.0)
    # each further object reads its operands as the first does (no block shared in L1)
    work = replace(work, cube_operand_bytes=work.cube_operand_bytes * products,
                   l2_operand_bytes=work.l2_operand_bytes * products) + KernelWork(
        cube_macs=products * shape.batch * round_up(shape.m, FRACTAL)
        * round_up(shape.n, FRACTAL) * round_up(shape.k, c0),
        workspace_read_bytes=round_trip, workspace_write_bytes=round_trip,
        scalar_elems=scalar_tail_elems(shape, program, soc, base_m, base_n, single_m,
                                       single_n, used),
        aiv_ratio=ratio, round_tiles=plan.round_tiles if overlapped else 0,
        extra_copy_calls=chunk_copies(plan, first_slices(total, per_core, splits), row_inputs),
        zero_fill_bytes=shape.batch * shape.m * shape.n * elem if splits > 1 else 0)
    return Tiling("matmul", total, used, per_core, 1, per_core, buffers,
                  program.temp_slots if program else 0, ub, soc.ub_bytes, gm_read, gm_write,
                  shape.n, work=work, plan=plan)


def streams_rows(soc, row_inputs: int, whole_fits: bool, chunked_fits: bool) -> bool:
    """Whether the epilogue's row inputs (a residual: RowAccessKind.ROWS) move through the UB
    in chunks of the epilogue's rows instead of whole base tiles: on split chips, where two
    whole tiles of each do not fit the UB beside two C tiles but two chunks do, so the
    rounds can still be asynchronous. BERT-base's FFN-down + residual (128 x 256 fp16 tiles
    on 910B1): two C tiles and two residual tiles need 264 KB of the UB's 188 KB; with the
    residual in chunks of rows the tile is double-buffered. Elsewhere a tile's inputs move
    whole: one copy a tile (a chunk costs a copy's latency each)."""
    return soc.npu_arch == 2201 and row_inputs > 0 and not whole_fits and chunked_fits


def chunk_copies(plan, per_core: int, row_inputs: int) -> int:
    """Copies the busiest core issues beyond one a base tile because its row inputs stream in
    chunks of ``epilogue_rows`` rows (``MatmulPlan.stream_rows``): per tile and row input,
    one a chunk after the first, as the printed loop runs over a full tile's rows."""
    if not plan.stream_rows:
        return 0
    chunks = ceil_div(min(plan.base_m, plan.single_m), plan.epilogue_rows)
    return (chunks - 1) * row_inputs * per_core * plan.round_tiles


def overlap(soc, ub_two_tiles: int, capacity: int, base_m: int, base_n: int,
            chunked: bool = False) -> tuple[bool, str]:
    """(overlapped, why) for a matmul kernel on ``soc`` whose UB needs ``ub_two_tiles`` bytes
    with two C tiles (and two of each streamed input, ``chunked``: of its row inputs two
    chunks of rows, ``streams_rows``): asynchronous rounds exist on split chips only (CANN's
    Iterate<false> and SetWorkspace are Atlas A2/A3 MIX APIs; a coupled chip's cube and
    vector share one core and one instruction stream), and need the two UB tiles to overlap
    anything."""
    if soc.npu_arch != 2201:
        return False, (f"synchronous: {soc.name} is a coupled chip (no asynchronous Iterate "
                       "or SetWorkspace; the tile reaches the UB on chip)")
    if ub_two_tiles > capacity:
        return False, (f"synchronous, single-buffered: two {base_m}x{base_n} C tiles with the "
                       f"epilogue's buffers need {ub_two_tiles} UB bytes, {soc.name} has "
                       f"{capacity}")
    streamed = (", the residual streamed in double-buffered chunks of rows (two whole tiles "
                "of it do not fit beside them)") if chunked else ""
    return True, ("asynchronous rounds (Iterate<false> into the GM workspace), two C tiles in "
                  f"the UB{streamed}: the epilogue and copy-out of a tile overlap the cube "
                  "work after it")


def _base_k(shape, base_m, base_n, soc, ratio) -> int:
    """The deepest K step (a multiple of C0, at most 64) whose double-buffered A and B blocks
    fit L0A and L0B, after checking that the float32 accumulator of a base tile fits L0C (a
    client of a 1:2 mix has half of each)."""
    elem = dtype_bytes(shape.dtype)
    c0 = 32 // elem
    l0a, l0b, l0c = (soc.l0a_bytes // ratio, soc.l0b_bytes // ratio, soc.l0c_bytes // ratio)
    if base_m * base_n * 4 > l0c:
        raise TilingError(f"base tile {base_m}x{base_n} needs {base_m * base_n * 4} L0C bytes "
                          f"for its float32 accumulator; a client has {l0c}")
    for base_k in range(min(64, round_up(shape.k, c0)), 0, -c0):
        if 2 * base_m * base_k * elem <= l0a and 2 * base_k * base_n * elem <= l0b:
            return base_k
    raise TilingError(f"base tile {base_m}x{base_n}: no K step of {c0} fits L0A/L0B "
                      f"({l0a}/{l0b} bytes) twice")


def epilogue_rows(program, most: int, fits) -> int:
    """Rows of a base tile each epilogue instruction covers: the most (up to ``most``) whose
    temporaries ``fits`` the UB. A vector instruction's start-up is paid per call, so one
    call over R rows (the tile's rows are ``stride`` apart, padding included) costs 1/R of R
    calls of one row; a broadcast column is first repeated over R rows (one copy a row a
    tile). A per-row scalar (GetValue of the row) keeps one row per call."""
    if program is None or any(k is RowAccessKind.ROW_SCALAR for k in program.inputs.values()):
        return 1
    return next((rows for rows in range(most, 1, -1) if fits(rows)), 1)


def aiv_ratio(soc, knob: int | None = None) -> int:
    """AIVs per AIC in the template's MIX kernels. On split chips (910B) 2 is CANN's 1:2 mix:
    each AIV a Matmul client with its own tiles, UB and vector unit, the two sharing their
    AIC's cube, MTE2, L1 and L0 (half the L1 each: less operand reuse). That pays only where
    the epilogue's vector work outweighs the operand loads, which the timing model judges,
    not the template: the default is 1 (one AIV per AIC), ``knob`` (the tuner's) may ask for
    2. Coupled chips (one core has both units) are always 1.

    BERT/GPT-2 FFN-up + GELU (512 x 1024 x 4096, fp16, 910B1): est. 68.5 us at 1:1 (MTE2
    bound), 84.8 us at 1:2 (operands re-read for want of L1)."""
    if soc.npu_arch != 2201:
        return 1
    if knob is not None and knob not in (1, 2):
        raise TilingError(f"aiv_ratio={knob}: a MIX kernel has 1 or 2 AIVs per AIC")
    return knob or 1


def _balanced_singles(shape, base_m, base_n, base_k, cores, l1_bytes,
                      most_tiles: int = 0, splits: int = 1,
                      single_m: int = 0, single_n: int = 0) -> tuple[int, int]:
    """(singleM, singleN): the per-core tile that gives the busiest core the least work,
    among those of at most ``most_tiles`` base tiles (0: any). With split-K each tile is
    ``splits`` work items (``shape``'s K is then one slice's); ``single_m`` > 0 fixes singleM
    (a symbolic M: only singleN is chosen, at the range's upper bound), ``single_n`` > 0
    singleN (a symbolic N or K).

    The cores take contiguous ranges of ``ceil(tiles / cores)`` tiles, so the busiest core
    computes that many ``singleM x singleN`` tiles. Among equal loads the one whose operands
    L1 reuses best (fewest A and B bytes read, ``l1_reuse``) wins, then the larger tile: fewer
    tiles, less set-up per tile. (Halving the larger side until every core had a tile left
    cores idle: 128 x 2304 in 36 tiles on 24 cores runs two tiles per core on 18 cores, 72
    tiles of 64 x 64 three smaller ones on all 24, a quarter less work on the busiest.)"""
    def choices(extent, base):
        # one single size per distinct tile count: the smallest multiple of base giving it
        found = {}
        for count in range(1, ceil_div(extent, base) + 1):
            size = round_up(ceil_div(extent, count), base)
            found.setdefault(ceil_div(extent, size), size)
        return sorted(set(found.values()))

    best = None
    for sm in [single_m] if single_m else choices(shape.m, base_m):
        for sn in [single_n] if single_n else choices(shape.n, base_n):
            if most_tiles and ceil_div(sm, base_m) * ceil_div(sn, base_n) > most_tiles:
                continue  # base x base is always there: one tile
            total = shape.batch * ceil_div(shape.m, sm) * ceil_div(shape.n, sn) * splits
            per_core = ceil_div(total, min(cores, total))
            work = per_core * min(sm, round_up(shape.m, FRACTAL)) * \
                min(sn, round_up(shape.n, FRACTAL))
            reads = l1_reuse(shape, l1_bytes, base_m, base_n, base_k, sm, sn).operand_bytes
            key = (work, reads, total)
            if best is None or key < best[0]:
                best = (key, sm, sn)
    return best[1], best[2]


def _single_counts(extent: int, single: int) -> list[tuple[int, int]]:
    """(size, how many) of the ``pieces`` that cut ``extent``: the full ones and the tail."""
    full, tail = divmod(extent, single)
    return [(size, count) for size, count in ((single, full), (tail, 1)) if count and size]


def operand_reads(shape, base_m, base_n, base_k, single_m, single_n, reuse: L1Reuse) -> int:
    """GM bytes of A and B the Matmul API reads, every single tile of every batch: per round
    (one single tile) a walk of ``ceil(singleM / baseM) x ceil(singleN / baseN)`` base tiles,
    each over ``ceil(K / baseK)`` K steps, where a block still among the last ``depth`` loaded
    is not read again. Over the cyclic walk that is all-or-nothing (emulator README "Cube"):
    M fastest, A is read once when L1 holds all its blocks of the tile, else once per N tile,
    and B once when L1 holds a column's K panel, else once per M tile; N fastest swaps them."""
    k_steps = ceil_div(shape.k, base_k)
    total = 0
    for sm, count_m in _single_counts(shape.m, single_m):
        for sn, count_n in _single_counts(shape.n, single_n):
            m_iter, n_iter = ceil_div(sm, base_m), ceil_div(sn, base_n)
            if reuse.iterate_order == 0:
                a_passes = 1 if reuse.depth_a1 >= m_iter * k_steps else n_iter
                b_passes = 1 if reuse.depth_b1 >= k_steps else m_iter
            else:
                a_passes = 1 if reuse.depth_a1 >= k_steps else n_iter
                b_passes = 1 if reuse.depth_b1 >= n_iter * k_steps else m_iter
            total += count_m * count_n * (a_passes * sm + b_passes * sn) * shape.k
    return shape.batch * total * dtype_bytes(shape.dtype)


def l1_footprint(shape, base_m, base_n, base_k, reuse: L1Reuse) -> int:
    """L1 bytes the kept blocks of A and B take (printed as the plan's ``l1_bytes``)."""
    return (reuse.depth_a1 * base_m + reuse.depth_b1 * base_n) * base_k * dtype_bytes(shape.dtype)


def l1_reuse(shape, l1_bytes, base_m, base_n, base_k, single_m, single_n,
             orders=(0, 1)) -> L1Reuse:
    """The walk order and L1 depths that read the fewest operand bytes within ``l1_bytes``
    (a client's part of its AIC's L1).

    An operand is either kept (L1 holds the blocks its reuse needs: M fastest, all of A's
    blocks of the tile or B's K panel of a column; N fastest, A's K panel of a row or all of
    B's blocks of the tile) or double-buffered (2 blocks). Ties go to less L1, then M fastest.
    BERT-base's FFN at 16 x 512 tokens (fp16, 128 x 128 x 64 blocks) reads its weights once per
    128-row tile instead of once per 128 x 128 output tile: half the bytes."""
    k_steps = ceil_div(shape.k, base_k)
    m_iter, n_iter = ceil_div(single_m, base_m), ceil_div(single_n, base_n)
    needs = {0: (m_iter * k_steps, k_steps), 1: (k_steps, n_iter * k_steps)}
    best = None
    for order in orders:
        need_a, need_b = needs[order]
        for depth_a in sorted({2, max(2, need_a)}):
            for depth_b in sorted({2, max(2, need_b)}):
                reuse = L1Reuse(order, depth_a, depth_b)
                l1 = l1_footprint(shape, base_m, base_n, base_k, reuse)
                if l1 > l1_bytes:
                    continue
                key = (operand_reads(shape, base_m, base_n, base_k, single_m, single_n, reuse),
                       l1, order)
                if best is None or key < best[0]:
                    best = (key, reuse)
    if best is None:
        need = l1_footprint(shape, base_m, base_n, base_k, L1Reuse(0, 2, 2))
        raise TilingError(f"matmul blocks {base_m}x{base_k} and {base_k}x{base_n} double-buffered "
                          f"need {need} L1 bytes; a client has {l1_bytes}")
    return replace(best[1], operand_bytes=best[0][0])


def first_slices(total: int, per_core: int, splits: int) -> int:
    """Work items of the busiest core that are a tile's first K slice (those run the
    epilogue) where the cores take contiguous ranges of ``per_core`` of ``total`` items,
    ``splits`` to a tile; every item without split-K.

    >>> first_slices(12, 3, 4), first_slices(12, 5, 4)
    (1, 2)
    """
    if splits <= 1:
        return per_core
    return max(len(range(ceil_div(start, splits) * splits, min(start + per_core, total), splits))
               for start in range(0, total, per_core))


def blocks_in_flight(shape, single_m: int, single_n: int, per_core: int,
                     splits: int = 1) -> tuple[int, int, int, int]:
    """(A blocks, B blocks, shared A reads, shared B reads) of the kernel's walk: the most
    distinct row blocks of A and column panels of B the working cores read at once, and over
    the whole walk how many of the tiles' block reads another core makes of the same block in
    the same step (the cores start together and stream K alike, so those are fetched once and
    served by L2 to the others, whatever the reuse distance). Core c runs work item
    ``c x per_core + i`` at its step i; an item is one K slice of a tile (``splits`` a tile);
    tiles are numbered M fastest within a batch. ``min(cores, blocks)`` of each over-counts
    where the cores' ranges line up: 8 cores with a column of 8 tiles each read one A block
    (all eight of them at once) and 8 B panels, not 8 and 8.

    >>> from types import SimpleNamespace as S
    >>> shape = S(batch=1, m=512, n=512, a_batched=False, b_batched=False)
    >>> blocks_in_flight(shape, 128, 128, 4)   # 16 tiles, 4 cores: a column each
    (1, 4, 12, 0)
    """
    tiles_m, tiles_n = ceil_div(shape.m, single_m), ceil_div(shape.n, single_n)
    total = shape.batch * tiles_m * tiles_n * splits
    per_core = max(1, per_core)
    cores = ceil_div(total, per_core)
    most_a = most_b = shared_a = shared_b = 0
    sampled = min(per_core, total, FLIGHT_STEPS)  # the walk repeats: sample its first steps
    for step in range(sampled):
        a_seen, b_seen = set(), set()
        readers = 0
        for core in range(cores):
            item = core * per_core + step
            if item >= total:
                continue
            readers += 1
            tile, k_idx = divmod(item, splits)
            batch, rest = divmod(tile, tiles_m * tiles_n)
            a_seen.add((batch if shape.a_batched else 0, rest % tiles_m, k_idx))
            b_seen.add((batch if shape.b_batched else 0, rest // tiles_m, k_idx))
        most_a, most_b = max(most_a, len(a_seen)), max(most_b, len(b_seen))
        shared_a += readers - len(a_seen)
        shared_b += readers - len(b_seen)
    scale = min(per_core, total) / max(1, sampled)
    return most_a, most_b, int(shared_a * scale), int(shared_b * scale)


def cube_work(shape, soc, reuse: L1Reuse, per_core: int, base_m: int, base_n: int,
              single_m: int, single_n: int, epilogue_rows: int = 1,
              column_fill_rows: int = 0, splits: int = 1, scaled: bool = False) -> KernelWork:
    """The work of a matmul kernel's cube side and epilogue loop: the operand bytes and the
    re-reads L2 serves (A and B bytes read beyond each operand's size, by the one L2 rule of
    ``l2_reuse``: between two reads of an operand block a core reads its tile's whole
    block of the operand walked fastest and one panel of the other, and the working cores
    do so at once: the distinct A and B blocks in flight), one step per base tile, and the
    epilogue's calls as the printer loops (one per op per row of every base tile, or per
    ``epilogue_rows`` rows plus the column fills that repeat a broadcast column over them).
    The blocks in flight and the reads cores share in a step are the walk's own
    (``blocks_in_flight``). With split-K (``splits`` work items a tile, each over one K
    slice) only a tile's first slice runs the epilogue; the others issue one Muls a base
    tile where it scales C (``scaled``)."""
    elem = dtype_bytes(shape.dtype)
    unique = ((shape.batch if shape.a_batched else 1) * shape.m * shape.k
              + (shape.batch if shape.b_batched else 1) * shape.k * shape.n) * elem
    reads = reuse.operand_bytes
    m_blocks = (shape.batch if shape.a_batched else 1) * ceil_div(shape.m, single_m)
    n_blocks = (shape.batch if shape.b_batched else 1) * ceil_div(shape.n, single_n)
    items = shape.batch * ceil_div(shape.m, single_m) * ceil_div(shape.n, single_n) * splits
    active = ceil_div(items, max(1, per_core))
    epilogued = first_slices(items, per_core, splits)
    # a pass: each core's whole block of the operand walked fastest and one panel of the other
    fastest = (single_m, base_n) if reuse.iterate_order == 0 else (base_m, single_n)
    k_slice = ceil_div(shape.k, splits)
    in_a, in_b, shared_a, shared_b = blocks_in_flight(shape, single_m, single_n, per_core,
                                                      splits)
    distance = walk_distance([(min(active, m_blocks * splits, in_a), fastest[0] * k_slice * elem),
                              (min(active, n_blocks * splits, in_b), fastest[1] * k_slice * elem)])
    # a block several cores read in one step comes from HBM once: the others' reads of it
    # (one pass each: a lower bound) are L2 hits even where the walk's distance exceeds L2
    concurrent = (shared_a * single_m + shared_b * single_n) * k_slice * elem
    tiles = ceil_div(single_m, base_m) * ceil_div(single_n, base_n)
    if epilogue_rows == 1:
        repeats, extra = single_m * ceil_div(single_n, base_n) * epilogued, 0
    else:
        steps = ceil_div(min(base_m, single_m), epilogue_rows)
        repeats, extra = steps * tiles * epilogued, column_fill_rows * tiles * epilogued
    if scaled:
        extra += tiles * (per_core - epilogued)
    return KernelWork(steps=max(1, per_core * tiles), vector_repeats=repeats,
                      extra_vector_calls=extra, cube_operand_bytes=reads,
                      l2_operand_bytes=max(l2_served(reads - unique, distance, soc),
                                           min(reads - unique, concurrent)))


def _base_tiles(shape, base_m, base_n, single_m, single_n) -> list[tuple[int, int]]:
    """(rows, columns) of every base tile of one batch's C, as the cores compute them."""
    return [(m, n) for m_single in pieces(shape.m, single_m)
            for n_single in pieces(shape.n, single_n)
            for m in pieces(m_single, base_m) for n in pieces(n_single, base_n)]


def scalar_tail_elems(shape, program, soc, base_m, base_n, single_m, single_n, cores) -> int:
    """Elements the kernel moves on the scalar unit because ``soc`` lacks DataCopyPad: the
    tail of every row (past its whole 32-byte blocks) of the output tile and of each streamed
    epilogue operand's tile, and of each resident column per core; 0 with DataCopyPad."""
    kinds = list(program.inputs.values()) if program is not None else []
    streamed = sum(1 for k in kinds if k in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE))
    columns = sum(1 for k in kinds if k is RowAccessKind.COLUMN)
    return scalar_tails(shape, soc, base_m, base_n, single_m, single_n, cores, streamed,
                        columns)


def scalar_tails(shape, soc, base_m, base_n, single_m, single_n, cores, streamed: int,
                 columns: int) -> int:
    """``scalar_tail_elems`` from the epilogue's counts: ``streamed`` inputs copied as tiles,
    ``columns`` kept as columns (what a call of a symbolic kernel knows of its epilogue)."""
    if soc.has_data_copy_pad:
        return 0
    c0 = 32 // dtype_bytes(shape.dtype)
    tails = shape.batch * sum(m * (n % c0) for m, n in
                              _base_tiles(shape, base_m, base_n, single_m, single_n))
    return tails * (1 + streamed) + columns * cores * (shape.n % c0)


def product_round_trip(shape, soc) -> int:
    """Bytes the product moves through the GM workspace, each way: all of it on split chips
    (AIC -> GM -> AIV), none on coupled ones. The plans give them as workspace bytes: a small
    region per core, used again and again, so the timing model charges them at L2 speed (as
    attention's and conv's)."""
    out = shape.batch * shape.m * shape.n * dtype_bytes(shape.dtype)
    return out if soc.npu_arch == 2201 else 0


def matmul_traffic(shape, program, soc, cores, reuse: L1Reuse, splits: int = 1):
    """GM bytes as the Matmul API moves them (emulator README): A and B as ``operand_reads``
    counted them for the L1 ``reuse`` (``l1_reuse`` keeps the count), the tile goes AIC ->
    GM -> UB on split chips, and the epilogue's inputs and the output are moved once (with
    or without DataCopyPad: a tail element read or written on the scalar unit counts its
    bytes too). With split-K every one of the ``splits`` K slices writes (adds) the output
    once, its product through the workspace; the epilogue's inputs are read once."""
    read = reuse.operand_bytes
    out = shape.batch * shape.m * shape.n * dtype_bytes(shape.dtype) * splits
    round_trip = product_round_trip(shape, soc) * splits
    read += round_trip
    if program is not None:
        read += _epilogue_reads(program, shape, cores)
    return read, out + round_trip


def _epilogue_reads(program, shape, cores) -> int:
    read, seen = 0, set()
    for kind, buffer, _ in program.loads.values():
        if buffer.name in seen or buffer.name not in program.inputs:
            continue
        seen.add(buffer.name)
        elem = dtype_bytes(buffer.dtype)
        read += {RowAccessKind.ROWS: buffer_size(buffer) * elem,
                 RowAccessKind.ROW_SLICE: shape.batch * shape.m * shape.n * elem,
                 RowAccessKind.COLUMN: cores * shape.n * elem,
                 RowAccessKind.ROW_SCALAR: shape.batch * shape.m * elem,
                 RowAccessKind.SCALAR: cores * elem}[kind]
    return read


def epilogue_read_rates(program, shape) -> tuple[int, int]:
    """(bytes per row of C, bytes per core) the epilogue reads from GM (``_epilogue_reads`` is
    ``rows x`` the first ``+ cores x`` the second): a residual's or a mask slice's row, a
    per-row scalar; a bias column or a scalar once a core. (0, 0) without an epilogue."""
    if program is None:
        return 0, 0
    per_row = per_core = 0
    seen = set()
    for kind, buffer, _ in program.loads.values():
        if buffer.name in seen or buffer.name not in program.inputs:
            continue
        seen.add(buffer.name)
        elem = dtype_bytes(buffer.dtype)
        if kind in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE):
            per_row += shape.n * elem
        elif kind is RowAccessKind.ROW_SCALAR:
            per_row += elem
        elif kind is RowAccessKind.COLUMN:
            per_core += shape.n * elem
        else:
            per_core += elem
    return per_row, per_core


# ---- a symbolic M: planned at the range's upper bound, tiled per call ---------------------------
def _symbolic_analysis(func, spec: ShapeSpec) -> MatmulAnalysis:
    """The analysis at the range's upper bound of a matmul group over one symbolic dimension
    that is its M (the rows of A, C and a residual), its N (the columns of B and C: Q @ K^T
    over a sequence) or its K (P @ V), or several of them, once the kernel printed from it is
    known to serve every size of the range: the group is a matmul the template takes at every
    sampled size (the range's ends and quarter points), the batch is static, each symbolic
    axis is the dimension itself at each of them and the others do not change, and the
    epilogue's row program (its inputs, how each is read, their row offsets) is the same at
    those >= 2 (at M = 1 a row-indexed operand reads like a broadcast one, so the lower end
    says nothing about the others). An epilogue over a symbolic N or K (a mask added to the
    scores) is not tiled at run time yet: its column reads would change with the size.
    Refused, naming what is at fault, otherwise."""
    if len(spec.dims) != 1:
        raise TilingError(f"matmul over {len(spec.dims)} symbolic dimensions "
                          f"({', '.join(d.name for d in spec.dims)}): run-time tiling takes "
                          "one, its M, N or K")
    dim = spec.dims[0].name
    names = [p.name for p in func.params]
    out = spec.shapes[-1]
    if len(out) < 2 or dim in out[:-2]:
        raise TilingError(f"the matmul's output (shape {', '.join(out)}) holds {dim} in a "
                          "batch axis: run-time tiling takes a symbolic M, N or K only")
    high = spec.dims[0].high
    sizes, compared = checked_sizes(spec)
    # every sampled size must tile (TilingError from _analyse where it does not)
    found = {size: _analyse(specialize(func, {dim: size})) for size in sizes}
    bound = found[high]
    a_shape = spec.shapes[names.index(bound.shape.a_name)]
    b_shape = spec.shapes[names.index(bound.shape.b_name)]
    for what, entries in (("A", a_shape), ("B", b_shape)):
        if dim in entries[:-2]:
            raise TilingError(f"operand {what} (shape {', '.join(entries)}) holds {dim} in a "
                              "batch axis: run-time tiling takes a symbolic M, N or K only")
    axes = tuple(axis for axis, entry in (("m", out[-2]), ("n", out[-1]), ("k", a_shape[-1]))
                 if entry == dim)
    if not axes:
        raise TilingError(f"the product's M, N and K do not hold {dim}: nothing to tile at run "
                          "time")
    over_n = bound.program is not None and "n" in axes
    if over_n:
        kinds = sorted(k.value for k in set(bound.program.inputs.values())
                       - set(N_EPILOGUE_KINDS))
        if kinds:
            raise TilingError(f"an epilogue over a symbolic N reading {', '.join(kinds)} "
                              "inputs is not tiled at run time yet (a column or per-row scalar"
                              " changes its UB and reads with the size); rows and row slices "
                              "(a residual, a mask) are")
    for size in compared:
        point, other = {dim: size}, found[size]
        at_bound = replace(other.shape, **{axis: getattr(bound.shape, axis) for axis in axes})
        if at_bound != bound.shape or any(getattr(other.shape, axis) != size for axis in axes):
            raise TilingError(f"the product is {other.shape} at {point} and {bound.shape} at "
                              f"{spec.high()}: run-time tiling takes whole symbolic M, N, K "
                              "only")
        if other.affine != bound.affine:
            raise TilingError(f"the epilogue differs at {point} and at {spec.high()}")
        mine, theirs = bound.program, other.program
        if (mine is None) != (theirs is None) or mine is not None and (
                mine.inputs != theirs.inputs or mine.temp_slots != theirs.temp_slots
                or len(mine.intermediates) != len(theirs.intermediates)):
            raise TilingError(f"the epilogue's row program differs at {point} and at "
                              f"{spec.high()}; run-time tiling needs one program")
        for name, base in (mine.bases.items() if mine is not None and not over_n else ()):
            if not tvm_ffi.structural_equal(base, theirs.bases[name], map_free_vars=True):
                raise TilingError(f"epilogue input {name}'s row offset depends on {dim} "
                                  f"({theirs.bases[name]} at {point}, {base} at {spec.high()}); "
                                  "not tiled at run time")
    if over_n:  # a mask's row offset over (s, s) scores: an expression of the dimension
        _lifted_bases(spec, found, bound.shape.batch)
    sch = tvm.s_tir.Schedule(func)
    for block_rv in sch.get_child_blocks(sch.get_sblock("root"))[1:-1]:
        sch.compute_inline(block_rv)
    return replace(bound, shapes=spec, symbolic=sch.mod["main"], axes=axes)


# the epilogue inputs a product over a symbolic N may read: each as a tile of C's shape or a
# row's slice of a broadcast operand (its offset an expression of the dimension), a scalar
N_EPILOGUE_KINDS = (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE, RowAccessKind.SCALAR)


def _lifted_bases(spec: ShapeSpec, found: dict, batch: int) -> dict:
    """{input: its row offset as an expression of the dimension and the row} of the epilogue
    analysed at each size in ``found`` ({size: MatmulAnalysis}; ``lift_offset`` fits and
    checks it at every one of them)."""
    (dim,) = spec.dims
    var = tirx.Var(dim.name, "int64")
    bound = found[dim.high]
    row = tirx.Var(bound.program.row_var.name, "int64")
    return {name: lift_offset({size: (a.program.bases[name], a.program.row_var,
                                      batch * a.shape.m) for size, a in found.items()},
                              var, row, f"epilogue input {name}")
            for name in bound.program.bases}


def symbolic_bases(func) -> dict:
    """The row offsets over the symbolic dimension of the epilogue inputs of a product over a
    symbolic N (``_lifted_bases`` at the sizes the template checked); {} where the kernel's
    epilogue reads none or its N is static. The printer prints them with the dimension read
    from the tiling struct."""
    spec = shape_spec(func)
    if not spec.symbolic:
        return {}
    (dim,) = spec.dims
    found = {size: _analyse(specialize(func, {dim.name: size}))
             for size in checked_sizes(spec)[0]}
    if found[dim.high].program is None or not found[dim.high].program.bases:
        return {}
    return _lifted_bases(spec, found, found[dim.high].shape.batch)


def _runtime_plan(analysis: MatmulAnalysis, soc, knobs: MatmulKnobs) -> Tiling:
    """The upper bound's Tiling of a symbolic-M (N, K) matmul, with the plan of each call
    (``MatmulRuntime``). The base tiles, K step, singleN, the L1 walk and the UB buffers are
    chosen at the upper bound (the largest call: every smaller one fits the same buffers),
    with singleM one base block (and singleN too where N or K is symbolic), so a call only
    counts its tiles, their tails and the cores they spread over; a static search over
    singleM would need M. Split-K is refused: its slices and zero fill are planned for one
    M and K."""
    if (knobs.k_splits or 1) > 1:
        raise TilingError(f"k_splits={knobs.k_splits}: split-K is not tiled at run time (its "
                          "slices and zero fill are planned for one M and K)")
    shape, program = analysis.shape, analysis.program
    n_single = "n" in analysis.axes or "k" in analysis.axes
    tiling = _plan(shape, program, soc, knobs, analysis.affine, m_at_run_time=True,
                   n_at_run_time=n_single)
    per_row, per_core = epilogue_read_rates(program, shape)
    if program is not None and per_row * shape.batch * shape.m + per_core * tiling.cores != \
            _epilogue_reads(program, shape, tiling.cores):
        raise TilingError("the epilogue's GM reads are not rows x a row's + cores x a core's "
                          "(an input of another shape); not tiled at run time")
    kinds = list(program.inputs.values()) if program is not None else []
    clients = soc.ai_cores * tiling.work.aiv_ratio
    runtime = MatmulRuntime(
        analysis.shapes, soc.name, analysis.shapes.dims[0].name,
        max(1, min(knobs.cores or clients, clients)), per_row, per_core,
        sum(1 for k in kinds if k in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE)),
        sum(1 for k in kinds if k is RowAccessKind.COLUMN),
        sum(1 for k in kinds if k is RowAccessKind.ROWS),
        1 + sum(1 for k in kinds if k is RowAccessKind.ROW_SLICE)
        + (0 if tiling.plan.stream_rows else sum(1 for k in kinds if k is RowAccessKind.ROWS)),
        analysis.axes)
    return replace(tiling, plan=replace(tiling.plan, runtime=runtime))


def matmul_call_base_m(bound: MatmulPlan, m: int) -> int:
    """A call's baseM (and singleM): the bound's, or ``m`` rounded up to the fractal where
    that is less (what ``_plan`` takes for a static M)."""
    return min(bound.base_m, round_up(m, FRACTAL))


def matmul_call_bases(bound: MatmulPlan, shape: MatmulShape) -> tuple[int, int, int]:
    """A call's (baseM, baseN, K step) for its product ``shape``: the bound's, or M and N
    rounded up to the fractal and K to the 32-byte block where that is less (what ``_plan``
    takes for a static size; a static axis keeps the bound's)."""
    c0 = 32 // dtype_bytes(shape.dtype)
    return (matmul_call_base_m(bound, shape.m), min(bound.base_n, round_up(shape.n, FRACTAL)),
            min(bound.base_k, round_up(shape.k, c0)))


def matmul_call_tiles(rt: MatmulRuntime, plan: MatmulPlan, m: int) -> tuple[int, int, int]:
    """(tiles, tiles per core, cores) of a call with M = ``m``: ``single_m``-row tiles of every
    batch and ``single_n`` column (``plan`` the call's), contiguous ranges of them over at most
    ``max_cores`` clients (the host tiling function prints the same arithmetic)."""
    shape = plan.shape
    total = shape.batch * ceil_div(m, plan.single_m) * ceil_div(shape.n, plan.single_n)
    per_core = ceil_div(total, min(rt.max_cores, total))
    return total, per_core, ceil_div(total, per_core)


def matmul_tiling_at(tiling: Tiling, values: dict) -> Tiling:
    """The Tiling one call of a symbolic-M (N, K) matmul kernel runs with at ``values``
    ({name: size}): the bound's plan with the call's sizes and base tiles
    (``matmul_call_bases``), its tiles over the cores, the operand bytes of its walk and the
    epilogue's reads of its rows, as ``_plan`` counts a static one."""
    from tvm_ascend.soc import get_soc

    bound, rt = tiling.plan, tiling.plan.runtime
    size = rt.shapes.values(**values)[rt.dim]
    soc = get_soc(rt.soc)
    shape = replace(bound.shape, **dict.fromkeys(rt.axes, size))
    m = shape.m
    walk = L1Reuse(bound.iterate_order, bound.depth_a1, bound.depth_b1)
    base_m, base_n, base_k = matmul_call_bases(bound, shape)
    elem = dtype_bytes(shape.dtype)
    align_n = round_up(base_n * elem, 32) // elem
    plan = replace(bound, shape=shape, base_m=base_m, single_m=base_m, base_n=base_n,
                   base_k=base_k, align_n=align_n,
                   single_n=base_n if rt.single_n_at_run_time else bound.single_n,
                   runtime=None, l1_bytes=l1_footprint(shape, base_m, base_n, base_k, walk))
    reuse = replace(walk, operand_bytes=operand_reads(shape, plan.base_m, plan.base_n,
                                                      plan.base_k, plan.single_m,
                                                      plan.single_n, walk))
    total, per_core, used = matmul_call_tiles(rt, plan, m)
    # the UB: the bound's, less what a smaller base tile leaves out of each whole-tile queue
    # and a narrower baseN out of the epilogue's row slots (an epilogue over a symbolic N has
    # no resident columns: N_EPILOGUE_KINDS)
    ub = tiling.ub_bytes - tiling.buffer_num * (bound.base_m * bound.align_n
                                                - base_m * align_n) * elem * rt.whole_tiles \
        - bound.epilogue_rows * (bound.align_n - align_n) * bound.slots * bound.slot_bytes \
        - (tiling.buffer_num * bound.epilogue_rows * (bound.align_n - align_n) * elem
           * rt.row_inputs if bound.stream_rows else 0)
    round_trip = product_round_trip(shape, soc)
    # the epilogue reads a row of each row input, as long as the call's N
    row_bytes = rt.epilogue_row_bytes * shape.n // bound.shape.n
    gm_read = reuse.operand_bytes + round_trip + row_bytes * shape.batch * m + \
        rt.epilogue_core_bytes * used
    gm_write = shape.batch * m * shape.n * elem + round_trip
    rows = plan.epilogue_rows
    fill_rows = rt.columns * min(rows, plan.base_m, plan.single_m) if rows > 1 else 0
    c0 = 32 // elem
    work = cube_work(shape, soc, reuse, per_core, plan.base_m, plan.base_n, plan.single_m,
                     plan.single_n, rows, fill_rows) + KernelWork(
        cube_macs=shape.batch * round_up(m, FRACTAL) * round_up(shape.n, FRACTAL)
        * round_up(shape.k, c0),
        workspace_read_bytes=round_trip, workspace_write_bytes=round_trip,
        scalar_elems=scalar_tails(shape, soc, plan.base_m, plan.base_n, plan.single_m,
                                  plan.single_n, used, rt.streamed, rt.columns),
        aiv_ratio=tiling.work.aiv_ratio, round_tiles=plan.round_tiles if plan.overlapped else 0,
        extra_copy_calls=chunk_copies(plan, per_core, rt.row_inputs))
    return Tiling("matmul", total, used, per_core, 1, per_core, tiling.buffer_num,
                  tiling.temp_buffers, ub, tiling.ub_capacity, gm_read, gm_write,
                  shape.n, work=work, plan=plan)
