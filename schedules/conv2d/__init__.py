"""Conv2dSchedule: NCHW Conv2D (stride, padding, dilation, groups) on the cube, epilogue fused.

Method: img2col + the high-level Matmul API. For image ``n`` and group ``g`` the convolution is
the product ``C[co, p] = W[co, k] @ col[k, p]`` with ``k = (ci, ky, kx)`` over the group's input
channels and ``p = (oh, ow)`` over the output pixels: the OIHW weights are already the ND matrix
A (rows of ``K = Cin/G * kh * kw``), and C's rows are NCHW output rows. The output is cut into
``baseM x baseN`` tiles (output channels x pixels) spread over the AI cores in contiguous
ranges, channel tiles fastest. For each tile the core builds ``col`` in a UB buffer, ``k_chunk``
rows at a time (padding and out-of-range taps read as zero), and the Matmul object takes it as
B in one of two ways (``ConvPlan.col_in_gm``):

* split chips (910B), where AIC and AIV share no memory but GM: each K chunk of ``col`` is
  copied to the core's part of the GM workspace (``GetUserWorkspace``), once for the whole run
  of channel tiles of its pixel tile, and the Matmul reads B there, all of K in one go (a UB
  operand B would be staged through GM again for every tile and K chunk);
* coupled chips (310P): ``col`` is the Matmul's UB operand (VECOUT, on chip), chunk by chunk;
  the product comes back into the UB and the K chunks are added there on the vector unit. When
  ``col`` is one K chunk it stays in the UB for the run of channel tiles of its pixel tile; a
  block of several chunks is built again for every tile, so the partitioner estimates the GM
  route there too (``Conv2dKnobs.col_in_gm``) and keeps the faster.

The elementwise epilogue (bias, a folded BatchNorm's shift, activation, residual Add) then runs on
the tile, ``epilogue_rows`` output rows per vector call (``epilogue.py``: per-channel values
become columns), before the single write to GM.

How ``col`` is built (``ConvPlan.img2col.mode``; the default is ``gather_mode``'s, the
``Conv2dKnobs.img2col`` knob chooses another):

* ``direct``: a 1x1 convolution with stride 1 and no padding (``pointwise``), whose col
  matrix is the image's input planes, an ND ``K x P`` matrix in GM: the Matmul reads B there,
  all of K in one go, and nothing is built. The default on split chips (910B), where a UB
  operand B would pass through GM.
* ``rows``: the same convolutions, the default on coupled chips (310P): col row ``ci`` is input
  plane ``ci``'s pixels ``[p0, p0 + curN)``, one multi-row copy (GM -> UB) that stays on chip
  for every channel tile of its pixel tile.
* ``window``: every other convolution. The input rows under the pixel tile's taps, for the
  chunk's input channels, go to a UB slab, one multi-row copy per channel; each row is followed
  by zeros, and so is the slab's start (``img2col.WindowLayout``): a tap in the left or
  right padding reads zeros with no branch. Once per pixel tile, the byte offsets of its
  pixels' first tap are built on the scalar unit, and each other tap's row of offsets by one
  vector ``Adds``. Then one vector ``Gather`` per channel writes that channel's col rows, all
  its taps at once.
* ``scalar``: the fallback when the window's rows do not fit the UB (very wide images). It is
  element by element on the scalar unit, one GM read per in-range tap.

The device's own img2col path (Load3D from a 5HD feature map in L1, ``load3d.py``; its
reference kernel: ``tests/emu/conv_load3d.cpp``) is the template's other kernel
(``Conv2dKnobs.method="load3d"``, ``load3d_kernel.py``) for half convolutions without groups on
coupled chips (310P): a variant the partitioner estimates beside the img2col kernel.
The plan counts what the kernel does in its ``KernelWork``: ``scalar_elems`` (offsets, the
fallback's elements, row tails without DataCopyPad), ``gather_elems`` / ``gather_calls`` (the
window's Gathers) and ``template_vector_bytes`` / ``_calls`` (its other vector ops). The
timing model charges them all.
Depthwise and grouped convolutions take the same route with one group per tile (``baseM``
rows of which ``Cout/G`` are used); a vector-unit depthwise kernel (the window's Gathers
feeding multiply-adds instead of the cube) would waste no cube rows. It is left for later.

Every SoC profile takes it. The output tile and streamed epilogue operands (a residual) move
as one multi-burst DataCopyPad where the SoC has it (910B, 310B); on 310P and 910A each row
moves its whole 32-byte blocks by DataCopy and its tail element by element, so no block
reaches into the pixels of another core's tile (``ConvPlan.data_copy_pad`` tells the
printer). Rows copied into the UB there (img2col rows, slab rows, residual rows) are whole
blocks that read on past the row (``CopyTileInBlocks``), exactly only where that would pass the
input's end; the plan counts those bytes. On coupled chips (310P, 910A) the UB operand B and
the product stay on chip, so the plan counts no workspace bytes there; on split chips the col
blocks and products in the workspace are ``workspace_*_bytes`` (L2 for the timing model).

Example
-------
>>> from tvm_ascend.soc import get_soc                                     # doctest: +SKIP
>>> _, tiling = Conv2dSchedule.schedule(func, get_soc("Ascend310P3"))     # doctest: +SKIP
>>> tiling.plan.data_copy_pad                                             # doctest: +SKIP
False
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import tvm

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from ..analysis.row_program import RowAccessKind, program_dtypes, row_program
from ..analysis.epilogue_checks import epilogue_refusal
from ..analysis.tile_values import buffer_size
from ..tiling import FRACTAL, ceil_div, dtype_bytes, round_up
from ..tiling import SUPPORTED_DTYPES, KernelWork, TemplatePlan, Tiling, UB_RESERVED_BYTES
from .epilogue import column_bytes, row_columns
from .shape import ConvShape, conv_block_index, conv_shape
from .load3d_kernel import Load3dConvPlan, load3d_tiling, load3d_variant_refusal
from .img2col import (IMG2COL_MODES, Img2colPlan, block_tails, count_col_builds, gather_mode,
                      img2col_plan, pointwise)
from .traffic import column_scalar_writes, conv_traffic, img2col_work, streamed_tails
from ..analysis.tir_walk import cached_by_identity, param_buffers, root_blocks, schedule_blocks
from ..template import Template, mark_core_loop

EPILOGUE_KINDS = (RowAccessKind.ROWS, RowAccessKind.ROW_SCALAR, RowAccessKind.SCALAR)


@dataclass(frozen=True)
class Conv2dKnobs:
    """Tunable choices of the conv template: the output tile (the partitioner's variants and
    the tuner's space)."""

    base_m: int | None = None  # output channels per tile; None: 128 (fp16) / 64 (fp32)
    base_n: int | None = None  # output pixels per tile; likewise
    img2col: str | None = None  # IMG2COL_MODES; None: gather_mode's choice
    # output rows per epilogue call (``epilogue.py``), at most the tile's; None: the most
    # that leave the K chunks as many as with one row
    epilogue_rows: int | None = None
    # the col block through the core's GM workspace (built once per run of channel tiles,
    # B read from GM) instead of the UB operand; None: on split chips only
    col_in_gm: bool | None = None
    # CONV_METHODS: "img2col" (this kernel) or "load3d" (the cube's own img2col from input rows
    # in L1, ``load3d_kernel.py``: coupled chips, half); None: img2col
    method: str | None = None


CONV_METHODS = ("img2col", "load3d")


@dataclass(frozen=True)
class ConvPlan(TemplatePlan, template="conv2d"):
    """What the conv template decided for one kernel; its printer prints from this, the
    scheduled blocks (the epilogue's row program) and the Tiling's cores and tile ranges.

    The convolution: ``shape``, as ``conv_shape`` read it from the group (the kernel's
    TilingData carries its sizes).

    The output tiles: ``base_m`` output channels x ``base_n`` pixels (clipped to the conv's own,
    to 16), ``tiles_m`` x ``tiles_n`` of them per image and group, channel tiles fastest;
    ``align_n`` the UB row pitch of the tiles and of col (``base_n`` to 32 bytes); ``base_k``
    the Matmul's K step.

    The img2col block B: ``img2col`` (the method, the K chunk, the window's slab); ``chunks``
    its K chunks, ``mm_chunks`` the K pieces the Matmul takes in turn (1 where B is all of K in
    GM: the direct method or ``col_in_gm``); ``col_in_gm`` the block goes through the core's GM
    workspace (``col_workspace_bytes`` each core's part, 0 otherwise); ``col_builds`` how often
    the cores build a block, in all (``count_col_builds``).

    The epilogue: ``slots`` UB temporaries of its row program per row; ``epilogue_rows``
    output rows per vector call; ``row_columns`` the per-row scalars it holds as columns (0
    with one row a call).

    The SoC: ``data_copy_pad`` whether its copies are DataCopyPad's (the unit's copy helpers
    must be that SoC's).
    """

    shape: ConvShape
    base_m: int
    base_n: int
    base_k: int
    align_n: int
    tiles_m: int
    tiles_n: int
    img2col: Img2colPlan
    chunks: int
    mm_chunks: int
    col_in_gm: bool
    col_workspace_bytes: int
    col_builds: int
    slots: int
    epilogue_rows: int
    row_columns: int
    data_copy_pad: bool

    @classmethod
    def from_dict(cls, values: dict):
        """The plan of its JSON form: a Load3D variant's is a ``Load3dConvPlan``."""
        if values.get("variant") == "load3d":
            return Load3dConvPlan.from_dict(values)
        return super().from_dict(values)

    def cube_dims(self) -> tuple:
        # what the cost model's features read from the conv's params before the plan was
        # typed: no "m" and no single-core sides, and "n" was the batch
        return (0, self.shape.n, self.shape.k, self.base_m, self.base_n, 0, 0)


def epilogue_program(blocks, func, shape: ConvShape, conv_index: int):
    """The epilogue (blocks after the conv, inlined into one) as a row program over the output
    rows ``(n, co)`` of ``oh * ow`` pixels, or None without an epilogue."""
    if len(blocks) <= conv_index + 1:
        return None
    program = row_program(blocks[conv_index + 1:], func, shape.n * shape.cout, shape.pixels,
                          given=[blocks[conv_index].body.buffer])
    for name, kind in program.inputs.items():
        if kind not in EPILOGUE_KINDS:
            raise TilingError(f"conv epilogue input {name} read as {kind.value}: not printed yet")
    return program


@dataclass(frozen=True)
class ConvAnalysis:
    """What the conv template reads from a group, once for all its plans (the partitioner
    estimates up to nine variants of one conv): the convolution's ``shape``, the epilogue as
    a row program over the output rows (``program``, None without one), the conv block's
    index among the root blocks (``conv_index``) and ``prepared``, the group with its epilogue
    inlined into one block laid out as rows ``(n, co)`` of ``oh * ow`` pixels (the function
    ``apply`` schedules and the printer reads)."""

    shape: ConvShape
    program: object  # RowProgram | None
    conv_index: int
    prepared: tvm.tirx.PrimFunc


@cached_by_identity
def _applies(func) -> Decision:
    shape = conv_shape(func)
    if shape is None:
        return Decision.no("not an NCHW conv2d (pad_temp block, then a reduction over "
                           "rc, ry, rx of pad_temp * OIHW weights)")
    if shape.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"conv2d in {shape.dtype}; the cube kernel takes float16/float32")
    blocks = root_blocks(func)
    refusal = epilogue_refusal(func, blocks[conv_block_index(blocks) + 1:], "conv2d",
                               "conv2d", shape.dtype)
    if refusal is not None:
        return refusal
    inputs, _ = param_buffers(func)
    if shape.x_name not in {b.name for b in inputs}:
        # img2col gathers the conv's input from GM: a prologue computed in the kernel
        # (a ReLU or residual Add before the conv) has no GM copy to gather from
        return Decision.no("the conv2d input is computed in the group (a prologue); the "
                           "img2col gather reads it from GM")
    return Decision.yes(f"conv2d {shape.cout}x{shape.cin // shape.groups}x{shape.kh}x"
                        f"{shape.kw} (groups {shape.groups}) as img2col + cube")


@cached_by_identity
def _analyse(func) -> ConvAnalysis:
    decision = _applies(func)
    if not decision:
        raise TilingError(f"conv2d template does not apply: {decision.reason}")
    shape = conv_shape(func)
    sch = tvm.s_tir.Schedule(func)
    conv_index = conv_block_index(schedule_blocks(sch))
    block_rvs = sch.get_child_blocks(sch.get_sblock("root"))
    for block_rv in block_rvs[conv_index + 1:-1]:
        sch.compute_inline(block_rv)
    block_rvs = sch.get_child_blocks(sch.get_sblock("root"))
    if len(block_rvs) > conv_index + 1:
        if shape.pixels < 2:
            raise TilingError("a conv epilogue over 1x1 outputs is not printed yet")
        ow = shape.ow
        # rows (n, co) of oh * ow pixels: the layout the epilogue's row program reads
        try:
            sch.transform_block_layout(block_rvs[-1], lambda n, c, y, x: (n, c, y * ow + x))
        except Exception as err:  # noqa: BLE001 - TVM's ScheduleError and arity errors
            raise TilingError(f"the conv epilogue's output block is not (n, c, y, x) rows "
                              f"the row program can read ({type(err).__name__})") from err
    return ConvAnalysis(shape, epilogue_program(schedule_blocks(sch), func, shape, conv_index),
                        conv_index, sch.mod["main"])


class Conv2dSchedule(Template):
    """Template for Conv2D groups (img2col + cube) with elementwise epilogues (vector)."""

    name = "conv2d"
    Knobs = Conv2dKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        return _applies(func)

    @staticmethod
    def analyse(func) -> ConvAnalysis:
        """The group's convolution, epilogue program and prepared function (``ConvAnalysis``);
        TilingError where the template does not take it or cannot print its epilogue."""
        return _analyse(func)

    @staticmethod
    def plan(analysis: ConvAnalysis, soc, knobs: Conv2dKnobs | None = None) -> Tiling:
        """The Tiling of the analysed conv on ``soc``; ``knobs`` (Conv2dKnobs) as the search
        chose, None for the defaults."""
        return plan(analysis.shape, analysis.program, soc, knobs or Conv2dKnobs())

    @staticmethod
    def apply(analysis: ConvAnalysis, tiling: Tiling):
        """The prepared function with the conv block's outer loop as the core loop: the
        kernel's tiles come from the plan, not from loop nests."""
        return mark_core_loop(analysis.prepared, analysis.conv_index)

    @staticmethod
    def variants(func, soc) -> list[Conv2dKnobs]:
        """Knobs worth estimating beside the default (the partitioner keeps the fastest): for a
        pointwise conv the other of the ``direct`` and ``rows`` methods; on coupled chips the
        col block through the GM workspace (``Conv2dKnobs.col_in_gm``); with an epilogue, one
        call over a whole tile's rows (``Conv2dKnobs.epilogue_rows``); when the default tiles
        leave AI cores idle (deep layers on small feature maps), smaller tiles along the output
        channels, the pixels, or both; where the SoC's Load3D kernel takes the conv (310P,
        half, ``load3d_kernel.py``), that kernel (``Conv2dKnobs.method="load3d"``)."""
        shape = conv_shape(func)
        if shape is None:
            return [Conv2dKnobs()]
        cap = _base_cap(shape)
        found = [Conv2dKnobs()]
        default_mode = gather_mode(shape, soc)
        if pointwise(shape):
            other = "rows" if default_mode == "direct" else "direct"
            found.append(Conv2dKnobs(img2col=other))
        if soc.npu_arch != 2201 and default_mode != "direct":
            # a col block of several K chunks is built again for every channel tile in the UB;
            # through GM it is built once per run, for GM bytes the UB operand does not move
            found.append(Conv2dKnobs(col_in_gm=True))
        blocks = root_blocks(func)
        if len(blocks) > conv_block_index(blocks) + 1:
            # a whole tile's rows per epilogue call, though the img2col may take more K chunks
            found.append(Conv2dKnobs(epilogue_rows=cap))
        if load3d_variant_refusal(shape, soc) is None:
            # the cube's own img2col: no col block, no Gathers over the input's taps
            found.append(Conv2dKnobs(method="load3d"))
        if _tiles(shape, cap, cap) >= soc.ai_cores:
            return found
        for base_m, base_n in ((cap // 2, cap), (cap, cap // 2), (cap // 2, cap // 2),
                               (cap // 4, cap // 2), (cap // 4, cap // 4)):
            knobs = _tile_knobs(shape, base_m, base_n)
            if base_m >= FRACTAL and base_n >= FRACTAL and knobs not in found:
                found.append(knobs)
        return found

    @staticmethod
    def knob_space(func, soc) -> list[Conv2dKnobs]:
        """Candidate knobs, the default first: the variants, then tiles of 16..128 (64 for
        float32) output channels by 32..128 pixels. ``plan`` may refuse one."""
        shape = conv_shape(func)
        if shape is None:
            return [Conv2dKnobs()]
        cap = _base_cap(shape)
        space = Conv2dSchedule.variants(func, soc)
        for base_m in (b for b in (16, 32, 64, 128) if b <= cap):
            for base_n in (b for b in (32, 64, 128) if b <= cap):
                knobs = _tile_knobs(shape, base_m, base_n)
                if knobs not in space:
                    space.append(knobs)
        return space


def _base_cap(shape: ConvShape) -> int:
    """The default and largest tile side: a 128x128 (fp16) or 64x64 (fp32) product."""
    return 128 if dtype_bytes(shape.dtype) == 2 else 64


def _tile_knobs(shape: ConvShape, base_m: int, base_n: int) -> Conv2dKnobs:
    """Knobs for ``base_m x base_n`` tiles; a side the conv does not exceed is the default's."""
    return Conv2dKnobs(base_m if base_m < round_up(shape.cout_g, FRACTAL) else None,
                       base_n if base_n < round_up(shape.pixels, FRACTAL) else None)


def _clipped_bases(shape: ConvShape, base_m: int, base_n: int) -> tuple[int, int]:
    """The tile's sides for ``base_m x base_n``: no larger than the conv's own (to 16)."""
    return (min(base_m, round_up(shape.cout_g, FRACTAL)),
            min(base_n, round_up(shape.pixels, FRACTAL)))


def _tiles(shape: ConvShape, base_m: int, base_n: int) -> int:
    base_m, base_n = _clipped_bases(shape, base_m, base_n)
    return shape.n * shape.groups * ceil_div(shape.cout_g, base_m) * \
        ceil_div(shape.pixels, base_n)


def plan(shape: ConvShape, program, soc, knobs: Conv2dKnobs = Conv2dKnobs()) -> Tiling:
    """The tiling of ``shape`` on ``soc``: base tiles (``knobs``), img2col method and K chunk,
    cores, UB bytes, GM traffic, and the work of the scalar unit and of the vector Gathers."""
    elem = dtype_bytes(shape.dtype)
    c0 = 32 // elem
    slot_bytes = max([elem] + [dtype_bytes(d) for d in program_dtypes(program)]) \
        if program is not None else elem
    if program is not None and slot_bytes != elem:
        raise TilingError("the conv epilogue computes in a wider dtype than its output")
    if knobs.method not in (None,) + CONV_METHODS:
        raise TilingError(f"conv method={knobs.method!r}: one of {CONV_METHODS}")
    if knobs.method == "load3d":
        given = {k: v for k, v in asdict(knobs).items() if v is not None and k != "method"}
        if given:
            raise TilingError(f"conv method='load3d' plans its own tiles; the img2col knobs "
                              f"{given} do not apply")
        return load3d_tiling(shape, program, soc)
    cap = _base_cap(shape)
    for name in ("base_m", "base_n"):
        value = getattr(knobs, name)
        if value is not None and (value % FRACTAL or not FRACTAL <= value <= cap):
            raise TilingError(f"conv {name}={value} must be a multiple of {FRACTAL} in "
                              f"{FRACTAL}..{cap} for {shape.dtype}")
    mode = knobs.img2col or gather_mode(shape, soc)
    if mode not in IMG2COL_MODES or (mode in ("direct", "rows")) != pointwise(shape):
        raise TilingError(f"conv img2col={mode!r}: {IMG2COL_MODES[:2]} are for 1x1 convs with "
                          f"stride 1 and no padding, {IMG2COL_MODES[2:]} for the others")
    base_m, base_n = _clipped_bases(shape, knobs.base_m or cap, knobs.base_n or cap)
    align_n = round_up(base_n, c0)
    tile_bytes = base_m * align_n * elem
    slots = (len(program.intermediates) + program.temp_slots) if program else 0
    streamed = sum(1 for k in program.inputs.values() if k is RowAccessKind.ROWS) \
        if program else 0
    # on split chips every col block but the input planes' goes to the GM workspace, and the
    # Matmul takes all of K from there at once: no partial products to add
    want_gm = knobs.col_in_gm if knobs.col_in_gm is not None else soc.npu_arch == 2201
    col_gm = want_gm and mode != "direct"
    partial = not col_gm and mode != "direct"
    fixed = tile_bytes * (1 + partial + streamed)  # acc, partial, streamed epilogue operands
    columns = row_columns(program, shape)
    rows, img2col, epilogue = _epilogue_rows(shape, mode, columns, slots, base_m, base_n,
                                             align_n, soc.ub_bytes - UB_RESERVED_BYTES - fixed,
                                             knobs.epilogue_rows)
    fixed += epilogue
    k_chunk = img2col.k_chunk
    direct = img2col.mode == "direct"
    if k_chunk < c0 and not direct:
        raise TilingError(f"conv tile {base_m}x{base_n} leaves no UB for one img2col chunk of "
                          f"{c0} rows on {soc.name}")
    chunks = ceil_div(shape.k, k_chunk)
    mm_chunks = 1 if col_gm or direct else chunks  # K pieces the Matmul takes in turn
    if mm_chunks == 1 and partial:
        fixed -= tile_bytes  # no partial products to add
    ub = fixed + (0 if direct else k_chunk * align_n * elem) + img2col.window_bytes(shape,
                                                                                 align_n)
    base_k = min(64, round_up(min(shape.k, k_chunk), c0))
    tiles_m, tiles_n = ceil_div(shape.cout_g, base_m), ceil_div(shape.pixels, base_n)
    total = shape.n * shape.groups * tiles_m * tiles_n
    per_core = ceil_div(total, min(soc.ai_cores, total))
    used = ceil_div(total, per_core)
    builds = ([0] * tiles_n, [0] * tiles_n) if direct else \
        count_col_builds(tiles_m, tiles_n, per_core, total, mm_chunks)
    gm_read, gm_write, _, shares = conv_traffic(shape, program, soc, base_m, base_n, base_k,
                                                   img2col, builds[0], used, col_gm)
    work = img2col_work(shape, program, soc, base_m, base_n, img2col, builds, used)
    if not soc.has_data_copy_pad:  # rows at an input's end that whole blocks would pass
        for fewer, tails in (block_tails(shape, img2col, base_n, tiles_m, per_core, mm_chunks),
                             streamed_tails(shape, program, base_n)):
            gm_read -= fewer * elem
            work += KernelWork(scalar_elems=tails)
    if rows > 1:  # the columns' values: a copy's tail, or every row, on the scalar unit
        work += KernelWork(scalar_elems=column_scalar_writes(shape, columns, soc, base_m,
                                                             tiles_n))
    conv_plan = ConvPlan(
        shape=shape, base_m=base_m, base_n=base_n, base_k=base_k, align_n=align_n,
        tiles_m=tiles_m, tiles_n=tiles_n, img2col=img2col, chunks=chunks, mm_chunks=mm_chunks,
        col_in_gm=col_gm, col_workspace_bytes=shape.k * align_n * elem if col_gm else 0,
        col_builds=sum(builds[0]), slots=slots, epilogue_rows=rows,
        row_columns=len(columns) if rows > 1 else 0, data_copy_pad=bool(soc.has_data_copy_pad))
    # the epilogue: one call per op per `rows` output-channel rows of a tile, plus one Brcb
    # per column of per-row scalars
    loop = KernelWork(steps=per_core, vector_repeats=ceil_div(base_m, rows) * per_core,
                      extra_vector_calls=(len(columns) if rows > 1 else 0) * per_core,
                      img2col_prologue=True)
    return Tiling("conv2d", total, used, per_core, 1, per_core, 1,
                  program.temp_slots if program else 0, ub, soc.ub_bytes, gm_read, gm_write,
                  shape.pixels, work=shares + work + loop, plan=conv_plan)


def _epilogue_rows(shape: ConvShape, mode: str, columns, slots: int, base_m: int, base_n: int,
                   align_n: int, budget: int, wanted: int | None = None):
    """(rows per epilogue call, Img2colPlan, UB bytes of the epilogue's temporaries and
    columns) within ``budget`` UB bytes: ``wanted`` rows (at most the tile's), else the most
    (``epilogue.py``), halving from ``base_m``, that leave the K chunks as many as with one
    row. More rows may cost K chunks where the img2col chunk had all the UB; the partitioner
    estimates the whole tile's rows as a variant (``Conv2dSchedule.variants``)."""
    elem = dtype_bytes(shape.dtype)

    def plan_for(rows):
        extra = slots * rows * align_n * elem + \
            (column_bytes(columns, base_m, elem) if rows > 1 else 0)
        return img2col_plan(shape, mode, align_n, base_n, budget - extra), extra

    narrow, extra = plan_for(1)
    if wanted is not None:
        if wanted < 1:
            raise TilingError(f"conv epilogue_rows={wanted} must be at least 1")
        rows = min(wanted, base_m) if columns is not None else 1
        chosen, extra = plan_for(rows)
        # the method one row leaves (a window wider than the UB is the scalar mode already)
        if chosen.mode != narrow.mode or chosen.k_chunk <= 0 or \
                (mode == "direct" and extra > budget):
            raise TilingError(f"conv epilogue over {rows} rows leaves no UB for img2col "
                              f"({narrow.mode})")
        return rows, chosen, extra
    rows = base_m
    while columns is not None and rows > 1 and narrow.k_chunk > 0:
        wide, wide_extra = plan_for(rows)
        if wide.mode == narrow.mode and wide.k_chunk > 0 and \
                ceil_div(shape.k, wide.k_chunk) == ceil_div(shape.k, narrow.k_chunk) and \
                (wide.mode != "direct" or wide_extra <= budget):
            return rows, wide, wide_extra
        rows //= 2
    return 1, narrow, extra


__all__ = ["CONV_METHODS", "Conv2dKnobs", "Conv2dSchedule", "ConvPlan", "ConvShape",
           "Load3dConvPlan", "conv_shape", "epilogue_program", "plan", "buffer_size"]
