"""The split build of an emulator test program that several test files share: the emulator's
runtime as one object at -O0, the program at -O1, compiled side by side without a warning and
linked."""
from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EMU_DIR = ROOT / "contrib" / "ascendc_emu"
CXX = os.environ.get("CXX", "g++")
FLAGS = ["-std=c++17", "-DASCENDC_CPU_DEBUG", f"-I{EMU_DIR}", "-pthread", "-Wall", "-Wextra",
         "-Wno-comment", "-DASCENDC_EMU_SEPARATE_RUNTIME"]


def cxx(args: list[str]) -> str:
    """Runs the compiler with the emulator's flags; returns its warnings (stderr)."""
    cmd = [CXX, *FLAGS, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compile failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return proc.stderr


def split_build(src: Path, out: Path, name: str) -> Path:
    """Builds ``src`` against the emulator into ``out / name`` (skips the test without a
    compiler; fails it on any compiler warning) and returns the executable's path."""
    if shutil.which(CXX) is None:
        pytest.skip(f"{CXX} not found")
    jobs = [["-O0", "-DASCENDC_EMU_RUNTIME_IMPL", "-x", "c++", "-c",
             str(EMU_DIR / "kernel_operator.h"), "-o", str(out / "runtime.o")],
            ["-O1", "-c", str(src), "-o", str(out / f"{name}.o")]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        warnings = [w for w in pool.map(cxx, jobs) if w.strip()]
    assert not warnings, f"compiler warnings: {warnings}"
    cxx([str(out / f"{name}.o"), str(out / "runtime.o"), "-o", str(out / name)])
    return out / name


def stats_of(out: str) -> dict:
    """The launch statistics a test program prints as ``STATS <json>`` (sample_host.h)."""
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith("STATS "))[6:])


def error_of(out: str) -> str:
    """The device-rule message a test program prints as ``DEVICE_RULE_ERROR <text>``."""
    return next(ln for ln in out.splitlines() if ln.startswith("DEVICE_RULE_ERROR "))[18:]
