/* ascendc_emu/adv.h: high-level (adv) math/activation APIs in count form, each with and without
 * a sharedTmpBuffer: Sigmoid, Tanh, Erf, Power (scalar and tensor exponent), Sin, Cos, Floor,
 * Ceil, plus Gelu, FasterGelu, Silu.
 *
 * Values are computed with float libm functions (hardware uses approximations: compare with a
 * tolerance). The shared tmp buffer must not overlap src/dst; it is clobbered (0xFF) because the
 * device leaves garbage there. Counters: one op entry per API, instrs = repeats * a fixed
 * estimate of the basic instructions the real implementation issues per repeat.
 */
#ifndef ASCENDC_EMU_ADV_H
#define ASCENDC_EMU_ADV_H

#include "vector_reduce.h"

namespace AscendC {
namespace emu {

inline bool Overlap(const uint8_t* a, uint64_t na, const uint8_t* b, uint64_t nb) {
    return a < b + nb && b < a + na;
}

template <typename T>
inline void CheckTmp(const char* op, const LocalTensor<uint8_t>* tmp, const uint8_t* s, const uint8_t* d,
                     uint64_t bytes) {
    if (tmp == nullptr) return;
    uint64_t tb = tmp->GetSize();
    if (tb == 0) Fail(op, "sharedTmpBuffer is empty");
    uint8_t* t = LocalBytes(*tmp, tb, op, "sharedTmpBuffer", Access::VEC_WRITE);
    if (Overlap(t, tb, s, bytes) || Overlap(t, tb, d, bytes)) {
        Fail(op, "sharedTmpBuffer overlaps src or dst");
    }
    std::memset(t, 0xFF, tb);
}

/* Elementwise adv op: f maps float -> float; k = basic instructions per repeat (estimate). */
template <typename T, typename F>
inline void AdvUnary(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                     const LocalTensor<uint8_t>* tmp, uint32_t count, int k, F f) {
    static_assert(kIsFloatLike<T>, "adv math APIs support half/float");
    if (count == 0) return;
    const uint64_t bytes = uint64_t(count) * sizeof(T);
    const T* s = reinterpret_cast<const T*>(LocalBytes(src, bytes, op, "src", Access::VEC_READ));
    T* d = reinterpret_cast<T*>(LocalBytes(dst, bytes, op, "dst", Access::VEC_WRITE));
    CheckTmp<T>(op, tmp, reinterpret_cast<const uint8_t*>(s), reinterpret_cast<uint8_t*>(d), bytes);
    for (uint32_t i = 0; i < count; ++i) d[i] = Down<T>(f(static_cast<float>(Up(s[i]))));
    CountVector(op, k * Repeats(count, sizeof(T)), count);
}

template <typename T, typename F>
inline void AdvBinary(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                      const LocalTensor<T>& src1, const LocalTensor<uint8_t>* tmp, uint32_t count, int k, F f) {
    static_assert(kIsFloatLike<T>, "adv math APIs support half/float");
    if (count == 0) return;
    const uint64_t bytes = uint64_t(count) * sizeof(T);
    const T* a = reinterpret_cast<const T*>(LocalBytes(src0, bytes, op, "src0", Access::VEC_READ));
    const T* b = reinterpret_cast<const T*>(LocalBytes(src1, bytes, op, "src1", Access::VEC_READ));
    T* d = reinterpret_cast<T*>(LocalBytes(dst, bytes, op, "dst", Access::VEC_WRITE));
    CheckTmp<T>(op, tmp, reinterpret_cast<const uint8_t*>(a), reinterpret_cast<uint8_t*>(d), bytes);
    for (uint32_t i = 0; i < count; ++i) {
        d[i] = Down<T>(f(static_cast<float>(Up(a[i])), static_cast<float>(Up(b[i]))));
    }
    CountVector(op, k * Repeats(count, sizeof(T)), count);
}

inline float SigmoidF(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float GeluF(float x) {  // tanh form, as the adv API implements it
    return x / (1.0f + std::exp(-1.5957691f * (x + 0.044715f * x * x * x)));
}

}  // namespace emu

#define ASCENDC_EMU_ADV_UNARY(NAME, K, EXPR)                                                           \
    template <typename T, bool isReuseSource = false>                                                 \
    inline void NAME(const LocalTensor<T>& dstTensor, const LocalTensor<T>& srcTensor,                \
                     const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount) {          \
        emu::AdvUnary(#NAME, dstTensor, srcTensor, &sharedTmpBuffer, calCount, K,                     \
                      [](float x) { return EXPR; });                                                  \
    }                                                                                                 \
    template <typename T, bool isReuseSource = false>                                                 \
    inline void NAME(const LocalTensor<T>& dstTensor, const LocalTensor<T>& srcTensor,                \
                     const uint32_t calCount) {                                                       \
        emu::AdvUnary(#NAME, dstTensor, srcTensor, static_cast<const LocalTensor<uint8_t>*>(nullptr), \
                      calCount, K, [](float x) { return EXPR; });                                     \
    }

ASCENDC_EMU_ADV_UNARY(Sigmoid, 4, emu::SigmoidF(x))
ASCENDC_EMU_ADV_UNARY(Tanh, 6, std::tanh(x))
ASCENDC_EMU_ADV_UNARY(Erf, 12, std::erf(x))
ASCENDC_EMU_ADV_UNARY(Sin, 16, std::sin(x))
ASCENDC_EMU_ADV_UNARY(Cos, 16, std::cos(x))
ASCENDC_EMU_ADV_UNARY(Floor, 4, std::floor(x))
ASCENDC_EMU_ADV_UNARY(Ceil, 4, std::ceil(x))
ASCENDC_EMU_ADV_UNARY(Silu, 4, x * emu::SigmoidF(x))

/* Gelu / FasterGelu take (dst, src, [tmp,] dataSize) and precision template flags. */
#define ASCENDC_EMU_ADV_GELU(NAME, K, EXPR)                                                            \
    template <typename T, bool highPrecision = false, bool highPerformance = false>                   \
    inline void NAME(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal,                  \
                     const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t dataSize) {          \
        emu::AdvUnary(#NAME, dstLocal, srcLocal, &sharedTmpBuffer, dataSize, K,                       \
                      [](float x) { return EXPR; });                                                  \
    }                                                                                                 \
    template <typename T, bool highPrecision = false, bool highPerformance = false>                   \
    inline void NAME(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const uint32_t dataSize) { \
        emu::AdvUnary(#NAME, dstLocal, srcLocal, static_cast<const LocalTensor<uint8_t>*>(nullptr),   \
                      dataSize, K, [](float x) { return EXPR; });                                     \
    }
ASCENDC_EMU_ADV_GELU(Gelu, 8, emu::GeluF(x))
ASCENDC_EMU_ADV_GELU(FasterGelu, 5, x / (1.0f + std::exp(-1.702f * x)))

/* Power: scalar exponent and tensor exponent forms. */
template <typename T, bool isReuseSource = false>
inline void Power(const LocalTensor<T>& dstTensor, const LocalTensor<T>& src0Tensor, const T& src1Scalar,
                  const LocalTensor<uint8_t>& sharedTmpBuffer, uint32_t calCount) {
    const float e = static_cast<float>(emu::Up(src1Scalar));
    emu::AdvUnary("Power", dstTensor, src0Tensor, &sharedTmpBuffer, calCount, 10,
                  [e](float x) { return std::pow(x, e); });
}
template <typename T, bool isReuseSource = false>
inline void Power(const LocalTensor<T>& dstTensor, const LocalTensor<T>& src0Tensor, const T& src1Scalar,
                  uint32_t calCount) {
    const float e = static_cast<float>(emu::Up(src1Scalar));
    emu::AdvUnary("Power", dstTensor, src0Tensor, static_cast<const LocalTensor<uint8_t>*>(nullptr), calCount,
                  10, [e](float x) { return std::pow(x, e); });
}
template <typename T, bool isReuseSource = false>
inline void Power(const LocalTensor<T>& dstTensor, const LocalTensor<T>& src0Tensor, const LocalTensor<T>& src1Tensor,
                  const LocalTensor<uint8_t>& sharedTmpBuffer, uint32_t calCount) {
    emu::AdvBinary("Power", dstTensor, src0Tensor, src1Tensor, &sharedTmpBuffer, calCount, 10,
                   [](float x, float y) { return std::pow(x, y); });
}
template <typename T, bool isReuseSource = false>
inline void Power(const LocalTensor<T>& dstTensor, const LocalTensor<T>& src0Tensor, const LocalTensor<T>& src1Tensor,
                  uint32_t calCount) {
    emu::AdvBinary("Power", dstTensor, src0Tensor, src1Tensor, static_cast<const LocalTensor<uint8_t>*>(nullptr),
                   calCount, 10, [](float x, float y) { return std::pow(x, y); });
}

}  // namespace AscendC

#endif  // ASCENDC_EMU_ADV_H
