/* ascendc_emu/matmul.h: the high-level Matmul API (CANN 8.x names) as kernels include it through
 * "lib/matmul_intf.h": MatmulType, MatmulConfig / CFG_NORM ..., TCubeTiling, Matmul (MatmulImpl),
 * REGIST_MATMUL_OBJ. `namespace matmul` is an alias of AscendC, as on the device.
 *
 * Model (README "Cube" has the full rules):
 *  - one object computes its singleCoreM x singleCoreN block of C (tiling, SetSingleShape/SetTail)
 *    as baseM x baseN tiles, each accumulated over ceil(singleK / baseK) K steps in float and
 *    rounded once to C's type; bias (float or C's type) starts the accumulator;
 *  - tiles go in tiling.iterateOrder (0: M fastest, 1: N fastest);
 *  - Init reserves the tiling's L1 / L0A / L0B / L0C from the TPipe and fails with the numbers
 *    when they do not fit; cube_macs and GM bytes are counted per K step (see Compute);
 *  - under CFG_MDL (doMultiDataLoad) L1 keeps the last depthA1 A and depthB1 B base blocks of the
 *    round (L1Blocks): a K step whose GM block is still there reads nothing from GM.
 */
#ifndef ASCENDC_EMU_MATMUL_H
#define ASCENDC_EMU_MATMUL_H

#include <algorithm>
#include <deque>
#include <exception>
#include <vector>

#include "cube.h"

/* ---------------- configuration types (global namespace, as in the device headers) -------- */
enum class CubeFormat { ND = 0, NZ, ZN, ZZ, NN, ND_ALIGN, SCALAR, VECTOR, ROW_MAJOR, COLUMN_MAJOR };
enum class LayoutMode { NONE = 0, BSNGD, SBNGD, BNGS1S2, NORMAL };
enum class BatchMode { NONE = 0, BATCH_LESS_THAN_L1, BATCH_LARGE_THAN_L1, SINGLE_LARGE_THAN_L1 };
enum class IterateOrder { ORDER_M = 0, ORDER_N, UNDEF };
enum class ScheduleType { INNER_PRODUCT = 0, OUTER_PRODUCT };
enum class IterateMode : uint8_t {
    ITERATE_MODE_NORMAL = 0b00000001,
    ITERATE_MODE_ALL = 0b00000010,
    ITERATE_MODE_BATCH = 0b00000100,
    ITERATE_MODE_N_BATCH = 0b00001000,
    ITERATE_MODE_DEFAULT = 0b11111111,
};
enum class MatmulConfigMode { CONFIG_NORM, CONFIG_MDL, CONFIG_SPECIALMDL, CONFIG_IBSHARE };

/* Accepted for source compatibility. Traffic: CFG_NORM's for every config, except that a config with
 * doMultiDataLoad (CFG_MDL) keeps operand blocks in L1 across tiles (MatmulCore::L1Blocks). */
struct MatmulConfig {
    bool doNorm = true;
    bool doBasicBlock = false;
    bool doMultiDataLoad = false;
    uint32_t basicM = 0, basicN = 0, basicK = 0;
    bool intrinsicsCheck = false;
    bool isNBatch = false;
    bool enVecND2NZ = false;
    bool doSpecialBasicBlock = false;
    uint32_t doMTE2Preload = 0;
    uint32_t singleCoreM = 0, singleCoreN = 0, singleCoreK = 0;
    uint32_t stepM = 0, stepN = 0;
    uint32_t baseMN = 0, singleCoreMN = 0;
    bool enUnitFlag = true;
    bool isPerTensor = false;
    bool hasAntiQuantOffset = false;
    bool doIBShareNorm = false;
    bool doSpecialMDL = false;
    bool enableInit = true;
    BatchMode batchMode = BatchMode::BATCH_LESS_THAN_L1;
    bool enableEnd = true;
    bool enableGetTensorC = true;
    bool enableSetOrgShape = true;
    bool enableSetBias = true;
    bool enableSetTail = true;
    bool enableQuantVector = true;
    bool enableSetDefineData = true;
    IterateMode iterateMode = IterateMode::ITERATE_MODE_DEFAULT;
    bool enableReuse = true;
    bool enableUBReuse = true;
    bool enableL1CacheUB = false;
    bool intraBlockPartSum = false;
    IterateOrder iterateOrder = IterateOrder::UNDEF;
    ScheduleType scheduleType = ScheduleType::INNER_PRODUCT;
    bool enableDoubleCache = false;
    bool isBiasBatch = true;
    bool enableStaticPadZeros = false;
    bool isPartialOutput = false;
    bool enableMixDualMaster = false;
    bool isA2B2Shared = false;
    bool isEnableChannelSplit = false;
    bool enableKdimReorderLoad = false;
};

constexpr MatmulConfig GetNormalConfig(bool intrinsicsLimit = false, bool batchLoop = false,
                                       bool isVecND2NZ = false,
                                       BatchMode bmmMode = BatchMode::BATCH_LESS_THAN_L1,
                                       bool isMsgReuse = true, IterateOrder iterateOrder = IterateOrder::UNDEF,
                                       ScheduleType scheduleType = ScheduleType::INNER_PRODUCT,
                                       bool enUnitFlag = true, bool enableMixDualMaster = false) {
    MatmulConfig c;
    c.intrinsicsCheck = intrinsicsLimit;
    c.isNBatch = batchLoop;
    c.enVecND2NZ = isVecND2NZ;
    c.batchMode = bmmMode;
    c.enableReuse = isMsgReuse;
    c.iterateOrder = iterateOrder;
    c.scheduleType = scheduleType;
    c.enUnitFlag = enUnitFlag;
    c.enableMixDualMaster = enableMixDualMaster;
    return c;
}
constexpr MatmulConfig GetMDLConfig(bool intrinsicsLimit = false, bool batchLoop = false,
                                    uint32_t doMTE2Preload = 0, bool isVecND2NZ = false,
                                    bool isPerTensor = false, bool hasAntiQuantOffset = false,
                                    bool enUnitFlag = false, bool isMsgReuse = true,
                                    bool enableUBReuse = true, bool enableL1CacheUB = false,
                                    bool enableMixDualMaster = false, bool enableKdimReorderLoad = false) {
    MatmulConfig c;
    c.doNorm = false;
    c.doMultiDataLoad = true;
    c.intrinsicsCheck = intrinsicsLimit;
    c.isNBatch = batchLoop;
    c.doMTE2Preload = doMTE2Preload;
    c.enVecND2NZ = isVecND2NZ;
    c.isPerTensor = isPerTensor;
    c.hasAntiQuantOffset = hasAntiQuantOffset;
    c.enUnitFlag = enUnitFlag;
    c.batchMode = BatchMode::NONE;
    c.enableReuse = isMsgReuse;
    c.enableUBReuse = enableUBReuse;
    c.enableL1CacheUB = enableL1CacheUB;
    c.enableMixDualMaster = enableMixDualMaster;
    c.enableKdimReorderLoad = enableKdimReorderLoad;
    return c;
}
constexpr MatmulConfig GetSpecialMDLConfig(bool intrinsicsLimit = false, bool batchLoop = false,
                                           uint32_t doMTE2Preload = 0, bool isVecND2NZ = false,
                                           bool isPerTensor = false, bool hasAntiQuantOffset = false) {
    MatmulConfig c = GetMDLConfig(intrinsicsLimit, batchLoop, doMTE2Preload, isVecND2NZ, isPerTensor,
                                  hasAntiQuantOffset);
    c.doMultiDataLoad = false;
    c.doSpecialMDL = true;
    return c;
}
constexpr MatmulConfig GetBasicConfig(uint32_t basicM, uint32_t basicN, uint32_t basicK,
                                      bool intrinsicsLimit = false, bool batchLoop = false,
                                      BatchMode bmmMode = BatchMode::BATCH_LESS_THAN_L1) {
    MatmulConfig c;
    c.doNorm = false;
    c.doBasicBlock = true;
    c.basicM = basicM;
    c.basicN = basicN;
    c.basicK = basicK;
    c.intrinsicsCheck = intrinsicsLimit;
    c.isNBatch = batchLoop;
    c.batchMode = bmmMode;
    c.enUnitFlag = false;
    return c;
}
constexpr MatmulConfig GetIBShareNormConfig(bool intrinsicsLimit = false, bool batchLoop = false,
                                            bool isVecND2NZ = false,
                                            BatchMode bmmMode = BatchMode::BATCH_LESS_THAN_L1,
                                            bool isDoubleCache = false, bool enUnitFlag = true) {
    MatmulConfig c;
    c.doNorm = false;
    c.doIBShareNorm = true;
    c.intrinsicsCheck = intrinsicsLimit;
    c.isNBatch = batchLoop;
    c.enVecND2NZ = isVecND2NZ;
    c.batchMode = bmmMode;
    c.enableDoubleCache = isDoubleCache;
    c.enUnitFlag = enUnitFlag;
    return c;
}
constexpr MatmulConfig CFG_NORM = GetNormalConfig();
constexpr MatmulConfig CFG_MDL = GetMDLConfig();
constexpr MatmulConfig MM_CFG_BB = GetBasicConfig(128, 128, 128);
constexpr MatmulConfig CFG_IBSHARE_NORM = GetIBShareNormConfig();

/* Kernel-side tiling (kernel_tiling/kernel_tiling.h on the device): 50 int32 fields, filled on the
 * host by matmul_tiling::MultiCoreMatmulTiling::GetTiling or by hand. */
struct TCubeTiling {
    int32_t usedCoreNum = 0;
    int32_t M = 0;
    int32_t N = 0;
    int32_t Ka = 0;
    int32_t Kb = 0;
    int32_t singleCoreM = 0;
    int32_t singleCoreN = 0;
    int32_t singleCoreK = 0;
    int32_t baseM = 0;
    int32_t baseN = 0;
    int32_t baseK = 0;
    int32_t depthA1 = 0;
    int32_t depthB1 = 0;
    int32_t stepM = 0;
    int32_t stepN = 0;
    int32_t isBias = 0;
    int32_t transLength = 0;
    int32_t iterateOrder = 0;
    int32_t shareMode = 0;
    int32_t shareL1Size = 0;
    int32_t shareL0CSize = 0;
    int32_t shareUbSize = 0;
    int32_t batchM = 0;
    int32_t batchN = 0;
    int32_t singleBatchM = 0;
    int32_t singleBatchN = 0;
    int32_t stepKa = 0;
    int32_t stepKb = 0;
    int32_t depthAL1CacheUB = 0;
    int32_t depthBL1CacheUB = 0;
    int32_t dbL0A = 0;
    int32_t dbL0B = 0;
    int32_t dbL0C = 0;
    int32_t ALayoutInfoB = 0;
    int32_t ALayoutInfoS = 0;
    int32_t ALayoutInfoN = 0;
    int32_t ALayoutInfoG = 0;
    int32_t ALayoutInfoD = 0;
    int32_t BLayoutInfoB = 0;
    int32_t BLayoutInfoS = 0;
    int32_t BLayoutInfoN = 0;
    int32_t BLayoutInfoG = 0;
    int32_t BLayoutInfoD = 0;
    int32_t CLayoutInfoB = 0;
    int32_t CLayoutInfoS1 = 0;
    int32_t CLayoutInfoN = 0;
    int32_t CLayoutInfoG = 0;
    int32_t CLayoutInfoS2 = 0;
    int32_t BatchNum = 0;
    int32_t reserved = 0;
};
static_assert(sizeof(TCubeTiling) == 50 * sizeof(int32_t), "TCubeTiling must stay 50 int32 fields");

namespace AscendC {
using ::CubeFormat;
using ::LayoutMode;
using ::MatmulConfig;
using ::TCubeTiling;
namespace tiling {
using ::TCubeTiling;
}

template <TPosition POSITION, CubeFormat FORMAT, typename TYPE, bool ISTRANS = false,
          LayoutMode LAYOUT = LayoutMode::NONE, bool IBSHARE = false>
struct MatmulType {
    constexpr static TPosition pos = POSITION;
    constexpr static CubeFormat format = FORMAT;
    using T = TYPE;
    constexpr static bool isTrans = ISTRANS;
    constexpr static LayoutMode layout = LAYOUT;
    constexpr static bool ibShare = IBSHARE;
};

/* User callbacks (DataCopyOut / CopyA1 / CopyB1) are not emulated: all three must be nullptr. */
template <auto DataCopyOut = nullptr, auto CopyA1 = nullptr, auto CopyB1 = nullptr>
struct MatmulCallBackFunc {
    static_assert(DataCopyOut == nullptr && CopyA1 == nullptr && CopyB1 == nullptr,
                  "ascendc_emu: Matmul user callbacks are not emulated");
};

struct MatrixOffset {
    int32_t offset = 0;
    int32_t row = 0, col = 0;
    int32_t height = 0, width = 0;
};

namespace emu {

/* The GM base blocks one operand has in L1 under CFG_MDL: the last `depth` blocks loaded, oldest
 * dropped first. A block is named by its first row and column inside the round's operand view.
 * FIFO over a cyclic walk is all-or-nothing: the blocks of one pass over a panel are reused on the
 * next pass exactly when the panel has at most `depth` blocks (the tiling sizes depthA1/depthB1
 * to the panel it wants resident: stepKa * stepM blocks of A, stepKb * stepN of B). */
struct L1Blocks {
    std::deque<int64_t> keys;
    size_t depth = 1;
    void Reset(int d) {
        keys.clear();
        depth = static_cast<size_t>(d < 1 ? 1 : d);
    }
    /* Whether block (r, c) is resident; if not, it is loaded (and the oldest dropped). */
    bool Hit(int r, int c) {
        const int64_t key = (int64_t(r) << 32) | uint32_t(c);
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) return true;
        keys.push_back(key);
        if (keys.size() > depth) keys.pop_front();
        return false;
    }
};

/* The untyped part of a Matmul object: shapes, the tile walk, the buffers and the checks. */
struct MatmulCore {
    TCubeTiling t{};
    bool inited = false;
    TPipe* pipe = nullptr;
    int orgM = 0, orgN = 0, orgKa = 0, orgKb = 0, orgKc = 0;
    int singleM = 0, singleN = 0, singleK = 0;
    bool transA = false, transB = false, biasOn = false;
    int64_t tile = -1;  // index of the current tile; -1: no Iterate round running
    int mIter = 0, nIter = 0;
    int curRow = 0, curCol = 0, curM = 0, curN = 0;
    bool tileFetched = true;
    bool used = false;  // Iterate / IterateAll since the last End()
    std::vector<float> acc;  // current tile, curM x curN row-major
    L1Blocks a1, b1;         // CFG_MDL: the operand blocks L1 holds in this round
    TBuf<TPosition::A1> l1;
    TBuf<TPosition::A2> l0a;
    TBuf<TPosition::B2> l0b;
    TBuf<TPosition::CO1> l0c;

    void Init(const TCubeTiling* tiling, TPipe* tpipe, size_t sa, size_t sb, size_t sbias, int64_t c0A);
    void Reserve(const char* api, size_t sa, size_t sb, size_t sbias);
    void StartRound(const char* api);
    /* Whether buf still holds a live buffer of this block's plan (the object may outlive a
     * launch or a TPipe: never trust the pointer, look it up). */
    template <class B>
    static bool Holds(const B& buf) {
        if (buf.buf_ == nullptr) return false;
        for (const BufferInfo& b : Ctx().buffers) {
            if (&b == buf.buf_) return b.owner == &buf && !b.released;
        }
        return false;
    }
    void PlaceTile(int64_t idx);
    int OrgWidth(bool alignTo32, size_t sc) const;
};

inline void MatmulCore::Init(const TCubeTiling* tiling, TPipe* tpipe, size_t sa, size_t sb, size_t sbias,
                             int64_t c0A) {
    const char* api = "Matmul::Init";
    RequireCube(api);
    if (tiling == nullptr) Fail(api, "tiling is null");
    if (tpipe != nullptr) pipe = tpipe;
    if (pipe == nullptr) pipe = GetTPipePtr();
    if (pipe == nullptr) Fail(api, "no TPipe (pass one to REGIST_MATMUL_OBJ or Init, or create one first)");
    t = *tiling;
    const int fields[] = {t.baseM, t.baseN, t.baseK};
    const char* names[] = {"baseM", "baseN", "baseK"};
    const int64_t aligns[] = {16, 16, c0A};
    for (int i = 0; i < 3; ++i) {
        if (fields[i] <= 0 || fields[i] % aligns[i] != 0) {
            Fail(api, Cat("TCubeTiling.", names[i], " = ", fields[i], " must be a positive multiple of ",
                          aligns[i], " (the cube works on 16 x 16 x ", c0A, " fractals)"));
        }
    }
    orgM = t.M;
    orgN = t.N;
    orgKa = t.Ka;
    orgKb = t.Kb;
    orgKc = 0;
    singleM = t.singleCoreM;
    singleN = t.singleCoreN;
    singleK = t.singleCoreK;
    biasOn = false;
    tile = -1;
    Reserve(api, sa, sb, sbias);
    inited = true;
}

/* The buffers the tiling needs, checked against the SoC (with what this block already planned in
 * each memory) and then carved from the TPipe, so the launch stats report them:
 *   L1  = depthA1 * baseM * baseK * sizeof(A) + depthB1 * baseK * baseN * sizeof(B)
 *         + (isBias ? baseN * sizeof(bias) : 0)
 *   L0A = baseM * baseK * sizeof(A) * dbL0A,   L0B = baseK * baseN * sizeof(B) * dbL0B,
 *   L0C = baseM * baseN * 4 * dbL0C            (depths and db values below 1 count as 1). */
inline void MatmulCore::Reserve(const char* api, size_t sa, size_t sb, size_t sbias) {
    BlockCtx& c = Ctx();
    const SocProfile& soc = ActiveSoc();
    auto one = [](int v) { return static_cast<int64_t>(v < 1 ? 1 : v); };
    const int64_t bm = t.baseM, bn = t.baseN, bk = t.baseK;
    const int64_t a1 = one(t.depthA1) * bm * bk * int64_t(sa), b1 = one(t.depthB1) * bk * bn * int64_t(sb);
    const int64_t bias = t.isBias ? bn * int64_t(sbias) : 0;
    struct Need {
        Mem mem;
        int64_t bytes;
        std::string how;
    } needs[] = {
        {Mem::L1, a1 + b1 + bias,
         Cat("depthA1 ", one(t.depthA1), " x baseM ", bm, " x baseK ", bk, " x ", sa, " B + depthB1 ",
             one(t.depthB1), " x baseK ", bk, " x baseN ", bn, " x ", sb, " B",
             t.isBias ? Cat(" + baseN ", bn, " x ", sbias, " B bias") : std::string())},
        {Mem::L0A, bm * bk * int64_t(sa) * one(t.dbL0A),
         Cat("baseM ", bm, " x baseK ", bk, " x ", sa, " B x dbL0A ", one(t.dbL0A))},
        {Mem::L0B, bk * bn * int64_t(sb) * one(t.dbL0B),
         Cat("baseK ", bk, " x baseN ", bn, " x ", sb, " B x dbL0B ", one(t.dbL0B))},
        {Mem::L0C, bm * bn * 4 * one(t.dbL0C), Cat("baseM ", bm, " x baseN ", bn, " x 4 B x dbL0C ", one(t.dbL0C))},
    };
    for (const Need& n : needs) {
        const int mi = static_cast<int>(n.mem);
        // the two AIVs of a 1:2 mix share their AIC: each client's objects get half of it
        const int64_t cap = MemCapacity(n.mem, soc) / c.ratio, planned = mi < kMemCount ? c.used[mi] : 0;
        const bool have = n.mem == Mem::L1 ? Holds(l1) : n.mem == Mem::L0A ? Holds(l0a)
                          : n.mem == Mem::L0B ? Holds(l0b) : Holds(l0c);
        if (!have && n.bytes + planned > cap) {
            Fail(api, Cat("the tiling does not fit ", MemName(n.mem), ": ", n.how, " = ", n.bytes, " B",
                          planned ? Cat(" (+ ", planned, " B already planned)") : std::string(), " > ", cap,
                          " B of ", soc.name, " ", MemName(n.mem), c.ratio > 1 ? " (half: a 1:2 mix)" : ""));
        }
    }
    auto carve = [&](auto& buf, int64_t bytes) {
        if (Holds(buf)) {
            if (bytes > buf.buf_->len) {
                Fail(api, Cat("Init called again with a tiling that needs ", bytes, " B of ", MemName(buf.buf_->mem),
                              " > the ", buf.buf_->len, " B reserved by the first Init"));
            }
            return;
        }
        buf.buf_ = nullptr;
        pipe->InitBuffer(buf, static_cast<uint32_t>(bytes));
    };
    carve(l1, needs[0].bytes);
    carve(l0a, needs[1].bytes);
    carve(l0b, needs[2].bytes);
    carve(l0c, needs[3].bytes);
}

inline void MatmulCore::StartRound(const char* api) {
    if (!inited) Fail(api, "the Matmul object has no tiling (REGIST_MATMUL_OBJ with a tiling, or Init)");
    const int dims[] = {singleM, singleN, singleK, orgM, orgN, orgKa, orgKb};
    const char* names[] = {"singleM", "singleN", "singleK", "orgM", "orgN", "orgKa", "orgKb"};
    for (int i = 0; i < 7; ++i) {
        if (dims[i] <= 0) {
            Fail(api, Cat(names[i], " = ", dims[i], " (from the tiling, SetOrgShape or SetSingleShape/SetTail)"
                                                     " must be >= 1"));
        }
    }
    mIter = (singleM + t.baseM - 1) / t.baseM;
    nIter = (singleN + t.baseN - 1) / t.baseN;
    a1.Reset(t.depthA1);  // a round starts with new operands (SetTensorA/B, SetTail)
    b1.Reset(t.depthB1);
    used = true;
}

/* Tile idx of the round in iterateOrder: 0 (ORDER_M) walks M fastest, 1 (ORDER_N) N fastest. */
inline void MatmulCore::PlaceTile(int64_t idx) {
    const bool nFirst = t.iterateOrder == 1;
    const int mi = nFirst ? static_cast<int>(idx / nIter) : static_cast<int>(idx % mIter);
    const int ni = nFirst ? static_cast<int>(idx % nIter) : static_cast<int>(idx / mIter);
    curRow = mi;
    curCol = ni;
    curM = std::min(t.baseM, singleM - mi * t.baseM);
    curN = std::min(t.baseN, singleN - ni * t.baseN);
}

/* Row stride of C in GM: orgKc when set, else orgN; ND_ALIGN rounds it up to 32 bytes. */
inline int MatmulCore::OrgWidth(bool alignTo32, size_t sc) const {
    int w = orgKc != 0 ? orgKc : orgN;
    if (alignTo32) {
        const int e = static_cast<int>(32 / sc);
        w = (w + e - 1) / e * e;
    }
    return w;
}

template <typename T>
inline float ToF(T v) { return CubeIn(v); }

/* Write one value to GM: plain, or atomic add (1) / max (2) / min (3) as enAtomic asks. */
template <typename T>
inline void StoreC(T* d, float v, uint8_t atomic) {
    if (atomic == 0) {
        *d = CubeOut<T>(v);
        return;
    }
    const float cur = ToF(*d);
    const float r = atomic == 1 ? cur + v : atomic == 2 ? std::max(cur, v) : std::min(cur, v);
    *d = CubeOut<T>(r);
}

}  // namespace emu
}  // namespace AscendC

#include "matmul_async.h"  // the asynchronous rounds' slots (it needs MatmulCore)

namespace AscendC {

/* ============================ Matmul ============================ */
template <class A_TYPE, class B_TYPE, class C_TYPE, class BIAS_TYPE = C_TYPE, const auto& MM_CFG = CFG_NORM,
          class MM_CB = MatmulCallBackFunc<nullptr, nullptr, nullptr>>
class MatmulImpl {
 public:
    using AType = A_TYPE;
    using BType = B_TYPE;
    using CType = C_TYPE;
    using BiasType = BIAS_TYPE;
    using SrcAT = typename A_TYPE::T;
    using SrcBT = typename B_TYPE::T;
    using DstT = typename C_TYPE::T;
    using BiasT = typename BIAS_TYPE::T;
    using CallBack = MM_CB;

 private:
    template <typename T>
    static constexpr bool kCubeIn = std::is_same<T, half>::value || std::is_same<T, float>::value ||
                                    std::is_same<T, bfloat16_t>::value;
    static_assert(std::is_same<SrcAT, SrcBT>::value, "Matmul: A and B must have the same element type");
    static_assert(kCubeIn<SrcAT>, "Matmul: the emulator supports half, bfloat16_t and float A/B");
    static_assert(kCubeIn<DstT> && kCubeIn<BiasT>, "Matmul: C and bias must be half, bfloat16_t or float");
    static_assert((A_TYPE::pos == TPosition::GM || A_TYPE::pos == TPosition::VECOUT) &&
                      (B_TYPE::pos == TPosition::GM || B_TYPE::pos == TPosition::VECOUT),
                  "Matmul: the emulator takes A and B from GM or the UB (TPosition::VECOUT)");
    static_assert(A_TYPE::format == CubeFormat::ND && B_TYPE::format == CubeFormat::ND,
                  "Matmul: the emulator takes ND A and B only");
    static_assert(C_TYPE::format == CubeFormat::ND || C_TYPE::format == CubeFormat::ND_ALIGN,
                  "Matmul: the emulator writes ND or ND_ALIGN C only");
    static constexpr int64_t kC0 = emu::C0Of<SrcAT>();
    static constexpr bool kMdl = MM_CFG.doMultiDataLoad;

 public:
    MatmulImpl() = default;
    MatmulImpl(const MatmulImpl&) = delete;
    MatmulImpl& operator=(const MatmulImpl&) = delete;
    ~MatmulImpl() noexcept(false) {
        if (s_.used && std::uncaught_exceptions() == 0 && emu::CurrentSlot() != nullptr) {
            emu::Warn("Matmul", "object went out of scope after Iterate/IterateAll without End()");
        }
    }

    void Init(const TCubeTiling* __restrict cubeTiling, TPipe* tpipe = nullptr) {
        s_.Init(cubeTiling, tpipe, sizeof(SrcAT), sizeof(SrcBT), sizeof(BiasT), kC0);
    }
    void SetOrgShape(int orgM, int orgN, int orgK) { SetOrgShape(orgM, orgN, orgK, orgK, orgN); }
    void SetOrgShape(int orgM, int orgN, int orgKa, int orgKb, int orgKc = 0) {
        s_.orgM = orgM;
        s_.orgN = orgN;
        s_.orgKa = orgKa;
        s_.orgKb = orgKb;
        s_.orgKc = orgKc;
    }
    void SetSingleShape(int singleM, int singleN, int singleK) { SetTail(singleM, singleN, singleK); }
    void SetTail(int tailM = -1, int tailN = -1, int tailK = -1) {
        if (tailM != -1) s_.singleM = tailM;
        if (tailN != -1) s_.singleN = tailN;
        if (tailK != -1) s_.singleK = tailK;
    }
    void SetTensorA(const GlobalTensor<SrcAT>& gm, bool isTransposeA = false) {
        if (isTransposeA && !A_TYPE::isTrans) {
            emu::Fail("Matmul::SetTensorA", "isTransposeA = true but A's MatmulType was declared with "
                                            "ISTRANS = false (the device asserts: declare MatmulType<..., true>)");
        }
        if (A_TYPE::pos != TPosition::GM) {
            emu::Fail("Matmul::SetTensorA", "A's MatmulType position is VECOUT: pass a LocalTensor");
        }
        a_ = gm;
        aFromUb_ = false;
        s_.transA = isTransposeA;
        s_.tile = -1;
    }
    /* A from the UB (MatmulType position VECOUT), the API's LocalTensor overload: an ND M x Ka
     * matrix, rows orgKa apart. Staged like a UB B: on 2201 (910B/A3) through the GM workspace
     * into L1, so each K step counts its A tile as GM bytes written and read; coupled chips
     * (910A, 310P) move it on chip. Transposed UB operands are not emulated. */
    void SetTensorA(const LocalTensor<SrcAT>& local, bool isTransposeA = false) {
        const char* api = "Matmul::SetTensorA(LocalTensor)";
        if (A_TYPE::pos != TPosition::VECOUT) {
            emu::Fail(api, "A's MatmulType position must be TPosition::VECOUT for a UB operand");
        }
        if (isTransposeA) emu::Fail(api, "a transposed UB operand is not emulated");
        aLocal_ = local;
        aFromUb_ = true;
        s_.transA = false;
        s_.tile = -1;
    }
    void SetTensorB(const GlobalTensor<SrcBT>& gm, bool isTransposeB = false) {
        if (isTransposeB && !B_TYPE::isTrans) {
            emu::Fail("Matmul::SetTensorB", "isTransposeB = true but B's MatmulType was declared with "
                                            "ISTRANS = false (the device asserts: declare MatmulType<..., true>)");
        }
        if (B_TYPE::pos != TPosition::GM) {
            emu::Fail("Matmul::SetTensorB", "B's MatmulType position is VECOUT: pass a LocalTensor");
        }
        b_ = gm;
        bFromUb_ = false;
        s_.transB = isTransposeB;
        s_.tile = -1;
    }
    /* B from the UB (MatmulType position VECOUT), the API's LocalTensor overload: an ND Kb x N
     * matrix, rows orgN apart. On 2201 (910B/A3) the client stages it through the GM workspace
     * into L1, so each K step counts its B tile as GM bytes written and read; coupled chips
     * (910A, 310P) move it on chip. Transposed UB operands are not emulated. */
    void SetTensorB(const LocalTensor<SrcBT>& local, bool isTransposeB = false) {
        const char* api = "Matmul::SetTensorB(LocalTensor)";
        if (B_TYPE::pos != TPosition::VECOUT) {
            emu::Fail(api, "B's MatmulType position must be TPosition::VECOUT for a UB operand");
        }
        if (isTransposeB) emu::Fail(api, "a transposed UB operand is not emulated");
        bLocal_ = local;
        bFromUb_ = true;
        s_.transB = false;
        s_.tile = -1;
    }
    void SetBias(const GlobalTensor<BiasT>& biasGlobal) {
        if (s_.inited && !s_.t.isBias) {
            emu::Warn("Matmul::SetBias", "TCubeTiling.isBias = 0: the tiling reserved no bias buffer "
                                         "(set the host tiling's SetBias(true))");
        }
        bias_ = biasGlobal;
        s_.biasOn = true;
    }
    void DisableBias() { s_.biasOn = false; }
    void ClearBias() { DisableBias(); }
    void SetHF32(bool enableHF32 = false, int32_t = 0) {
        if (enableHF32) emu::Warn("Matmul::SetHF32", "HF32 is not emulated: float inputs keep full precision");
    }
    void SetSubBlockIdx(uint8_t idx) { subBlockIdx_ = idx; }
    uint8_t GetSubBlockIdx() { return subBlockIdx_; }
    void SetSelfDefineData(const uint64_t) {}
    void SetUserDefInfo(const uint64_t) {}
    /* The GM area an asynchronous round (Iterate<false>) caches its tiles in: `size` elements of
     * T (the device asserts a non-null address / a sized GlobalTensor). */
    template <class T>
    void SetWorkspace(__gm__ const T* addr, int size) {
        const char* api = "Matmul::SetWorkspace";
        if (addr == nullptr || size <= 0) {
            emu::Fail(api, emu::Cat("needs a GM address and a positive size (got ", size, " elements)"));
        }
        ws_.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(const_cast<T*>(addr)), uint64_t(size) * sizeof(T));
        wsBytes_ = int64_t(size) * int64_t(sizeof(T));
    }
    template <class T>
    void SetWorkspace(GlobalTensor<T>& addr) {
        if (addr.GetSize() == 0) {
            emu::Fail("Matmul::SetWorkspace", "the GlobalTensor has no size (SetGlobalBuffer(ptr, count)): "
                                              "the device asserts GetSize() > 0");
        }
        SetWorkspace(addr.GetPhyAddr(), static_cast<int>(addr.GetSize()));
    }
    void SetLocalWorkspace(const LocalTensor<uint8_t>&) {}

    /* One baseM x baseN tile per call. Asynchronous (sync = false, MIX kernels of split chips):
     * the round's first call has the AIC compute every tile of the round into the workspace
     * (IterateAsync); later calls only count the tiles. */
    template <bool sync = true>
    bool Iterate(bool enPartialSum = false) {
        const char* api = sync ? "Matmul::Iterate" : "Matmul::Iterate<false>";
        if (enPartialSum) emu::Fail(api, "enPartialSum = true is not emulated");
        if constexpr (!sync) return IterateAsync(api);
        if (s_.tile < 0) {
            async_.Drained(api);
            async_.on = false;
            CheckOperands(api);
            s_.StartRound(api);
            s_.tile = 0;
        } else if (++s_.tile >= int64_t(s_.mIter) * s_.nIter) {
            s_.tile = -1;
            return false;
        }
        s_.PlaceTile(s_.tile);
        Compute(api);
        s_.tileFetched = false;
        return true;
    }

    /* The whole singleCore block to GM at its tile offsets (row stride orgN). */
    /* Asynchronous (sync = false, MIX kernels of split chips): the call returns at once and the
     * AIC writes the block meanwhile; with waitIterateAll = true, WaitIterateAll() later waits
     * for it, and the block's bytes may be touched only after that (matmul_async.h). */
    template <bool sync = true>
    void IterateAll(const GlobalTensor<DstT>& gm, uint8_t enAtomic = 0, bool enSequentialWrite = false,
                    bool waitIterateAll = false, bool fakeMsg = false) {
        const char* api = sync ? "Matmul::IterateAll" : "Matmul::IterateAll<false>";
        if (fakeMsg) return;
        if (enSequentialWrite) emu::Fail(api, "enSequentialWrite = true is not emulated for IterateAll");
        async_.Drained(api);
        async_.on = false;
        CheckOperands(api);
        s_.StartRound(api);
        uintptr_t lo = 0, hi = 0;
        if constexpr (!sync) {
            // the block's bytes: its first row's start to its last row's end, rows orgN apart
            const int stride = s_.OrgWidth(C_TYPE::format == CubeFormat::ND_ALIGN, sizeof(DstT));
            lo = reinterpret_cast<uintptr_t>(gm.GetPhyAddr());
            hi = lo + (uint64_t(s_.singleM - 1) * stride + s_.singleN) * sizeof(DstT);
            panels_.CheckPost(api, enSequentialWrite, lo, hi);
        }
        for (int64_t i = 0; i < int64_t(s_.mIter) * s_.nIter; ++i) {
            s_.PlaceTile(i);
            Compute(api);
            WriteGm(api, gm, enAtomic, false);
        }
        s_.tile = -1;
        lastAllSync_ = sync;
        if constexpr (!sync) panels_.Post(this, lo, hi, waitIterateAll);
    }
    /* The event of the oldest IterateAll<false> (posted with waitIterateAll = true): its block
     * is in GM when this returns. */
    void WaitIterateAll() { panels_.Wait("Matmul::WaitIterateAll", this, lastAllSync_); }

    /* The current tile into a UB (or L1) tensor. Sequential write: the tile at element 0, rows
     * curN apart (ND) or rounded up to 32 bytes (ND_ALIGN, or doPad, whose padding is zero).
     * Otherwise at its offset inside the singleCore block, rows orgN apart. */
    template <bool sync = true, bool doPad = false>
    void GetTensorC(const LocalTensor<DstT>& c, uint8_t enAtomic = 0, bool enSequentialWrite = false,
                    uint32_t height = 0, uint32_t width = 0, uint32_t srcGap = 0, uint32_t dstGap = 0) {
        const char* api = sync ? "Matmul::GetTensorC(LocalTensor)" : "Matmul::GetTensorC<false>(LocalTensor)";
        if (async_.on) {  // the device's client follows the mode of the round's Iterate
            FetchAsync(api, c, enAtomic, doPad, height, width, srcGap, dstGap);
            return;
        }
        if constexpr (!sync) {
            emu::Fail(api, "the round was started by a synchronous Iterate (the device asserts sync == true "
                           "unless Iterate<false> started it)");
        }
        TakeTile(api);
        if (enAtomic != 0) emu::Fail(api, "enAtomic must be 0 when C goes to a LocalTensor");
        if (doPad && C_TYPE::format != CubeFormat::ND_ALIGN) {
            emu::Fail(api, "doPad needs C's MatmulType format CubeFormat::ND_ALIGN");
        }
        if ((height != 0 && int(height) != s_.curM) || (width != 0 && int(width) != s_.curN) || srcGap || dstGap) {
            emu::Fail(api, emu::Cat("height ", height, " x width ", width, " (gaps ", srcGap, ", ", dstGap,
                                    ") differ from the current ", s_.curM, " x ", s_.curN, " tile"));
        }
        WriteLocal(api, c, enSequentialWrite, doPad || C_TYPE::format == CubeFormat::ND_ALIGN);
    }
    template <bool sync = true>
    void GetTensorC(const GlobalTensor<DstT>& gm, uint8_t enAtomic = 0, bool enSequentialWrite = false) {
        const char* api = "Matmul::GetTensorC(GlobalTensor)";
        async_.NotAsync(api);
        TakeTile(api);
        WriteGm(api, gm, enAtomic, enSequentialWrite);
    }
    template <bool sync = true>
    void GetTensorC(const GlobalTensor<DstT>& gm, const LocalTensor<DstT>& co2Local, uint8_t enAtomic = 0,
                    bool enSequentialWrite = false) {
        const char* api = "Matmul::GetTensorC(GlobalTensor, LocalTensor)";
        async_.NotAsync(api);
        TakeTile(api);
        WriteGm(api, gm, enAtomic, enSequentialWrite);
        WriteLocal(api, co2Local, enSequentialWrite, C_TYPE::format == CubeFormat::ND_ALIGN);
    }
    template <bool isTurnOnDebug = true>
    MatrixOffset GetOffsetC() {
        MatrixOffset o;
        o.row = s_.curRow * s_.t.baseM;
        o.col = s_.curCol * s_.t.baseN;
        o.height = s_.curM;
        o.width = s_.curN;
        o.offset = o.row * s_.OrgWidth(false, sizeof(DstT)) + o.col;
        return o;
    }

    void End() {
        async_.Drained("Matmul::End");
        panels_.Drained("Matmul::End");
        async_.on = false;
        s_.tile = -1;
        s_.used = false;
        s_.tileFetched = true;
    }

    /* emulator internals */
    void EmuBindPipe(TPipe* p) { s_.pipe = p; }

 private:
    /* ---- asynchronous rounds (Iterate<false> / GetTensorC<false>; matmul_async.h has the model
     * and the slots' checks): the round's first call computes every tile into its workspace slot. */
    bool IterateAsync(const char* api) {
        if (s_.tile >= 0) return async_.Step(api, s_);
        async_.CheckStart(api, C_TYPE::pos == TPosition::VECIN || C_TYPE::pos == TPosition::VECOUT ||
                                   C_TYPE::pos == TPosition::VECCALC,
                          ws_.addr_ != nullptr);
        CheckOperands(api);
        s_.StartRound(api);
        async_.Begin<DstT>(api, s_, wsBytes_);
        for (int64_t i = 0; i < int64_t(s_.mIter) * s_.nIter; ++i) {
            s_.PlaceTile(i);
            Compute(api);
            async_.Produce<DstT>(api, ws_, s_, i);
        }
        async_.on = true;
        s_.tile = 0;
        return true;
    }
    /* The next slot of the asynchronous round into `c`: the tile at element 0, rows padded to 32
     * bytes (doPad or ND_ALIGN) or curN apart; read from the GM workspace (MTE2). */
    void FetchAsync(const char* api, const LocalTensor<DstT>& c, uint8_t enAtomic, bool doPad, uint32_t height,
                    uint32_t width, uint32_t srcGap, uint32_t dstGap) {
        if (enAtomic != 0) emu::Fail(api, "enAtomic must be 0 when C goes to a LocalTensor");
        if (doPad && C_TYPE::format != CubeFormat::ND_ALIGN) {
            emu::Fail(api, "doPad needs C's MatmulType format CubeFormat::ND_ALIGN");
        }
        const uint64_t bytes = async_.Load<DstT>(api, ws_, s_, height, width, srcGap, dstGap);
        WriteLocal(api, c, true, doPad || C_TYPE::format == CubeFormat::ND_ALIGN, false);
        emu::Ctx().c.gm_read_bytes += int64_t(bytes);
        ++async_.fetched;
    }

    void CheckOperands(const char* api) {
        if (!aFromUb_ && a_.addr_ == nullptr) emu::Fail(api, "SetTensorA was not called (A has no GM buffer)");
        if (!bFromUb_ && b_.addr_ == nullptr) emu::Fail(api, "SetTensorB was not called (B has no GM buffer)");
        if (s_.biasOn && bias_.addr_ == nullptr) emu::Fail(api, "SetBias was given a GlobalTensor without buffer");
    }
    void TakeTile(const char* api) {
        if (s_.tile < 0) emu::Fail(api, "no current tile (call Iterate() first and check it returned true)");
        if (s_.tileFetched) emu::Fail(api, "called twice for one Iterate() (each tile can be fetched once)");
        s_.tileFetched = true;
    }

    /* One tile: bias (or 0) plus the K steps, each charged as the API moves it: A and B tiles of the
     * step read from GM, ceil16(curM) * ceil16(curN) * ceil(curK / C0) * C0 MACs; bias read once. */
    void Compute(const char* api) {
        emu::BlockCtx& ctx = emu::Ctx();
        const int m = s_.curM, n = s_.curN, row0 = s_.curRow * s_.t.baseM, col0 = s_.curCol * s_.t.baseN;
        s_.acc.assign(static_cast<size_t>(m) * n, 0.0f);
        if (s_.biasOn) {
            const uint8_t* p = bias_.Check(uint64_t(col0) * sizeof(BiasT), uint64_t(n) * sizeof(BiasT), api, "bias");
            const BiasT* bv = reinterpret_cast<const BiasT*>(p);
            for (int i = 0; i < m; ++i) {
                for (int j = 0; j < n; ++j) s_.acc[size_t(i) * n + j] = emu::ToF(bv[j]);
            }
            ctx.c.gm_read_bytes += int64_t(n) * sizeof(BiasT);
        }
        std::vector<float> at, bt;
        for (int k0 = 0; k0 < s_.singleK; k0 += s_.t.baseK) {
            const int kk = std::min(s_.t.baseK, s_.singleK - k0);
            LoadA(api, row0, k0, m, kk, at);
            LoadB(api, k0, col0, kk, n, bt);
            for (int i = 0; i < m; ++i) {
                float* out = &s_.acc[size_t(i) * n];
                for (int k = 0; k < kk; ++k) {
                    const float av = at[size_t(i) * kk + k];
                    const float* bk = &bt[size_t(k) * n];
                    for (int j = 0; j < n; ++j) out[j] += av * bk[j];
                }
            }
            const int64_t aBytes = int64_t(m) * kk * sizeof(SrcAT);
            const int64_t bBytes = int64_t(kk) * n * sizeof(SrcBT);
            const bool split = emu::ActiveSoc().npu_arch == 2201;
            const bool stagedA = aFromUb_ && split, staged = bFromUb_ && split;
            // CFG_MDL: a GM block still in L1 from an earlier tile of the round is not read again
            const bool residentA = kMdl && !aFromUb_ && s_.a1.Hit(row0, k0);
            const bool residentB = kMdl && !bFromUb_ && s_.b1.Hit(k0, col0);
            ctx.c.gm_read_bytes += (residentA ? 0 : !aFromUb_ || stagedA ? aBytes : 0) +
                                   (residentB ? 0 : !bFromUb_ || staged ? bBytes : 0);
            if (stagedA) ctx.c.gm_write_bytes += aBytes;
            if (staged) ctx.c.gm_write_bytes += bBytes;
            emu::CountCube(emu::CubeMacs(m, n, kk, kC0));
        }
    }
    /* A tile rows [row0, row0 + m) x K [k0, k0 + kk) as m x kk floats. A is M x Ka (row stride orgKa),
     * transposed: Ka x M (row stride orgM). */
    void LoadA(const char* api, int row0, int k0, int m, int kk, std::vector<float>& out) {
        out.resize(size_t(m) * kk);
        if (aFromUb_) {
            const uint64_t span = uint64_t(row0 + m - 1) * s_.orgKa + k0 + kk;
            const SrcAT* p = reinterpret_cast<const SrcAT*>(emu::CubeOperand(
                aLocal_, span, api, "A", emu::Access::MTE_OUT,
                {TPosition::VECOUT, TPosition::VECIN, TPosition::VECCALC}, 32));
            for (int i = 0; i < m; ++i) {
                for (int k = 0; k < kk; ++k) out[size_t(i) * kk + k] = emu::ToF(p[uint64_t(row0 + i) * s_.orgKa + k0 + k]);
            }
        } else if (!s_.transA) {
            for (int i = 0; i < m; ++i) {
                const SrcAT* p = Row(a_, int64_t(row0 + i) * s_.orgKa + k0, kk, api, "A");
                for (int k = 0; k < kk; ++k) out[size_t(i) * kk + k] = emu::ToF(p[k]);
            }
        } else {
            for (int k = 0; k < kk; ++k) {
                const SrcAT* p = Row(a_, int64_t(k0 + k) * s_.orgM + row0, m, api, "A (transposed)");
                for (int i = 0; i < m; ++i) out[size_t(i) * kk + k] = emu::ToF(p[i]);
            }
        }
    }
    /* B tile K [k0, k0 + kk) x columns [col0, col0 + n) as kk x n floats. B is Kb x N (row stride
     * orgN), transposed: N x Kb (row stride orgKb). */
    void LoadB(const char* api, int k0, int col0, int kk, int n, std::vector<float>& out) {
        out.resize(size_t(kk) * n);
        if (bFromUb_) {
            const uint64_t span = uint64_t(k0 + kk - 1) * s_.orgN + col0 + n;
            const SrcBT* p = reinterpret_cast<const SrcBT*>(emu::CubeOperand(
                bLocal_, span, api, "B", emu::Access::MTE_OUT,
                {TPosition::VECOUT, TPosition::VECIN, TPosition::VECCALC}, 32));
            for (int k = 0; k < kk; ++k) {
                for (int j = 0; j < n; ++j) out[size_t(k) * n + j] = emu::ToF(p[uint64_t(k0 + k) * s_.orgN + col0 + j]);
            }
        } else if (!s_.transB) {
            for (int k = 0; k < kk; ++k) {
                const SrcBT* p = Row(b_, int64_t(k0 + k) * s_.orgN + col0, n, api, "B");
                for (int j = 0; j < n; ++j) out[size_t(k) * n + j] = emu::ToF(p[j]);
            }
        } else {
            for (int j = 0; j < n; ++j) {
                const SrcBT* p = Row(b_, int64_t(col0 + j) * s_.orgKb + k0, kk, api, "B (transposed)");
                for (int k = 0; k < kk; ++k) out[size_t(k) * n + j] = emu::ToF(p[k]);
            }
        }
    }
    template <typename T>
    static const T* Row(const GlobalTensor<T>& g, int64_t off, int len, const char* api, const char* role) {
        const uint8_t* p = g.Check(uint64_t(off) * sizeof(T), uint64_t(len) * sizeof(T), api, role);
        return reinterpret_cast<const T*>(p);
    }

    /* Element offset of the current tile inside the singleCore block of C, rows `stride` apart. */
    int64_t TileOffset(int stride) const {
        return int64_t(s_.curRow) * s_.t.baseM * stride + int64_t(s_.curCol) * s_.t.baseN;
    }

    void WriteGm(const char* api, const GlobalTensor<DstT>& gm, uint8_t enAtomic, bool sequential) {
        if (enAtomic > 3) {
            emu::Fail(api, emu::Cat("enAtomic ", int(enAtomic), " is outside 0..3 (none/add/max/min)"));
        }
        const int m = s_.curM, n = s_.curN;
        const int stride = sequential ? n : s_.OrgWidth(C_TYPE::format == CubeFormat::ND_ALIGN, sizeof(DstT));
        const int64_t base = sequential ? 0 : TileOffset(stride);
        emu::BlockCtx& ctx = emu::Ctx();
        std::unique_lock<std::mutex> lock(emu::Gm().atomic_mu, std::defer_lock);
        if (enAtomic) lock.lock();
        for (int i = 0; i < m; ++i) {
            const uint64_t at = uint64_t(base + int64_t(i) * stride) * sizeof(DstT);
            uint8_t* p = gm.Check(at, uint64_t(n) * sizeof(DstT), api, "C");
            DstT* d = reinterpret_cast<DstT*>(p);
            for (int j = 0; j < n; ++j) emu::StoreC(d + j, s_.acc[size_t(i) * n + j], enAtomic);
            uintptr_t a = reinterpret_cast<uintptr_t>(p);
            emu::RecordGmWrite(a, a + uint64_t(n) * sizeof(DstT), enAtomic == 1);
        }
        ctx.c.gm_write_bytes += int64_t(m) * n * sizeof(DstT);
    }

    /* Into a LocalTensor. On 2201 (910B/A3) the AIC has no path to the AIV's UB: the tile goes
     * through the GM workspace (Fixpipe out, MTE2 in), so it is counted as GM write + read; the
     * coupled chips move it on chip. */
    void WriteLocal(const char* api, const LocalTensor<DstT>& c, bool sequential, bool align32,
                    bool roundTrip = true) {
        const emu::SocProfile& soc = emu::ActiveSoc();
        const bool aic = emu::Global().kernel_mode.load() == static_cast<int>(KernelMode::AIC_MODE);
        if (soc.npu_arch == 2201 && aic && c.buf_ != nullptr && c.buf_->mem == emu::Mem::UB) {
            emu::Fail(api, "an AIC_MODE kernel has no UB (use MIX_MODE to fetch tiles into UB)");
        }
        const int m = s_.curM, n = s_.curN, e32 = static_cast<int>(32 / sizeof(DstT));
        const int padded = align32 ? (n + e32 - 1) / e32 * e32 : n;
        const int stride = sequential ? padded : s_.OrgWidth(align32, sizeof(DstT));
        const int64_t base = sequential ? 0 : TileOffset(stride);
        const int64_t rowSpan = sequential && align32 ? stride : n;
        const uint64_t elems = uint64_t(base + int64_t(m - 1) * stride + rowSpan);
        DstT* d = reinterpret_cast<DstT*>(
            emu::CubeOperand(c, elems, api, "dst", emu::Access::MTE_IN,
                             {TPosition::VECIN, TPosition::VECOUT, TPosition::VECCALC, TPosition::CO2,
                              TPosition::A1, TPosition::B1, TPosition::C1, TPosition::TSCM}, 32));
        for (int i = 0; i < m; ++i) {
            DstT* r = d + base + int64_t(i) * stride;
            for (int j = 0; j < n; ++j) r[j] = emu::CubeOut<DstT>(s_.acc[size_t(i) * n + j]);
            for (int64_t j = n; j < rowSpan; ++j) r[j] = emu::CubeOut<DstT>(0.0f);
        }
        emu::SyncPipes(PIPE_MTE2, PIPE_V);  // the API waits for the copy before returning
        if (soc.npu_arch == 2201 && roundTrip) {  // an asynchronous fetch counts its own bytes
            const int64_t bytes = int64_t(m) * n * sizeof(DstT);
            emu::Ctx().c.gm_write_bytes += bytes;
            emu::Ctx().c.gm_read_bytes += bytes;
        }
    }

    emu::MatmulCore s_;
    GlobalTensor<SrcAT> a_;
    GlobalTensor<SrcBT> b_;
    GlobalTensor<BiasT> bias_;
    LocalTensor<SrcAT> aLocal_;
    LocalTensor<SrcBT> bLocal_;
    bool aFromUb_ = false;
    bool bFromUb_ = false;
    uint8_t subBlockIdx_ = 0;
    GlobalTensor<uint8_t> ws_;  // SetWorkspace
    int64_t wsBytes_ = 0;
    emu::AsyncRound async_;
    emu::AsyncPanels panels_;   // IterateAll<false> calls not yet waited
    bool lastAllSync_ = false;  // the last IterateAll was synchronous (WaitIterateAll asserts not)
};

template <class A_TYPE, class B_TYPE, class C_TYPE, class BIAS_TYPE = C_TYPE, const auto& MM_CFG = CFG_NORM,
          class MM_CB = MatmulCallBackFunc<nullptr, nullptr, nullptr>>
using Matmul = MatmulImpl<A_TYPE, B_TYPE, C_TYPE, BIAS_TYPE, MM_CFG, MM_CB>;

namespace emu {
/* REGIST_MATMUL_OBJ(pipe, workspace, mm) binds the pipe (Init comes later);
 * REGIST_MATMUL_OBJ(pipe, workspace, mm1, &tiling1[, mm2, &tiling2 ...]) also runs Init. */
template <class MM>
inline void RegistCube(TPipe* pipe, GM_ADDR, MM& mm) {
    CrossCoreMatmulServer();
    if (pipe == nullptr) Fail("REGIST_MATMUL_OBJ", "tpipe is null");
    mm.EmuBindPipe(pipe);
}
template <class MM, class TL, class... Rest>
inline void RegistCube(TPipe* pipe, GM_ADDR ws, MM& mm, TL* tiling, Rest&&... rest) {
    RegistCube(pipe, ws, mm);
    if (tiling != nullptr) mm.Init(tiling, pipe);
    if constexpr (sizeof...(Rest) > 0) RegistCube(pipe, ws, rest...);
}
}  // namespace emu

}  // namespace AscendC

namespace matmul = AscendC;

#define REGIST_CUBE_OBJ(tpipe, workspace, ...) \
    ::AscendC::emu::RegistCube(tpipe, reinterpret_cast<GM_ADDR>(workspace), __VA_ARGS__)
#define REGIST_MATMUL_OBJ(tpipe, workspace, ...) REGIST_CUBE_OBJ(tpipe, workspace, __VA_ARGS__)
#define REGIST_MATMUL_OBJ_STATIC(tpipe, workspace, ...) REGIST_CUBE_OBJ(tpipe, workspace, __VA_ARGS__)

#endif  // ASCENDC_EMU_MATMUL_H
