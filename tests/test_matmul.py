"""MatMul groups on the cube with their epilogue: numerics, exact GM bytes and MACs, fallbacks."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder

CASES = [  # (A shape, W shape, dtype, residual)
    ((37, 70), (70, 50), "float32", False),          # tails in M, N and K; one core
    ((2, 100, 64), (64, 96), "float32", True),       # batch with shared weights, residual add
    ((300, 128), (128, 200), "float16", False),      # several cores, fp16 with fp32 accumulate
    ((1, 8, 33), (33, 17), "float16", True),         # smaller than one fractal
]


def _mlp(a_shape, w_shape, dtype, residual, seed=3):
    b = ModelBuilder(dtype, seed=seed)
    x = b.input("x", a_shape)
    w = b.const(b.rng.standard_normal(w_shape) * 0.1, "w")
    bias = b.const(b.rng.standard_normal(w_shape[-1]), "bias")
    y = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])])
    out_shape = tuple(a_shape[:-1]) + (w_shape[-1],)
    if residual:
        y = b.node("Add", [y, b.input("r", out_shape)])
    b.output(y, out_shape)
    return b


@pytest.mark.parametrize("a_shape,w_shape,dtype,residual", CASES)
def test_matmul_bias_relu_is_one_kernel(a_shape, w_shape, dtype, residual):
    b = _mlp(a_shape, w_shape, dtype, residual)
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], dtype)
    (group,) = lib.report.to_json()["groups"]
    assert group["on_npu"] and group["tiling"]["template"] == "matmul"
    (launch,) = lib.profile()
    tiling = group["tiling"]
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["cube_macs"] == tiling["params"]["cube_macs"]
    assert launch["block_dim"] == tiling["cores"] and launch["warnings"] == []


def test_batched_matmul_of_two_activations():
    b = ModelBuilder("float32", seed=4)
    q = b.input("q", (3, 20, 16))
    k = b.input("k", (3, 16, 24))
    b.output(b.node("MatMul", [q, k]), (3, 20, 24))
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float32")
    assert lib.report.to_json()["kernels"] == {"ascend": 1, "host": 0}


def test_soc_without_datacopypad_keeps_matmul_on_the_host():
    b = _mlp((16, 32), (32, 16), "float32", False)
    model = b.model()
    lib = tvm_ascend.build(model, target="ascend/310p3")
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float32")
    # FuseOps' MatMul + bias group tiles in no template there: the MatMul stays on the host
    # with the reason, and its epilogue still runs on the NPU
    groups = lib.report.to_json()["groups"]
    matmul = next(g for g in groups if "relax.matmul" in [op["op"] for op in g["ops"]])
    assert not matmul["on_npu"] and "DataCopyPad" in matmul["reason"]


def test_four_dimensional_batched_matmul_with_mask_epilogue():
    """Attention scores as exporters write them: [b, h, s, d] @ [b, h, d, s] * scale + mask."""
    b = ModelBuilder("float16", seed=5)
    q = b.input("q", (2, 3, 17, 16))
    k = b.input("k", (2, 3, 16, 17))
    mask = b.input("mask", (2, 1, 1, 17))
    scores = b.node("Mul", [b.node("MatMul", [q, k]), b.const(np.array(0.25), "scale")])
    b.output(b.node("Add", [scores, mask]), (2, 3, 17, 17))
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float16")
    (group,) = lib.report.to_json()["groups"]
    (launch,) = lib.profile()
    assert group["on_npu"] and launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]


def test_fp16_matmul_with_gelu_epilogue_computes_erf_in_float32_temporaries():
    """TOPI evaluates an fp16 erf in float32: the epilogue's temporaries are sized for it."""
    b = ModelBuilder("float16", seed=6)
    x = b.input("x", (24, 40))
    up = b.node("Add", [b.node("MatMul", [x, b.const(b.rng.standard_normal((40, 72)) * 0.1)]),
                        b.const(b.rng.standard_normal(72) * 0.1)])
    erf = b.node("Erf", [b.node("Div", [up, b.const(np.array(np.sqrt(2.0)))])])
    gelu = b.node("Mul", [b.node("Mul", [up, b.node("Add", [erf, b.const(np.array(1.0))])]),
                          b.const(np.array(0.5))])
    b.output(gelu, (24, 72))
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float16")
    (group,) = lib.report.to_json()["groups"]
    assert group["on_npu"] and group["tiling"]["template"] == "matmul"
    assert group["tiling"]["params"]["slot_bytes"] == 4
    (launch,) = lib.profile()
    assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
