"""The CNN fusion rules one by one: each must fuse what it names when on, must not when off
(switch file), says which rule kept an edge apart, and the model still matches onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from conftest import TOLERANCES, run_onnxruntime
from onnx_models import ModelBuilder, conv_bn


@pytest.fixture(scope="module")
def block():
    """Conv -> BatchNorm -> ReLU, then Conv -> BatchNorm -> residual Add -> ReLU."""
    b = ModelBuilder("float32", seed=11)
    x = b.input("x", (1, 8, 10, 10))
    y = conv_bn(b, x, 8, 8)
    b.output(conv_bn(b, y, 8, 8, residual=x), (1, 8, 10, 10))
    return b


def _build(builder, tmp_path=None, switch: str = "", **config):
    if switch:
        path = tmp_path / "fusion_switch.cfg"
        path.write_text(switch)
        config["fusion_switch_file"] = str(path)
    model = builder.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(**config))
    np.testing.assert_allclose(lib.run(builder.feeds)[0],
                               run_onnxruntime(model, builder.feeds)[0], **TOLERANCES["cube/float32"])
    return lib.fusion_report()


def _kinds(group) -> set:
    return {n.split("_")[0] for n in group["onnx_nodes"]}


def _conv_groups(report) -> list[dict]:
    return [g for g in report["groups"] if "conv" in _kinds(g)]


def test_conv_epilogue_and_batchnorm_folding_on(block):
    report = _build(block)
    convs = _conv_groups(report)
    assert [_kinds(g) for g in convs] == [{"conv", "batchnormalization", "relu"},
                                          {"conv", "batchnormalization", "add", "relu"}]
    assert all("ConvEpilogueFusion" in g["rules"] and g["on_npu"] for g in convs)
    assert report["kernels"]["ascend"] == 2
    stats = report["rule_stats"]
    assert stats["ConvEpilogueFusion"]["effect_times"] >= 2
    assert stats["BatchNormFolding"]["effect_times"] == 2


def test_conv_epilogue_off_keeps_the_activation_apart(block, tmp_path):
    report = _build(block, tmp_path, "TbeConvDequantVaddReluQuantFusionPass:off\n")
    convs = _conv_groups(report)
    # BatchNorm still folds into the weights (its own rule); ReLU and the residual Add do not
    # join the conv's kernel
    assert all(_kinds(g) <= {"conv", "batchnormalization"} for g in convs)
    assert len(convs) == 2
    reasons = [e["reason"] + " | " + e["hint"] for e in report["unfused_edges"]]
    assert any("ConvEpilogueFusion is switched off" in r and "ConvEpilogueFusion:on" in r
               for r in reasons)


def test_batchnorm_folding_off_keeps_batchnorm_out_of_the_weights(block, tmp_path):
    report = _build(block, tmp_path, "BatchNormBnInferFusionPass:off\n")
    convs = _conv_groups(report)
    assert len(convs) == 2
    # BatchNorm is not folded: its scale and shift are computed as ops after the product
    # (fused as the conv's epilogue or run apart, but never inside the weights)
    assert report["rule_stats"].get("BatchNormFolding", {}).get("effect_times", 0) == 0
    assert any("batchnormalization" in _kinds(g) for g in report["groups"])


def test_fusion_off_is_one_kernel_per_node(block):
    report = _build(block, fusion_level="off")
    assert all(len(g["onnx_nodes"]) == 1 for g in report["groups"] if g["onnx_nodes"])
    assert report["rule_stats"] == {}  # no rule matched, none took effect


@pytest.fixture(scope="module")
def pooled():
    """ReLU -> MaxPool -> Sigmoid: pooling with an elementwise prologue and epilogue."""
    b = ModelBuilder("float32", seed=12)
    x = b.input("x", (1, 6, 9, 9))
    y = b.node("MaxPool", [b.node("Relu", [x])], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1])
    b.output(b.node("Sigmoid", [y]), (1, 6, 5, 5))
    return b


def test_pooling_fusion_on_and_off(pooled, tmp_path):
    fused = _build(pooled)
    groups = [g for g in fused["groups"] if g["onnx_nodes"]]
    assert len(groups) == 1 and _kinds(groups[0]) == {"relu", "maxpool", "sigmoid"}
    assert groups[0]["rules"] == ["PoolingFusion"] and groups[0]["on_npu"]
    apart = _build(pooled, tmp_path, "PoolingFusionPass:off\n")
    pools = [g for g in apart["groups"] if "maxpool" in _kinds(g)]
    assert [_kinds(g) for g in pools] == [{"maxpool"}] and pools[0]["on_npu"]
    reasons = [e["reason"] + " | " + e["hint"] for e in apart["unfused_edges"]]
    assert any("PoolingFusion is switched off" in r for r in reasons), reasons
