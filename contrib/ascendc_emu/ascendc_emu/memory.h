/* ascendc_emu/memory.h: LocalTensor, GlobalTensor, TPipe, TQue/TQueBind, TBuf and the access
 * checks every API call runs once (bounds, alignment, buffer state, pipe synchronisation).
 */
#ifndef ASCENDC_EMU_MEMORY_H
#define ASCENDC_EMU_MEMORY_H

#include <algorithm>
#include <limits>

#include "core.h"
#include "cross_core.h"

namespace AscendC {

template <typename T>
class LocalTensor;
template <typename T>
class GlobalTensor;

namespace emu {

enum class Access : uint8_t {
    VEC_READ,    // vector op reads (UB operands only)
    VEC_WRITE,   // vector op writes (UB operands only)
    COPY_READ,   // local -> local DataCopy reads (synchronised like the vector pipe)
    COPY_WRITE,  // local -> local DataCopy writes
    MTE_IN,      // MTE2 writes (GM -> local)
    MTE_OUT,     // MTE3 reads (local -> GM)
    SCALAR,      // GetValue / SetValue
};

inline const char* StateName(BufState s) {
    static const char* names[] = {"FREE", "ALLOCATED", "ENQUEUED", "DEQUEUED", "TBUF"};
    return names[static_cast<int>(s)];
}

std::string Describe(const BufferInfo& b);
/* Validate one operand access of `bytes` bytes from byte `off` of buffer `b`; returns host ptr.
 * Checks: live buffer (not freed, pipe not reset), not EnQue'd, 32-byte aligned start (not for
 * scalar access), in bounds, and pipe synchronisation (MTE2->V before vector reads, V->MTE3
 * before copy-out). */
uint8_t* CheckLocal(BufferInfo* b, uint32_t gen, uint64_t off, uint64_t bytes,
                                   const char* api, const char* role, Access kind);
inline void Poison(BufferInfo& b) { std::memset(b.host, 0xFF, b.len); }
[[noreturn]] void GmFail(bool unset, uintptr_t b, uintptr_t e, bool limited, uintptr_t limB,
                                        uintptr_t limE, uintptr_t allocB, size_t allocSize, size_t elem,
                                        const char* api, const char* role);

}  // namespace emu

/* ============================ LocalTensor ============================ */
template <typename T>
class LocalTensor {
 public:
    using PrimType = T;
    LocalTensor() = default;

    T GetValue(uint32_t index) const {
        T v;
        std::memcpy(&v, Ptr(index, 1, "LocalTensor::GetValue", emu::Access::SCALAR), sizeof(T));
        return v;
    }
    void SetValue(uint32_t index, T value) const {
        std::memcpy(Ptr(index, 1, "LocalTensor::SetValue", emu::Access::SCALAR), &value, sizeof(T));
        ++emu::Ctx().c.scalar_writes;
    }
    T& operator()(uint32_t index) const {
        return *reinterpret_cast<T*>(Ptr(index, 1, "LocalTensor::operator()", emu::Access::SCALAR));
    }
    LocalTensor operator[](uint32_t offset) const {
        LocalTensor t = *this;
        t.byteOff_ += static_cast<uint64_t>(offset) * sizeof(T);
        t.size_ = offset < size_ ? size_ - offset : 0;
        return t;
    }
    uint32_t GetSize() const { return size_; }
    uint32_t GetLength() const { return size_ * static_cast<uint32_t>(sizeof(T)); }
    void SetSize(uint32_t size) { size_ = size; }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        LocalTensor<U> t;
        t.buf_ = buf_;
        t.gen_ = gen_;
        t.byteOff_ = byteOff_;
        t.size_ = static_cast<uint32_t>(static_cast<uint64_t>(size_) * sizeof(T) / sizeof(U));
        return t;
    }
    uint64_t GetPhyAddr() const {
        return buf_ ? reinterpret_cast<uint64_t>(buf_->host + byteOff_) : 0;
    }
    uint64_t GetPhyAddr(uint32_t offset) const { return GetPhyAddr() + offset * sizeof(T); }
    TPosition GetPosition() const { return buf_ ? buf_->pos : TPosition::GM; }

    /* emulator internals */
    uint8_t* Ptr(uint64_t index, uint64_t count, const char* api, emu::Access kind,
                 const char* role = "tensor") const {
        return emu::CheckLocal(buf_, gen_, byteOff_ + index * sizeof(T), count * sizeof(T), api,
                               role, kind);
    }
    emu::BufferInfo* buf_ = nullptr;
    uint32_t gen_ = 0;
    uint64_t byteOff_ = 0;
    uint32_t size_ = 0;
};

/* ============================ GlobalTensor ============================ */
template <typename T>
class GlobalTensor {
 public:
    using PrimType = T;
    GlobalTensor() = default;

    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) {
        Bind(buffer);
        size_ = bufferSize;
        limB_ = reinterpret_cast<uintptr_t>(buffer);
        limE_ = limB_ + bufferSize * sizeof(T);
        limited_ = true;
    }
    void SetGlobalBuffer(__gm__ T* buffer) {
        Bind(buffer);
        size_ = 0;
        limited_ = false;
    }
    GlobalTensor operator[](uint64_t offset) const {
        GlobalTensor t = *this;
        t.addr_ = addr_ + offset;
        t.size_ = offset < size_ ? size_ - offset : 0;
        return t;
    }
    T GetValue(uint64_t offset) const {
        T v;
        const uint8_t* p = Check(offset * sizeof(T), sizeof(T), "GlobalTensor::GetValue", "GM");
        emu::GmAccessHook(p, sizeof(T), false, "GlobalTensor::GetValue");
        std::memcpy(&v, p, sizeof(T));
        emu::Ctx().c.gm_read_bytes += sizeof(T);
        return v;
    }
    void SetValue(uint64_t offset, T value) {
        uint8_t* p = Check(offset * sizeof(T), sizeof(T), "GlobalTensor::SetValue", "GM");
        emu::GmAccessHook(p, sizeof(T), true, "GlobalTensor::SetValue");
        ++emu::Ctx().c.scalar_writes;
        std::memcpy(p, &value, sizeof(T));
        emu::Ctx().c.gm_write_bytes += sizeof(T);
        uintptr_t a = reinterpret_cast<uintptr_t>(p);
        emu::RecordGmWrite(a, a + sizeof(T));
    }
    uint64_t GetSize() const { return size_; }
    __gm__ T* GetPhyAddr() const { return addr_; }
    __gm__ T* GetPhyAddr(uint64_t offset) const { return addr_ + offset; }
    void SetL2CacheHint(CacheMode) {}

    /* emulator internals: check [byteOff, byteOff+bytes) from this view's start. */
    uint8_t* Check(uint64_t byteOff, uint64_t bytes, const char* api, const char* role) const {
        uintptr_t b = reinterpret_cast<uintptr_t>(addr_) + byteOff, e = b + bytes;
        if (addr_ == nullptr || (limited_ && (b < limB_ || e > limE_)) ||
            (allocKnown_ && (b < allocB_ || e > allocB_ + allocSize_))) {
            emu::GmFail(addr_ == nullptr, b, e, limited_, limB_, limE_, allocB_, allocSize_, sizeof(T),
                        api, role);
        }
        return reinterpret_cast<uint8_t*>(b);
    }
    T* addr_ = nullptr;
    uint64_t size_ = 0;
    bool limited_ = false;
    uintptr_t limB_ = 0, limE_ = 0;
    bool allocKnown_ = false;
    uintptr_t allocB_ = 0;
    size_t allocSize_ = 0;

 private:
    void Bind(T* buffer) {
        addr_ = buffer;
        allocKnown_ = emu::FindGmAllocation(buffer, &allocB_, &allocSize_);
    }
};

/* ============================ TPipe / queues / TBuf ============================ */
class TPipe;

namespace emu {

/* Common queue implementation; TQue/TQueBind only add the template parameters. */
class QueueBase {
 public:
    QueueBase(TPosition pos, int32_t depth) : pos_(pos), depth_(depth) {}
    QueueBase(const QueueBase&) = delete;
    QueueBase& operator=(const QueueBase&) = delete;

    template <typename T>
    LocalTensor<T> AllocTensor() { return MakeTensor<T>(AllocBuf()); }
    template <typename T>
    void AllocTensor(LocalTensor<T>& t) { t = AllocTensor<T>(); }
    template <typename T>
    bool EnQue(const LocalTensor<T>& t) { return EnQueBuf(t.buf_, t.gen_); }
    template <typename T>
    LocalTensor<T> DeQue() { return MakeTensor<T>(DeQueBuf()); }
    template <typename T>
    void DeQue(LocalTensor<T>& t) { t = DeQue<T>(); }
    template <typename T>
    void FreeTensor(LocalTensor<T>& t) { FreeBuf(t.buf_, t.gen_); }

    BufferInfo* AllocBuf();
    bool EnQueBuf(BufferInfo* b, uint32_t gen);
    BufferInfo* DeQueBuf();
    void FreeBuf(BufferInfo* b, uint32_t gen);

    bool VacantInQue() const {
        int cap = depth_ > 0 ? depth_ : static_cast<int>(bufs_.size());
        return static_cast<int>(fifo_.size()) < cap;
    }
    bool HasTensorInQue() const { return !fifo_.empty(); }
    int32_t GetTensorCountInQue() const { return static_cast<int32_t>(fifo_.size()); }
    bool HasIdleBuffer() const {
        for (auto* b : bufs_) if (b->state == BufState::FREE && !b->released) return true;
        return false;
    }
    void FreeAllEvent() {}

    /* emulator internals */
    TPosition pos_;
    int32_t depth_;
    std::vector<BufferInfo*> bufs_;
    std::vector<BufferInfo*> fifo_;  // a few entries at most

 private:
    BufferInfo* FreeBuffer(const char* api);
    BufferInfo* Own(BufferInfo* b, uint32_t gen, const char* api);
    template <typename T>
    LocalTensor<T> MakeTensor(BufferInfo* b) {
        LocalTensor<T> t;
        t.buf_ = b;
        t.gen_ = b->gen;
        t.byteOff_ = 0;
        t.size_ = b->len / static_cast<uint32_t>(sizeof(T));
        return t;
    }
};

}  // namespace emu

template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind : public emu::QueueBase {
 public:
    TQueBind() : emu::QueueBase(src == TPosition::GM ? dst : src, depth) {}
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public emu::QueueBase {
 public:
    TQue() : emu::QueueBase(pos, depth) {}
};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
 public:
    TBuf() = default;
    TBuf(const TBuf&) = delete;
    TBuf& operator=(const TBuf&) = delete;

    template <typename T>
    LocalTensor<T> Get() {
        emu::BufferInfo* b = Buffer("TBuf::Get");
        return Make<T>(b, 0, b->len / static_cast<uint32_t>(sizeof(T)));
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t len) {
        emu::BufferInfo* b = Buffer("TBuf::Get");
        if (static_cast<uint64_t>(len) * sizeof(T) > b->len) {
            emu::Fail("TBuf::Get", emu::Cat(len, " elements of ", emu::TypeName<T>(), " (",
                                            static_cast<uint64_t>(len) * sizeof(T), " B) exceed the ",
                                            b->len, " B TBuf"));
        }
        return Make<T>(b, 0, len);
    }
    template <typename T>
    LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset) {
        emu::BufferInfo* b = Buffer("TBuf::GetWithOffset");
        if (bufOffset % ONE_BLK_SIZE != 0) {
            emu::Fail("TBuf::GetWithOffset", emu::Cat("byte offset ", bufOffset, " is not 32-byte aligned"));
        }
        if (static_cast<uint64_t>(size) * sizeof(T) + bufOffset > b->len) {
            emu::Fail("TBuf::GetWithOffset",
                      emu::Cat(size, " elements at byte offset ", bufOffset, " need ",
                               static_cast<uint64_t>(size) * sizeof(T) + bufOffset, " B > ", b->len,
                               " B TBuf"));
        }
        return Make<T>(b, bufOffset, size);
    }

    emu::BufferInfo* buf_ = nullptr;

 private:
    emu::BufferInfo* Buffer(const char* api) {
        if (buf_ == nullptr) emu::Fail(api, "TBuf has no buffer (call TPipe::InitBuffer first)");
        if (buf_->released) emu::Fail(api, "TBuf's TPipe was reset or destroyed");
        return buf_;
    }
    template <typename T>
    LocalTensor<T> Make(emu::BufferInfo* b, uint32_t off, uint32_t n) {
        LocalTensor<T> t;
        t.buf_ = b;
        t.gen_ = b->gen;
        t.byteOff_ = off;
        t.size_ = n;
        return t;
    }
};

class TPipe {
 public:
    TPipe();
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;
    ~TPipe();

    template <class Q>
    bool InitBuffer(Q& que, uint8_t num, uint32_t len) {
        static_assert(std::is_base_of<emu::QueueBase, Q>::value, "InitBuffer(que, num, len) needs a TQue");
        if (!que.bufs_.empty() && !que.bufs_.front()->released) {
            emu::Fail("InitBuffer", "InitBuffer called twice for the same queue");
        }
        que.bufs_.clear();
        que.fifo_.clear();
        Carve("InitBuffer", que.pos_, num, len, &que, "TQue", &que.bufs_);
        return true;
    }
    template <TPosition pos>
    bool InitBuffer(TBuf<pos>& buf, uint32_t len) {
        if (buf.buf_ != nullptr && !buf.buf_->released) {
            emu::Fail("InitBuffer", "InitBuffer called twice for the same TBuf");
        }
        std::vector<emu::BufferInfo*> out;
        Carve("InitBuffer", pos, 1, len, &buf, "TBuf", &out);
        buf.buf_ = out[0];
        buf.buf_->state = emu::BufState::TBUF;
        return true;
    }
    void Reset() { Release(false); }
    void Destroy() { Release(false); }

    /* First event ID not currently set for this HardEvent. */
    template <HardEvent evt>
    TEventID FetchEventID();
    TEventID FetchEventID(HardEvent evt);
    template <HardEvent evt>
    TEventID AllocEventID() { return FetchEventID(evt); }
    template <HardEvent evt>
    void ReleaseEventID(TEventID) {}

 private:
    void Carve(const char* api, TPosition pos, uint32_t num, uint32_t len, const void* owner, const char* kind,
               std::vector<emu::BufferInfo*>* out);
    void Release(bool atEnd);

    emu::BlockCtx* ctx_ = nullptr;
    void* prev_ = nullptr;
    int64_t start_[emu::kMemCount] = {};
    int nbuf_ = 0;
    std::vector<emu::BufferInfo*> mine_;
};

inline TPipe* GetTPipePtr() { return static_cast<TPipe*>(emu::Ctx().pipe); }

}  // namespace AscendC

#endif  // ASCENDC_EMU_MEMORY_H
