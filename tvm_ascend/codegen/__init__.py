"""Codegen: scheduled groups in, AscendC kernels and host launchers out (``relax.ext.ascend``)."""
from .ascendc_printer import PrintedUnit, ScheduledKernel, kernel_source, translation_unit
from .ext_codegen import PrintedUnits, register_codegen, unit_module
from .vector_emitters import EMITTED_API

__all__ = ["PrintedUnit", "PrintedUnits", "ScheduledKernel", "kernel_source", "translation_unit",
           "register_codegen", "unit_module", "EMITTED_API"]
