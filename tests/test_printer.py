"""Generated-source checks: structure, provenance, determinism, the emulator as the API spec."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend.codegen import EMITTED_API
from tvm_ascend.schedules.analysis.tile_values import VECTOR_BINARY, VECTOR_CALLS
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


# tensors named like what the printers declare themselves (the product tile is ``cTile``, the
# output queue ``outQue``, Init takes ``tiling`` / ``t`` and ``pipe``, the entry ``workspace``)
PRINTER_LIKE_NAMES = ("c", "out", "tiling", "t", "pipe", "workspace", "op", "tilingData",
                      "rowBuf", "acc")


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_tensor_names_the_printers_use_themselves_compile(soc):
    """One input of each such name through every vector and cube template: the kernels
    compile (they did not: ``redeclaration of cTile``, ``request for member InitBuffer in
    pipe``) and match onnxruntime."""
    b = ModelBuilder("float32", seed=4)
    for name in PRINTER_LIKE_NAMES:
        x = b.input(name, (4, 8))
        w = b.const(b.rng.standard_normal((8, 8)), "w")
        b.output(b.node("Add", [b.node("MatMul", [x, w]), x]), (4, 8))
        b.output(b.node("Mul", [b.node("Softmax", [x], axis=-1), x]), (4, 8))
        b.output(b.node("Relu", [b.node("Sub", [x, b.const(np.array(1.0), "one")])]), (4, 8))
        b.output(b.node("Concat", [x, b.node("Neg", [x])], axis=1), (4, 16))
        b.output(b.node("ReduceSum", [x, b.int_const([0])], keepdims=1), (1, 8))
    model = b.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(soc_version=soc))
    for out, ref in zip(lib.run(b.feeds), run_onnxruntime(model, b.feeds)):
        assert_close(out, ref, "float32")
    assert lib.fusion_report()["kernels"]["host"] == 0


# what the printers declare (members, Init / entry parameters, locals) and the suffixes a
# tensor's identifier takes (xGm, xTile, ...)
_DECLARED = re.compile(
    r"(?:u?int(?:8|16|32|64)_t|auto|float|half|bool|LocalTensor<[^>]*>|TBuf<[^>]*>|"
    r"TQue<[^>]*>|TPipe\*?|TilingData&?|Kernel|GM_ADDR|GlobalTensor<[^>]*>) "
    r"([a-z][A-Za-z0-9_]*)\s*[=;,)\[]")
_SUFFIXED = re.compile(r"(?<![{A-Za-z0-9_])([a-z][A-Za-z0-9_]*?)"
                       r"(Gm|Que|Tile|Val|Col|Res|Epi|Row|Rep|Local|RowVal|RepBuf)\b")


def test_every_identifier_a_printer_declares_is_reserved_from_tensor_names():
    """A tensor named like one of them gets another identifier (``ident``), so adding a member
    or a local to a printer cannot break a model whose tensor has that name."""
    from pathlib import Path

    from tvm_ascend.codegen import kernel_parts
    from tvm_ascend.codegen.kernel_parts import PRINTER_NAMES, ident

    declared = set()
    for path in Path(kernel_parts.__file__).parent.rglob("*.py"):  # kernels/ too
        text = path.read_text()
        declared |= set(_DECLARED.findall(text))
        declared |= {stem for stem, _ in _SUFFIXED.findall(text)}
    assert declared - PRINTER_NAMES == set()
    assert [ident(n) for n in ("c", "tiling", "x", "long")] == ["c_", "tiling_", "x", "long_"]


def test_every_template_is_printed_by_the_kernel_printer_of_its_name():
    """A printer is found by its template's name: ``schedules/NAME`` is printed by a
    ``KernelPrinter`` in ``codegen/kernels/NAME.py``, and no printer is left without one."""
    from tvm_ascend.codegen.ascendc_printer import KERNEL_PRINTERS
    from tvm_ascend.codegen.kernel_printer import KernelPrinter
    from tvm_ascend.schedules import TEMPLATES

    assert sorted(KERNEL_PRINTERS) == sorted(template.name for template in TEMPLATES)
    for name, printer in KERNEL_PRINTERS.items():
        assert printer.__module__ == f"tvm_ascend.codegen.kernels.{name}", name
        assert issubclass(printer, KernelPrinter), name


def _planned_sources(model, config):
    """Each NPU kernel's source as printed for ``model``: planned, scheduled and printed, not
    compiled, run or given any memory."""
    from tvm_ascend import ir_attrs
    from tvm_ascend.codegen.ascendc_printer import kernel_source
    from tvm_ascend.codegen.ext_codegen import scheduled_kernels
    from tvm_ascend.partition.cost import GroupCost
    from tvm_ascend.scheduling import schedule_groups

    result = tvm_ascend.partition_for_ascend(model, config)
    scheduled, _ = schedule_groups(result.mod, GroupCost(config.soc))
    funcs = [f for f in scheduled.functions.values() if f.attrs and ir_attrs.PRIM_FUNC in f.attrs]
    return [kernel_source(kernel, config.soc) for kernel in scheduled_kernels(funcs)]


def test_a_row_too_long_for_its_32_bit_tiling_field_is_refused_not_truncated():
    """x[2, 5e9] -> Relu is planned as rows of 5e9 elements; the kernel keeps a row's length
    in ``uint32_t cols`` and printed 5000000000 into it."""
    from onnx import TensorProto, helper

    from tvm_ascend.errors import CodegenError

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "long_rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5_000_000_000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5_000_000_000])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CodegenError) as info:
        _planned_sources(model, tvm_ascend.CompileConfig())
    message = str(info.value)
    assert "cols" in message and "5000000000" in message and "uint32_t" in message, message


def test_tiling_fields_are_checked_against_their_types():
    from tvm_ascend.codegen.cpp_types import field_literal
    from tvm_ascend.errors import CodegenError

    assert field_literal("k0", "cols", "uint32_t", 2**32 - 1) == "4294967295"
    assert field_literal("k0", "rows", "uint64_t", 5_000_000_000) == "5000000000"
    for ctype, value in (("uint32_t", 2**32), ("int32_t", 2**31), ("uint32_t", -1)):
        with pytest.raises(CodegenError, match=f"k0: tiling field f = {value} .*{ctype}"):
            field_literal("k0", "f", ctype, value)


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
