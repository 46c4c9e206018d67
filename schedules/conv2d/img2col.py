"""How the conv kernel builds its img2col block (``schedules/conv2d/`` describes the methods):
the method's choice (``gather_mode``), the UB slab of the window method (``WindowLayout``), the
K chunk that fits the UB (``img2col_plan``), how often the cores build each pixel tile's block
(``count_col_builds``) and the GM elements one build reads (``build_reads``).

Example
-------
>>> from tvm_ascend.schedules.conv2d.shape import ConvShape               # doctest: +SKIP
>>> img2col_plan(shape, "window", 128, 128, 150000).mode                  # doctest: +SKIP
'window'
"""
from __future__ import annotations

from dataclasses import dataclass

from .shape import ConvShape
from ..tiling import dtype_bytes, round_up


IMG2COL_MODES = ("direct", "rows", "window", "scalar")


def pointwise(shape: ConvShape) -> bool:
    """A 1x1 convolution with stride 1 and no padding: its col matrix is the input planes."""
    return (shape.kh, shape.kw, shape.stride, shape.pad) == (1, 1, (1, 1), (0, 0))


def gather_mode(shape: ConvShape, soc) -> str:
    """The default img2col method (module docstring): for a pointwise conv ``direct`` on split
    chips, where a UB operand B would be staged through GM, ``rows`` on coupled chips, where it
    stays on chip and serves every channel tile of its pixel tile; else ``window``."""
    if pointwise(shape):
        return "direct" if soc.npu_arch == 2201 else "rows"
    return "window"


def window_rows(shape: ConvShape, p0: int, cur_n: int) -> tuple[int, int, bool]:
    """(first input row, rows, reaches the padding) of the taps of output pixels
    ``[p0, p0 + cur_n)``: the rows clipped to the input, as the kernel computes them."""
    oh0, oh1 = p0 // shape.ow, (p0 + cur_n - 1) // shape.ow
    top = oh0 * shape.stride[0] - shape.pad[0]
    bottom = oh1 * shape.stride[0] + (shape.kh - 1) * shape.dilation[0] - shape.pad[0]
    lo, hi = max(0, top), min(shape.h - 1, bottom)
    return lo, max(0, hi - lo + 1), top < 0 or bottom > shape.h - 1


@dataclass(frozen=True)
class WindowLayout:
    """The UB slab of one input channel: ``lead`` zero elements, then ``rows`` rows of
    ``row_pitch`` elements, each an input row followed by zeros. A tap left of the input reads
    the previous row's zeros (``row_pitch - w >= pad_left``), the first row's read the lead; a
    tap right of it reads its own row's zeros. All three are multiples of 32 bytes, so every
    copied row starts aligned."""

    lead: int
    row_pitch: int
    rows: int

    @property
    def pitch(self) -> int:
        return self.lead + self.rows * self.row_pitch


def window_layout(shape: ConvShape, base_n: int) -> WindowLayout:
    """The slab layout that every pixel tile of ``base_n`` pixels fits."""
    c0 = 32 // dtype_bytes(shape.dtype)
    pad_l = shape.pad[1]
    right = (shape.ow - 1) * shape.stride[1] + (shape.kw - 1) * shape.dilation[1] - pad_l + 1
    rows = 0
    for p0 in range(0, shape.pixels, base_n):
        oh0, oh1 = p0 // shape.ow, (p0 + min(base_n, shape.pixels - p0) - 1) // shape.ow
        rows = max(rows, (oh1 - oh0) * shape.stride[0] + (shape.kh - 1) * shape.dilation[0] + 1)
    return WindowLayout(round_up(pad_l, c0),
                        round_up(shape.w + max(pad_l, right - shape.w, 0), c0), rows)


def chunk_channels(shape: ConvShape, k_chunk: int) -> list[int]:
    """Input channels each K chunk's rows come from (a chunk may start and end mid-channel)."""
    taps = shape.kh * shape.kw
    return [(min(shape.k, k0 + k_chunk) - 1) // taps - k0 // taps + 1
            for k0 in range(0, shape.k, k_chunk)]


def _channels_bound(shape: ConvShape, k_chunk: int) -> int:
    """The most channels ``k_chunk`` consecutive col rows can touch, wherever they start."""
    taps = shape.kh * shape.kw
    return min(shape.cin_g, (k_chunk + taps - 2) // taps + 1)


def count_col_builds(tiles_m, tiles_n, per_core, total, chunks) -> tuple[list[int], list[int]]:
    """How often the cores build each pixel tile's img2col block and its Gather offsets.

    Channel tiles are the fastest tile index, so a core meets a pixel tile in one run of
    consecutive tiles: the offsets are built once per run, and so is the whole block when it is
    one K chunk (it stays in the UB); with several chunks every tile gathers every chunk.
    """
    col, offsets = [0] * tiles_n, [0] * tiles_n
    for first in range(0, total, per_core):
        last = min(total, first + per_core)
        for run in range(first // tiles_m, (last - 1) // tiles_m + 1):
            n_tile = run % tiles_n
            offsets[n_tile] += 1
            if chunks == 1:
                col[n_tile] += 1
            else:
                col[n_tile] += min(last, (run + 1) * tiles_m) - max(first, run * tiles_m)
    return col, offsets


def offset_bytes(shape: ConvShape, align_n: int) -> int:
    """UB bytes of the window's Gather offsets: one uint32 per tap and pixel column."""
    return shape.kh * shape.kw * align_n * 4


@dataclass(frozen=True)
class Img2colPlan:
    """How the kernel builds the img2col block B: ``mode`` (``gather_mode``), ``k_chunk`` col
    rows at a time, and for the window mode the UB slab of input rows (``layout``) for
    ``slab_channels`` channels, plus one uint32 byte offset per tap and pixel column."""

    mode: str
    k_chunk: int
    layout: WindowLayout | None = None
    slab_channels: int = 0
    channel_loads: int = 0  # window mode: channels' rows copied per build (all K chunks)

    def window_bytes(self, shape: ConvShape, align_n: int) -> int:
        """UB bytes of the slab and the offsets (window mode only)."""
        if self.mode != "window":
            return 0
        return (self.slab_channels * self.layout.pitch * dtype_bytes(shape.dtype)
                + offset_bytes(shape, align_n))


def img2col_plan(shape: ConvShape, mode: str, align_n: int, base_n: int,
                  budget: int) -> Img2colPlan:
    """The img2col plan for ``mode``: the largest K chunk (a multiple of 32 bytes of rows)
    whose col buffer, and slab and offsets in the window mode, fit ``budget`` UB bytes (the
    direct mode reads B from GM: all of K at once, no col buffer). A window too wide for the UB
    falls back to the scalar mode."""
    elem = dtype_bytes(shape.dtype)
    c0 = 32 // elem
    row_bytes = align_n * elem
    upper = min(round_up(shape.k, c0), (budget // row_bytes) // c0 * c0) if budget > 0 else 0
    if mode == "direct":
        return Img2colPlan("direct", shape.k)
    if mode in ("rows", "scalar"):
        return Img2colPlan(mode, upper)
    layout = window_layout(shape, base_n)
    offsets = offset_bytes(shape, align_n)
    for k_chunk in range(upper, c0 - 1, -c0):
        slab = _channels_bound(shape, k_chunk) * layout.pitch * elem
        if k_chunk * row_bytes + slab + offsets <= budget:
            channels = chunk_channels(shape, k_chunk)
            return Img2colPlan("window", k_chunk, layout, max(channels), sum(channels))
    return Img2colPlan("scalar", upper)  # the window is wider than the UB: gather by element


def row_elems(cols: int, c0: int, blocks: bool) -> int:
    """Elements a copied row of ``cols`` reads: all of them exactly (DataCopyPad), or its
    whole 32-byte blocks (``CopyTileInBlocks`` without DataCopyPad)."""
    return round_up(cols, c0) if blocks else cols


def build_reads(shape: ConvShape, img2col: Img2colPlan, taps, p0: int, cur_n: int,
                blocks: bool = False) -> int:
    """Elements one build of pixel tile ``[p0, p0 + cur_n)``'s img2col block reads from GM,
    rows of whole 32-byte blocks where ``blocks`` (no DataCopyPad; ``block_tails`` counts the
    rows at the tensor's end that are copied exactly instead)."""
    c0 = 32 // dtype_bytes(shape.dtype)
    if img2col.mode == "rows":
        return shape.k * row_elems(cur_n, c0, blocks)
    if img2col.mode == "window":
        return window_rows(shape, p0, cur_n)[1] * row_elems(shape.w, c0, blocks) * \
            img2col.channel_loads
    return int(taps[p0:p0 + cur_n].sum()) * shape.cin_g  # one GetValue per in-range tap


def run_builds(run: int, tiles_m: int, per_core: int, chunks: int) -> int:
    """Builds of one K chunk of run ``run``'s block (the run of channel tiles of one image,
    group and pixel tile): one per core that meets the run when the block is one chunk (it
    stays in the UB), else one per tile."""
    if chunks > 1:
        return tiles_m
    return ((run + 1) * tiles_m - 1) // per_core - run * tiles_m // per_core + 1


def block_tails(shape: ConvShape, img2col: Img2colPlan, base_n: int, tiles_m: int,
                per_core: int, chunks: int) -> tuple[int, int]:
    """(elements not read, scalar tail elements) of the img2col rows that ``CopyTileInBlocks``
    copies exactly because their whole blocks would pass the input's end: the last rows of
    the tensor, each as often as the builds that copy it (``chunks``: the K pieces of the
    Matmul, as ``run_builds`` takes them)."""
    if img2col.mode not in ("rows", "window"):
        return 0, 0
    c0 = 32 // dtype_bytes(shape.dtype)
    total = shape.n * shape.cin * shape.h * shape.w
    tiles_n = -(-shape.pixels // base_n)
    taps = shape.kh * shape.kw
    # rows by global index (plane-major): every input row for the window, a plane for rows
    count = shape.n * shape.cin * (shape.h if img2col.mode == "window" else 1)
    fewer = scalar = 0
    for t, p0 in enumerate(range(0, shape.pixels, base_n)):
        cur_n = min(base_n, shape.pixels - p0)
        if img2col.mode == "rows":  # col row = input plane pl's pixels [p0, p0 + cur_n)
            cols, pitch, offset = cur_n, shape.h * shape.w, p0
            first_row, last_row = 0, 0
        else:  # the window's input rows of every channel
            cols, pitch, offset = shape.w, shape.w, 0
            first_row, rows, _ = window_rows(shape, p0, cur_n)
            last_row = first_row + rows - 1
        whole = round_up(cols, c0)
        if cols % c0 == 0:
            continue
        # the rows whose blocks pass the end are copied exactly
        for index in range(max(0, (total - whole - offset) // pitch + 1), count):
            plane, row = divmod(index, shape.h) if img2col.mode == "window" else (index, 0)
            if not first_row <= row <= last_row:
                continue
            image, channel = divmod(plane, shape.cin)
            group, ci = divmod(channel, shape.cin_g)
            run = (image * shape.groups + group) * tiles_n + t
            loads = sum(1 for k0 in range(0, shape.k, img2col.k_chunk)
                        if k0 // taps <= ci <= (min(shape.k, k0 + img2col.k_chunk) - 1) // taps)
            built = loads * run_builds(run, tiles_m, per_core, chunks)
            fewer += built * (whole - cols)
            scalar += built * (cols % c0)
    return fewer, scalar
