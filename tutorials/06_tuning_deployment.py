"""Tuning and deployment: ``tune`` into a database, build with it, export the library, load it
in a fresh process, and where a board comes in (TVM's RPC tracker).

    python tutorials/06_tuning_deployment.py                                  # 16 trials/kernel
    TVM_ASCEND_TUTORIAL_SIZE=small python tutorials/06_tuning_deployment.py   # 4 trials/kernel

ATC users: ATC's kernels come tuned offline (AOE, ``aoe --job_type=2``, writes a knowledge
base that later conversions read). Here ``tvm-ascend tune --model M --database DB`` searches
each NPU kernel's tiling knobs (tile sizes, cores, buffering), ranks the candidates with the
shipped XGBoost cost model, measures the most promising ones and records the best per kernel
workload in ``DB``; ``CompileConfig(tuning_database=DB)`` (``--tuning_database``) plans every
kernel the database holds with its recorded knobs. Without a board, "measures" means the
timing model's estimate from each candidate's plan counters (``LocalRunner(mode="plan")``),
so every time below is an ESTIMATE, not a measurement. On boards the same search measures
with CANN's timers through TVM's RPC tracker: each board runs
``python -m tvm_ascend.tuning.board --tracker HOST:PORT --key ascend.910b1`` and the tuner
takes ``RPCRunner(tracker=(HOST, PORT), key="ascend.910b1")``. This tutorial points at a
tracker when ``TVM_TRACKER_HOST`` and ``TVM_TRACKER_PORT`` are set (TVM's own variables),
and says in one line that there is none otherwise.

Deployment is ``lib.export_library("layer.so")`` (``tvm-ascend compile --output layer.so``):
one file holding the host program, every kernel and the weights; ``tvm_ascend.load`` runs it
in any process, here a fresh one, whose outputs must equal the building process's bit for
bit. The model is one post-LN transformer encoder layer (``benchmarks/models/transformer.py``).
On a loaded 2-core machine: small 35 s wall in the test run (cold cache), default 27 s warm.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

import tvm_ascend
from tvm_ascend import CompileConfig
from tvm_ascend.compare import find_atc, random_inputs
from tvm_ascend.tuning import LocalRunner, RPCRunner, summary_table, tune_model

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.models.transformer import encoder_layer  # noqa: E402

# TVM_ASCEND_TUTORIAL_SIZE picks the layer and the trials: "small" is what
# tests/test_tutorials.py runs.
SIZES = {
    "default": dict(layer=dict(batch=1, seq=32, hidden=64, heads=2, ffn=128), trials=16),
    "small": dict(layer=dict(batch=1, seq=16, hidden=32, heads=2, ffn=64), trials=4),
}
SOC = "Ascend910B1"
BOARD_KEY = os.environ.get("TVM_ASCEND_RPC_KEY", "ascend.910b1")

# What the fresh process runs: load the exported library, run it, save its outputs.
LOAD_AND_RUN = """
import sys
import numpy as np
import tvm_ascend
lib = tvm_ascend.load(sys.argv[1])
feeds = dict(np.load(sys.argv[2]))
np.savez(sys.argv[3], *lib.run(feeds))
print(f"fresh process {__import__('os').getpid()}: loaded {sys.argv[1]}")
"""


def board_runner():
    """An RPCRunner on the tracker TVM_TRACKER_HOST:TVM_TRACKER_PORT, or (None, why not)."""
    host, port = os.environ.get("TVM_TRACKER_HOST"), os.environ.get("TVM_TRACKER_PORT")
    if not host or not port:
        return None, ("RPC tracker: none (TVM_TRACKER_HOST / TVM_TRACKER_PORT not set); "
                      "tuning measured nothing on a board, every time is an ESTIMATE")
    runner = RPCRunner(tracker=(host, int(port)), key=BOARD_KEY)
    info = runner.ping()  # an unreachable tracker is an AscendError naming it and the key
    if not info.get("device_count"):
        return None, (f"RPC tracker {host}:{port} key {BOARD_KEY!r}: reached, but the board "
                      "has no CANN device; tuning with the timing model's ESTIMATES")
    return runner, (f"RPC tracker {host}:{port} key {BOARD_KEY!r}: {info['device_count']} "
                    "device(s); tuning measures there (a board started with --backend "
                    "emulator answers with the timing model's ESTIMATES, and logs so)")


def main() -> None:
    size = os.environ.get("TVM_ASCEND_TUTORIAL_SIZE", "default")
    model = encoder_layer(**SIZES[size]["layer"])
    trials = SIZES[size]["trials"]
    work = pathlib.Path(tempfile.mkdtemp(prefix="tvm_ascend_tutorial06_"))
    print(f"encoder layer ({size}): {len(model.graph.node)} ONNX nodes, files in {work}")
    config = CompileConfig(soc_version=SOC, fusion_level="aggressive")

    # 1. Where measurements come from: a board through the tracker, else this machine.
    runner, line = board_runner()
    print(line)
    runner = runner or LocalRunner(mode="plan")

    # 2. tune: every NPU kernel's knob space, `trials` candidates measured per kernel, the
    #    best of each recorded in the database (tvm-ascend tune --model layer.onnx
    #    --database tuning_db --trials 4).
    database = work / "tuning_db"
    results = tune_model(model, trials=trials, database=str(database), config=config,
                         runner=runner, show_progress=False, seed=0)
    print(f"\n2. tune, {trials} trials per kernel, database {database}:")
    print(summary_table(results))
    improved = [r for r in results if r.best_us and r.default_us and r.best_us < r.default_us]
    print(f"   {len(improved)} of {len(results)} kernels beat their default tiling "
          "(times: ESTIMATES)")

    # 3. Build with the database: kernels it holds are planned with their recorded knobs.
    #    Without a board the tuner's measurement is the timing model, the same model the
    #    planner already searches each kernel's knobs with at build time (the report's "est. X
    #    us against Y us with the defaults"); so here the database mostly confirms the
    #    planner's choice, and it earns its keep when a board's measurements disagree with it.
    untuned = tvm_ascend.build(model, target="ascend", config=config)
    tuned = tvm_ascend.build(model, target="ascend",
                             config=config.replace(tuning_database=str(database)))
    before = {g["id"]: g for g in untuned.fusion_report()["groups"] if g["on_npu"]}
    print("\n3. built with tuning_database (per kernel: untuned -> tuned, est. us):")
    for group in tuned.fusion_report()["groups"]:
        if not group["on_npu"]:
            continue
        old = before.get(group["id"], {})
        source = group["estimate"].get("source", "")
        print(f"    {group['id']} {group['kernel'][:44]:<44} "
              f"{old.get('estimate', {}).get('time_us', float('nan')):.2f} -> "
              f"{group['estimate']['time_us']:.2f}"
              f"{'  (tiling of the tuning record)' if 'tuning record' in source else ''}"
              f"{'  knobs changed' if old.get('tiling') != group.get('tiling') else ''}")
    print(f"   model: est. {untuned.fusion_report()['estimate']['latency_us']:.1f} -> "
          f"{tuned.fusion_report()['estimate']['latency_us']:.1f} us (ESTIMATES)")

    # 4. Export, then load and run in a fresh Python process: the outputs must be equal.
    feeds = random_inputs(model, seed=0)
    here = tuned.run(feeds)
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(here, session.run(None, feeds)):
        # the test suite's tolerance for float32 matmul kernels against onnxruntime
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    library = work / "layer.so"
    tuned.export_library(str(library))
    np.savez(work / "feeds.npz", **feeds)
    done = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(library),
                           str(work / "feeds.npz"), str(work / "outputs.npz")],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the fresh process failed to load {library}:\n{done.stderr[-2000:]}")
    there = np.load(work / "outputs.npz")
    there = [there[f"arr_{i}"] for i in range(len(there.files))]
    assert len(there) == len(here) and all(np.array_equal(a, b) for a, b in zip(here, there)), \
        "the loaded library's outputs differ from the building process's"
    print(f"\n4. exported {library.name} ({library.stat().st_size // 1024} KiB); "
          f"{done.stdout.strip()} (pid {os.getpid()} built it); outputs equal bit for bit, "
          "and match onnxruntime")

    # Side by side with ATC: the ATC-style build (only ATC's rules, the same templates and
    # timing model, untuned) against the tuned build.
    atc = tvm_ascend.build(model, target="ascend",
                           config=CompileConfig(soc_version=SOC, rule_set="atc_style"))
    print(f"\n{SOC}{'':<14}{'launches':>9}{'HBM bytes':>12}{'est. us':>10}")
    for name, lib in (("ATC-style (emulated)", atc), ("tvm-ascend untuned", untuned),
                      ("tvm-ascend tuned", tuned)):
        report = lib.fusion_report()
        launches = report["kernels"]["ascend"] + report["kernels"]["host"]
        print(f"{name:<25}{launches:>9}{report['estimate']['hbm_bytes']:>12}"
              f"{report['estimate']['latency_us']:>10.1f}")
    print("(est. us: ESTIMATES from the timing model, not measured)")
    path, reason = find_atc()
    print(reason or f"real atc: found at {path}; run it with --model=<this model> "
          f"--framework=5 --soc_version={SOC} for its side (`tvm-ascend compare --atc`, "
          "issue 21)")
    print("published plain ATC: benchmarks/calibration.json has no figure for this layer "
          "(tutorial 03 prints BERT-base's)")


if __name__ == "__main__":
    main()
