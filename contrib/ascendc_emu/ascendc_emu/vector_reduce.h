/* ascendc_emu/vector_reduce.h: ReduceSum/ReduceMax/ReduceMin (whole range, result in dst[0]),
 * WholeReduceSum/WholeReduceMax/WholeReduceMin (one result per repeat) and Brcb.
 *
 * Sums use a pairwise (binary tree) order over each 256-byte repeat, rounding to T after every
 * addition, then reduce the per-repeat partials the same way: the order the hardware uses.
 */
#ifndef ASCENDC_EMU_VECTOR_REDUCE_H
#define ASCENDC_EMU_VECTOR_REDUCE_H

#include "vector_cast.h"

namespace AscendC {
namespace emu {

/* Pairwise sum of n values (n <= 128), rounding to T after every addition. */
template <typename T>
inline float TreeSum(float* v, int n) {
    if (n <= 0) return 0.0f;
    while (n > 1) {
        int h = (n + 1) / 2;
        for (int i = 0; i < h; ++i) {
            float a = v[2 * i], b = (2 * i + 1 < n) ? v[2 * i + 1] : 0.0f;
            v[i] = static_cast<float>(Down<T>(a + b));
        }
        n = h;
    }
    return v[0];
}

/* Sum count contiguous values: tree per repeat of `lanes`, then over the partials. */
template <typename T>
inline float RepeatTreeSum(const T* s, int64_t count, T* partials, int64_t* instrs) {
    const int lanes = static_cast<int>(256 / sizeof(T));
    std::vector<float> level;
    level.reserve(static_cast<size_t>((count + lanes - 1) / lanes));
    float buf[128];
    for (int64_t i = 0; i < count; i += lanes) {
        int n = static_cast<int>(std::min<int64_t>(lanes, count - i));
        for (int k = 0; k < n; ++k) buf[k] = static_cast<float>(Up(s[i + k]));
        level.push_back(TreeSum<T>(buf, n));
        ++*instrs;
    }
    for (size_t k = 0; k < level.size(); ++k) partials[k] = Down<T>(level[k]);
    while (level.size() > 1) {
        std::vector<float> next;
        for (size_t i = 0; i < level.size(); i += lanes) {
            int n = static_cast<int>(std::min<size_t>(lanes, level.size() - i));
            for (int k = 0; k < n; ++k) buf[k] = level[i + k];
            next.push_back(TreeSum<T>(buf, n));
            ++*instrs;
        }
        level.swap(next);
    }
    return level.empty() ? 0.0f : level[0];
}

template <typename T>
inline T* ReduceWork(const char* op, const LocalTensor<T>& work, int64_t count) {
    const int64_t lanes = 256 / sizeof(T), need = (count + lanes - 1) / lanes;
    if (int64_t(work.GetSize()) < need) {
        Fail(op, Cat("work tensor holds ", work.GetSize(), " elements, needs at least ", need,
                     " (one per 256-byte repeat of the ", count, " inputs)"));
    }
    return reinterpret_cast<T*>(LocalBytes(work, need * sizeof(T), op, "work", Access::VEC_WRITE));
}

template <typename T>
inline void StoreIndex(T* at, uint64_t index) {
    if (sizeof(T) == 2) {
        uint16_t v = static_cast<uint16_t>(index);
        std::memcpy(at, &v, 2);
    } else {
        uint32_t v = static_cast<uint32_t>(index);
        std::memcpy(at, &v, 4);
    }
}

template <typename T, bool isMax>
inline void ReduceExtreme(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                          const LocalTensor<T>& work, int64_t count, bool calIndex) {
    static_assert(kIsFloatLike<T>, "Reduce APIs support half/float");
    if (CheckCount(op, count) == 0) return;
    const T* s = reinterpret_cast<const T*>(LocalBytes(src, count * sizeof(T), op, "src", Access::VEC_READ));
    T* w = ReduceWork(op, work, count);
    T* d = reinterpret_cast<T*>(LocalBytes(dst, (calIndex ? 2 : 1) * sizeof(T), op, "dst", Access::VEC_WRITE));
    const int64_t lanes = 256 / sizeof(T);
    float best = static_cast<float>(Up(s[0]));
    int64_t at = 0;
    for (int64_t i = 0; i < count; ++i) {
        float v = static_cast<float>(Up(s[i]));
        if (isMax ? v > best : v < best) { best = v; at = i; }
        if (i % lanes == lanes - 1 || i == count - 1) w[i / lanes] = Down<T>(best);
    }
    d[0] = Down<T>(best);
    if (calIndex) StoreIndex(d + 1, static_cast<uint64_t>(at));
    CountVector(op, 2 * ((count + lanes - 1) / lanes), count);
}

template <typename T, bool isMax>
inline void WholeReduceExtreme(const char* op, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                               const Mask& m, int32_t repeat, int32_t dstRepStride, int32_t srcBlkStride,
                               int32_t srcRepStride, ReduceOrder order) {
    static_assert(kIsFloatLike<T>, "WholeReduce APIs support half/float");
    CheckRepeat(op, repeat);
    if (repeat == 0) return;
    const T* s = reinterpret_cast<const T*>(LocalBytes(
        src, MaskExtent<T>(m, repeat, srcBlkStride, srcRepStride), op, "src", Access::VEC_READ));
    const bool pair = order == ReduceOrder::ORDER_VALUE_INDEX || order == ReduceOrder::ORDER_INDEX_VALUE;
    const uint64_t unit = order == ReduceOrder::ORDER_ONLY_INDEX ? 4 : (pair ? 2 : 1) * sizeof(T);
    uint8_t* d = LocalBytes(dst, (uint64_t(repeat - 1) * dstRepStride) * unit + unit, op, "dst",
                            Access::VEC_WRITE);
    for (int32_t r = 0; r < repeat; ++r) {
        float best = 0.0f;
        int idx = -1;
        for (int e = 0; e < m.lanes; ++e) {
            if (!m.On(e)) continue;
            float v = static_cast<float>(Up(s[MaskIndex<T>(r, e, srcBlkStride, srcRepStride)]));
            if (idx < 0 || (isMax ? v > best : v < best)) { best = v; idx = e; }
        }
        T* out = reinterpret_cast<T*>(d + uint64_t(r) * dstRepStride * unit);
        switch (order) {
            case ReduceOrder::ORDER_VALUE_INDEX: out[0] = Down<T>(best); StoreIndex(out + 1, idx); break;
            case ReduceOrder::ORDER_INDEX_VALUE: StoreIndex(out, idx); out[1] = Down<T>(best); break;
            case ReduceOrder::ORDER_ONLY_VALUE: out[0] = Down<T>(best); break;
            case ReduceOrder::ORDER_ONLY_INDEX: {
                uint32_t v = static_cast<uint32_t>(idx);
                std::memcpy(out, &v, 4);
                break;
            }
        }
    }
    CountVector(op, repeat, int64_t(repeat) * m.Count());
}

template <typename T>
inline void WholeReduceSumImpl(const LocalTensor<T>& dst, const LocalTensor<T>& src, const Mask& m,
                               int32_t repeat, int32_t dstRepStride, int32_t srcBlkStride,
                               int32_t srcRepStride) {
    static_assert(kIsFloatLike<T>, "WholeReduceSum supports half/float");
    const char* op = "WholeReduceSum";
    CheckRepeat(op, repeat);
    if (repeat == 0) return;
    const T* s = reinterpret_cast<const T*>(LocalBytes(
        src, MaskExtent<T>(m, repeat, srcBlkStride, srcRepStride), op, "src", Access::VEC_READ));
    T* d = reinterpret_cast<T*>(LocalBytes(dst, (uint64_t(repeat - 1) * dstRepStride + 1) * sizeof(T), op,
                                           "dst", Access::VEC_WRITE));
    float buf[128];
    for (int32_t r = 0; r < repeat; ++r) {
        for (int e = 0; e < m.lanes; ++e) {
            buf[e] = m.On(e) ? static_cast<float>(Up(s[MaskIndex<T>(r, e, srcBlkStride, srcRepStride)])) : 0.0f;
        }
        d[uint64_t(r) * dstRepStride] = Down<T>(TreeSum<T>(buf, m.Last() + 1));
    }
    CountVector(op, repeat, int64_t(repeat) * m.Count());
}

}  // namespace emu

template <typename T, bool isSetMask = true>
inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                      const int32_t count) {
    static_assert(emu::kIsFloatLike<T>, "ReduceSum supports half/float");
    const char* op = "ReduceSum";
    if (emu::CheckCount(op, count) == 0) return;
    const T* s = reinterpret_cast<const T*>(emu::LocalBytes(src, int64_t(count) * sizeof(T), op, "src",
                                                            emu::Access::VEC_READ));
    T* w = emu::ReduceWork(op, sharedTmpBuffer, count);
    T* d = reinterpret_cast<T*>(emu::LocalBytes(dst, sizeof(T), op, "dst", emu::Access::VEC_WRITE));
    int64_t instrs = 0;
    float total = emu::RepeatTreeSum<T>(s, count, w, &instrs);
    d[0] = emu::Down<T>(total);
    emu::CountVector(op, instrs, count);
}
template <typename T>
inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                      const int32_t count, bool calIndex = false) {
    emu::ReduceExtreme<T, true>("ReduceMax", dst, src, sharedTmpBuffer, count, calIndex);
}
template <typename T>
inline void ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                      const int32_t count, bool calIndex = false) {
    emu::ReduceExtreme<T, false>("ReduceMin", dst, src, sharedTmpBuffer, count, calIndex);
}

/* CANN 8.x per-repeat reductions: (dst, src, mask, repeatTime, dstRepStride, srcBlkStride,
 * srcRepStride). dstRepStride counts output units (one value, or one value/index pair). */
template <typename T, bool isSetMask = true>
inline void WholeReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t mask,
                           const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride,
                           const int32_t srcRepStride) {
    emu::Mask m = emu::Resolve<T, isSetMask>("WholeReduceSum", isSetMask ? emu::ContinuousMask<T>("WholeReduceSum", mask) : emu::Mask{});
    emu::WholeReduceSumImpl(dst, src, m, repeatTime, dstRepStride, srcBlkStride, srcRepStride);
}
template <typename T, bool isSetMask = true>
inline void WholeReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],
                           const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride,
                           const int32_t srcRepStride) {
    emu::Mask m = emu::Resolve<T, isSetMask>("WholeReduceSum", isSetMask ? emu::BitMask<T>("WholeReduceSum", mask) : emu::Mask{});
    emu::WholeReduceSumImpl(dst, src, m, repeatTime, dstRepStride, srcBlkStride, srcRepStride);
}

#define ASCENDC_EMU_WHOLE_EXTREME(NAME, IS_MAX)                                                       \
    template <typename T, bool isSetMask = true>                                                     \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t mask,       \
                     const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride, \
                     const int32_t srcRepStride, ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX) { \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::ContinuousMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::WholeReduceExtreme<T, IS_MAX>(#NAME, dst, src, m, repeatTime, dstRepStride, srcBlkStride, \
                                           srcRepStride, order);                                     \
    }                                                                                                \
    template <typename T, bool isSetMask = true>                                                     \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],    \
                     const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride, \
                     const int32_t srcRepStride, ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX) { \
        emu::Mask m = emu::Resolve<T, isSetMask>(#NAME, isSetMask ? emu::BitMask<T>(#NAME, mask) : emu::Mask{}); \
        emu::WholeReduceExtreme<T, IS_MAX>(#NAME, dst, src, m, repeatTime, dstRepStride, srcBlkStride, \
                                           srcRepStride, order);                                     \
    }
ASCENDC_EMU_WHOLE_EXTREME(WholeReduceMax, true)
ASCENDC_EMU_WHOLE_EXTREME(WholeReduceMin, false)

/* Brcb: each of the 8 source elements of a repeat fills one 32-byte block of dst. */
template <typename T>
inline void Brcb(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint8_t repeatTime,
                 const BrcbRepeatParams& repeatParams) {
    const char* op = "Brcb";
    if (repeatTime == 0) return;
    const uint64_t lpb = 32 / sizeof(T), rs = repeatParams.dstRepStride, bs = repeatParams.dstBlkStride;
    const T* s = reinterpret_cast<const T*>(
        emu::LocalBytes(src, uint64_t(repeatTime) * 8 * sizeof(T), op, "src", emu::Access::VEC_READ));
    uint8_t* d = emu::LocalBytes(dst, ((uint64_t(repeatTime) - 1) * rs + 7 * bs) * 32 + 32, op, "dst",
                                 emu::Access::VEC_WRITE);
    for (uint64_t r = 0; r < repeatTime; ++r) {
        for (uint64_t j = 0; j < 8; ++j) {
            T* blk = reinterpret_cast<T*>(d + (r * rs + j * bs) * 32);
            const T v = s[r * 8 + j];
            for (uint64_t l = 0; l < lpb; ++l) blk[l] = v;
        }
    }
    emu::CountVector(op, repeatTime, int64_t(repeatTime) * 8 * int64_t(lpb));
}

}  // namespace AscendC

#endif  // ASCENDC_EMU_VECTOR_REDUCE_H
