/* ascendc_emu/vector_cast.h: Cast (round modes, saturating integer results), Compare/Compares
 * (bit-mask output) and Select.
 */
#ifndef ASCENDC_EMU_VECTOR_CAST_H
#define ASCENDC_EMU_VECTOR_CAST_H

#include <limits>

#include "vector.h"

namespace AscendC {
namespace emu {

template <typename T>
inline constexpr bool kIs16BitFloat = std::is_same<T, half>::value || std::is_same<T, BF16>::value;

/* Neighbouring value of a 16-bit float, one ulp up (toward +inf) or down. */
template <typename D>
inline D Step16(D r, bool up) {
    uint16_t b;
    std::memcpy(&b, &r, 2);
    bool neg = b & 0x8000u;
    if ((b & 0x7fffu) == 0) {
        b = up ? 0x0001u : 0x8001u;
    } else if (neg == up) {
        --b;
    } else {
        ++b;
    }
    std::memcpy(&r, &b, 2);
    return r;
}

inline double RoundToIntegral(double x, RoundMode m) {
    switch (m) {
        case RoundMode::CAST_FLOOR: return std::floor(x);
        case RoundMode::CAST_CEIL: return std::ceil(x);
        case RoundMode::CAST_ROUND: return std::round(x);
        case RoundMode::CAST_TRUNC: return std::trunc(x);
        default: return std::nearbyint(x);  // CAST_NONE / CAST_RINT / CAST_ODD: nearest even
    }
}

/* float -> half / bfloat16 under a rounding mode. */
template <typename D>
inline D NarrowFloat(double x, RoundMode m) {
    D r = static_cast<D>(static_cast<float>(x));  // nearest even (float is exact for our sources)
    double back = static_cast<double>(static_cast<float>(r));
    if (std::isnan(x) || back == x || std::isinf(back) != std::isinf(x)) return r;
    switch (m) {
        case RoundMode::CAST_FLOOR: return back > x ? Step16(r, false) : r;
        case RoundMode::CAST_CEIL: return back < x ? Step16(r, true) : r;
        case RoundMode::CAST_TRUNC: return std::fabs(back) > std::fabs(x) ? Step16(r, back < 0) : r;
        case RoundMode::CAST_ROUND: {
            D other = Step16(r, back < x);
            double o = static_cast<double>(static_cast<float>(other));
            bool tie = std::fabs(o - x) == std::fabs(back - x);
            return tie && std::fabs(o) > std::fabs(back) ? other : r;
        }
        case RoundMode::CAST_ODD: {
            uint16_t b;
            std::memcpy(&b, &r, 2);
            return (b & 1u) ? r : Step16(r, back < x);
        }
        default: return r;
    }
}

template <typename D>
inline D Saturate(double x) {
    if (std::isnan(x)) return D(0);
    const double lo = static_cast<double>(std::numeric_limits<D>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<D>::max());
    if (x <= lo) return std::numeric_limits<D>::lowest();
    if (x >= hi) return std::numeric_limits<D>::max();
    return static_cast<D>(x);
}

template <typename D, typename S>
inline D ConvertOne(S v, RoundMode m) {
    constexpr bool sf = kIsFloatLike<S>, df = kIsFloatLike<D>;
    if constexpr (sf && df) {
        const double x = static_cast<double>(static_cast<float>(v));
        if constexpr (std::is_same<D, S>::value) {
            if (m == RoundMode::CAST_NONE || m == RoundMode::CAST_ODD) return v;
            return static_cast<D>(static_cast<float>(RoundToIntegral(x, m)));
        } else if constexpr (kIs16BitFloat<D> && sizeof(S) > 2) {
            return NarrowFloat<D>(x, m);
        } else {
            return static_cast<D>(static_cast<float>(x));
        }
    } else if constexpr (sf && !df) {
        return Saturate<D>(RoundToIntegral(static_cast<double>(static_cast<float>(v)), m));
    } else if constexpr (!sf && df) {
        if constexpr (std::is_same<D, half>::value) return static_cast<half>(static_cast<double>(v));
        return static_cast<D>(static_cast<float>(static_cast<double>(v)));
    } else {
        return Saturate<D>(static_cast<double>(v));
    }
}

inline bool CmpOne(double a, double b, CMPMODE m) {
    switch (m) {
        case CMPMODE::LT: return a < b;
        case CMPMODE::GT: return a > b;
        case CMPMODE::EQ: return a == b;
        case CMPMODE::LE: return a <= b;
        case CMPMODE::GE: return a >= b;
        default: return a != b;
    }
}

template <typename T, typename U, typename F>
inline void CompareImpl(const char* op, const LocalTensor<U>& dst, const LocalTensor<T>& src0,
                        uint64_t count, F rhs, const LocalTensor<T>* src1, CMPMODE mode) {
    if (count == 0) return;
    const uint64_t bytes = count * sizeof(T), mbytes = (count + 7) / 8;
    const T* a = reinterpret_cast<const T*>(LocalBytes(src0, bytes, op, "src0", Access::VEC_READ));
    const T* b = src1 ? reinterpret_cast<const T*>(LocalBytes(*src1, bytes, op, "src1", Access::VEC_READ))
                      : nullptr;
    uint8_t* d = LocalBytes(dst.template ReinterpretCast<uint8_t>(), mbytes, op, "dst", Access::VEC_WRITE);
    std::memset(d, 0, mbytes);
    for (uint64_t i = 0; i < count; ++i) {
        const double x = static_cast<double>(Up(a[i]));
        const double y = b ? static_cast<double>(Up(b[i])) : rhs;
        if (CmpOne(x, y, mode)) d[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    }
    CountVector(op, Repeats(count, sizeof(T)), count);
}

}  // namespace emu

/* Cast<dst type, src type>; float->int saturates, NaN -> 0; see RoundMode for the modes. */
template <typename T, typename U>
inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                 const uint32_t count) {
    if (count == 0) return;
    const U* s = reinterpret_cast<const U*>(
        emu::LocalBytes(src, uint64_t(count) * sizeof(U), "Cast", "src", emu::Access::VEC_READ));
    T* d = reinterpret_cast<T*>(
        emu::LocalBytes(dst, uint64_t(count) * sizeof(T), "Cast", "dst", emu::Access::VEC_WRITE));
    const RoundMode m = roundMode;
    if (static_cast<const void*>(s) == static_cast<const void*>(d) && sizeof(T) > sizeof(U)) {
        for (int64_t i = int64_t(count) - 1; i >= 0; --i) d[i] = emu::ConvertOne<T, U>(s[i], m);
    } else {
        for (uint32_t i = 0; i < count; ++i) d[i] = emu::ConvertOne<T, U>(s[i], m);
    }
    emu::CountVector("Cast", emu::Repeats(count, sizeof(T) > sizeof(U) ? sizeof(T) : sizeof(U)), count);
}

/* Compare: bit i of dst (LSB first within each byte) = src0[i] <cmp> src1[i].
 * count * sizeof(T) must be a multiple of 256 bytes. */
template <typename T, typename U>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                    CMPMODE cmpMode, uint32_t count) {
    if ((uint64_t(count) * sizeof(T)) % 256 != 0) {
        emu::Fail("Compare", emu::Cat("count * sizeof(T) = ", uint64_t(count) * sizeof(T),
                                      " B is not a multiple of 256 B"));
    }
    emu::CompareImpl("Compare", dst, src0, count, 0.0, &src1, cmpMode);
}
template <typename T, typename U>
inline void Compares(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar,
                     CMPMODE cmpMode, uint32_t count) {
    emu::CompareImpl("Compares", dst, src0, count, static_cast<double>(emu::Up(src1Scalar)),
                     static_cast<const LocalTensor<T>*>(nullptr), cmpMode);
}

namespace emu {
template <typename T, typename U>
inline void SelectImpl(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                       const LocalTensor<T>* src1, T scalar, SELMODE mode, uint32_t count) {
    const char* op = "Select";
    if (count == 0) return;
    const uint64_t lanes = 256 / sizeof(T);
    const uint64_t bits = mode == SELMODE::VSEL_CMPMASK_SPR ? std::min<uint64_t>(count, lanes) : count;
    const uint8_t* m = LocalBytes(selMask.template ReinterpretCast<uint8_t>(), (bits + 7) / 8, op,
                                  "selMask", Access::VEC_READ);
    const T* a = reinterpret_cast<const T*>(LocalBytes(src0, uint64_t(count) * sizeof(T), op, "src0",
                                                       Access::VEC_READ));
    const T* b = nullptr;
    if (src1 != nullptr) {
        uint64_t n = mode == SELMODE::VSEL_TENSOR_SCALAR_MODE ? 1 : count;
        b = reinterpret_cast<const T*>(LocalBytes(*src1, n * sizeof(T), op, "src1", Access::VEC_READ));
        if (mode == SELMODE::VSEL_TENSOR_SCALAR_MODE) { scalar = b[0]; b = nullptr; }
    }
    T* d = reinterpret_cast<T*>(LocalBytes(dst, uint64_t(count) * sizeof(T), op, "dst", Access::VEC_WRITE));
    for (uint64_t i = 0; i < count; ++i) {
        const uint64_t k = mode == SELMODE::VSEL_CMPMASK_SPR ? i % lanes : i;
        const bool on = (m[k >> 3] >> (k & 7)) & 1u;
        d[i] = on ? a[i] : (b ? b[i] : scalar);
    }
    CountVector(op, Repeats(count, sizeof(T)), count);
}
}  // namespace emu

/* Select: dst[i] = bit i of selMask ? src0[i] : src1[i] (or the scalar). */
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                   const LocalTensor<T>& src1, SELMODE selMode, uint32_t count) {
    emu::SelectImpl(dst, selMask, src0, &src1, T(0), selMode, count);
}
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                   T src1Scalar, SELMODE selMode, uint32_t count) {
    emu::SelectImpl(dst, selMask, src0, static_cast<const LocalTensor<T>*>(nullptr), src1Scalar, selMode, count);
}

}  // namespace AscendC

#endif  // ASCENDC_EMU_VECTOR_CAST_H
