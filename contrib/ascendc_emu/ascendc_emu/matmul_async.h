/* ascendc_emu/matmul_async.h: the Matmul API's asynchronous rounds (Iterate<false> /
 * GetTensorC<false>), as CANN's client and server do them on split chips (matmul_client.h,
 * kfc/matmul_server_impl_c220.h): the round's first Iterate<false> posts one message and the AIC
 * computes all mIter * nIter tiles of the round without waiting for the AIV, writing tile i at
 * workspace + i * baseM * baseN * sizeof(C) (rows curN apart, enSequentialWrite); each
 * GetTensorC<false> copies the next slot into the UB. The AIV waits on an event for the first
 * INC_PROCESS_CHECK (14) fetches of a round (the AIC signals tiles 1..13 and the round's end), so
 * tile 13 and later wait for the whole round. The emulator writes every slot at the round's start
 * (the AIC runs ahead as far as it can) and fails a fetch of a slot this round did not produce, a
 * slot whose bytes changed since it was produced (another object, core or copy wrote there), and
 * a new round or End() while slots of the last are unfetched (the AIC would overwrite them).
 *
 * Asynchronous IterateAll (IterateAll<false>(gm, 0, false, waitIterateAll = true), then
 * WaitIterateAll(), as matmul_client.h posts MMFUN_ITERATE_ALL without waiting and WaitEvent()s
 * later): the AIC computes the whole singleCore block into `gm` while the AIV goes on; the AIV
 * may read it only after the WaitIterateAll that answers that call (one event per call, waited in
 * the order posted). The emulator writes the block at the call (AIC ahead) and, until its wait,
 * fails every access of the block to those bytes (GmAccessHook), a second IterateAll<false> into
 * bytes still pending (two panels in one workspace slot), a WaitIterateAll with no call to answer
 * (or for a call posted without waitIterateAll: the server sends no event, the AIV would hang)
 * and an End() with calls unwaited.
 *
 * Included by matmul.h after MatmulCore; MatmulImpl's IterateAsync, FetchAsync, IterateAllAsync
 * and WaitIterateAll drive it.
 */
#ifndef ASCENDC_EMU_MATMUL_ASYNC_H
#define ASCENDC_EMU_MATMUL_ASYNC_H

#include <algorithm>
#include <deque>
#include <vector>

namespace AscendC {
namespace emu {

struct AsyncSlot {
    int row, col, m, n;
    uint64_t off, hash;
};

/* One Matmul object's last asynchronous round: its workspace slots, and how many were fetched. */
struct AsyncRound {
    bool on = false;  // the last round was asynchronous; GetTensorC fetches from its slots
    std::vector<AsyncSlot> slots;
    size_t fetched = 0;

    static uint64_t Fnv(const uint8_t* p, uint64_t n) {
        uint64_t h = 1469598103934665603ull;
        for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
        return h;
    }
    /* A round may start (or the object end) only when the last asynchronous one is fetched. */
    void Drained(const char* api) const {
        if (on && fetched < slots.size()) {
            Fail(api, Cat("tiles ", fetched, "..", slots.size() - 1, " of the last "
                          "asynchronous round (", slots.size(), " tiles) were never fetched with "
                          "GetTensorC<false>: a new round would overwrite their workspace slots "
                          "before they are read"));
        }
    }
    void NotAsync(const char* api) const {
        if (on) {
            Fail(api, "an asynchronous round (Iterate<false>) fetches into a LocalTensor (UB) only: on "
                      "split chips the device asserts a synchronous Iterate before GetTensorC to GM");
        }
    }
    /* A later Iterate<false> of the running round: on to the next tile (false past the last). */
    bool Step(const char* api, MatmulCore& s) const {
        if (!on) Fail(api, "called in a round a synchronous Iterate started (a round is all-sync or all-async)");
        if (++s.tile >= int64_t(s.mIter) * s.nIter) {
            s.tile = -1;
            return false;
        }
        return true;
    }
    /* What the first Iterate<false> of a round needs: a split chip's MIX kernel, C in the UB, the
     * last round fetched and a workspace. */
    void CheckStart(const char* api, bool cInUb, bool hasWorkspace) const {
        const SocProfile& soc = ActiveSoc();
        if (soc.npu_arch != 2201) {
            Fail(api, Cat("asynchronous iteration is for the MIX kernels of split chips (Atlas A2/A3: "
                          "the AIC runs ahead into the GM workspace); ", soc.name, " has no "
                          "SetWorkspace: iterate synchronously"));
        }
        if (Global().kernel_mode.load() == static_cast<int>(KernelMode::AIC_MODE)) {
            Fail(api, "an AIC_MODE (cube-only) kernel iterates synchronously only");
        }
        if (!cInUb) {
            Fail(api, "C's MatmulType position must be the UB (VECIN/VECOUT/VECCALC): the device asserts "
                      "PhyPosIsUB(C_TYPE::pos) for an asynchronous Iterate");
        }
        Drained(api);
        if (!hasWorkspace) {
            Fail(api, "no workspace: call SetWorkspace first (the AIC caches every tile of the round there "
                      "for GetTensorC<false>)");
        }
    }
    /* A new round of s's tiles, each a baseM x baseN slot of DstT: they must fit the workspace. */
    template <class DstT>
    void Begin(const char* api, const MatmulCore& s, int64_t wsBytes) {
        const int64_t tiles = int64_t(s.mIter) * s.nIter;
        const int64_t slot = int64_t(s.t.baseM) * s.t.baseN * int64_t(sizeof(DstT));
        if (tiles * slot > wsBytes) {
            Fail(api, Cat("a round of ", s.mIter, " x ", s.nIter, " tiles needs ", tiles, " x baseM ",
                          s.t.baseM, " x baseN ", s.t.baseN, " x ", sizeof(DstT), " B = ", tiles * slot,
                          " B of workspace; SetWorkspace gave ", wsBytes, " B"));
        }
        slots.clear();
        fetched = 0;
    }
    /* s's current tile (tile i of the round) into workspace slot i, counted as a GM write. */
    template <class DstT>
    void Produce(const char* api, const GlobalTensor<uint8_t>& ws, const MatmulCore& s, int64_t i) {
        const int64_t slot = int64_t(s.t.baseM) * s.t.baseN * int64_t(sizeof(DstT));
        const int m = s.curM, n = s.curN;
        const uint64_t off = uint64_t(i * slot), bytes = uint64_t(m) * n * sizeof(DstT);
        uint8_t* p = ws.Check(off, bytes, api, "workspace slot");
        DstT* d = reinterpret_cast<DstT*>(p);
        for (int64_t e = 0; e < int64_t(m) * n; ++e) d[e] = CubeOut<DstT>(s.acc[size_t(e)]);
        const uintptr_t a = reinterpret_cast<uintptr_t>(p);
        RecordGmWrite(a, a + bytes);
        Ctx().c.gm_write_bytes += int64_t(bytes);
        slots.push_back(AsyncSlot{s.curRow, s.curCol, m, n, off, Fnv(p, bytes)});
    }
    /* The next slot into s's current tile, once checked (produced by this round, unchanged since,
     * of the height x width asked); returns its bytes. The caller writes the tile out and then
     * counts the fetch. */
    template <class DstT>
    uint64_t Load(const char* api, const GlobalTensor<uint8_t>& ws, MatmulCore& s, uint32_t height,
                  uint32_t width, uint32_t srcGap, uint32_t dstGap) const {
        const size_t k = fetched;
        if (k >= slots.size()) {
            Fail(api, Cat("fetch ", k, " of an asynchronous round of ", slots.size(), " tiles: "
                          "workspace slot ", k, " holds no tile of this round (not yet produced: "
                          "start the next round with Iterate<false> first)"));
        }
        const AsyncSlot& sl = slots[k];
        const uint64_t bytes = uint64_t(sl.m) * sl.n * sizeof(DstT);
        const uint8_t* p = ws.Check(sl.off, bytes, api, "workspace slot");
        if (Fnv(p, bytes) != sl.hash) {
            Fail(api, Cat("workspace slot ", k, " (bytes [", sl.off, ", ", sl.off + bytes, ") of the "
                          "workspace) was overwritten before it was fetched: another Matmul object, "
                          "core or copy wrote there after Iterate<false> produced tile ", k));
        }
        if ((height != 0 && int(height) != sl.m) || (width != 0 && int(width) != sl.n) || srcGap || dstGap) {
            Fail(api, Cat("height ", height, " x width ", width, " (gaps ", srcGap, ", ", dstGap,
                          ") differ from tile ", k, " of the round, ", sl.m, " x ", sl.n));
        }
        s.curRow = sl.row;
        s.curCol = sl.col;
        s.curM = sl.m;
        s.curN = sl.n;
        const DstT* v = reinterpret_cast<const DstT*>(p);
        s.acc.resize(size_t(sl.m) * sl.n);
        for (size_t e = 0; e < s.acc.size(); ++e) s.acc[e] = ToF(v[e]);
        return bytes;
    }
};

/* One Matmul object's asynchronous IterateAll calls not yet waited (oldest first); their GM
 * ranges are also in the block's pending_gm, which the GM access hook checks. */
struct AsyncPanels {
    struct Posted {
        uintptr_t b, e;
        bool notifies;  // posted with waitIterateAll = true: the server sends its event
        int64_t panel;
    };
    std::deque<Posted> posted;
    int64_t count = 0;  // asynchronous IterateAll calls so far (the panel index of messages)

    /* What an IterateAll<false> needs: a split chip's MIX kernel, sequential write off, and its
     * panel [b, e) clear of every panel still pending in this block. */
    void CheckPost(const char* api, bool sequential, uintptr_t b, uintptr_t e) const {
        const SocProfile& soc = ActiveSoc();
        if (soc.npu_arch != 2201) {
            Fail(api, Cat("asynchronous IterateAll is for the MIX kernels of split chips (Atlas A2/A3: "
                          "the AIC serves the AIV's messages); ", soc.name, " iterates synchronously"));
        }
        if (Global().kernel_mode.load() == static_cast<int>(KernelMode::AIC_MODE)) {
            Fail(api, "an AIC_MODE (cube-only) kernel iterates synchronously only");
        }
        if (sequential) Fail(api, "enSequentialWrite = true is not emulated for IterateAll<false>");
        for (const PendingGm& g : Ctx().pending_gm) {
            if (b < g.e && g.b < e) {
                Fail(api, Cat("its block overlaps bytes [", std::max(b, g.b) - g.b, ", ", std::min(e, g.e) - g.b,
                              ") of panel ", g.panel, " of an earlier IterateAll<false> not yet waited "
                              "(WaitIterateAll): the AIC would write both into one workspace slot"));
            }
        }
    }
    void Post(const void* owner, uintptr_t b, uintptr_t e, bool notifies) {
        posted.push_back(Posted{b, e, notifies, count});
        Ctx().pending_gm.push_back(PendingGm{b, e, owner, count});
        ++count;
    }
    /* WaitIterateAll: the oldest call's event; its panel is readable from now on. */
    void Wait(const char* api, const void* owner, bool lastWasSync) {
        if (posted.empty()) {
            Fail(api, lastWasSync ? "the last IterateAll was synchronous (the device asserts !isSyncGetC): "
                                    "no asynchronous IterateAll to wait for"
                                  : "no IterateAll<false> is pending: the AIV would wait forever for an "
                                    "event the AIC never sends");
        }
        const Posted p = posted.front();
        if (!p.notifies) {
            Fail(api, Cat("panel ", p.panel, " was posted by IterateAll<false> with waitIterateAll = false: "
                          "the server sends no event for it, so the AIV would wait forever"));
        }
        posted.pop_front();
        std::vector<PendingGm>& g = Ctx().pending_gm;
        for (size_t i = 0; i < g.size(); ++i) {
            if (g[i].owner == owner && g[i].panel == p.panel) {
                g.erase(g.begin() + static_cast<std::ptrdiff_t>(i));
                break;
            }
        }
    }
    /* End(): every asynchronous IterateAll waited for. */
    void Drained(const char* api) const {
        if (!posted.empty()) {
            Fail(api, Cat(posted.size(), " IterateAll<false> call(s) (panel ", posted.front().panel,
                          " first) were never waited with WaitIterateAll: the AIC may still be "
                          "writing their panels"));
        }
    }
};

}  // namespace emu
}  // namespace AscendC

#endif  // ASCENDC_EMU_MATMUL_ASYNC_H
