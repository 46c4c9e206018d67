"""A transformer encoder: a BERT layer's attention and LayerNorm, fused, checked group by group.

    python tutorials/03_transformer_bert.py                                  # BERT-base, seq 128
    TVM_ASCEND_TUTORIAL_SIZE=small python tutorials/03_transformer_bert.py   # hidden 32, seq 16

ATC users: ATC's fixed rules fuse a MatMul with its bias and activation
(``MatMulBiasAddFusionPass``) and a LayerNorm op chain into one kernel (``LayerNormFusionPass``),
but leave attention as MatMul -> Softmax -> MatMul with the score tensor in global memory and
the head Reshape/Transpose pairs as copies. tvm-ascend fuses the whole attention (Q.K^T,
scale, mask, softmax, .V and the head transposes) into one kernel and each residual Add into
the MatMul before it, with the LayerNorm too where one kernel can tile both (at the small
size; at BERT-base's hidden 768 the LayerNorm is a kernel of its own). This tutorial builds
one post-LN BERT encoder layer, reads those groups in the fusion report, and runs
``compare``: the ATC-style build (``rule_set="atc_style"``) and the aggressive one side by
side, with the error of every fused group against onnxruntime, so a group that loses
precision is named, not just the layer.
The same table is ``tvm-ascend compare --model layer.onnx --variants atc_style,aggressive``.

Every time printed is the project's timing model's: an estimate, not a measurement.
"""
from __future__ import annotations

import os
import pathlib
import sys

import tvm_ascend
from tvm_ascend import CompileConfig
from tvm_ascend.atc_compare import format_side_by_side
from tvm_ascend.compare import atc_side, compare_model, find_atc, format_comparison

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.models.bert import encoder_layer_model  # noqa: E402

# TVM_ASCEND_TUTORIAL_SIZE picks the layer: "small" is what tests/test_tutorials.py runs.
SIZES = {
    "default": dict(batch=1, seq=128, hidden=768, heads=12),   # BERT-base's layer
    "small": dict(batch=1, seq=16, hidden=32, heads=2, ffn=64),
}
SOC = "Ascend910B1"


def main() -> None:
    size = os.environ.get("TVM_ASCEND_TUTORIAL_SIZE", "default")
    # The layer as torch.onnx.export (TorchScript) writes HF's BertLayer: LayerNorm and GELU as
    # op chains, inputs x [batch, seq, hidden] and the additive mask [batch, 1, 1, seq].
    model = encoder_layer_model(style="torchscript", **SIZES[size])
    print(f"BERT encoder layer ({size}): {len(model.graph.node)} ONNX nodes")
    # At the default size this took 3 minutes on a loaded 2-core machine (36 s of CPU).
    config = CompileConfig(soc_version=SOC)

    # 1. The fusion report of the aggressive build: which groups hold the attention and the
    #    LayerNorms, and why the remaining edges between kernels were not fused.
    lib = tvm_ascend.build(model, target="ascend", config=config.replace(fusion_level="aggressive"))
    report = lib.fusion_report()
    print("\n".join(str(lib.report).splitlines()[:2]))
    for group in report["groups"]:
        if "Attention" in group["rule"] or "LayerNorm" in group["rule"]:
            print(f"  {group['id']} {group['rule']}: {len(group['nodes'])} ONNX nodes, "
                  f"{group['nodes'][0]} ... {group['nodes'][-1]}")
    for edge in report["unfused_edges"][:2]:
        print(f"  not fused {edge['producer']} -> {edge['consumer']}: {edge['summary']}")

    # 2. compare: each variant built, run on seeded inputs and checked against onnxruntime,
    #    output by output and fused group by fused group (each group's output tensor is made
    #    a model output for the check). Errors are relative to the tensor's largest value.
    #    The ATC-style row is built without its per-group check (groups=False) to save a build.
    #    (The aggressive build is the one above: the build cache hands it back.)
    results, source = compare_model(model, config, variants=("atc_style",), groups=False)
    results += compare_model(model, config, variants=("aggressive",))[0]
    print(f"\nside by side: ATC-style (emulated ATC rules) vs tvm-ascend aggressive, "
          f"{SOC}, ESTIMATED times")
    print(format_comparison(results, source))
    atc, ours = results
    print(f"\nATC-style: {atc.launches} launches, est. {atc.est_latency_us:.1f} us; "
          f"aggressive: {ours.launches} launches, est. {ours.est_latency_us:.1f} us "
          f"({atc.est_latency_us / ours.est_latency_us:.2f}x, an ESTIMATE)")
    # The real ATC, when one is installed: the same flags, its fusion_result.json and graph
    # dump read back; where its ops and our groups differ, our reason (`compare --atc`).
    path, reason = find_atc()
    if path is None:
        print(reason)
    else:
        print(format_side_by_side(atc_side(model, config.replace(fusion_level="aggressive"),
                                           path, report=lib.fusion_report())))


if __name__ == "__main__":
    main()
