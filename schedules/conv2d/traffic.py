"""What the conv kernel moves and computes, exactly as the printed kernel does it
(``schedules/conv2d/`` describes the kernel): GM bytes read and written, the cube's and the
workspace's share of them, the scalar unit's elements and the img2col's vector work. The plan
sums these into its Tiling; the tests check them equal to the emulator's counters.

Example
-------
>>> read, write, macs, shares = conv_traffic(shape, program, soc, 64, 64, 64, img2col,
...                                          builds, cores, col_gm=True)   # doctest: +SKIP
>>> shares.workspace_write_bytes > 0                                      # doctest: +SKIP
True
"""
from __future__ import annotations

import numpy as np

from .img2col import build_reads, chunk_channels, row_elems, window_rows
from ..analysis.row_program import RowAccessKind
from ..analysis.tile_values import buffer_size
from .shape import ConvShape
from ..tiling import FRACTAL, KernelWork, dtype_bytes, pieces, round_up


def column_scalar_writes(shape: ConvShape, columns, soc, base_m: int, tiles_n: int) -> int:
    """SetValue calls that fill the epilogue's columns: every row of a computed column, and a
    copied column's tail past its whole 32-byte blocks without DataCopyPad."""
    c0 = 32 // dtype_bytes(shape.dtype)
    tiles = shape.n * shape.groups * tiles_n  # of each channel tile's cur_m rows
    writes = 0
    for cur_m in pieces(shape.cout_g, base_m):
        for column in columns:
            if column.copied is None:
                writes += tiles * cur_m
            elif not soc.has_data_copy_pad:
                writes += tiles * (cur_m % c0)
    return writes


def valid_taps(extent_out, extent_in, stride, dilation, pad, kernel) -> np.ndarray:
    """For each output coordinate, how many kernel taps land inside the input."""
    out = np.arange(extent_out)[:, None] * stride + np.arange(kernel)[None, :] * dilation - pad
    return ((out >= 0) & (out < extent_in)).sum(axis=1)


def conv_traffic(shape: ConvShape, program, soc, base_m, base_n, base_k, img2col, col_builds,
                 cores, col_gm: bool):
    """(GM bytes read, written, cube MACs, the cube's and workspace's share) exactly as the
    printed kernel moves them (emulator README "Cube"): per tile the A rows and B (the input
    planes in the direct mode, the col block in the GM workspace where ``col_gm``, else per K
    step the UB operand, which split chips stage through GM); the img2col reads of every block
    build (``build_reads``) and, where ``col_gm``, its copy to the workspace; the product
    fetched into the UB (through GM on split chips) once per K piece of the Matmul; the
    epilogue's inputs and the output once.

    The shares (a ``KernelWork`` for the timing model, as the matmul template gives them):
    ``cube_macs``, ``cube_operand_bytes`` (A and B as the cube loads them),
    ``l2_operand_bytes`` (the weights read again for every
    pixel tile, and the direct mode's input planes for every channel tile, which L2 serves
    when they fit) and ``workspace_read_bytes`` / ``workspace_write_bytes`` (col blocks and
    products in the GM workspace: one small region per core, used again and again, so in L2).
    """
    elem = dtype_bytes(shape.dtype)
    c0 = 32 // elem
    split = soc.npu_arch == 2201
    taps = np.outer(valid_taps(shape.oh, shape.h, shape.stride[0], shape.dilation[0],
                               shape.pad[0], shape.kh),
                    valid_taps(shape.ow, shape.w, shape.stride[1], shape.dilation[1],
                               shape.pad[1], shape.kw)).reshape(-1)
    direct = img2col.mode == "direct"
    k_pieces = [shape.k] if direct or col_gm else pieces(shape.k, img2col.k_chunk)
    steps = [kk for piece in k_pieces for kk in pieces(piece, base_k)]
    k_macs = sum(round_up(kk, c0) for kk in steps)
    read = write = macs = 0
    a_read = b_read = ws_read = ws_write = 0
    outer = shape.n * shape.groups
    blocks = not soc.has_data_copy_pad
    for cur_m in pieces(shape.cout_g, base_m):
        for start in range(0, shape.pixels, base_n):
            cur_n = min(base_n, shape.pixels - start)
            a_read += outer * cur_m * shape.k * elem
            macs += outer * round_up(cur_m, FRACTAL) * round_up(cur_n, FRACTAL) * k_macs
            if direct or col_gm:  # the Matmul reads B from GM: input planes or col block
                b_read += outer * shape.k * cur_n * elem
                ws_read += outer * shape.k * cur_n * elem if col_gm else 0
            elif split:  # a UB operand B is staged through the GM workspace per K step
                staged = outer * shape.k * cur_n * elem
                b_read, ws_read, ws_write = b_read + staged, ws_read + staged, ws_write + staged
            if split:  # the product passes through the GM workspace once per K piece
                product = outer * len(k_pieces) * cur_m * cur_n * elem
                ws_read, ws_write = ws_read + product, ws_write + product
            # streamed rows: whole 32-byte blocks without DataCopyPad (``streamed_tails``)
            read += outer * epilogue_reads(program, cur_m, row_elems(cur_n, c0, blocks))
    align_n = round_up(base_n, c0)
    for index, start in enumerate(range(0, shape.pixels, base_n)):
        cur_n = min(base_n, shape.pixels - start)
        read += col_builds[index] * build_reads(shape, img2col, taps, start, cur_n,
                                                blocks) * elem
        if col_gm:  # each build's K rows of col go to the workspace, whole UB rows
            ws_write += col_builds[index] * shape.k * align_n * elem
    read += a_read + ws_read + (b_read if direct else 0)  # B from the workspace is in ws_read
    write += ws_write + shape.n * shape.cout * shape.pixels * elem
    if program is not None:
        read += sum(cores * dtype_bytes(b.dtype)
                    for b in inputs_of_kind(program, RowAccessKind.SCALAR))
    weights = shape.cout * shape.k * elem
    planes = shape.n * shape.cin * shape.h * shape.w * elem if direct else 0
    fits_l2 = weights + planes + (shape.k * align_n * elem if col_gm else 0) * cores \
        <= soc.l2_bytes
    rereads = max(0, a_read - weights) + max(0, b_read - planes if direct else 0)
    shares = KernelWork(cube_macs=macs, cube_operand_bytes=a_read + b_read,
                        l2_operand_bytes=rereads if fits_l2 else 0,
                        workspace_read_bytes=ws_read, workspace_write_bytes=ws_write)
    return read, write, macs, shares


def img2col_work(shape: ConvShape, program, soc, base_m, base_n, img2col, builds,
                 cores) -> KernelWork:
    """The kernel's scalar-unit elements and its img2col vector work.

    ``scalar_elems``: the scalar mode's every img2col element (a SetValue, after a
    GetValue where the tap is in range); the window mode's first row of offsets (one per pixel
    column, per build of a pixel tile's offsets); without DataCopyPad, the tails past the whole
    32-byte blocks of the output rows (GM -> UB copies read whole blocks: ``plan`` adds the
    rows at an input's end, ``block_tails`` and ``streamed_tails``).
    ``gather_elems`` / ``gather_calls``: the window mode's vector Gathers, one per channel and
    chunk, over whole col rows (``align_n`` columns). ``template_vector_bytes`` /
    ``template_vector_calls``: its contiguous vector ops: the other taps' offsets (an Adds per
    tap), the slab zeroed once per core and before each chunk of a pixel tile whose window
    reaches the padding rows (the rows of the tile before may be there), and without
    DataCopyPad the margins after the copied rows zeroed again (a masked Duplicate per channel
    load, a block a row, at most 255 rows a call).
    """
    elem = dtype_bytes(shape.dtype)
    c0 = 32 // elem
    pad = soc.has_data_copy_pad
    col_builds, offset_builds = builds
    align_n = round_up(base_n, c0)
    scalar = 0
    if not pad:  # the output rows' tails (UB -> GM stops at the row: other cores' pixels)
        for cur_m in pieces(shape.cout_g, base_m):
            for cur_n in pieces(shape.pixels, base_n):
                scalar += shape.n * shape.groups * cur_m * (cur_n % c0)
    work = {"gather_elems": 0, "gather_calls": 0, "template_vector_bytes": 0,
            "template_vector_calls": 0}
    channels = chunk_channels(shape, img2col.k_chunk)
    taps = shape.kh * shape.kw
    slab = img2col.slab_channels * img2col.layout.pitch if img2col.layout else 0
    for index, start in enumerate(range(0, shape.pixels, base_n)):
        cur_n = min(base_n, shape.pixels - start)
        builds_here = col_builds[index]
        if img2col.mode == "scalar":
            scalar += builds_here * shape.k * cur_n
        elif img2col.mode == "window":
            _, rows, padded = window_rows(shape, start, cur_n)
            scalar += offset_builds[index] * align_n
            if not pad and shape.w % c0 and rows:
                loads = builds_here * img2col.channel_loads
                work["template_vector_bytes"] += loads * rows * 32
                work["template_vector_calls"] += loads * -(-rows // 255)
            work["gather_elems"] += builds_here * shape.k * align_n
            work["gather_calls"] += builds_here * img2col.channel_loads
            shifts = offset_builds[index] * (taps - 1)
            fills = builds_here * len(channels) if padded else 0
            work["template_vector_bytes"] += shifts * align_n * 4 + fills * slab * elem
            work["template_vector_calls"] += shifts + fills
    if img2col.mode == "window":
        work["template_vector_bytes"] += cores * slab * elem
        work["template_vector_calls"] += cores
    return KernelWork(scalar_elems=scalar, **work)


def inputs_of_kind(program, kind) -> list:
    """Input buffers of ``program`` read as ``kind``, once each, in first-load order."""
    found, seen = [], set()
    for access, buffer, _ in program.loads.values():
        if buffer.name in program.inputs and program.inputs[buffer.name] is kind and \
                buffer.name not in seen:
            seen.add(buffer.name)
            found.append(buffer)
    return found


def streamed_tails(shape: ConvShape, program, base_n: int) -> tuple[int, int]:
    """(elements not read, scalar tail elements) of the streamed epilogue rows (a residual)
    that ``CopyTileInBlocks`` copies exactly because their whole blocks would pass the
    tensor's end; each such row is copied once."""
    if program is None:
        return 0, 0
    c0 = 32 // dtype_bytes(shape.dtype)
    rows = shape.n * shape.cout
    fewer = scalar = 0
    for buffer in inputs_of_kind(program, RowAccessKind.ROWS):
        total = buffer_size(buffer)
        for p0 in range(0, shape.pixels, base_n):
            cols = min(base_n, shape.pixels - p0)
            if cols % c0 == 0:
                continue
            whole = round_up(cols, c0)
            exact = rows - max(0, (total - whole - p0) // shape.pixels + 1)
            fewer += max(0, exact) * (whole - cols)
            scalar += max(0, exact) * (cols % c0)
    return fewer, scalar


def epilogue_reads(program, cur_m, cur_n) -> int:
    """Bytes one tile's epilogue reads: streamed rows (``cur_n`` elements each), and one value
    per row for row scalars."""
    if program is None:
        return 0
    rows = sum(cur_m * cur_n * dtype_bytes(b.dtype)
               for b in inputs_of_kind(program, RowAccessKind.ROWS))
    return rows + sum(cur_m * dtype_bytes(b.dtype)
                      for b in inputs_of_kind(program, RowAccessKind.ROW_SCALAR))


__all__ = ["column_scalar_writes", "conv_traffic", "epilogue_reads", "img2col_work",
           "inputs_of_kind", "streamed_tails", "valid_taps"]
