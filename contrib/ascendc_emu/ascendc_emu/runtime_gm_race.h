/* ascendc_emu/runtime_gm_race.h: the GM race check of cross-core launches: a byte-range shadow
 * of GM holding, per range, its latest writes and reads as epochs (context, clock) of the
 * contexts' vector clocks, which the cross-core flags carry (runtime_cross_core.h). Included by
 * runtime_cross_core.h only.
 */
#ifndef ASCENDC_EMU_RUNTIME_GM_RACE_H
#define ASCENDC_EMU_RUNTIME_GM_RACE_H

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "cross_core.h"

namespace AscendC {
namespace emu {

using VClock = std::vector<uint32_t>;

struct Epoch {
    int x = -1;         // context, -1: the host (before the launch)
    uint32_t t = 0;     // its clock
    bool synced = false;  // a read that saw a kernel write ordered before it
};
constexpr size_t kShadowHistory = 16;  // writes remembered per segment
struct ShadowSeg {
    uintptr_t e = 0;
    Epoch w;                 // latest write (version `ver`; the host's before any)
    uint32_t ver = 0;        // kernel writes of these bytes so far
    std::deque<Epoch> hist;  // the latest writes, hist.back() == w
    std::vector<Epoch> reads;  // latest read per context since the latest write
    std::vector<std::pair<int, uint32_t>> lastRead;  // per context: the version it read last
    // atomic adds since the latest plain write, the latest per context: they commute with one
    // another, but a plain access must be ordered after every one of them
    std::vector<Epoch> adds;
    /* The write that made version v, or nullptr when it is forgotten (or v is not a version). */
    const Epoch* Version(uint32_t v) const {
        const uint32_t oldest = ver - static_cast<uint32_t>(hist.size()) + 1;
        return v >= oldest && v <= ver && !hist.empty() ? &hist[v - oldest] : nullptr;
    }
};

/* The shadow of the GM bytes a launch touched. */
struct GmShadow {
    std::map<uintptr_t, ShadowSeg> segs;  // by start; segments never overlap
    /* The segments covering [b, e), split at b and e, gaps filled. */
    std::vector<std::map<uintptr_t, ShadowSeg>::iterator> Range(uintptr_t b, uintptr_t e);
    /* Records an access of [b, e) by context x whose clock is `mine`; returns the race it
     * makes ("" when none), naming the other context from `ctx`. */
    std::string Access(int x, const VClock& mine, uintptr_t b, uintptr_t e, bool write,
                       const std::vector<BlockCtx*>& ctx, bool atomic = false);
};

/* Is `e` ordered before the present of context x (whose clock is `mine`)? */
inline bool Ordered(const VClock& mine, int x, const Epoch& e) {
    return e.x < 0 || e.x == x || e.t <= mine[e.x];
}

ASCENDC_EMU_RT std::string GmWhere(uintptr_t lo, uintptr_t hi) {
    uintptr_t base = 0;
    size_t size = 0;
    if (FindGmAllocation(reinterpret_cast<void*>(lo), &base, &size)) {
        return Cat("bytes [", lo - base, ", ", hi - base, ") of a ", size, " B GmAlloc buffer");
    }
    return Cat("bytes [", Hex{lo}, ", ", Hex{hi}, ")");
}

/* The shadow segments covering [b, e), split at b and e, gaps filled. */
ASCENDC_EMU_RT std::vector<std::map<uintptr_t, ShadowSeg>::iterator> GmShadow::Range(uintptr_t b, uintptr_t e) {
    auto& m = segs;
    auto split = [&m](uintptr_t at) {
        auto it = m.upper_bound(at);
        if (it == m.begin()) return;
        --it;
        if (it->first < at && at < it->second.e) {
            ShadowSeg tail = it->second;
            it->second.e = at;
            m.emplace(at, tail);
        }
    };
    split(b);
    split(e);
    std::vector<std::map<uintptr_t, ShadowSeg>::iterator> out;
    uintptr_t at = b;
    auto it = m.lower_bound(b);
    while (at < e) {
        if (it == m.end() || it->first > at) {
            uintptr_t end = it == m.end() ? e : std::min<uintptr_t>(e, it->first);
            ShadowSeg s;
            s.e = end;
            it = m.emplace_hint(it, at, s);
        }
        out.push_back(it);
        at = it->second.e;
        ++it;
    }
    return out;
}

ASCENDC_EMU_RT std::string GmShadow::Access(int x, const VClock& mine, uintptr_t b, uintptr_t e, bool write,
                                          const std::vector<BlockCtx*>& ctx, bool atomic) {
    const Epoch now{x, mine[x], false};
    for (auto it : Range(b, e)) {
        ShadowSeg& s = it->second;
        auto where = [&it, &s]() { return GmWhere(it->first, s.e); };
        if (!atomic) {
            // a plain read or write must come after every other context's atomic add
            for (const Epoch& add : s.adds) {
                if (Ordered(mine, x, add)) continue;
                return Cat(where(), " are atomically added to by ", CtxName(*ctx[add.x]), " and ",
                           write ? "written" : "read", " by this context (", write ? "a plain write" : "a plain read",
                           ") with no cross-core flag ordering the two: atomic adds commute only with "
                           "one another");
            }
        }
        if (!write) {
            uint32_t last = 0;  // the version this context read last
            for (const auto& lr : s.lastRead) if (lr.first == x) last = lr.second;
            if (!Ordered(mine, x, s.w)) {
                // It waited for the version after the one it read last, and that is gone: the
                // writer overwrote it; else it read without waiting for the write.
                const Epoch* wanted = s.Version(last + 1);
                if (last + 1 < s.ver && wanted != nullptr && Ordered(mine, x, *wanted)) {
                    return Cat("overwritten before read: ", where(), " were rewritten by ", CtxName(*ctx[s.w.x]),
                               " after the version this context synchronised with and before this read "
                               "(a slot reused without back-pressure: the reader sets a flag after reading, "
                               "the writer waits on it before writing the slot again)");
                }
                return Cat("read before write: ", where(), " were written by ", CtxName(*ctx[s.w.x]),
                           " with no cross-core flag ordering that write before this read "
                           "(CrossCoreSetFlag after the write, CrossCoreWaitFlag before the read)");
            }
            Epoch r = now;
            r.synced = s.w.x >= 0;
            bool found = false;
            for (Epoch& old : s.reads) {
                if (old.x == x) { old = r; found = true; }
            }
            if (!found) s.reads.push_back(r);
            bool known = false;
            for (auto& lr : s.lastRead) {
                if (lr.first == x) { lr.second = s.ver; known = true; }
            }
            if (!known) s.lastRead.emplace_back(x, s.ver);
            continue;
        }
        for (const Epoch& r : s.reads) {
            if (Ordered(mine, x, r)) continue;
            if (r.synced) {
                return Cat("overwritten before read: ", where(), " are being read by ", CtxName(*ctx[r.x]),
                           " and this write is not ordered after that read (a slot reused without "
                           "back-pressure: the reader sets a flag after reading, the writer waits on it "
                           "before writing the slot again)");
            }
            return Cat("read before write: ", CtxName(*ctx[r.x]), " read ", where(),
                       " before this write with no cross-core flag ordering the write first "
                       "(CrossCoreSetFlag after the write, CrossCoreWaitFlag before the read)");
        }
        if (!Ordered(mine, x, s.w)) {
            return Cat(where(), " are written by this context and by ", CtxName(*ctx[s.w.x]),
                       atomic ? " (a plain write, this an atomic add)" : "",
                       " with no cross-core flag ordering the two writes");
        }
        if (atomic) {  // the plain write it adds to stays the version readers synchronise with
            bool found = false;
            for (Epoch& old : s.adds) {
                if (old.x == x) { old = now; found = true; }
            }
            if (!found) s.adds.push_back(now);
            continue;
        }
        s.adds.clear();
        s.w = now;
        ++s.ver;
        s.hist.push_back(now);
        if (s.hist.size() > kShadowHistory) s.hist.pop_front();
        s.reads.clear();
    }
    return "";
}

}  // namespace emu
}  // namespace AscendC

#endif  // ASCENDC_EMU_RUNTIME_GM_RACE_H
