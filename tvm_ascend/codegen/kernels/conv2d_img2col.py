"""Prints the conv kernel's ``Img2col`` method: the col rows of one K chunk for a pixel tile,
by the plan's method (``ConvPlan.img2col.mode``, ``schedules/conv2d/``): one copy of input-plane
rows, vector Gathers from a UB slab of input rows (with the Gather offsets built once per
pixel tile), or the scalar fallback. Part of ``ConvKernelPrinter``.

Example
-------
>>> printer = Img2colPrinter(tiling.plan, "x", sizes, "half")             # doctest: +SKIP
>>> buf = CodeBuffer(); printer.emit(buf)                                # doctest: +SKIP
>>> "AscendC::Gather(" in buf.text()                                     # doctest: +SKIP
True
"""
from __future__ import annotations

from ...schedules.tiling import dtype_bytes


class Img2colPrinter:
    """``Img2col`` and its helpers for one conv kernel (``plan``: the template's ``ConvPlan``,
    ``x_name``: the input's identifier, ``sizes``: elements of each GM argument by identifier,
    ``ctype``: the C++ element type)."""

    def __init__(self, plan, x_name: str, sizes: dict, ctype: str):
        self.plan, self.shape, self.mode = plan, plan.shape, plan.img2col.mode
        self.x_name, self.sizes, self.ctype = x_name, sizes, ctype

    def emit(self, buf):
        """``Img2col``: col rows [k0, k0 + kc) x pixels [p0, p0 + curN) by the plan's method."""
        t = self.ctype
        with buf.indent(f"__aicore__ inline void Img2col(const AscendC::LocalTensor<{t}>& col, "
                        "uint32_t n, uint32_t g, uint32_t k0, uint32_t kc, uint32_t p0, "
                        "uint32_t curN) {"):
            buf.line("const uint64_t HW = static_cast<uint64_t>(tiling.h) * tiling.w;")
            buf.line("const uint64_t plane = static_cast<uint64_t>(n) * tiling.cin + "
                     "g * (tiling.cin / tiling.groups);  // the group's first input channel")
            {"rows": self.emit_gather_rows, "window": self.emit_gather_window,
             "scalar": self.emit_gather_scalar}[self.mode](buf)
        if self.mode == "window":
            self.emit_offsets(buf)

    def emit_gather_rows(self, buf):
        """1x1, stride 1, no padding: col row ``ci`` is input plane ``ci``'s pixels, one copy."""
        buf.line("const uint64_t at = (plane + k0) * HW + p0;")
        buf.line(f"CopyTileInBlocks(col, {self.x_name}Gm[at], kc, curN, tiling.pitch, HW, "
                 f"{self.sizes[self.x_name]}ULL - at);")

    def emit_gather_window(self, buf):
        """The input rows under the tile's taps, for the chunk's channels, into ``slab`` (one
        multi-row copy per channel, rows ``slabRowPitch`` apart after ``slabLead`` zeros); then
        one vector Gather per channel writes that channel's col rows (its taps in the chunk),
        with the per-tap offsets and the channel's place in ``srcBaseAddr``."""
        t = self.ctype
        buf.line("const uint32_t taps = tiling.kh * tiling.kw, N = tiling.pitch;")
        buf.line("int32_t top, ihLo, rowsIn;")
        buf.line("bool padded = WindowRows(p0, curN, top, ihLo, rowsIn);")
        with buf.indent("if (offsetsFor != p0 + 1) {"):
            buf.line("BuildOffsets(p0, curN);")
            buf.line("offsetsFor = p0 + 1;")
        buf.line("uint32_t ciLo = k0 / taps, ciHi = (k0 + kc - 1) / taps;")
        buf.line(f"AscendC::LocalTensor<{t}> slab = slabBuf.Get<{t}>();")
        buf.line("AscendC::LocalTensor<uint32_t> offsets = offsetBuf.Get<uint32_t>();")
        with buf.indent("if (padded) {"):
            # rows of the tile before may sit where this window's padding rows are
            buf.line(f"AscendC::Duplicate(slab, static_cast<{t}>(0.0f), "
                     "tiling.slabChannels * tiling.slabPitch);")
        # the previous chunk's Gathers (and the zeros) are done with the slab the copy writes
        buf.line("AscendC::SetFlag<AscendC::HardEvent::V_MTE2>(0);")
        buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_MTE2>(0);")
        first_row = "(ci - ciLo) * tiling.slabPitch + tiling.slabLead + (ihLo - top) * " \
            "tiling.slabRowPitch"
        with buf.indent("for (uint32_t ci = ciLo; rowsIn > 0 && ci <= ciHi; ++ci) {"):
            buf.line("const uint64_t at = ((plane + ci) * tiling.h + ihLo) * tiling.w;")
            buf.line(f"CopyTileInBlocks(slab[{first_row}], {self.x_name}Gm[at], rowsIn, "
                     f"tiling.w, tiling.slabRowPitch, tiling.w, {self.sizes[self.x_name]}ULL - "
                     "at);")
        buf.line("AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(0);")
        buf.line("AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(0);")
        c0 = 32 // dtype_bytes(self.shape.dtype)
        if not self.plan.data_copy_pad and self.shape.w % c0:
            self.emit_margin_zeros(buf, first_row, c0)
        with buf.indent("for (uint32_t ci = ciLo; ci <= ciHi; ++ci) {"):
            buf.line("uint32_t kLo = ci * taps > k0 ? ci * taps : k0;")
            buf.line("uint32_t kHi = (ci + 1) * taps < k0 + kc ? (ci + 1) * taps : k0 + kc;")
            buf.line("AscendC::Gather(col[(kLo - k0) * N], slab, offsets[(kLo - ci * taps) * N], "
                     f"(ci - ciLo) * tiling.slabPitch * sizeof({t}), (kHi - kLo) * N);")

    def emit_margin_zeros(self, buf, first_row: str, c0: int):
        """Without DataCopyPad a slab row's copy is its whole 32-byte blocks, so the last one
        brings input elements after the row into the row's zero margin: a masked Duplicate
        zeroes them again (lanes ``w % C0``.. of the row's last block, one repeat a row)."""
        t = self.ctype
        w = self.shape.w
        lanes = ((1 << c0) - 1) & ~((1 << (w % c0)) - 1)
        buf.line(f"const uint64_t margin[2] = {{{lanes}ULL, 0ULL}};  // lanes {w % c0}..{c0 - 1}")
        with buf.indent("for (uint32_t ci = ciLo; rowsIn > 0 && ci <= ciHi; ++ci) {"):
            with buf.indent("for (int32_t r = 0; r < rowsIn; r += 255) {"):
                buf.line(f"AscendC::Duplicate(slab[{first_row} + r * tiling.slabRowPitch + "
                         f"{w // c0 * c0}], static_cast<{t}>(0.0f), margin, "
                         "static_cast<uint8_t>(rowsIn - r < 255 ? rowsIn - r : 255), 1, "
                         "static_cast<uint8_t>(tiling.slabRowPitch / C0));")

    def emit_offsets(self, buf):
        """``WindowRows`` (the slab's first row ``top``, the input rows a pixel tile's taps read,
        and whether they reach the padding) and ``BuildOffsets``, once per run of tiles of one
        pixel tile: per pixel the byte offset of its first tap in a channel's slab (scalar
        unit; the row's padding columns read offset 0), then each tap's row is that plus the
        tap's place (vector Adds)."""
        t = self.ctype
        with buf.indent("__aicore__ inline bool WindowRows(uint32_t p0, uint32_t curN, "
                        "int32_t& top, int32_t& ihLo, int32_t& rowsIn) {"):
            buf.line("int32_t oh0 = p0 / tiling.ow, oh1 = (p0 + curN - 1) / tiling.ow;")
            buf.line("top = oh0 * tiling.sh - tiling.padT;")
            buf.line("int32_t bottom = oh1 * tiling.sh + (tiling.kh - 1) * tiling.dh - "
                     "tiling.padT;")
            buf.line("ihLo = top < 0 ? 0 : top;")
            buf.line("int32_t ihHi = bottom > tiling.h - 1 ? tiling.h - 1 : bottom;")
            buf.line("rowsIn = ihHi >= ihLo ? ihHi - ihLo + 1 : 0;")
            buf.line("return top < 0 || bottom > tiling.h - 1;")
        with buf.indent("__aicore__ inline void BuildOffsets(uint32_t p0, uint32_t curN) {"):
            buf.line("const uint32_t N = tiling.pitch;")
            buf.line("AscendC::LocalTensor<uint32_t> offsets = offsetBuf.Get<uint32_t>();")
            buf.line("uint32_t oh0 = p0 / tiling.ow;")
            # the last pixel tile's Gathers and Adds are done with the offsets rewritten here
            buf.line("AscendC::SetFlag<AscendC::HardEvent::V_S>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);")
            with buf.indent("for (uint32_t j = 0; j < N; ++j) {"):
                buf.line("uint32_t oh = (p0 + j) / tiling.ow, ow = (p0 + j) % tiling.ow;")
                buf.line("uint32_t at = j < curN ? tiling.slabLead + (oh - oh0) * tiling.sh * "
                         "tiling.slabRowPitch + ow * tiling.sw - tiling.padL : 0;")
                buf.line(f"offsets.SetValue(j, at * sizeof({t}));")
            # the vector unit reads the first row next
            buf.line("AscendC::SetFlag<AscendC::HardEvent::S_V>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);")
            buf.line("AscendC::LocalTensor<int32_t> shifted = "
                     "offsets.ReinterpretCast<int32_t>();")
            with buf.indent("for (uint32_t tap = 1; tap < static_cast<uint32_t>(tiling.kh * "
                            "tiling.kw); ++tap) {"):
                buf.line("int32_t shift = (tap / tiling.kw * tiling.dh * tiling.slabRowPitch + "
                         f"tap % tiling.kw * tiling.dw) * sizeof({t});")
                buf.line("AscendC::Adds(shifted[tap * N], shifted, shift, N);")

    def emit_init(self, buf):
        """The slab, zero once (its leads and row margins are never copied to) and the
        offsets (one row per tap)."""
        t = self.ctype
        buf.line(f"pipe->InitBuffer(slabBuf, tiling.slabChannels * tiling.slabPitch * "
                 f"sizeof({t}));")
        buf.line("pipe->InitBuffer(offsetBuf, tiling.kh * tiling.kw * tiling.pitch * "
                 "sizeof(uint32_t));")
        buf.line(f"AscendC::Duplicate(slabBuf.Get<{t}>(), static_cast<{t}>(0.0f), "
                 "tiling.slabChannels * tiling.slabPitch);")

    def emit_gather_scalar(self, buf):
        """The fallback when the window does not fit the UB: element by element on the scalar
        unit; taps outside the input are the padding's zeros."""
        t = self.ctype
        buf.line("const uint32_t taps = tiling.kh * tiling.kw;")
        with buf.indent("for (uint32_t kk = 0; kk < kc; ++kk) {"):
            buf.line("uint32_t k = k0 + kk, ci = k / taps, ky = k % taps / tiling.kw, "
                     "kx = k % tiling.kw;")
            buf.line("uint64_t base = (plane + ci) * HW;")
            with buf.indent("for (uint32_t j = 0; j < curN; ++j) {"):
                buf.line("int32_t oh = (p0 + j) / tiling.ow, ow = (p0 + j) % tiling.ow;")
                buf.line("int32_t ih = oh * tiling.sh + ky * tiling.dh - tiling.padT;")
                buf.line("int32_t iw = ow * tiling.sw + kx * tiling.dw - tiling.padL;")
                buf.line(f"{t} v = static_cast<{t}>(0.0f);")
                buf.line("if (ih >= 0 && ih < tiling.h && iw >= 0 && iw < tiling.w) "
                         f"v = {self.x_name}Gm.GetValue(base + ih * tiling.w + iw);")
                buf.line("col.SetValue(kk * tiling.pitch + j, v);")
