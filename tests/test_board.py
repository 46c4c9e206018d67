"""The real-device path without a device: CANN detection and the bisheng command (against fake
toolkits), the printed ACL launchers (structure, and a g++ -fsyntax-only check against the
declarations in tests/acl_stub: syntax and types only, nothing runs on an NPU), and the board
side of the RPC runner over a loopback tracker with the emulator backend."""
from __future__ import annotations

import re
import socket
import stat
import subprocess
from pathlib import Path

import pytest

import tvm_ascend
from tvm_ascend import ir_attrs
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_printer
from tvm_ascend.codegen.code_buffer import CodeBuffer
from tvm_ascend.codegen.npu_unit import npu_kernel_mode, npu_unit_source
from tvm_ascend.codegen.launcher import (ACL_TIME_SUFFIX, emit_acl_launcher,
                                         emit_host_launcher)
from tvm_ascend.cost_model.counters import vector_work_from_counters
from tvm_ascend.errors import AscendError, CodegenError, ToolchainError
from tvm_ascend.kernel_record import record_of
from tvm_ascend.runtime import cann
from tvm_ascend.schedules import template_by_name
from tvm_ascend.soc import get_soc
from tvm_ascend.tuning import RPCRunner, board
from tvm_ascend.tuning.runner import Candidate, LocalRunner, build_with_knobs
from build_checks import acl_stub_command, acl_stub_unit
from onnx_models import ModelBuilder, add_chain

SOC = get_soc("Ascend910B1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _only_kernel(model):
    result = tvm_ascend.partition_for_ascend(model)
    ((name, template, func),) = [
        (gv.name_hint, template_by_name(record_of(f).template),
         f.attrs[ir_attrs.PRIM_FUNC]) for gv, f in result.mod.functions.items()
        if f.attrs and f.attrs.get("Codegen") == "ascend"]
    return name, template, func


@pytest.fixture(scope="module")
def chain():
    """relu -> mul_scalar -> exp: one elementwise kernel; (builder, name, template, func)."""
    builder = ModelBuilder("float32", seed=5)
    add_chain(builder, 0, (4, 64, 96), ["relu", "mul_scalar", "exp"])
    return (builder, *_only_kernel(builder.model()))


def _scheduled(name, template, func) -> ScheduledKernel:
    func_s, tiling = template.schedule(func, SOC, template.knob_space(func, SOC)[0])
    return ScheduledKernel(name, func_s, tiling, {"name": name, "rule": "test", "ops": []})


@pytest.fixture(scope="module")
def scheduled(chain):
    return _scheduled(*chain[1:])


@pytest.fixture(scope="module")
def scheduled_matmul():
    """MatMul + bias + Relu in float16: a MIX-mode kernel whose tiling is set field by field."""
    builder = ModelBuilder("float16", seed=7)
    w = builder.const(builder.rng.standard_normal((96, 80)) * 0.1, "w")
    bias = builder.const(builder.rng.standard_normal(80), "bias")
    matmul = builder.node("MatMul", [builder.input("x", (2, 70, 96)), w])
    builder.output(builder.node("Relu", [builder.node("Add", [matmul, bias])]), (2, 70, 80))
    return _scheduled(*_only_kernel(builder.model()))


# ---- CANN detection and the device build ---------------------------------------------------------
def test_detect_returns_none_with_the_reason_here():
    if cann.detect() is not None:
        pytest.skip("a CANN toolkit is installed here")
    reason = cann.absent_reason()
    assert reason and ("ASCEND_HOME_PATH" in reason or "CANN toolkit at" in reason)
    with pytest.raises(ToolchainError, match=re.escape(reason)):
        cann.require()


def _fake_toolkit(root, script="", pieces=("compiler", "acl", "ascendc", "lib")):
    """A CANN-shaped folder; the fake bisheng logs its arguments and writes its -o file."""
    if "compiler" in pieces:
        compiler = root / "compiler" / "ccec_compiler" / "bin" / "bisheng"
        compiler.parent.mkdir(parents=True)
        compiler.write_text('#!/bin/sh\necho "$@" >> "${0%/*}/calls.log"\n' + (
            script or 'while [ "$1" != "-o" ]; do shift; done; echo lib > "$2"\n'))
        compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    if "acl" in pieces:
        (root / "include" / "acl").mkdir(parents=True)
        (root / "include" / "acl" / "acl.h").write_text("")
    if "ascendc" in pieces:
        (root / cann.ASCENDC_INCLUDE).mkdir(parents=True)
        (root / cann.ASCENDC_INCLUDE / "kernel_operator.h").write_text("")
    if "lib" in pieces:
        (root / "lib64").mkdir()
        (root / "lib64" / "libascendcl.so").write_text("")
    return {"ASCEND_TOOLKIT_HOME": str(root), "PATH": ""}  # no bisheng from this machine's PATH


@pytest.mark.parametrize("missing, words", [
    ("compiler", "no device compiler"), ("acl", "acl.h"), ("ascendc", "kernel_operator.h"),
    ("lib", "libascendcl.so")])
def test_detect_names_the_missing_piece(tmp_path, missing, words):
    env = _fake_toolkit(tmp_path, pieces={"compiler", "acl", "ascendc", "lib"} - {missing})
    toolkit, reason = cann.probe(env)
    assert toolkit is None and words in reason and "ASCEND_TOOLKIT_HOME" in reason
    assert "is not a directory" in cann.probe({"ASCEND_HOME_PATH": str(tmp_path / "x")})[1]


def test_device_command_arch_flags_and_the_compile_cache(tmp_path):
    toolkit = cann.detect(_fake_toolkit(tmp_path / "cann"))
    assert toolkit.compiler_kind == "bisheng" and toolkit.home_variable == "ASCEND_TOOLKIT_HOME"
    cmd = cann.device_compile_command(toolkit, "u.cpp", "u.so", SOC, "vector")
    assert cmd[:3] == [str(toolkit.compiler), "-xcce", "--cce-aicore-arch=dav-c220-vec"]
    assert cmd[cmd.index("-o") + 1] == "u.so" and "-lascendcl" in cmd
    assert f"-I{tmp_path / 'cann' / cann.ASCENDC_INCLUDE}" in cmd
    assert cann.arch_flags(SOC, cann.core_kind(["AIV_MODE", "MIX_MODE"])) == [
        "--npu-arch=dav-2201"]
    assert cann.arch_flags(get_soc("Ascend310P3"), "cube") == ["--cce-aicore-arch=dav-m200"]
    assert cann.arch_flags(get_soc("Ascend910A"), "vector") == ["--cce-aicore-arch=dav-c100"]
    with pytest.raises(ToolchainError, match="core kind 'tensor'"):
        cann.arch_flags(SOC, "tensor")
    cache = tmp_path / "cache"
    first = cann.build_device_library("// unit A", SOC, toolkit=toolkit, cache_dir=cache)
    again = cann.build_device_library("// unit A", SOC, toolkit=toolkit, cache_dir=cache)
    other = cann.build_device_library("// unit B", SOC, toolkit=toolkit, cache_dir=cache)
    calls = (toolkit.compiler.parent / "calls.log").read_text().splitlines()
    assert first == again != other and len(calls) == 2 and first.read_text() == "lib\n"
    assert sorted(p.name for p in cache.iterdir()) == sorted([first.name, other.name])


def test_a_failing_device_compile_raises_with_command_and_output(tmp_path):
    toolkit = cann.detect(_fake_toolkit(tmp_path / "cann", 'echo "error: bad kernel" >&2\n'
                                                           "exit 1\n"))
    with pytest.raises(ToolchainError, match="bisheng failed") as info:
        cann.build_device_library("// unit", SOC, toolkit=toolkit, cache_dir=tmp_path / "c")
    assert "error: bad kernel" in str(info.value) and "dav-c220-vec" in str(info.value)
    assert [p for p in (tmp_path / "c").iterdir()] == []  # nothing half-written is left


# ---- the ACL launcher ----------------------------------------------------------------------------
def _acl_text(kernel, timed=True) -> str:
    printer = kernel_printer(kernel)
    printer.print(CodeBuffer())
    buf = CodeBuffer()
    emit_acl_launcher(buf, kernel.symbol, printer, kernel.tiling.cores, timed=timed)
    return buf.text()


def _in_order(text, parts):
    at = 0
    for part in parts:
        found = text.find(part, at)
        assert found >= 0, f"{part!r} missing or out of order after offset {at}"
        at = found + len(part)


def test_acl_launcher_calls_in_order_checked_and_freed(scheduled):
    text = _acl_text(scheduled)
    launch, timer = text.split("static double TimeUs")
    sym = scheduled.symbol
    # every parameter (the inputs, then the output) is copied to its device buffer
    devices = ", ".join(f"dev{i}" for i in range(len(scheduled.prim_func.params)))
    _in_order(launch, ["CheckArg(a0", "tvm_ascend_acl::Stream()", "do {", "aclrtMalloc(",
                       "ACL_MEMCPY_HOST_TO_DEVICE", f"{sym}<<<{scheduled.tiling.cores}, nullptr, "
                       f"stream>>>({devices}, devWorkspace, devTiling);",
                       "aclrtSynchronizeStream(stream)", "ACL_MEMCPY_DEVICE_TO_HOST",
                       "} while (false);", "Free(devTiling", "Free(dev0", "ThrowIfFailed"])
    _in_order(timer, ["aclrtMalloc(", "aclrtMemset(", "aclrtCreateEvent(&start)",
                      "aclrtCreateEvent(&end)", "stream>>>", "aclrtSynchronizeStream(stream)",
                      "aclrtRecordEvent(start, stream)", "for (int64_t r = 0; r < repeats",
                      "stream>>>", "aclrtRecordEvent(end, stream)", "aclrtSynchronizeEvent(end)",
                      "aclrtEventElapsedTime(&elapsedMs, start, end)", "} while (false);",
                      "DestroyEvent(end", "DestroyEvent(start", "Free(dev0", "ThrowIfFailed",
                      "return static_cast<double>(elapsedMs) * 1000.0"])
    for body in (launch, timer):
        # every ACL call inside the block is checked, and breaks out to the frees
        calls = [line for line in body.splitlines() if re.search(r"\bacl\w+\(", line)]
        assert calls and all("if ((status = acl" in line and "break; }" in line
                             for line in calls), calls
        allocated = re.findall(r"reinterpret_cast<void\*\*>\(&(\w+)\)", body)
        freed = re.findall(r"tvm_ascend_acl::Free\((\w+),", body)
        assert allocated and sorted(allocated) == sorted(freed)
        after_block = body.split("} while (false);")[1]
        assert all(f"Free({dev}," in after_block for dev in allocated)  # frees on every path
        assert "return" not in body.split("} while (false);")[0].split("do {")[1]
    assert text.rstrip().endswith(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({sym}{ACL_TIME_SUFFIX}, "
                                  f"{sym}_acl::TimeUs);")
    assert "TimeUs" not in _acl_text(scheduled, timed=False)


@pytest.mark.parametrize("which, kind", [
    ("scheduled", "vector"),
    # the tiling-by-field path (emit_tiling_init) and a MIX kernel: another g++ run of ~5 s CPU
    pytest.param("scheduled_matmul", "mix", marks=pytest.mark.slow)])
def test_acl_unit_passes_a_gpp_syntax_check_against_stub_acl_declarations(request, which, kind):
    """Syntax and types only (g++ -fsyntax-only, tests/acl_stub/acl/acl.h declarations, the
    emulator's kernel_operator.h): the <<<>>> launch, which g++ cannot parse, is rewritten as a
    call of the kernel with the same arguments. It does not show the unit runs on a device."""
    kernel = request.getfixturevalue(which)
    unit = npu_unit_source(kernel, SOC)
    assert cann.core_kind([npu_kernel_mode(kernel)]) == kind and '#include "acl/acl.h"' in unit
    rewritten, launches = acl_stub_unit(unit)
    assert launches == 3
    command = acl_stub_command(SOC.name)
    done = subprocess.run(command, input=rewritten, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    acl_from = rewritten[:rewritten.index('#include "acl/acl.h"')].count("\n") + 1
    warned = [int(n) for n in re.findall(r"<stdin>:(\d+):\d+: warning", done.stderr)]
    assert all(n < acl_from for n in warned), done.stderr  # -Wall-clean from the ACL part on
    if kind == "vector":  # the check has teeth: a wrong ACL call does not pass it
        broken = rewritten.replace("aclrtSynchronizeStream(stream)", "aclrtSynchronizeStream()",
                                   1)
        assert subprocess.run(command, input=broken, capture_output=True,
                              text=True).returncode != 0


def test_the_launcher_is_chosen_by_a_flag(scheduled):
    printer = kernel_printer(scheduled)
    printer.print(CodeBuffer())
    texts = {}
    for kind in ("emulator", "acl"):
        buf = CodeBuffer()
        emit_host_launcher(buf, scheduled.symbol, printer, 4, launcher=kind)
        texts[kind] = buf.text()
    assert "ICPU_RUN_KF" in texts["emulator"] and "<<<" not in texts["emulator"]
    assert "<<<4, nullptr, stream>>>" in texts["acl"] and "ICPU_RUN_KF" not in texts["acl"]
    with pytest.raises(CodegenError, match="unknown launcher 'cuda'"):
        emit_host_launcher(CodeBuffer(), scheduled.symbol, printer, 4, launcher="cuda")


# ---- the board ---------------------------------------------------------------------------------
def test_board_over_a_loopback_tracker_matches_the_local_plan_estimate(chain):
    pytest.importorskip("tornado", reason="TVM's RPC tracker needs tornado")
    from tvm.rpc.tracker import Tracker

    builder, name, template, func = chain
    knobs = template.knob_space(func, SOC)[1]
    local = LocalRunner().measure([Candidate(name, template.name, func, knobs, SOC)])[0]
    port = _free_port()
    tracker = Tracker("127.0.0.1", port=port, port_end=port + 20, silent=True)
    try:
        board_port = _free_port()
        with board.board_server("ascend.test", "emulator", ("127.0.0.1", tracker.port),
                                port=board_port, port_end=board_port + 50):
            runner = RPCRunner(tracker=("127.0.0.1", tracker.port), key="ascend.test",
                               repeats=2)
            assert runner.ping() == {"cpu": True, "device_count": 1}
            (remote,) = runner.measure([Candidate(name, template.name, func, knobs, SOC,
                                                  builder.model())])
    finally:
        tracker.terminate()
    assert remote.ok and remote.runner == "rpc", remote.error
    # same tiling, emulator counters == plan counters, same vector work: the same estimate
    assert local.ok and remote.time_us == pytest.approx(local.time_us, rel=1e-6)


def test_vector_work_from_counters_classes_each_api():
    work = vector_work_from_counters({"vector_by_op": {
        "Exp": {"instrs": 2, "elems": 100}, "Div": {"instrs": 2, "elems": 100},
        "Sigmoid": {"instrs": 8, "elems": 100}, "Adds": {"instrs": 2, "elems": 100},
        "Gather": {"instrs": 2, "elems": 50}}}, 2)
    assert work.by_class == {"basic": 150, "divide": 100, "transcendental": 100,
                             "composite": 100}
    assert (work.ops_per_unit, work.elem_bytes) == (5, 2)
    assert work.weighted_ops == 150 + 2 * 100 + 2 * 100 + 8 * 100


def test_emulator_time_kernel_names_an_unknown_kernel_and_bad_repeats(tmp_path, chain):
    builder, name, template, func = chain
    # the knobs of the loopback test: the same unit, so the compile cache spares a g++ run
    candidate = Candidate(name, template.name, func, template.knob_space(func, SOC)[1], SOC,
                          builder.model())
    path = build_with_knobs(candidate, tmp_path / "db").export_library(tmp_path / "m.so")
    assert board.model_input_specs(path) == [((4, 64, 96), "float32")]
    with pytest.raises(AscendError, match="no NPU kernel 'nope'"):
        board.emulator_time_kernel(path, "nope", 1)
    with pytest.raises(AscendError, match="repeats must be >= 1"):
        board.emulator_time_kernel(path, chain[1], 0)
    with pytest.raises(AscendError, match="built for the CPU emulator"):
        board.acl_time_kernel(path, chain[1], 1)
    # a library cut short on its way to the board is refused before dlopen, naming the file
    truncated = tmp_path / "cut.so"
    truncated.write_bytes(Path(path).read_bytes()[:4096])
    with pytest.raises(tvm_ascend.ModelLoadError, match="cut.so"):
        board.model_input_specs(truncated)


def test_acl_backend_is_refused_with_the_reason_without_cann(capsys):
    if cann.detect() is not None:
        pytest.skip("a CANN toolkit is installed here")
    reason = cann.absent_reason()
    with pytest.raises(ToolchainError, match=re.escape(reason)):
        board.start_board("ascend.test", backend="acl")
    assert board.main(["--backend", "acl", "--key", "ascend.test"]) == 2
    assert reason in capsys.readouterr().err
    assert board.main(["--tracker", "nohost", "--backend", "emulator"]) == 2
    assert "--tracker 'nohost' is not host:port" in capsys.readouterr().err
    with pytest.raises(AscendError, match="--backend 'tpu'"):
        board.register_board_functions("tpu")


def test_acl_board_reports_its_devices():
    if cann.detect() is None:
        pytest.skip(f"acl backend skipped: {cann.absent_reason()}")
    port = _free_port()
    with board.board_server("ascend.acl", "acl", port=port, port_end=port + 50) as server:
        ping = RPCRunner(server=("127.0.0.1", server.port), key="ascend.acl").ping()
    assert ping["device_count"] >= 1
