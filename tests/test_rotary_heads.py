"""RotaryHeadsJoined (issue 19, LLaMA's rotary embeddings): after the QKV merge, Q's and K's
rotaries are one rotary over their heads side by side (one kernel, not two), with
onnxruntime's numbers and the emulator's counters equal to the plan."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import llama_attention_model
from tvm_ascend.prepare import prepare
from tvm_ascend.prepare.horizontal import merge_parallel_matmuls
from tvm_ascend.prepare.relax_rewrite import prepare_rewrites
from tvm_ascend.prepare.rotary_heads import join_rotary_heads


def _merged(model):
    mod, merged = merge_parallel_matmuls(prepare(tvm_ascend.frontend.load_model(model)))
    assert merged == 1
    return mod


def test_q_and_k_rotaries_of_one_product_join_and_say_so():
    builder, names = llama_attention_model()
    mod, joined = join_rotary_heads(_merged(builder.model()))
    assert joined == 1
    records = [r for r in prepare_rewrites(mod) if r["rewrite"] == "RotaryHeadsJoined"]
    assert {r["node"] for r in records} == {names["q_rotary"], names["k_rotary"]}
    assert all(r["applied"] and "over 6 heads of 16" in r["reason"] for r in records)
    # one rotary left: one Concat of halves, and it is a module that still type-checks
    calls = [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
             if hasattr(b.value, "op") and hasattr(b.value.op, "name")]
    assert calls.count("relax.concat") == 1


def test_rotaries_with_other_constants_stay_apart():
    """K rotated by other angles than Q (no shared cos / sin): not one rotary."""
    builder, _ = llama_attention_model()
    model = builder.model()
    cos = [t for t in model.graph.initializer if t.name.startswith("cos")]
    assert cos
    from onnx import numpy_helper
    # a second cos for K's Mul: every node reading cos after the first rotary's reads it
    other = numpy_helper.from_array(numpy_helper.to_array(cos[0]) * 0.5, "cos_k")
    model.graph.initializer.append(other)
    readers = [n for n in model.graph.node if cos[0].name in n.input]
    readers[-1].input[list(readers[-1].input).index(cos[0].name)] = "cos_k"
    _, joined = join_rotary_heads(_merged(model))
    assert joined == 0


# ~15 s each on the 2-core machine (builds and g++ of 4 kernels): slow; the default run builds
# this model on 910B1 in test_grouping_search (4 kernels, the joined rotary one of them)
@pytest.mark.slow
@pytest.mark.parametrize("soc, dtype", [("Ascend910B1", "float32"), ("Ascend310P3", "float16")])
def test_joined_rotary_is_one_kernel_matching_onnx_with_counters_equal_to_the_plan(soc, dtype):
    builder, names = llama_attention_model(dtype=dtype)
    model = builder.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        fusion_level="aggressive", soc_version=soc))
    assert_close(lib.run(builder.feeds)[0], run_onnxruntime(model, builder.feeds)[0],
                 "cube/float32" if dtype == "float32" else dtype)
    report = lib.fusion_report()
    assert report["kernels"] == {"ascend": 4, "host": 0}  # QKV, rotary, attention, out-proj
    (rotary,) = [g for g in report["groups"] if names["q_rotary"] in g["nodes"]
                 and "AttentionFusion" not in g["rules"]]  # attention reads Q's head slice
    assert names["k_rotary"] in rotary["nodes"] and rotary["on_npu"]
    groups = lib.report.to_json()["groups"]
    for group, launch in zip(groups, lib.profile()):
        tiling = group["tiling"]
        assert launch["gm_read_bytes"] == tiling["gm_read_bytes"], group["name"]
        assert launch["gm_write_bytes"] == tiling["gm_write_bytes"], group["name"]
        assert launch["peak_ub_bytes"] == tiling["ub_bytes"] and launch["warnings"] == []
    assert np.isfinite(report["estimate"]["latency_us"])
