"""Compiling the printed unit: g++ against the AscendC emulator (or, later, CANN's bisheng).

The emulator's runtime (launch loop, rule checks, counters) is compiled once per SoC and header
version into the compile cache and linked into every model, which halves each model's g++ time.
Symbols are hidden so two models built for different SoCs can live in one process.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import tvm_ffi

from ..errors import ToolchainError
from ..soc import emulator_dir

CXX = os.environ.get("CXX", "g++")
BASE_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-DASCENDC_CPU_DEBUG"]


def default_cache_dir() -> Path:
    env = os.environ.get("TVM_ASCEND_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tvm_ascend"


def _headers_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(emulator_dir().rglob("*")):
        if path.suffix in (".h", ".def"):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def emulator_runtime_object(soc_name: str, cache_dir=None) -> Path:
    """The emulator runtime compiled for ``soc_name`` (built once, then reused from the cache)."""
    flags = BASE_FLAGS + [f"-DASCENDC_EMU_SOC={soc_name}", "-DASCENDC_EMU_SEPARATE_RUNTIME",
                          "-DASCENDC_EMU_RUNTIME_IMPL"]
    key = hashlib.sha256((" ".join([CXX] + flags) + _headers_digest()).encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    target = folder / f"ascendc_emu_runtime-{soc_name}-{key}.o"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".o", dir=folder, prefix=".runtime.")
    os.close(fd)
    command = [CXX, "-x", "c++", *flags, f"-I{emulator_dir()}", "-c",
               str(emulator_dir() / "kernel_operator.h"), "-o", tmp]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise ToolchainError("building the AscendC emulator runtime failed", command,
                                 done.stdout + done.stderr)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def emulator_compile_options(soc_name: str, cache_dir=None) -> list[str]:
    """g++ options that build printed kernels with the CPU emulator for ``soc_name``."""
    ffi_include = os.path.join(os.path.dirname(tvm_ffi.__file__), "include")
    runtime = emulator_runtime_object(soc_name, cache_dir)
    return BASE_FLAGS + [f"-DASCENDC_EMU_SOC={soc_name}", "-DASCENDC_EMU_SEPARATE_RUNTIME",
                         f"-I{emulator_dir()}", f"-I{ffi_include}", str(runtime)]
