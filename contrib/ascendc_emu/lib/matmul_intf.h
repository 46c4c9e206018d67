/* lib/matmul_intf.h: the high-level Matmul API, included by kernels exactly as on the device:
 *
 *   #include "kernel_operator.h"
 *   #include "lib/matmul_intf.h"
 *   using namespace matmul;   // an alias of AscendC
 *
 * Everything is defined in ascendc_emu/matmul.h (see README "Cube").
 */
#ifndef ASCENDC_EMU_LIB_MATMUL_INTF_H
#define ASCENDC_EMU_LIB_MATMUL_INTF_H

#include "../kernel_operator.h"
#include "../ascendc_emu/matmul.h"

#endif  // ASCENDC_EMU_LIB_MATMUL_INTF_H
