"""Generated-source checks: structure, provenance, determinism, the emulator as the API spec."""
from __future__ import annotations

import re

import tvm_ascend
from tvm_ascend.codegen import EMITTED_API
from tvm_ascend.schedules.tile_values import VECTOR_BINARY, VECTOR_CALLS
from tvm_ascend.codegen.vector_emitters import BINARY_CALL_EMITTERS, BINARY_EMITTERS, CALL_EMITTERS
from tvm_ascend.soc import emulator_dir
from onnx_models import ModelBuilder, add_chain


def _sources(steps, shape=(3, 7, 11), dtype="float32"):
    builder = ModelBuilder(dtype, seed=5)
    add_chain(builder, 0, shape, steps)
    return tvm_ascend.build(builder.model()).kernel_sources()


def _in_order(text, parts):
    position = 0
    for part in parts:
        found = text.find(part, position)
        assert found >= 0, f"{part!r} not found after offset {position}"
        position = found + len(part)


def test_kernel_structure_follows_ascendc_samples():
    (source,) = _sources(["mul_scalar", "relu", "sub_input", "sigmoid"]).values()
    _in_order(source, [
        "// tvm-ascend kernel", "// ops:", "// tiling (elementwise)",
        '#include "kernel_operator.h"', "struct TilingData", "class Kernel",
        "void Init(", "pipe.InitBuffer(", "void Process()", "CopyIn(i, len);", "Compute(len);",
        "CopyOut(i, len);", "void CopyIn(", "AllocTensor", "EnQue", "void Compute(", "DeQue",
        "AscendC::Muls(", "AscendC::Relu(", "AscendC::Sub(", "AscendC::Sigmoid(", "FreeTensor",
        "void CopyOut(", "CopyUbToGm(", 'extern "C" __global__ __aicore__ void',
    ])
    assert "BUFFER_NUM = 2" in source


def test_a_bias_broadcast_is_vectorised_by_the_row_template():
    """Elementwise would gather the bias element by element on the scalar unit; the row
    template keeps it resident and adds it with one vector instruction per row."""
    (source,) = _sources(["add_bias", "relu"]).values()
    assert "// tiling (row_reduce)" in source and "SetValue" not in source.split("Compute(")[1]


def test_printing_is_deterministic():
    steps = ["add_bias", "mul_scalar", "tanh", "div_const"]
    assert _sources(steps) == _sources(steps)


def test_every_emitted_api_is_declared_by_the_emulator():
    headers = "".join(p.read_text() for p in emulator_dir().rglob("*.h"))
    for name in EMITTED_API:
        # declared directly or through a generator macro such as ASCENDC_EMU_SCALAR(Adds, ...)
        assert re.search(rf"\b{name}\b", headers), f"emulator lacks AscendC::{name}"


def test_printer_covers_every_vectorisable_construct():
    from tvm_ascend.codegen.scalar_printer import SCALAR_CALLS

    assert set(BINARY_EMITTERS) == set(VECTOR_BINARY)
    assert set(CALL_EMITTERS) | set(BINARY_CALL_EMITTERS) == set(VECTOR_CALLS)
    assert set(VECTOR_CALLS) <= SCALAR_CALLS, "row values use the same constructs on scalars"


def test_half_kernels_use_half_types():
    (source,) = _sources(["relu", "mul_scalar"], dtype="float16").values()
    assert "AscendC::LocalTensor<half>" in source and "float>" not in source


def test_floor_division_of_a_possibly_negative_index_keeps_tir_meaning(tmp_path):
    """TIR's floordiv/floormod round down, C++'s / and % towards zero: an index that may be
    negative (a reversed slice's) is printed with the prelude's helpers, which g++ checks here
    against numpy; provably non-negative ones stay plain / and %."""
    import shutil
    import subprocess

    import numpy as np
    import pytest
    from tvm import tirx
    from tvm_ascend.codegen.scalar_printer import ScalarPrinter
    from tvm_ascend.codegen.templates import KERNEL_PRELUDE

    f, i64 = tirx.Var("f", "int64"), (lambda v: tirx.IntImm("int64", v))
    printer = ScalarPrinter({})
    assert printer.print(tirx.FloorDiv(tirx.FloorMod(f, i64(76)) + i64(3), i64(4))) == \
        "(((f % 76LL) + 3LL) / 4LL)"
    reversed_index = printer.print(tirx.FloorMod(i64(21) - f * i64(6), i64(8)))
    assert reversed_index == "static_cast<int64_t>(FloorModInt((21LL - (f * 6LL)), 8LL))"
    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    pairs = [(a, b) for a in range(-9, 10) for b in (-4, -3, 1, 3, 8)]
    body = "".join(f'  std::printf("%lld %lld\\n", (long long)FloorDivInt({a}, {b}), '
                   f"(long long)FloorModInt({a}, {b}));\n" for a, b in pairs)
    src = tmp_path / "floor.cpp"
    src.write_text(KERNEL_PRELUDE + "#include <cstdio>\nint main() {\n" + body + "}\n")
    subprocess.run(["g++", "-std=c++17", "-DASCENDC_CPU_DEBUG", f"-I{emulator_dir()}", str(src),
                    "-o", str(tmp_path / "floor"), "-pthread"], check=True, capture_output=True)
    got = subprocess.run([str(tmp_path / "floor")], capture_output=True, text=True, check=True)
    expected = [f"{np.floor_divide(a, b)} {np.mod(a, b)}" for a, b in pairs]
    assert got.stdout.splitlines() == expected
