"""CANN toolkit detection and the device build of printed AscendC units (bisheng / ccec).

With a CANN toolkit installed (``source <install>/ascend-toolkit/set_env.sh`` sets
``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME``), kernels are compiled for the NPU by bisheng
(Clang-based, CANN 8.x+) or the older ccec, and launched through ACL (the launcher printed by
``codegen.launcher.emit_acl_launcher``). Without one, ``detect()`` returns None and
``absent_reason()`` says which piece is missing; every device path is skipped on that reason.

The compile command follows the public CANN samples (``-xcce``, ``--cce-aicore-arch=<arch>``,
``-O2 -std=c++17 -fPIC -shared``, includes ``compiler/tikcpp/tikcfw{,/impl,/interface}`` and
``include``, links ``libascendcl``); the arch per SoC comes from the SoC profile's ``npu_arch``
(shared/reference/ascendc.md 5.4). No CANN toolkit or device was available when this was
written: the command is checked structurally, never run against a real toolkit.

Example
-------
>>> from tvm_ascend.runtime import cann
>>> toolkit = cann.detect()
>>> if toolkit is None:
...     print(cann.absent_reason())                       # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tvm_ffi

from ..errors import ToolchainError
from .toolchain import default_cache_dir

HOME_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
# Where CANN 8.x/9.x installs put the device compiler, first match wins (bisheng before ccec).
COMPILER_CANDIDATES = (("bisheng", "compiler/ccec_compiler/bin/bisheng"),
                       ("bisheng", "bin/bisheng"),
                       ("ccec", "compiler/ccec_compiler/bin/ccec"),
                       ("ccec", "bin/ccec"))
ASCENDC_INCLUDE = "compiler/tikcpp/tikcfw"
LIB_CANDIDATES = ("lib64", "runtime/lib64", "acllib/lib64")

# --cce-aicore-arch per NPU arch number and core kind (shared/reference/ascendc.md 5.4):
# 2201 (910B/A3) splits AIC and AIV; a unit with cube and vector kernels targets the whole
# 2201 core through --npu-arch (as public mixed cube/vector samples do). 1001 and 2002 are
# coupled (one AI core does both).
ARCH_FLAGS = {
    2201: {"vector": ["--cce-aicore-arch=dav-c220-vec"],
           "cube": ["--cce-aicore-arch=dav-c220-cube"],
           "mix": ["--npu-arch=dav-2201"]},
    2002: {kind: ["--cce-aicore-arch=dav-m200"] for kind in ("vector", "cube", "mix")},
    1001: {kind: ["--cce-aicore-arch=dav-c100"] for kind in ("vector", "cube", "mix")},
}
CORE_KINDS = ("vector", "cube", "mix")
DEVICE_FLAGS = ["-xcce", "-O2", "-std=c++17", "-fPIC", "-shared", "--cce-auto-sync"]
# the printed kernel modes (codegen printers' ``kernel_mode``) -> the core kind they need
_KIND_OF_MODE = {"AIV_MODE": "vector", "AIC_MODE": "cube", "MIX_MODE": "mix",
                 "MIX_AIC_1_1": "mix"}


@dataclass(frozen=True)
class CannToolkit:
    """An installed CANN toolkit: where its compiler, headers and ACL library are.

    ``home_variable`` names the environment variable that pointed at ``root``;
    ``compiler_kind`` is ``"bisheng"`` or ``"ccec"``.
    """

    root: Path
    home_variable: str
    compiler: Path
    compiler_kind: str
    include_dirs: tuple
    lib_dir: Path
    ascendcl: Path


def _find_compiler(root: Path, search_path: str | None):
    for kind, relative in COMPILER_CANDIDATES:
        path = root / relative
        if path.is_file() and os.access(path, os.X_OK):
            return kind, path
    for kind in ("bisheng", "ccec"):  # set_env.sh also puts the compiler on PATH
        found = shutil.which(kind, path=search_path)
        if found:
            return kind, Path(found)
    return None, None


def probe(environ=None) -> tuple[CannToolkit | None, str]:
    """(toolkit, "") where a complete CANN toolkit is installed, else (None, the reason).

    Parameters
    ----------
    environ : mapping, optional
        Environment to read (``os.environ`` by default).

    Example
    -------
    >>> toolkit, reason = probe({})
    >>> toolkit is None and "ASCEND_HOME_PATH" in reason
    True
    """
    env = os.environ if environ is None else environ
    variable = next((name for name in HOME_VARIABLES if env.get(name)), None)
    if variable is None:
        return None, ("no CANN toolkit: neither ASCEND_HOME_PATH nor ASCEND_TOOLKIT_HOME is set "
                      "(source <install>/ascend-toolkit/set_env.sh)")
    root = Path(env[variable])
    if not root.is_dir():
        return None, f"no CANN toolkit: {variable}={root} is not a directory"
    kind, compiler = _find_compiler(root, env.get("PATH"))
    if compiler is None:
        places = ", ".join(str(root / rel) for _, rel in COMPILER_CANDIDATES)
        return None, (f"CANN toolkit at {root} ({variable}) has no device compiler: no "
                      f"executable bisheng or ccec at {places} or on PATH")
    acl_header = root / "include" / "acl" / "acl.h"
    if not acl_header.is_file():
        return None, f"CANN toolkit at {root} ({variable}) lacks the ACL header {acl_header}"
    ascendc = root / ASCENDC_INCLUDE
    if not (ascendc / "kernel_operator.h").is_file():
        return None, (f"CANN toolkit at {root} ({variable}) lacks the AscendC headers "
                      f"({ascendc / 'kernel_operator.h'})")
    for relative in LIB_CANDIDATES:
        ascendcl = root / relative / "libascendcl.so"
        if ascendcl.is_file():
            break
    else:
        places = ", ".join(str(root / rel / "libascendcl.so") for rel in LIB_CANDIDATES)
        return None, (f"CANN toolkit at {root} ({variable}) lacks libascendcl.so "
                      f"(looked at {places})")
    includes = (root / "include", ascendc, ascendc / "impl", ascendc / "interface")
    return CannToolkit(root, variable, compiler, kind, includes, ascendcl.parent, ascendcl), ""


def detect(environ=None) -> CannToolkit | None:
    """The installed CANN toolkit, or None (``absent_reason()`` says why).

    Example
    -------
    >>> detect({}) is None
    True
    """
    return probe(environ)[0]


def absent_reason(environ=None) -> str:
    """Why no CANN toolkit is usable here ("" when one is).

    Example
    -------
    >>> absent_reason({}).startswith("no CANN toolkit")
    True
    """
    return probe(environ)[1]


def require(environ=None) -> CannToolkit:
    """The installed CANN toolkit; raises ToolchainError naming the missing piece.

    Example
    -------
    >>> require({})
    Traceback (most recent call last):
    ...
    tvm_ascend.errors.ToolchainError: no CANN toolkit: neither ASCEND_HOME_PATH nor ...
    """
    toolkit, reason = probe(environ)
    if toolkit is None:
        raise ToolchainError(reason)
    return toolkit


def core_kind(kernel_modes) -> str:
    """The core kind a unit of kernels needs, from their printers' ``kernel_mode`` values.

    Example
    -------
    >>> core_kind(["AIV_MODE", "MIX_MODE"])
    'mix'
    """
    kinds = set()
    for mode in kernel_modes:
        if mode not in _KIND_OF_MODE:
            raise ToolchainError(f"unknown kernel mode {mode!r}; known: {sorted(_KIND_OF_MODE)}")
        kinds.add(_KIND_OF_MODE[mode])
    if not kinds:
        return "vector"
    return kinds.pop() if len(kinds) == 1 else "mix"


def arch_flags(soc, kind: str = "vector") -> list[str]:
    """The device compiler's arch flags for ``soc`` (a SocProfile) and a core kind.

    Example
    -------
    >>> from tvm_ascend.soc import get_soc
    >>> arch_flags(get_soc("Ascend910B1"), "vector")
    ['--cce-aicore-arch=dav-c220-vec']
    """
    if kind not in CORE_KINDS:
        raise ToolchainError(f"core kind {kind!r} is not one of {CORE_KINDS}")
    table = ARCH_FLAGS.get(soc.npu_arch)
    if table is None:
        raise ToolchainError(f"no device arch flags for {soc.name} (npu_arch {soc.npu_arch}); "
                             f"known arches: {sorted(ARCH_FLAGS)}")
    return list(table[kind])


def device_compile_command(toolkit: CannToolkit, source, output, soc, kind: str = "vector",
                           extra_flags=()) -> list[str]:
    """The bisheng/ccec command that builds ``source`` (a printed unit: kernels + ACL launchers)
    into the shared library ``output`` for ``soc``.

    Example
    -------
    >>> cmd = device_compile_command(toolkit, "unit.cpp", "unit.so", soc)   # doctest: +SKIP
    >>> cmd[1:3]                                                            # doctest: +SKIP
    ['-xcce', '--cce-aicore-arch=dav-c220-vec']
    """
    ffi_include = Path(tvm_ffi.__file__).parent / "include"
    includes = [f"-I{path}" for path in (*toolkit.include_dirs, ffi_include)]
    libs = [f"-L{toolkit.lib_dir}", "-lascendcl"]
    if (toolkit.lib_dir / "libruntime.so").is_file():  # the <<<>>> launch stubs call into it
        libs.append("-lruntime")
    return [str(toolkit.compiler), DEVICE_FLAGS[0], *arch_flags(soc, kind), *DEVICE_FLAGS[1:],
            f"-DTVM_ASCEND_SOC={soc.name}", *extra_flags, *includes, str(source), "-o",
            str(output), *libs]


def build_device_library(source_text: str, soc, kind: str = "vector", toolkit=None,
                         cache_dir=None, extra_flags=()) -> Path:
    """Compile a printed unit for the NPU into the compile cache; returns the library's path.

    The library is keyed by the hash of the source and the full command (compiler, flags,
    toolkit paths), written to a temporary file and renamed in, so a cache never holds a
    half-written library; a second call with the same source and flags compiles nothing.

    Parameters
    ----------
    source_text : str
        The C++ unit (AscendC kernels and their ACL launchers).
    soc : SocProfile
        Target SoC; its ``npu_arch`` picks the arch flags.
    kind : str
        ``"vector"``, ``"cube"`` or ``"mix"`` (``core_kind`` of the unit's kernel modes,
        ``codegen.npu_unit.npu_kernel_mode`` per kernel).
    toolkit : CannToolkit, optional
        Defaults to ``require()`` (ToolchainError naming the missing piece when absent).
    cache_dir : path, optional
        Defaults to the compile cache of ``toolchain.default_cache_dir()``.

    Example
    -------
    >>> path = build_device_library(unit_text, get_soc("Ascend910B1"))   # doctest: +SKIP
    """
    toolkit = toolkit or require()
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    shape = device_compile_command(toolkit, "SOURCE", "OUTPUT", soc, kind, extra_flags)
    digest = hashlib.sha256("\0".join(shape).encode() + b"\0" + source_text.encode())
    target = folder / f"npu-{soc.name}-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".npu_build.", dir=folder) as workdir:
        source = Path(workdir) / "unit.cpp"
        source.write_text(source_text)
        built = Path(workdir) / "unit.so"
        command = device_compile_command(toolkit, source, built, soc, kind, extra_flags)
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except OSError as err:
            raise ToolchainError(f"could not start the {toolkit.compiler_kind} compiler "
                                 f"{toolkit.compiler}: {err}", command) from err
        if done.returncode != 0 or not built.is_file():
            raise ToolchainError(f"{toolkit.compiler_kind} failed to build the NPU library for "
                                 f"{soc.name} (exit {done.returncode})", command,
                                 done.stdout + done.stderr)
        os.replace(built, target)
    return target
