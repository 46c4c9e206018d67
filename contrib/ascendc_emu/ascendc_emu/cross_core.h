/* ascendc_emu/cross_core.h: AIC programs in the MIX 1:2 kernels of split chips (910B/A3, dav_c220)
 * and the cross-core flags between an AIC and its two AIVs.
 *
 * A MIX_MODE launch on a 2201 chip first runs the AIC of group 0 as a probe (no side effects):
 * a kernel that reaches REGIST_MATMUL_OBJ there (its AIC is the Matmul API's server), or that
 * touches memory before asking ASCEND_IS_AIC / ASCEND_IS_AIV, or whose AIC side does nothing,
 * runs as before (the body once per AIV). A kernel that branches on the core type and then
 * works on the AIC side (or uses a cross-core flag) runs every AIC and AIV context of every
 * group at once, on threads (runtime_cross_core.h), with:
 *  - position rules: an AIC has no UB, an AIV no L1/L0A/L0B/L0C;
 *  - CrossCoreSetFlag<mode, pipe>(flagId) / CrossCoreWaitFlag<mode, pipe>(flagId) as on dav_c220
 *    (asc-devkit kernel_operator_block_sync_intf.h: the set has no defaults, the wait defaults
 *    to <0, PIPE_S>; the device ignores the wait's mode): each core keeps a counter per flag id
 *    that a delivery raises and a wait lowers (blocking at 0). mode 0: delivered to every core
 *    of the setter's type in the launch once all of them have set (what SyncAll builds on);
 *    mode 1: to both AIVs of the group once both have set; mode 2: an AIC's set to both AIVs of
 *    its group, the AIVs' sets to their AIC once both have set. Flag ids 0..10 (the message
 *    field is 4 bits and SyncAll uses 11..14); at most 15 sets pending per counter (it
 *    saturates on the device, so one more is an error here);
 *  - deadlock detection, a GM race check on vector clocks the flags carry, and a warning for
 *    sets never waited (see README "Cross-core programs").
 */
#ifndef ASCENDC_EMU_CROSS_CORE_H
#define ASCENDC_EMU_CROSS_CORE_H

#include "core.h"

namespace AscendC {
namespace emu {

constexpr int kCrossCoreUserFlags = 11;   // flag ids 0..10 for kernels
constexpr int kCrossCoreFlagSlots = 16;   // the 4-bit flag field of the FFTS message
constexpr int kCrossCoreMaxPending = 15;  // a flag's counter saturates at 15

/* "AIC 1 (group 1)" / "AIV 3 (group 1, sub 1)": how messages name a cross-core context. */
std::string CtxName(const BlockCtx& c);

void CrossCoreSet(int mode, pipe_t pipe, uint32_t flagId);
void CrossCoreWait(int mode, pipe_t pipe, uint32_t flagId);

/* The GM race check of cross-core launches: on by default, over every GM byte the kernel
 * touches; SetCrossCoreRaceRange(p, bytes) limits it to one range (the workspace), nullptr
 * checks all GM again. */
void SetCrossCoreRaceCheck(bool on);
void SetCrossCoreRaceRange(const void* begin, size_t bytes);

/* Hooks of the memory paths (cold: taken only in a probe or a cross-core launch). */
[[gnu::cold]] void CrossCoreLocalAccess(BlockCtx& c, Mem m, const char* api);
[[gnu::cold]] void CrossCoreGmAccess(BlockCtx& c, const void* p, uint64_t bytes, bool write, const char* api,
                                     bool atomic);
/* REGIST_MATMUL_OBJ on an AIC: ends the probe (the AIC serves the Matmul API; AIV-only launch). */
void CrossCoreMatmulServer();

inline void LocalAccessHook(Mem m, const char* api) {
    BlockCtx& c = Ctx();
    if (c.probing || c.xc != nullptr) CrossCoreLocalAccess(c, m, api);
}
/* An access of GM the AIC may still be writing: a panel of an IterateAll<false> that no
 * WaitIterateAll has waited for yet (matmul_async.h). */
[[noreturn, gnu::cold]] inline void PendingGmAccess(const PendingGm& g, uintptr_t b, uintptr_t e, bool write,
                                                    const char* api) {
    Fail(api, Cat(write ? "writes" : "reads", " GM bytes [", b - g.b, ", ", e - g.b, ") of panel ", g.panel,
                  " of an asynchronous IterateAll<false> (", g.e - g.b, " B) before its WaitIterateAll: "
                  "the AIC may still be writing it"));
}
/* `atomic`: the write is an atomic add (MTE3 / FIX under SetAtomicAdd, enAtomic 1), which commutes
 * with other contexts' atomic adds; a scalar SetValue never is (the atomic unit is on the MTE path). */
inline void GmAccessHook(const void* p, uint64_t bytes, bool write, const char* api, bool atomic = false) {
    BlockCtx& c = Ctx();
    if (c.probing || c.xc != nullptr) CrossCoreGmAccess(c, p, bytes, write, api, atomic);
    if (!c.pending_gm.empty() && bytes != 0) {
        const uintptr_t b = reinterpret_cast<uintptr_t>(p), e = b + bytes;
        for (const PendingGm& g : c.pending_gm) {
            if (b < g.e && g.b < e) PendingGmAccess(g, b, e, write, api);
        }
    }
}

}  // namespace emu

template <uint8_t modeId, pipe_t pipe>
inline void CrossCoreSetFlag(uint16_t flagId) {
    emu::CrossCoreSet(modeId, pipe, flagId);
}

template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
inline void CrossCoreWaitFlag(uint16_t flagId) {
    emu::CrossCoreWait(modeId, pipe, flagId);
}

}  // namespace AscendC

#endif  // ASCENDC_EMU_CROSS_CORE_H
