"""``python -m benchmarks``: run the benchmarks, write results.json, BENCHMARKS.md and charts.

    python -m benchmarks --quick                        # tiny configurations, a few minutes
    python -m benchmarks --model bert_base --baseline conservative --dtype float16
    python -m benchmarks --render-only                  # tables and charts from results.json
    python -m benchmarks --calibration                  # the calibration rows, then the tables

The calibration suite (``benchmarks/calibration.py``: the timing model beside published
measurements, and the uncertainty bands the package ships) runs with every full run (no
``--quick`` and no filter) and alone with ``--calibration``.

The configurations users quote (BERT-base b1_s128 and b16_s512, ResNet-50 b1/b32 at 224,
GPT-2 medium b1/b8 s512, each in float16 and float32) are in the default list; above
``--run-limit-macs`` they are compiled and estimated but never run on the CPU emulator:

    python -m benchmarks --model gpt2_medium --config b1_s512 --dtype float16

A run merges into ``--output``: it replaces the records it re-measures (same model, config,
baseline, dtype) and keeps the others; ``--fresh`` overwrites the file instead.

Example
-------
>>> main(["--quick", "--model", "bert_base", "--baseline", "conservative"])   # doctest: +SKIP
0
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from . import harness, results_file

HERE = Path(__file__).resolve().parent


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark tvm-ascend against op-by-op, ATC-style and plain TVM fusion.")
    parser.add_argument("--quick", action="store_true",
                        help="tiny configurations of every model instead of the full list")
    parser.add_argument("--model", action="append", default=[], choices=sorted(harness.FAMILIES),
                        help="only this model (repeatable)")
    parser.add_argument("--config", action="append", default=[],
                        help="only configurations of this name, e.g. b1_s128 (repeatable)")
    parser.add_argument("--dtype", action="append", default=[], choices=["float16", "float32"],
                        help="only this dtype (repeatable)")
    parser.add_argument("--baseline", action="append", default=[],
                        choices=list(harness.BASELINES), help="only this baseline (repeatable)")
    parser.add_argument("--output", default=str(HERE / "results.json"),
                        help="results file (default benchmarks/results.json)")
    parser.add_argument("--markdown", default=str(HERE.parent / "BENCHMARKS.md"),
                        help="tables file (default BENCHMARKS.md at the repository root)")
    parser.add_argument("--charts-dir", default=str(HERE),
                        help="folder of the SVG charts (default benchmarks/)")
    parser.add_argument("--run-limit-macs", type=float, default=harness.RUN_LIMIT_MACS,
                        help="run and compare with onnxruntime up to this many MatMul/Conv MACs")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no new configuration after this many minutes")
    parser.add_argument("--fresh", action="store_true",
                        help="overwrite --output instead of merging this run's records into it")
    parser.add_argument("--render-only", action="store_true",
                        help="only rewrite BENCHMARKS.md and the charts from --output")
    parser.add_argument("--list", action="store_true", help="list the configurations and exit")
    parser.add_argument("--calibration", action="store_true",
                        help="only run the calibration suite (benchmarks/calibration.py), "
                             "then rewrite BENCHMARKS.md")
    parser.add_argument("--no-calibration", action="store_true",
                        help="do not run the calibration suite after a full run")
    return parser


def render(results: dict, markdown_path: str, charts_dir: str) -> list[str]:
    """Write the charts and BENCHMARKS.md for ``results``; returns the files written."""
    from . import charts, markdown

    written = charts.write_charts(results, charts_dir)
    markdown.write_markdown(results, markdown_path, charts=written)
    return written + [markdown_path]


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    calibrated = 0
    if args.calibration:
        from . import calibration

        calibrated = calibration.main([])  # 1: a row outside the aim without a reason
        args.render_only = True
    if args.render_only:
        path = Path(args.output)
        if not path.exists():
            print(f"error: {path} does not exist; run the benchmarks first", file=sys.stderr)
            return 2
        try:
            results = results_file.load_results(path)
        except results_file.ResultsFileError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for item in render(results, args.markdown, args.charts_dir):
            print(item)
        return calibrated
    pool = harness.QUICK_CONFIGS if args.quick else harness.FULL_CONFIGS
    try:
        configs = harness.select_configs(pool, args.model, args.config, args.dtype)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.list:
        for config in configs:
            print(config.key, dict(config.knobs))
        return 0
    baselines = args.baseline or list(harness.BASELINES)
    try:
        results = harness.run_benchmarks(configs, baselines, args.output,
                                         run_limit_macs=int(args.run_limit_macs),
                                         max_minutes=args.max_minutes, merge=not args.fresh)
    except results_file.ResultsFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    full_run = not (args.quick or args.model or args.config or args.dtype or args.baseline)
    if full_run and not args.no_calibration:
        from . import calibration

        calibration.main([])
    for item in [args.output] + render(results, args.markdown, args.charts_dir):
        print(item)
    ran = {results_file.record_key(r) for r in results["records"]
           if r.get("commit") == results["header"].get("commit")
           and r.get("date") == results["header"].get("date")}
    failed = [r for r in results["records"] if r["status"] == "failed"
              and results_file.record_key(r) in ran]
    for record in failed:
        print(f"FAILED {record['model']}/{record['config']}/{record['dtype']} "
              f"{record['baseline']}: {record['error'].splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
