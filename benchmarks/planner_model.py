"""The planner with the timing model alone against the XGBoost-ranked planner.

For each benchmark configuration below (build only, nothing runs), the partition stage
(``pipeline.plan_fusion``: prepare + partition, every HorizontalFusion alternative) is run
with ``planner_model="timing"`` and with ``planner_model="xgboost"`` at each ``planner_top_k``
of ``TOP_KS``, each time with a fresh ``GroupCost`` (no plan shared between runs). Recorded
per configuration and mode: whether the partition equals the timing model's (every kernel's
members, template and knobs, and the host groups), the whole-model estimate, the timing model
calls (``estimate_kernel``) and the groups whose tilings the model ranked, and the wall time
of the stage (the median of ``REPEATS`` runs; the machine is shared, so the times are noisy:
compare the calls, they are exact). Writes ``benchmarks/planner_model.json``;
``benchmarks/markdown.py`` renders its section of BENCHMARKS.md from that file.

Usage::

    python -m benchmarks.planner_model [--repeats 3] [--only bert_base]
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import statistics
import time
from pathlib import Path

from tvm_ascend.config import CompileConfig
from tvm_ascend.cost_model.planner_model import PlannerRanking, planner_ranking
from tvm_ascend.frontend import load_model
from tvm_ascend.kernel_record import record_of
from tvm_ascend.partition import cost as cost_module
from tvm_ascend.partition.cost import GroupCost
from tvm_ascend.partition.report import write_json_atomic
from tvm_ascend.pipeline import fusion_policy, plan_fusion, precision_of

from . import harness
from .results_file import git_commit

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "planner_model.json"
# (model, configuration, dtype, SoC); conservative, as tvm-ascend builds by default
CASES = (("bert_base", "b1_s128", "float16", "Ascend910B1"),
         ("resnet50", "b1_224", "float16", "Ascend910B1"),
         ("gpt2_medium", "b1_s512", "float16", "Ascend910B1"),
         ("bert_base", "b1_s128", "float16", "Ascend310P3"),
         ("resnet50", "b1_224", "float16", "Ascend310P3"))
TOP_KS = (1, 2, 3)
REPEATS = 3


class _Counted:
    """A function, counting its calls and the seconds spent in them."""

    def __init__(self, real):
        self.real, self.calls, self.seconds = real, 0, 0.0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        start = time.perf_counter()
        try:
            return self.real(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def partition_signature(result) -> dict:
    """What the partition decided, comparable between runs: every kernel (its ops, template
    and knobs) and every host group (its ops), each sorted."""
    kernels = []
    for _, func in result.mod.functions.items():
        if func.attrs and func.attrs.get("Codegen") == "ascend":
            record = record_of(func)
            ops = [op["var"] for op in record.group.get("ops", [])]
            kernels.append([ops, record.template, json.dumps(record.knobs, sort_keys=True)])
    host = [[m.var for m in g.members] for g in result.groups if not g.on_npu]
    return {"kernels": sorted(kernels), "host": sorted(host)}


def _decided(result) -> dict:
    """How many groups each kind of decision covered ("ranked by xgboost ...", ...)."""
    counts: dict = {}
    for group in result.groups:
        label = group.estimate.get("decided_by")
        if label:
            kind = label.split(",")[0]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def run_once(imported, policy, config) -> dict:
    """One partition stage under ``config``'s planner model: its signature, estimate, timing
    model calls and seconds."""
    counter = _Counted(cost_module.estimate_kernel)
    ranking = _Counted(PlannerRanking.choose)
    cost_module.estimate_kernel = counter
    PlannerRanking.choose = lambda self, *a, **k: ranking(self, *a, **k)
    try:
        cost = GroupCost(config.soc, None,
                         planner_ranking(config.planner_model, config.planner_top_k))
        start = time.perf_counter()
        result = plan_fusion(imported, policy, config.soc, precision=precision_of(config),
                             cost=cost)
        seconds = time.perf_counter() - start
    finally:
        cost_module.estimate_kernel = counter.real
        PlannerRanking.choose = ranking.real
    return {"signature": partition_signature(result), "seconds": seconds,
            "estimate_calls": counter.calls, "estimate_s": counter.seconds,
            "rank_s": ranking.seconds, "decided_by": _decided(result),
            "est_us": round(sum(g.estimate.get("time_us", 0.0) for g in result.groups), 3)}


def measure_case(model: str, name: str, dtype: str, soc: str, repeats: int) -> dict:
    """The timing-model run and the ranked runs of one configuration."""
    config = next(c for c in harness.FULL_CONFIGS if (c.model, c.name, c.dtype)
                  == (model, name, dtype))
    base = CompileConfig(soc_version=soc)
    imported = load_model(config.onnx_model(), base.input_shape)
    policy = fusion_policy(base, imported)
    modes = [("timing", None)] + [("xgboost", k) for k in TOP_KS]
    runs: dict = {}
    for repeat in range(repeats):
        # the modes take turns going first, so neither a slow spell of the shared machine
        # nor the process warming up favours one
        for planner, k in modes[repeat % len(modes):] + modes[:repeat % len(modes)]:
            cfg = base.replace(planner_model=planner, planner_top_k=k)
            runs.setdefault((planner, k), []).append(run_once(imported, policy, cfg))
    reference = runs[("timing", None)][0]
    out = {"model": model, "config": name, "dtype": dtype, "soc": soc,
           "level": base.fusion_level, "kernels": len(reference["signature"]["kernels"]),
           "modes": []}
    for planner, k in modes:
        first = runs[(planner, k)][0]
        same = first["signature"] == reference["signature"]
        out["modes"].append({
            "planner_model": planner, "planner_top_k": k,
            "same_partition": same, "est_us": first["est_us"],
            "est_equal": first["est_us"] == reference["est_us"],
            "estimate_calls": first["estimate_calls"], "decided_by": first["decided_by"],
            # seconds inside the timing model and inside the ranking (features + predict;
            # with the timing model alone, the call that says "estimate all"), medians
            "estimate_s_median": round(statistics.median(r["estimate_s"]
                                                         for r in runs[(planner, k)]), 4),
            "rank_s_median": round(statistics.median(r["rank_s"]
                                                     for r in runs[(planner, k)]), 4),
            "partition_s_median": round(statistics.median(r["seconds"]
                                                          for r in runs[(planner, k)]), 3),
            "partition_s_runs": [round(r["seconds"], 3) for r in runs[(planner, k)]],
            "differs": [] if same else _difference(reference["signature"],
                                                     first["signature"])})
    return out


def _difference(old: dict, new: dict) -> list[str]:
    """The kernels of one partition that the other has not, one line each (at most 6)."""
    a = {json.dumps(k) for k in old["kernels"]}
    b = {json.dumps(k) for k in new["kernels"]}
    lines = [f"timing only: {k}" for k in sorted(a - b)] + \
        [f"ranked only: {k}" for k in sorted(b - a)]
    return lines[:6]


def conclusion(cases: list[dict]) -> str:
    """One paragraph: the smallest k with every partition the timing model's, the calls it
    saves, and the seconds the ranking costs against the seconds of estimates it saves."""
    same_at = [k for k in TOP_KS if all(m["same_partition"] for c in cases for m in c["modes"]
                                        if m["planner_top_k"] == k)]
    if not same_at:
        return ("No top k measured gives the timing model's partition on every case, so the "
                "planner keeps `planner_model=\"timing\"` as its default.")
    k = same_at[0]

    def total(key, planner, top_k):
        return sum(m[key] for c in cases for m in c["modes"]
                   if (m["planner_model"], m["planner_top_k"]) == (planner, top_k))

    calls_t, calls_k = total("estimate_calls", "timing", None), total("estimate_calls",
                                                                       "xgboost", k)
    est_t, est_k = total("estimate_s_median", "timing", None), total("estimate_s_median",
                                                                     "xgboost", k)
    rank_k = total("rank_s_median", "xgboost", k)
    stage_t, stage_k = total("partition_s_median", "timing", None), \
        total("partition_s_median", "xgboost", k)
    smaller = [j for j in TOP_KS if j < k]
    worse = (f"; with top {', '.join(map(str, smaller))} some cases keep a slower tiling "
             "(the rows marked **no**: the timing model's fastest tiling of those kernels was "
             "not among the model's top k)") if smaller else ""
    differs = (est_k + rank_k) - est_t
    share = est_t / stage_t if stage_t else 0.0
    default = CompileConfig().planner_top_k
    if default == k:
        margin = f"the default `planner_top_k={default}` is the smallest k measured safe"
    elif default and default > k:
        margin = (f"the default `planner_top_k={default}` is {default - k} above the smallest "
                  f"k measured safe ({k}), a margin for models not measured here")
    else:
        margin = (f"the default `planner_top_k={default}` is below the smallest k measured "
                  f"safe ({k})")
    return (f"From top {k} on, every case forms the timing model's partition with the same "
            f"estimate{worse}. Summed over the cases, top {k} makes {calls_k} timing-model "
            f"calls against {calls_t} ({calls_t - calls_k} fewer): {est_k * 1e3:.0f} ms in "
            f"the timing model against {est_t * 1e3:.0f} ms, plus {rank_k * 1e3:.0f} ms "
            f"ranking (plan features and an XGBoost predict per group), {differs * 1e3:+.0f} ms "
            f"in all. That is all the work that differs between the two planners: the timing "
            f"model alone spends {share:.1%} of its partition stages ({stage_t:.1f} s, summed "
            f"medians; {stage_k:.1f} s with top {k}, the difference the shared machine's "
            "noise) in its estimates, so ranking before it cannot save compile time: the "
            "stage's seconds go to FuseOps, FuseTIR and the templates' analyses. Pruning with "
            "a model pays where a measurement is dear (a board through the RPC runner, as "
            "`tvm-ascend tune` measures, or a timing model far costlier than this one); so the "
            "planner keeps `planner_model=\"timing\"` as its default, and with "
            f"`planner_model=\"xgboost\"` {margin}.")


def trained_on() -> list[str]:
    """The benchmark-model configurations the shipped planner model learned from (training
    and validation, ``benchmarks/train_cost_model.py``), beside its generated workloads."""
    from .train_cost_model import TRAIN_MODELS, VALID_MODELS

    return [f"{family} " + " ".join(f"{k}={v}" for k, v in sorted(knobs.items()))
            for family, knobs in TRAIN_MODELS + VALID_MODELS]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--only", default="", help="only the cases whose model holds this")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--reuse", action="store_true",
                        help="keep the cases of the existing output; write the conclusion "
                        "again")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    earlier = json.loads(args.output.read_text()) if args.reuse else {}
    cases = earlier.get("cases") or [measure_case(*case, args.repeats) for case in CASES
                                     if args.only in case[0]]
    write_json_atomic(args.output, {
        "cases": cases, "repeats": earlier.get("repeats", args.repeats),
        "top_ks": list(TOP_KS), "conclusion": conclusion(cases),
        "default": {"planner_model": CompileConfig().planner_model,
                    "planner_top_k": CompileConfig().planner_top_k},
        "trained_on": trained_on(),
        "note": "partition stage = prepare + partition (plan_fusion), wall seconds, median of "
                "the repeats on a shared 2-core machine: noisy; estimate_calls are exact",
        "commit": earlier.get("commit") or git_commit("--always") or "",
        "date": earlier.get("date") or datetime.date.today().isoformat()})
    for case in cases:
        for mode in case["modes"]:
            print(f"{case['model']}/{case['config']} {case['soc']} {mode['planner_model']} "
                  f"k={mode['planner_top_k']}: same={mode['same_partition']} "
                  f"est={mode['est_us']} calls={mode['estimate_calls']} "
                  f"{mode['partition_s_median']} s")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
