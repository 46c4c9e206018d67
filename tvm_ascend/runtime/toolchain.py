"""Compiling the printed unit: g++ against the AscendC emulator (or, later, CANN's bisheng).

The emulator's runtime (launch loop, rule checks, counters) is compiled once per SoC and header
version into the compile cache and linked into every model, which halves each model's g++ time.
Symbols are hidden so two models built for different SoCs can live in one process.
"""
from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path

import tvm_ffi

from ..errors import ToolchainError
from ..soc import emulator_dir
from .artifacts import discard, file_lock, matches_digest, write_atomic, write_digest

logger = logging.getLogger("tvm_ascend")

CXX = os.environ.get("CXX", "g++")
BASE_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-DASCENDC_CPU_DEBUG"]
# The emulator runtime (the launch loop, the API's bodies, the counters) is built at -O2, once
# per machine. The printed unit is built at -O1, once per model: on BERT-base's unit (15
# kernels) g++ takes 4.8 s of CPU at -O1 against 7.4 s at -O2 (same load), while emulated runs
# of ResNet-50 b1_64, BERT-base and GPT-2 small b1_s8 take the same CPU time within noise
# (their time is the runtime's, not the kernels' own loops).
UNIT_FLAGS = [("-O1" if flag == "-O2" else flag) for flag in BASE_FLAGS]
# The headers every printed unit includes before its first kernel (codegen/templates.py's
# prelude and host part, kernel_parts.py's cube include), precompiled once per machine and SoC
# (g++ -include: used where valid, parsed as plain headers where not). They are include-guarded,
# so the unit's own #include lines then add nothing; BERT-base's unit compiles to the same
# instructions either way (objdump -d of both objects: identical) in 2.75-3.17 s of CPU
# instead of 3.36-3.64 s.
UNIT_HEADERS = ('"kernel_operator.h"', '"lib/matmul_intf.h"', '"tikicpulib.h"',
                "<tvm/ffi/function.h>", "<tvm/ffi/container/tensor.h>", "<cstring>", "<mutex>",
                "<string>", "<vector>")


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
    """The emulator runtime compiled for ``soc_name`` (built once, then reused from the cache
    while it matches its recorded sha256; a damaged one is built again, with a warning)."""
    flags = BASE_FLAGS + [f"-DASCENDC_EMU_SOC={soc_name}", "-DASCENDC_EMU_SEPARATE_RUNTIME",
                          "-DASCENDC_EMU_RUNTIME_IMPL"]
    key = hashlib.sha256((" ".join([CXX] + flags) + _headers_digest()).encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    target = folder / f"ascendc_emu_runtime-{soc_name}-{key}.o"
    if _sound(target, warn=True):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    # one builder per object: the others wait, then find it built
    with file_lock(folder / f".{target.name}.lock"):
        if _sound(target, warn=False):
            return target
        _compile_runtime(flags, folder, target)
    return target


_SOUND: set[tuple] = set()  # (path, size, mtime) of runtime objects checked in this process


def _sound(target: Path, warn: bool, what: str = "emulator runtime") -> bool:
    try:
        st = target.stat()
    except FileNotFoundError:
        return False
    stamp = (str(target), st.st_size, st.st_mtime_ns, st.st_ino)
    if stamp in _SOUND:
        return True
    matches = matches_digest(target)
    if matches:
        _SOUND.add(stamp)
        return True
    if warn and matches is None:  # written before objects had records: not a fault
        logger.info("%s %s has no sha256 record; building it again", what, target)
    elif warn:
        logger.warning("%s %s does not match its recorded sha256 (damaged or truncated); "
                       "building it again", what, target)
    return False


def _compile_runtime(flags: list[str], folder: Path, target: Path) -> None:
    _compile_recorded([CXX, "-x", "c++", *flags, f"-I{emulator_dir()}", "-c",
                       str(emulator_dir() / "kernel_operator.h")], target,
                      "building the AscendC emulator runtime failed")


def _compile_recorded(command: list[str], target: Path, failure: str) -> None:
    """Run ``command -o <temporary>`` and rename the result to ``target`` with its sha256
    record; a failure is a ToolchainError saying ``failure``, with the compiler's output."""
    fd, tmp = tempfile.mkstemp(suffix=target.suffix, dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    command = [*command, "-o", tmp]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise ToolchainError(failure, command, done.stdout + done.stderr)
        # the record first: a reader that sees the new file and the old record rebuilds
        write_digest(Path(tmp), target)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def discard_emulator_runtime(runtime: Path) -> None:
    """Forget a runtime object the linker rejected, so the next use builds it again."""
    _SOUND.difference_update({s for s in _SOUND if s[0] == str(runtime)})
    discard(runtime)


def runtime_in(options: list[str]) -> Path | None:
    """The emulator runtime object named in compile ``options``, if any."""
    for option in options:
        if option.endswith(".o") and Path(option).name.startswith("ascendc_emu_runtime-"):
            return Path(option)
    return None


def _unit_flags(soc_name: str) -> list[str]:
    ffi_include = os.path.join(os.path.dirname(tvm_ffi.__file__), "include")
    return UNIT_FLAGS + [f"-DASCENDC_EMU_SOC={soc_name}", "-DASCENDC_EMU_SEPARATE_RUNTIME",
                         f"-I{emulator_dir()}", f"-I{ffi_include}"]


def emulator_compile_options(soc_name: str, cache_dir=None) -> list[str]:
    """g++ options that build printed kernels with the CPU emulator for ``soc_name``."""
    runtime = emulator_runtime_object(soc_name, cache_dir)
    header = unit_header(soc_name, cache_dir)
    return _unit_flags(soc_name) + (["-include", str(header)] if header else []) + [str(runtime)]


def unit_header(soc_name: str, cache_dir=None) -> Path | None:
    """The unit's common headers (``UNIT_HEADERS``) as a header with its precompiled form
    beside it (``.h.gch``), built once per SoC, compiler, flags and header version and checked
    against its sha256 record like the runtime object; None where it cannot be built (the
    unit then parses the headers itself: slower, the same code)."""
    flags = _unit_flags(soc_name)
    key = hashlib.sha256((" ".join([CXX] + flags) + _headers_digest() + tvm_ffi.__version__
                          + "".join(UNIT_HEADERS)).encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    header = folder / f"ascendc_unit_headers-{soc_name}-{key}.h"
    compiled = header.with_name(header.name + ".gch")
    if header.exists() and _sound(compiled, warn=True, what="precompiled unit headers"):
        return header
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / f".{header.name}.lock"):
        if header.exists() and _sound(compiled, warn=False, what="precompiled unit headers"):
            return header
        try:
            _compile_header(flags, header, compiled)
        except ToolchainError as err:  # a faster build, not a needed one
            logger.warning("precompiling the unit's headers failed; each build parses them "
                           "itself (%s)", (err.output.strip().splitlines() or [str(err)])[-1])
            return None
    return header


def _compile_header(flags: list[str], header: Path, compiled: Path) -> None:
    write_atomic(header, "".join(f"#include {name}\n" for name in UNIT_HEADERS))
    _compile_recorded([CXX, *flags, "-x", "c++-header", str(header)], compiled,
                      "precompiling the AscendC unit's headers failed")
