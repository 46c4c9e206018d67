"""ATC precision modes: each changes the dtypes as documented, the model still matches fp32
onnxruntime within the tolerance of its dtype, and keep_dtype fences a node off."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from benchmarks.models.bert import encoder_layer_inputs, encoder_layer_model
from conftest import run_onnxruntime
from onnx_models import ModelBuilder
from test_row_reduce import _layernorm_chain


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
        assert dtypes["layer.ffn.gelu.erf"] == "float32"  # vector ops stay float32


def test_keep_dtype_and_force_fp32():
    b = ModelBuilder("float16", seed=4)
    x = b.input("x", (8, 48))
    y = b.node("Relu", [_layernorm_chain(b, x, 48)])
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
