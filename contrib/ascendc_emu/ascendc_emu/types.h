/* ascendc_emu/types.h: qualifiers, scalar types, enums, parameter structs and the SoC table.
 *
 * Part of the AscendC CPU emulator (header-only, C++17). Names follow the public asc-devkit
 * headers (CANN 8.x generation); emulator-only helpers live in AscendC::emu.
 */
#ifndef ASCENDC_EMU_TYPES_H
#define ASCENDC_EMU_TYPES_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifndef ASCENDC_CPU_DEBUG
#define ASCENDC_CPU_DEBUG 1
#endif

/* Device qualifiers: empty in CPU mode, as in the official twin-debug build. */
#define __global__
#define __aicore__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __vector__
#define __cube__
#define __simd_callee__
#define KERNEL_TASK_TYPE_DEFAULT(type)
#define KERNEL_TASK_TYPE(key, type)

using GM_ADDR = uint8_t*;

/* Build modes. Header-only by default: every runtime function is inline. With
 * -DASCENDC_EMU_SEPARATE_RUNTIME the heavy runtime functions are only declared, and exactly one
 * object of the program must define them: compile kernel_operator.h itself with
 *   g++ -x c++ -std=c++17 -O2 -DASCENDC_EMU_SEPARATE_RUNTIME -DASCENDC_EMU_RUNTIME_IMPL -c \
 *       contrib/ascendc_emu/kernel_operator.h -o ascendc_emu_runtime.o
 * and link it (kernel objects then compile about twice as fast). */
/* ASCENDC_EMU_RT marks the definitions in runtime.h (declared plainly in the topic headers). */
#if defined(ASCENDC_EMU_SEPARATE_RUNTIME)
#define ASCENDC_EMU_RT
#else
#define ASCENDC_EMU_RT [[gnu::noinline]] inline
#endif
#if !defined(ASCENDC_EMU_SEPARATE_RUNTIME) || defined(ASCENDC_EMU_RUNTIME_IMPL)
#define ASCENDC_EMU_DEFINE_RUNTIME 1
#else
#define ASCENDC_EMU_DEFINE_RUNTIME 0
#endif

/* IEEE binary16; conversions from float round to nearest even. */
using half = _Float16;

namespace AscendC {
namespace emu {
/* bfloat16 as a storage type: float conversions round to nearest even, NaN kept quiet. */
struct BF16 {
    uint16_t bits;  // no initialiser: trivial like the device scalar type
    BF16() = default;
    BF16(float f) { bits = FromFloat(f); }  // NOLINT: implicit like the device type
    BF16(double d) : BF16(static_cast<float>(d)) {}
    BF16(int v) : BF16(static_cast<float>(v)) {}
    operator float() const {
        uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static uint16_t FromFloat(float f) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
        u += 0x7fffu + ((u >> 16) & 1u);
        return static_cast<uint16_t>(u >> 16);
    }
};
}  // namespace emu
}  // namespace AscendC

using bfloat16_t = AscendC::emu::BF16;

/* Pipes (global, unscoped, as the compiler builtins define them). */
enum pipe_t : uint8_t {
    PIPE_S = 0,
    PIPE_V,
    PIPE_M,
    PIPE_MTE1,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_ALL,
    PIPE_MTE4,
    PIPE_MTE5,
    PIPE_V2,
    PIPE_FIX,
};

enum event_t : uint8_t {
    EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7,
};

/* Host-side launch mode of the CPU twin-debug library (global in the official samples). */
enum class KernelMode : uint8_t { MIX_MODE = 0, AIC_MODE, AIV_MODE, MIX_AIC_1_1 };

namespace AscendC {
using ::KernelMode;

enum class TPosition : uint8_t {
    GM = 0, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, SPM, TSCM, C2PIPE2GM,
    C2PIPE2LOCAL, MAX,
    LCM = VECCALC,
    SHM = SPM,
};
using QuePosition = TPosition;

enum class HardEvent : uint8_t {
    MTE2_V = 0, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1,
    MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3,
    S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3,
    MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};

enum class RoundMode : uint8_t {
    CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD,
};
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };
enum class ReduceOrder : uint8_t { ORDER_VALUE_INDEX = 0, ORDER_INDEX_VALUE, ORDER_ONLY_VALUE, ORDER_ONLY_INDEX };
enum class CacheMode : uint8_t { CACHE_MODE_DISABLE = 0, CACHE_MODE_NORMAL, CACHE_MODE_LAST, CACHE_MODE_PERSISTENT };
enum KernelType : uint8_t {
    KERNEL_TYPE_AIV_ONLY = 0, KERNEL_TYPE_AIC_ONLY, KERNEL_TYPE_MIX_AIV_1_0, KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1, KERNEL_TYPE_MIX_AIC_1_2,
};

using TEventID = int8_t;

constexpr uint32_t ONE_BLK_SIZE = 32;
constexpr uint32_t DEFAULT_BLK_NUM = 8;
constexpr uint32_t ONE_REPEAT_BYTE_SIZE = 256;
constexpr uint32_t DEFAULT_BLK_STRIDE = 1;
constexpr uint32_t DEFAULT_REPEAT_STRIDE = 8;
constexpr uint32_t MAX_REPEAT_TIMES = 255;
constexpr uint64_t MASK_PLACEHOLDER = 0;
constexpr int32_t QUE_MAX_EVENT = 8;

struct DataCopyParams {
    DataCopyParams() {}
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStrideIn, uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;
    union { uint16_t srcGap = 0; uint16_t srcStride; };
    union { uint16_t dstGap = 0; uint16_t dstStride; };
};

struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn,
                      uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn),
          rsv(rsvIn) {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

struct DataCopyPadParams {
    DataCopyPadParams() {}
    DataCopyPadParams(bool isPadValue, uint8_t left, uint8_t right, uint64_t padValue)
        : isPad(isPadValue), leftPadding(left), rightPadding(right), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    uint64_t paddingValue = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() {}
    DataCopyPadExtParams(bool isPadValue, uint8_t left, uint8_t right, T padValue)
        : isPad(isPadValue), leftPadding(left), rightPadding(right), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = T(0);
};

struct BinaryRepeatParams {
    BinaryRepeatParams() {}
    BinaryRepeatParams(uint8_t dstBlk, uint8_t src0Blk, uint8_t src1Blk, uint8_t dstRep,
                       uint8_t src0Rep, uint8_t src1Rep)
        : dstBlkStride(dstBlk), src0BlkStride(src0Blk), src1BlkStride(src1Blk),
          dstRepStride(dstRep), src0RepStride(src0Rep), src1RepStride(src1Rep) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint8_t dstBlkStride = DEFAULT_BLK_STRIDE;
    uint8_t src0BlkStride = DEFAULT_BLK_STRIDE;
    uint8_t src1BlkStride = DEFAULT_BLK_STRIDE;
    uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t src0RepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t src1RepStride = DEFAULT_REPEAT_STRIDE;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};

struct UnaryRepeatParams {
    UnaryRepeatParams() {}
    UnaryRepeatParams(uint16_t dstBlk, uint16_t srcBlk, uint8_t dstRep, uint8_t srcRep)
        : dstBlkStride(dstBlk), srcBlkStride(srcBlk), dstRepStride(dstRep), srcRepStride(srcRep) {}
    UnaryRepeatParams(uint16_t dstBlk, uint16_t srcBlk, uint8_t dstRep, uint8_t srcRep, bool half)
        : dstBlkStride(dstBlk), srcBlkStride(srcBlk), dstRepStride(dstRep), srcRepStride(srcRep),
          halfBlock(half) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint16_t dstBlkStride = DEFAULT_BLK_STRIDE;
    uint16_t srcBlkStride = DEFAULT_BLK_STRIDE;
    uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t srcRepStride = DEFAULT_REPEAT_STRIDE;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
    bool halfBlock = false;
};

struct BrcbRepeatParams {
    BrcbRepeatParams() {}
    BrcbRepeatParams(uint16_t dstBlk, uint16_t dstRep) : dstRepStride(dstRep), dstBlkStride(dstBlk) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint16_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint16_t dstBlkStride = DEFAULT_BLK_STRIDE;
};

namespace emu {

/* ---- SoC profiles: one row per ASCEND_SOC(...) line of soc_profiles.def ---- */
struct SocProfile {
    const char* name;
    int npu_arch;
    int ai_cores;
    int vector_cores;
    int64_t ub_bytes;
    int64_t l1_bytes;
    int64_t l0a_bytes;
    int64_t l0b_bytes;
    int64_t l0c_bytes;
    int max_live_buffers;
    double clock_mhz;
    double gm_bandwidth_gbps;
    int vector_lanes_fp16;
    /* timing-model columns: carried so the table has one arity; the emulator does not time */
    int64_t l2_bytes;
    int cube_macs_per_cycle_fp16;
    double mte2_bytes_per_cycle;
    double mte3_bytes_per_cycle;
    int vector_issue_cycles;
    double scalar_cycles_per_elem;
    int mte_latency_cycles;
    double hbm_stream_gbps;
    double startup_base_us;
    double startup_all_cores_us;
    double submit_low_us;
    double submit_high_us;
};

#define ASCEND_SOC(name, arch, aic, aiv, ub, l1, l0a, l0b, l0c, live, clk, bw, lanes, l2, cube, \
                   mte2, mte3, issue, scalar, mte_lat, hbm, start, start_all, submit_lo,        \
                   submit_hi)                                                                   \
    SocProfile{#name, arch, aic, aiv, ub, l1, l0a, l0b, l0c, live, clk, bw, lanes, l2, cube,   \
               mte2, mte3, issue, scalar, mte_lat, hbm, start, start_all, submit_lo,          \
               submit_hi},
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcomment"
inline constexpr SocProfile kSocTable[] = {
#include "../soc_profiles.def"
};
#pragma GCC diagnostic pop
#undef ASCEND_SOC
inline constexpr int kSocCount = static_cast<int>(sizeof(kSocTable) / sizeof(kSocTable[0]));

constexpr bool StrEq(const char* a, const char* b) {
    while (*a && *a == *b) { ++a; ++b; }
    return *a == *b;
}
constexpr int SocIndex(const char* name) {
    for (int i = 0; i < kSocCount; ++i) {
        if (StrEq(kSocTable[i].name, name)) return i;
    }
    return -1;
}

#define ASCENDC_EMU_STR2(x) #x
#define ASCENDC_EMU_STR(x) ASCENDC_EMU_STR2(x)
#ifdef ASCENDC_EMU_SOC
inline constexpr const char* kDefaultSocName = ASCENDC_EMU_STR(ASCENDC_EMU_SOC);
#else
inline constexpr const char* kDefaultSocName = "Ascend910B1";
#endif
static_assert(SocIndex(kDefaultSocName) >= 0,
              "ASCENDC_EMU_SOC names no row of soc_profiles.def (use e.g. Ascend910B1, Ascend310P3)");

/* ---- element traits: every vector op computes in float (integers in int64) ---- */
template <typename T>
inline constexpr bool kIsFloatLike = std::is_same<T, float>::value || std::is_same<T, half>::value ||
                                     std::is_same<T, BF16>::value || std::is_same<T, double>::value;
template <typename T>
using CalcT = typename std::conditional<kIsFloatLike<T>, float, int64_t>::type;

template <typename T>
inline CalcT<T> Up(T v) { return static_cast<CalcT<T>>(v); }
template <typename T>
inline T Down(CalcT<T> v) { return static_cast<T>(v); }

template <typename T>
inline const char* TypeName() {
    if (std::is_same<T, half>::value) return "half";
    if (std::is_same<T, float>::value) return "float";
    if (std::is_same<T, BF16>::value) return "bfloat16_t";
    if (std::is_same<T, int32_t>::value) return "int32_t";
    if (std::is_same<T, uint32_t>::value) return "uint32_t";
    if (std::is_same<T, int16_t>::value) return "int16_t";
    if (std::is_same<T, uint16_t>::value) return "uint16_t";
    if (std::is_same<T, int8_t>::value) return "int8_t";
    if (std::is_same<T, uint8_t>::value) return "uint8_t";
    if (std::is_same<T, int64_t>::value) return "int64_t";
    return "T";
}

}  // namespace emu
}  // namespace AscendC

#endif  // ASCENDC_EMU_TYPES_H
