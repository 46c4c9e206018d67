/* ascendc_emu/data_copy.h: DataCopy (six forms), DataCopyPad (both directions), pipe
 * synchronisation (PipeBarrier, SetFlag/WaitFlag, TQueSync) and atomic-add GM writes.
 */
#ifndef ASCENDC_EMU_DATA_COPY_H
#define ASCENDC_EMU_DATA_COPY_H

#include "memory.h"

namespace AscendC {
namespace emu {

struct EventPipes {
    pipe_t src, dst;
    const char* name;
};
inline const EventPipes& EventInfo(HardEvent e) {
    static const EventPipes table[] = {
        {PIPE_MTE2, PIPE_V, "MTE2_V"}, {PIPE_V, PIPE_MTE2, "V_MTE2"}, {PIPE_MTE3, PIPE_V, "MTE3_V"},
        {PIPE_V, PIPE_MTE3, "V_MTE3"}, {PIPE_M, PIPE_V, "M_V"}, {PIPE_V, PIPE_M, "V_M"},
        {PIPE_V, PIPE_V, "V_V"}, {PIPE_MTE2, PIPE_MTE1, "MTE2_MTE1"}, {PIPE_MTE1, PIPE_MTE2, "MTE1_MTE2"},
        {PIPE_MTE1, PIPE_M, "MTE1_M"}, {PIPE_M, PIPE_MTE1, "M_MTE1"}, {PIPE_MTE3, PIPE_MTE1, "MTE3_MTE1"},
        {PIPE_MTE1, PIPE_MTE3, "MTE1_MTE3"}, {PIPE_MTE1, PIPE_V, "MTE1_V"}, {PIPE_MTE2, PIPE_M, "MTE2_M"},
        {PIPE_M, PIPE_MTE2, "M_MTE2"}, {PIPE_V, PIPE_MTE1, "V_MTE1"}, {PIPE_M, PIPE_FIX, "M_FIX"},
        {PIPE_FIX, PIPE_M, "FIX_M"}, {PIPE_MTE3, PIPE_MTE2, "MTE3_MTE2"}, {PIPE_MTE2, PIPE_MTE3, "MTE2_MTE3"},
        {PIPE_S, PIPE_V, "S_V"}, {PIPE_V, PIPE_S, "V_S"}, {PIPE_S, PIPE_MTE2, "S_MTE2"},
        {PIPE_MTE2, PIPE_S, "MTE2_S"}, {PIPE_S, PIPE_MTE3, "S_MTE3"}, {PIPE_MTE3, PIPE_S, "MTE3_S"},
        {PIPE_MTE2, PIPE_FIX, "MTE2_FIX"}, {PIPE_FIX, PIPE_MTE2, "FIX_MTE2"}, {PIPE_FIX, PIPE_S, "FIX_S"},
        {PIPE_M, PIPE_S, "M_S"}, {PIPE_FIX, PIPE_MTE3, "FIX_MTE3"}, {PIPE_MTE1, PIPE_FIX, "MTE1_FIX"},
        {PIPE_FIX, PIPE_MTE1, "FIX_MTE1"}, {PIPE_FIX, PIPE_FIX, "FIX_FIX"},
    };
    return table[static_cast<int>(e)];
}
inline const char* PipeName(pipe_t p) {
    static const char* n[] = {"PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3",
                              "PIPE_ALL", "PIPE_MTE4", "PIPE_MTE5", "PIPE_V2", "PIPE_FIX"};
    return static_cast<int>(p) <= 10 ? n[static_cast<int>(p)] : "PIPE_?";
}

/* Synchronisation between two pipes clears the matching pending-write ranges. */
void SyncPipes(pipe_t src, pipe_t dst);
void SetFlagImpl(pipe_t src, pipe_t dst, int32_t id, const std::string& api);
void WaitFlagImpl(pipe_t src, pipe_t dst, int32_t id, const std::string& api);
/* Round a DataCopy length down to 32 B as the device does, warning when that drops bytes. */
uint64_t DeviceCopyBytes(const char* api, uint64_t bytes, uint32_t count, const char* tname);
void CheckBurstParams(const char* api, uint32_t count, uint32_t len, uint32_t maxLen);

/* Write `bytes` to GM (plain or atomic add) and record the range for the overlap check. */
template <typename T>
inline void GmStore(uint8_t* gm, const uint8_t* src, uint64_t bytes, const char* api = "GM write") {
    BlockCtx& c = Ctx();
    if (c.atomic_add && std::strcmp(c.atomic_type, TypeName<T>()) != 0) {
        // the atomic unit adds in the type SetAtomicAdd<T> set: other bytes would be misread
        Fail(api, Cat("writes ", TypeName<T>(), " while SetAtomicAdd<", c.atomic_type,
                      "> is active: the device adds the bytes as ", c.atomic_type,
                      " (call SetAtomicAdd<", TypeName<T>(), ">())"));
    }
    GmAccessHook(gm, bytes, true, api, c.atomic_add);
    const uintptr_t b = reinterpret_cast<uintptr_t>(gm);
    RecordGmWrite(b, b + bytes, c.atomic_add);
    if (!c.atomic_add) {
        std::memcpy(gm, src, bytes);
        return;
    }
    std::lock_guard<std::mutex> lock(Gm().atomic_mu);
    for (uint64_t i = 0; i + sizeof(T) <= bytes; i += sizeof(T)) {
        T a, b;
        std::memcpy(&a, gm + i, sizeof(T));
        std::memcpy(&b, src + i, sizeof(T));
        a = Down<T>(Up(a) + Up(b));
        std::memcpy(gm + i, &a, sizeof(T));
    }
}

inline uint8_t* LocalBytes(const BufferInfo* cb, uint32_t gen, uint64_t off, uint64_t bytes,
                           const char* api, const char* role, Access kind) {
    return CheckLocal(const_cast<BufferInfo*>(cb), gen, off, bytes, api, role, kind);
}
template <typename T>
inline uint8_t* LocalBytes(const LocalTensor<T>& t, uint64_t bytes, const char* api, const char* role,
                           Access kind) {
    return CheckLocal(t.buf_, t.gen_, t.byteOff_, bytes, api, role, kind);
}

}  // namespace emu

/* ---------------- synchronisation ---------------- */
template <pipe_t pipe>
inline void PipeBarrier() {
    if (pipe == PIPE_S) emu::Fail("PipeBarrier<PIPE_S>", "PipeBarrier<PIPE_S> is illegal on the device");
    if (pipe == PIPE_ALL) emu::SyncPipes(PIPE_ALL, PIPE_ALL);
}
template <HardEvent evt>
inline void SetFlag(int32_t eventID) {
    const auto& e = emu::EventInfo(evt);
    emu::SetFlagImpl(e.src, e.dst, eventID, emu::Cat("SetFlag<HardEvent::", e.name, ">(", eventID, ")"));
}
template <HardEvent evt>
inline void WaitFlag(int32_t eventID) {
    const auto& e = emu::EventInfo(evt);
    emu::WaitFlagImpl(e.src, e.dst, eventID, emu::Cat("WaitFlag<HardEvent::", e.name, ">(", eventID, ")"));
}
template <pipe_t src, pipe_t dst>
class TQueSync {
 public:
    void SetFlag(TEventID id) {
        emu::SetFlagImpl(src, dst, id, emu::Cat("TQueSync<", emu::PipeName(src), ", ",
                                                emu::PipeName(dst), ">::SetFlag(", int(id), ")"));
    }
    void WaitFlag(TEventID id) {
        emu::WaitFlagImpl(src, dst, id, emu::Cat("TQueSync<", emu::PipeName(src), ", ",
                                                 emu::PipeName(dst), ">::WaitFlag(", int(id), ")"));
    }
};

template <HardEvent evt>
inline TEventID TPipe::FetchEventID() { return FetchEventID(evt); }

namespace emu {
/* Whether SetAtomicAdd<T> exists on an architecture, as its kernel_operator_set_atomic_impl.h
 * states: dav_c220 (910B) half, float, int16_t, int32_t, int8_t, bfloat16_t; dav_c100 (910A)
 * half, float, int16_t, int32_t, int8_t; dav_m300 (310B) half, float, int16_t, int32_t;
 * dav_m200 (310P) half, float, int16_t (int32_t and int8_t are "not supported"). */
template <typename T>
inline const char* AtomicAddTypes(int npu_arch, bool* ok) {
    const bool base = std::is_same<T, half>::value || std::is_same<T, float>::value ||
                      std::is_same<T, int16_t>::value;
    const bool s32 = std::is_same<T, int32_t>::value, s8 = std::is_same<T, int8_t>::value;
    const bool bf16 = std::is_same<T, bfloat16_t>::value;
    switch (npu_arch) {
        case 2201: *ok = base || s32 || s8 || bf16; return "half, float, int16_t, int32_t, int8_t, bfloat16_t";
        case 1001: *ok = base || s32 || s8; return "half, float, int16_t, int32_t, int8_t";
        case 3002: *ok = base || s32; return "half, float, int16_t, int32_t";
        default: *ok = base; return "half, float, int16_t";
    }
}
}  // namespace emu

/* Later DataCopy / Fixpipe writes to GM add to what is there, in T (the device's set_atomic_add and
 * set_atomic_<T>): the type must be one the architecture's atomic unit takes. */
template <typename T>
inline void SetAtomicAdd() {
    const emu::SocProfile& soc = emu::ActiveSoc();
    bool ok = false;
    const char* types = emu::AtomicAddTypes<T>(soc.npu_arch, &ok);
    if (!ok) {
        emu::Fail(emu::Cat("SetAtomicAdd<", emu::TypeName<T>(), ">"),
                  emu::Cat("atomic add of ", emu::TypeName<T>(), " is not supported on ", soc.name, " (",
                           soc.npu_arch, "): it takes ", types));
    }
    emu::Ctx().atomic_add = true;
    emu::Ctx().atomic_type = emu::TypeName<T>();
}
inline void SetAtomicNone() {
    emu::Ctx().atomic_add = false;
    emu::Ctx().atomic_type = nullptr;
}

/* ---------------- DataCopy: count forms ---------------- */
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
    const char* api = "DataCopy(GM->local)";
    emu::Ctx().c.datacopy_calls++;
    uint64_t bytes = emu::DeviceCopyBytes(api, uint64_t(count) * sizeof(T), count, emu::TypeName<T>());
    if (bytes == 0) return;
    const uint8_t* s = src.Check(0, bytes, api, "src");
    uint8_t* d = emu::LocalBytes(dst, bytes, api, "dst", emu::Access::MTE_IN);
    emu::GmAccessHook(s, bytes, false, api);
    std::memcpy(d, s, bytes);
    emu::Ctx().c.gm_read_bytes += static_cast<int64_t>(bytes);
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
    const char* api = "DataCopy(local->GM)";
    emu::Ctx().c.datacopy_calls++;
    uint64_t bytes = emu::DeviceCopyBytes(api, uint64_t(count) * sizeof(T), count, emu::TypeName<T>());
    if (bytes == 0) return;
    const uint8_t* s = emu::LocalBytes(src, bytes, api, "src", emu::Access::MTE_OUT);
    uint8_t* d = dst.Check(0, bytes, api, "dst");
    emu::GmStore<T>(d, s, bytes, api);
    emu::Ctx().c.gm_write_bytes += static_cast<int64_t>(bytes);
}

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
    const char* api = "DataCopy(local->local)";
    emu::Ctx().c.datacopy_calls++;
    uint64_t bytes = emu::DeviceCopyBytes(api, uint64_t(count) * sizeof(T), count, emu::TypeName<T>());
    if (bytes == 0) return;
    const uint8_t* s = emu::LocalBytes(src, bytes, api, "src", emu::Access::COPY_READ);
    uint8_t* d = emu::LocalBytes(dst, bytes, api, "dst", emu::Access::COPY_WRITE);
    std::memmove(d, s, bytes);
}

/* ---------------- DataCopy: burst forms (units of 32-byte blocks) ---------------- */
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p) {
    const char* api = "DataCopy(GM->local, DataCopyParams)";
    emu::Ctx().c.datacopy_calls++;
    emu::CheckBurstParams(api, p.blockCount, p.blockLen, 65535);
    uint64_t len = uint64_t(p.blockLen) * 32, sstep = len + uint64_t(p.srcStride) * 32,
             dstep = len + uint64_t(p.dstStride) * 32, n = p.blockCount;
    const uint8_t* s = src.Check(0, (n - 1) * sstep + len, api, "src");
    uint8_t* d = emu::LocalBytes(dst, (n - 1) * dstep + len, api, "dst", emu::Access::MTE_IN);
    for (uint64_t i = 0; i < n; ++i) {
        emu::GmAccessHook(s + i * sstep, len, false, api);
        std::memcpy(d + i * dstep, s + i * sstep, len);
    }
    emu::Ctx().c.gm_read_bytes += static_cast<int64_t>(n * len);
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    const char* api = "DataCopy(local->GM, DataCopyParams)";
    emu::Ctx().c.datacopy_calls++;
    emu::CheckBurstParams(api, p.blockCount, p.blockLen, 65535);
    uint64_t len = uint64_t(p.blockLen) * 32, sstep = len + uint64_t(p.srcStride) * 32,
             dstep = len + uint64_t(p.dstStride) * 32, n = p.blockCount;
    const uint8_t* s = emu::LocalBytes(src, (n - 1) * sstep + len, api, "src", emu::Access::MTE_OUT);
    uint8_t* d = dst.Check(0, (n - 1) * dstep + len, api, "dst");
    for (uint64_t i = 0; i < n; ++i) emu::GmStore<T>(d + i * dstep, s + i * sstep, len, api);
    emu::Ctx().c.gm_write_bytes += static_cast<int64_t>(n * len);
}

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    const char* api = "DataCopy(local->local, DataCopyParams)";
    emu::Ctx().c.datacopy_calls++;
    emu::CheckBurstParams(api, p.blockCount, p.blockLen, 65535);
    uint64_t len = uint64_t(p.blockLen) * 32, sstep = len + uint64_t(p.srcStride) * 32,
             dstep = len + uint64_t(p.dstStride) * 32, n = p.blockCount;
    const uint8_t* s = emu::LocalBytes(src, (n - 1) * sstep + len, api, "src", emu::Access::COPY_READ);
    uint8_t* d = emu::LocalBytes(dst, (n - 1) * dstep + len, api, "dst", emu::Access::COPY_WRITE);
    for (uint64_t i = 0; i < n; ++i) std::memmove(d + i * dstep, s + i * sstep, len);
}

/* ---------------- DataCopyPad ---------------- */
/* GM -> UB: blockLen and srcStride in bytes (GM side); each burst lands 32-byte aligned in UB,
 * rounded up to 32 B; dstStride in 32-byte blocks. Padding per DataCopyPadExtParams; the dummy
 * tail repeats the burst's first element when no padding is asked for, else it is paddingValue
 * (isPad) or poison (0xFF bytes). */
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                        const DataCopyExtParams& p, const DataCopyPadExtParams<T>& pad) {
    const char* api = "DataCopyPad(GM->local)";
    emu::Ctx().c.datacopy_calls++;
    emu::CheckBurstParams(api, p.blockCount, p.blockLen, 2097151);
    const uint64_t sz = sizeof(T), left = pad.leftPadding * sz, right = pad.rightPadding * sz;
    if (left > 32 || right > 32) {
        emu::Fail(api, emu::Cat("leftPadding ", int(pad.leftPadding), " / rightPadding ",
                                int(pad.rightPadding), " elements exceed 32 bytes"));
    }
    const uint64_t len = p.blockLen, n = p.blockCount;
    const uint64_t burst = (left + len + right + 31) / 32 * 32;
    const uint64_t sstep = len + p.srcStride, dstep = burst + uint64_t(p.dstStride) * 32;
    const uint8_t* s = src.Check(0, (n - 1) * sstep + len, api, "src");
    uint8_t* d = emu::LocalBytes(dst, (n - 1) * dstep + burst, api, "dst", emu::Access::MTE_IN);
    auto fill = [&](uint8_t* at, uint64_t bytes, bool usePad) {
        if (!usePad) { std::memset(at, 0xFF, bytes); return; }
        for (uint64_t k = 0; k < bytes; ++k) at[k] = reinterpret_cast<const uint8_t*>(&pad.paddingValue)[k % sz];
    };
    for (uint64_t i = 0; i < n; ++i) {
        uint8_t* u = d + i * dstep;
        emu::GmAccessHook(s + i * sstep, len, false, api);
        fill(u, left, pad.isPad);
        std::memcpy(u + left, s + i * sstep, len);
        fill(u + left + len, right, pad.isPad);
        uint64_t tail = left + len + right;
        if (tail < burst) {
            if (left == 0 && right == 0) {
                for (uint64_t k = tail; k < burst; ++k) u[k] = u[(k - tail) % sz];
            } else {
                fill(u + tail, burst - tail, pad.isPad);
            }
        }
    }
    emu::Ctx().c.gm_read_bytes += static_cast<int64_t>(n * len);
}

/* UB -> GM: each burst starts 32-byte aligned in UB (srcStride in 32-byte blocks); only blockLen
 * bytes reach GM (dstStride in bytes). */
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
    const char* api = "DataCopyPad(local->GM)";
    emu::Ctx().c.datacopy_calls++;
    emu::CheckBurstParams(api, p.blockCount, p.blockLen, 2097151);
    const uint64_t len = p.blockLen, n = p.blockCount;
    const uint64_t sstep = (len + 31) / 32 * 32 + uint64_t(p.srcStride) * 32, dstep = len + p.dstStride;
    const uint8_t* s = emu::LocalBytes(src, (n - 1) * sstep + len, api, "src", emu::Access::MTE_OUT);
    uint8_t* d = dst.Check(0, (n - 1) * dstep + len, api, "dst");
    for (uint64_t i = 0; i < n; ++i) emu::GmStore<T>(d + i * dstep, s + i * sstep, len, api);
    emu::Ctx().c.gm_write_bytes += static_cast<int64_t>(n * len);
}

/* Older forms: DataCopyParams with blockLen in bytes, DataCopyPadParams (uint64 padding value). */
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                        const DataCopyPadParams& pad) {
    T v;
    std::memcpy(&v, &pad.paddingValue, sizeof(T) < 8 ? sizeof(T) : 8);
    DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0),
                DataCopyPadExtParams<T>(pad.isPad, pad.leftPadding, pad.rightPadding, v));
}
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0));
}

}  // namespace AscendC

/* Compiler builtins some kernels call directly. */
inline void pipe_barrier(pipe_t p) {
    if (p == PIPE_S) AscendC::emu::Fail("pipe_barrier(PIPE_S)", "PipeBarrier<PIPE_S> is illegal on the device");
    if (p == PIPE_ALL) AscendC::emu::SyncPipes(PIPE_ALL, PIPE_ALL);
}
inline void set_flag(pipe_t src, pipe_t dst, event_t id) {
    AscendC::emu::SetFlagImpl(src, dst, id, "set_flag");
}
inline void wait_flag(pipe_t src, pipe_t dst, event_t id) {
    AscendC::emu::WaitFlagImpl(src, dst, id, "wait_flag");
}

#endif  // ASCENDC_EMU_DATA_COPY_H
