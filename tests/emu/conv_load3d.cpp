// Convolution through the cube's own img2col (Load3D v2), written with the basic cube API as
// vendor convs are, for tests/test_emulator_load3d.py:
//  - conv: x in 5HD (N, C1, H, W, C0) in GM, or NCHW (nchw, coupled chips: turned into 5HD in
//    the UB by TransDataTo5HD); each tile is `rows` whole output rows of one image by `nTile`
//    output channels (channel tiles fastest); its input rows (only those under the tile's taps)
//    go to L1 one slab of `c1Step` channel groups at a time (one group when the taps are split),
//    and for each K step (the slab's taps, or `kTaps` of them) the step's weights (pre-laid in
//    GM as L0B fractals) go GM -> L1 -> L0B, Load3D makes the step's image matrix in L0A, Mmad
//    accumulates in L0C; out by Fixpipe (910B: NHWC rows or NC1HWC0, ReLU on the way) or
//    through the UB (310P: NC1HWC0, or NCHW rows after TransDataTo5HD back; ReLU and the float
//    -> half conversion in the L0C -> UB copy). Tiles are spread over the blocks in contiguous
//    ranges.
//  - rule CASE: one device-rule violation per case (error text checked by the test).
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

struct ConvArgs {
    int n, c, h, w, cout, kh, kw, sh, sw, dh, dw, padT, padB, padL, padR, rows, c1Step, nTile, kTaps, blocks, relu;
    bool nz;    // output NC1HWC0 (else NHWC rows)
    bool nchw;  // x and y NCHW, through the UB and TransDataTo5HD both ways (coupled chips)
    int Ho() const { return (h + padT + padB - dh * (kh - 1) - 1) / sh + 1; }
    int Wo() const { return (w + padL + padR - dw * (kw - 1) - 1) / sw + 1; }
};
static ConvArgs g_args;

template <typename T>
class KernelConv {
 public:
    static constexpr int C0 = 32 / sizeof(T);
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR wt, GM_ADDR y) {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
        a = g_args;
        c1 = (a.c + C0 - 1) / C0;
        ho = a.Ho();
        wo = a.Wo();
        n16 = (a.cout + 15) / 16 * 16;
        taps = a.kh * a.kw;
        tapStep = a.kTaps > 0 && a.kTaps < taps ? a.kTaps : taps;
        xGm.SetGlobalBuffer((__gm__ T*)x, a.nchw ? static_cast<uint64_t>(a.n) * a.c * a.h * a.w + 16 :
                                                   static_cast<uint64_t>(a.n) * c1 * a.h * a.w * C0);
        // fractals, or (nchw) the model's OIHW with a channel group's taps of slack past its end
        wGm.SetGlobalBuffer((__gm__ T*)wt, a.nchw ? static_cast<uint64_t>(a.cout) * a.c * taps + 16 * taps :
                                                    static_cast<uint64_t>(c1) * taps * C0 * n16);
        yGm.SetGlobalBuffer((__gm__ T*)y, static_cast<uint64_t>(a.n) * n16 * ho * wo);
        int inRows = (a.rows - 1) * a.sh + (a.kh - 1) * a.dh + 1;  // the most a tile's taps reach
        if (inRows > a.h) inRows = a.h;
        const int m16 = (a.rows * wo + 15) / 16 * 16;
        const int kc = (tapStep < taps ? 1 : a.c1Step) * tapStep * C0;  // K of one step
        pipe.InitBuffer(slabQue, 1, a.c1Step * inRows * a.w * C0 * sizeof(T));
        pipe.InitBuffer(wQue, 1, kc * a.nTile * sizeof(T));
        pipe.InitBuffer(aQue, 1, m16 * kc * sizeof(T));
        pipe.InitBuffer(bQue, 1, kc * a.nTile * sizeof(T));
        pipe.InitBuffer(cQue, 1, m16 * a.nTile * sizeof(float));
        if (AscendC::emu::ActiveSoc().npu_arch != 2201) pipe.InitBuffer(outQue, 1, m16 * a.nTile * sizeof(T));
        if (a.nchw) {
            const int pitch = (inRows * a.w + 15) / 16 * 16;  // a channel's rows, whole blocks
            pipe.InitBuffer(rowsQue, 1, 16 * pitch * sizeof(T));
            pipe.InitBuffer(fmapQue, 1, pitch * 16 * sizeof(T));
            pipe.InitBuffer(rowsOutQue, 1, a.nTile * m16 * sizeof(T));
            pipe.InitBuffer(wRowsQue, 1, 16 * 16 * taps * sizeof(T));
            pipe.InitBuffer(wFracQue, 1, tapStep * 256 * sizeof(T));
            pipe.InitBuffer(offsetBuf, 256 * sizeof(uint32_t));
            // fractal element i = n * 16 + c0 of tap 0 sits at (n * 16 + c0) * taps in a
            // [16 couts][16 channels x taps] UB block; a tap's fractal is the same offsets from
            // tap * sizeof(T) on
            AscendC::LocalTensor<uint32_t> off = offsetBuf.Get<uint32_t>();
            for (int i = 0; i < 256; ++i) off.SetValue(i, static_cast<uint32_t>(i * taps * sizeof(T)));
        }
    }
    // tiles: (image, band of `rows` output rows, band of `nTile` output channels), channels fastest
    __aicore__ inline void Process() {
        const int tilesH = (ho + a.rows - 1) / a.rows, tilesN = (n16 + a.nTile - 1) / a.nTile;
        const int total = a.n * tilesH * tilesN, per = (total + a.blocks - 1) / a.blocks;
        const int first = AscendC::GetBlockIdx() * per;
        const int last = first + per < total ? first + per : total;
        for (int t = first; t < last; ++t) {
            Tile(t / tilesN / tilesH, t / tilesN % tilesH * a.rows, t % tilesN * a.nTile);
        }
    }

 private:
    __aicore__ inline void Tile(int img, int oh0, int n0) {
        const int rows = ho - oh0 < a.rows ? ho - oh0 : a.rows, m = rows * wo, m16 = (m + 15) / 16 * 16;
        const int nt16 = n16 - n0 < a.nTile ? n16 - n0 : a.nTile;       // L0B / L0C columns
        const int nt = a.cout - n0 < nt16 ? a.cout - n0 : nt16;          // real output channels
        const int top = oh0 * a.sh - a.padT, bottom = (oh0 + rows - 1) * a.sh - a.padT + (a.kh - 1) * a.dh;
        int lo = top < 0 ? 0 : top, hi = bottom > a.h - 1 ? a.h - 1 : bottom;
        if (hi < lo) hi = lo;  // every tap in the padding: one row keeps the FMATRIX valid
        const int inRows = hi - lo + 1;
        const uint8_t pads[4] = {static_cast<uint8_t>(a.padL), static_cast<uint8_t>(a.padR),
                                 static_cast<uint8_t>(lo - top),
                                 static_cast<uint8_t>(bottom > hi ? bottom - hi : 0)};
        AscendC::LocalTensor<float> acc = cQue.AllocTensor<float>();
        bool firstStep = true;
        const int step = tapStep < taps ? 1 : a.c1Step;  // channel groups a slab holds
        for (int cs = 0; cs < c1; cs += step) {
            const int groups = c1 - cs < step ? c1 - cs : step;
            AscendC::LocalTensor<T> slab = slabQue.AllocTensor<T>();
            if (a.nchw) {
                for (int g = 0; g < groups; ++g) FillGroup(slab[g * inRows * a.w * C0], img, (cs + g) * C0, lo, inRows);
            } else {
                AscendC::DataCopyParams rowsIn;
                rowsIn.blockCount = static_cast<uint16_t>(groups);
                rowsIn.blockLen = static_cast<uint16_t>(inRows * a.w);  // C0 elements = 32 B each
                rowsIn.srcStride = static_cast<uint16_t>((a.h - inRows) * a.w);
                rowsIn.dstStride = 0;
                const uint64_t at = ((static_cast<uint64_t>(img) * c1 + cs) * a.h + lo) * a.w * C0;
                AscendC::DataCopy(slab, xGm[at], rowsIn);
            }
            slabQue.EnQue(slab);
            slab = slabQue.DeQue<T>();
            for (int t0 = 0; t0 < taps; t0 += tapStep) {  // K steps over the slab's taps
                const int nTaps = taps - t0 < tapStep ? taps - t0 : tapStep, kc = groups * nTaps * C0;
                // the step's weights: K fractal rows (cs * taps + t0) on, the tile's N fractals
                AscendC::LocalTensor<T> w1 = wQue.AllocTensor<T>();
                if (a.nchw) {
                    WeightFractals(w1, cs, groups, t0, nTaps, n0, nt, nt16);
                } else {
                    AscendC::DataCopyParams wp;
                    wp.blockCount = static_cast<uint16_t>(kc / C0);
                    wp.blockLen = static_cast<uint16_t>(nt16);  // 16 rows of C0 = nt16 / 16 fractals
                    wp.srcStride = static_cast<uint16_t>(n16 - nt16);
                    const uint64_t kRow = static_cast<uint64_t>(cs) * taps + t0;  // first K fractal row
                    AscendC::DataCopy(w1, wGm[kRow * C0 * n16 + static_cast<uint64_t>(n0) * C0], wp);
                }
                wQue.EnQue(w1);
                w1 = wQue.DeQue<T>();
                AscendC::LocalTensor<T> a2 = aQue.AllocTensor<T>();
                AscendC::LoadData3DParamsV2<T> p;
                for (int i = 0; i < 4; ++i) p.padList[i] = pads[i];
                p.l1H = static_cast<uint16_t>(inRows);
                p.l1W = static_cast<uint16_t>(a.w);
                p.channelSize = static_cast<uint16_t>(groups * C0);
                p.kExtension = static_cast<uint16_t>(kc);
                p.kStartPt = static_cast<uint16_t>(t0 * C0);  // one group when the taps are split
                p.mExtension = static_cast<uint16_t>(m16);
                p.strideW = static_cast<uint8_t>(a.sw);
                p.strideH = static_cast<uint8_t>(a.sh);
                p.filterW = static_cast<uint8_t>(a.kw);
                p.filterH = static_cast<uint8_t>(a.kh);
                p.dilationFilterW = static_cast<uint8_t>(a.dw);
                p.dilationFilterH = static_cast<uint8_t>(a.dh);
                p.padValue = static_cast<T>(0);
                AscendC::LoadData(a2, slab, p);
                AscendC::LocalTensor<T> b2 = bQue.AllocTensor<T>();
                const int fractals = kc / C0 * (nt16 / 16);
                for (int f = 0; f < fractals; f += 255) {
                    AscendC::LoadData2DParams q;
                    q.startIndex = static_cast<uint16_t>(f);
                    q.repeatTimes = static_cast<uint8_t>(fractals - f < 255 ? fractals - f : 255);
                    q.srcStride = 1;
                    AscendC::LoadData(b2[f * 512 / sizeof(T)], w1, q);
                }
                wQue.FreeTensor(w1);
                aQue.EnQue(a2);
                bQue.EnQue(b2);
                a2 = aQue.DeQue<T>();
                b2 = bQue.DeQue<T>();
                AscendC::MmadParams mp;
                mp.m = static_cast<uint16_t>(m);
                mp.n = static_cast<uint16_t>(nt);
                mp.k = static_cast<uint16_t>(kc);
                mp.cmatrixInitVal = firstStep;
                firstStep = false;
                AscendC::Mmad(acc, a2, b2, mp);
                aQue.FreeTensor(a2);
                bQue.FreeTensor(b2);
            }
            slabQue.FreeTensor(slab);
        }
        cQue.EnQue(acc);
        acc = cQue.DeQue<float>();
        const uint64_t pix = static_cast<uint64_t>(img) * ho * wo + static_cast<uint64_t>(oh0) * wo;
        if (AscendC::emu::ActiveSoc().npu_arch == 2201) {
            AscendC::FixpipeParamsV220 fp;
            fp.mSize = static_cast<uint16_t>(m);
            fp.srcStride = static_cast<uint16_t>(m16);
            fp.reluEn = a.relu != 0;
            fp.quantPre = std::is_same<T, half>::value ? QuantMode_t::F322F16 : QuantMode_t::NoQuant;
            if (a.nz) {  // group g of image img at ((img * n16 / 16 + g) * ho * wo + oh0 * wo) * 16
                fp.nSize = static_cast<uint16_t>(nt16);
                fp.dstStride = static_cast<uint32_t>(ho * wo * 16 * sizeof(T) / 32);
                const uint64_t off = (static_cast<uint64_t>(img) * n16 + n0) * ho * wo +
                                     static_cast<uint64_t>(oh0) * wo * 16;
                AscendC::Fixpipe<T, float, AscendC::CFG_NZ>(yGm[off], acc, fp);
            } else {
                fp.nSize = static_cast<uint16_t>(nt);
                fp.dstStride = static_cast<uint32_t>(a.cout);
                AscendC::Fixpipe(yGm[pix * a.cout + n0], acc, fp);
            }
        } else {  // coupled chip: L0C -> UB (NZ, converted, ReLU'd) -> GM as NC1HWC0 or NCHW rows
            AscendC::LocalTensor<T> out = outQue.AllocTensor<T>();
            AscendC::DataCopyParams cp;
            cp.blockCount = 1;
            cp.blockLen = static_cast<uint16_t>(m16 / 16 * (nt16 / 16));
            AscendC::DataCopyEnhancedParams e;
            e.blockMode = AscendC::BlockMode::BLOCK_MODE_MATRIX;
            e.isRelu = a.relu != 0;
            AscendC::DataCopy(out, acc, cp, e);
            outQue.EnQue(out);
            out = outQue.DeQue<T>();
            if (a.nchw) {
                RowsOut(out, img, oh0, n0, nt, nt16, m, m16);
            } else {
                for (int g = 0; g < nt16 / 16; ++g) {
                    const uint64_t off = (static_cast<uint64_t>(img) * n16 / 16 + n0 / 16 + g) * ho * wo * 16 +
                                         static_cast<uint64_t>(oh0) * wo * 16;
                    AscendC::DataCopy(yGm[off], out[g * m16 * 16], m * 16);
                }
            }
            outQue.FreeTensor(out);
        }
        cQue.FreeTensor(acc);
    }
    // 16 NCHW channels from c0 on (zeros past the input's): their rows [lo, lo + inRows) to the
    // UB (whole blocks), one TransDataTo5HD per 16 pixels into 5HD, then UB -> L1
    __aicore__ inline void FillGroup(const AscendC::LocalTensor<T>& l1, int img, int ch0, int lo, int inRows) {
        const int pixels = inRows * a.w, pitch = (pixels + 15) / 16 * 16;
        AscendC::LocalTensor<T> rows = rowsQue.AllocTensor<T>();
        for (int i = 0; i < 16; ++i) {
            if (ch0 + i < a.c) {
                const uint64_t at = ((static_cast<uint64_t>(img) * a.c + ch0 + i) * a.h + lo) * a.w;
                AscendC::DataCopy(rows[i * pitch], xGm[at], pitch);
            } else {
                AscendC::Duplicate(rows[i * pitch], static_cast<T>(0), pitch);
            }
        }
        rowsQue.EnQue(rows);
        rows = rowsQue.DeQue<T>();
        AscendC::LocalTensor<T> fmap = fmapQue.AllocTensor<T>();
        for (int r0 = 0; r0 < pitch / 16; r0 += 255) {
            AscendC::LocalTensor<T> dst[16], src[16];
            for (int i = 0; i < 16; ++i) {
                src[i] = rows[i * pitch + r0 * 16];  // channel i, 16 pixels a repeat
                dst[i] = fmap[(r0 * 16 + i) * 16];   // pixel i of the repeat, its 16 channels
            }
            const int reps = pitch / 16 - r0 < 255 ? pitch / 16 - r0 : 255;
            const AscendC::TransDataTo5HDParams tp(false, false, static_cast<uint8_t>(reps), 16, 1);
            AscendC::TransDataTo5HD<T>(dst, src, tp);
        }
        rowsQue.FreeTensor(rows);
        fmapQue.EnQue(fmap);
        fmap = fmapQue.DeQue<T>();
        AscendC::DataCopy(l1, fmap, pixels * 16);
        fmapQue.FreeTensor(fmap);
    }
    // the step's weights from OIHW into L1 as L0B fractals [(g, tap)][nb][16 n][16 c0]: per group
    // and 16 output channels their 16 x (16 x taps) block to the UB (taps innermost), one Gather
    // per tap into a fractal, the step's fractals UB -> L1 at their (g, tap) rows
    __aicore__ inline void WeightFractals(const AscendC::LocalTensor<T>& w1, int cs, int groups, int t0, int nTaps,
                                          int n0, int nt, int nt16) {
        const int nbs = nt16 / 16, block = 16 * taps;  // a cout's 16 channels x taps
        AscendC::LocalTensor<uint32_t> off = offsetBuf.Get<uint32_t>();
        for (int g = 0; g < groups; ++g) {
            for (int nb = 0; nb < nbs; ++nb) {
                AscendC::LocalTensor<T> rows = wRowsQue.AllocTensor<T>();
                for (int i = 0; i < 16; ++i) {
                    const int co = n0 + nb * 16 + i;
                    if (co < n0 + nt) {  // past the input's channels: read on, x's zeros meet them
                        const uint64_t at = (static_cast<uint64_t>(co) * a.c + (cs + g) * C0) * taps;
                        AscendC::DataCopy(rows[i * block], wGm[at], block);
                    } else {
                        AscendC::Duplicate(rows[i * block], static_cast<T>(0), block);
                    }
                }
                wRowsQue.EnQue(rows);
                rows = wRowsQue.DeQue<T>();
                AscendC::LocalTensor<T> frac = wFracQue.AllocTensor<T>();
                for (int t = 0; t < nTaps; ++t) {
                    AscendC::Gather(frac[t * 256], rows, off, static_cast<uint32_t>((t0 + t) * sizeof(T)), 256);
                }
                wRowsQue.FreeTensor(rows);
                wFracQue.EnQue(frac);
                frac = wFracQue.DeQue<T>();
                AscendC::DataCopyParams fp;  // fractal (g * nTaps + t, nb) of the step's [kb][nb]
                fp.blockCount = static_cast<uint16_t>(nTaps);
                fp.blockLen = 16;
                fp.dstStride = static_cast<uint16_t>((nbs - 1) * 16);
                AscendC::DataCopy(w1[(g * nTaps * nbs + nb) * 256], frac, fp);
                wFracQue.FreeTensor(frac);
            }
        }
    }
    // the NZ product in the UB ([nt16/16][m16][16]) back to rows [nt][m16], out as NCHW rows
    __aicore__ inline void RowsOut(const AscendC::LocalTensor<T>& out, int img, int oh0, int n0, int nt, int nt16,
                                   int m, int m16) {
        AscendC::LocalTensor<T> rows = rowsOutQue.AllocTensor<T>();
        for (int g = 0; g < nt16 / 16; ++g) {
            for (int r0 = 0; r0 < m16 / 16; r0 += 255) {
                AscendC::LocalTensor<T> dst[16], src[16];
                for (int i = 0; i < 16; ++i) {
                    src[i] = out[(g * m16 + r0 * 16 + i) * 16];  // pixel i of the repeat, 16 channels
                    dst[i] = rows[(g * 16 + i) * m16 + r0 * 16];  // channel i, 16 pixels
                }
                const int reps = m16 / 16 - r0 < 255 ? m16 / 16 - r0 : 255;
                const AscendC::TransDataTo5HDParams tp(false, false, static_cast<uint8_t>(reps), 1, 16);
                AscendC::TransDataTo5HD<T>(dst, src, tp);
            }
        }
        rowsOutQue.EnQue(rows);
        rows = rowsOutQue.DeQue<T>();
        for (int co = 0; co < nt; ++co) {  // m is whole blocks here (the test's shapes)
            const uint64_t at = (static_cast<uint64_t>(img) * a.cout + n0 + co) * ho * wo +
                                static_cast<uint64_t>(oh0) * wo;
            AscendC::DataCopy(yGm[at], rows[co * m16], m);
        }
        rowsOutQue.FreeTensor(rows);
    }

    ConvArgs a;
    int c1 = 0, ho = 0, wo = 0, n16 = 0, taps = 1, tapStep = 1;
    AscendC::TPipe pipe;
    AscendC::TQue<AscendC::TPosition::A1, 1> slabQue;
    AscendC::TQue<AscendC::TPosition::B1, 1> wQue;
    AscendC::TQue<AscendC::TPosition::A2, 1> aQue;
    AscendC::TQue<AscendC::TPosition::B2, 1> bQue;
    AscendC::TQue<AscendC::TPosition::CO1, 1> cQue;
    AscendC::TQue<AscendC::TPosition::CO2, 1> outQue;
    AscendC::TQue<AscendC::TPosition::VECIN, 1> rowsQue;
    AscendC::TQue<AscendC::TPosition::VECOUT, 1> fmapQue, rowsOutQue, wFracQue;
    AscendC::TQue<AscendC::TPosition::VECIN, 1> wRowsQue;
    AscendC::TBuf<AscendC::TPosition::VECCALC> offsetBuf;
    AscendC::GlobalTensor<T> xGm, wGm, yGm;
};

extern "C" __global__ __aicore__ void conv_load3d_f16(GM_ADDR x, GM_ADDR w, GM_ADDR y) {
    KernelConv<half> op;
    op.Init(x, w, y);
    op.Process();
}
extern "C" __global__ __aicore__ void conv_load3d_f32(GM_ADDR x, GM_ADDR w, GM_ADDR y) {
    KernelConv<float> op;
    op.Init(x, w, y);
    op.Process();
}

// ------------------------------------------------------------------ device-rule cases
static std::string g_case;
static constexpr AscendC::IsResetLoad3dConfig kKeepRegs = {false, false};  // read the registers as left

// one 16 x 16 half feature map of 16 channels in L1, a 3x3 filter; each case breaks one rule
static void RuleCase(GM_ADDR x) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    AscendC::TPipe pipe;
    AscendC::TQue<AscendC::TPosition::A1, 1> l1;
    AscendC::TQue<AscendC::TPosition::A2, 1> l0a;
    AscendC::TQue<AscendC::TPosition::CO1, 1> l0c;
    pipe.InitBuffer(l1, 1, 16 * 16 * 16 * sizeof(half) + 64);
    pipe.InitBuffer(l0a, 1, 32768);
    pipe.InitBuffer(l0c, 1, 1024 * sizeof(float));
    AscendC::GlobalTensor<half> g;
    g.SetGlobalBuffer((__gm__ half*)x, 16 * 16 * 16);
    AscendC::LocalTensor<half> src = l1.AllocTensor<half>();
    AscendC::DataCopy(src, g, 16 * 16 * 16);
    AscendC::LocalTensor<half> dst = l0a.AllocTensor<half>();
    AscendC::LoadData3DParamsV2<half> p;
    p.l1H = 16;
    p.l1W = 16;
    p.channelSize = 16;
    p.kExtension = 144;
    p.mExtension = 64;
    p.filterW = p.filterH = 3;
    if (g_case == "channel_small") p.channelSize = 8;
    if (g_case == "channel_odd") p.channelSize = 18;
    if (g_case == "m_align") p.mExtension = 40;
    if (g_case == "k_align") p.kStartPt = 8;
    if (g_case == "k_range") p.kStartPt = 16, p.kExtension = 144;
    if (g_case == "stride") p.strideW = 64;
    if (g_case == "filter_span") p.filterW = 9, p.dilationFilterW = 3;
    if (g_case == "src_align") src = src[8];
    if (g_case == "dst_align") dst = dst[16];
    if (g_case == "src_bounds") p.l1H = 17;
    if (g_case == "transpose") p.enTranspose = true;
    if (g_case == "no_fmatrix") {
        AscendC::LoadData<half, kKeepRegs>(dst, src, p);
        return;
    }
    if (g_case == "fixpipe_310p" || g_case == "fixpipe_quant" || g_case == "fixpipe_nz") {
        AscendC::LocalTensor<float> c = l0c.AllocTensor<float>();
        AscendC::GlobalTensor<half> out;
        out.SetGlobalBuffer((__gm__ half*)x, 16 * 16 * 16);
        AscendC::FixpipeParamsV220 fp;
        fp.mSize = 16;
        fp.nSize = g_case == "fixpipe_nz" ? 24 : 16;
        fp.srcStride = 16;
        fp.dstStride = 16;
        fp.quantPre = g_case == "fixpipe_quant" ? QuantMode_t::NoQuant : QuantMode_t::F322F16;
        if (g_case == "fixpipe_nz") {
            AscendC::Fixpipe<half, float, AscendC::CFG_NZ>(out, c, fp);
        } else {
            AscendC::Fixpipe(out, c, fp);
        }
        return;
    }
    if (g_case == "l0c_to_ub_910b") {
        AscendC::LocalTensor<float> c = l0c.AllocTensor<float>();
        AscendC::DataCopyParams cp;
        cp.blockCount = 1;
        cp.blockLen = 1;
        AscendC::DataCopyEnhancedParams e;
        e.blockMode = AscendC::BlockMode::BLOCK_MODE_MATRIX;
        AscendC::DataCopy(src, c, cp, e);
        return;
    }
    AscendC::LoadData(dst, src, p);
    l1.FreeTensor(src);
    l0a.FreeTensor(dst);
}
extern "C" __global__ __aicore__ void load3d_rules(GM_ADDR x) { RuleCase(x); }

// ------------------------------------------------------------------ host

static int RunRule(const std::string& which) {
    g_case = which;
    uint8_t* x = (uint8_t*)AscendC::GmAlloc(16 * 16 * 16 * sizeof(half));
    std::memset(x, 0, 16 * 16 * 16 * sizeof(half));
    AscendC::SetKernelMode(KernelMode::AIC_MODE);
    try {
        ICPU_RUN_KF(load3d_rules, 1, x);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    PrintStats();
    AscendC::GmFree(x);
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 3 && std::string(argv[1]) == "rule") return RunRule(argv[2]);
    if (argc != 27 || std::string(argv[1]) != "conv") {
        std::fprintf(stderr, "usage: %s conv <f16|f32> N C H W Cout kh kw sh sw dh dw padT padB padL padR rows c1Step "
                             "nTile kTaps blocks relu nz nchw dir | rule CASE\n", argv[0]);
        return 2;
    }
    const std::string dtype = argv[2], dir = argv[26];
    int v[23];
    for (int i = 0; i < 23; ++i) v[i] = std::atoi(argv[3 + i]);
    ConvArgs& a = g_args;
    a = ConvArgs{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13],
                 v[14], v[15], v[16], v[17], v[18], v[19], v[20], v[21] != 0, v[22] != 0};
    const size_t elem = dtype == "f32" ? 4 : 2, c0 = 32 / elem;
    const size_t c1 = (a.c + c0 - 1) / c0, n16 = (a.cout + 15) / 16 * 16;
    // NCHW rows are read in whole 32-byte blocks: the last plane's may pass its end
    const size_t xBytes = (a.nchw ? a.n * a.c * a.h * a.w + 16 : a.n * c1 * a.h * a.w * c0) * elem;
    const size_t wBytes = (a.nchw ? a.cout * a.c * a.kh * a.kw + 16 * a.kh * a.kw : c1 * a.kh * a.kw * c0 * n16) * elem;
    const size_t yBytes = static_cast<size_t>(a.n) * n16 * a.Ho() * a.Wo() * elem;
    uint8_t* x = (uint8_t*)AscendC::GmAlloc(xBytes);
    uint8_t* w = (uint8_t*)AscendC::GmAlloc(wBytes);
    uint8_t* y = (uint8_t*)AscendC::GmAlloc(yBytes);
    std::memset(y, 0, yBytes);
    if (!ReadFile(dir + "/x.bin", x, xBytes) || !ReadFile(dir + "/w.bin", w, wBytes)) return 2;
    AscendC::SetKernelMode(KernelMode::AIC_MODE);
    try {
        if (dtype == "f32") {
            ICPU_RUN_KF(conv_load3d_f32, a.blocks, x, w, y);
        } else {
            ICPU_RUN_KF(conv_load3d_f16, a.blocks, x, w, y);
        }
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    PrintStats();
    WriteFile(dir + "/y.bin", y, yBytes);
    AscendC::GmFree(x);
    AscendC::GmFree(w);
    AscendC::GmFree(y);
    return 0;
}
