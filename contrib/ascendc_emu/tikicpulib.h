/* tikicpulib.h: CPU twin-debug entry points of the emulator.
 *
 *   uint8_t* x = (uint8_t*)AscendC::GmAlloc(bytes);      // 32-byte aligned, zeroed, bounds-checked
 *   AscendC::SetKernelMode(KernelMode::AIV_MODE);
 *   ICPU_SET_TILING_KEY(1);                              // read back with TILING_KEY_IS(1)
 *   ICPU_RUN_KF(add_custom, blockDim, x, y, z);          // kernel(x, y, z) once per block
 *   const AscendC::emu::LaunchStats& st = AscendC::emu::LastLaunch();
 *   std::puts(AscendC::emu::ToJson(st).c_str());
 *   AscendC::GmFree(x);
 *
 * Blocks run sequentially by default, on std::threads with AscendC::emu::SetRunOnThreads(true)
 * or env ASCENDC_EMU_THREADS=1. A broken device rule throws AscendC::emu::DeviceRuleError out of
 * ICPU_RUN_KF (with threads: the error of the lowest failing block, after all threads joined).
 */
#ifndef ASCENDC_EMU_TIKICPULIB_H
#define ASCENDC_EMU_TIKICPULIB_H

#include "kernel_operator.h"

#define ICPU_SET_TILING_KEY(key) \
    ::AscendC::emu::Global().tiling_key.store(static_cast<uint64_t>(key))

#define ICPU_RUN_KF(func, blkdim, ...) \
    ::AscendC::emu::RunKernel(#func, static_cast<int64_t>(blkdim), [&]() { func(__VA_ARGS__); })

#endif  // ASCENDC_EMU_TIKICPULIB_H
