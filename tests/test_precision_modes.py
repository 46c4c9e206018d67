"""ATC precision modes: each changes the dtypes as documented, the model still matches fp32
onnxruntime within the tolerance of its dtype, and keep_dtype fences a node off."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from benchmarks.models.bert import encoder_layer_inputs, encoder_layer_model
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder, layernorm_chain


@pytest.fixture(scope="module")
def layer():
    model = encoder_layer_model(style="torchscript", batch=1, seq=16, hidden=64, heads=2)
    feeds = encoder_layer_inputs(batch=1, seq=16, hidden=64)
    return model, feeds, run_onnxruntime(model, feeds)[0]


def _dtypes(report) -> dict:
    """ONNX node -> dtype its own op computes in (the Cast back after a kept op aside)."""
    found: dict = {}
    for group in report["groups"]:
        for op in group["ops"]:
            if op["node"] and op["op"] != "relax.astype":
                found[op["node"]] = op["dtype"]
    return found


def _error(out, ref) -> float:
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / (np.max(np.abs(ref)) + 1e-12))


@pytest.mark.parametrize("mode, bound", [("force_fp16", 2e-2), ("allow_mix_precision", 1e-2)])
def test_lower_precision_modes_on_an_encoder_layer(layer, mode, bound):
    model, feeds, reference = layer
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(precision_mode=mode))
    (out,) = lib.run(feeds)
    assert out.dtype == np.float32  # the model's outputs keep the dtype it declares
    assert _error(out, reference) < bound
    report = lib.fusion_report()
    assert report["precision_mode"] == mode
    dtypes = _dtypes(report)
    assert dtypes["layer.attn.q.matmul"] in ("float16", "float32")
    if mode == "force_fp16":
        assert dtypes["layer.ffn.gelu.erf"] == "float16"
        assert dtypes["layer.ln1.mean"] == "float32"  # reductions accumulate in float32
    else:
        assert dtypes["layer.attn.q.matmul"] == "float16"  # the white list
        assert dtypes["layer.ffn.gelu.erf"] == "float32"  # the black list stays float32
    # regression (issue 16): allow_mix_precision ran every MatMul on the host
    matmuls = [g for g in report["groups"] if any(o["op"] == "relax.matmul" for o in g["ops"])]
    assert matmuls and all(g["on_npu"] for g in matmuls)


def test_keep_dtype_and_force_fp32():
    b = ModelBuilder("float16", seed=4)
    x = b.input("x", (8, 48))
    y = b.node("Relu", [layernorm_chain(b, x, 48)])
    b.output(y, (8, 48))
    model = b.model()
    reference = run_onnxruntime(model, b.feeds)[0].astype(np.float64)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(precision_mode="force_fp32"))
    (out,) = lib.run(b.feeds)
    assert out.dtype == np.float16
    assert _dtypes(lib.fusion_report())[y] == "float32"
    assert _error(out, reference) < 2e-3
    relu = y
    kept = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        precision_mode="force_fp32", keep_dtype=(relu,)))
    assert _dtypes(kept.fusion_report())[relu] == "float16"
    assert _error(kept.run(b.feeds)[0], reference) < 2e-3


def _mlp():
    """x @ W1 + b1 -> ReLU -> @ W2 + b2: two MatMul kernels with their epilogues."""
    b = ModelBuilder(seed=1)
    x = b.input("x", [32, 64])
    h = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, b.const(b.rng.uniform(
        -0.5, 0.5, (64, 48)))]), b.const(b.rng.uniform(0, 1, 48))])])
    y = b.node("Add", [b.node("MatMul", [h, b.const(b.rng.uniform(-0.5, 0.5, (48, 16)))]),
                       b.const(b.rng.uniform(0, 1, 16))])
    b.output(y, [32, 16])
    return b


def _conv_bn_relu():
    b = ModelBuilder(seed=2)
    x = b.input("x", [1, 8, 12, 12])
    conv = b.node("Conv", [x, b.const(b.rng.uniform(-0.5, 0.5, (16, 8, 3, 3)))],
                  pads=[1, 1, 1, 1])
    bn = b.node("BatchNormalization", [conv] + [b.const(b.rng.uniform(lo, lo + 1, 16))
                                                for lo in (0.5, 0.0, 0.0, 0.5)])
    b.output(b.node("Relu", [bn]), [1, 16, 12, 12])
    return b


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision"])
@pytest.mark.parametrize("make, anchor, epilogue", [
    (_mlp, "relax.matmul", {"relax.add"}),
    (_conv_bn_relu, "relax.nn.conv2d", {"relax.add", "relax.nn.relu"})])
def test_float16_modes_keep_cube_ops_and_epilogues_in_one_kernel(mode, make, anchor, epilogue):
    """Regression (issue 16): allow_mix_precision ran MatMul and Conv on the host (and Conv +
    BatchNorm crashed in TVM), force_fp16 split a Conv from its BatchNorm epilogue. Every cube
    op is now one NPU kernel with its epilogue, in float16; Casts only at the model's ends."""
    b = make()
    model = b.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(precision_mode=mode))
    report = lib.fusion_report()
    launched = [g for g in report["groups"] if g["launch"]]
    assert all(g["on_npu"] for g in launched)
    cube = [g for g in launched if any(o["op"] == anchor for o in g["ops"])]
    assert cube and all(epilogue <= {o["op"] for o in g["ops"]} for g in cube)
    assert all(o["dtype"] == "float16" for g in cube for o in g["ops"])
    casts = [g for g in launched if {o["op"] for o in g["ops"]} == {"relax.astype"}]
    assert len(launched) == len(cube) + len(casts) and len(casts) <= 2  # in and out
    (out,) = lib.run(b.feeds)
    assert out.dtype == np.float32
    assert_close(out, run_onnxruntime(model, b.feeds)[0], "float16")
