"""Prints the conv template's Load3D kernel (``schedules/conv2d/load3d_kernel.py`` plans it):
the cube's own img2col from input rows in L1, on coupled chips, for half convolutions.

``tests/emu/conv_load3d.cpp``'s NCHW mode, one method per construct: ``FillGroup`` (a channel
group's input rows GM -> UB -> 5HD -> L1), ``WeightFractals`` (a K step's OIHW weights into
L0B fractals in L1 by Gathers), ``Step`` (Load3D into L0A, the fractals into L0B, Mmad),
``RowsOut`` (the L0C product through the UB back into NCHW rows), then the template's epilogue
on those rows (``ConvKernelPrinter.emit_epilogue``, one row a call) and ``CopyTileOut``.

Example
-------
>>> printer = Load3dConvPrinter("k0", scheduled_func, tiling)            # doctest: +SKIP
>>> buf = CodeBuffer(); printer.print(buf)                               # doctest: +SKIP
>>> "LoadData3DParamsV2" in buf.text()                                   # doctest: +SKIP
True
"""
from __future__ import annotations

import textwrap

from ...errors import CodegenError
from ...schedules.conv2d import Load3dConvPlan
from ...schedules.conv2d.load3d import pad_bottom_right
from ...schedules.analysis.row_program import RowAccessKind
from ..kernel_parts import emit_field_assignments
from ..kernel_printer import CubeKernelPrinter
from .conv2d import ConvKernelPrinter

FIELDS = ("n", "cin", "h", "w", "cout", "kh", "kw", "oh", "ow", "sh", "sw", "dh", "dw", "padT",
          "padB", "padL", "padR", "rows", "c1", "c1Step", "nTile", "n16", "taps", "tapStep",
          "tilesH", "tilesN", "tilesPerCore", "totalTiles", "pitch", "inPitch", "usedCoreNum")


class Load3dConvPrinter(ConvKernelPrinter):
    """Prints one Load3D Conv2D (+ epilogue) kernel and describes its launch."""

    def __init__(self, symbol: str, func, tiling):  # noqa: D107 - the parent's, another plan
        CubeKernelPrinter.__init__(self, symbol, func, tiling)
        if not isinstance(tiling.plan, Load3dConvPlan):
            raise CodegenError(f"{symbol}: a Load3D conv printer for a "
                               f"{type(tiling.plan).__name__}; schedule it again")
        self._bind_conv(func, tiling.plan)
        self.rows, self.columns = 1, []  # the epilogue: one output-channel row a call

    # ---- printing ---------------------------------------------------------------------------
    def emit_types(self, buf):
        with buf.indent("struct TilingData {", "};"):
            buf.line(f"int32_t {', '.join(FIELDS)};")
        buf.line(f"constexpr int32_t C0 = 32 / sizeof({self.ctype});  // channels per group")
        buf.line()

    def emit_public_members(self, buf):  # no Matmul objects: the basic cube API
        pass

    def emit_entry(self, buf):
        impl = f"{self.symbol}_impl"
        params = self.entry_params()
        args = ", ".join(f"GM_ADDR {p}" for p in params)
        with buf.indent(f'extern "C" __global__ __aicore__ void {self.symbol}({args}, '
                        "GM_ADDR workspace, GM_ADDR tiling) {"):
            buf.line("KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_1);")
            buf.line(f"{impl}::TilingData tilingData = "
                     f"*reinterpret_cast<__gm__ {impl}::TilingData*>(tiling);")
            buf.line("if (AscendC::GetBlockIdx() >= tilingData.usedCoreNum) return;")
            buf.line("AscendC::TPipe pipe;")
            buf.line(f"{impl}::Kernel op;")
            buf.line(f"op.Init({', '.join(params)}, tilingData, &pipe);")
            buf.line("op.Process();")

    def emit_buffers(self, buf):
        t = self.ctype
        self._emit_gm_buffers(buf)
        buf.lines(textwrap.dedent(f"""\
            const int32_t reach = (tiling.rows - 1) * tiling.sh + (tiling.kh - 1) * tiling.dh + 1;
            const int32_t inRows = tiling.h < reach ? tiling.h : reach;  // the most a tile reads
            // the K of one step: one group's taps when they are split
            const int32_t kc =
                (tiling.tapStep < tiling.taps ? 1 : tiling.c1Step) * tiling.tapStep * C0;
            pipe->InitBuffer(slabQue, 1, tiling.c1Step * inRows * tiling.w * C0 * sizeof({t}));
            pipe->InitBuffer(fracL1Que, 1, kc * tiling.nTile * sizeof({t}));
            pipe->InitBuffer(aQue, 1, tiling.pitch * kc * sizeof({t}));
            pipe->InitBuffer(bQue, 1, kc * tiling.nTile * sizeof({t}));
            pipe->InitBuffer(cQue, 1, tiling.pitch * tiling.nTile * sizeof(float));
            pipe->InitBuffer(nzQue, 1, tiling.pitch * tiling.nTile * sizeof({t}));
            pipe->InitBuffer(accQue, 1, tiling.nTile * tiling.pitch * sizeof({t}));
            pipe->InitBuffer(rowsQue, 1, C0 * tiling.inPitch * sizeof({t}));
            pipe->InitBuffer(fmapQue, 1, tiling.inPitch * C0 * sizeof({t}));
            pipe->InitBuffer(wRowsQue, 1, 256 * tiling.taps * sizeof({t}));
            pipe->InitBuffer(wFracQue, 1, tiling.tapStep * 256 * sizeof({t}));
            pipe->InitBuffer(offsetBuf, 256 * sizeof(uint32_t));"""))
        for name in self._inputs(RowAccessKind.ROWS):
            buf.line(f"pipe->InitBuffer({self.names[name]}Que, 1, tiling.nTile * tiling.pitch * "
                     f"sizeof({t}));")
        if self.plan.slots:
            buf.line(f"pipe->InitBuffer(rowBuf, {self.plan.slots} * tiling.pitch * "
                     f"sizeof({t}));")
        buf.lines(textwrap.dedent(f"""\
            // fractal element i = n * 16 + c0 of tap 0 sits at (n * 16 + c0) * taps in a
            // [16 couts][16 channels x taps] UB block; tap t's are the same offsets from t on
            AscendC::LocalTensor<uint32_t> off = offsetBuf.Get<uint32_t>();
            for (int32_t i = 0; i < 256; ++i) {{
              off.SetValue(i, static_cast<uint32_t>(i * tiling.taps * sizeof({t})));
            }}
            AscendC::SetFlag<AscendC::HardEvent::S_V>(0);
            AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);"""))

    def emit_process(self, buf):
        buf.lines(textwrap.dedent("""\
            // tiles: (image, band of `rows` output rows, band of `nTile` output channels),
            // channel bands fastest, a contiguous range per core
            __aicore__ inline void Process() {
              const int32_t first = AscendC::GetBlockIdx() * tiling.tilesPerCore;
              const int32_t last = first + tiling.tilesPerCore < tiling.totalTiles ?
                  first + tiling.tilesPerCore : tiling.totalTiles;
              for (int32_t t = first; t < last; ++t) {
                Tile(t / tiling.tilesN / tiling.tilesH,
                     t / tiling.tilesN % tiling.tilesH * tiling.rows,
                     t % tiling.tilesN * tiling.nTile);
              }
            }"""))

    def emit_private(self, buf):
        self.emit_tile(buf)
        self.emit_step(buf)
        self.emit_fill_group(buf)
        self.emit_weight_fractals(buf)
        self.emit_rows_out(buf)

    def emit_tile(self, buf):
        """One tile: its input rows slab by slab into L1, the K steps into L0C, the product
        back into rows, the epilogue, the rows out."""
        t = self.ctype
        with buf.indent("__aicore__ inline void Tile(int32_t img, int32_t oh0, int32_t n0) {"):
            buf.lines(textwrap.dedent(f"""\
                const int32_t P = tiling.oh * tiling.ow;
                const int32_t rows = tiling.oh - oh0 < tiling.rows ? tiling.oh - oh0 : tiling.rows;
                const int32_t m = rows * tiling.ow, m16 = (m + 15) / 16 * 16;
                const int32_t nt16 =  // L0B / L0C columns
                    tiling.n16 - n0 < tiling.nTile ? tiling.n16 - n0 : tiling.nTile;
                const int32_t nt = tiling.cout - n0 < nt16 ? tiling.cout - n0 : nt16;  // real
                const int32_t top = oh0 * tiling.sh - tiling.padT;
                const int32_t bottom =
                    (oh0 + rows - 1) * tiling.sh - tiling.padT + (tiling.kh - 1) * tiling.dh;
                const int32_t lo = top < 0 ? 0 : top;
                int32_t hi = bottom > tiling.h - 1 ? tiling.h - 1 : bottom;
                if (hi < lo) hi = lo;  // every tap in the padding: one row keeps the FMATRIX valid
                const int32_t inRows = hi - lo + 1;
                const uint8_t pads[4] = {{static_cast<uint8_t>(tiling.padL),
                                         static_cast<uint8_t>(tiling.padR),
                                         static_cast<uint8_t>(lo - top),
                                         static_cast<uint8_t>(bottom > hi ? bottom - hi : 0)}};
                AscendC::LocalTensor<float> c = cQue.AllocTensor<float>();
                bool firstStep = true;
                // channel groups a slab holds: one when the taps are split
                const int32_t step = tiling.tapStep < tiling.taps ? 1 : tiling.c1Step;
                for (int32_t cs = 0; cs < tiling.c1; cs += step) {{
                  const int32_t groups = tiling.c1 - cs < step ? tiling.c1 - cs : step;
                  AscendC::LocalTensor<{t}> slab = slabQue.AllocTensor<{t}>();
                  for (int32_t g = 0; g < groups; ++g) {{
                    FillGroup(slab[g * inRows * tiling.w * C0], img, (cs + g) * C0, lo, inRows);
                  }}
                  slabQue.EnQue(slab);
                  slab = slabQue.DeQue<{t}>();
                  for (int32_t t0 = 0; t0 < tiling.taps; t0 += tiling.tapStep) {{
                    const int32_t nTaps =
                        tiling.taps - t0 < tiling.tapStep ? tiling.taps - t0 : tiling.tapStep;
                    Step(c, slab, pads, inRows, cs, groups, t0, nTaps, n0, m, m16, nt, nt16,
                         firstStep);
                    firstStep = false;
                  }}
                  slabQue.FreeTensor(slab);
                }}
                cQue.EnQue(c);
                c = cQue.DeQue<float>();
                // L0C -> UB: NZ fractals, float to half on the way
                AscendC::LocalTensor<{t}> nz = nzQue.AllocTensor<{t}>();
                AscendC::DataCopyParams cp;
                cp.blockCount = 1;
                cp.blockLen = static_cast<uint16_t>(m16 / 16 * (nt16 / 16));
                AscendC::DataCopyEnhancedParams e;
                e.blockMode = AscendC::BlockMode::BLOCK_MODE_MATRIX;
                AscendC::DataCopy(nz, c, cp, e);
                nzQue.EnQue(nz);
                nz = nzQue.DeQue<{t}>();
                cQue.FreeTensor(c);
                AscendC::LocalTensor<{t}> acc = accQue.AllocTensor<{t}>();
                RowsOut(acc, nz, m16, nt16);
                nzQue.FreeTensor(nz);
                // the epilogue reads the rows the transposes wrote
                AscendC::PipeBarrier<PIPE_V>();
                // the epilogue's rows (n, co), each the tile's pixels
                const uint32_t curM = nt, curN = m, stride = m16;
                const uint64_t rowOff = static_cast<uint64_t>(img) * tiling.cout + n0;
                const uint64_t p0 = static_cast<uint64_t>(oh0) * tiling.ow;"""))
            if self.program is not None:
                self.emit_epilogue(buf)
            buf.line("accQue.EnQue(acc);")
            buf.line(f"acc = accQue.DeQue<{t}>();")
            buf.line(f"CopyTileOut({self.out_name}Gm[rowOff * P + p0], acc, curM, curN, stride, "
                     "P);")
            buf.line("accQue.FreeTensor(acc);")

    def emit_step(self, buf):
        """One K step: its weights into L0B, Load3D's image matrix into L0A, Mmad into L0C."""
        t = self.ctype
        buf.lines(textwrap.dedent(f"""\
            __aicore__ inline void Step(const AscendC::LocalTensor<float>& c,
                                        const AscendC::LocalTensor<{t}>& slab, const uint8_t* pads,
                                        int32_t inRows, int32_t cs, int32_t groups, int32_t t0,
                                        int32_t nTaps, int32_t n0, int32_t m, int32_t m16,
                                        int32_t nt, int32_t nt16, bool firstStep) {{
              const int32_t kc = groups * nTaps * C0;
              AscendC::LocalTensor<{t}> w1 = fracL1Que.AllocTensor<{t}>();
              WeightFractals(w1, cs, groups, t0, nTaps, n0, nt, nt16);
              fracL1Que.EnQue(w1);
              w1 = fracL1Que.DeQue<{t}>();
              AscendC::LocalTensor<{t}> a2 = aQue.AllocTensor<{t}>();
              AscendC::LoadData3DParamsV2<{t}> p;
              for (int32_t i = 0; i < 4; ++i) p.padList[i] = pads[i];
              p.l1H = static_cast<uint16_t>(inRows);
              p.l1W = static_cast<uint16_t>(tiling.w);
              p.channelSize = static_cast<uint16_t>(groups * C0);
              p.kExtension = static_cast<uint16_t>(kc);
              p.kStartPt = static_cast<uint16_t>(t0 * C0);  // one group when the taps are split
              p.mExtension = static_cast<uint16_t>(m16);
              p.strideW = static_cast<uint8_t>(tiling.sw);
              p.strideH = static_cast<uint8_t>(tiling.sh);
              p.filterW = static_cast<uint8_t>(tiling.kw);
              p.filterH = static_cast<uint8_t>(tiling.kh);
              p.dilationFilterW = static_cast<uint8_t>(tiling.dw);
              p.dilationFilterH = static_cast<uint8_t>(tiling.dh);
              p.padValue = static_cast<{t}>(0);
              AscendC::LoadData(a2, slab, p);
              AscendC::LocalTensor<{t}> b2 = bQue.AllocTensor<{t}>();
              const int32_t fractals = kc / C0 * (nt16 / 16);
              for (int32_t f = 0; f < fractals; f += 255) {{
                AscendC::LoadData2DParams q;
                q.startIndex = static_cast<uint16_t>(f);
                q.repeatTimes = static_cast<uint8_t>(fractals - f < 255 ? fractals - f : 255);
                q.srcStride = 1;
                AscendC::LoadData(b2[f * 512 / sizeof({t})], w1, q);
              }}
              fracL1Que.FreeTensor(w1);
              aQue.EnQue(a2);
              bQue.EnQue(b2);
              a2 = aQue.DeQue<{t}>();
              b2 = bQue.DeQue<{t}>();
              AscendC::MmadParams mp;
              mp.m = static_cast<uint16_t>(m);
              mp.n = static_cast<uint16_t>(nt);
              mp.k = static_cast<uint16_t>(kc);
              mp.cmatrixInitVal = firstStep;
              AscendC::Mmad(c, a2, b2, mp);
              aQue.FreeTensor(a2);
              bQue.FreeTensor(b2);
            }}"""))

    def emit_fill_group(self, buf):
        """A channel group's input rows: GM -> UB (zeros past ``cin``), 5HD, UB -> L1."""
        t = self.ctype
        buf.lines(textwrap.dedent(f"""\
            // 16 NCHW channels from ch0 on: their rows [lo, lo + inRows) to the UB (whole blocks
            // but at the input's end), one TransDataTo5HD per 16 pixels into 5HD, UB -> L1
            __aicore__ inline void FillGroup(const AscendC::LocalTensor<{t}>& l1, int32_t img,
                                             int32_t ch0, int32_t lo, int32_t inRows) {{
              const int32_t pixels = inRows * tiling.w, pitch = (pixels + 15) / 16 * 16;
              const int32_t real = tiling.cin - ch0 < C0 ? tiling.cin - ch0 : C0;
              AscendC::LocalTensor<{t}> rows = rowsQue.AllocTensor<{t}>();
              if (real < C0) {{
                AscendC::Duplicate(rows[real * pitch], static_cast<{t}>(0), (C0 - real) * pitch);
              }}
              const uint64_t at =
                  ((static_cast<uint64_t>(img) * tiling.cin + ch0) * tiling.h + lo) * tiling.w;
              CopyTileInBlocks(rows, {self.x_name}Gm[at], real, pixels, pitch,
                               static_cast<uint64_t>(tiling.h) * tiling.w,
                               {self.sizes[self.x_name]}ULL - at);
              rowsQue.EnQue(rows);
              rows = rowsQue.DeQue<{t}>();
              AscendC::LocalTensor<{t}> fmap = fmapQue.AllocTensor<{t}>();
              for (int32_t r0 = 0; r0 < pitch / 16; r0 += 255) {{
                AscendC::LocalTensor<{t}> dst[16], src[16];
                for (int32_t i = 0; i < 16; ++i) {{
                  src[i] = rows[i * pitch + r0 * 16];  // channel i, 16 pixels a repeat
                  dst[i] = fmap[(r0 * 16 + i) * 16];   // pixel i of the repeat, its 16 channels
                }}
                const int32_t reps = pitch / 16 - r0 < 255 ? pitch / 16 - r0 : 255;
                const AscendC::TransDataTo5HDParams tp(false, false, static_cast<uint8_t>(reps),
                                                       16, 1);
                AscendC::TransDataTo5HD<{t}>(dst, src, tp);
              }}
              rowsQue.FreeTensor(rows);
              fmapQue.EnQue(fmap);
              fmap = fmapQue.DeQue<{t}>();
              AscendC::DataCopy(l1, fmap, pixels * 16);
              fmapQue.FreeTensor(fmap);
            }}"""))

    def emit_weight_fractals(self, buf):
        """A K step's weights from OIHW into L1 as L0B fractals by Gathers."""
        t = self.ctype
        buf.lines(textwrap.dedent(f"""\
            // the step's weights into L1 as L0B fractals [(g, tap)][nb][16 n][16 c0]: per group and
            // 16 output channels their real channels x all taps to the UB (zeros for the rest),
            // one Gather per tap into a fractal, the step's fractals UB -> L1 at their (g, tap)
            // rows
            __aicore__ inline void WeightFractals(const AscendC::LocalTensor<{t}>& w1, int32_t cs,
                                                  int32_t groups, int32_t t0, int32_t nTaps,
                                                  int32_t n0, int32_t nt, int32_t nt16) {{
              // a cout's 16 channels x taps: one UB block row
              const int32_t nbs = nt16 / 16, block = 16 * tiling.taps;
              AscendC::LocalTensor<uint32_t> off = offsetBuf.Get<uint32_t>();
              for (int32_t g = 0; g < groups; ++g) {{
                const int32_t ch0 = (cs + g) * C0;
                const int32_t real = tiling.cin - ch0 < C0 ? tiling.cin - ch0 : C0;
                for (int32_t nb = 0; nb < nbs; ++nb) {{
                  const int32_t couts = nt - nb * 16 < 16 ? nt - nb * 16 : 16;
                  AscendC::LocalTensor<{t}> rows = wRowsQue.AllocTensor<{t}>();
                  if (real < C0 || couts < 16) {{
                    AscendC::Duplicate(rows, static_cast<{t}>(0), 16 * block);
                    // the copy below overwrites part of what the zeros filled
                    AscendC::SetFlag<AscendC::HardEvent::V_MTE2>(0);
                    AscendC::WaitFlag<AscendC::HardEvent::V_MTE2>(0);
                  }}
                  const uint64_t at =
                      (static_cast<uint64_t>(n0 + nb * 16) * tiling.cin + ch0) * tiling.taps;
                  CopyTileInBlocks(rows, {self.w_name}Gm[at], couts, real * tiling.taps, block,
                                   static_cast<uint64_t>(tiling.cin) * tiling.taps,
                                   {self.sizes[self.w_name]}ULL - at);
                  wRowsQue.EnQue(rows);
                  rows = wRowsQue.DeQue<{t}>();
                  AscendC::LocalTensor<{t}> frac = wFracQue.AllocTensor<{t}>();
                  for (int32_t k = 0; k < nTaps; ++k) {{
                    AscendC::Gather(frac[k * 256], rows, off,
                                    static_cast<uint32_t>((t0 + k) * sizeof({t})), 256);
                  }}
                  wRowsQue.FreeTensor(rows);
                  wFracQue.EnQue(frac);
                  frac = wFracQue.DeQue<{t}>();
                  AscendC::DataCopyParams fp;  // fractal (g * nTaps + k, nb) of the step's [kb][nb]
                  fp.blockCount = static_cast<uint16_t>(nTaps);
                  fp.blockLen = 16;
                  fp.dstStride = static_cast<uint16_t>((nbs - 1) * 16);
                  AscendC::DataCopy(w1[(g * nTaps * nbs + nb) * 256], frac, fp);
                  wFracQue.FreeTensor(frac);
                }}
              }}
            }}"""))

    def emit_rows_out(self, buf):
        """The NZ product in the UB back into output-channel rows."""
        t = self.ctype
        buf.lines(textwrap.dedent(f"""\
            // the NZ product ([nt16 / 16][m16][16]) into rows [nt16][m16]: row co holds the
            // tile's pixels
            __aicore__ inline void RowsOut(const AscendC::LocalTensor<{t}>& rows,
                                           const AscendC::LocalTensor<{t}>& nz, int32_t m16,
                                           int32_t nt16) {{
              for (int32_t g = 0; g < nt16 / 16; ++g) {{
                for (int32_t r0 = 0; r0 < m16 / 16; r0 += 255) {{
                  AscendC::LocalTensor<{t}> dst[16], src[16];
                  for (int32_t i = 0; i < 16; ++i) {{
                    src[i] = nz[(g * m16 + r0 * 16 + i) * 16];     // pixel i, its 16 channels
                    dst[i] = rows[(g * 16 + i) * m16 + r0 * 16];  // channel i, 16 pixels
                  }}
                  const int32_t reps = m16 / 16 - r0 < 255 ? m16 / 16 - r0 : 255;
                  const AscendC::TransDataTo5HDParams tp(false, false,
                                                         static_cast<uint8_t>(reps), 1, 16);
                  AscendC::TransDataTo5HD<{t}>(dst, src, tp);
                }}
              }}
            }}"""))

    def emit_members(self, buf):
        self._emit_gm_members(buf)
        buf.lines(textwrap.dedent("""\
            AscendC::TQue<AscendC::TPosition::A1, 1> slabQue;  // input rows, 5HD
            AscendC::TQue<AscendC::TPosition::B1, 1> fracL1Que;     // a K step's weight fractals
            AscendC::TQue<AscendC::TPosition::A2, 1> aQue;
            AscendC::TQue<AscendC::TPosition::B2, 1> bQue;
            AscendC::TQue<AscendC::TPosition::CO1, 1> cQue;
            AscendC::TQue<AscendC::TPosition::CO2, 1> nzQue;   // the product in the UB, NZ
            AscendC::TQue<AscendC::TPosition::VECOUT, 1> accQue;  // its rows: epilogue, out
            AscendC::TQue<AscendC::TPosition::VECIN, 1> rowsQue, wRowsQue;
            AscendC::TQue<AscendC::TPosition::VECOUT, 1> fmapQue, wFracQue;
            AscendC::TBuf<AscendC::TPosition::VECCALC> offsetBuf;  // the Gathers' offsets"""))
        self._emit_epilogue_members(buf)

    # ---- what the launcher needs ------------------------------------------------------------
    def emit_tiling_init(self, buf, var: str) -> None:
        p, s, t = self.plan.load3d, self.shape, self.tiling
        bottom, right = pad_bottom_right(s)
        values = {"n": s.n, "cin": s.cin, "h": s.h, "w": s.w, "cout": s.cout, "kh": s.kh,
                  "kw": s.kw, "oh": s.oh, "ow": s.ow, "sh": s.stride[0], "sw": s.stride[1],
                  "dh": s.dilation[0], "dw": s.dilation[1], "padT": s.pad[0], "padB": bottom,
                  "padL": s.pad[1], "padR": right, "rows": p.rows, "c1": p.c1,
                  "c1Step": p.c1_step, "nTile": p.n_tile, "n16": p.n16, "taps": s.kh * s.kw,
                  "tapStep": p.tap_step, "tilesH": p.tiles_h, "tilesN": p.tiles_n,
                  "tilesPerCore": t.block_len, "totalTiles": t.total, "pitch": self.plan.pitch,
                  "inPitch": self.plan.in_pitch, "usedCoreNum": t.cores}
        buf.line(f"{self.symbol}_impl::TilingData {var}{{}};")
        emit_field_assignments(buf, self.symbol, var, "int32_t", {f: values[f] for f in FIELDS})

    def takes_user_workspace(self) -> bool:
        return False

    def user_workspace_bytes(self) -> int:
        return 0

__all__ = ["Load3dConvPrinter"]
