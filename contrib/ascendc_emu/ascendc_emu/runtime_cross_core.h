/* ascendc_emu/runtime_cross_core.h: out-of-line part of cross_core.h: the MIX 1:2 probe, the
 * launch of AIC and AIV contexts on threads, the flag counters with the vector clocks they
 * carry, deadlock detection and the GM race check. Included by runtime_launch.h only.
 */
#ifndef ASCENDC_EMU_RUNTIME_CROSS_CORE_H
#define ASCENDC_EMU_RUNTIME_CROSS_CORE_H

#include <array>
#include <condition_variable>
#include <system_error>
#include <thread>
#include <tuple>

#include "cross_core.h"
#include "runtime_gm_race.h"

namespace AscendC {
namespace emu {

/* ---------------- settings ---------------- */
struct CrossCoreSettings {
    std::mutex mu;
    bool race_check = true;
    uintptr_t range_b = 0, range_e = 0;  // empty: all GM
};
ASCENDC_EMU_RT CrossCoreSettings& XcSettings() {
    static CrossCoreSettings s;
    return s;
}
ASCENDC_EMU_RT void SetCrossCoreRaceCheck(bool on) {
    std::lock_guard<std::mutex> lock(XcSettings().mu);
    XcSettings().race_check = on;
}
ASCENDC_EMU_RT void SetCrossCoreRaceRange(const void* begin, size_t bytes) {
    std::lock_guard<std::mutex> lock(XcSettings().mu);
    XcSettings().range_b = reinterpret_cast<uintptr_t>(begin);
    XcSettings().range_e = begin == nullptr ? 0 : XcSettings().range_b + bytes;
}

/* ---------------- launch state ---------------- */
/* What ends the probe: the AIC serves the Matmul API, the kernel has an AIC program, or it is a
 * kernel written for the AIVs alone (memory touched before any core-type question). */
struct ProbeStop {
    enum Kind { MATMUL_SERVER, AIC_PROGRAM, AIV_KERNEL } kind;
};
/* A context stopped because another one failed (its own error is not the launch's). */
struct LaunchAborted {};

/* One (mode, flag, sender set): each member's sets queue (with the member's clock at the set)
 * until every member has set; then one delivery reaches every receiver. */
struct Rendezvous {
    int mode = 0;
    int flag = 0;
    std::vector<int> members, receivers;
    std::vector<std::deque<VClock>> queued;  // parallel to members
};

enum class XcState : uint8_t { RUNNING, WAITING, DONE };

struct CrossCoreLaunch {
    std::mutex mu;
    std::condition_variable cv;
    std::string kernel;
    int64_t groups = 0;
    std::vector<BlockCtx*> ctx;  // by xid: AIVs 0 .. 2 * groups - 1, then the AICs
    std::vector<XcState> state;
    std::vector<int> waiting_on;
    std::vector<VClock> vc;
    std::vector<std::array<std::deque<VClock>, kCrossCoreFlagSlots>> inbox;
    std::map<std::tuple<int, int, int>, Rendezvous> rdv;  // (mode, flag, first member)
    bool aborted = false;
    std::exception_ptr error;
    bool race = true;
    uintptr_t range_b = 0, range_e = 0;
    GmShadow shadow;

    int Aic(int64_t g) const { return static_cast<int>(2 * groups + g); }
    int Aiv(int64_t g, int s) const { return static_cast<int>(2 * g + s); }
};

ASCENDC_EMU_RT std::string CtxName(const BlockCtx& c) {
    if (c.core == CoreKind::AIC) return Cat("AIC ", c.idx, " (group ", c.group, ")");
    return Cat("AIV ", c.idx, " (group ", c.group, ", sub ", c.sub, ")");
}

/* ---------------- probe ---------------- */
ASCENDC_EMU_RT void CrossCoreLocalAccess(BlockCtx& c, Mem m, const char* api) {
    if (c.probing) throw ProbeStop{c.core_queried ? ProbeStop::AIC_PROGRAM : ProbeStop::AIV_KERNEL};
    if (c.core == CoreKind::AIC && m == Mem::UB) {
        Fail(api, "an AIC has no UB (VECIN/VECOUT/VECCALC): in a MIX kernel the vector side belongs "
                  "in the `else` of `if ASCEND_IS_AIC` (the AIVs); the AIC moves data through L1/L0 "
                  "and GM");
    }
    if (c.core == CoreKind::AIV && m != Mem::UB && m != Mem::NONE) {
        Fail(api, Cat("an AIV has no ", MemName(m), " (A1/B1/A2/B2/CO1 are the AIC's): cube work "
                      "belongs in the `if ASCEND_IS_AIC` branch"));
    }
}

ASCENDC_EMU_RT void CrossCoreMatmulServer() {
    BlockCtx& c = Ctx();
    if (c.probing) throw ProbeStop{ProbeStop::MATMUL_SERVER};
    if (c.xc != nullptr) {
        Fail("REGIST_MATMUL_OBJ", "the Matmul API in a launch whose AICs run their own programs is not "
                                  "emulated (the AIC would have to serve it: use either the Matmul API "
                                  "or an AIC program)");
    }
}

/* ---------------- flags ---------------- */
inline void Join(VClock& into, const VClock& from) {
    for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

ASCENDC_EMU_RT void CheckFlagArgs(const char* api, int mode, uint32_t flagId) {
    if (mode < 0 || mode > 2) {
        Fail(api, Cat("modeId ", mode, " is not a cross-core mode (0: all cores of the setter's type, "
                      "1: the two AIVs of a group, 2: an AIC and its AIVs)"));
    }
    if (flagId >= static_cast<uint32_t>(kCrossCoreUserFlags)) {
        Fail(api, Cat("flagId ", flagId, " is outside 0..", kCrossCoreUserFlags - 1,
                      " (4-bit flag field; 11..14 are SyncAll's)"));
    }
}

[[noreturn]] ASCENDC_EMU_RT void NotCrossCore(const char* api) {
    const SocProfile& soc = ActiveSoc();
    if (soc.npu_arch != 2201) {
        Fail(api, Cat(soc.name, " has no cross-core flags (split AIC/AIV chips only: Atlas A2/A3)"));
    }
    Fail(api, "cross-core flags are emulated in MIX_MODE (1:2) launches whose kernel branches on "
              "ASCEND_IS_AIC / ASCEND_IS_AIV and runs an AIC program");
}

/* Who a set of `me` in `mode` waits for and reaches. */
ASCENDC_EMU_RT Rendezvous& FindRendezvous(CrossCoreLaunch& L, const BlockCtx& me, int mode, int flag,
                                          const char* api) {
    std::vector<int> members, receivers;
    const bool aic = me.core == CoreKind::AIC;
    if (mode == 0) {
        for (int64_t g = 0; g < L.groups; ++g) {
            if (aic) members.push_back(L.Aic(g));
            else { members.push_back(L.Aiv(g, 0)); members.push_back(L.Aiv(g, 1)); }
        }
        receivers = members;
    } else if (mode == 1) {
        if (aic) Fail(api, "mode 1 synchronises the two AIVs of a group; an AIC cannot set it (use mode 2)");
        members = {L.Aiv(me.group, 0), L.Aiv(me.group, 1)};
        receivers = members;
    } else if (aic) {
        members = {L.Aic(me.group)};
        receivers = {L.Aiv(me.group, 0), L.Aiv(me.group, 1)};
    } else {
        members = {L.Aiv(me.group, 0), L.Aiv(me.group, 1)};
        receivers = {L.Aic(me.group)};
    }
    Rendezvous& r = L.rdv[std::make_tuple(mode, flag, members.front())];
    if (r.members.empty()) {
        r.mode = mode;
        r.flag = flag;
        r.members = members;
        r.receivers = receivers;
        r.queued.resize(members.size());
    }
    return r;
}

ASCENDC_EMU_RT void CrossCoreSet(int mode, pipe_t pipe, uint32_t flagId) {
    const char* api = "CrossCoreSetFlag";
    BlockCtx& c = Ctx();
    if (c.probing) throw ProbeStop{ProbeStop::AIC_PROGRAM};
    if (c.xc == nullptr) NotCrossCore(api);
    CheckFlagArgs(api, mode, flagId);
    (void)pipe;  // the pipe the set is issued on: every pipe is synchronous here
    CrossCoreLaunch& L = *c.xc;
    std::unique_lock<std::mutex> lock(L.mu);
    if (L.aborted) throw LaunchAborted{};
    if (mode == 0) {
        const SocProfile& soc = ActiveSoc();
        const int cores = c.core == CoreKind::AIC ? soc.ai_cores : soc.vector_cores;
        const int64_t ofType = c.core == CoreKind::AIC ? L.groups : 2 * L.groups;
        if (ofType > cores) {
            Fail(api, Cat("mode 0 waits for every ", c.core == CoreKind::AIC ? "AIC" : "AIV", " of the launch: ",
                          ofType, " of them exceed the ", cores, " cores of ", soc.name, ", so they are not "
                          "all resident at once (as for SyncAll, blockDim must not exceed the cores)"));
        }
    }
    Rendezvous& r = FindRendezvous(L, c, mode, static_cast<int>(flagId), api);
    size_t mi = 0;
    while (r.members[mi] != c.xid) ++mi;
    if (static_cast<int>(r.queued[mi].size()) >= kCrossCoreMaxPending) {
        Fail(api, Cat("mode ", mode, " flag ", flagId, ": ", kCrossCoreMaxPending + 1,
                      " sets pending that the other setters have not matched (the device's counter "
                      "saturates at ", kCrossCoreMaxPending, ")"));
    }
    r.queued[mi].push_back(L.vc[c.xid]);
    ++L.vc[c.xid][c.xid];  // later accesses of this context are not ordered before the set
    for (const auto& q : r.queued) if (q.empty()) return;
    VClock token(L.vc.size(), 0);
    for (auto& q : r.queued) {
        Join(token, q.front());
        q.pop_front();
    }
    for (int rx : r.receivers) {
        auto& box = L.inbox[rx][flagId];
        if (static_cast<int>(box.size()) >= kCrossCoreMaxPending) {
            Fail(api, Cat("mode ", mode, " flag ", flagId, ": the counter of ", CtxName(*L.ctx[rx]),
                          " already holds ", box.size(), " sets it has not waited for; one more "
                          "saturates the device's counter (at most ", kCrossCoreMaxPending, ")"));
        }
        box.push_back(token);
    }
    L.cv.notify_all();
}

/* Can anything still raise `x`'s counter of `flag`? Not when every rendezvous that reaches it has
 * a member that can set no more (in `frozen`) and has nothing queued. */
ASCENDC_EMU_RT bool Deliverable(const CrossCoreLaunch& L, int x, int flag, const std::vector<bool>& frozen) {
    for (const auto& kv : L.rdv) {
        const Rendezvous& r = kv.second;
        if (r.flag != flag || std::find(r.receivers.begin(), r.receivers.end(), x) == r.receivers.end()) continue;
        bool possible = true;
        for (size_t i = 0; i < r.members.size(); ++i) {
            if (frozen[r.members[i]] && r.queued[i].empty()) possible = false;
        }
        if (possible) return true;
    }
    return false;
}

/* Waiting with nothing delivered (a woken waiter that has not run yet is not blocked). */
inline bool Blocked(const CrossCoreLaunch& L, int x) {
    return L.state[x] == XcState::WAITING && L.inbox[x][L.waiting_on[x]].empty();
}

ASCENDC_EMU_RT std::string DescribeStates(const CrossCoreLaunch& L, const std::vector<int>& xs) {
    std::string s;
    for (int x : xs) {
        s += Cat(s.empty() ? "" : "; ", CtxName(*L.ctx[x]));
        if (L.state[x] == XcState::DONE) s += " has ended";
        else if (Blocked(L, x)) s += Cat(" waits in CrossCoreWaitFlag(", L.waiting_on[x], ")");
        else s += " runs";
    }
    return s;
}

/* A deadlock among the contexts, or "": every context of a group blocked (or ended) with no set
 * that could still reach them, else every running context of the launch blocked (a cycle through
 * several groups). */
ASCENDC_EMU_RT std::string FindDeadlock(const CrossCoreLaunch& L) {
    const int n = static_cast<int>(L.ctx.size());
    std::vector<int> live;
    for (int x = 0; x < n; ++x) if (L.state[x] != XcState::DONE) live.push_back(x);
    for (int64_t g = 0; g < L.groups; ++g) {
        std::vector<int> members = {L.Aic(g), L.Aiv(g, 0), L.Aiv(g, 1)};
        bool blocked = false, anyRunning = false;
        for (int x : members) {
            blocked = blocked || Blocked(L, x);
            anyRunning = anyRunning || (L.state[x] != XcState::DONE && !Blocked(L, x));
        }
        if (!blocked || anyRunning) continue;
        std::vector<bool> frozen(static_cast<size_t>(n), false);
        for (int x = 0; x < n; ++x) frozen[x] = L.state[x] == XcState::DONE;
        for (int x : members) frozen[x] = true;
        bool stuck = true;
        for (int x : members) {
            if (Blocked(L, x) && Deliverable(L, x, L.waiting_on[x], frozen)) stuck = false;
        }
        if (stuck) {
            return Cat("deadlock: every context of group ", g, " is blocked and no context can set the "
                       "flags they wait on: ", DescribeStates(L, members));
        }
    }
    bool allBlocked = !live.empty();
    for (int x : live) allBlocked = allBlocked && Blocked(L, x);
    if (allBlocked) {
        return Cat("deadlock: all ", live.size(), " running contexts of the launch wait on cross-core "
                   "flags no context can set any more: ", DescribeStates(L, live));
    }
    return "";
}

ASCENDC_EMU_RT void AbortLaunch(CrossCoreLaunch& L, std::exception_ptr e) {
    if (!L.error) L.error = e;
    L.aborted = true;
    L.cv.notify_all();
}

ASCENDC_EMU_RT void CrossCoreWait(int mode, pipe_t pipe, uint32_t flagId) {
    const char* api = "CrossCoreWaitFlag";
    BlockCtx& c = Ctx();
    if (c.probing) throw ProbeStop{ProbeStop::AIC_PROGRAM};
    if (c.xc == nullptr) NotCrossCore(api);
    CheckFlagArgs(api, mode, flagId);  // the device ignores the wait's mode; its range still holds
    (void)pipe;
    CrossCoreLaunch& L = *c.xc;
    std::unique_lock<std::mutex> lock(L.mu);
    auto& box = L.inbox[c.xid][flagId];
    L.waiting_on[c.xid] = static_cast<int>(flagId);
    while (box.empty()) {
        if (L.aborted) throw LaunchAborted{};
        L.state[c.xid] = XcState::WAITING;
        std::string dead = FindDeadlock(L);
        if (!dead.empty()) {
            L.state[c.xid] = XcState::RUNNING;
            try {
                Fail(api, dead);
            } catch (...) {
                AbortLaunch(L, std::current_exception());
                throw;
            }
        }
        L.cv.wait(lock);
        L.state[c.xid] = XcState::RUNNING;
    }
    L.state[c.xid] = XcState::RUNNING;
    Join(L.vc[c.xid], box.front());
    box.pop_front();
}

ASCENDC_EMU_RT void CrossCoreGmAccess(BlockCtx& c, const void* p, uint64_t bytes, bool write, const char* api,
                                     bool atomic) {
    if (c.probing) throw ProbeStop{c.core_queried ? ProbeStop::AIC_PROGRAM : ProbeStop::AIV_KERNEL};
    CrossCoreLaunch& L = *c.xc;
    if (!L.race || bytes == 0) return;
    uintptr_t b = reinterpret_cast<uintptr_t>(p), e = b + bytes;
    if (L.range_e > L.range_b) {
        b = std::max(b, L.range_b);
        e = std::min(e, L.range_e);
        if (b >= e) return;
    }
    std::lock_guard<std::mutex> lock(L.mu);
    const std::string race = L.shadow.Access(c.xid, L.vc[c.xid], b, e, write, L.ctx, write && atomic);
    if (!race.empty()) Fail(api, race);
}

/* ---------------- the launch ---------------- */
/* Runs the AIC of group 0 without side effects until it shows what the kernel is. */
ASCENDC_EMU_RT bool ProbeAicProgram(const char* name, int64_t blockDim, BlockBody body, void* arg) {
    BlockCtx probe;
    probe.kernel = name;
    probe.idx = 0;
    probe.num = blockDim;
    probe.core = CoreKind::AIC;
    probe.probing = true;
    BlockCtx* saved = CurrentSlot();
    CurrentSlot() = &probe;
    bool program = false;
    try {
        body(arg);
    } catch (const ProbeStop& s) {
        program = s.kind == ProbeStop::AIC_PROGRAM;
    } catch (...) {
        program = false;  // a rule broken before any decision: the AIV-only launch reports it
    }
    CurrentSlot() = saved;
    return program;
}

ASCENDC_EMU_RT void RunCrossCoreContext(CrossCoreLaunch* L, int x, BlockBody body, void* arg) {
    BlockCtx* ctx = L->ctx[x];
    CurrentSlot() = ctx;
    std::exception_ptr err;
    try {
        body(arg);
        FinishBlock(*ctx);
    } catch (const LaunchAborted&) {
    } catch (...) {
        err = std::current_exception();
    }
    CurrentSlot() = nullptr;
    std::lock_guard<std::mutex> lock(L->mu);
    L->state[x] = XcState::DONE;
    if (err) {
        ctx->error = err;
        AbortLaunch(*L, err);
        return;
    }
    if (L->aborted) return;
    std::string dead = FindDeadlock(*L);
    if (!dead.empty()) {
        AbortLaunch(*L, std::make_exception_ptr(DeviceRuleError(
                            Cat("ascendc_emu: kernel ", L->kernel, ", after ", CtxName(*ctx),
                                " ended: CrossCoreWaitFlag: ", dead))));
    }
    L->cv.notify_all();
}

/* Sets that reached a counter no wait consumed, and sets the other setters never matched. */
ASCENDC_EMU_RT void WarnUnwaited(CrossCoreLaunch& L) {
    for (size_t x = 0; x < L.ctx.size(); ++x) {
        CurrentSlot() = L.ctx[x];
        for (int f = 0; f < kCrossCoreFlagSlots; ++f) {
            if (!L.inbox[x][f].empty()) {
                Warn("kernel end", Cat("cross-core flag ", f, ": ", L.inbox[x][f].size(),
                                       " set(s) reached this context and were never waited for"));
            }
        }
    }
    for (const auto& kv : L.rdv) {
        const Rendezvous& r = kv.second;
        for (size_t i = 0; i < r.members.size(); ++i) {
            if (r.queued[i].empty()) continue;
            CurrentSlot() = L.ctx[r.members[i]];
            Warn("kernel end", Cat("CrossCoreSetFlag<", r.mode, "> flag ", r.flag, ": ", r.queued[i].size(),
                                   " set(s) never delivered (the other setters of that mode did not set "
                                   "it as often)"));
        }
    }
    CurrentSlot() = nullptr;
}

ASCENDC_EMU_RT void RunCrossCoreLaunch(const char* name, int64_t blockDim, BlockBody body, void* arg) {
    const int64_t runs = 3 * blockDim;
    std::unique_ptr<BlockCtx[]> ctxs(new BlockCtx[static_cast<size_t>(runs)]);
    CrossCoreLaunch L;
    L.kernel = name;
    L.groups = blockDim;
    {
        std::lock_guard<std::mutex> lock(XcSettings().mu);
        L.race = XcSettings().race_check;
        L.range_b = XcSettings().range_b;
        L.range_e = XcSettings().range_e;
    }
    L.state.assign(static_cast<size_t>(runs), XcState::RUNNING);
    L.waiting_on.assign(static_cast<size_t>(runs), -1);
    L.vc.assign(static_cast<size_t>(runs), VClock(static_cast<size_t>(runs), 0));
    L.inbox.resize(static_cast<size_t>(runs));
    for (int64_t x = 0; x < runs; ++x) {
        BlockCtx& c = ctxs[x];
        const bool aic = x >= 2 * blockDim;
        c.kernel = name;
        c.core = aic ? CoreKind::AIC : CoreKind::AIV;
        c.group = aic ? x - 2 * blockDim : x / 2;
        c.idx = aic ? c.group : x;
        c.num = blockDim;
        c.sub = aic ? 0 : x % 2;
        c.ratio = aic ? 1 : 2;
        c.xc = &L;
        c.xid = static_cast<int>(x);
        c.c.core_type = aic ? "AIC" : "AIV";
        c.c.block = c.idx;
        c.c.group = c.group;
        L.ctx.push_back(&c);
        L.vc[x][x] = 1;
    }
    {
        std::vector<std::thread> threads;
        threads.reserve(static_cast<size_t>(runs));
        for (int64_t x = 0; x < runs; ++x) {
            try {
                threads.emplace_back(RunCrossCoreContext, &L, static_cast<int>(x), body, arg);
            } catch (const std::system_error& e) {  // the started contexts are told to stop
                std::lock_guard<std::mutex> lock(L.mu);
                AbortLaunch(L, std::make_exception_ptr(DeviceRuleError(
                                   Cat("ascendc_emu: kernel ", name, ": ICPU_RUN_KF: could not start thread ", x + 1,
                                       " of the ", runs, " a cross-core launch runs on: ", e.what()))));
                for (int64_t y = x; y < runs; ++y) L.state[y] = XcState::DONE;
                break;
            }
        }
        for (auto& t : threads) t.join();
    }
    std::exception_ptr first = L.error;
    if (!first) {
        try {
            WarnUnwaited(L);
        } catch (...) {
            first = std::current_exception();
        }
    }
    // With the race check on, GM bytes two contexts write are ordered by flags or reported;
    // the overlap check stays for what the check does not cover.
    std::string overlap;
    if (!first && !(L.race && L.range_e <= L.range_b)) {
        if (L.race) {
            for (int64_t x = 0; x < runs; ++x) {
                auto& w = ctxs[x].gm_writes;
                w.erase(std::remove_if(w.begin(), w.end(), [&L](const GmWrite& g) {
                            return g.b < L.range_e && L.range_b < g.e; }), w.end());
            }
        }
        for (int64_t x = 0; x < runs; ++x) for (auto& w : ctxs[x].gm_writes) w.blk = x;
        overlap = FindWriteOverlap(ctxs.get(), runs);
    }
    PublishLaunch(name, blockDim, 2, ctxs.get(), runs);
    if (first) std::rethrow_exception(first);
    if (!overlap.empty()) {
        throw DeviceRuleError(Cat("ascendc_emu: kernel ", name, ", launch end: ", overlap));
    }
}

}  // namespace emu
}  // namespace AscendC

#endif  // ASCENDC_EMU_RUNTIME_CROSS_CORE_H
