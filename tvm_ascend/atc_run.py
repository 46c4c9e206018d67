"""Run a real ATC on a model with tvm-ascend's flags, in a temporary folder, and read what it wrote.

The command is the one a user would type (``atc --framework=5 --model=... --output=...
--soc_version=... [--input_shape=...] [--fusion_switch_file=...] [--precision_mode=...]``)
plus what makes ATC write the two files the side-by-side reads (sources in
``partition/atc_result.py``): ``--export_compile_stat=1`` for ``fusion_result.json`` in the
folder it runs in, and ``DUMP_GE_GRAPH=1`` (string attributes such as the original op names
are dumped only at 1), ``DUMP_GRAPH_LEVEL=3`` (the last graph only: the one after the build),
``DUMP_GRAPH_FORMAT=onnx`` and ``DUMP_GRAPH_PATH`` for its graph dump. ``ASCEND_WORK_PATH`` is
left out of ATC's environment so the fusion result lands in that folder too.

Everything goes into one temporary folder that is removed on every path (success, a failed
``atc``, a timeout, an interrupt): nothing half-written stays behind; what is kept is the
parsed AtcRun.

Example
-------
>>> from tvm_ascend.atc_run import run_atc
>>> run = run_atc("model.onnx", CompileConfig(), atc="/usr/local/Ascend/bin/atc")  # doctest: +SKIP
"""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from .config import CompileConfig
from .errors import ToolchainError
from .partition.atc_result import AtcRun, read_atc_output

DEFAULT_TIMEOUT_S = 1800.0  # a large model's ATC build takes minutes; an hour is a hang
GRAPH_DIR = "ge_graphs"
OUTPUT_NAME = "model"  # --output is the .om's path without its extension


def _gear_text(value) -> str:
    """A gear flag's value as ATC spells it ("1,2,4" or "224,224;448,448")."""
    if isinstance(value, str):
        return value
    if all(isinstance(gear, (tuple, list)) for gear in value):
        return ";".join(",".join(str(d) for d in gear) for gear in value)
    return ",".join(str(gear) for gear in value)


def _shape_text(shapes) -> str:
    """``{name: dims}`` as ATC's ``--input_shape`` ("x:1,3,224,224;y:-1,8"), ranges as lo~hi."""
    def dim(d):
        return f"{d[0]}~{d[1]}" if isinstance(d, (tuple, list)) else str(d)
    return ";".join(f"{name}:{','.join(dim(d) for d in dims)}" for name, dims in shapes.items())


def atc_command(atc: str, model_path: str, config: CompileConfig, output: str) -> list:
    """The argv of an ATC build of ``model_path`` with ``config``'s ATC flags into ``output``
    (the .om's path without its extension)."""
    argv = [str(atc), "--framework=5", f"--model={model_path}", f"--output={output}",
            f"--soc_version={config.soc_version}", f"--precision_mode={config.precision_mode}",
            "--export_compile_stat=1"]
    if config.input_shape:
        argv.append(f"--input_shape={_shape_text(config.input_shape)}")
    if config.fusion_switch_file:
        argv.append(f"--fusion_switch_file={os.path.abspath(config.fusion_switch_file)}")
    for flag in ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims", "input_format"):
        value = getattr(config, flag)
        if value:
            argv.append(f"--{flag}={_gear_text(value)}")
    return argv


def atc_environment(folder: str, environ=None) -> dict:
    """ATC's environment: the caller's, with the graph dump switched on into ``folder``."""
    env = dict(os.environ if environ is None else environ)
    env.pop("ASCEND_WORK_PATH", None)  # else fusion_result.json goes to $ASCEND_WORK_PATH/FE/<pid>
    env.update(DUMP_GE_GRAPH="1", DUMP_GRAPH_LEVEL="3", DUMP_GRAPH_FORMAT="onnx",
               DUMP_GRAPH_PATH=str(Path(folder) / GRAPH_DIR))
    return env


def run_atc(model, config: CompileConfig, atc: str, timeout_s: float = DEFAULT_TIMEOUT_S,
            environ=None, temp_root: str | None = None) -> AtcRun:
    """Build ``model`` (a path or an onnx.ModelProto) with the real ``atc`` and ``config``'s
    flags in a temporary folder (under ``temp_root``, else the system's), and read its fusion
    result and graph dump.

    Raises
    ------
    ToolchainError
        When ``atc`` cannot start, exits non-zero or runs past ``timeout_s``: the message has
        the command and the tail of ATC's output.
    AscendError
        When ATC succeeded but its files are missing or malformed (names the file).
    """
    with tempfile.TemporaryDirectory(prefix="tvm_ascend_atc_", dir=temp_root) as folder:
        model_path = _model_file(model, folder)
        argv = atc_command(atc, model_path, config, str(Path(folder) / OUTPUT_NAME))
        _run(argv, folder, atc_environment(folder, environ), timeout_s)
        return read_atc_output(folder)


def _model_file(model, folder: str) -> str:
    if isinstance(model, (str, os.PathLike)):
        return os.path.abspath(model)
    path = Path(folder) / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def _run(argv: list, folder: str, env: dict, timeout_s: float) -> None:
    """Run ATC in ``folder``; its own session, so a timeout ends the processes it started too."""
    try:
        process = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, errors="replace",
                                   start_new_session=True)
    except OSError as err:
        raise ToolchainError(f"real atc could not start: {err}", argv) from err
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(process)
        output, _ = process.communicate()
        raise ToolchainError(f"real atc ran past its timeout of {timeout_s:g} s and was "
                             "stopped", argv, output or "")
    except BaseException:  # an interrupt: ATC must not outlive us, writing into a removed folder
        _stop(process)
        process.communicate()
        raise
    if process.returncode != 0:
        raise ToolchainError(f"real atc failed with exit status {process.returncode}", argv,
                             output or "")


def _stop(process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


__all__ = ["DEFAULT_TIMEOUT_S", "atc_command", "atc_environment", "run_atc"]
