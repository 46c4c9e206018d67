/* ascendc_emu/load3d.h: the cube's own img2col path, Load3D v2 (LoadData with LoadData3DParamsV2
 * from a feature map in L1 into L0A or L0B), with the FMATRIX and padding registers it reads
 * (SetFmatrix, SetLoadDataPaddingValue). Included by cube.h.
 *
 * The model (CANN's img2colv2_cbuf_to_ca / _cb, as the asc-devkit headers and vendor convs use it):
 *   feature map in L1, 5HD rows: element (c1, h, w, c0) at ((c1 * l1H + h) * l1W + w) * C0 + c0,
 *     C1 = channelSize / C0 groups of C0 = 32 B / sizeof(T) channels;
 *   the image matrix X (M x K): M = Ho * Wo output positions, m = oh * Wo + ow, with
 *     Wo = (l1W + padL + padR - dilationW * (filterW - 1) - 1) / strideW + 1 (Ho likewise);
 *     K = C1 * filterH * filterW * C0, k = ((c1 * filterH + ky) * filterW + kx) * C0 + c0;
 *     X[m, k] = fmap(c1, oh * strideH - padT + ky * dilationH, ow * strideW - padL + kx * dilationW,
 *     c0), and padValue where that point is outside the l1H x l1W rows (padding, or a row the L1
 *     slab does not hold: rows past Ho * Wo, the tail of an mExtension rounded up to 16, read so);
 *   LoadData copies X[mStartPt .. + mExtension, kStartPt .. + kExtension]:
 *     into L0A (A2) as the left operand, zZ (cube.h): fractal (i / 16, j / C0) at
 *     (i / 16) * (kExtension / C0) + j / C0, 16 rows of C0 inside;
 *     into L0B (B2) as the right operand B = X (B's K = X's M, B's N = X's K), zN (cube.h):
 *     fractal (i / 16, j / 16) at (i / 16) * (kExtension / 16) + j / 16, 16 N-rows of 16 K-values
 *     inside (2-byte types; the matmul API loads a non-transposed B this way, as a 1-row image).
 *   padList is {left, right, top, bottom}.
 * Device rules checked (dav_c220 = 910B/A3, dav_m200 = 310P; asc-devkit kernel_operator_mm_check.h):
 *   src in L1 (A1/B1/C1/TSCM), 32-byte aligned; dst in A2/B2, 512-byte aligned; the cube reachable (AIC);
 *   types: 310P half only (int8/int4 too on the device, not emulated), and no FMATRIX_RIGHT;
 *   910B half / bfloat16_t / float into L0A, half / bfloat16_t into L0B (float too on the device,
 *   not emulated); l1H, l1W in [1, 32767]; strides in [1, 63]; filter and dilation in [1, 255];
 *   kExtension and kStartPt multiples of C0; for half, mExtension and mStartPt multiples of 16;
 *   channelSize a whole number of C0 groups (the device also packs 4 or 8 half channels, or 4
 *   float ones: "small channel", not emulated: an error says so); the K range inside X's K;
 *   an output image of at least one position; the feature map inside src.
 * Not emulated: enTranspose, enSmallK, filterSizeW/H (filters over 255), fMatrixCtrl (the right
 * FMATRIX), Load3D v1 (LoadData3DParamsV1), LoadData3DParamsV2Pro, int8/int4 types.
 */
#ifndef ASCENDC_EMU_LOAD3D_H
#define ASCENDC_EMU_LOAD3D_H

#include "vector_trans5hd.h"

namespace AscendC {

constexpr int32_t PAD_SIZE = 4;

enum class FmatrixMode : uint8_t { FMATRIX_LEFT = 0, FMATRIX_RIGHT = 1 };

/* Whether LoadData sets the FMATRIX (l1H, l1W, padList) and padding registers from its params
 * (the default) or reads what SetFmatrix / SetLoadDataPaddingValue wrote before. */
struct IsResetLoad3dConfig {
    constexpr IsResetLoad3dConfig(const bool isSetFMatrixIn, const bool isSetPaddingIn)
        : isSetFMatrix(isSetFMatrixIn), isSetPadding(isSetPaddingIn) {}
    bool isSetFMatrix = true;
    bool isSetPadding = true;
};
constexpr IsResetLoad3dConfig IS_RESER_LOAD3D_DEFAULT_CONFIG = {true, true};

template <typename T>
struct LoadData3DParamsV2 {
    LoadData3DParamsV2() {}
    LoadData3DParamsV2(const uint8_t padListIn[PAD_SIZE], uint16_t l1HIn, uint16_t l1WIn, uint16_t channelSizeIn,
                       uint16_t kExtensionIn, uint16_t mExtensionIn, uint16_t kStartPtIn, uint16_t mStartPtIn,
                       uint8_t strideWIn, uint8_t strideHIn, uint8_t filterWIn, uint8_t filterHIn,
                       uint8_t dilationFilterWIn, uint8_t dilationFilterHIn, bool enTransposeIn, bool enSmallKIn,
                       T padValueIn)
        : l1H(l1HIn), l1W(l1WIn), channelSize(channelSizeIn), kExtension(kExtensionIn),
          mExtension(mExtensionIn), kStartPt(kStartPtIn), mStartPt(mStartPtIn), strideW(strideWIn),
          strideH(strideHIn), filterW(filterWIn), filterH(filterHIn), dilationFilterW(dilationFilterWIn),
          dilationFilterH(dilationFilterHIn), enTranspose(enTransposeIn), enSmallK(enSmallKIn),
          padValue(padValueIn) {
        for (int32_t i = 0; i < PAD_SIZE; ++i) padList[i] = padListIn[i];
    }
    uint8_t padList[PAD_SIZE] = {0, 0, 0, 0};  // left, right, top, bottom
    uint16_t l1H = 0;          // feature-map rows in L1
    uint16_t l1W = 0;          // feature-map columns
    uint16_t channelSize = 0;  // channels in L1 (C1 * C0)
    uint16_t kExtension = 0;   // K columns of X copied
    uint16_t mExtension = 0;   // M rows of X copied
    uint16_t kStartPt = 0;
    uint16_t mStartPt = 0;
    uint8_t strideW = 1;
    uint8_t strideH = 1;
    uint8_t filterW = 1;
    uint8_t filterH = 1;
    uint8_t dilationFilterW = 1;
    uint8_t dilationFilterH = 1;
    bool enTranspose = false;
    bool enSmallK = false;
    T padValue = T(0);
    bool filterSizeW = false;
    bool filterSizeH = false;
    bool fMatrixCtrl = false;
};

namespace emu {

/* The core's Load3D registers. They belong to the block that wrote them: a block that reads
 * them without writing them first reads what another kernel left on the device. */
struct Load3dRegs {
    const BlockCtx* owner = nullptr;
    uint64_t generation = 0;
    bool fmatrix_set = false;
    uint16_t l1H = 0, l1W = 0;
    uint8_t pad[PAD_SIZE] = {0, 0, 0, 0};
    bool padding_set = false;
    uint32_t padding_bits = 0;
};
inline Load3dRegs& Load3dRegsOf() {
    static thread_local Load3dRegs regs;
    BlockCtx& ctx = Ctx();
    // a BlockCtx lives for one block; its arena pointer tells a reused address apart
    const uint64_t gen = reinterpret_cast<uintptr_t>(ctx.arena[static_cast<int>(Mem::L1)]);
    if (regs.owner != &ctx || regs.generation != gen) {
        regs = Load3dRegs();
        regs.owner = &ctx;
        regs.generation = gen;
    }
    return regs;
}

template <typename T>
inline uint32_t PadBits(T v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T) < sizeof(bits) ? sizeof(T) : sizeof(bits));
    return bits;
}
template <typename T>
inline T PadFromBits(uint32_t bits) {
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
}

inline void CheckRange(const char* api, const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) Fail(api, Cat(name, " = ", v, " is outside [", lo, ", ", hi, "]"));
}

}  // namespace emu

/* FMATRIX_LEFT feeds Load3D into L0A (and L0B without fMatrixCtrl); the right FMATRIX exists
 * on 910B only and is read with fMatrixCtrl, which the emulator does not take. */
inline void SetFmatrix(uint16_t l1H, uint16_t l1W, const uint8_t padList[4], const FmatrixMode& fmatrixMode) {
    const char* api = "SetFmatrix";
    emu::RequireCube(api);
    emu::CheckRange(api, "l1H", l1H, 1, 32767);
    emu::CheckRange(api, "l1W", l1W, 1, 32767);
    if (fmatrixMode == FmatrixMode::FMATRIX_RIGHT) {
        if (emu::ActiveSoc().npu_arch != 2201) {
            emu::Fail(api, emu::Cat("fmatrixMode = FMATRIX_RIGHT is not supported on ", emu::ActiveSoc().name,
                                    " (dav_m200 has one FMATRIX)"));
        }
        emu::Fail(api, "FMATRIX_RIGHT (read by Load3D with fMatrixCtrl) is not emulated");
    }
    emu::Load3dRegs& r = emu::Load3dRegsOf();
    r.fmatrix_set = true;
    r.l1H = l1H;
    r.l1W = l1W;
    for (int i = 0; i < PAD_SIZE; ++i) r.pad[i] = padList[i];
}

/* The value Load3D writes for a point in the padding (32-bit types: 910B only). */
template <typename T>
inline void SetLoadDataPaddingValue(const T padValue) {
    const char* api = "SetLoadDataPaddingValue";
    emu::RequireCube(api);
    if (sizeof(T) == 4 && emu::ActiveSoc().npu_arch == 2002) {
        emu::Fail(api, emu::Cat("a ", emu::TypeName<T>(), " padding value is not supported on ",
                                emu::ActiveSoc().name, " (dav_m200 takes 8- and 16-bit values)"));
    }
    emu::Load3dRegs& r = emu::Load3dRegsOf();
    r.padding_set = true;
    r.padding_bits = emu::PadBits(padValue);
}

template <typename T, const IsResetLoad3dConfig& defaultConfig = IS_RESER_LOAD3D_DEFAULT_CONFIG, typename U = T>
inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData3DParamsV2<U>& p) {
    static_assert(std::is_same<T, U>::value, "LoadData(LoadData3DParamsV2): tensor and params types differ");
    const char* api = "LoadData(LoadData3DParamsV2)";
    emu::RequireCube(api);
    const emu::SocProfile& soc = emu::ActiveSoc();
    constexpr int64_t c0 = emu::C0Of<T>();
    const bool toB = dst.buf_ != nullptr && dst.buf_->pos == TPosition::B2;
    const bool isHalf = std::is_same<T, half>::value;
    if (soc.npu_arch == 2002 && !isHalf) {
        emu::Fail(api, emu::Cat(emu::TypeName<T>(), " is not supported on ", soc.name,
                                " (dav_m200 Load3D v2 takes half, int8_t, uint8_t, int4b_t)"));
    }
    if (soc.npu_arch != 2002 && soc.npu_arch != 2201) {
        emu::Fail(api, emu::Cat("Load3D v2 is not supported on ", soc.name, " (", soc.npu_arch,
                                "): use LoadData3DParamsV1 there (not emulated)"));
    }
    if (toB && sizeof(T) != 2) {
        emu::Fail(api, emu::Cat("Load3D into L0B with ", emu::TypeName<T>(),
                                " is not emulated (2-byte types only: their fractals are square)"));
    }
    if (p.enTranspose || p.enSmallK || p.filterSizeW || p.filterSizeH || p.fMatrixCtrl) {
        emu::Fail(api, "enTranspose / enSmallK / filterSizeW / filterSizeH / fMatrixCtrl are not emulated");
    }
    emu::Load3dRegs& regs = emu::Load3dRegsOf();
    if (defaultConfig.isSetFMatrix) {
        SetFmatrix(p.l1H, p.l1W, p.padList, FmatrixMode::FMATRIX_LEFT);
    } else if (!regs.fmatrix_set) {
        emu::Fail(api, "isSetFMatrix = false but this block never called SetFmatrix: the FMATRIX register "
                       "holds what another kernel left");
    }
    if (defaultConfig.isSetPadding) {
        SetLoadDataPaddingValue<T>(p.padValue);
    } else if (!regs.padding_set) {
        emu::Fail(api, "isSetPadding = false but this block never called SetLoadDataPaddingValue: the padding "
                       "register holds what another kernel left");
    }
    const int64_t H = regs.l1H, W = regs.l1W;
    const int64_t padL = regs.pad[0], padR = regs.pad[1], padT = regs.pad[2], padB = regs.pad[3];
    const T padValue = emu::PadFromBits<T>(regs.padding_bits);
    emu::CheckRange(api, "strideW", p.strideW, 1, 63);
    emu::CheckRange(api, "strideH", p.strideH, 1, 63);
    emu::CheckRange(api, "filterW", p.filterW, 1, 255);
    emu::CheckRange(api, "filterH", p.filterH, 1, 255);
    emu::CheckRange(api, "dilationFilterW", p.dilationFilterW, 1, 255);
    emu::CheckRange(api, "dilationFilterH", p.dilationFilterH, 1, 255);
    if (p.channelSize == 0 || p.channelSize % c0 != 0) {
        const bool small = p.channelSize != 0 && ((isHalf && (p.channelSize % 16 == 4 || p.channelSize % 16 == 8)) ||
                                                  (sizeof(T) == 4 && p.channelSize % 8 == 4));
        emu::Fail(api, emu::Cat("channelSize ", p.channelSize, small ?
                                " packs a part of a C0 group (the device's small-channel mode), not emulated: "
                                "pad the channels to a multiple of " :
                                " must be a positive multiple of ", c0, " for ", emu::TypeName<T>()));
    }
    if (p.kExtension == 0 || p.kExtension % c0 != 0 || p.kStartPt % c0 != 0) {
        emu::Fail(api, emu::Cat("kExtension ", p.kExtension, ", kStartPt ", p.kStartPt, ": each must be a multiple of ",
                                c0, " for ", emu::TypeName<T>(), " (kExtension at least ", c0, ")"));
    }
    if (p.mExtension == 0 || (isHalf && (p.mExtension % 16 != 0 || p.mStartPt % 16 != 0))) {
        emu::Fail(api, emu::Cat("mExtension ", p.mExtension, ", mStartPt ", p.mStartPt,
                                ": for half each must be a multiple of 16 (mExtension at least 16)"));
    }
    if (toB && (p.mExtension % 16 != 0 || p.kExtension % 16 != 0)) {
        emu::Fail(api, emu::Cat("mExtension ", p.mExtension, ", kExtension ", p.kExtension,
                                ": into L0B each is a whole number of 16 x 16 fractals"));
    }
    const int64_t spanW = int64_t(p.dilationFilterW) * (p.filterW - 1) + 1;
    const int64_t spanH = int64_t(p.dilationFilterH) * (p.filterH - 1) + 1;
    if (W + padL + padR < spanW || H + padT + padB < spanH) {
        emu::Fail(api, emu::Cat("the ", p.filterH, "x", p.filterW, " filter (dilation ", p.dilationFilterH, "x",
                                p.dilationFilterW, ") spans more than the padded ", H, "x", W, " feature map "
                                "(pads top ", padT, ", bottom ", padB, ", left ", padL, ", right ", padR, ")"));
    }
    const int64_t wo = (W + padL + padR - spanW) / p.strideW + 1;
    const int64_t c1 = p.channelSize / c0;
    const int64_t kAll = c1 * p.filterH * p.filterW * c0;
    if (int64_t(p.kStartPt) + p.kExtension > kAll) {
        emu::Fail(api, emu::Cat("K columns [", p.kStartPt, ", ", int64_t(p.kStartPt) + p.kExtension,
                                ") pass the image matrix's K = ", c1, " x ", p.filterH, " x ", p.filterW, " x ",
                                c0, " = ", kAll));
    }
    const int64_t fmapElems = c1 * H * W * c0;
    const T* s = reinterpret_cast<const T*>(emu::CubeOperand(
        src, static_cast<uint64_t>(fmapElems), api, "src", emu::Access::MTE_OUT,
        {TPosition::A1, TPosition::B1, TPosition::C1, TPosition::TSCM}, 32));
    const int64_t m = p.mExtension, k = p.kExtension;
    T* d = reinterpret_cast<T*>(emu::CubeOperand(dst, static_cast<uint64_t>(m * k), api, "dst", emu::Access::MTE_IN,
                                                 {TPosition::A2, TPosition::B2}, 512));
    const int64_t kFrac = toB ? 16 : c0, kFracs = k / kFrac;
    for (int64_t i = 0; i < m; ++i) {
        const int64_t pos = p.mStartPt + i, oh = pos / wo, ow = pos % wo;
        for (int64_t j = 0; j < k; ++j) {
            const int64_t kk = p.kStartPt + j, cc0 = kk % c0, tap = kk / c0;
            const int64_t kx = tap % p.filterW, ky = tap / p.filterW % p.filterH, cc1 = tap / p.filterW / p.filterH;
            const int64_t ih = oh * p.strideH - padT + ky * p.dilationFilterH;
            const int64_t iw = ow * p.strideW - padL + kx * p.dilationFilterW;
            const T v = (ih < 0 || ih >= H || iw < 0 || iw >= W) ? padValue :
                        s[((cc1 * H + ih) * W + iw) * c0 + cc0];
            if (!toB) {
                d[((i / 16) * kFracs + j / c0) * 16 * c0 + (i % 16) * c0 + j % c0] = v;
            } else {  // B = X: fractal (K = i, N = j), 16 N-rows of 16 K-values
                d[((i / 16) * kFracs + j / 16) * 256 + (j % 16) * 16 + i % 16] = v;
            }
        }
    }
}

}  // namespace AscendC

#endif  // ASCENDC_EMU_LOAD3D_H
