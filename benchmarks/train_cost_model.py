"""Train the cost models shipped in the package, on generated workloads (no download).

The tuner's model (``tvm_ascend/cost_model/default_model.ubj``, features ``FEATURE_NAMES``):
labels come from ``LocalRunner`` (plan counters + timing model). The planner's model
(``--planner``: ``tvm_ascend/cost_model/planner_model.ubj``, features ``PLAN_FEATURE_NAMES``,
none read from the timing estimate): generated matmul and conv2d workloads, each with its
template's variants and knob space, labelled by the timing model. For each, the regression
objective (MetaSchedule style) and the pairwise-ranking one are trained and the one with the
better validation top-1 score is kept.

Usage::

    python benchmarks/train_cost_model.py [--planner] [--train 48] [--valid 12] [--output PATH]

Users retrain the planner's model from their own tuning records with
``tvm-ascend retrain --database DB --model m.onnx --output planner.ubj``
(``tvm_ascend.tuning.retrain_planner_model``).
"""
from __future__ import annotations

import argparse
import json
import logging
import time

from tvm_ascend.tuning.retrain import generated_groups, train_planner_model
from tvm_ascend.tuning.workloads import dataset, generate_workloads
from tvm_ascend.cost_model.xgb_model import DEFAULT_MODEL_PATH, PLANNER_MODEL_PATH, fit_best
from tvm_ascend.soc import get_soc

TRAIN_SEED, VALID_SEED = 1, 2  # benchmarks/cost_model.py holds out seed 3
SOCS = ("Ascend910B1", "Ascend310P3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planner", action="store_true",
                        help="train the planner's model (planner_model.ubj) instead")
    parser.add_argument("--train", type=int, default=48, help="training workloads")
    parser.add_argument("--valid", type=int, default=12, help="validation workloads")
    parser.add_argument("--rounds", type=int, default=60, help="boosting rounds")
    parser.add_argument("--output", default=None,
                        help=f"default {DEFAULT_MODEL_PATH} ({PLANNER_MODEL_PATH.name} with "
                        "--planner)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    start = time.perf_counter()
    if args.planner:
        train = generated_groups(args.train, TRAIN_SEED, SOCS)
        valid = generated_groups(args.valid, VALID_SEED, SOCS)
        model, results = train_planner_model(train, valid, args.rounds)
        output = args.output or str(PLANNER_MODEL_PATH)
    else:
        socs = [get_soc(name) for name in SOCS]
        train = dataset(generate_workloads(args.train, TRAIN_SEED), socs)
        valid = dataset(generate_workloads(args.valid, VALID_SEED), socs)
        model, results = fit_best([(g["features"], g["times"]) for g in train],
                                  [(g["features"], g["times"]) for g in valid], args.rounds)
        output = args.output or str(DEFAULT_MODEL_PATH)
    model.save(output)
    print(json.dumps({"kept": model.objective, "validation": results,
                      "train_groups": len(train), "train_candidates":
                      int(sum(len(g["times"]) for g in train)),
                      "seconds": round(time.perf_counter() - start, 1),
                      "output": output}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
