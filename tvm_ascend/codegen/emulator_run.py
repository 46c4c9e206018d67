"""The part every emulator launcher shares once its GM buffers and ``tilingHost`` exist: the
tiling struct and the workspace in GM, the kernel mode, ``ICPU_RUN_KF``, the outputs copied
back and every GM buffer freed. ``launcher.py`` (static sizes) and ``tiling_func.py`` (sizes
from the arguments' shapes) differ only in what they pass as ``block_dim`` and the outputs'
byte counts, both C++ expressions.
"""
from __future__ import annotations

from .code_buffer import CodeBuffer


def emit_emulator_run(buf: CodeBuffer, symbol: str, printer, gm_names: list, block_dim: str,
                      out_bytes: dict) -> None:
    """Print the run of ``symbol`` on the CPU emulator; ``out_bytes`` maps each output's
    argument index to its byte count (a C++ expression).

    Example: ``emit_emulator_run(buf, "k0", printer, ["gm0", "gm1"], "8", {1: "4096"})``
    copies ``gm1`` back into ``a1`` after an 8-block launch."""
    buf.line("uint8_t* gmTiling = static_cast<uint8_t*>("
             "AscendC::GmAlloc(sizeof(tilingHost)));")
    buf.line("std::memcpy(gmTiling, &tilingHost, sizeof(tilingHost));")
    buf.line("uint8_t* gmWorkspace = static_cast<uint8_t*>(AscendC::GmAlloc("
             f"AscendC::emu::kSysWorkspaceBytes + {printer.user_workspace_bytes()}));")
    buf.line(f"AscendC::SetKernelMode(KernelMode::{printer.kernel_mode});")
    launch_args = ", ".join(gm_names + ["gmWorkspace", "gmTiling"])
    buf.line(f'tvm_ascend_rt::Run("{symbol}", [&]() {{ '
             f"ICPU_RUN_KF({symbol}, {block_dim}, {launch_args}); }});")
    for index, size in out_bytes.items():
        buf.line(f"std::memcpy(a{index}.data_ptr(), gm{index}, {size});")
    for name in gm_names + ["gmWorkspace", "gmTiling"]:
        buf.line(f"AscendC::GmFree({name});")


__all__ = ["emit_emulator_run"]
