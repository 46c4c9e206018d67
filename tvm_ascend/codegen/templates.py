"""Fixed scaffolding printed once per translation unit (not per op): copy helpers, host runtime."""

KERNEL_PRELUDE = """\
#include "kernel_operator.h"

// TIR's floordiv/floormod round towards minus infinity, C++'s / and % towards zero: index
// arithmetic whose dividend may be negative (a slice with a negative step, a Gather's negative
// ids) is printed with these (scalar_printer.py)
__aicore__ inline int64_t FloorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__aicore__ inline int64_t FloorModInt(int64_t a, int64_t b) {
  int64_t m = a % b;
  return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}
"""

# GM <-> UB copies of any element count: DataCopy needs whole 32-byte blocks, DataCopyPad
# (910B/A3, 310B, 950) moves the unaligned rest exactly, so no block writes past its range.
COPY_HELPERS_PAD = """\
template <typename T>
__aicore__ inline void CopyGmToUb(const AscendC::LocalTensor<T>& dst,
                                  const AscendC::GlobalTensor<T>& src, uint32_t count) {
  if ((count * sizeof(T)) % 32 == 0) {
    AscendC::DataCopy(dst, src, count);
    return;
  }
  AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
  AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
  AscendC::DataCopyPad(dst, src, params, pad);
}

template <typename T>
__aicore__ inline void CopyUbToGm(const AscendC::GlobalTensor<T>& dst,
                                  const AscendC::LocalTensor<T>& src, uint32_t count) {
  if ((count * sizeof(T)) % 32 == 0) {
    AscendC::DataCopy(dst, src, count);
    return;
  }
  AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
  AscendC::DataCopyPad(dst, src, params);
}
"""

# SoCs without DataCopyPad (910A, 310P): whole blocks by DataCopy, the tail element by element
# (destinations by value: SetValue is not const).
COPY_HELPERS_NOPAD = """\
template <typename T>
__aicore__ inline void CopyGmToUb(AscendC::LocalTensor<T> dst,
                                  const AscendC::GlobalTensor<T>& src, uint32_t count) {
  uint32_t aligned = count / (32 / sizeof(T)) * (32 / sizeof(T));
  if (aligned > 0) AscendC::DataCopy(dst, src, aligned);
  for (uint32_t k = aligned; k < count; ++k) dst.SetValue(k, src.GetValue(k));
}

template <typename T>
__aicore__ inline void CopyUbToGm(AscendC::GlobalTensor<T> dst,
                                  const AscendC::LocalTensor<T>& src, uint32_t count) {
  uint32_t aligned = count / (32 / sizeof(T)) * (32 / sizeof(T));
  if (aligned > 0) AscendC::DataCopy(dst, src, aligned);
  for (uint32_t k = aligned; k < count; ++k) dst.SetValue(k, src.GetValue(k));
}
"""

# Rows of ``cols`` elements between GM (contiguous) and UB (each row 32-byte aligned, ``stride``
# elements apart): one multi-burst DataCopyPad; UB bursts land on 32-byte boundaries by design.
ROW_COPY_HELPERS_PAD = """\
// UB rows are ``stride`` elements apart; a burst fills its row rounded up to 32 bytes, so the
// rest of the row is a gap in 32-byte blocks (rows of a narrower dtype in the same program
// make ``stride`` longer than one burst, e.g. bool masks beside float rows)
template <typename T>
__aicore__ inline uint32_t RowGapBlocks(uint32_t cols, uint32_t stride) {
  return (stride * sizeof(T) - (cols * sizeof(T) + 31) / 32 * 32) / 32;
}

template <typename T>
__aicore__ inline void CopyRowsIn(const AscendC::LocalTensor<T>& dst,
                                  const AscendC::GlobalTensor<T>& src, uint32_t rows,
                                  uint32_t cols, uint32_t stride) {
  AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows),
                                    static_cast<uint32_t>(cols * sizeof(T)), 0,
                                    RowGapBlocks<T>(cols, stride), 0};
  AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
  AscendC::DataCopyPad(dst, src, params, pad);
}

template <typename T>
__aicore__ inline void CopyRowsOut(const AscendC::GlobalTensor<T>& dst,
                                   const AscendC::LocalTensor<T>& src, uint32_t rows,
                                   uint32_t cols, uint32_t stride) {
  AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows),
                                    static_cast<uint32_t>(cols * sizeof(T)),
                                    RowGapBlocks<T>(cols, stride), 0, 0};
  AscendC::DataCopyPad(dst, src, params);
}
"""

# Without DataCopyPad: one row at a time through the element-count helpers above.
ROW_COPY_HELPERS_LOOP = """\
template <typename T>
__aicore__ inline void CopyRowsIn(const AscendC::LocalTensor<T>& dst,
                                  const AscendC::GlobalTensor<T>& src, uint32_t rows,
                                  uint32_t cols, uint32_t stride) {
  for (uint32_t r = 0; r < rows; ++r) CopyGmToUb(dst[r * stride], src[r * cols], cols);
}

template <typename T>
__aicore__ inline void CopyRowsOut(const AscendC::GlobalTensor<T>& dst,
                                   const AscendC::LocalTensor<T>& src, uint32_t rows,
                                   uint32_t cols, uint32_t stride) {
  for (uint32_t r = 0; r < rows; ++r) CopyUbToGm(dst[r * cols], src[r * stride], cols);
}
"""

# A tile of ``rows`` x ``cols`` elements between a GM matrix whose rows are ``pitch`` elements
# apart and UB rows ``stride`` elements apart (32-byte aligned): the cube kernels' epilogue
# operands and output tiles. Printed once per unit (kernel_parts.cube_prelude), the flavour of
# the unit's SoC. With DataCopyPad: one multi-burst copy, the GM gap between bursts.
TILE_COPY_HELPERS_PAD = """\
template <typename T>
__aicore__ inline void CopyTileIn(const AscendC::LocalTensor<T>& dst,
                                  const AscendC::GlobalTensor<T>& src, uint32_t rows,
                                  uint32_t cols, uint32_t stride, uint64_t pitch) {
  uint32_t burst = (cols * sizeof(T) + 31) / 32 * 32;
  AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows),
                                    static_cast<uint32_t>(cols * sizeof(T)),
                                    static_cast<uint32_t>((pitch - cols) * sizeof(T)),
                                    static_cast<uint32_t>((stride * sizeof(T) - burst) / 32), 0};
  // the burst's last block past the row is zeros (the conv's slab rows need them)
  uint8_t tail = static_cast<uint8_t>((burst - cols * sizeof(T)) / sizeof(T));
  AscendC::DataCopyPadExtParams<T> pad{true, 0, tail, static_cast<T>(0)};
  AscendC::DataCopyPad(dst, src, params, pad);
}

// The same where the caller ignores a UB row's elements past ``cols``: with DataCopyPad the
// exact copy (``avail`` is unused).
template <typename T>
__aicore__ inline void CopyTileInBlocks(const AscendC::LocalTensor<T>& dst,
                                        const AscendC::GlobalTensor<T>& src, uint32_t rows,
                                        uint32_t cols, uint32_t stride, uint64_t pitch,
                                        uint64_t avail) {
  CopyTileIn(dst, src, rows, cols, stride, pitch);
}

template <typename T>
__aicore__ inline void CopyTileOut(const AscendC::GlobalTensor<T>& dst,
                                   const AscendC::LocalTensor<T>& src, uint32_t rows,
                                   uint32_t cols, uint32_t stride, uint64_t pitch) {
  uint32_t burst = (cols * sizeof(T) + 31) / 32 * 32;
  AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows),
                                    static_cast<uint32_t>(cols * sizeof(T)),
                                    static_cast<uint32_t>((stride * sizeof(T) - burst) / 32),
                                    static_cast<uint32_t>((pitch - cols) * sizeof(T)), 0};
  AscendC::DataCopyPad(dst, src, params);
}
"""

# The same without DataCopyPad (310P, 910A): per row one DataCopy of the whole 32-byte blocks,
# then the tail element by element on the scalar unit. A block copy to GM never reaches past
# the row's own columns: the elements after them may belong to another core's tile. The scalar
# unit and the vector unit hand the tails over with flags (destinations by value: SetValue is
# not const).
TILE_COPY_HELPERS_LOOP = """\
template <typename T>
__aicore__ inline void CopyTileIn(AscendC::LocalTensor<T> dst,
                                  const AscendC::GlobalTensor<T>& src, uint32_t rows,
                                  uint32_t cols, uint32_t stride, uint64_t pitch) {
  uint32_t aligned = cols / (32 / sizeof(T)) * (32 / sizeof(T));
  for (uint32_t r = 0; aligned > 0 && r < rows; ++r) {
    AscendC::DataCopy(dst[r * stride], src[r * pitch], aligned);
  }
  if (aligned == cols) return;
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t k = aligned; k < cols; ++k) {
      dst.SetValue(r * stride + k, src.GetValue(r * pitch + k));
    }
  }
  // vector instructions read the tails next
  AscendC::SetFlag<AscendC::HardEvent::S_V>(0);
  AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);
}

// The same where the caller ignores a UB row's elements past ``cols``: each row's whole
// 32-byte blocks, its tail included, by one DataCopy that reads on into the GM after the row.
// Only rows whose blocks would pass the tensor's end (``avail`` elements from ``src``) are
// copied exactly, their tails on the scalar unit.
template <typename T>
__aicore__ inline void CopyTileInBlocks(AscendC::LocalTensor<T> dst,
                                        const AscendC::GlobalTensor<T>& src, uint32_t rows,
                                        uint32_t cols, uint32_t stride, uint64_t pitch,
                                        uint64_t avail) {
  uint32_t whole = (cols + 32 / sizeof(T) - 1) / (32 / sizeof(T)) * (32 / sizeof(T));
  uint64_t fit = avail < whole ? 0 : (avail - whole) / pitch + 1;  // rows [0, fit) read whole
  uint32_t over = fit < rows ? static_cast<uint32_t>(fit) : rows;
  for (uint32_t r = 0; r < over; ++r) AscendC::DataCopy(dst[r * stride], src[r * pitch], whole);
  if (over < rows) {
    CopyTileIn(dst[over * stride], src[over * pitch], rows - over, cols, stride, pitch);
  }
}

template <typename T>
__aicore__ inline void CopyTileOut(AscendC::GlobalTensor<T> dst,
                                   const AscendC::LocalTensor<T>& src, uint32_t rows,
                                   uint32_t cols, uint32_t stride, uint64_t pitch) {
  uint32_t aligned = cols / (32 / sizeof(T)) * (32 / sizeof(T));
  for (uint32_t r = 0; aligned > 0 && r < rows; ++r) {
    AscendC::DataCopy(dst[r * pitch], src[r * stride], aligned);
  }
  if (aligned == cols) return;
  // the scalar unit reads the tails the vector unit wrote
  AscendC::SetFlag<AscendC::HardEvent::V_S>(0);
  AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t k = aligned; k < cols; ++k) {
      dst.SetValue(r * pitch + k, src.GetValue(r * stride + k));
    }
  }
}
"""


def tile_copy_helpers(data_copy_pad: bool) -> str:
    """The ``CopyTileIn`` / ``CopyTileOut`` helpers of a cube kernel for a SoC with or without
    DataCopyPad (the plan's ``data_copy_pad``).

    Example
    -------
    >>> "DataCopyPad" in tile_copy_helpers(False)
    False
    """
    return TILE_COPY_HELPERS_PAD if data_copy_pad else TILE_COPY_HELPERS_LOOP


# Host side of the CPU-emulated build: CANN's CPU twin-debug entry points (GmAlloc, ICPU_RUN_KF)
# behind tvm-ffi exported functions, plus the profile and the embedded metadata.
# The launchers' argument check, shared by the emulator and the ACL host runtimes.
CHECK_ARG = """\
inline void CheckArg(const tvm::ffi::TensorView& t, const char* kernel, const char* name,
                     int64_t numel, int bits) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim(); ++i) n *= t.shape()[i];
  if (n != numel || t.dtype().bits != bits) {
    TVM_FFI_THROW(ValueError) << kernel << ": argument " << name << " has " << n
                              << " elements of " << t.dtype().bits << " bits, expected " << numel
                              << " of " << bits;
  }
}
"""

HOST_RUNTIME = """\
#include "tikicpulib.h"
#include <tvm/ffi/function.h>
#include <tvm/ffi/container/tensor.h>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tvm_ascend_rt {
static std::mutex g_profile_mutex;
static std::vector<std::string> g_profile;

""" + CHECK_ARG + """
inline uint8_t* ToGm(const tvm::ffi::TensorView& t, size_t bytes, bool copy) {
  uint8_t* gm = static_cast<uint8_t*>(AscendC::GmAlloc(bytes == 0 ? 32 : bytes));
  if (copy && bytes) std::memcpy(gm, static_cast<const uint8_t*>(t.data_ptr()), bytes);
  return gm;
}

template <typename F>
inline void Run(const char* kernel, F&& launch) {
  try {
    launch();
  } catch (const AscendC::emu::DeviceRuleError& err) {
    TVM_FFI_THROW(RuntimeError) << "DeviceRuleError in " << kernel << ": " << err.what();
  }
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  g_profile.push_back(AscendC::emu::ToJson(AscendC::emu::LastLaunch()));
}

static tvm::ffi::String ProfileJson() {
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  std::string out = "[";
  for (size_t i = 0; i < g_profile.size(); ++i) out += (i ? "," : "") + g_profile[i];
  return tvm::ffi::String(out + "]");
}

static int64_t ProfileReset() {
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  int64_t n = static_cast<int64_t>(g_profile.size());
  g_profile.clear();
  return n;
}
}  // namespace tvm_ascend_rt

TVM_FFI_DLL_EXPORT_TYPED_FUNC(ascend_profile_json, tvm_ascend_rt::ProfileJson);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(ascend_profile_reset, tvm_ascend_rt::ProfileReset);
"""
