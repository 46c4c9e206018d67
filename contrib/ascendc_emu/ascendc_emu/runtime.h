/* ascendc_emu/runtime.h: the out-of-line part of the emulator (contexts, checks that build
 * messages, queues, TPipe planning, launch and statistics).
 *
 * Included by kernel_operator.h in header-only builds (every function inline). With
 * -DASCENDC_EMU_SEPARATE_RUNTIME only the one object built with -DASCENDC_EMU_RUNTIME_IMPL
 * includes it (see types.h), so kernel objects do not recompile it.
 */
#ifndef ASCENDC_EMU_RUNTIME_H
#define ASCENDC_EMU_RUNTIME_H

#include <algorithm>

#include "launch.h"

namespace AscendC {

/* ---------------- core.h ---------------- */
namespace emu {

ASCENDC_EMU_RT void Put(std::string& s, const char* v) { s += v ? v : "(null)"; }
ASCENDC_EMU_RT void Put(std::string& s, const std::string& v) { s += v; }
ASCENDC_EMU_RT void PutI(std::string& s, long long v) { s += std::to_string(v); }
ASCENDC_EMU_RT void PutU(std::string& s, unsigned long long v) { s += std::to_string(v); }
ASCENDC_EMU_RT void Put(std::string& s, double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    s += b;
}
ASCENDC_EMU_RT void Put(std::string& s, Hex h) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(h.v));
    s += b;
}

ASCENDC_EMU_RT Settings& Global() {
    static Settings s;
    return s;
}

inline bool EnvFlag(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

ASCENDC_EMU_RT std::string KnownSocNames() {
    std::string s;
    for (int i = 0; i < kSocCount; ++i) s += (i ? ", " : "") + std::string(kSocTable[i].name);
    return s;
}

ASCENDC_EMU_RT void SetSoc(const std::string& name) {
    int idx = SocIndex(name.c_str());
    if (idx < 0) {
        throw std::invalid_argument(
            Cat("ascendc_emu: SetSoc: unknown SoC '", name, "'; known: ", KnownSocNames()));
    }
    Global().soc.store(&kSocTable[idx]);
}

ASCENDC_EMU_RT const SocProfile& ActiveSoc() {
    const SocProfile* p = Global().soc.load();
    if (p != nullptr) return *p;
    const char* env = std::getenv("ASCENDC_EMU_SOC");
    if (env != nullptr && env[0] != '\0') {
        SetSoc(env);
    } else {
        Global().soc.store(&kSocTable[SocIndex(kDefaultSocName)]);
    }
    return *Global().soc.load();
}

ASCENDC_EMU_RT void SetStrict(bool on) { Global().strict.store(on ? 1 : 0); }
ASCENDC_EMU_RT bool Strict() {
    int s = Global().strict.load();
    return s < 0 ? EnvFlag("ASCENDC_EMU_STRICT") : s == 1;
}
ASCENDC_EMU_RT void SetRunOnThreads(bool on) { Global().threads.store(on ? 1 : 0); }
ASCENDC_EMU_RT bool RunOnThreads() {
    int t = Global().threads.load();
    return t < 0 ? EnvFlag("ASCENDC_EMU_THREADS") : t == 1;
}

ASCENDC_EMU_RT BlockCtx::~BlockCtx() {
    for (auto* a : arena) std::free(a);
}
ASCENDC_EMU_RT uint8_t* BlockCtx::Arena(Mem m) {
    int i = static_cast<int>(m);
    if (arena[i] == nullptr) {
        size_t cap = static_cast<size_t>(MemCapacity(m, ActiveSoc()));
        size_t rounded = (cap + 4095) / 4096 * 4096;
        arena[i] = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded ? rounded : 4096));
        if (arena[i] == nullptr) throw std::bad_alloc();
        std::memset(arena[i], 0xFF, rounded);
    }
    return arena[i];
}

ASCENDC_EMU_RT BlockCtx*& CurrentSlot() {
    static thread_local BlockCtx* cur = nullptr;
    return cur;
}
ASCENDC_EMU_RT BlockCtx& Ctx() {
    BlockCtx* c = CurrentSlot();
    if (c != nullptr) return *c;
    static thread_local BlockCtx fallback;  // code run outside ICPU_RUN_KF
    return fallback;
}

inline std::string BlockLabel(const BlockCtx& c) {
    return c.xc != nullptr ? CtxName(c) : Cat("block ", c.idx, "/", c.num);
}

ASCENDC_EMU_RT void Fail(const std::string& api, const std::string& what) {
    BlockCtx& c = Ctx();
    throw DeviceRuleError(Cat("ascendc_emu: kernel ", c.kernel, ", ", BlockLabel(c), ": ", api, ": ", what));
}

ASCENDC_EMU_RT void Warn(const std::string& api, const std::string& what) {
    if (Strict()) Fail(api, what + " [strict mode]");
    BlockCtx& c = Ctx();
    std::string msg = Cat(BlockLabel(c), ": ", api, ": ", what);
    for (size_t i = 0; i < c.c.warnings.size(); ++i) {
        if (c.c.warnings[i] == msg) {
            ++c.warn_repeats[i];
            return;
        }
    }
    if (c.c.warnings.size() >= 100) return;
    c.c.warnings.push_back(msg);
    c.warn_repeats.push_back(1);
}

ASCENDC_EMU_RT void CountVector(const char* op, int64_t instrs, int64_t elems) {
    Counters& k = Ctx().c;
    k.vector_instrs += instrs;
    k.vector_elems += elems;
    OpCount& o = k.vector_by_op[op];
    o.instrs += instrs;
    o.elems += elems;
}

ASCENDC_EMU_RT GmRegistry& Gm() {
    static GmRegistry r;
    return r;
}
ASCENDC_EMU_RT bool FindGmAllocation(const void* p, uintptr_t* begin, size_t* size) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    GmRegistry& g = Gm();
    std::lock_guard<std::mutex> lock(g.mu);
    auto it = g.allocs.upper_bound(a);
    if (it == g.allocs.begin()) return false;
    --it;
    if (a >= it->first + it->second.span) return false;
    *begin = it->first;
    *size = it->second.size;
    return true;
}

ASCENDC_EMU_RT void RecordGmWrite(uintptr_t b, uintptr_t e, bool atomic) {
    BlockCtx& c = Ctx();
    if (!c.gm_writes.empty()) {
        GmWrite& last = c.gm_writes.back();
        if (last.atomic == atomic && b <= last.e && e >= last.b) {
            last.b = b < last.b ? b : last.b;
            last.e = e > last.e ? e : last.e;
            return;
        }
    }
    c.gm_writes.push_back(GmWrite{b, e, c.idx, atomic});
}

ASCENDC_EMU_RT std::string Describe(const BufferInfo& b) {
    return Cat(b.len, " B ", PosName(b.pos), " buffer #", b.index, " of its ", b.owner_kind);
}

/* Validate one operand access of `bytes` bytes from byte `off` of buffer `b`; returns host ptr. */
ASCENDC_EMU_RT uint8_t* CheckLocal(BufferInfo* b, uint32_t gen, uint64_t off, uint64_t bytes, const char* api,
                                   const char* role, Access kind) {
    if (b == nullptr) Fail(api, Cat(role, " is an uninitialised LocalTensor (no buffer behind it)"));
    LocalAccessHook(b->mem, api);
    if (b->released) {
        Fail(api, Cat(role, " uses a ", Describe(*b), " after its TPipe was reset or destroyed"));
    }
    if (b->state == BufState::FREE || b->gen != gen) {
        Fail(api, Cat(role, " uses a ", PosName(b->pos), " tensor after FreeTensor (", Describe(*b),
                      " is ", b->state == BufState::FREE ? "free" : "re-allocated", ")"));
    }
    if (b->state == BufState::ENQUEUED) {
        Fail(api, Cat(role, " is a ", PosName(b->pos),
                      " tensor that is EnQue'd and not yet DeQue'd (queue protocol)"));
    }
    if (kind != Access::SCALAR && (b->offset + off) % ONE_BLK_SIZE != 0) {
        Fail(api, Cat(role, " starts at byte ", b->offset + off, " of ", MemName(b->mem),
                      ", not 32-byte aligned (tensor offset ", off, " B into its buffer)"));
    }
    if (off + bytes > b->len) {
        Fail(api, Cat(role, " accesses bytes [", off, ", ", off + bytes, ") of a ", Describe(*b),
                      ": out of bounds"));
    }
    if ((kind == Access::VEC_READ || kind == Access::VEC_WRITE) && b->mem != Mem::UB) {
        Fail(api, Cat(role, " is a ", PosName(b->pos), " tensor in ", MemName(b->mem),
                      "; vector instructions take UB (VECIN/VECOUT/VECCALC) operands only"));
    }
    uint32_t lo = static_cast<uint32_t>(off), hi = static_cast<uint32_t>(off + bytes);
    switch (kind) {
        case Access::VEC_READ:
        case Access::COPY_READ:
            if (b->mte2_pending.Hits(lo, hi)) {
                Fail(api, Cat(role, " reads a ", PosName(b->pos),
                              " tensor filled by DataCopy (MTE2) that was not EnQue'd/DeQue'd "
                              "(missing MTE2->V sync; or SetFlag/WaitFlag<HardEvent::MTE2_V>)"));
            }
            break;
        case Access::VEC_WRITE:
        case Access::COPY_WRITE: b->v_pending.Add(lo, hi); break;
        case Access::MTE_IN: b->mte2_pending.Add(lo, hi); break;
        case Access::MTE_OUT:
            if (b->v_pending.Hits(lo, hi)) {
                Fail(api, Cat(role, " copies out a ", PosName(b->pos),
                              " tensor written by a vector op before EnQue/DeQue "
                              "(missing V->MTE3 sync; or SetFlag/WaitFlag<HardEvent::V_MTE3>)"));
            }
            break;
        case Access::SCALAR: break;
    }
    return b->host + off;
}

ASCENDC_EMU_RT void GmFail(bool unset, uintptr_t b, uintptr_t e, bool limited, uintptr_t limB, uintptr_t limE,
                           uintptr_t allocB, size_t allocSize, size_t elem, const char* api, const char* role) {
    if (unset) Fail(api, Cat(role, " GlobalTensor has no buffer (SetGlobalBuffer not called)"));
    if (limited && (b < limB || e > limE)) {
        int64_t es = static_cast<int64_t>(elem);
        Fail(api, Cat(role, " access to elements [", (int64_t(b) - int64_t(limB)) / es, ", ",
                      (int64_t(e) - int64_t(limB)) / es, ") is outside the SetGlobalBuffer range of ",
                      (limE - limB) / elem, " elements"));
    }
    Fail(api, Cat(role, " access to bytes [", int64_t(b) - int64_t(allocB), ", ", int64_t(e) - int64_t(allocB),
                  ") is outside the GmAlloc'd allocation of ", allocSize, " B"));
}

ASCENDC_EMU_RT BufferInfo* QueueBase::AllocBuf() {
    LocalAccessHook(MemOf(pos_), "AllocTensor");
    BufferInfo* b = FreeBuffer("AllocTensor");
    BlockCtx& c = Ctx();
    int& live = c.live[static_cast<int>(pos_)];
    int maxLive = ActiveSoc().max_live_buffers;
    if (live + 1 > maxLive) {
        Fail("AllocTensor", Cat(live + 1, " buffers allocated at once in position ", PosName(pos_),
                                " > ", maxLive, " allowed on ", ActiveSoc().name,
                                " (current size is ", live + 1,
                                ", max buffer number in same queue position is ", maxLive, ")"));
    }
    ++live;
    b->state = BufState::ALLOCATED;
    ++b->gen;
    b->mte2_pending.Clear();
    b->v_pending.Clear();
    Poison(*b);
    return b;
}
ASCENDC_EMU_RT bool QueueBase::EnQueBuf(BufferInfo* tb, uint32_t gen) {
    BufferInfo* b = Own(tb, gen, "EnQue");
    if (b->state == BufState::ENQUEUED) Fail("EnQue", "the tensor is already in the queue");
    int cap = depth_ > 0 ? depth_ : static_cast<int>(bufs_.size());
    if (static_cast<int>(fifo_.size()) >= cap) {
        Fail("EnQue", Cat("queue of depth ", depth_, " already holds ", fifo_.size(),
                          " tensor(s); EnQue past depth (DeQue first)"));
    }
    b->state = BufState::ENQUEUED;
    fifo_.push_back(b);
    return true;
}
ASCENDC_EMU_RT BufferInfo* QueueBase::DeQueBuf() {
    if (fifo_.empty()) {
        Fail("DeQue", Cat("DeQue on an empty ", PosName(pos_), " queue (nothing was EnQue'd)"));
    }
    BufferInfo* b = fifo_.front();
    fifo_.erase(fifo_.begin());
    b->state = BufState::DEQUEUED;
    b->mte2_pending.Clear();
    b->v_pending.Clear();
    return b;
}
ASCENDC_EMU_RT void QueueBase::FreeBuf(BufferInfo* b, uint32_t gen) {
    if (b == nullptr) Fail("FreeTensor", "tensor is uninitialised");
    if (b->owner != this) {
        Fail("FreeTensor", Cat("tensor belongs to another ", b->owner_kind, " (", Describe(*b),
                               "); FreeTensor must go to the queue it was allocated from"));
    }
    if (b->released) Fail("FreeTensor", "the tensor's TPipe was reset or destroyed");
    if (b->state == BufState::FREE || b->gen != gen) {
        Fail("FreeTensor", Cat("double free of a ", PosName(pos_), " tensor (", Describe(*b),
                               " is already free or re-allocated)"));
    }
    if (b->state == BufState::ENQUEUED) {
        Fail("FreeTensor", "tensor is still in the queue (EnQue'd, not DeQue'd)");
    }
    b->state = BufState::FREE;
    ++b->gen;
    --Ctx().live[static_cast<int>(pos_)];
}

ASCENDC_EMU_RT BufferInfo* QueueBase::FreeBuffer(const char* api) {
    if (bufs_.empty() || bufs_.front()->released) {
        Fail(api, Cat(PosName(pos_), " queue has no buffers (call TPipe::InitBuffer first)"));
    }
    for (auto* b : bufs_) if (b->state == BufState::FREE) return b;
    Fail(api, Cat("all ", bufs_.size(), " buffers of this ", PosName(pos_),
                  " queue are in use (FreeTensor first)"));
}
ASCENDC_EMU_RT BufferInfo* QueueBase::Own(BufferInfo* b, uint32_t gen, const char* api) {
    if (b == nullptr) Fail(api, "tensor is uninitialised");
    if (b->owner != this) {
        Fail(api, Cat("tensor belongs to another ", b->owner_kind, " (", Describe(*b), ")"));
    }
    if (b->released) Fail(api, "the tensor's TPipe was reset or destroyed");
    if (b->state == BufState::FREE || b->gen != gen) Fail(api, "use of a tensor after FreeTensor");
    return b;
}

}  // namespace emu

/* ---------------- memory.h: TPipe ---------------- */
ASCENDC_EMU_RT TPipe::TPipe() {
    emu::BlockCtx& c = emu::Ctx();
    for (int i = 0; i < emu::kMemCount; ++i) start_[i] = c.used[i];
    prev_ = c.pipe;
    c.pipe = this;
    ctx_ = &c;
}
ASCENDC_EMU_RT TPipe::~TPipe() {
    Release(true);
    if (ctx_->pipe == this) ctx_->pipe = prev_;
}


ASCENDC_EMU_RT void TPipe::Carve(const char* api, TPosition pos, uint32_t num, uint32_t len, const void* owner,
                                 const char* kind, std::vector<emu::BufferInfo*>* out) {
    using namespace emu;
    BlockCtx& c = *ctx_;
    const SocProfile& soc = ActiveSoc();
    Mem m = MemOf(pos);
    if (m == Mem::NONE) {
        Fail(api, Cat("position ", PosName(pos), " has no emulated on-chip memory"));
    }
    if (num == 0 || len == 0) Fail(api, Cat("num=", num, " len=", len, ": both must be >= 1"));
    if (nbuf_ + static_cast<int>(num) > 64) {
        Fail(api, Cat(nbuf_ + num, " buffers in total > 64 allowed per kernel (sum of num over "
                                   "all InitBuffer calls)"));
    }
    uint64_t len32 = (static_cast<uint64_t>(len) + 31) / 32 * 32;
    int mi = static_cast<int>(m);
    int64_t cap = MemCapacity(m, soc);
    int64_t want = c.used[mi] + static_cast<int64_t>(len32 * num);
    if (want > cap) {
        Fail(api, Cat(MemName(m), " would hold ", want, " B > ", cap, " B of ", soc.name, " ",
                      MemName(m), " (this call: ", num, " x ", len32, " B for ", PosName(pos), ")"));
    }
    if (m == Mem::UB) {
        int64_t usable = soc.ub_bytes - 8192 - 256;
        if (want > usable && c.used[mi] <= usable) {
            Warn(api, Cat("UB plan of ", want, " B exceeds ", usable, " B usable on ", soc.name,
                          " when the 8 KB API reserve and 256 B CV reserve apply"));
        }
    }
    uint8_t* arena = c.Arena(m);
    for (uint32_t i = 0; i < num; ++i) {
        c.buffers.emplace_back();
        BufferInfo& b = c.buffers.back();
        b.mem = m;
        b.pos = pos;
        b.offset = static_cast<uint32_t>(c.used[mi]);
        b.host = arena + b.offset;
        b.len = static_cast<uint32_t>(len32);
        b.owner = owner;
        b.owner_kind = kind;
        b.index = static_cast<int>(i);
        Poison(b);
        c.used[mi] += static_cast<int64_t>(len32);
        out->push_back(&b);
        mine_.push_back(&b);
    }
    nbuf_ += static_cast<int>(num);
    int64_t* peak[kMemCount] = {&c.c.peak_ub_bytes, &c.c.peak_l1_bytes, &c.c.peak_l0a_bytes,
                                &c.c.peak_l0b_bytes, &c.c.peak_l0c_bytes};
    if (c.used[mi] > *peak[mi]) *peak[mi] = c.used[mi];
}
ASCENDC_EMU_RT void TPipe::Release(bool atEnd) {
    using namespace emu;
    for (BufferInfo* b : mine_) {
        if (atEnd && b->state != BufState::FREE && b->state != BufState::TBUF && !b->released) {
            ctx_->leaks.push_back(Cat(Describe(*b), " still ",
                                      StateName(b->state), " when its TPipe was destroyed"));
        }
        if (b->state == BufState::ALLOCATED || b->state == BufState::ENQUEUED ||
            b->state == BufState::DEQUEUED) {
            --ctx_->live[static_cast<int>(b->pos)];
        }
        b->released = true;
        ++b->gen;
    }
    mine_.clear();
    nbuf_ = 0;
    for (int i = 0; i < kMemCount; ++i) ctx_->used[i] = start_[i];
}

ASCENDC_EMU_RT TEventID TPipe::FetchEventID(HardEvent evt) {
    const auto& e = emu::EventInfo(evt);
    const uint8_t* f = emu::Ctx().flags[emu::FlagKey(e.src, e.dst)];
    for (int i = 0; i < QUE_MAX_EVENT; ++i) if (!f[i]) return static_cast<TEventID>(i);
    emu::Fail("FetchEventID", emu::Cat("all 8 event IDs of HardEvent::", e.name, " are set"));
}

/* ---------------- data_copy.h ---------------- */
namespace emu {

/* Synchronisation between two pipes clears the matching pending-write ranges. */
ASCENDC_EMU_RT void SyncPipes(pipe_t src, pipe_t dst) {
    BlockCtx& c = Ctx();
    bool all = src == PIPE_ALL || dst == PIPE_ALL;
    bool mte2v = all || (src == PIPE_MTE2 && dst == PIPE_V);
    bool vmte3 = all || (src == PIPE_V && dst == PIPE_MTE3);
    for (auto& b : c.buffers) {
        if (mte2v) b.mte2_pending.Clear();
        if (vmte3) b.v_pending.Clear();
    }
}

ASCENDC_EMU_RT void SetFlagImpl(pipe_t src, pipe_t dst, int32_t id, const std::string& api) {
    if (id < 0 || id >= QUE_MAX_EVENT) Fail(api, Cat("event ID ", id, " is outside 0..7"));
    uint8_t& f = Ctx().flags[FlagKey(src, dst)][id];
    if (f) Fail(api, Cat("event ID ", id, " set twice without a WaitFlag in between"));
    f = 1;
}
ASCENDC_EMU_RT void WaitFlagImpl(pipe_t src, pipe_t dst, int32_t id, const std::string& api) {
    if (id < 0 || id >= QUE_MAX_EVENT) Fail(api, Cat("event ID ", id, " is outside 0..7"));
    uint8_t& f = Ctx().flags[FlagKey(src, dst)][id];
    if (!f) Fail(api, Cat("event ID ", id, " was never set by a matching SetFlag (the device would hang)"));
    f = 0;
    SyncPipes(src, dst);
}

/* Round a DataCopy length down to 32 B as the device does, warning when that drops bytes. */
ASCENDC_EMU_RT uint64_t DeviceCopyBytes(const char* api, uint64_t bytes, uint32_t count, const char* tname) {
    if (bytes % ONE_BLK_SIZE == 0) return bytes;
    uint64_t moved = bytes / ONE_BLK_SIZE * ONE_BLK_SIZE;
    Warn(api, Cat(bytes, " B (", count, " x ", tname, ") is not a multiple of 32 B; the device moves only ",
                  moved, " B (use DataCopyPad for tails)"));
    return moved;
}

ASCENDC_EMU_RT void CheckBurstParams(const char* api, uint32_t count, uint32_t len, uint32_t maxLen) {
    if (count < 1 || count > 4095) Fail(api, Cat("blockCount ", count, " is outside [1, 4095]"));
    if (len < 1 || len > maxLen) Fail(api, Cat("blockLen ", len, " is outside [1, ", maxLen, "]"));
}

}  // namespace emu

}  // namespace AscendC

#include "runtime_launch.h"

#endif  // ASCENDC_EMU_RUNTIME_H
