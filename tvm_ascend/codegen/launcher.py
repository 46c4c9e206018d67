"""Host launchers: one tvm-ffi function per kernel, running it through CANN's CPU-debug entry.

The launcher copies the TVM tensors into GmAlloc'd global memory, fills the tiling struct, runs
``ICPU_RUN_KF(kernel, blockDim, ...)`` and copies the output back; a real-device build prints
``emit_acl_launcher`` instead (aclrtMalloc/aclrtMemcpy and ``<<<>>>``, same arguments, plus an
ACL-event timer); ``emit_host_launcher(..., launcher="emulator"|"acl")`` picks one.
"""
from __future__ import annotations

from ..errors import CodegenError
from .code_buffer import CodeBuffer
from .cpp_types import dtype_bytes
from .emulator_run import emit_emulator_run
from .templates import CHECK_ARG
from .tiling_func import (TILING_SUFFIX, emit_call_sizes, emit_runtime_launcher,
                          emit_tiling_for)


def emit_launcher(buf: CodeBuffer, symbol: str, printer, block_dim: int) -> None:
    """Print the host launcher of ``symbol`` for the kernel ``printer`` (a
    ``kernel_printer.KernelPrinter``) printed; a kernel tiled at run time gets the one of
    ``tiling_func.py`` (sizes from the arguments' shapes, its host tiling function)."""
    if printer.shape_spec() is not None:
        emit_runtime_launcher(buf, symbol, printer)
        return
    params = printer.kernel_params()  # (name, dtype, numel), outputs last
    first_out = len(params) - printer.n_outputs
    args = ", ".join(f"tvm::ffi::TensorView a{i}" for i in range(len(params)))
    with buf.indent(f"namespace {symbol}_host {{", "}  // namespace"):
        with buf.indent(f"static void Launch({args}) {{"):
            gm_names = []
            for index, (name, dtype, numel) in enumerate(params):
                bits = dtype_bytes(dtype) * 8
                is_output = index >= first_out
                buf.line(f'tvm_ascend_rt::CheckArg(a{index}, "{symbol}", "{name}", {numel}, '
                         f"{bits});")
                buf.line(f"uint8_t* gm{index} = tvm_ascend_rt::ToGm(a{index}, "
                         f"{numel * dtype_bytes(dtype)}, {'false' if is_output else 'true'});")
                if is_output and printer.zero_outputs():  # as aclrtMemset on the device
                    buf.line(f"std::memset(gm{index}, 0, {numel * dtype_bytes(dtype)});  "
                             "// the kernel adds into it atomically")
                gm_names.append(f"gm{index}")
            printer.emit_tiling_init(buf, "tilingHost")
            emit_emulator_run(buf, symbol, printer, gm_names, str(block_dim), {
                i: str(params[i][2] * dtype_bytes(params[i][1]))
                for i in range(first_out, len(params))})
    buf.line(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}, {symbol}_host::Launch);")


# ---- NPU (ACL) launchers -------------------------------------------------------------------------
# Printed instead of the emulator launcher when a unit is built for the device with CANN
# (runtime/cann.py): same tvm-ffi function and arguments, GM buffers from aclrtMalloc, the kernel
# launched with bisheng's <<<blockDim, l2ctrl, stream>>>. Every ACL call's return is checked; a
# failure breaks out of the one-pass ``do { } while (false)`` block, so the frees after it run on
# every path, and the first error is thrown afterwards with the call that failed.
ACL_TIME_SUFFIX = "__acl_time_us"
# The system part of the workspace, which the Matmul API of a cube kernel uses to pass tiles
# between AIC and AIV (PlatformAscendC::GetLibApiWorkSpaceSize(); CANN's kernel-launch samples
# reserve 16 MiB). The kernel's own part (user_workspace_bytes) follows it.
ACL_SYS_WORKSPACE_BYTES = 16 * 1024 * 1024
ACL_VECTOR_WORKSPACE_BYTES = 1024  # a vector kernel uses none; the argument is still passed

ACL_HOST_RUNTIME = """\
#include "acl/acl.h"
#include <tvm/ffi/function.h>
#include <tvm/ffi/container/tensor.h>
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tvm_ascend_acl {
""" + CHECK_ARG + """
inline void ThrowIfFailed(const char* kernel, aclError status, const char* failed) {
  if (status != ACL_SUCCESS) {
    TVM_FFI_THROW(RuntimeError) << kernel << ": " << failed << " returned ACL error " << status;
  }
}

// One device (TVM_ASCEND_DEVICE_ID, default 0) and one stream per process, made on first use.
inline aclrtStream Stream() {
  static std::once_flag once;
  static aclrtStream stream = nullptr;
  static aclError status = ACL_SUCCESS;
  static const char* failed = "";
  std::call_once(once, []() {
    const char* id = std::getenv("TVM_ASCEND_DEVICE_ID");
    int32_t device = id ? std::atoi(id) : 0;
    aclError init = aclInit(nullptr);
    // ACL_ERROR_REPEAT_INITIALIZE (acl_base_rt.h): aclInit already ran in this process
    if (init != ACL_SUCCESS && init != ACL_ERROR_REPEAT_INITIALIZE) {
      status = init;
      failed = "aclInit";
    } else if ((status = aclrtSetDevice(device)) != ACL_SUCCESS) {
      failed = "aclrtSetDevice";
    } else if ((status = aclrtCreateStream(&stream)) != ACL_SUCCESS) {
      failed = "aclrtCreateStream";
    }
  });
  ThrowIfFailed("tvm-ascend ACL runtime", status, failed);
  return stream;
}

// Frees keep the first error: a failed launch is what the user needs to see, not its cleanup.
inline void Free(uint8_t* ptr, aclError* status, const char** failed) {
  if (ptr == nullptr) return;
  aclError freed = aclrtFree(ptr);
  if (freed != ACL_SUCCESS && *status == ACL_SUCCESS) {
    *status = freed;
    *failed = "aclrtFree";
  }
}

inline void DestroyEvent(aclrtEvent event, aclError* status, const char** failed) {
  if (event == nullptr) return;
  aclError destroyed = aclrtDestroyEvent(event);
  if (destroyed != ACL_SUCCESS && *status == ACL_SUCCESS) {
    *status = destroyed;
    *failed = "aclrtDestroyEvent";
  }
}
}  // namespace tvm_ascend_acl
"""


def _acl_try(buf: CodeBuffer, call: str, what: str) -> None:
    """One checked ACL call: on failure remember it and leave the do-while block."""
    buf.line(f'if ((status = {call}) != ACL_SUCCESS) {{ failed = "{what}"; break; }}')


class _AclSizes:
    """The sizes an ACL launcher works with, as C++ text: numbers for a static kernel; for a
    kernel tiled at run time, expressions of the symbolic dimensions (``dims``), which the
    launcher reads off its arguments' shapes and checks against their ranges, as the emulator
    launcher does (``tiling_func.py``); its tiling struct and blockDim come from the same host
    tiling function, cached by shape. The ACL-event timer runs it at the range's upper bound
    (what the plan was sized for: one size, as a board times one launch)."""

    def __init__(self, symbol: str, printer, block_dim: int):
        self.symbol, self.printer = symbol, printer
        self.spec = printer.shape_spec()
        self.params = printer.kernel_params()  # (name, dtype, numel at the bound), outputs last
        if self.spec is None:
            self.numel = [str(numel) for _, _, numel in self.params]
            self.bytes = [str(numel * dtype_bytes(dtype)) for _, dtype, numel in self.params]
            self.block_dim = str(block_dim)
        else:
            self.numel = [f"numel{i}" for i in range(len(self.params))]
            self.bytes = [f"static_cast<size_t>(numel{i}) * {dtype_bytes(dtype)}"
                          for i, (_, dtype, _) in enumerate(self.params)]
            self.block_dim = "launch.blockDim"

    @property
    def runtime(self) -> bool:
        return self.spec is not None

    def alloc(self, index: int) -> str:
        """Bytes to aclrtMalloc for argument ``index``: at least 32 (ACL's smallest block)."""
        if not self.runtime:
            return str(max(int(self.bytes[index]), 32))
        return f"std::max<size_t>({self.bytes[index]}, 32)"

    def nonempty(self, index: int) -> str | None:
        """The C++ condition under which argument ``index`` holds bytes to copy; None when
        that is known here (True for any static size > 0, checked by the caller)."""
        return f"numel{index} > 0" if self.runtime else None

    def emit_tiling(self, buf: CodeBuffer, from_args: bool) -> None:
        """``tilingHost`` (and, tiled at run time, ``dims``, ``numel<i>`` and ``launch``)."""
        if not self.runtime:
            self.printer.emit_tiling_init(buf, "tilingHost")
            return
        emit_call_sizes(buf, self.symbol, self.printer, from_args)


def _acl_buffers(printer, sizes: _AclSizes) -> list[tuple[str, str, bool]]:
    """(device pointer name, bytes as C++ text, is_input) of every kernel argument, in launch
    order, then the workspace and the tiling struct."""
    first_out = len(sizes.params) - printer.n_outputs
    buffers = [(f"dev{i}", sizes.alloc(i), i < first_out) for i in range(len(sizes.params))]
    cube = printer.kernel_mode != "AIV_MODE"  # drives Matmul objects
    system = ACL_SYS_WORKSPACE_BYTES if cube else ACL_VECTOR_WORKSPACE_BYTES
    # planned at the range's upper bound, a run-time-tiled kernel's workspace fits every call
    buffers.append(("devWorkspace", str(system + printer.user_workspace_bytes()), False))
    buffers.append(("devTiling", "sizeof(tilingHost)", True))
    return buffers


def _acl_copy(buf: CodeBuffer, sizes: _AclSizes, index: int, call: str, what: str) -> None:
    """One checked copy of argument ``index``'s bytes, skipped where it holds none."""
    if not sizes.runtime:
        if int(sizes.bytes[index]):
            _acl_try(buf, call, what)
        return
    with buf.indent(f"if ({sizes.nonempty(index)}) {{"):
        _acl_try(buf, call, what)


def _acl_alloc(buf: CodeBuffer, buffers, params) -> None:
    for index, (dev, size, _) in enumerate(buffers):
        name = params[index][0] if index < len(params) else dev
        _acl_try(buf, f"aclrtMalloc(reinterpret_cast<void**>(&{dev}), {size}, "
                 "ACL_MEM_MALLOC_HUGE_FIRST)", f"aclrtMalloc({name})")


def _acl_free(buf: CodeBuffer, buffers) -> None:
    for dev, _, _ in reversed(buffers):
        buf.line(f"tvm_ascend_acl::Free({dev}, &status, &failed);")


def _acl_prologue_rest(buf: CodeBuffer, buffers) -> None:
    """The stream, every device pointer (null until allocated) and the first error's slot."""
    buf.line("aclrtStream stream = tvm_ascend_acl::Stream();")
    buf.line(" ".join(f"uint8_t* {dev} = nullptr;" for dev, _, _ in buffers))
    buf.line("aclError status = ACL_SUCCESS;")
    buf.line('const char* failed = "";')


def _acl_zero_outputs(buf: CodeBuffer, printer, buffers) -> None:
    """A kernel that adds into its outputs atomically (split-K) gets them zeroed on the
    stream before each launch: aclrtMemsetAsync (acl_rt.h), ordered before the kernel."""
    if not printer.zero_outputs():
        return
    params = printer.kernel_params()
    for index in range(len(params) - printer.n_outputs, len(params)):
        dev, size = buffers[index][0], buffers[index][1]
        _acl_try(buf, f"aclrtMemsetAsync({dev}, {size}, 0, {size}, stream)",
                 f"aclrtMemsetAsync({params[index][0]})")


def _acl_launch_line(symbol: str, block_dim: str, buffers) -> str:
    args = ", ".join(dev for dev, _, _ in buffers)
    return f"{symbol}<<<{block_dim}, nullptr, stream>>>({args});"


def emit_acl_launcher(buf: CodeBuffer, symbol: str, printer, block_dim: int,
                      timed: bool = True) -> None:
    """Print the NPU launcher of ``symbol``: ACL memory, ``<<<>>>`` launch, same arguments as
    ``emit_launcher``; with ``timed``, also ``<symbol>__acl_time_us(repeats)``, the mean time
    of one launch in microseconds from ACL events (what a board's time_kernel calls).

    Printed only for a CANN build (runtime/cann.py); it needs bisheng and a device to run.

    Example
    -------
    >>> buf = CodeBuffer()
    >>> emit_acl_launcher(buf, "k0", printer, 8)                      # doctest: +SKIP
    >>> "k0<<<8, nullptr, stream>>>" in buf.text()                    # doctest: +SKIP
    True
    """
    sizes = _AclSizes(symbol, printer, block_dim)
    params = sizes.params
    first_out = len(params) - printer.n_outputs
    buffers = _acl_buffers(printer, sizes)
    args = ", ".join(f"tvm::ffi::TensorView a{i}" for i in range(len(params)))
    with buf.indent(f"namespace {symbol}_acl {{", "}  // namespace"):
        if sizes.runtime:
            emit_tiling_for(buf, symbol, printer, sizes.spec)
        with buf.indent(f"static void Launch({args}) {{"):
            if sizes.runtime:  # the sizes CheckArg holds the arguments to come from them
                sizes.emit_tiling(buf, from_args=True)
            for index, (name, dtype, _) in enumerate(params):
                buf.line(f'tvm_ascend_acl::CheckArg(a{index}, "{symbol}", "{name}", '
                         f"{sizes.numel[index]}, {dtype_bytes(dtype) * 8});")
            if not sizes.runtime:
                sizes.emit_tiling(buf, from_args=True)
            _acl_prologue_rest(buf, buffers)
            with buf.indent("do {", "} while (false);"):
                _acl_alloc(buf, buffers, params)
                for index, (name, _, _) in enumerate(params[:first_out]):
                    size = sizes.bytes[index]
                    _acl_copy(buf, sizes, index, f"aclrtMemcpy(dev{index}, {size}, "
                              f"a{index}.data_ptr(), {size}, ACL_MEMCPY_HOST_TO_DEVICE)",
                              f"aclrtMemcpy({name})")
                _acl_try(buf, "aclrtMemcpy(devTiling, sizeof(tilingHost), &tilingHost, "
                         "sizeof(tilingHost), ACL_MEMCPY_HOST_TO_DEVICE)", "aclrtMemcpy(tiling)")
                _acl_zero_outputs(buf, printer, buffers)
                buf.line(_acl_launch_line(symbol, sizes.block_dim, buffers))
                _acl_try(buf, "aclrtSynchronizeStream(stream)", f"aclrtSynchronizeStream({symbol})")
                for index in range(first_out, len(params)):
                    size = sizes.bytes[index]
                    _acl_copy(buf, sizes, index, f"aclrtMemcpy(a{index}.data_ptr(), {size}, "
                              f"{buffers[index][0]}, {size}, ACL_MEMCPY_DEVICE_TO_HOST)",
                              f"aclrtMemcpy({params[index][0]})")
            _acl_free(buf, buffers)
            buf.line(f'tvm_ascend_acl::ThrowIfFailed("{symbol}", status, failed);')
        if timed:
            _emit_acl_timer(buf, symbol, printer, sizes, buffers)
    buf.line(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}, {symbol}_acl::Launch);")
    if sizes.runtime:
        buf.line(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}{TILING_SUFFIX}, "
                 f"{symbol}_acl::TilingJson);")
    if timed:
        buf.line(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}{ACL_TIME_SUFFIX}, {symbol}_acl::TimeUs);")


def _emit_acl_timer(buf: CodeBuffer, symbol: str, printer, sizes: _AclSizes, buffers) -> None:
    """``TimeUs(repeats)``: inputs zeroed on the device, one warm-up launch, then ``repeats``
    launches between two ACL events; the mean per launch in microseconds (a kernel tiled at
    run time: at its range's upper bound)."""
    with buf.indent("static double TimeUs(int64_t repeats) {"):
        with buf.indent("if (repeats < 1) {"):
            buf.line(f'TVM_FFI_THROW(ValueError) << "{symbol}: repeats must be >= 1, got " '
                     "<< repeats;")
        sizes.emit_tiling(buf, from_args=False)
        _acl_prologue_rest(buf, buffers)
        buf.line("aclrtEvent start = nullptr; aclrtEvent end = nullptr;")
        buf.line("float elapsedMs = 0.0f;")
        launch = _acl_launch_line(symbol, sizes.block_dim, buffers)
        with buf.indent("do {", "} while (false);"):
            _acl_alloc(buf, buffers, sizes.params)
            for dev, size, is_input in buffers:
                if is_input and dev != "devTiling":
                    _acl_try(buf, f"aclrtMemset({dev}, {size}, 0, {size})", f"aclrtMemset({dev})")
            _acl_try(buf, "aclrtMemcpy(devTiling, sizeof(tilingHost), &tilingHost, "
                     "sizeof(tilingHost), ACL_MEMCPY_HOST_TO_DEVICE)", "aclrtMemcpy(tiling)")
            _acl_try(buf, "aclrtCreateEvent(&start)", "aclrtCreateEvent(start)")
            _acl_try(buf, "aclrtCreateEvent(&end)", "aclrtCreateEvent(end)")
            _acl_zero_outputs(buf, printer, buffers)
            buf.line(launch + "  // warm-up: first-launch costs stay out of the mean")
            _acl_try(buf, "aclrtSynchronizeStream(stream)", "aclrtSynchronizeStream(warm-up)")
            _acl_try(buf, "aclrtRecordEvent(start, stream)", "aclrtRecordEvent(start)")
            with buf.indent("for (int64_t r = 0; r < repeats; ++r) {"):
                if printer.zero_outputs():  # each launch adds into a zeroed C (timed too)
                    with buf.indent("do {", "} while (false);"):
                        _acl_zero_outputs(buf, printer, buffers)
                    buf.line("if (status != ACL_SUCCESS) break;")
                buf.line(launch)
            if printer.zero_outputs():
                buf.line("if (status != ACL_SUCCESS) break;  // a zeroing failed in the loop")
            _acl_try(buf, "aclrtRecordEvent(end, stream)", "aclrtRecordEvent(end)")
            _acl_try(buf, "aclrtSynchronizeEvent(end)", "aclrtSynchronizeEvent(end)")
            _acl_try(buf, "aclrtEventElapsedTime(&elapsedMs, start, end)",
                     "aclrtEventElapsedTime")
        buf.line("tvm_ascend_acl::DestroyEvent(end, &status, &failed);")
        buf.line("tvm_ascend_acl::DestroyEvent(start, &status, &failed);")
        _acl_free(buf, buffers)
        buf.line(f'tvm_ascend_acl::ThrowIfFailed("{symbol}", status, failed);')
        buf.line("return static_cast<double>(elapsedMs) * 1000.0 / static_cast<double>(repeats);")


# The launcher a unit prints, chosen by the build's target (data passed down, e.g. from
# CompileConfig): "emulator" for the g++ build against contrib/ascendc_emu, "acl" for CANN.
LAUNCHERS = {"emulator": emit_launcher, "acl": emit_acl_launcher}


def emit_host_launcher(buf: CodeBuffer, symbol: str, printer, block_dim: int,
                       launcher: str = "emulator") -> None:
    """Print the host launcher of the kind ``launcher`` names (a key of ``LAUNCHERS``).

    Example
    -------
    >>> emit_host_launcher(buf, "k0", printer, 8, launcher="acl")       # doctest: +SKIP
    """
    try:
        emit = LAUNCHERS[launcher]
    except KeyError as err:
        raise CodegenError(f"{symbol}: unknown launcher {launcher!r}; known: "
                           f"{', '.join(LAUNCHERS)}") from err
    emit(buf, symbol, printer, block_dim)
