"""Vector-unit fusion rules one by one (CastFusion, DataMovementFusion, ReductionFusion): each
fuses its pattern when on, keeps it apart when a switch file turns it off (the unfused edge
names the rule and how to turn it on), and both builds match onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder


def _cast_model():
    b = ModelBuilder("float32", seed=21)
    x = b.input("x", (6, 40))
    y = b.node("Mul", [x, b.const(np.array(0.5), "half")])
    y = b.node("Relu", [b.node("Cast", [y], to=TensorProto.FLOAT16)])
    b.outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT16, (6, 40)))
    return b


def _movement_model():
    b = ModelBuilder("float32", seed=22)
    x = b.input("x", (4, 6, 40))
    t = b.node("Transpose", [x], perm=[1, 0, 2])
    b.output(b.node("Add", [t, b.const(np.ones(40), "bias")]), (6, 4, 40))
    return b


def _reduction_model():
    b = ModelBuilder("float32", seed=23)
    x = b.input("x", (6, 40))
    s = b.node("ReduceMax", [b.node("Abs", [x])], axes=[-1], keepdims=1)
    b.output(b.node("Mul", [s, b.const(np.array(0.25), "quarter")]), (6, 1))
    return b


CASES = {  # rule -> (model, its name in a switch file, the ONNX op types it joins)
    "CastFusion": (_cast_model, "CastRemoveFusionPass", {"cast", "relu", "mul"}),
    "DataMovementFusion": (_movement_model, "DataMovementFusion", {"transpose", "add"}),
    "ReductionFusion": (_reduction_model, "ReductionFusion", {"abs", "reducemax", "mul"}),
}


def _build(builder, tmp_path, switch=""):
    config = {}
    if switch:
        path = tmp_path / "fusion_switch.cfg"
        path.write_text(switch)
        config["fusion_switch_file"] = str(path)
    model = builder.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(**config))
    for out, ref in zip(lib.run(builder.feeds), run_onnxruntime(model, builder.feeds)):
        assert_close(out, ref, str(out.dtype))
    return lib.fusion_report()


def _kinds(group) -> set:
    return {n.split("_")[0] for n in group["onnx_nodes"]}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_on_fuses_and_off_keeps_apart(rule, tmp_path):
    make, switch_name, kinds = CASES[rule]
    builder = make()
    fused = _build(builder, tmp_path)
    groups = [g for g in fused["groups"] if g["onnx_nodes"]]
    assert len(groups) == 1 and _kinds(groups[0]) == kinds and groups[0]["on_npu"]
    assert rule in groups[0]["rules"]
    assert fused["rule_stats"][rule]["effect_times"] == 1

    apart = _build(builder, tmp_path, f"{switch_name}:off\n")
    assert len([g for g in apart["groups"] if g["onnx_nodes"]]) > 1
    assert rule not in apart["rule_stats"] or apart["rule_stats"][rule]["effect_times"] == 0
    reasons = [e["reason"] + " | " + e["hint"] for e in apart["unfused_edges"]]
    assert any(f"{rule} is switched off" in r and f"{rule}:on" in r for r in reasons), reasons
