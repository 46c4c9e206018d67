/* kernel_operator.h: the AscendC kernel API as emulated on the CPU (see README.md).
 *
 * Kernels include this exactly as on the device; build with
 *   g++ -std=c++17 -O2 -DASCENDC_CPU_DEBUG -I contrib/ascendc_emu kernel.cpp
 * Host programs add "tikicpulib.h" for GmAlloc/GmFree/ICPU_RUN_KF.
 */
#ifndef ASCENDC_EMU_KERNEL_OPERATOR_H
#define ASCENDC_EMU_KERNEL_OPERATOR_H

#include "ascendc_emu/types.h"
#include "ascendc_emu/core.h"
#include "ascendc_emu/cross_core.h"
#include "ascendc_emu/memory.h"
#include "ascendc_emu/data_copy.h"
#include "ascendc_emu/vector.h"
#include "ascendc_emu/vector_cast.h"
#include "ascendc_emu/vector_reduce.h"
#include "ascendc_emu/vector_gather.h"
#include "ascendc_emu/adv.h"
#include "ascendc_emu/cube.h"
#include "ascendc_emu/launch.h"
#if ASCENDC_EMU_DEFINE_RUNTIME
#include "ascendc_emu/runtime.h"
#endif

#endif  // ASCENDC_EMU_KERNEL_OPERATOR_H
