"""``python -m tests.fuzz --n N --seed S``: the differential fuzzer from the command line.

Builds each generated graph at the fusion levels and SoCs asked for (strict where the tree has
it), runs it on the emulator, compares with onnxruntime, and prints the failures grouped by
cause with the smallest case of each; ``--save DIR`` keeps the failing graphs. Any row
reproduces with ``python -m tests.fuzz --seed S --index I --levels L --socs SOC -v``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .generate import generate, helper_code
from .run import LEVELS, SOCS, default_cache, run_many, save_failures, summary, tasks_for


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="graphs to generate (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--start", type=int, default=0, help="first case index (default 0)")
    parser.add_argument("--index", type=int, nargs="*", help="only these case indices")
    parser.add_argument("--levels", nargs="+", default=list(LEVELS), choices=LEVELS)
    parser.add_argument("--socs", nargs="+", default=list(SOCS), choices=SOCS)
    parser.add_argument("--per-graph", type=int, default=None,
                        help="(level, soc) pairs per graph, rotated over the graphs "
                             "(default: all of them)")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--save", metavar="DIR", help="write failing graphs, feeds and errors")
    parser.add_argument("--jsonl", metavar="FILE", help="append every outcome as a JSON line")
    parser.add_argument("--show", action="store_true",
                        help="print the cases as onnx.helper code instead of running them")
    parser.add_argument("--shrink", action="store_true",
                        help="shrink each failing case to the fewest nodes that keep its "
                             "cause and print it as onnx.helper code")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each outcome and every failure's detail")
    args = parser.parse_args(argv)
    default_cache()
    indices = args.index if args.index else range(args.start, args.start + args.n)
    if args.show:
        for index in indices:
            print(helper_code(generate(args.seed, index)) + "\n")
        return 0
    tasks = tasks_for(args.seed, indices, args.levels, args.socs, args.per_graph)
    log = open(args.jsonl, "a") if args.jsonl else None
    began = time.time()

    def report(outcome):
        if log is not None:
            from dataclasses import asdict

            log.write(json.dumps(asdict(outcome)) + "\n")
            log.flush()
        if args.verbose or outcome.failed:
            print(f"[{time.time() - began:7.1f}s] {outcome.case_id} {outcome.level} "
                  f"{outcome.soc}: {outcome.kind} {outcome.cause}", flush=True)
        if args.verbose and outcome.kind != "ok":
            print("    " + outcome.detail.replace("\n", "\n    "), flush=True)

    outcomes = run_many(tasks, jobs=args.jobs, timeout=args.timeout, on_outcome=report)
    print(summary(outcomes))
    if args.shrink:
        _shrink_all(outcomes, print if args.verbose else None)
    if args.save:
        print(f"failing graphs saved in {save_failures(outcomes, args.save)}")
    return 1 if any(o.failed for o in outcomes) else 0


def _shrink_all(outcomes, log) -> None:
    """Shrink the smallest failing case of each cause (in this process: no crash causes)."""
    from .reduce import shrink

    smallest = {}
    for o in outcomes:
        if o.failed and o.kind not in ("crash", "timeout"):
            if o.cause not in smallest or o.size < smallest[o.cause].size:
                smallest[o.cause] = o
    for cause, o in smallest.items():
        small = shrink(generate(o.seed, o.index), o.level, o.soc, cause, log)
        print(f"\n## {cause}\n# at {o.level} {o.soc}, shrunk from {o.size[0]} nodes to "
              f"{len(small.model.graph.node)}\n{helper_code(small)}")


if __name__ == "__main__":
    sys.exit(main())
