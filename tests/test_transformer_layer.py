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
    # scale + mask + softmax: one kernel; each LayerNorm chain with its bias and residual: one
    ln1 = next(g for nodes, g in by_nodes.items() if "ln1.mean" in nodes)
    assert {"attn.out.bias", "attn.residual", "ln1.beta"} <= set(ln1["nodes"])
    assert by_nodes[("attn.scale", "attn.mask", "attn.softmax")]["on_npu"]
    # q/k/v bias + reshape are three launches of one kernel; ln1 and ln2 share a kernel too
    assert report["kernels"]["ascend"] == 7 and report["npu_kernels"] == 4
    assert len(lib.profile()) == 7
