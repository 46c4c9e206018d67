"""Support for the matmul-rows tests: model and PrimFunc builders of MatMul with a row
epilogue, and the one-kernel check of a build (plan figures equal to the emulator's counters,
the same numbers as onnxruntime). Test files import these, never each other."""
from __future__ import annotations

import numpy as np
from tvm import te, topi

import tvm_ascend
from conftest import run_onnxruntime
from onnx_models import ModelBuilder

# A normalisation divides by a statistic of N rounded values, and a float16 row holds its
# sums in float16 where onnxruntime keeps float32: looser than conftest's elementwise table.
TOLERANCES = {"float32": {"rtol": 1e-4, "atol": 1e-4}, "float16": {"rtol": 2e-2, "atol": 2e-2}}


def _assert_close(actual, expected, dtype):
    np.testing.assert_allclose(np.asarray(actual, np.float64), np.asarray(expected, np.float64),
                               **TOLERANCES[dtype])


def _linear_norm(a_shape, n, dtype, norm, residual=True, seed=7):
    """x @ W + bias (+ residual r) -> ``norm`` over the last axis: "chain" (LayerNorm as
    PyTorch's TorchScript export writes it), "op" (ONNX LayerNormalization), "rms" (RMSNorm
    chain) or "softmax"."""
    b = ModelBuilder(dtype, seed=seed)
    k = a_shape[-1]
    out_shape = tuple(a_shape[:-1]) + (n,)
    x = b.input("x", a_shape)
    h = b.node("Add", [b.node("MatMul", [x, b.const(b.rng.standard_normal((k, n)) / np.sqrt(k),
                                                     "w")]),
                       b.const(b.rng.standard_normal(n) * 0.1, "bias")])
    if residual:
        h = b.node("Add", [h, b.input("r", out_shape)])
    gamma = b.const(b.rng.uniform(0.8, 1.2, n), "gamma")
    beta = b.const(b.rng.uniform(-0.1, 0.1, n), "beta")
    eps = b.const(np.array(1e-5), "eps")
    if norm == "op":
        y = b.node("LayerNormalization", [h, gamma, beta], axis=-1, epsilon=1e-5)
    elif norm == "chain":
        centred = b.node("Sub", [h, b.node("ReduceMean", [h], axes=[-1])])
        var = b.node("ReduceMean", [b.node("Pow", [centred, b.const(np.array(2.0), "two")])],
                     axes=[-1])
        normed = b.node("Div", [centred, b.node("Sqrt", [b.node("Add", [var, eps])])])
        y = b.node("Add", [b.node("Mul", [normed, gamma]), beta])
    elif norm == "rms":
        mean_sq = b.node("ReduceMean", [b.node("Mul", [h, h])], axes=[-1])
        inv = b.node("Reciprocal", [b.node("Sqrt", [b.node("Add", [mean_sq, eps])])])
        y = b.node("Mul", [b.node("Mul", [h, inv]), gamma])
    else:
        y = b.node("Softmax", [h], axis=-1)
    b.output(y, out_shape)
    return b


def _check_one_kernel(b, dtype, config=None, target="ascend"):
    """Build (default config and SoC unless given): one NPU kernel of the matmul-rows kind
    whose plan figures are the emulator's, and the same numbers as onnxruntime."""
    model = b.model()
    lib = tvm_ascend.build(model, target=target, config=config)
    report = lib.fusion_report()
    assert report["kernels"] == {"ascend": 1, "host": 0}, report["unfused_edges"]
    (group,) = report["groups"]
    tiling = group["tiling"]
    assert group["on_npu"] and "matmul_rows template" in group["reason"]
    assert tiling["template"] == "matmul_rows" and tiling["plan"]["align_n"] >= tiling["cols"]
    _assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], dtype)
    (launch,) = lib.profile()
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["cube_macs"] == tiling["work"]["cube_macs"]
    assert launch["peak_ub_bytes"] == tiling["ub_bytes"]
    # one launch block per AIC: the plan's cores count clients, two an AIC in the 1:2 mix
    ratio = tiling["work"]["aiv_ratio"]
    assert launch["task_ratio"] == ratio and launch["warnings"] == []
    assert launch["block_dim"] == -(-tiling["cores"] // ratio)
    assert f"KERNEL_TYPE_MIX_AIC_1_{ratio}" in "".join(lib.kernel_sources().values())
    return lib, tiling


def _te_func(m, k, n, dtype="float32", epilogue="layer_norm", residual=False, batch=None):
    """A PrimFunc as FuseTIR makes of MatMul (+ residual) -> ``epilogue`` over N, from TOPI.
    ``batch``: a per-batch B of that many products (attention scores)."""
    lead = (batch,) if batch else ()
    a = te.placeholder(lead + (m, k), dtype, "a")
    w = te.placeholder(lead + (k, n), dtype, "w")
    r = te.reduce_axis((0, k), "k")
    if batch:
        c = te.compute((batch, m, n), lambda b, i, j: te.sum(a[b, i, r] * w[b, r, j], axis=r),
                       name="matmul")
    else:
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="matmul")
    params = [a, w]
    if residual:
        res = te.placeholder(c.shape, dtype, "res")
        c, params = topi.add(c, res), params + [res]
    if epilogue == "layer_norm":
        gamma, beta = te.placeholder((n,), dtype, "gamma"), te.placeholder((n,), dtype, "beta")
        out, params = topi.nn.layer_norm(c, gamma, beta, axis=[-1], epsilon=1e-5), \
            params + [gamma, beta]
    elif epilogue == "softmax":
        out = topi.nn.softmax(c, axis=-1)
    else:
        out = topi.nn.relu(c)
    return te.create_prim_func(params + [out])
