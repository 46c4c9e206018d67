/* ascendc_emu/vector_gather.h: Gather (count form), as CANN 8.x declares it in
 * kernel_operator_vec_gather_intf.h:
 *   template <typename T> void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src,
 *       const LocalTensor<uint32_t>& srcOffset, const uint32_t srcBaseAddr, const uint32_t count);
 * dst[i] = the element of src at byte srcBaseAddr + srcOffset[i]. Types: 16- and 32-bit
 * (half, float, int16/uint16, int32/uint32, bfloat16 on 910B). Checks: every source element lies
 * inside src's buffer and is element aligned; dst does not overlap src (the device gives no
 * order guarantee for that).
 */
#ifndef ASCENDC_EMU_VECTOR_GATHER_H
#define ASCENDC_EMU_VECTOR_GATHER_H

#include <vector>

#include "vector.h"

namespace AscendC {

template <typename T>
inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                   const LocalTensor<uint32_t>& srcOffset, const uint32_t srcBaseAddr,
                   const uint32_t count) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Gather takes 16- or 32-bit element types");
    if (count == 0) return;
    const uint32_t* off = reinterpret_cast<const uint32_t*>(emu::LocalBytes(
        srcOffset, uint64_t(count) * sizeof(uint32_t), "Gather", "srcOffset", emu::Access::VEC_READ));
    const uint64_t srcBytes = uint64_t(src.GetSize()) * sizeof(T);
    const uint8_t* s = emu::LocalBytes(src, srcBytes, "Gather", "src", emu::Access::VEC_READ);
    T* d = reinterpret_cast<T*>(emu::LocalBytes(dst, uint64_t(count) * sizeof(T), "Gather", "dst",
                                                emu::Access::VEC_WRITE));
    const uint8_t* db = reinterpret_cast<const uint8_t*>(d);
    if (db < s + srcBytes && s < db + uint64_t(count) * sizeof(T)) {
        emu::Fail("Gather", "dst overlaps src");
    }
    std::vector<T> out(count);
    for (uint32_t i = 0; i < count; ++i) {
        const uint64_t at = uint64_t(srcBaseAddr) + off[i];
        if (at % sizeof(T) != 0) {
            emu::Fail("Gather", emu::Cat("srcOffset[", i, "] + srcBaseAddr = ", at,
                                         " bytes is not aligned to the element size ", sizeof(T)));
        }
        if (at + sizeof(T) > srcBytes) {
            emu::Fail("Gather", emu::Cat("srcOffset[", i, "] + srcBaseAddr = ", at,
                                         " bytes is outside src (", srcBytes, " bytes)"));
        }
        std::memcpy(&out[i], s + at, sizeof(T));
    }
    std::memcpy(d, out.data(), uint64_t(count) * sizeof(T));
    emu::CountVector("Gather", emu::Repeats(count, sizeof(T)), count);
}

}  // namespace AscendC

#endif  // ASCENDC_EMU_VECTOR_GATHER_H
