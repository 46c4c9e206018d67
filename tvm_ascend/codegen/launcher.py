"""Host launchers: one tvm-ffi function per kernel, running it through CANN's CPU-debug entry.

The launcher copies the TVM tensors into GmAlloc'd global memory, fills the tiling struct, runs
``ICPU_RUN_KF(kernel, blockDim, ...)`` and copies the output back; a real-device build replaces
this file's output with ACL calls (aclrtMalloc/aclrtMemcpy and ``<<<>>>``), same arguments.
"""
from __future__ import annotations

from .code_buffer import CodeBuffer
from .cpp_types import dtype_bytes


def emit_launcher(buf: CodeBuffer, symbol: str, printer, block_dim: int) -> None:
    """Print the host launcher of ``symbol`` for the kernel ``printer`` printed."""
    params = printer.kernel_params()  # (name, dtype, numel), output last
    args = ", ".join(f"tvm::ffi::TensorView a{i}" for i in range(len(params)))
    with buf.indent(f"namespace {symbol}_host {{", "}  // namespace"):
        with buf.indent(f"static void Launch({args}) {{"):
            gm_names = []
            for index, (name, dtype, numel) in enumerate(params):
                bits = dtype_bytes(dtype) * 8
                is_output = index == len(params) - 1
                buf.line(f'tvm_ascend_rt::CheckArg(a{index}, "{symbol}", "{name}", {numel}, '
                         f"{bits});")
                buf.line(f"uint8_t* gm{index} = tvm_ascend_rt::ToGm(a{index}, "
                         f"{numel * dtype_bytes(dtype)}, {'false' if is_output else 'true'});")
                gm_names.append(f"gm{index}")
            if hasattr(printer, "emit_tiling_init"):
                printer.emit_tiling_init(buf, "tilingHost")
            else:
                fields = ", ".join(str(value) for value in printer.tiling_values().values())
                buf.line(f"{symbol}_impl::TilingData tilingHost{{{fields}}};")
            buf.line("uint8_t* gmTiling = static_cast<uint8_t*>("
                     "AscendC::GmAlloc(sizeof(tilingHost)));")
            buf.line("std::memcpy(gmTiling, &tilingHost, sizeof(tilingHost));")
            buf.line("uint8_t* gmWorkspace = static_cast<uint8_t*>(AscendC::GmAlloc(1024));")
            mode = getattr(printer, "kernel_mode", "AIV_MODE")
            buf.line(f"AscendC::SetKernelMode(KernelMode::{mode});")
            launch_args = ", ".join(gm_names + ["gmWorkspace", "gmTiling"])
            buf.line(f'tvm_ascend_rt::Run("{symbol}", [&]() {{ '
                     f"ICPU_RUN_KF({symbol}, {block_dim}, {launch_args}); }});")
            out_index = len(params) - 1
            out_bytes = params[-1][2] * dtype_bytes(params[-1][1])
            buf.line(f"std::memcpy(a{out_index}.data_ptr(), gm{out_index}, {out_bytes});")
            for name in gm_names + ["gmWorkspace", "gmTiling"]:
                buf.line(f"AscendC::GmFree({name});")
    buf.line(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}, {symbol}_host::Launch);")
