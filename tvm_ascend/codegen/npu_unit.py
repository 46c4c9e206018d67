"""The unit a device compiler (bisheng/ccec) builds for one scheduled kernel: the AscendC
kernel as ``kernel_source`` prints it, the ACL host runtime and the kernel's ACL launcher.

Printing belongs to codegen; ``runtime/cann.py`` only compiles what this returns.

Example
-------
>>> text = npu_unit_source(kernel, get_soc("Ascend910B1"))               # doctest: +SKIP
>>> path = cann.build_device_library(text, get_soc("Ascend910B1"),
...                                  cann.core_kind([npu_kernel_mode(kernel)]))  # doctest: +SKIP
"""
from __future__ import annotations

from .ascendc_printer import kernel_printer, kernel_source
from .code_buffer import CodeBuffer
from .launcher import ACL_HOST_RUNTIME, emit_acl_launcher


def npu_unit_source(kernel, soc, timed: bool = True) -> str:
    """The device unit of ``kernel`` (a ``ScheduledKernel``) for ``soc``; ``timed`` also
    exports ``<symbol>__acl_time_us(repeats)`` (ACL-event timing for boards)."""
    buf = CodeBuffer()
    buf.lines(kernel_source(kernel, soc))
    buf.lines(ACL_HOST_RUNTIME)
    printer = kernel_printer(kernel)
    printer.print(CodeBuffer())  # printers fill what the launcher reads while printing
    emit_acl_launcher(buf, kernel.symbol, printer, printer.block_dim, timed=timed)
    return buf.text()


def npu_kernel_mode(kernel) -> str:
    """``AIV_MODE``, ``AIC_MODE`` or ``MIX_MODE``: the cores ``kernel``'s printer launches on."""
    return kernel_printer(kernel).kernel_mode


__all__ = ["npu_unit_source", "npu_kernel_mode"]
