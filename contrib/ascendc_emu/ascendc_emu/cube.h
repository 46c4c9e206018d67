/* ascendc_emu/cube.h: the cube unit's basic API (DataCopy ND->NZ into L1, LoadData 2D into
 * L0A/L0B, Load3D img2col from a 5HD feature map (load3d.h), Mmad into L0C, Fixpipe L0C->GM),
 * the system workspace, and the helpers the high-level
 * Matmul API (matmul.h, included by lib/matmul_intf.h) shares: the cube-mode rule and the MAC
 * counter.
 *
 * Layouts (the ones the device uses; see README "Cube"): a fractal is 512 B = 16 rows x C0
 * elements, C0 = 32 B / sizeof(T) (16 for half/bfloat16_t, 8 for float).
 *   L1 (A1/B1, NZ):  element (r, c) at (c / C0) * dstNzC0Stride * C0 + r * dstNzNStride * C0 + c % C0
 *   L0A (A2, zZ):    fractal (r / 16, c / C0) at index (r / 16) * ceil(k / C0) + c / C0, row-major inside
 *   L0B (B2, zN):    fractal (k / C0, n / 16) at index (k / C0) * ceil(n / 16) + n / 16, each fractal
 *                    stores 16 n-rows of C0 k-values (the transposed L1 fractal: LoadData ifTranspose)
 *   L0C (CO1, NZ):   element (r, c) at (c / 16) * ceil16(m) * 16 + r * 16 + c % 16, float accumulators
 * Mmad computes exactly m x n x k in float (fp16/bf16 products are exact in float) and counts
 * ceil16(m) * ceil16(n) * ceil(k / C0) * C0 MACs, the padded fractals the cube really issues.
 */
#ifndef ASCENDC_EMU_CUBE_H
#define ASCENDC_EMU_CUBE_H

#include "data_copy.h"

/* Padding modes of the enhanced DataCopy (compiler-builtin enum on the device). */
enum pad_t : uint8_t { PAD_NONE = 0, PAD_MODE1, PAD_MODE2, PAD_MODE3, PAD_MODE4, PAD_MODE5, PAD_MODE6,
                       PAD_MODE7, PAD_MODE8 };
/* Quantisation modes of Fixpipe (compiler-builtin enum on the device). */
enum QuantMode_t : uint8_t {
    NoQuant = 0, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE, REQ8, VREQ8,
};

namespace AscendC {

constexpr uint32_t BLOCK_CUBE = 16;          // rows (and fp16 columns) of one fractal
constexpr uint32_t CUBE_MAX_SIZE = 256;      // elements of one 16 x 16 fractal
constexpr uint32_t DEFAULT_C0_SIZE = 32;     // bytes of one fractal row
constexpr uint32_t B32_C0SIZE = 8;           // float elements of one fractal row

enum class BlockMode : uint8_t { BLOCK_MODE_NORMAL = 0, BLOCK_MODE_MATRIX, BLOCK_MODE_VECTOR,
                                BLOCK_MODE_SMALL_CHANNEL, BLOCK_MODE_DEPTHWISE };
enum class DeqScale : uint8_t { DEQ_NONE = 0, DEQ, VDEQ, DEQ8, VDEQ8, DEQ16, VDEQ16 };
struct DataCopyEnhancedParams {
    DataCopyEnhancedParams() {}
    DataCopyEnhancedParams(BlockMode blockModeIn, DeqScale deqScaleIn, uint64_t deqValueIn, uint8_t sidStoreModeIn,
                           bool isReluIn, pad_t padModeIn, uint64_t padValueIn)
        : blockMode(blockModeIn), deqScale(deqScaleIn), deqValue(deqValueIn), sidStoreMode(sidStoreModeIn),
          isRelu(isReluIn), padMode(padModeIn), padValue(padValueIn) {}
    BlockMode blockMode = BlockMode::BLOCK_MODE_NORMAL;
    DeqScale deqScale = DeqScale::DEQ_NONE;
    uint64_t deqValue = 0;
    uint8_t sidStoreMode = 0;
    bool isRelu = false;
    pad_t padMode = pad_t::PAD_NONE;
    uint64_t padValue = 0;
    uint64_t deqTensorAddr = 0;
};

namespace emu {

inline int64_t CeilTo(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
template <typename T>
constexpr int64_t C0Of() { return static_cast<int64_t>(DEFAULT_C0_SIZE / sizeof(T)); }

/* MACs of one cube instruction over m x n x k: fractals are 16 (M) x 16 (N) x C0 (K), so each
 * dimension is padded up to its fractal edge (C0 = 16 for half/bf16, 8 for float). */
inline int64_t CubeMacs(int64_t m, int64_t n, int64_t k, int64_t c0) {
    return CeilTo(m, BLOCK_CUBE) * CeilTo(n, BLOCK_CUBE) * CeilTo(k, c0);
}
inline void CountCube(int64_t macs) { Ctx().c.cube_macs += macs; }

/* The cube exists on AIC cores only: a 2201 (910B/A3) kernel launched in AIV_MODE cannot reach
 * it. Coupled chips (910A, 310P) have one AI core type, so any mode works there. */
inline void RequireCube(const char* api) {
    if (ActiveSoc().npu_arch == 2201 &&
        Global().kernel_mode.load() == static_cast<int>(KernelMode::AIV_MODE)) {
        Fail(api, Cat("the cube unit is not reachable from an AIV_MODE kernel on ", ActiveSoc().name,
                      " (call AscendC::SetKernelMode(KernelMode::MIX_MODE) or AIC_MODE on the host)"));
    }
}

/* Operand checks shared by the basic API: position, device alignment of the start address, and
 * the usual LocalTensor checks (state, bounds) through CheckLocal. */
template <typename T>
inline uint8_t* CubeOperand(const LocalTensor<T>& t, uint64_t elems, const char* api, const char* role,
                            Access kind, std::initializer_list<TPosition> allowed, uint32_t align) {
    if (t.buf_ == nullptr) Fail(api, Cat(role, " is an uninitialised LocalTensor (no buffer behind it)"));
    bool ok = false;
    for (TPosition p : allowed) ok = ok || t.buf_->pos == p;
    if (!ok) {
        std::string names;
        for (TPosition p : allowed) names += (names.empty() ? "" : "/") + std::string(PosName(p));
        Fail(api, Cat(role, " is a ", PosName(t.buf_->pos), " tensor; ", api, " takes ", names, " here"));
    }
    uint64_t at = t.buf_->offset + t.byteOff_;
    if (at % align != 0) {
        Fail(api, Cat(role, " starts at byte ", at, " of ", MemName(t.buf_->mem), ", not ", align,
                      "-byte aligned (", MemName(t.buf_->mem), " operands need ", align, " B)"));
    }
    return CheckLocal(t.buf_, t.gen_, t.byteOff_, elems * sizeof(T), api, role, kind);
}

template <typename T>
inline float CubeIn(T v) { return static_cast<float>(v); }
template <typename T>
inline T CubeOut(float v) { return static_cast<T>(v); }

}  // namespace emu

/* ---------------- system workspace ---------------- */
/* The Matmul API of a MIX kernel passes tiles between AIC and AIV through this GM area. The
 * emulator needs none: without SetSysWorkspace it returns a placeholder that is never touched. */
inline void SetSysWorkspace(GM_ADDR workspace) { emu::Ctx().sys_workspace = workspace; }
inline GM_ADDR GetSysWorkSpacePtr() {
    alignas(64) static uint8_t placeholder[64];
    uint8_t* w = emu::Ctx().sys_workspace;
    return w != nullptr ? w : placeholder;
}
namespace emu {
/* The system part of a launch's workspace in the emulator's launchers: its Matmul needs none
 * (on the device it is PlatformAscendC::GetLibApiWorkSpaceSize(), 16 MiB in CANN's samples). */
constexpr size_t kSysWorkspaceBytes = 1024;
}  // namespace emu
/* The kernel's own part of the workspace, after the system part (as on the device). */
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) {
    return workspace + emu::kSysWorkspaceBytes;
}

/* ---------------- GM -> L1 with ND -> NZ conversion ---------------- */
struct Nd2NzParams {
    Nd2NzParams() {}
    Nd2NzParams(uint16_t ndNumIn, uint16_t nValueIn, uint16_t dValueIn, uint16_t srcNdMatrixStrideIn,
                uint16_t srcDValueIn, uint16_t dstNzC0StrideIn, uint16_t dstNzNStrideIn,
                uint16_t dstNzMatrixStrideIn)
        : ndNum(ndNumIn), nValue(nValueIn), dValue(dValueIn), srcNdMatrixStride(srcNdMatrixStrideIn),
          srcDValue(srcDValueIn), dstNzC0Stride(dstNzC0StrideIn), dstNzNStride(dstNzNStrideIn),
          dstNzMatrixStride(dstNzMatrixStrideIn) {}
    uint16_t ndNum = 1;
    uint16_t nValue = 0;             // rows
    uint16_t dValue = 0;             // columns (elements)
    uint16_t srcNdMatrixStride = 0;  // elements between matrices in GM
    uint16_t srcDValue = 0;          // GM row stride (elements)
    uint16_t dstNzC0Stride = 0;      // 32-byte rows between C0 column groups in L1
    uint16_t dstNzNStride = 1;       // 32-byte rows between source rows in L1
    uint16_t dstNzMatrixStride = 0;  // elements between matrices in L1
};

/* Rows are copied as they are; the C0 padding of the last column group is zero-filled (padding
 * rows are not written: Mmad reads only m x k / k x n, so they never matter). */
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p) {
    const char* api = "DataCopy(GM->L1, Nd2NzParams)";
    emu::Ctx().c.datacopy_calls++;
    const int64_t c0 = emu::C0Of<T>();
    if (p.ndNum < 1 || p.nValue < 1 || p.dValue < 1 || p.srcDValue < p.dValue || p.dstNzNStride < 1 ||
        p.dstNzC0Stride < p.nValue * p.dstNzNStride) {
        emu::Fail(api, emu::Cat("ndNum ", p.ndNum, ", nValue ", p.nValue, ", dValue ", p.dValue,
                                ", srcDValue ", p.srcDValue, ", dstNzC0Stride ", p.dstNzC0Stride,
                                ", dstNzNStride ", p.dstNzNStride,
                                ": need ndNum, nValue, dValue >= 1, srcDValue >= dValue and "
                                "dstNzC0Stride >= nValue * dstNzNStride"));
    }
    const int64_t groups = (p.dValue + c0 - 1) / c0;
    const int64_t last = int64_t(p.ndNum - 1) * p.dstNzMatrixStride + (groups - 1) * p.dstNzC0Stride * c0 +
                         int64_t(p.nValue - 1) * p.dstNzNStride * c0 + c0;
    T* d = reinterpret_cast<T*>(emu::CubeOperand(dst, static_cast<uint64_t>(last), api, "dst",
                                                 emu::Access::MTE_IN, {TPosition::A1, TPosition::B1,
                                                 TPosition::C1, TPosition::TSCM}, 32));
    const uint64_t srcSpan = (uint64_t(p.ndNum - 1) * p.srcNdMatrixStride +
                              uint64_t(p.nValue - 1) * p.srcDValue + p.dValue) * sizeof(T);
    const T* s = reinterpret_cast<const T*>(src.Check(0, srcSpan, api, "src"));
    for (int64_t mtx = 0; mtx < p.ndNum; ++mtx) {
        const T* sm = s + mtx * p.srcNdMatrixStride;
        T* dm = d + mtx * p.dstNzMatrixStride;
        for (int64_t r = 0; r < p.nValue; ++r) {
            emu::GmAccessHook(sm + r * p.srcDValue, uint64_t(p.dValue) * sizeof(T), false, api);
            for (int64_t c = 0; c < groups * c0; ++c) {
                T v = c < p.dValue ? sm[r * p.srcDValue + c] : emu::CubeOut<T>(0.0f);
                dm[(c / c0) * p.dstNzC0Stride * c0 + r * p.dstNzNStride * c0 + c % c0] = v;
            }
        }
    }
    emu::Ctx().c.gm_read_bytes += int64_t(p.ndNum) * p.nValue * p.dValue * static_cast<int64_t>(sizeof(T));
}

/* ---------------- L1 -> L0A / L0B ---------------- */
struct LoadData2DParams {
    LoadData2DParams() {}
    LoadData2DParams(uint16_t startIndexIn, uint8_t repeatTimesIn, uint16_t srcStrideIn, uint8_t sidIn,
                     uint16_t dstGapIn, bool ifTransposeIn, uint8_t addrModeIn)
        : startIndex(startIndexIn), repeatTimes(repeatTimesIn), srcStride(srcStrideIn), sid(sidIn),
          dstGap(dstGapIn), ifTranspose(ifTransposeIn), addrMode(addrModeIn) {}
    uint16_t startIndex = 0;   // first source fractal
    uint8_t repeatTimes = 0;   // fractals moved
    uint16_t srcStride = 0;    // source fractals between repeats
    uint8_t sid = 0;
    uint16_t dstGap = 0;       // destination fractals skipped between repeats
    bool ifTranspose = false;  // transpose each 16 x 16 fractal (2-byte types)
    uint8_t addrMode = 0;
};

/* Moves repeatTimes 512-byte fractals: destination fractal r (at r * (1 + dstGap)) takes source
 * fractal startIndex + r * srcStride, transposed when ifTranspose. */
template <typename T>
inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p) {
    const char* api = "LoadData(LoadData2DParams)";
    constexpr int64_t frac = 512 / sizeof(T), c0 = emu::C0Of<T>();
    if (p.ifTranspose && sizeof(T) != 2) {
        emu::Fail(api, emu::Cat("ifTranspose needs a 2-byte type (", emu::TypeName<T>(),
                                " fractals are not square; use LoadDataWithTranspose on the device)"));
    }
    if (p.repeatTimes == 0) return;
    const int64_t n = p.repeatTimes;
    const int64_t srcLast = (p.startIndex + (n - 1) * int64_t(p.srcStride) + 1) * frac;
    const int64_t dstLast = ((n - 1) * (1 + int64_t(p.dstGap)) + 1) * frac;
    const T* s = reinterpret_cast<const T*>(emu::CubeOperand(
        src, static_cast<uint64_t>(srcLast), api, "src", emu::Access::MTE_OUT,
        {TPosition::A1, TPosition::B1, TPosition::C1, TPosition::TSCM}, 32));
    T* d = reinterpret_cast<T*>(emu::CubeOperand(dst, static_cast<uint64_t>(dstLast), api, "dst",
                                                 emu::Access::MTE_IN, {TPosition::A2, TPosition::B2}, 512));
    for (int64_t r = 0; r < n; ++r) {
        const T* sf = s + (p.startIndex + r * int64_t(p.srcStride)) * frac;
        T* df = d + r * (1 + int64_t(p.dstGap)) * frac;
        if (!p.ifTranspose) {
            std::memmove(df, sf, frac * sizeof(T));
        } else {
            T tmp[512 / sizeof(T)];
            for (int64_t i = 0; i < 16; ++i) {
                for (int64_t j = 0; j < c0; ++j) tmp[j * 16 + i] = sf[i * c0 + j];
            }
            std::memcpy(df, tmp, sizeof tmp);
        }
    }
}

/* ---------------- Mmad: L0A x L0B -> L0C ---------------- */
struct MmadParams {
    MmadParams() {}
    MmadParams(uint16_t mIn, uint16_t nIn, uint16_t kIn, bool isBiasIn, int32_t fmOffsetIn,
               bool enSsparseIn, bool enWinogradAIn, bool enWinogradBIn)
        : m(mIn), n(nIn), k(kIn), isBias(isBiasIn), fmOffset(fmOffsetIn), enSsparse(enSsparseIn),
          enWinogradA(enWinogradAIn), enWinogradB(enWinogradBIn) {}
    uint16_t m = 0;
    uint16_t n = 0;
    uint16_t k = 0;
    bool isBias = false;
    int32_t fmOffset = 0;
    bool enSsparse = false;
    bool enWinogradA = false;
    bool enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false;
    bool cmatrixSource = false;
    bool cmatrixInitVal = true;  // true: C = A * B; false: C += A * B (K accumulation)
};

template <typename T, typename U, typename S>
inline void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter,
                 const MmadParams& p) {
    const char* api = "Mmad";
    static_assert(std::is_same<T, float>::value, "Mmad: the emulator supports float L0C only");
    static_assert(std::is_same<U, S>::value, "Mmad: A and B element types differ");
    emu::RequireCube(api);
    if (p.isBias || p.enSsparse || p.enWinogradA || p.enWinogradB || p.fmOffset != 0) {
        emu::Fail(api, "isBias / sparse / winograd / fmOffset are not emulated");
    }
    if (p.m == 0 || p.n == 0 || p.k == 0 || p.m > 4095 || p.n > 4095 || p.k > 4095) {
        emu::Fail(api, emu::Cat("m ", p.m, ", n ", p.n, ", k ", p.k, ": each must be in [1, 4095]"));
    }
    constexpr int64_t c0 = emu::C0Of<U>();
    const int64_t m16 = emu::CeilTo(p.m, 16), n16 = emu::CeilTo(p.n, 16), kc = emu::CeilTo(p.k, c0);
    const int64_t kBlocks = kc / c0, nBlocks = n16 / 16;
    const U* a = reinterpret_cast<const U*>(emu::CubeOperand(
        fm, static_cast<uint64_t>(m16 * kc), api, "fm", emu::Access::MTE_OUT, {TPosition::A2}, 512));
    const S* b = reinterpret_cast<const S*>(emu::CubeOperand(
        filter, static_cast<uint64_t>(kc * n16), api, "filter", emu::Access::MTE_OUT, {TPosition::B2}, 512));
    float* c = reinterpret_cast<float*>(emu::CubeOperand(
        dst, static_cast<uint64_t>(m16 * n16), api, "dst", emu::Access::MTE_IN, {TPosition::CO1}, 64));
    std::vector<float> bt(static_cast<size_t>(p.k * p.n));  // B as k x n row-major
    for (int64_t kk = 0; kk < p.k; ++kk) {
        for (int64_t j = 0; j < p.n; ++j) {
            bt[kk * p.n + j] = emu::CubeIn(b[((kk / c0) * nBlocks + j / 16) * 16 * c0 + (j % 16) * c0 + kk % c0]);
        }
    }
    std::vector<float> row(static_cast<size_t>(p.n));
    for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) row[j] = p.cmatrixInitVal ? 0.0f : c[(j / 16) * m16 * 16 + i * 16 + j % 16];
        for (int64_t kk = 0; kk < p.k; ++kk) {
            const float av = emu::CubeIn(a[((i / 16) * kBlocks + kk / c0) * 16 * c0 + (i % 16) * c0 + kk % c0]);
            const float* bk = &bt[kk * p.n];
            for (int64_t j = 0; j < p.n; ++j) row[j] += av * bk[j];
        }
        for (int64_t j = 0; j < p.n; ++j) c[(j / 16) * m16 * 16 + i * 16 + j % 16] = row[j];
    }
    emu::CountCube(emu::CubeMacs(p.m, p.n, p.k, c0));
}

/* ---------------- L0C -> UB on coupled chips (DataCopy CO1 -> CO2) ---------------- */
/* 310P and 910A have no Fixpipe: the product goes to the UB in its NZ layout (BLOCK_MODE_MATRIX),
 * converted to half (with ReLU when isRelu) on the way, and the vector unit writes it out.
 * blockCount bursts of blockLen 16 x 16 fractals; srcStride / dstStride are the fractals skipped
 * between bursts on each side (the emulator's reading of copy_matrix_cc_to_ubuf). */
template <typename T, typename U>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<U>& src, const DataCopyParams& p,
                     const DataCopyEnhancedParams& e) {
    const char* api = "DataCopy(CO1->CO2, DataCopyEnhancedParams)";
    static_assert(std::is_same<U, float>::value, "DataCopy(CO1->CO2): the emulator supports float L0C only");
    emu::RequireCube(api);
    emu::Ctx().c.datacopy_calls++;
    const emu::SocProfile& soc = emu::ActiveSoc();
    if (soc.npu_arch == 2201) {
        emu::Fail(api, emu::Cat("L0C cannot reach the UB on ", soc.name,
                                " (the AIC has no UB): write the product to GM with Fixpipe"));
    }
    if (e.blockMode != BlockMode::BLOCK_MODE_MATRIX || e.deqScale != DeqScale::DEQ_NONE) {
        emu::Fail(api, "only blockMode = BLOCK_MODE_MATRIX with deqScale = DEQ_NONE is emulated");
    }
    if (!std::is_same<T, half>::value && !std::is_same<T, float>::value) {
        emu::Fail(api, emu::Cat("a ", emu::TypeName<T>(), " destination is not emulated (float or half)"));
    }
    if (e.isRelu && !std::is_same<T, half>::value) {
        emu::Fail(api, "isRelu goes with the float -> half conversion (CRMODE_F32toF16_RELU) only");
    }
    if (p.blockCount == 0 || p.blockLen == 0) return;
    const int64_t n = p.blockCount, len = p.blockLen;
    const int64_t srcFr = (n - 1) * (len + p.srcStride) + len, dstFr = (n - 1) * (len + p.dstStride) + len;
    const float* s = reinterpret_cast<const float*>(emu::CubeOperand(
        src, static_cast<uint64_t>(srcFr * 256), api, "src", emu::Access::MTE_OUT, {TPosition::CO1}, 64));
    T* d = reinterpret_cast<T*>(emu::CubeOperand(dst, static_cast<uint64_t>(dstFr * 256), api, "dst",
                                                 emu::Access::MTE_IN, {TPosition::CO2, TPosition::VECIN,
                                                 TPosition::VECCALC}, 32));
    for (int64_t b = 0; b < n; ++b) {
        const float* sb = s + b * (len + p.srcStride) * 256;
        T* db = d + b * (len + p.dstStride) * 256;
        for (int64_t i = 0; i < len * 256; ++i) db[i] = emu::CubeOut<T>(e.isRelu && sb[i] < 0.0f ? 0.0f : sb[i]);
    }
}

/* ---------------- Fixpipe: L0C -> GM (NZ -> ND) ---------------- */
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
    CO2Layout format;
    bool isToUB;
};
constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ, false};
constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR, false};

struct FixpipeParamsV220 {
    FixpipeParamsV220() {}
    FixpipeParamsV220(uint16_t nSizeIn, uint16_t mSizeIn, uint16_t srcStrideIn, uint32_t dstStrideIn,
                      bool reluEnIn)
        : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(reluEnIn) {}
    uint16_t nSize = 0;      // columns copied
    uint16_t mSize = 0;      // rows copied
    uint16_t srcStride = 0;  // L0C rows (of 16 floats) between column groups: ceil16(m) after Mmad
    uint32_t dstStride = 0;  // GM row stride (elements) for ROW_MAJOR output
    QuantMode_t quantPre = QuantMode_t::NoQuant;
    uint64_t deqScalar = 0;
    uint16_t ndNum = 1;
    uint16_t srcNdStride = 0;
    uint16_t dstNdStride = 0;
    bool reluEn = false;
    uint8_t unitFlag = 0;
    bool isChannelSplit = false;
};

/* Each value is taken from float, ReLU'd when reluEn, and rounded once to T by quantPre (F322F16 for
 * half, F322BF16 for bfloat16_t, NoQuant for float: the device's type rules). ROW_MAJOR (NZ2ND)
 * writes row r of the tile at r * dstStride elements; NZ keeps the L0C layout: column group g
 * (16 columns) at g * dstStride * 32 bytes, its mSize rows of 16 values one after another (for
 * a convolution's [pixels x channels] product that is NC1HWC0 with C0 = 16). Fixpipe exists on
 * 910B only: coupled chips (310P, 910A) move L0C through the UB with DataCopy instead. */
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& p) {
    const char* api = "Fixpipe(CO1->GM)";
    static_assert(std::is_same<U, float>::value, "Fixpipe: the emulator supports float L0C only");
    emu::RequireCube(api);
    const emu::SocProfile& soc = emu::ActiveSoc();
    if (soc.npu_arch != 2201 && soc.npu_arch != 3002) {
        emu::Fail(api, emu::Cat("Fixpipe from L0C (CO1) to GM is not supported on ", soc.name, " (", soc.npu_arch,
                                "): copy L0C to the UB (DataCopy CO1 -> CO2) and out with the vector unit"));
    }
    const QuantMode_t want = std::is_same<T, half>::value ? QuantMode_t::F322F16 :
                             std::is_same<T, bfloat16_t>::value ? QuantMode_t::F322BF16 : QuantMode_t::NoQuant;
    if (!std::is_same<T, half>::value && !std::is_same<T, bfloat16_t>::value && !std::is_same<T, float>::value) {
        emu::Fail(api, emu::Cat("a ", emu::TypeName<T>(), " result is not emulated (float L0C to half, "
                                "bfloat16_t or float)"));
    }
    if (p.quantPre != want) {
        emu::Fail(api, emu::Cat("quantPre ", static_cast<int>(p.quantPre), " for a float L0C written as ",
                                emu::TypeName<T>(), ": the device needs ", static_cast<int>(want),
                                want == QuantMode_t::F322F16 ? " (F322F16)" :
                                want == QuantMode_t::F322BF16 ? " (F322BF16)" : " (NoQuant)"));
    }
    const bool nz = config.format == CO2Layout::NZ;
    if ((config.format != CO2Layout::ROW_MAJOR && !nz) || config.isToUB || p.ndNum != 1 || p.isChannelSplit) {
        emu::Fail(api, "only ROW_MAJOR (NZ->ND) or NZ output to GM with ndNum = 1 is emulated");
    }
    if (p.mSize == 0 || p.nSize == 0 || p.srcStride < p.mSize || p.srcStride % 16 != 0) {
        emu::Fail(api, emu::Cat("mSize ", p.mSize, ", nSize ", p.nSize, ", srcStride ", p.srcStride,
                                ": need mSize, nSize >= 1 and srcStride >= mSize, a multiple of 16 "
                                "(L0C rows between column groups)"));
    }
    if (!nz && p.dstStride < p.nSize) {
        emu::Fail(api, emu::Cat("dstStride ", p.dstStride, " < nSize ", p.nSize, ": ROW_MAJOR rows would overlap"));
    }
    if (nz && (p.nSize % 16 != 0 || int64_t(p.dstStride) * 32 < int64_t(p.mSize) * 16 * int64_t(sizeof(T)))) {
        emu::Fail(api, emu::Cat("NZ output: nSize ", p.nSize, " must be a multiple of 16 and dstStride ", p.dstStride,
                                " (32-byte units between column groups) at least mSize * 16 * ", sizeof(T), " / 32"));
    }
    const int64_t groups = (p.nSize + 15) / 16;
    const float* s = reinterpret_cast<const float*>(emu::CubeOperand(
        src, static_cast<uint64_t>((groups - 1) * p.srcStride * 16 + int64_t(p.mSize) * 16), api, "src",
        emu::Access::MTE_OUT, {TPosition::CO1}, 64));
    emu::BlockCtx& ctx = emu::Ctx();
    if (!nz) {
        std::vector<T> out(p.nSize);
        for (int64_t r = 0; r < p.mSize; ++r) {
            for (int64_t j = 0; j < p.nSize; ++j) {
                float v = s[(j / 16) * p.srcStride * 16 + r * 16 + j % 16];
                out[j] = emu::CubeOut<T>(p.reluEn && v < 0.0f ? 0.0f : v);
            }
            uint8_t* d = dst.Check(uint64_t(r) * p.dstStride * sizeof(T), p.nSize * sizeof(T), api, "dst");
            emu::GmStore<T>(d, reinterpret_cast<const uint8_t*>(out.data()), p.nSize * sizeof(T), api);
        }
    } else {
        std::vector<T> out(static_cast<size_t>(p.mSize) * 16);
        for (int64_t g = 0; g < groups; ++g) {
            for (int64_t i = 0; i < int64_t(p.mSize) * 16; ++i) {
                float v = s[g * p.srcStride * 16 + i];
                out[i] = emu::CubeOut<T>(p.reluEn && v < 0.0f ? 0.0f : v);
            }
            const uint64_t bytes = uint64_t(p.mSize) * 16 * sizeof(T);
            uint8_t* d = dst.Check(uint64_t(g) * p.dstStride * 32, bytes, api, "dst");
            emu::GmStore<T>(d, reinterpret_cast<const uint8_t*>(out.data()), bytes, api);
        }
    }
    ctx.c.gm_write_bytes += int64_t(p.mSize) * p.nSize * static_cast<int64_t>(sizeof(T));
}

}  // namespace AscendC

#include "load3d.h"

#endif  // ASCENDC_EMU_CUBE_H
