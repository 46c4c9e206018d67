/* ascendc_emu/launch.h: running a kernel over its blocks (sequentially or on threads), GM
 * allocation, launch statistics and their JSON form. Definitions: runtime_launch.h.
 */
#ifndef ASCENDC_EMU_LAUNCH_H
#define ASCENDC_EMU_LAUNCH_H

#include "data_copy.h"

namespace AscendC {

/* 32-byte aligned, zero-filled GM allocation, registered for bounds checks. A guard zone past
 * the end (never touched) lets pointers derived past the end still be attributed to it. */
void* GmAlloc(size_t size);
void GmFree(void* ptr);
inline void SetKernelMode(KernelMode mode) { emu::Global().kernel_mode.store(static_cast<int>(mode)); }

namespace emu {

/* Statistics of the most recent ICPU_RUN_KF (also filled when it threw). */
const LaunchStats& LastLaunch();
/* Compact JSON: kernel, soc, block_dim, the total counters, warnings, and blocks[] (same keys). */
std::string ToJson(const LaunchStats& s);

using BlockBody = void (*)(void*);
void RunKernelImpl(const char* name, int64_t blockDim, BlockBody body, void* arg);

/* Run body() once per block 0..blockDim-1 (what ICPU_RUN_KF expands to). */
template <typename F>
inline void RunKernel(const char* name, int64_t blockDim, F&& body) {
    using Fn = typename std::remove_reference<F>::type;
    RunKernelImpl(name, blockDim, [](void* f) { (*static_cast<Fn*>(f))(); },
                  const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace emu
}  // namespace AscendC

#endif  // ASCENDC_EMU_LAUNCH_H
