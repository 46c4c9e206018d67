/* ascendc_emu/vector.h: elementwise vector ops (count and mask/repeat forms), Duplicate, Cast,
 * Compare/Compares/Select, CreateVecIndex, SetVectorMask.
 *
 * Every op computes in float (integers in int64) and rounds to T on store, so half results are
 * rounded to fp16 (nearest even) after every op. Checks run once per call; loops are tight.
 */
#ifndef ASCENDC_EMU_VECTOR_H
#define ASCENDC_EMU_VECTOR_H

#include "data_copy.h"

namespace AscendC {
namespace emu {

[[gnu::noinline]] inline int32_t CheckCount(const char* api, int64_t count) {
    if (count < 0) Fail(api, Cat("count ", count, " is negative"));
    return static_cast<int32_t>(count);
}

template <typename T, typename F>
inline void UnaryCount(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                       int64_t count, F f) {
    if (CheckCount(op, count) == 0) return;
    const uint64_t bytes = uint64_t(count) * sizeof(T);
    const T* s = reinterpret_cast<const T*>(LocalBytes(src, bytes, op, "src", Access::VEC_READ));
    T* d = reinterpret_cast<T*>(LocalBytes(dst, bytes, op, "dst", Access::VEC_WRITE));
    for (int64_t i = 0; i < count; ++i) d[i] = Down<T>(f(Up(s[i])));
    CountVector(op, Repeats(count, sizeof(T)), count);
}

template <typename T, typename F>
inline void BinaryCount(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                        const LocalTensor<T>& src1, int64_t count, F f) {
    if (CheckCount(op, count) == 0) return;
    const uint64_t bytes = uint64_t(count) * sizeof(T);
    const T* a = reinterpret_cast<const T*>(LocalBytes(src0, bytes, op, "src0", Access::VEC_READ));
    const T* b = reinterpret_cast<const T*>(LocalBytes(src1, bytes, op, "src1", Access::VEC_READ));
    T* d = reinterpret_cast<T*>(LocalBytes(dst, bytes, op, "dst", Access::VEC_WRITE));
    for (int64_t i = 0; i < count; ++i) d[i] = Down<T>(f(Up(a[i]), Up(b[i])));
    CountVector(op, Repeats(count, sizeof(T)), count);
}

/* ---- mask / repeat forms: one repeat = 8 blocks of 32 B = 256/sizeof(T) lanes ---- */
struct Mask {
    uint64_t bits[2] = {0, 0};
    int lanes = 0;
    bool On(int e) const { return (bits[e >> 6] >> (e & 63)) & 1u; }
    int Last() const {
        for (int e = lanes - 1; e >= 0; --e) if (On(e)) return e;
        return -1;
    }
    int Count() const { return __builtin_popcountll(bits[0]) + __builtin_popcountll(bits[1]); }
};

template <typename T>
inline Mask ContinuousMask(const char* api, uint64_t mask) {
    Mask m;
    m.lanes = static_cast<int>(256 / sizeof(T));
    if (m.lanes > 128) Fail(api, "mask forms support 16/32/64-bit element types only");
    if (mask < 1 || mask > static_cast<uint64_t>(m.lanes)) {
        Fail(api, Cat("continuous mask ", mask, " is outside [1, ", m.lanes, "] for ", TypeName<T>()));
    }
    for (uint64_t e = 0; e < mask; ++e) m.bits[e >> 6] |= 1ull << (e & 63);
    return m;
}
template <typename T>
inline Mask BitMask(const char* api, const uint64_t* mask) {
    Mask m;
    m.lanes = static_cast<int>(256 / sizeof(T));
    if (m.lanes > 128) Fail(api, "mask forms support 16/32/64-bit element types only");
    m.bits[0] = mask[0] & (m.lanes >= 64 ? ~0ull : ((1ull << m.lanes) - 1));
    m.bits[1] = m.lanes > 64 ? mask[1] : 0;
    if (m.bits[0] == 0 && m.bits[1] == 0) Fail(api, "bit mask selects no element");
    return m;
}
template <typename T, bool isSetMask>
inline Mask Resolve(const char* api, const Mask& given) {
    if (isSetMask) return given;
    Mask m;
    m.lanes = static_cast<int>(256 / sizeof(T));
    m.bits[0] = Ctx().vec_mask[0] & (m.lanes >= 64 ? ~0ull : ((1ull << m.lanes) - 1));
    m.bits[1] = m.lanes > 64 ? Ctx().vec_mask[1] : 0;
    if (m.bits[0] == 0 && m.bits[1] == 0) Fail(api, "vector mask set by SetVectorMask selects no element");
    return m;
}

/* Bytes touched by `repeat` repeats with the given strides (in 32-byte blocks). */
template <typename T>
inline uint64_t MaskExtent(const Mask& m, uint32_t repeat, uint32_t blkStride, uint32_t repStride) {
    const int lpb = 32 / sizeof(T), last = m.Last();
    return ((uint64_t(repeat) - 1) * repStride + uint64_t(last / lpb) * blkStride) * 32 +
           uint64_t(last % lpb + 1) * sizeof(T);
}
template <typename T>
inline uint64_t MaskIndex(uint32_t r, int e, uint32_t blkStride, uint32_t repStride) {
    const int lpb = 32 / sizeof(T);
    return ((uint64_t(r) * repStride + uint64_t(e / lpb) * blkStride) * 32) / sizeof(T) + e % lpb;
}
[[gnu::noinline]] inline void CheckRepeat(const char* api, int64_t repeat) {
    if (repeat < 0 || repeat > 255) Fail(api, Cat("repeatTime ", repeat, " is outside [0, 255]"));
}

template <typename T, typename F>
inline void BinaryMask(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                       const LocalTensor<T>& src1, const Mask& m, int64_t repeat,
                       const BinaryRepeatParams& p, F f) {
    CheckRepeat(op, repeat);
    if (repeat == 0) return;
    const T* a = reinterpret_cast<const T*>(LocalBytes(
        src0, MaskExtent<T>(m, repeat, p.src0BlkStride, p.src0RepStride), op, "src0", Access::VEC_READ));
    const T* b = reinterpret_cast<const T*>(LocalBytes(
        src1, MaskExtent<T>(m, repeat, p.src1BlkStride, p.src1RepStride), op, "src1", Access::VEC_READ));
    T* d = reinterpret_cast<T*>(LocalBytes(
        dst, MaskExtent<T>(m, repeat, p.dstBlkStride, p.dstRepStride), op, "dst", Access::VEC_WRITE));
    for (uint32_t r = 0; r < repeat; ++r) {
        for (int e = 0; e < m.lanes; ++e) {
            if (!m.On(e)) continue;
            d[MaskIndex<T>(r, e, p.dstBlkStride, p.dstRepStride)] =
                Down<T>(f(Up(a[MaskIndex<T>(r, e, p.src0BlkStride, p.src0RepStride)]),
                          Up(b[MaskIndex<T>(r, e, p.src1BlkStride, p.src1RepStride)])));
        }
    }
    CountVector(op, repeat, repeat * m.Count());
}

template <typename T, typename F>
inline void UnaryMask(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                      const Mask& m, int64_t repeat, const UnaryRepeatParams& p, F f) {
    CheckRepeat(op, repeat);
    if (repeat == 0) return;
    const T* s = reinterpret_cast<const T*>(LocalBytes(
        src, MaskExtent<T>(m, repeat, p.srcBlkStride, p.srcRepStride), op, "src", Access::VEC_READ));
    T* d = reinterpret_cast<T*>(LocalBytes(
        dst, MaskExtent<T>(m, repeat, p.dstBlkStride, p.dstRepStride), op, "dst", Access::VEC_WRITE));
    for (uint32_t r = 0; r < repeat; ++r) {
        for (int e = 0; e < m.lanes; ++e) {
            if (!m.On(e)) continue;
            d[MaskIndex<T>(r, e, p.dstBlkStride, p.dstRepStride)] =
                Down<T>(f(Up(s[MaskIndex<T>(r, e, p.srcBlkStride, p.srcRepStride)])));
        }
    }
    CountVector(op, repeat, repeat * m.Count());
}

}  // namespace emu

inline void SetMaskNorm() {}
inline void ResetMask() { emu::Ctx().vec_mask[0] = emu::Ctx().vec_mask[1] = ~0ull; }
template <typename T>
inline void SetVectorMask(const uint64_t maskHigh, const uint64_t maskLow) {
    emu::Ctx().vec_mask[0] = maskLow;
    emu::Ctx().vec_mask[1] = maskHigh;
}
template <typename T>
inline void SetVectorMask(int32_t len) {
    emu::Mask m = emu::ContinuousMask<T>("SetVectorMask", static_cast<uint64_t>(len));
    emu::Ctx().vec_mask[0] = m.bits[0];
    emu::Ctx().vec_mask[1] = m.bits[1];
}

#define ASCENDC_EMU_FLOAT_ONLY(NAME) \
    static_assert(emu::kIsFloatLike<T>, #NAME " supports half/float/bfloat16_t only")

/* Binary ops: count form and both mask forms. */
#define ASCENDC_EMU_BINARY(NAME, CHECK, EXPR)                                                        \
    template <typename T>                                                                           \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0,                        \
                     const LocalTensor<T>& src1, const int32_t& count) {                          \
        CHECK;                                                                                      \
        using C = emu::CalcT<T>;                                                                    \
        emu::BinaryCount(#NAME, dst, src0, src1, count, [](C a, C b) -> C { return EXPR; });       \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0,                        \
                     const LocalTensor<T>& src1, const uint64_t mask[], const uint8_t repeatTime,  \
                     const BinaryRepeatParams& repeatParams) {                                      \
        CHECK;                                                                                      \
        using C = emu::CalcT<T>;                                                                    \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::BitMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::BinaryMask(#NAME, dst, src0, src1, m, repeatTime, repeatParams,                       \
                        [](C a, C b) -> C { return EXPR; });                                       \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0,                        \
                     const LocalTensor<T>& src1, uint64_t mask, const uint8_t repeatTime,          \
                     const BinaryRepeatParams& repeatParams) {                                      \
        CHECK;                                                                                      \
        using C = emu::CalcT<T>;                                                                    \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::ContinuousMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::BinaryMask(#NAME, dst, src0, src1, m, repeatTime, repeatParams,                       \
                        [](C a, C b) -> C { return EXPR; });                                       \
    }

ASCENDC_EMU_BINARY(Add, (void)0, a + b)
ASCENDC_EMU_BINARY(Sub, (void)0, a - b)
ASCENDC_EMU_BINARY(Mul, (void)0, a * b)
ASCENDC_EMU_BINARY(Div, ASCENDC_EMU_FLOAT_ONLY(Div), a / b)
ASCENDC_EMU_BINARY(Max, (void)0, a > b ? a : b)
ASCENDC_EMU_BINARY(Min, (void)0, a < b ? a : b)
ASCENDC_EMU_BINARY(AddRelu, (void)0, a + b > C(0) ? a + b : C(0))
ASCENDC_EMU_BINARY(SubRelu, (void)0, a - b > C(0) ? a - b : C(0))
ASCENDC_EMU_BINARY(And, static_assert(!emu::kIsFloatLike<T>, "And needs an integer type"), a & b)
ASCENDC_EMU_BINARY(Or, static_assert(!emu::kIsFloatLike<T>, "Or needs an integer type"), a | b)

/* Unary ops. */
#define ASCENDC_EMU_UNARY(NAME, CHECK, EXPR)                                                         \
    template <typename T>                                                                           \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) { \
        CHECK;                                                                                      \
        using C = emu::CalcT<T>;                                                                    \
        emu::UnaryCount(#NAME, dst, src, count, [](C a) -> C { return EXPR; });                    \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],  \
                     const uint8_t repeatTime, const UnaryRepeatParams& repeatParams) {             \
        CHECK;                                                                                      \
        using C = emu::CalcT<T>;                                                                    \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::BitMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::UnaryMask(#NAME, dst, src, m, repeatTime, repeatParams, [](C a) -> C { return EXPR; }); \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask,          \
                     const uint8_t repeatTime, const UnaryRepeatParams& repeatParams) {             \
        CHECK;                                                                                      \
        using C = emu::CalcT<T>;                                                                    \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::ContinuousMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::UnaryMask(#NAME, dst, src, m, repeatTime, repeatParams, [](C a) -> C { return EXPR; }); \
    }

ASCENDC_EMU_UNARY(Exp, ASCENDC_EMU_FLOAT_ONLY(Exp), std::exp(a))
ASCENDC_EMU_UNARY(Ln, ASCENDC_EMU_FLOAT_ONLY(Ln), std::log(a))
ASCENDC_EMU_UNARY(Abs, (void)0, a < C(0) ? -a : a)
ASCENDC_EMU_UNARY(Reciprocal, ASCENDC_EMU_FLOAT_ONLY(Reciprocal), C(1) / a)
ASCENDC_EMU_UNARY(Sqrt, ASCENDC_EMU_FLOAT_ONLY(Sqrt), std::sqrt(a))
ASCENDC_EMU_UNARY(Rsqrt, ASCENDC_EMU_FLOAT_ONLY(Rsqrt), C(1) / std::sqrt(a))
ASCENDC_EMU_UNARY(Relu, (void)0, a > C(0) ? a : C(0))
ASCENDC_EMU_UNARY(Not, static_assert(!emu::kIsFloatLike<T>, "Not needs an integer type"), ~a)

/* Tensor-scalar ops (scalar is const T&, as in CANN 8.x). */
#define ASCENDC_EMU_SCALAR(NAME, EXPR)                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,   \
                     const int32_t& count) {                                                        \
        using C = emu::CalcT<T>;                                                                    \
        const C s = emu::Up(scalarValue);                                                           \
        emu::UnaryCount(#NAME, dst, src, count, [s](C a) -> C { return EXPR; });                   \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,   \
                     const uint64_t mask[], const uint8_t repeatTime,                               \
                     const UnaryRepeatParams& repeatParams) {                                       \
        using C = emu::CalcT<T>;                                                                    \
        const C s = emu::Up(scalarValue);                                                           \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::BitMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::UnaryMask(#NAME, dst, src, m, repeatTime, repeatParams, [s](C a) -> C { return EXPR; }); \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,   \
                     uint64_t mask, const uint8_t repeatTime, const UnaryRepeatParams& repeatParams) { \
        using C = emu::CalcT<T>;                                                                    \
        const C s = emu::Up(scalarValue);                                                           \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::ContinuousMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::UnaryMask(#NAME, dst, src, m, repeatTime, repeatParams, [s](C a) -> C { return EXPR; }); \
    }

ASCENDC_EMU_SCALAR(Adds, a + s)
ASCENDC_EMU_SCALAR(Muls, a * s)
ASCENDC_EMU_SCALAR(Maxs, a > s ? a : s)
ASCENDC_EMU_SCALAR(Mins, a < s ? a : s)
ASCENDC_EMU_SCALAR(LeakyRelu, a >= C(0) ? a : a * s)

/* ---------------- Duplicate ---------------- */
template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
    if (emu::CheckCount("Duplicate", count) == 0) return;
    T* d = reinterpret_cast<T*>(emu::LocalBytes(dst, uint64_t(count) * sizeof(T), "Duplicate", "dst",
                                                emu::Access::VEC_WRITE));
    const T v = scalarValue;
    for (int32_t i = 0; i < count; ++i) d[i] = v;
    emu::CountVector("Duplicate", emu::Repeats(count, sizeof(T)), count);
}
template <typename T, bool isSetMask = true>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, uint64_t mask, const uint8_t repeatTime,
                      const uint16_t dstBlockStride, const uint8_t dstRepeatStride) {
    emu::Mask m = emu::Resolve<T, isSetMask>("Duplicate", isSetMask ? emu::ContinuousMask<T>("Duplicate", mask) : emu::Mask{});
    UnaryRepeatParams p(dstBlockStride, dstBlockStride, dstRepeatStride, dstRepeatStride);
    const T v = scalarValue;
    emu::UnaryMask("Duplicate", dst, dst, m, repeatTime, p, [v](emu::CalcT<T>) { return emu::Up(v); });
}
template <typename T, bool isSetMask = true>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const uint64_t mask[], const uint8_t repeatTime,
                      const uint16_t dstBlockStride, const uint8_t dstRepeatStride) {
    emu::Mask m = emu::Resolve<T, isSetMask>("Duplicate", isSetMask ? emu::BitMask<T>("Duplicate", mask) : emu::Mask{});
    UnaryRepeatParams p(dstBlockStride, dstBlockStride, dstRepeatStride, dstRepeatStride);
    const T v = scalarValue;
    emu::UnaryMask("Duplicate", dst, dst, m, repeatTime, p, [v](emu::CalcT<T>) { return emu::Up(v); });
}

template <typename T>
inline void CreateVecIndex(const LocalTensor<T>& dst, const T& firstValue, uint32_t count) {
    if (count == 0) return;
    T* d = reinterpret_cast<T*>(emu::LocalBytes(dst, uint64_t(count) * sizeof(T), "CreateVecIndex", "dst",
                                                emu::Access::VEC_WRITE));
    const auto f = emu::Up(firstValue);
    for (uint32_t i = 0; i < count; ++i) d[i] = emu::Down<T>(f + static_cast<emu::CalcT<T>>(i));
    emu::CountVector("CreateVecIndex", emu::Repeats(count, sizeof(T)), count);
}

}  // namespace AscendC

#include "vector_cast.h"

#endif  // ASCENDC_EMU_VECTOR_H
