"""``CompileConfig(device="npu")`` / ``tvm-ascend compile --device npu``: without a complete
CANN toolkit, an error naming what is missing, raised before any work (no model read, nothing
written); with one, an error saying the whole-model NPU build is not there yet (the per-kernel
device build is: tests/test_board.py)."""
from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

import tvm_ascend
from tvm_ascend.errors import FusionConfigError, ToolchainError
from tvm_ascend.runtime import cann

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo.onnx")


def _toolkit(root: Path, without: str = "") -> Path:
    """A CANN-shaped folder (an executable bisheng, acl/acl.h, kernel_operator.h,
    libascendcl.so), less the piece ``without`` names."""
    pieces = {
        "compiler": root / cann.COMPILER_CANDIDATES[0][1],
        "acl": root / "include" / "acl" / "acl.h",
        "ascendc": root / cann.ASCENDC_INCLUDE / "kernel_operator.h",
        "lib": root / "lib64" / "libascendcl.so"}
    for name, path in pieces.items():
        if name != without:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("#!/bin/sh\n" if name == "compiler" else "")
    compiler = pieces["compiler"]
    if compiler.exists():
        compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    return root


@pytest.fixture
def no_toolkit(monkeypatch):
    for variable in cann.HOME_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no bisheng from this machine's PATH


def test_an_unknown_device_is_a_config_error():
    assert tvm_ascend.CompileConfig().device == "emulator"
    with pytest.raises(FusionConfigError, match="device='gpu' is not one of emulator, npu"):
        tvm_ascend.CompileConfig(device="gpu")


def test_npu_without_a_toolkit_names_the_variable_before_reading_the_model(no_toolkit):
    # a model path that does not exist: the device error comes first, before any work
    with pytest.raises(ToolchainError) as err:
        tvm_ascend.build("/nonexistent/model.onnx",
                         config=tvm_ascend.CompileConfig(device="npu"))
    text = str(err.value)
    assert "device='npu'" in text and "needs a CANN toolkit" in text
    assert "neither ASCEND_HOME_PATH nor ASCEND_TOOLKIT_HOME is set" in text
    assert "device='emulator'" in text  # and what works here instead


@pytest.mark.parametrize("without, words", [
    ("compiler", "no device compiler"), ("acl", "acl/acl.h"),
    ("ascendc", "kernel_operator.h"), ("lib", "libascendcl.so")])
def test_npu_with_an_incomplete_toolkit_names_the_missing_piece(no_toolkit, monkeypatch,
                                                                 tmp_path, without, words):
    monkeypatch.setenv("ASCEND_HOME_PATH", str(_toolkit(tmp_path, without)))
    with pytest.raises(ToolchainError, match="needs a CANN toolkit") as err:
        tvm_ascend.build(DEMO, config=tvm_ascend.CompileConfig(device="npu"))
    assert words in str(err.value) and str(tmp_path) in str(err.value)


def test_npu_with_a_complete_toolkit_says_the_whole_model_build_is_not_there(
        no_toolkit, monkeypatch, tmp_path):
    monkeypatch.setenv("ASCEND_HOME_PATH", str(_toolkit(tmp_path)))
    with pytest.raises(ToolchainError, match="whole-model NPU builds are not implemented") as e:
        tvm_ascend.build(DEMO, config=tvm_ascend.CompileConfig(device="npu"))
    assert f"CANN toolkit at {tmp_path} (ASCEND_HOME_PATH) is complete" in str(e.value)


def test_cli_device_npu_without_a_toolkit_is_an_error_and_writes_nothing(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "TVM_ASCEND_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tvm_ascend.cli", "compile", "--model", DEMO,
                           "--output", str(tmp_path / "out.so"), "--device", "npu"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2, done.stderr
    assert "tvm-ascend: error: device='npu'" in done.stderr and "ASCEND_HOME_PATH" in done.stderr
    assert "Traceback" not in done.stderr and list(tmp_path.glob("*.so")) == []
    assert "--device {emulator,npu}" in subprocess.run(
        [sys.executable, "-m", "tvm_ascend.cli", "compile", "--help"], capture_output=True,
        text=True, timeout=300, env=env).stdout
