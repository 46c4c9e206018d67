/* ascendc_emu/vector_trans5hd.h: TransDataTo5HD (vnchwconv), the vector unit's 16 x 16 block
 * transpose that turns NCHW rows into NC1HWC0 (the 5HD feature map Load3D reads) and a cube
 * product's NZ tile back into rows. Included by load3d.h.
 *
 * 2-byte types: each repeat r reads one 32-byte block (16 values) at srcList[i] + r * srcRepStride
 * blocks for i = 0..15 and writes block j = dstList[j] + r * dstRepStride blocks with value j of
 * every source block: dst_j[i] = src_i[j]. All 16 blocks are read before any is written. One
 * vector instruction per repeat (256 values). Operands in the UB, each address 32-byte aligned.
 * Not emulated: the 1- and 4-byte forms (dstHighHalf / srcHighHalf halves of a block) and the
 * uint64_t address-list overload.
 */
#ifndef ASCENDC_EMU_VECTOR_TRANS5HD_H
#define ASCENDC_EMU_VECTOR_TRANS5HD_H

namespace AscendC {

constexpr int32_t NCHW_CONV_ADDR_LIST_SIZE = 16;

struct TransDataTo5HDParams {
    constexpr TransDataTo5HDParams() = default;
    constexpr TransDataTo5HDParams(bool dstHighHalfIn, bool srcHighHalfIn, uint8_t repeatTimesIn,
                                   uint16_t dstRepStrideIn, uint16_t srcRepStrideIn)
        : dstHighHalf(dstHighHalfIn), srcHighHalf(srcHighHalfIn), repeatTimes(repeatTimesIn),
          dstRepStride(dstRepStrideIn), srcRepStride(srcRepStrideIn) {}
    bool dstHighHalf = false;
    bool srcHighHalf = false;
    uint8_t repeatTimes = 1;
    uint16_t dstRepStride = 0;  // 32-byte blocks between repeats, every destination address
    uint16_t srcRepStride = 0;  // likewise for the sources
};

template <typename T>
inline void TransDataTo5HD(const LocalTensor<T> (&dstList)[NCHW_CONV_ADDR_LIST_SIZE],
                           const LocalTensor<T> (&srcList)[NCHW_CONV_ADDR_LIST_SIZE],
                           const TransDataTo5HDParams& p) {
    const char* op = "TransDataTo5HD";
    if (sizeof(T) != 2) {
        emu::Fail(op, emu::Cat("the ", emu::TypeName<T>(), " form (dstHighHalf / srcHighHalf halves of a block) "
                               "is not emulated; 2-byte types only"));
    }
    if (p.dstHighHalf || p.srcHighHalf) emu::Fail(op, "dstHighHalf / srcHighHalf apply to 1-byte types only");
    if (p.repeatTimes == 0) return;
    const uint64_t n = p.repeatTimes;
    const uint8_t* src[16];
    uint8_t* dst[16];
    for (int i = 0; i < 16; ++i) {
        for (const LocalTensor<T>* t : {&srcList[i], &dstList[i]}) {
            if (t->buf_ == nullptr || emu::MemOf(t->buf_->pos) != emu::Mem::UB) {
                emu::Fail(op, emu::Cat(t == &srcList[i] ? "srcList[" : "dstList[", i, "] is not a UB tensor"));
            }
            if ((t->buf_->offset + t->byteOff_) % 32 != 0) {
                emu::Fail(op, emu::Cat(t == &srcList[i] ? "srcList[" : "dstList[", i, "] starts at UB byte ",
                                       t->buf_->offset + t->byteOff_, ", not 32-byte aligned"));
            }
        }
        src[i] = emu::LocalBytes(srcList[i], ((n - 1) * p.srcRepStride + 1) * 32, op, "src", emu::Access::VEC_READ);
        dst[i] = emu::LocalBytes(dstList[i], ((n - 1) * p.dstRepStride + 1) * 32, op, "dst", emu::Access::VEC_WRITE);
    }
    for (uint64_t r = 0; r < n; ++r) {
        T block[16][16];
        for (int i = 0; i < 16; ++i) std::memcpy(block[i], src[i] + r * p.srcRepStride * 32, 32);
        for (int j = 0; j < 16; ++j) {
            T* d = reinterpret_cast<T*>(dst[j] + r * p.dstRepStride * 32);
            for (int i = 0; i < 16; ++i) d[i] = block[i][j];
        }
    }
    emu::CountVector(op, static_cast<int64_t>(n), static_cast<int64_t>(n) * 256);
}

}  // namespace AscendC

#endif  // ASCENDC_EMU_VECTOR_TRANS5HD_H
