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
