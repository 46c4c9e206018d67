"""Compiling the printed unit: g++ against the AscendC emulator (or, later, CANN's bisheng)."""
from __future__ import annotations

import os

import tvm_ffi

from ..soc import emulator_dir


def emulator_compile_options(soc_name: str) -> list[str]:
    """g++ options that build printed kernels with the CPU emulator for ``soc_name``."""
    ffi_include = os.path.join(os.path.dirname(tvm_ffi.__file__), "include")
    return ["-std=c++17", "-O2", "-DASCENDC_CPU_DEBUG", f"-DASCENDC_EMU_SOC={soc_name}",
            f"-I{emulator_dir()}", f"-I{ffi_include}"]
