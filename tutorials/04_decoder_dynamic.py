"""A decoder with a dynamic sequence length: ATC-style gears, and a symbolic range.

    python tutorials/04_decoder_dynamic.py                                  # gears 8, 16, 32
    TVM_ASCEND_TUTORIAL_SIZE=small python tutorials/04_decoder_dynamic.py   # gears 8, 16

ATC users: a text model whose sequence length varies is converted with gears,
``atc --input_shape="input_ids:2,-1;attention_mask:2,-1" --input_format=ND
--dynamic_dims="8,8;16,16"``: one static build per gear in one model file, and at run time
the input's shape picks the gear. tvm-ascend takes the same flags (``CompileConfig``'s
``dynamic_dims`` and ``input_format``, or ``tvm-ascend compile --dynamic_dims ...``): every
gear is fused and tiled as a static build, kernels printed alike in several gears are
stored once, and ``lib.run`` picks the gear from the inputs' shapes. A shape in no gear is
an error naming the input, the dimension and the gears (below it is caught and printed).

The second way is a symbolic range, ``input_shape={"input_ids": (2, "2~32")}`` (ATC 9's
``--input_shape=input_ids:2,2~32``): one build runs every length in the range. tvm-ascend
imports it; elementwise, row-reduction and matmul kernels over the symbol (the projections'
and the MLP's M, attention's two products with their N or K over seq and the scores' mask,
the Softmax over the symbolic keys) and the data movement of rows (the heads' transposes,
the qkv Split, the embeddings' Gathers) are tiled at run time (a host tiling function fills
each kernel's tiling struct from the actual length), but K's transpose, which moves the last
axis, and the int64 position and mask arithmetic are not yet, so those ops run on the host
(TVM's llvm build). The fusion report's ``dynamic`` section says so, op by op, and lists the
kernels tiled at run time; the tutorial prints both. Use gears to put the whole model on the
NPU today.

The model is the corpus's tiny GPT-2 (2 layers, hidden 64, 4 heads, 32 positions), exported
by ``torch.onnx.export(..., dynamo=True)`` with the sequence dimension dynamic
(``tests/corpus/dynamic``; no torch is needed to run this). Outputs are checked against
onnxruntime at every length. Every time printed comes from the project's timing model: an
ESTIMATE, not a measurement (there is no NPU here). On a loaded 2-core machine: small 41 s
wall in the test run (cold compile cache), default 26 s with a warm one.
"""
from __future__ import annotations

import os
import pathlib

import numpy as np
import onnxruntime as ort

import tvm_ascend
from tvm_ascend import CompileConfig
from tvm_ascend.compare import find_atc

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "corpus" / "dynamic" / "gpt2_dynamo_op18_fp32_dynseq.onnx"
BATCH = 2  # the export's batch is static; its sequence dimension is the symbol "seq"
SOC = "Ascend910B1"

# TVM_ASCEND_TUTORIAL_SIZE picks the gears: "small" is what tests/test_tutorials.py runs.
# ``lengths`` are the sequence lengths run through the symbolic build (any in 2~32).
SIZES = {
    "default": dict(gears=(8, 16, 32), lengths=(5, 20, 32)),
    "small": dict(gears=(8, 16), lengths=(5, 29)),
}
# float32 through every kernel, summed in another order than onnxruntime's: the test suite's
# "float32_model" tolerance (tests/conftest.py)
RTOL, ATOL = 1e-4, 1e-4


def feeds(length: int) -> dict:
    """Token ids and a padding mask of ``length`` tokens (the last row's last one padded)."""
    rng = np.random.default_rng(length)
    mask = np.ones((BATCH, length), np.int64)
    mask[-1, length - 1:] = 0
    return {"input_ids": rng.integers(0, 96, (BATCH, length)).astype(np.int64),
            "attention_mask": mask}


def check(lib, session, length: int) -> float:
    """Run ``lib`` at ``length`` tokens, assert it matches onnxruntime, return the max error."""
    (got,) = lib.run(feeds(length))
    (want,) = session.run(None, feeds(length))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return float(np.abs(got - want).max())


def main() -> None:
    size = os.environ.get("TVM_ASCEND_TUTORIAL_SIZE", "default")
    gears, lengths = SIZES[size]["gears"], SIZES[size]["lengths"]
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    print(f"GPT-2 decoder ({size}): {MODEL.name}, input_ids [2, seq]")

    # (a) ATC-style gears. Both inputs have the dynamic length, so each gear gives two values
    #     (one per -1 of input_shape, in order): "8,8;16,16".
    dims = ";".join(f"{n},{n}" for n in gears)
    config = CompileConfig(soc_version=SOC, input_format="ND", dynamic_dims=dims,
                           input_shape={"input_ids": (BATCH, -1), "attention_mask": (BATCH, -1)})
    lib = tvm_ascend.build(str(MODEL), target="ascend", config=config)
    report = lib.fusion_report()
    print(f"\n(a) gears --dynamic_dims \"{dims}\": {type(lib).__name__}, "
          f"{report['npu_kernels']} NPU kernels stored for all gears "
          f"({report['kernels_shared']} used by more than one gear)")
    for section in report["gears"]:
        est = section["estimate"]
        print(f"  gear {section['index']} {section['gear']}: {section['npu_kernels']} NPU "
              f"kernels, {section['host_groups']} host group(s), est. {est['latency_us']:.1f} us "
              "(ESTIMATE)")
    for length in gears:  # run() picks the gear from the inputs' shapes
        picked = lib.gear_of(feeds(length))["index"]
        print(f"  seq {length}: gear {picked}, matches onnxruntime "
              f"(max abs err {check(lib, session, length):.1e})")
    # A length in no gear is refused before anything runs, naming the input, the dimension
    # and the gears; pad the input to a gear's length (and mask the padding) instead.
    odd = gears[0] + 1
    try:
        lib.run(feeds(odd))
        raise AssertionError(f"seq {odd} is in no gear, yet it ran")
    except ValueError as err:
        print(f"  seq {odd} (in no gear) is refused: {err}")

    # (b) A symbolic range: one build for every length in 2~32. Vector and matmul kernels
    #     over seq (attention's products among them) are tiled at run time; the heads'
    #     transposes still run on the host, and the report's dynamic section lists both.
    low, high = 2, 32  # the export's 32 positions bound the length
    symbolic = tvm_ascend.build(str(MODEL), target="ascend", config=CompileConfig(
        soc_version=SOC, input_shape={"input_ids": (BATCH, f"{low}~{high}"),
                                      "attention_mask": (BATCH, f"{low}~{high}")}))
    dynamic = symbolic.fusion_report()["dynamic"]
    host_ops = dynamic["host_ops"]
    print(f"\n(b) symbolic range seq in {dynamic['symbolic_dims']['seq']['range']}: "
          f"{dynamic['npu_kernels']} NPU kernels, {len(host_ops)} ops on the host because of "
          f"seq; {len(dynamic['runtime_tiling']['kernels'])} kernel(s) tiled at run time")
    counts: dict = {}
    for op in host_ops:
        counts[op["op"]] = counts.get(op["op"], 0) + 1
    print("  on the host: " + ", ".join(f"{op} x{n}" for op, n in
                                        sorted(counts.items(), key=lambda kv: -kv[1])[:8])
          + (", ..." if len(counts) > 8 else ""))
    print(f"  e.g. {host_ops[0]['node']} ({host_ops[0]['op']}): {host_ops[0]['why']}")
    print(f"  the report's hint: {dynamic['hint']}")
    for length in lengths:
        print(f"  seq {length}: matches onnxruntime (max abs err "
              f"{check(symbolic, session, length):.1e})")
    try:
        symbolic.run(feeds(high + 1))
        raise AssertionError(f"seq {high + 1} is outside {low}~{high}, yet it ran")
    except ValueError as err:
        print(f"  seq {high + 1} (outside the range) is refused: {err}")

    # Side by side with ATC at the largest gear: ATC-style (only ATC's fusion rules, the same
    # templates and timing model) built statically at that length, against our gear.
    top = gears[-1]
    atc_lib = tvm_ascend.build(str(MODEL), target="ascend", config=CompileConfig(
        soc_version=SOC, rule_set="atc_style",
        input_shape={"input_ids": (BATCH, top), "attention_mask": (BATCH, top)}))
    check(atc_lib, session, top)
    atc = atc_lib.fusion_report()
    ours = report["gears"][-1]
    print(f"\nseq {top}, {SOC}{'':<8}{'launches':>9}{'HBM bytes':>12}{'est. us':>10}")
    for name, rep in (("ATC-style (emulated)", atc), (f"tvm-ascend gear {ours['index']}", ours)):
        launches = rep["kernels"]["ascend"] + rep["kernels"]["host"]
        print(f"{name:<27}{launches:>9}{rep['estimate']['hbm_bytes']:>12}"
              f"{rep['estimate']['latency_us']:>10.1f}")
    print("(est. us: ESTIMATES from the timing model, not measured; the symbolic build has no "
          "single NPU estimate: part of it runs on the host)")
    path, reason = find_atc()
    print(reason or f"real atc: found at {path}; run it with --model={MODEL.name} "
          f"--framework=5 --soc_version={SOC} --input_format=ND --dynamic_dims=\"{dims}\" "
          "for its side (`tvm-ascend compare --atc`, issue 21)")
    print("published plain ATC: benchmarks/calibration.json has no GPT-2 figure (its rows: "
          "ResNet-50, BERT-base and ViT on 310P3; tutorials 02 and 03 print them)")


if __name__ == "__main__":
    main()
