"""Train the default cost model shipped in the package, on generated workloads (no download).

Labels come from ``LocalRunner`` (plan counters + timing model). The regression objective
(MetaSchedule style) and the pairwise-ranking one are both trained; the one with the better
validation top-1 score is kept and written to ``tvm_ascend/cost_model/default_model.ubj``.

Usage::

    python benchmarks/train_cost_model.py [--train 48] [--valid 12] [--output PATH]

Users retrain from their own tuning records the same way: ``CostModel(...).fit(groups)``.
"""
from __future__ import annotations

import argparse
import json
import logging
import time

from tvm_ascend.tuning.workloads import dataset, generate_workloads
from tvm_ascend.cost_model.xgb_model import DEFAULT_MODEL_PATH, fit_best
from tvm_ascend.soc import get_soc

TRAIN_SEED, VALID_SEED = 1, 2  # benchmarks/cost_model.py holds out seed 3
SOCS = ("Ascend910B1", "Ascend310P3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=48, help="training workloads")
    parser.add_argument("--valid", type=int, default=12, help="validation workloads")
    parser.add_argument("--rounds", type=int, default=60, help="boosting rounds")
    parser.add_argument("--output", default=str(DEFAULT_MODEL_PATH))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    socs = [get_soc(name) for name in SOCS]
    start = time.perf_counter()
    train = dataset(generate_workloads(args.train, TRAIN_SEED), socs)
    valid = dataset(generate_workloads(args.valid, VALID_SEED), socs)
    as_pairs = [(g["features"], g["times"]) for g in train]
    model, results = fit_best(as_pairs, [(g["features"], g["times"]) for g in valid],
                              args.rounds)
    model.save(args.output)
    print(json.dumps({"kept": model.objective, "validation": results,
                      "train_groups": len(train), "train_candidates":
                      int(sum(len(g["times"]) for g in train)),
                      "seconds": round(time.perf_counter() - start, 1),
                      "output": args.output}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
