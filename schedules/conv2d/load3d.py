"""Convolution through the cube's own img2col (Load3D v2): the plan of the row-tiled kernel.

The kernel (``tests/emu/conv_load3d.cpp`` is its reference, written with the basic cube API as
vendor convolutions are) cuts the output into tiles of ``rows`` whole output rows of one image
(``M = rows * ow`` positions, rounded up to 16 in L0A and L0C: Load3D's ``mStartPt`` and
``mExtension`` are multiples of 16 for half, so a tile starts at its first row). For each tile
it walks K in chunks of ``c1_step`` channel groups (``C0`` channels each, so ``c1_step * kh *
kw * C0`` K columns):

* the feature-map rows under the tile's taps, ``(rows - 1) * sh + (kh - 1) * dh + 1`` at most
  (fewer at the image's edges), go GM -> L1 in 5HD (one burst per channel group);
* the chunk's weights, laid out in GM as L0B fractals (the weights are constants: laid out at
  build time), go GM -> L1 -> L0B;
* Load3D builds the chunk's image matrix in L0A (padding and out-of-image taps as its padding
  value, stride and dilation in its params); Mmad accumulates the chunks in L0C;
* the tile leaves L0C once: by Fixpipe on split chips (910B: NHWC rows or NC1HWC0, ReLU on the
  way), through the UB on coupled chips (310P: NC1HWC0, the conversion and ReLU in the copy).

No col block exists anywhere and the vector unit does nothing: the traffic is the feature-map
rows (each tile re-reads the ``(kh - 1) * dh + 1 - sh`` rows its neighbour also reads), the
weights once per tile and chunk, and the output once. ``Load3dPlan.block_counts`` gives the GM
bytes and cube MACs of each block exactly as the emulator counts them (the test runs both).

Device rules the plan keeps (asc-devkit dav_c220 / dav_m200, ``ascendc_emu/load3d.h``): whole
C0 channel groups (channels padded to C0 in L1), ``l1H`` and ``l1W`` at most 32767, strides at
most 63, filters and dilations at most 255, pads at most 255, and L1 / L0A / L0B / L0C within
the SoC's. On 310P Load3D v2 takes half only: a float convolution keeps the img2col template.

On coupled chips the kernel can also take and give NCHW tensors (``io="nchw"``): the UB holds a
channel group's rows, one ``TransDataTo5HD`` repeat per 16 pixels turns them into 5HD on the
way to L1, and the product comes back from L0C through the UB and one repeat per 16 x 16 block
into rows, where the vector epilogue would run.

On 310P (half) the conv template prints this kernel's NCHW mode with its epilogue
(``load3d_kernel.py``: its plan; a variant the partitioner estimates). What is not here yet:

* the printed kernel on 910B (below) and in float32 (Load3D v1, or the img2col kernel);
* the weights in Load3D's K order, (c1, tap, c0), as L0B fractals, on 910B: OIHW has the
  taps innermost and no GM -> L1 copy transposes (Nd2Nz keeps a row's columns together), so
  a build-time layout of the constant weights (a prepare rewrite whose transform constant
  folding evaluates), or the AIV's Gathers; coupled chips do it in the kernel (``io="nchw"``:
  one 256-entry offset table, one Gather per fractal, UB -> L1);
* on 910B the NCHW <-> 5HD turns on the AIV with the GM workspace between AIV and AIC (the
  AIC has no UB; the cross-core flags of issue #19 item 1), or 5HD tensors between convs;
* on 910B bias (the Mmad bias table, C2, not emulated, or an extra K block), ReLU in
  Fixpipe (310P runs the template's epilogue on the turned-back rows);
* the small-channel mode for the stem (3 channels padded to 16 cost 5x its MACs);
* double buffering, and the timing model overlapping what that kernel overlaps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tvm_ascend.errors import TilingError

from ..tiling import KernelWork, Tiling, ceil_div, dtype_bytes, round_up
from .shape import ConvShape

LOAD3D_MAX_L1_SIDE = 32767
LOAD3D_MAX_STRIDE = 63
LOAD3D_MAX_FILTER = 255
LOAD3D_MAX_PAD = 255
IO_MODES = ("nhwc", "5hd", "nchw")  # the tensors' layouts in GM (Load3dPlan.tile_counts)


def pad_bottom_right(shape: ConvShape) -> tuple[int, int]:
    """The bottom and right padding the output size implies (ConvShape keeps top and left)."""
    (sh, sw), (dh, dw), (top, left) = shape.stride, shape.dilation, shape.pad
    bottom = (shape.oh - 1) * sh + dh * (shape.kh - 1) + 1 - shape.h - top
    right = (shape.ow - 1) * sw + dw * (shape.kw - 1) + 1 - shape.w - left
    return max(0, bottom), max(0, right)


@dataclass(frozen=True)
class Load3dTile:
    """One tile: output rows ``[oh0, oh0 + rows)``; input rows ``[lo, lo + in_rows)`` in L1."""

    oh0: int
    rows: int
    lo: int
    in_rows: int

    def m16(self, ow: int) -> int:
        return round_up(self.rows * ow, 16)


class Load3dExtent(NamedTuple):
    """A tile's extent: ``tile`` (its rows), output channels from ``n0`` on, ``nt16`` of them
    rounded to 16 (the cube's N) and ``nt`` real ones, ``m`` pixels and ``m16`` to 16."""

    tile: Load3dTile
    n0: int
    nt16: int
    nt: int
    m: int
    m16: int


@dataclass(frozen=True)
class Load3dPlan:
    """The row-tiled Load3D convolution of ``shape``: tiles of ``rows`` output rows by
    ``n_tile`` output channels (a multiple of 16; channel tiles fastest); L1 slabs of
    ``c1_step`` channel groups, each walked in K steps of ``tap_step`` taps (all of them, or
    one group's split: then ``c1_step`` is 1); ``c0`` channels per group (32 bytes), ``c1``
    groups, ``n16`` output channels rounded to 16 (the cube's N); ``tiles_h`` row bands per
    image; the L1 / L0 bytes the kernel's buffers take (one of each)."""

    shape: ConvShape
    rows: int
    c1_step: int
    n_tile: int
    tap_step: int
    c0: int
    c1: int
    n16: int
    tiles_h: int
    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int

    @property
    def tiles_n(self) -> int:
        return ceil_div(self.n16, self.n_tile)

    @property
    def tiles(self) -> int:
        return self.shape.n * self.tiles_h * self.tiles_n

    @property
    def elem(self) -> int:
        return dtype_bytes(self.shape.dtype)

    def tile(self, index: int) -> Load3dTile:
        """The ``index``-th tile of an image (its output rows and the input rows in L1)."""
        s = self.shape
        oh0 = index * self.rows
        rows = min(self.rows, s.oh - oh0)
        top = oh0 * s.stride[0] - s.pad[0]
        bottom = (oh0 + rows - 1) * s.stride[0] - s.pad[0] + (s.kh - 1) * s.dilation[0]
        lo, hi = max(0, top), min(s.h - 1, bottom)
        return Load3dTile(oh0, rows, lo, max(1, hi - lo + 1))

    def tile_extent(self, index: int) -> Load3dExtent:
        """Tile ``index`` of an image (row bands outer, channel tiles inner): its rows, its
        channels and pixels, as the kernel and every count of it walk them."""
        t = self.tile(index // self.tiles_n)
        n0 = index % self.tiles_n * self.n_tile
        nt16 = min(self.n_tile, self.n16 - n0)
        return Load3dExtent(t, n0, nt16, min(self.shape.cout - n0, nt16), t.rows * self.shape.ow,
                            t.m16(self.shape.ow))

    def chunks(self):
        """(first channel group, groups, first tap, taps) of each K step, in order."""
        taps = self.shape.kh * self.shape.kw
        return [(c, min(self.c1_step, self.c1 - c), t, min(self.tap_step, taps - t))
                for c in range(0, self.c1, self.c1_step) for t in range(0, taps, self.tap_step)]

    def tile_counts(self, index: int, io: str = "nhwc") -> dict:
        """GM bytes read and written, cube MACs and TransDataTo5HD repeats and calls of one
        tile (``index`` over an image's tiles: row bands outer, channel tiles inner). ``io``
        (``IO_MODES``): ``nhwc`` a 5HD input and NHWC rows of ``cout`` out (Fixpipe ND);
        ``5hd`` 5HD in and out, whole 16-channel groups (Fixpipe NZ, or the UB on coupled
        chips); both with the weights laid out as L0B fractals. ``nchw`` the model's own
        tensors through the UB (coupled chips): each channel's rows read in whole 32-byte
        blocks, turned into 5HD by one TransDataTo5HD repeat per 16 pixels and group, the
        product turned back into rows likewise; OIHW weights, each output channel's 16 input
        channels x all taps read per K step and one 256-element Gather per fractal."""
        if io not in IO_MODES:
            raise ValueError(f"io={io!r}: one of {IO_MODES}")
        s, elem = self.shape, self.elem
        t, n0, nt16, nt, m, m16 = self.tile_extent(index)
        read = macs = trans = calls = gathered = gathers = 0
        for first, groups, tap0, taps in self.chunks():
            kc = groups * taps * self.c0
            if tap0 == 0:  # a slab: its channel groups' rows
                if io == "nchw":
                    pitch = round_up(t.in_rows * s.w, 16)
                    real = sum(max(0, min(self.c0, s.cin - (first + g) * self.c0))
                               for g in range(groups))
                    read += real * pitch * elem
                    trans += groups * pitch // 16
                    calls += groups * ceil_div(pitch // 16, 255)
                else:
                    read += groups * t.in_rows * s.w * self.c0 * elem
            if io == "nchw":  # OIHW: each cout's 16 channels x all taps, a Gather per fractal
                read += groups * nt * 16 * s.kh * s.kw * elem
                gathers += groups * (nt16 // 16) * taps
                gathered += groups * (nt16 // 16) * taps * 256
            else:  # laid out as L0B fractals
                read += kc * nt16 * elem
            macs += m16 * round_up(nt, 16) * kc
        if io == "nchw":
            trans += (nt16 // 16) * (m16 // 16)
            calls += (nt16 // 16) * ceil_div(m16 // 16, 255)
        write = m * (nt16 if io == "5hd" else nt) * elem
        return {"gm_read_bytes": read, "gm_write_bytes": write, "cube_macs": macs,
                "trans5hd_instrs": trans, "trans5hd_calls": calls, "gather_elems": gathered,
                "gather_calls": gathers}

    def block_counts(self, blocks: int, io: str = "nhwc") -> list[dict]:
        """Per block, the counts of its contiguous range of tiles (images outer)."""
        per = ceil_div(self.tiles, blocks)
        out = []
        for block in range(blocks):
            total = dict.fromkeys(("gm_read_bytes", "gm_write_bytes", "cube_macs",
                                   "trans5hd_instrs", "trans5hd_calls", "gather_elems",
                                   "gather_calls"), 0)
            for t in range(block * per, min(self.tiles, (block + 1) * per)):
                for key, value in self.tile_counts(t % (self.tiles_h * self.tiles_n),
                                                   io).items():
                    total[key] += value
            out.append(total)
        return out

    def tiling(self, soc, io: str = "5hd") -> Tiling:
        """The Tiling the timing model reads for this plan on ``soc`` (tiles spread over the AI
        cores in contiguous ranges, single-buffered as the reference kernel is): its GM bytes,
        and a KernelWork of exactly the counts ``block_counts`` gives (cube MACs; every read is
        a cube operand load, and those past one copy of the feature map and the weights are
        re-reads L2 serves; the TransDataTo5HD repeats, 512 bytes each, as template vector
        work)."""
        cores = min(soc.ai_cores, self.tiles)
        per = ceil_div(self.tiles, cores)
        used = ceil_div(self.tiles, per)
        blocks = self.block_counts(used, io)
        total = {key: sum(b[key] for b in blocks) for key in blocks[0]}
        s, elem = self.shape, self.elem
        channels = s.cin if io == "nchw" else self.c1 * self.c0
        once = s.n * channels * s.h * s.w * elem + \
            self.c1 * s.kh * s.kw * self.c0 * self.n16 * elem
        read = total["gm_read_bytes"]
        work = KernelWork(steps=per * len(self.chunks()), cube_macs=total["cube_macs"],
                          cube_operand_bytes=read, l2_operand_bytes=max(0, read - once),
                          template_vector_bytes=total["trans5hd_instrs"] * 512,
                          template_vector_calls=total["trans5hd_calls"],
                          gather_elems=total["gather_elems"], gather_calls=total["gather_calls"],
                          img2col_prologue=True)
        return Tiling("conv2d", self.tiles, used, per, 1, per, 1, 0, 0, soc.ub_bytes, read,
                      total["gm_write_bytes"], s.pixels, work=work)


def load3d_refusal(shape: ConvShape, soc) -> str | None:
    """Why Load3D cannot take ``shape`` on ``soc`` (a sentence), or None."""
    if shape.groups != 1:
        return f"grouped convolution ({shape.groups} groups): one image matrix per group"
    if soc.npu_arch == 2002 and shape.dtype != "float16":
        return f"Load3D v2 on {soc.name} takes half only, not {shape.dtype}"
    if soc.npu_arch not in (2002, 2201):
        return f"Load3D v2 is not on {soc.name} (only the v1 form is)"
    if max(shape.stride) > LOAD3D_MAX_STRIDE:
        return f"stride {shape.stride} over Load3D's {LOAD3D_MAX_STRIDE}"
    if max(shape.kh, shape.kw, *shape.dilation) > LOAD3D_MAX_FILTER:
        return f"a filter or dilation over Load3D's {LOAD3D_MAX_FILTER}"
    if max(*shape.pad, *pad_bottom_right(shape)) > LOAD3D_MAX_PAD:
        return f"padding over Load3D's {LOAD3D_MAX_PAD}"
    if shape.w > LOAD3D_MAX_L1_SIDE:
        return f"a feature map {shape.w} wide, over Load3D's {LOAD3D_MAX_L1_SIDE}"
    return None


def load3d_plan(shape: ConvShape, soc, rows: int | None = None, c1_step: int | None = None,
                n_tile: int | None = None, tap_step: int | None = None) -> Load3dPlan:
    """The plan of ``shape`` on ``soc``: the sizes given, else output channels in tiles of at
    most 256, the most output rows up to 256 positions per tile, the most channel groups per
    slab, and all taps per K step (split for one group when its taps overflow L0A or L0B),
    that fit L1, L0A, L0B and L0C. TilingError (a sentence) where Load3D cannot take it or the
    given sizes do not fit."""
    why = load3d_refusal(shape, soc)
    if why is not None:
        raise TilingError(f"conv2d through Load3D: {why}")
    elem = dtype_bytes(shape.dtype)
    c0 = 32 // elem
    c1 = ceil_div(shape.cin, c0)
    n16 = round_up(shape.cout, 16)
    taps = shape.kh * shape.kw
    sh, dh = shape.stride[0], shape.dilation[0]

    def sizes(r: int, step: int, nt: int, ts: int) -> tuple[int, int, int, int]:
        m16 = round_up(r * shape.ow, 16)
        kc = (step if ts >= taps else 1) * min(ts, taps) * c0
        in_rows = min(shape.h, (r - 1) * sh + (shape.kh - 1) * dh + 1)
        return (step * in_rows * shape.w * c0 * elem + kc * nt * elem, m16 * kc * elem,
                kc * nt * elem, m16 * nt * 4)

    def fits(*knobs) -> bool:
        l1, l0a, l0b, l0c = sizes(*knobs)
        return l1 <= soc.l1_bytes and l0a <= soc.l0a_bytes and l0b <= soc.l0b_bytes and \
            l0c <= soc.l0c_bytes

    if n_tile is None:
        n_tile = min(n16, 256)
    if tap_step is None:
        tap_step = taps
        while tap_step > 1 and not fits(1, 1, n_tile, tap_step):
            tap_step -= 1
        while n_tile > 16 and not fits(1, 1, n_tile, tap_step):
            n_tile -= 16
    if rows is None:
        rows = max(1, min(shape.oh, 256 // max(1, shape.ow)))
        while rows > 1 and not fits(rows, 1, n_tile, tap_step):
            rows -= 1
    if c1_step is None:
        c1_step = c1 if tap_step >= taps else 1
        while c1_step > 1 and not fits(rows, c1_step, n_tile, tap_step):
            c1_step -= 1
    knobs = (rows, c1_step, n_tile, tap_step)
    ok = 1 <= rows <= shape.oh and 1 <= c1_step <= c1 and 1 <= tap_step <= taps and \
        n_tile % 16 == 0 and 16 <= n_tile and (tap_step >= taps or c1_step == 1)
    if not ok or not fits(*knobs):
        l1, l0a, l0b, l0c = sizes(*(max(1, k) for k in knobs))
        raise TilingError(f"conv2d through Load3D: {rows} output rows x {n_tile} output channels, "
                          f"{c1_step} channel groups a slab, {tap_step} taps a step (split taps "
                          f"take one group, channel tiles are multiples of 16) need L1 {l1}, L0A "
                          f"{l0a}, L0B {l0b}, L0C {l0c} B; {soc.name} has {soc.l1_bytes}, "
                          f"{soc.l0a_bytes}, {soc.l0b_bytes}, {soc.l0c_bytes}")
    l1, l0a, l0b, l0c = sizes(*knobs)
    return Load3dPlan(shape, rows, c1_step, n_tile, tap_step, c0, c1, n16,
                      ceil_div(shape.oh, rows), l1, l0a, l0b, l0c)


__all__ = ["IO_MODES", "Load3dPlan", "Load3dTile", "load3d_plan", "load3d_refusal",
           "pad_bottom_right"]
