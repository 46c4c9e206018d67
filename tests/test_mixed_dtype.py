"""Mixed precision and masks in row kernels: the SDPA tail (Softmax -> IsNaN -> Where) and a
float16 LayerNorm chain with float32 casts around its reductions, each ONE kernel, against
onnxruntime with explicit tolerances; plan GM bytes equal the emulator's counters."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder

ONNX_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}


def build_one_kernel(builder: ModelBuilder, template: str, tol_dtype: str | None = None):
    """Build; exactly one NPU kernel of ``template``, nothing on the host; outputs match
    (with the tolerance of ``tol_dtype``: the narrowest dtype a value went through)."""
    model = builder.model()
    lib = tvm_ascend.build(model, target="ascend")
    report = lib.fusion_report()
    assert report["npu_kernels"] == 1 and report["host_groups"] == 0, \
        [g["reason"] for g in report["groups"]]
    (group,) = report["groups"]
    assert group["reason"].startswith(f"{template} template"), group["reason"]
    outs = lib.run(builder.feeds)
    (launch,) = lib.profile()
    for out, ref in zip(outs, run_onnxruntime(model, builder.feeds)):
        assert out.dtype == ref.dtype
        assert_close(out, ref, tol_dtype or str(ref.dtype))
    assert launch["warnings"] == []
    assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
    assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"]
    assert launch["peak_ub_bytes"] == group["tiling"]["ub_bytes"]
    return lib, group


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sdpa_softmax_isnan_where_tail_is_one_row_kernel(dtype):
    b = ModelBuilder(dtype, seed=21)
    shape = (2, 3, 37)
    x = b.input("x", shape)
    b.feeds["x"][0, 1, :] = -np.inf  # a fully masked row: softmax gives NaN, Where gives 0
    soft = b.node("Softmax", [x], axis=-1)
    b.output(b.node("Where", [b.node("IsNaN", [soft]), b.const(np.array(0.0)), soft]), shape)
    lib, group = build_one_kernel(b, "row_reduce")
    assert [op["op"] for op in group["ops"]] == ["relax.nn.softmax", "relax.isnan",
                                                 "relax.where"]
    source = next(iter(lib.kernel_sources().values()))
    assert "AscendC::Compares(" in source and "AscendC::Select(" in source


def _layernorm_fp32_inside(b: ModelBuilder, x: str, cols: int) -> str:
    """Cast(fp16 -> fp32) -> mean/variance/normalise in fp32 -> Cast back -> gamma, beta."""
    xf = b.node("Cast", [x], to=TensorProto.FLOAT)
    mean = b.node("ReduceMean", [xf], axes=[-1])
    centred = b.node("Sub", [xf, mean])
    var = b.node("ReduceMean", [b.node("Mul", [centred, centred])], axes=[-1])
    eps = b.name("eps")
    b.inits.append(numpy_helper.from_array(np.array(1e-5, np.float32), eps))
    norm = b.node("Div", [centred, b.node("Sqrt", [b.node("Add", [var, eps])])])
    half = b.node("Cast", [norm], to=TensorProto.FLOAT16)
    gamma = b.const(b.rng.uniform(0.5, 1.5, cols), "gamma")
    beta = b.const(b.rng.standard_normal(cols), "beta")
    return b.node("Add", [b.node("Mul", [half, gamma]), beta])


@pytest.mark.parametrize("shape", [(5, 3, 100), (70, 33)])
def test_fp16_layernorm_with_fp32_reductions_is_one_kernel(shape):
    b = ModelBuilder("float16", seed=22)
    x = b.input("x", shape)
    b.feeds["x"] = (b.feeds["x"] * 40 + 500).astype(np.float16)  # fp16 sums would lose it
    b.output(_layernorm_fp32_inside(b, x, shape[-1]), shape)
    lib, group = build_one_kernel(b, "row_reduce")
    source = next(iter(lib.kernel_sources().values()))
    # both reductions accumulate in float32, the output is written in float16
    assert source.count("AscendC::ReduceSum(reducedBuf.Get<float>()") == 2
    assert "AscendC::GlobalTensor<half> outGm;" in source
    rows = int(np.prod(shape[:-1]))
    assert group["tiling"]["gm_write_bytes"] == rows * shape[-1] * 2


def test_fp16_softmax_computed_in_fp32_is_one_kernel():
    b = ModelBuilder("float16", seed=23)
    shape = (6, 129)
    x = b.input("x", shape)
    soft = b.node("Softmax", [b.node("Cast", [x], to=TensorProto.FLOAT)], axis=-1)
    b.output(b.node("Cast", [soft], to=TensorProto.FLOAT16), shape)
    build_one_kernel(b, "row_reduce")


def test_bool_mask_rows_feed_a_masked_softmax():
    b = ModelBuilder("float32", seed=24)
    shape, cols = (2, 4, 40), 40
    x = b.input("x", shape)
    b.inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, (2, 1, cols)))
    b.feeds["mask"] = b.rng.random((2, 1, cols)) < 0.7
    masked = b.node("Where", ["mask", x, b.const(np.array(-np.inf))])
    b.output(b.node("Softmax", [masked], axis=-1), shape)
    build_one_kernel(b, "row_reduce")


@pytest.mark.parametrize("src,dst", [("float16", "float32"), ("float32", "float16")])
def test_elementwise_casts_compute_each_op_in_its_dtype(src, dst):
    b = ModelBuilder(src, seed=25)
    shape = (3, 7, 11)
    x = b.input("x", shape)
    wide = b.node("Cast", [b.node("Sigmoid", [x])], to=ONNX_TYPES[dst])
    out = b.node("Exp", [wide])
    b.nodes.append(helper.make_node("Identity", [out], ["y"], name="y"))
    b.outputs.append(helper.make_tensor_value_info("y", ONNX_TYPES[dst], shape))
    lib, group = build_one_kernel(b, "elementwise", tol_dtype="float16")
    elems = int(np.prod(shape))
    assert group["tiling"]["gm_write_bytes"] == elems * (2 if dst == "float16" else 4)
