"""The printed ACL launchers against the real public AscendCL headers (hicann/runtime's
acl/acl.h, from $ASCEND_HOME_PATH/include or the vendored copy beside the repository): every
template's NPU unit passes ``g++ -fsyntax-only`` against them on both SoCs, and every
declaration of the hand-written stub (tests/acl_stub, what the other launcher checks use) is
held equal to the real one. Syntax and types only: nothing runs on an NPU."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tvm_ascend.codegen.cpp_types import dtype_bytes
from tvm_ascend.codegen.ascendc_printer import kernel_printer
from tvm_ascend.codegen.code_buffer import CodeBuffer
from tvm_ascend.codegen.npu_unit import npu_unit_source
from tvm_ascend.soc import get_soc
from build_checks import ACL_STUB_DIR, acl_stub_command, acl_stub_unit, real_acl_include
from printed_kernels import SOCS, kernels_of_every_template, runtime_tiled_kernels

STUB_HEADER = Path(ACL_STUB_DIR) / "acl" / "acl.h"


@pytest.fixture(scope="module")
def acl_include() -> str:
    folder, tried = real_acl_include()
    if folder is None:
        pytest.skip(f"no real AscendCL headers (acl/acl.h) in: {', '.join(tried)}")
    return folder


def _gpp(source: str, include: str) -> subprocess.CompletedProcess:
    return subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", f"-I{include}",
                           "-x", "c++", "-"], input=source, capture_output=True, text=True)


def test_the_real_headers_are_looked_for_in_the_toolkit_first(tmp_path):
    toolkit = tmp_path / "toolkit"
    (toolkit / "include" / "acl").mkdir(parents=True)
    (toolkit / "include" / "acl" / "acl.h").write_text("")
    repo = tmp_path / "repo"
    vendored = tmp_path / "shared" / "vendor" / "cann" / "runtime" / "include" / "external"
    assert real_acl_include({"ASCEND_HOME_PATH": str(toolkit)}, str(repo)) == (
        str(toolkit / "include"), [str(toolkit / "include"), str(vendored)])
    # neither: None, and the folders tried name both places for the skip reason
    assert real_acl_include({"ASCEND_HOME_PATH": str(tmp_path / "none")}, str(repo)) == (
        None, [str(tmp_path / "none" / "include"), str(vendored)])
    (vendored / "acl").mkdir(parents=True)
    (vendored / "acl" / "acl.h").write_text("")
    assert real_acl_include({}, str(repo)) == (str(vendored), [str(vendored)])


def test_the_real_header_check_reads_the_real_acl_h(acl_include):
    """Regression: launch_stub.h included "acl/acl.h" with quotes, which finds the stub beside
    it before any -I folder, so a check meant for the real headers read the stub. A name only
    the real headers declare now compiles with them and not with the stub."""
    unit = '#include "acl/acl.h"\nstatic_assert(ACL_MEMCPY_DEFAULT == 4, "real acl_rt.h");\n'
    assert subprocess.run(acl_stub_command("Ascend910B1", acl_include), input=unit,
                          capture_output=True, text=True).returncode == 0
    assert subprocess.run(acl_stub_command("Ascend910B1"), input=unit, capture_output=True,
                          text=True).returncode != 0


def _stub_agreement_source(stub: str) -> str:
    """A unit that includes the real acl/acl.h and fails to compile unless every typedef,
    constant, enum value and function the ``stub`` header text declares is the real one."""
    lines = ["#include <acl/acl.h>", "#include <type_traits>"]
    body = re.sub(r"//[^\n]*", "", stub)
    for enum, entries in re.findall(r"typedef enum (\w+) \{([^}]*)\}", body):
        lines.append(f'static_assert(std::is_enum<{enum}>::value, "{enum}");')
        for name, value in re.findall(r"(\w+) = (\w+)", entries):
            lines.append(f'static_assert({name} == {value}, "{name}");')
    for real, name in re.findall(r"typedef ([\w ]+\*?) (\w+);", body):
        lines.append(f'static_assert(std::is_same<{name}, {real}>::value, "{name}");')
    for kind, name, value in re.findall(r"static const (\w+) (\w+) = (\w+);", body):
        lines.append(f'static_assert(std::is_same<decltype({name}), const {kind}>::value && '
                     f'{name} == {value}, "{name}");')
    functions = re.findall(r"^(aclError \w+\([^;]*\);)", body.split('extern "C" {')[1],
                           re.M)
    assert len(functions) >= 17, functions
    for index, declaration in enumerate(functions):
        name = re.match(r"aclError (\w+)", declaration).group(1)
        # taken before the redeclaration below: fails if the real headers lack the function
        lines.append(f"[[maybe_unused]] static const auto kDeclared{index} = &{name};")
    # a C function redeclared with other parameters is a conflicting declaration
    lines += ['extern "C" {', *functions, "}"]
    return "\n".join(lines) + "\n"


def test_every_stub_declaration_is_the_real_one(acl_include):
    source = _stub_agreement_source(STUB_HEADER.read_text())
    done = _gpp(source, acl_include)
    assert done.returncode == 0, done.stderr[-3000:]
    # the check has teeth: a parameter type, an enum value or a function the real headers
    # lack each fail it
    stub = STUB_HEADER.read_text()
    for broken in (stub.replace("int32_t value, size_t count", "int64_t value, size_t count"),
                   stub.replace("ACL_MEMCPY_DEVICE_TO_HOST = 2", "ACL_MEMCPY_DEVICE_TO_HOST = 3"),
                   stub.replace("aclError aclFinalize();", "aclError aclFinalizeAll();")):
        assert broken != stub
        assert _gpp(_stub_agreement_source(broken), acl_include).returncode != 0


@pytest.mark.parametrize("soc_name", SOCS)
def test_every_templates_launcher_compiles_against_the_real_acl_headers(acl_include, soc_name):
    """The NPU unit (kernel, ACL host runtime, launcher and ACL-event timer) of a kernel of
    each template: -fsyntax-only against the real acl/acl.h, -Wall-clean from the ACL part on.
    The <<<>>> launch, which g++ cannot parse, is rewritten as a call of the kernel with the
    same arguments (tests/acl_stub/launch_stub.h)."""
    soc = get_soc(soc_name)
    command = acl_stub_command(soc_name, acl_include)
    for kernel in kernels_of_every_template(soc_name):
        rewritten, launches = acl_stub_unit(npu_unit_source(kernel, soc))
        assert launches == 3, kernel.symbol  # Launch, the timer's warm-up and its loop
        done = subprocess.run(command, input=rewritten, capture_output=True, text=True)
        assert done.returncode == 0, (kernel.tiling.template, done.stderr[-3000:])
        acl_from = rewritten[:rewritten.index('#include "acl/acl.h"')].count("\n") + 1
        warned = [int(n) for n in re.findall(r"<stdin>:(\d+):\d+: warning", done.stderr)]
        assert all(n < acl_from for n in warned), (kernel.tiling.template, done.stderr)


def kernel_params(kernel):
    """(name, dtype, numel at the bound) of the kernel's arguments, as its launcher reads
    them: after printing (printers fill what the launcher reads while printing)."""
    printer = kernel_printer(kernel)
    printer.print(CodeBuffer())
    return printer.kernel_params()


@pytest.mark.parametrize("soc_name", SOCS)
def test_run_time_tiled_launchers_compile_against_the_real_acl_headers(acl_include, soc_name):
    """Kernels tiled at run time (a matmul over a symbolic M, a LayerNorm over symbolic rows,
    a Softmax over a symbolic row length) had no ACL launcher (a CodegenError). Now theirs
    reads the dimensions off the arguments' shapes and checks them against the range, sizes
    the device buffers and copies per call, and takes the tiling struct and blockDim from the
    host tiling function the emulator launcher uses; the timer runs at the upper bound."""
    soc = get_soc(soc_name)
    command = acl_stub_command(soc_name, acl_include)
    for kernel in runtime_tiled_kernels(soc_name):
        unit = npu_unit_source(kernel, soc)
        launcher = unit[unit.index(f"namespace {kernel.symbol}_acl {{"):]
        assert "is outside its range 1~300" in launcher, kernel.symbol
        assert f"{kernel.symbol}<<<launch.blockDim, nullptr, stream>>>" in launcher
        assert "const int64_t dims[1] = {300};  // the range's upper bound" in launcher
        assert f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({kernel.symbol}__tiling" in launcher
        # every argument's device buffer and copies follow the call's element count
        launch = launcher[:launcher.index("static double TimeUs(")]
        for index, (name, dtype, _) in enumerate(kernel_params(kernel)):
            size = f"static_cast<size_t>(numel{index}) * {dtype_bytes(dtype)}"
            assert f"std::max<size_t>({size}, 32)" in launch, (kernel.symbol, name)
            assert f"if (numel{index} > 0) {{" in launch, (kernel.symbol, name)
            assert launch.count(f", {size}, ") >= 1, (kernel.symbol, name)
        rewritten, launches = acl_stub_unit(unit)
        assert launches == 3, kernel.symbol
        done = subprocess.run(command, input=rewritten, capture_output=True, text=True)
        assert done.returncode == 0, (kernel.tiling.template, done.stderr[-3000:])
        acl_from = rewritten[:rewritten.index('#include "acl/acl.h"')].count("\n") + 1
        warned = [int(n) for n in re.findall(r"<stdin>:(\d+):\d+: warning", done.stderr)]
        assert all(n < acl_from for n in warned), (kernel.tiling.template, done.stderr)
