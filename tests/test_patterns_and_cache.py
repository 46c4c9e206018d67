"""The ascend pattern table, GELU as exporters write it, and the compile cache."""
from __future__ import annotations


import numpy as np
import pytest

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder


def test_pattern_table_is_registered_with_tvm():
    from tvm_ascend.partition.patterns import ascend_patterns

    names = {p.name for p in ascend_patterns()}
    assert {"ascend.add", "ascend.relu", "ascend.sigmoid", "ascend.erf", "ascend.gelu"} <= names
    assert all(name.startswith("ascend.") for name in names)


def _gelu_erf_chain(builder, x):
    """PyTorch's exported GELU: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    scaled = builder.node("Div", [x, builder.const(np.array(np.sqrt(2.0)), "sqrt2")])
    erf = builder.node("Erf", [scaled])
    plus = builder.node("Add", [erf, builder.const(np.array(1.0), "one")])
    half = builder.node("Mul", [x, builder.const(np.array(0.5), "half")])
    return builder.node("Mul", [half, plus])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gelu_chain_is_one_kernel(dtype):
    builder = ModelBuilder(dtype, seed=9)
    x = builder.input("x", (7, 130))
    biased = builder.node("Add", [x, builder.const(np.linspace(-3, 3, 130), "bias")])
    builder.output(_gelu_erf_chain(builder, biased), (7, 130))
    model = builder.model()
    builder.feeds["x"] = (builder.feeds["x"] - 1.0).astype(dtype)  # both signs
    lib = tvm_ascend.build(model)
    assert lib.fusion_report()["npu_kernels"] == 1
    assert_close(lib.run(builder.feeds)[0], run_onnxruntime(model, builder.feeds)[0], dtype)


def test_second_build_uses_the_compile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_ASCEND_CACHE_DIR", str(tmp_path / "cache"))
    builder = ModelBuilder("float32", seed=10)
    x = builder.input("x", (33,))
    builder.output(builder.node("Sigmoid", [x]), (33,))
    model = builder.model()
    first = tvm_ascend.build(model)
    first.export_library(tmp_path / "a.so")
    cached = list((tmp_path / "cache").glob("*.so"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    second = tvm_ascend.build(model)
    second.export_library(tmp_path / "b.so")
    assert cached[0].stat().st_mtime_ns == stamp, "warm build must not recompile"
    assert (tmp_path / "b.so").read_bytes() == (tmp_path / "a.so").read_bytes()
    np.testing.assert_array_equal(second.run(builder.feeds)[0], first.run(builder.feeds)[0])


def test_models_differing_only_in_weights_do_not_share_a_cached_library(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_ASCEND_CACHE_DIR", str(tmp_path / "cache"))
    outs = []
    for seed in (1, 2):
        builder = ModelBuilder("float32", seed=seed)
        x = builder.input("x", (40,))
        builder.output(builder.node("Add", [x, builder.const(builder.rng.standard_normal(40))]),
                       (40,))
        builder.feeds["x"] = np.zeros(40, np.float32)
        outs.append(tvm_ascend.build(builder.model()).run(builder.feeds)[0])
    assert not np.array_equal(outs[0], outs[1])
    assert len(list((tmp_path / "cache").glob("*.so"))) == 2
