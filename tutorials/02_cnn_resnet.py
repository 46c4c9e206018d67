"""A CNN: ResNet-50's Conv-BN-ReLU and residual blocks, fused and compared with ATC.

    python tutorials/02_cnn_resnet.py                                   # ResNet-50, 1x3x64x64
    TVM_ASCEND_TUTORIAL_SIZE=small python tutorials/02_cnn_resnet.py    # a one-stage ResNet

ATC users: this is ``atc --model=resnet50.onnx --framework=5 --soc_version=Ascend910B1``.
ATC folds each BatchNormalization into its Conv (``BatchNormBnInferFusionPass``) and fuses the
ReLU and a bottleneck's residual ``Add`` into the conv's epilogue
(``TbeConvDequantVaddReluQuantFusionPass``); tvm-ascend's rules ``BatchNormFolding`` and
``ConvEpilogueFusion`` do the same, each decision named in the fusion report. Below,
the model is built with every rule on (``fusion_level="aggressive"``), its fusion report is
read, it runs on the AscendC emulator against onnxruntime, and the same model is built with
the ATC-style rules (``rule_set="atc_style"``: only the fusions ATC applies) to set the two
side by side. Every time printed comes from the project's timing model: an estimate, not a
measurement (there is no NPU here).

The model is written as PyTorch's exporter writes torchvision's ResNet-50 (random weights,
``benchmarks/models/resnet50.py``); the default size (batch 1, 64x64 images: the size the
benchmarks run on the emulator) took 2 minutes on a loaded 2-core machine, ``small`` 20 s
of CPU.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np

import tvm_ascend
from tvm_ascend import CompileConfig
from tvm_ascend.atc_compare import format_side_by_side
from tvm_ascend.compare import atc_side, find_atc

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.models.resnet50 import resnet50_model  # noqa: E402

# TVM_ASCEND_TUTORIAL_SIZE picks the model: "small" is what tests/test_tutorials.py runs.
SIZES = {
    "default": dict(batch=1, image=64),                  # ResNet-50's (3, 4, 6, 3) blocks
    "small": dict(batch=1, image=32, width=8, blocks=(1,), classes=10),
}
SOC = "Ascend910B1"


def summary(lib) -> dict:
    """Launches, GM bytes and the estimated latency of one build (all estimates)."""
    report = lib.fusion_report()
    est = report["estimate"]
    return {"launches": report["kernels"]["ascend"] + report["kernels"]["host"],
            "hbm_bytes": est["hbm_bytes"], "l2_bytes": est["l2_bytes"],
            "est_us": est["latency_us"], "band_us": est["latency_band_us"]}


def main() -> None:
    size = os.environ.get("TVM_ASCEND_TUTORIAL_SIZE", "default")
    model = resnet50_model(**SIZES[size])
    print(f"ResNet ({size}): {len(model.graph.node)} ONNX nodes")

    # 1. Build with every fusion rule on. The config is the ATC flag set (soc_version,
    #    precision_mode, ...) plus the fusion level.
    lib = tvm_ascend.build(model, target="ascend",
                           config=CompileConfig(fusion_level="aggressive", soc_version=SOC))

    # 2. The fusion report: one line per kernel with the rule that formed it, the GM bytes the
    #    fusion saves and its estimated time; unfused edges say why. Conv-BN-ReLU groups read
    #    "ConvEpilogueFusion+BatchNormFolding" (BN folded into the weights, ReLU in the
    #    epilogue); a block's last group also holds its residual Add and Relu.
    table = str(lib.report).splitlines()
    print("\n".join(table[:2]))
    groups = lib.fusion_report()["groups"]
    residual = [g for g in groups if any(n.endswith(".add") for n in g["nodes"])]
    conv_bn_relu = [g for g in groups if "BatchNormFolding" in g["rule"]]
    print(f"{len(conv_bn_relu)} Conv-BN(-ReLU) kernels; {len(residual)} residual Add(s) fused "
          "into the conv before them: " + ", ".join(f"{g['id']} ({g['rule']})"
                                                    for g in residual[:2])
          + (", ..." if len(residual) > 2 else ""))
    for line in table[3:9]:
        print(line)
    print(f"  ... {len(groups)} groups in all: print(lib.report) shows every one")

    # 3. Run on the emulator and check against onnxruntime. The tolerance is the test suite's
    #    for cube kernels: the conv's K axis is summed in another order than onnxruntime's.
    x = np.random.default_rng(0).standard_normal(
        (SIZES[size]["batch"], 3, SIZES[size]["image"], SIZES[size]["image"])).astype(np.float32)
    (logits,) = lib.run({"input": x})
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"input": x})
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    rel = float(np.abs(logits - expected).max() / np.abs(expected).max())
    print(f"logits {logits.shape} match onnxruntime (max rel err {rel:.1e})")

    # 4. Side by side with ATC. The ATC-style build applies only ATC's fusion rules, through
    #    the same templates and timing model, so the difference is the fusion decisions alone.
    atc_lib = tvm_ascend.build(model, target="ascend",
                               config=CompileConfig(rule_set="atc_style", soc_version=SOC))
    (atc_logits,) = atc_lib.run({"input": x})
    np.testing.assert_allclose(atc_logits, expected, rtol=1e-4, atol=1e-4)
    ours, atc = summary(lib), summary(atc_lib)
    print(f"\n{'':<22}{'launches':>9}{'HBM bytes':>12}{'L2 bytes':>12}{'est. us':>10}  band us")
    for name, row in (("ATC-style (emulated)", atc), ("tvm-ascend aggressive", ours)):
        print(f"{name:<22}{row['launches']:>9}{row['hbm_bytes']:>12}{row['l2_bytes']:>12}"
              f"{row['est_us']:>10.1f}  {row['band_us'][0]:.1f}-{row['band_us'][1]:.1f}")
    # On a ResNet the two agree almost everywhere: ATC's fixed rules were written for exactly
    # these Conv-BN-ReLU-Add chains. Tutorial 03 (a transformer) is where they part.
    print(f"(est. us: ESTIMATES from the timing model on {SOC}, not measured; "
          f"aggressive / ATC-style = {ours['est_us'] / atc['est_us']:.2f})")
    # The real ATC, when one is installed: built with the same flags in a temporary folder,
    # its fusion_result.json and graph dump read back, per rule and per op beside this build
    # (`tvm-ascend compare --atc` prints the same). Without one, a line says so.
    path, reason = find_atc()
    if path is None:
        print(reason)
    else:
        config = CompileConfig(fusion_level="aggressive", soc_version=SOC)
        print(format_side_by_side(atc_side(model, config, path, report=lib.fusion_report())))
    # A published plain-ATC figure, where the calibration table has one (another size and SoC
    # than this build: the full model at batch 64, 224x224, fp16 on 310P3).
    row = next(r for r in json.loads((ROOT / "benchmarks/calibration.json").read_text())["rows"]
               if r["name"] == "resnet50_b64_310p3_atc")
    print(f"published plain ATC: {row['published_us']:.0f} us per batch for {row['workload']} "
          f"(our ESTIMATE of that workload: {row['estimate_us']:.0f} us; "
          "benchmarks/calibration.json)")


if __name__ == "__main__":
    main()
