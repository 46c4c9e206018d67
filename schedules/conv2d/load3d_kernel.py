"""The conv template's Load3D variant (``Conv2dKnobs.method="load3d"``): the plan of the kernel
``codegen/kernels/conv2d_load3d.py`` prints, on coupled chips (310P) for half convolutions.

The kernel is ``tests/emu/conv_load3d.cpp``'s NCHW mode (``load3d.py`` plans its tiles) with
the model's own tensors and the template's epilogue:

* per tile (``rows`` output rows of one image x ``n_tile`` output channels) and channel group,
  the input rows under the tile's taps go GM -> UB one multi-row copy per real channel (whole
  32-byte blocks, read on past the rows except where that would pass the input's end: there
  exactly, the tail on the scalar unit), zeros for the channels past ``cin``, one
  ``TransDataTo5HD`` repeat per 16 pixels into 5HD, UB -> L1;
* per K step, the OIHW weights of each 16 output channels (a group's real channels x all
  taps, the same copy rule) to the UB, one 256-element ``Gather`` per tap into an L0B fractal,
  UB -> L1 -> L0B; Load3D builds the image matrix in L0A and Mmad accumulates in L0C;
* the tile leaves L0C once through the UB (half, NZ), one ``TransDataTo5HD`` repeat per 16 x
  16 block turns it into ``nt`` output-channel rows of ``m`` pixels, the NCHW rows of the
  output: the epilogue (bias, activation, residual add) runs there one row a call, exactly as
  the img2col kernel's with one row a call, and ``CopyTileOut`` writes the rows.

``load3d_tiling`` counts what that kernel does tile by tile: its GM bytes, cube MACs, scalar
elements, Gathers and UB bytes equal the emulator's (``tests/test_conv_load3d.py``).
Float convolutions, 910B (the NCHW <-> 5HD turns need the AIV and cross-core flags there) and
grouped convolutions keep the img2col kernel: ``load3d_variant_refusal`` says why.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass

from tvm_ascend.errors import TilingError

from ..analysis.row_program import RowAccessKind
from ..analysis.tile_values import buffer_size
from ..tiling import (KernelWork, TemplatePlan, Tiling, UB_RESERVED_BYTES, ceil_div,
                      dtype_bytes, round_up)
from .load3d import Load3dPlan, load3d_plan, load3d_refusal
from .shape import ConvShape
from .traffic import inputs_of_kind as _inputs_of_kind

OFFSET_TABLE_BYTES = 256 * 4  # the weights' Gather offsets: one fractal's, uint32


@dataclass(frozen=True)
class Load3dConvPlan(TemplatePlan):
    """What the conv template decided for a kernel of the Load3D variant: ``variant`` is
    ``"load3d"`` (``ConvPlan.from_dict`` reads such a plan back as this class); ``load3d`` the
    tiles, slabs and K steps; ``pitch`` the UB row pitch of the product rows (a whole tile's
    pixels to 16); ``in_pitch`` a channel's input rows in the UB (the most a tile reads, to
    16); ``slots`` the epilogue's UB temporaries (one row each); ``data_copy_pad`` as
    ``ConvPlan``'s (False: the variant is on coupled chips only)."""

    template: typing.ClassVar[str] = "conv2d"  # not registered: ConvPlan.from_dict dispatches

    variant: str
    shape: ConvShape
    load3d: Load3dPlan
    pitch: int
    in_pitch: int
    slots: int
    data_copy_pad: bool

    def cube_dims(self) -> tuple:
        return (0, self.shape.n, self.shape.k, self.load3d.n_tile, self.pitch, 0, 0)


def inputs_of_kind(program, kind) -> list:
    """The epilogue's inputs read as ``kind`` (none without an epilogue)."""
    return [] if program is None else _inputs_of_kind(program, kind)


def load3d_variant_refusal(shape: ConvShape, soc) -> str | None:
    """Why the template's Load3D variant cannot take ``shape`` on ``soc`` (a sentence), or
    None."""
    if soc.npu_arch != 2002:
        return (f"the Load3D conv kernel is printed for coupled chips (310P) only, not "
                f"{soc.name}: on split chips its NCHW <-> 5HD turns need the AIV")
    return load3d_refusal(shape, soc)


def _ub_bytes(lp: Load3dPlan, in_pitch: int, pitch: int, slots: int, streamed: int) -> int:
    """UB bytes of the kernel's buffers (the printer's InitBuffer calls, in that order)."""
    s, elem = lp.shape, lp.elem
    taps = s.kh * s.kw
    product = pitch * lp.n_tile * elem  # L0C -> UB, then the rows, then each streamed operand
    return (2 + streamed) * product + 2 * 16 * in_pitch * elem + 256 * taps * elem + \
        lp.tap_step * 256 * elem + OFFSET_TABLE_BYTES + slots * pitch * elem


def _copy(at: int, rows: int, cols: int, pitch: int, total: int, c0: int) -> tuple[int, int]:
    """(elements read, scalar elements) of ``CopyTileInBlocks`` without DataCopyPad: ``rows``
    rows of ``cols`` from element ``at`` on, ``pitch`` apart, of a tensor of ``total``."""
    whole = round_up(cols, c0)
    fit = 0 if total - at < whole else (total - at - whole) // pitch + 1
    over = min(fit, rows)
    exact = rows - over
    return over * whole + exact * cols, exact * (cols % c0)


def _tile(lp: Load3dPlan, program, img: int, index: int) -> dict:
    """What the printed kernel does for tile ``index`` of image ``img``."""
    s, elem, c0 = lp.shape, lp.elem, lp.c0
    taps = s.kh * s.kw
    t, n0, nt16, nt, m, m16 = lp.tile_extent(index)
    x_total, w_total = s.n * s.cin * s.h * s.w, s.cout * s.cin * taps
    c = dict.fromkeys(("read", "operand", "scalar", "trans", "calls", "gathered", "gathers",
                       "zeros", "macs"), 0)
    for first, groups, tap0, step_taps in lp.chunks():
        kc = groups * step_taps * c0
        for g in range(groups):
            ch0 = (first + g) * c0
            real = min(c0, s.cin - ch0)
            if tap0 == 0:  # the slab: this group's input rows, turned into 5HD
                pitch = round_up(t.in_rows * s.w, 16)
                at = ((img * s.cin + ch0) * s.h + t.lo) * s.w
                read, scalar = _copy(at, real, t.in_rows * s.w, s.h * s.w, x_total, c0)
                c["operand"] += read * elem
                c["scalar"] += scalar
                c["zeros"] += (c0 - real) * pitch
                c["trans"] += pitch // 16
                c["calls"] += ceil_div(pitch // 16, 255)
            for nb in range(nt16 // 16):
                couts = min(16, nt - nb * 16)
                at = ((n0 + nb * 16) * s.cin + ch0) * taps
                read, scalar = _copy(at, couts, real * taps, s.cin * taps, w_total, c0)
                c["operand"] += read * elem
                c["scalar"] += scalar
                if real < c0 or couts < 16:
                    c["zeros"] += 256 * taps
                c["gathers"] += step_taps
                c["gathered"] += step_taps * 256
        c["macs"] += m16 * round_up(nt, 16) * kc
    c["trans"] += (nt16 // 16) * (m16 // 16)
    c["calls"] += (nt16 // 16) * ceil_div(m16 // 16, 255)
    c["read"] = c["operand"]
    row_off = img * s.cout + n0
    at = row_off * s.pixels + t.oh0 * s.ow
    for buffer in inputs_of_kind(program, RowAccessKind.ROWS):
        read, scalar = _copy(at, nt, m, s.pixels, buffer_size(buffer), c0)
        c["read"] += read * dtype_bytes(buffer.dtype)
        c["scalar"] += scalar
    for buffer in inputs_of_kind(program, RowAccessKind.ROW_SCALAR):
        c["read"] += nt * dtype_bytes(buffer.dtype)
    c["scalar"] += nt * (m % c0)  # CopyTileOut's row tails
    c["write"] = nt * m * elem
    c["rows"] = nt
    return c


def _row_choices(most: int, ow: int) -> list[int]:
    """Output rows per tile to try, in order: those from ``most`` down to half of it whose
    pixels fill whole 32-byte blocks (their rows leave the UB by DataCopy alone, no tail on
    the scalar unit), then the rest from ``most`` down."""
    whole = [r for r in range(most, (most - 1) // 2, -1) if r * ow % 16 == 0]
    return whole + [r for r in range(most, 0, -1) if r not in whole]


def load3d_tiling(shape: ConvShape, program, soc) -> Tiling:
    """The Tiling of the Load3D variant of ``shape`` (+ ``program``, the epilogue's row
    program or None) on ``soc``. The tiles are ``load3d_plan``'s, fewer output rows (then
    output channels) where the kernel's UB buffers would not fit. TilingError (a sentence)
    where the variant cannot take the conv."""
    why = load3d_variant_refusal(shape, soc)
    if why is not None:
        raise TilingError(f"conv2d through Load3D: {why}")
    slots = (len(program.intermediates) + program.temp_slots) if program else 0
    streamed = len(inputs_of_kind(program, RowAccessKind.ROWS))
    budget = soc.ub_bytes - UB_RESERVED_BYTES
    first = load3d_plan(shape, soc)
    lp, ub, pitch, in_pitch = None, 0, 0, 0
    for n_tile in range(first.n_tile, 15, -16):
        for rows in _row_choices(first.rows, shape.ow):
            try:
                lp = load3d_plan(shape, soc, rows=rows, n_tile=n_tile)
            except TilingError:
                continue
            in_rows = min(shape.h, (rows - 1) * shape.stride[0] +
                          (shape.kh - 1) * shape.dilation[0] + 1)
            pitch, in_pitch = round_up(rows * shape.ow, 16), round_up(in_rows * shape.w, 16)
            ub = _ub_bytes(lp, in_pitch, pitch, slots, streamed)
            if ub <= budget:
                break
            lp = None
        if lp is not None:
            break
    if lp is None:
        raise TilingError(f"conv2d through Load3D: no tile of output rows x 16 output channels "
                          f"fits the {budget} B of UB on {soc.name} (input rows "
                          f"{shape.w} wide)")
    per_image = lp.tiles_h * lp.tiles_n
    cores = min(soc.ai_cores, lp.tiles)
    per = ceil_div(lp.tiles, cores)
    used = ceil_div(lp.tiles, per)
    total: dict = {}
    busiest_rows = 0
    for block in range(used):
        rows = 0
        for t in range(block * per, min(lp.tiles, (block + 1) * per)):
            counts = _tile(lp, program, t // per_image, t % per_image)
            rows += counts["rows"]
            for key, value in counts.items():
                total[key] = total.get(key, 0) + value
        busiest_rows = max(busiest_rows, rows)
    elem = lp.elem
    read = total["read"] + used * sum(dtype_bytes(b.dtype) for b in
                                      inputs_of_kind(program, RowAccessKind.SCALAR))
    once = (shape.n * shape.cin * shape.h * shape.w + shape.cout * shape.k) * elem
    work = KernelWork(steps=per * len(lp.chunks()), vector_repeats=busiest_rows,
                      cube_macs=total["macs"], cube_operand_bytes=total["operand"],
                      l2_operand_bytes=max(0, total["operand"] - once),
                      template_vector_bytes=total["trans"] * 512 + total["zeros"] * elem,
                      template_vector_calls=total["calls"], gather_elems=total["gathered"],
                      gather_calls=total["gathers"],
                      # each core writes its Gather offsets on the scalar unit
                      scalar_elems=total["scalar"] + 256 * used,
                      img2col_prologue=True)
    plan = Load3dConvPlan("load3d", shape, lp, pitch, in_pitch, slots,
                          bool(soc.has_data_copy_pad))
    return Tiling("conv2d", lp.tiles, used, per, 1, per, 1,
                  program.temp_slots if program else 0, ub, soc.ub_bytes, read,
                  total["write"], shape.pixels, work=work, plan=plan)


__all__ = ["Load3dConvPlan", "load3d_tiling", "load3d_variant_refusal"]
