"""Evaluate the shipped cost model on held-out generated workloads.

Writes ``benchmarks/cost_model.json`` (keys ``pairwise_accuracy``, ``top1_score``,
``trials_to_95pct_best``, ``predictions_per_s``, each ``{"overall": x, "<op class>": y}``, plus
the tuning curves) and ``benchmarks/cost_model.md`` (the BENCHMARKS.md section).

Labels are the LocalRunner's (tiling-plan counters, equal to the emulator's, through the
analytic timing model): the figures say how well the learned model reproduces that ranking on
workloads it never saw, not how fast a real board runs.

Usage::

    python benchmarks/cost_model.py [--workloads 18] [--model PATH]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from tvm_ascend.tuning.workloads import OP_CLASSES, dataset, generate_workloads
from tvm_ascend.cost_model.xgb_model import (DEFAULT_MODEL_PATH, CostModel, pairwise_accuracy,
                                             top_k_score)
from tvm_ascend.partition.report import write_json_atomic
from tvm_ascend.soc import get_soc

HELD_OUT_SEED = 3  # training uses seeds 1 and 2 (benchmarks/train_cost_model.py)
SOCS = ("Ascend910B1", "Ascend310P3")
CURVE_TRIALS = 16
RANDOM_REPEATS = 20
HERE = Path(__file__).resolve().parent


def _search_order(first_then: np.ndarray) -> np.ndarray:
    """The tuner always measures the default (row 0) first, then its own order."""
    return np.concatenate([[0], [i for i in first_then if i != 0]])


def _curve(times: np.ndarray, order: np.ndarray, trials: int) -> np.ndarray:
    """best / best-so-far after 1..trials measured candidates (1.0 = the best found)."""
    so_far = np.minimum.accumulate(times[order])
    padded = np.concatenate([so_far, np.repeat(so_far[-1:], max(0, trials - len(so_far)))])
    return times.min() / padded[:trials]


def _trials_to(curve: np.ndarray, level: float = 0.95) -> int:
    hit = np.nonzero(curve >= level - 1e-12)[0]
    return int(hit[0]) + 1 if len(hit) else len(curve) + 1


def evaluate_groups(model: CostModel, groups: list[dict]) -> dict:
    per_class: dict = {c: {"pair": [], "top1": [], "t95": [], "t95_random": [], "model": [],
                           "random": [], "pps": []} for c in OP_CLASSES}
    rng = np.random.default_rng(0)
    for g in groups:
        feats, times = g["features"], g["times"]
        start = time.perf_counter()
        scores = model.predict(feats)
        per_class[g["op_class"]]["pps"].append((len(times), time.perf_counter() - start))
        entry = per_class[g["op_class"]]
        entry["pair"].append(pairwise_accuracy(scores, times))
        entry["top1"].append(top_k_score(scores, times, 1))
        trials = max(CURVE_TRIALS, len(times))
        guided = _curve(times, _search_order(np.argsort(-scores, kind="stable")), trials)
        entry["model"].append(guided[:CURVE_TRIALS])
        entry["t95"].append(_trials_to(guided))
        randoms = [_curve(times, _search_order(rng.permutation(len(times))), trials)
                   for _ in range(RANDOM_REPEATS)]
        entry["random"].append(np.mean([r[:CURVE_TRIALS] for r in randoms], axis=0))
        entry["t95_random"].append(np.mean([_trials_to(r) for r in randoms]))
    return per_class


def _batch_rate(model: CostModel, groups: list[dict]) -> float:
    """Candidates scored per second when the search scores a batch (features precomputed)."""
    feats = np.concatenate([g["features"] for g in groups])
    feats = np.repeat(feats, max(1, 20000 // len(feats)), axis=0)
    start = time.perf_counter()
    model.predict(feats)
    return len(feats) / (time.perf_counter() - start)


def summarise(per_class: dict, groups: list[dict], model: CostModel) -> dict:
    def by_class(key, fn=np.mean):
        out = {"overall": float(fn([v for c in per_class.values() for v in c[key]]))}
        out.update({c: float(fn(v[key])) for c, v in per_class.items() if v[key]})
        return out

    rate = {"overall": _batch_rate(model, groups)}
    for c in OP_CLASSES:
        chosen = [g for g in groups if g["op_class"] == c]
        if chosen:
            rate[c] = _batch_rate(model, chosen)
    curves = {c: {"model_guided": np.mean(v["model"], axis=0).round(4).tolist(),
                  "random": np.mean(v["random"], axis=0).round(4).tolist()}
              for c, v in per_class.items() if v["model"]}
    return {"pairwise_accuracy": by_class("pair"), "top1_score": by_class("top1"),
            "trials_to_95pct_best": by_class("t95"),
            "trials_to_95pct_best_random": by_class("t95_random"),
            "predictions_per_s": rate, "tuning_curve": curves,
            "groups": {"overall": len(groups), **{c: sum(g["op_class"] == c for g in groups)
                                                  for c in OP_CLASSES}},
            "candidates": int(sum(len(g["times"]) for g in groups)),
            "model_objective": model.objective, "held_out_seed": HELD_OUT_SEED,
            "socs": list(SOCS), "labels": "LocalRunner plan mode (estimates)"}


def markdown(result: dict) -> str:
    lines = ["## Cost model (held-out generated workloads)", "",
             f"{result['groups']['overall']} held-out workload x SoC groups "
             f"({result['candidates']} candidates, SoCs {', '.join(result['socs'])}), never "
             f"seen in training; model objective kept: `{result['model_objective']}`. Labels "
             "are the LocalRunner's estimated times (plan counters, equal to the emulator's, "
             "through the timing model): these figures measure ranking against that model, not "
             "a real board.", "",
             "| op class | groups | pairwise accuracy | top-1 score | trials to 95% (model) | "
             "trials to 95% (random) | predictions/s |", "|---|---|---|---|---|---|---|"]
    for c in ("overall", *OP_CLASSES):
        if c not in result["pairwise_accuracy"]:
            continue
        lines.append(f"| {c} | {result['groups'][c]} | {result['pairwise_accuracy'][c]:.3f} | "
                     f"{result['top1_score'][c]:.3f} | "
                     f"{result['trials_to_95pct_best'][c]:.2f} | "
                     f"{result['trials_to_95pct_best_random'][c]:.2f} | "
                     f"{result['predictions_per_s'].get(c, 0):,.0f} |")
    lines += ["", "Tuning curve (best / best-so-far after n measured trials, the default "
              "first; mean over groups):", "",
              "| op class | search | n=1 | n=2 | n=4 | n=8 | n=16 |",
              "|---|---|---|---|---|---|---|"]
    for c, curves in result["tuning_curve"].items():
        for name, curve in curves.items():
            cells = " | ".join(f"{curve[n - 1]:.3f}" for n in (1, 2, 4, 8, 16))
            lines.append(f"| {c} | {name} | {cells} |")
    lines += ["", "Reproduce: `python benchmarks/train_cost_model.py && "
              "python benchmarks/cost_model.py`.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=18, help="held-out workloads")
    parser.add_argument("--model", default=str(DEFAULT_MODEL_PATH))
    parser.add_argument("--json", default=str(HERE / "cost_model.json"))
    parser.add_argument("--markdown", default=str(HERE / "cost_model.md"))
    args = parser.parse_args(argv)
    model = CostModel.load(args.model)
    groups = dataset(generate_workloads(args.workloads, HELD_OUT_SEED),
                     [get_soc(s) for s in SOCS])
    result = summarise(evaluate_groups(model, groups), groups, model)
    write_json_atomic(args.json, result)
    tmp = Path(args.markdown).with_suffix(".md.tmp")
    tmp.write_text(markdown(result))
    tmp.replace(args.markdown)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
