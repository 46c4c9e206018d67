"""A BERT-style encoder layer end to end: numerics, groups per ONNX node, shared kernels."""
from __future__ import annotations

import numpy as np

import tvm_ascend
from benchmarks.models.transformer import encoder_layer
from conftest import assert_close, run_onnxruntime


def test_encoder_layer_matches_onnxruntime_and_groups_as_documented():
    model = encoder_layer(batch=2, seq=16, hidden=64, heads=2, ffn=128)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 16, 64)).astype(np.float32),
             "mask": np.where(rng.random((2, 1, 1, 16)) < 0.25, -1e4, 0).astype(np.float32)}
    lib = tvm_ascend.build(model)
    assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
    report = lib.report.to_json()
    by_nodes = {tuple(g["nodes"]): g for g in report["groups"]}
    on_npu = {nodes for nodes, g in by_nodes.items() if g["on_npu"]}
    # projections on the cube with their epilogues (bias, GELU, residual) in the same kernel
    assert ("q.matmul", "q.bias") in on_npu
    assert ("attn.out.matmul", "attn.out.bias", "attn.residual") in on_npu
    assert ("ffn.up.matmul", "ffn.up.bias", "gelu.div", "gelu.erf", "gelu.add", "gelu.mul",
            "gelu.half") in on_npu
    # the 4-D attention scores take scale and mask as their epilogue (the mask as one slice
    # per row); softmax is a row kernel; each LayerNorm chain is one row kernel
    assert ("attn.qk", "attn.scale", "attn.mask") in on_npu and ("attn.softmax",) in on_npu
    assert any("ln2.mean" in nodes and "ln2.beta" in nodes for nodes in on_npu)
    # q/k/v projections are three launches of one kernel, ln1/ln2 two of another; the three
    # transposes that keep the last axis are row copies on the NPU with their reshapes
    assert report["kernels"]["ascend"] == 14 and report["npu_kernels"] == 10
    assert len(lib.profile()) == 14
    assert by_nodes[("q.reshape", "q.transpose")]["tiling"]["template"] == "row_reduce"
    assert by_nodes[("q.reshape", "q.transpose")]["rule"] == "DataMovementFusion"
    # only layout work stays on the host: a free view (no launch) and the K transpose, which
    # moves the last axis
    host = [g for g in report["groups"] if not g["on_npu"]]
    assert all("permute_dims" in g["reason"] or "views" in g["reason"] for g in host)
    assert report["kernels"]["host"] == 1 and report["free_views"] == 1
    # qk -> softmax would be an AttentionFusion group, an aggressive rule: the report says
    # which rule kept it apart and how to turn it on
    edge = next(e for e in report["unfused_edges"]
                if by_nodes[("attn.softmax",)]["id"] == e["consumer"])
    assert "AttentionFusion is switched off" in edge["reason"]
    assert "AttentionFusion:on" in edge["hint"]
