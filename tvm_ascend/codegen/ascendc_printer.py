"""The AscendC printer: scheduled groups in, one C++ translation unit (kernels + launchers) out.

Each kernel is printed from the scheduled TIR by its template's printer
(``kernels/<template name>.py``); the unit adds the fixed scaffolding once. ``kernel_source``
gives a kernel as a standalone file, as a user would hand it to CANN's toolchain.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import CodegenError
from .code_buffer import CodeBuffer
from .kernel_printer import KernelPrinter
from .kernels import (attention, axis_reduce, conv2d, data_movement, elementwise, matmul,
                      matmul_gated, matmul_rows, pool2d, row_reduce)
from .launcher import emit_launcher
from .templates import (COPY_HELPERS_NOPAD, COPY_HELPERS_PAD, HOST_RUNTIME, KERNEL_PRELUDE,
                        ROW_COPY_HELPERS_LOOP, ROW_COPY_HELPERS_PAD)

# keyed by template name; the printer of template NAME lives in codegen/kernels/NAME.py
KERNEL_PRINTERS: dict[str, type[KernelPrinter]] = {
    "elementwise": elementwise.ElementwiseKernelPrinter,
    "row_reduce": row_reduce.RowReduceKernelPrinter,
    "matmul": matmul.MatmulKernelPrinter, "conv2d": conv2d.ConvKernelPrinter,
    "attention": attention.AttentionKernelPrinter,
    "data_movement": data_movement.DataMovementKernelPrinter,
    "matmul_rows": matmul_rows.MatmulRowsKernelPrinter,
    "matmul_gated": matmul_gated.GatedMatmulKernelPrinter,
    "axis_reduce": axis_reduce.AxisReduceKernelPrinter, "pool2d": pool2d.PoolKernelPrinter}
METADATA_DELIMITER = "ascendmeta"


@dataclass(frozen=True)
class PrintedUnit:
    """One printed translation unit, as data: its C++ ``code`` and the ``metadata`` it embeds
    (the caller's, with every kernel's standalone source under ``kernel_sources``)."""

    code: str
    metadata: dict

    @property
    def kernel_sources(self) -> dict[str, str]:
        return self.metadata["kernel_sources"]


@dataclass(frozen=True)
class ScheduledKernel:
    """What codegen receives for one group: decided upstream, printed here."""

    symbol: str
    prim_func: object
    tiling: object
    group: dict


def _one_line(text) -> str:
    """``text`` with its line breaks as ", ": a binding that took a removed op in names both
    ONNX nodes on two lines ("Add\\nCast"), and a ``//`` comment ends at the first break."""
    return ", ".join(part for part in str(text).splitlines() if part)


def _provenance(buf: CodeBuffer, kernel: ScheduledKernel) -> None:
    group = kernel.group
    buf.line(f"// tvm-ascend kernel {kernel.symbol}")
    buf.line(_one_line(f"// group {group.get('name')} (rule {group.get('rule')}): "
                       f"{group.get('reason')}"))
    ops = ", ".join(f"{op['var']}={op['op'].replace('relax.', '')}" for op in group.get("ops", []))
    buf.line(f"// ops: {ops}")
    if group.get("onnx_nodes"):
        buf.line(_one_line(f"// ONNX nodes: {', '.join(group['onnx_nodes'])}"))
    t = kernel.tiling
    unit = "elements" if t.cols == 1 else f"rows of {t.cols}"
    buf.line(f"// tiling ({t.template}): {t.cores} cores x {t.tiles_per_core} tiles x "
             f"{t.tile_len} {unit}, buffer_num {t.buffer_num}, {t.temp_buffers} temp tiles, "
             f"UB {t.ub_bytes}/{t.ub_capacity} B")


def kernel_printer(kernel: ScheduledKernel) -> KernelPrinter:
    try:
        cls = KERNEL_PRINTERS[kernel.tiling.template]
    except KeyError as err:
        raise CodegenError(f"{kernel.symbol}: no printer for template "
                           f"{kernel.tiling.template!r}") from err
    return cls(kernel.symbol, kernel.prim_func, kernel.tiling)


def _extra_includes(kernel: ScheduledKernel, soc) -> tuple:
    """Lines a printer adds to the prelude once per unit, for ``soc``."""
    return KERNEL_PRINTERS[kernel.tiling.template].extra_includes(soc)


def _prelude(soc, kernels) -> str:
    for k in kernels:  # the prelude's copy helpers are the SoC's: the plans must agree
        planned = k.tiling.plan.planned_data_copy_pad if k.tiling.plan is not None else None
        if planned is not None and bool(planned) != bool(soc.has_data_copy_pad):
            raise CodegenError(f"{k.symbol}: planned for a SoC {'with' if planned else 'without'}"
                               f" DataCopyPad but printed for {soc.name}; schedule it again")
    includes = sorted({line for k in kernels for line in _extra_includes(k, soc)})
    head = KERNEL_PRELUDE + "".join(line + "\n" for line in includes) + "\n"
    if soc.has_data_copy_pad:
        return head + COPY_HELPERS_PAD + "\n" + ROW_COPY_HELPERS_PAD
    return head + COPY_HELPERS_NOPAD + "\n" + ROW_COPY_HELPERS_LOOP


def kernel_source(kernel: ScheduledKernel, soc) -> str:
    """A standalone AscendC source file for one kernel."""
    buf = CodeBuffer()
    _provenance(buf, kernel)
    buf.lines(_prelude(soc, [kernel]))
    kernel_printer(kernel).print(buf)
    return buf.text()


def translation_unit(kernels: list[ScheduledKernel], soc, metadata: dict) -> PrintedUnit:
    """The C++ source of all kernels + host launchers, with ``metadata`` and every kernel's
    standalone source embedded (``ascend_metadata_json``, what ``load`` reads back)."""
    sources = {k.symbol: kernel_source(k, soc) for k in kernels}
    buf = CodeBuffer()
    buf.line(f"// tvm-ascend: {len(kernels)} AscendC kernel(s) for {soc.name}, CPU-emulated build")
    buf.lines(_prelude(soc, kernels))
    buf.lines(HOST_RUNTIME)
    for kernel in kernels:
        printer = kernel_printer(kernel)
        buf.line()
        _provenance(buf, kernel)
        printer.print(buf)
        emit_launcher(buf, kernel.symbol, printer, printer.block_dim)
    meta = json.dumps({**metadata, "kernel_sources": sources}, sort_keys=True)
    if f"){METADATA_DELIMITER}\"" in meta:
        raise CodegenError("metadata contains the raw-string delimiter")
    buf.line()
    delimiter = METADATA_DELIMITER
    buf.line(f'static const char kAscendMetadata[] = R"{delimiter}({meta}){delimiter}";')
    buf.line("static tvm::ffi::String AscendMetadata() { "
             "return tvm::ffi::String(kAscendMetadata); }")
    buf.line("TVM_FFI_DLL_EXPORT_TYPED_FUNC(ascend_metadata_json, AscendMetadata);")
    # the metadata as the library will hand it back, so a built module and one loaded from
    # its library hold equal metadata (JSON has lists, not tuples; keys are strings)
    return PrintedUnit(buf.text(), json.loads(meta))
