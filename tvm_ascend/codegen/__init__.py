"""Codegen: scheduled groups in, AscendC kernels and host launchers out (``relax.ext.ascend``)."""
from .ascendc_printer import ScheduledKernel, kernel_source, metadata_from_source, translation_unit
from .ext_codegen import ATTR_GROUP, ATTR_PRIM_FUNC, ATTR_TILING, register_codegen
from .vector_emitters import EMITTED_API

__all__ = ["ScheduledKernel", "kernel_source", "metadata_from_source", "translation_unit",
           "register_codegen", "ATTR_GROUP", "ATTR_PRIM_FUNC", "ATTR_TILING", "EMITTED_API"]
