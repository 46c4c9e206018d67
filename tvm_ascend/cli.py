"""``tvm-ascend``: the command line, with flags spelled as ATC spells them.

Example
-------
    tvm-ascend compile --model model.onnx --output model.so --soc_version Ascend910B1 \\
        --input_shape "x:1,3,224,224"
    tvm-ascend profile --model model.onnx --output prof/    # op_summary.csv, trace_view.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from .config import (CACHE_MODES, DEVICES, FUSION_LEVELS, IMPL_MODES, PRECISION_MODES, RULE_SETS,
                     CompileConfig)
from .errors import AscendError, FusionConfigError, ModelLoadError
from .frontend import describe_inputs, parse_input_shape

ONNX_FRAMEWORK = 5  # ATC's --framework number for ONNX


def _compile_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile an ONNX model into one deployable .so")
    p.add_argument("--model", required=True, help="ONNX model file")
    p.add_argument("--output", required=True,
                   help="output library; '.so' is added when the name has no suffix")
    p.add_argument("--framework", type=int, default=ONNX_FRAMEWORK,
                   help="ATC framework id; only 5 (ONNX) is supported")
    p.add_argument("--soc_version", default="Ascend910B1", help="e.g. Ascend910B1, Ascend310P3")
    p.add_argument("--device", default="emulator", choices=DEVICES,
                   help="build the kernels for the CPU emulator (default) or the NPU (needs a "
                   "CANN toolkit: ASCEND_HOME_PATH)")
    p.add_argument("--input_shape", default="",
                   help='shapes, "x:1,3,224,224;y:8" (-1: the gears of --dynamic_*; -1 '
                   'without gears or lo~hi: dynamic, runs on the host)')
    p.add_argument("--input_shape_range", default="",
                   help='ATC\'s older spelling of ranges, "x:[1~8,3,224,224]"')
    _gear_flags(p)
    _fusion_flags(p)
    p.add_argument("--precision_mode", default="must_keep_origin_dtype", choices=PRECISION_MODES,
                   help="ATC's precision modes (force_fp16 keeps reductions in float32)")
    p.add_argument("--keep_dtype", default="",
                   help="comma-separated ONNX node names kept in their original dtype")
    p.add_argument("--op_select_implmode", default="high_precision", choices=IMPL_MODES,
                   help="high_precision: float16 Softmax/LayerNorm/ReduceSum/ReduceMean compute "
                   "in float32 inside their kernels (the default); high_performance: in float16")
    p.add_argument("--dump_graph", action="store_true",
                   help="write dumps (report, fusion_result.json, fusion_plan.json, graphs, "
                   "kernel sources) into --dump_path")
    p.add_argument("--dump_path", default="tvm_ascend_dump")
    p.add_argument("--report", default=None, help="also write the fusion report to this file")
    p.add_argument("--strict", action="store_true",
                   help="fail when a kernel fails to schedule, print or compile (by default its "
                   "ops are split or run on the host, and the report says so)")
    p.add_argument("--op_compiler_cache_mode", default="enable", choices=CACHE_MODES,
                   help="compile cache: enable (read and write; the default, where ATC's is "
                   "disable), force (compile again, overwrite the entries), disable (neither)")
    p.add_argument("--op_compiler_cache_dir", default=None,
                   help="compile cache folder (default ~/.cache/tvm_ascend; "
                   "TVM_ASCEND_CACHE_DIR, as every variable, overrides it)")


def _gear_flags(p) -> None:
    """ATC's gears (one static build per gear in one library): tvm_ascend/frontend/gears.py."""
    p.add_argument("--dynamic_batch_size", default="",
                   help='batch sizes for the -1 at dimension 0 of --input_shape, "1,2,4,8"')
    p.add_argument("--dynamic_image_size", default="",
                   help='H,W gears for -1 H and W of --input_shape, "224,224;448,448"')
    p.add_argument("--dynamic_dims", default="",
                   help='gears for every -1 of --input_shape, in order, "1,128;8,512" (with '
                   "--input_format ND)")
    p.add_argument("--input_format", default="", help="NCHW (default), NHWC or ND")


def _gears(args) -> dict:
    return {name: getattr(args, name, "") for name in
            ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims", "input_format")}


def _fusion_flags(p) -> None:
    """The flags that steer fusion, shared by compile and explain."""
    p.add_argument("--fusion_level", default="conservative", choices=FUSION_LEVELS)
    p.add_argument("--fusion_switch_file", default=None,
                   help="ATC switch file: 'RuleName:off' lines or {\"Switch\": {...}} JSON")
    p.add_argument("--rule_set", default="tvm_ascend", choices=RULE_SETS,
                   help="atc_style: only ATC's default rules as fixed patterns; tvm_fuseops: "
                   "TVM's FuseOps groups unchanged")
    p.add_argument("--no_fuse_nodes", default="",
                   help="comma-separated ONNX node names never fused with anything")
    p.add_argument("--fusion_plan", default=None,
                   help="fusion_plan.json from an earlier build (dumps) to rebuild its groups")
    p.add_argument("--tuning_database", default=None,
                   help="tuning database folder written by 'tvm-ascend tune'")
    p.add_argument("--search_width", type=int, default=4,
                   help="beam width of the grouping search per region (1: pairwise greedy)")
    p.add_argument("--planner_model", default="timing",
                   help="what picks a group's tiling among its variants: timing (every "
                   "variant estimated), xgboost (the shipped model ranks them, the timing "
                   "model estimates the --planner_top_k best) or a .ubj/.json model file "
                   "written by 'tvm-ascend retrain'")
    p.add_argument("--planner_top_k", type=int, default=3,
                   help="variants the timing model estimates under a learned planner model "
                   "(0: all)")


def _config(args, **extra) -> CompileConfig:
    return CompileConfig(soc_version=args.soc_version, fusion_level=args.fusion_level,
                         fusion_switch_file=args.fusion_switch_file, rule_set=args.rule_set,
                         no_fuse_nodes=args.no_fuse_nodes, fusion_plan_file=args.fusion_plan,
                         tuning_database=args.tuning_database,
                         search_width=getattr(args, "search_width", 4),
                         planner_model=getattr(args, "planner_model", "timing"),
                         planner_top_k=getattr(args, "planner_top_k", 3),
                         input_shape=_shapes(args), **_gears(args), **extra).with_env()


def _shapes(args) -> dict:
    try:
        shapes = parse_input_shape(args.input_shape)
        shapes.update(parse_input_shape(getattr(args, "input_shape_range", "")))
    except ModelLoadError as err:
        raise ModelLoadError(f"{err}; the model's inputs: {_model_inputs(args.model)}") from err
    return shapes


def _model_inputs(path) -> str:
    """The model's inputs for an error about --input_shape (the error stands without them when
    the model itself cannot be read)."""
    import onnx

    try:
        return describe_inputs(onnx.load(path, load_external_data=False))
    except Exception:  # noqa: BLE001 - reading the model is the next step's error to report
        return "(the model could not be read)"


def _run_compile(args) -> int:
    from .dumps import write_or_warn
    from .partition.fusion_result import write_fusion_result
    from .partition.report import write_json_atomic
    from .pipeline import build
    from .runtime.artifacts import check_output_path

    if args.framework != ONNX_FRAMEWORK:
        raise FusionConfigError(f"--framework={args.framework}: only 5 (ONNX) is supported")
    output = args.output if "." in args.output.rsplit("/", 1)[-1] else args.output + ".so"
    # before the build, not after minutes of it; a folder is refused, whatever its name
    check_output_path(args.output if os.path.isdir(args.output) else output, create=False)
    config = _config(args, precision_mode=args.precision_mode, dump_graph=args.dump_graph,
                     dump_path=args.dump_path, keep_dtype=args.keep_dtype, strict=args.strict,
                     op_select_implmode=args.op_select_implmode,
                     op_compiler_cache_mode=args.op_compiler_cache_mode,
                     cache_dir=args.op_compiler_cache_dir, device=args.device)
    lib = build(args.model, target="ascend", config=config)
    report = lib.fusion_report()
    written = []
    try:
        lib.export_library(output)
        written.append(Path(output))
        if args.report:
            write_or_warn(args.report, lambda: write_json_atomic(args.report, report))
            written.append(Path(args.report))
        # as ATC does, every conversion leaves the per-rule counts beside its output
        counts = os.path.join(os.path.dirname(os.path.abspath(output)), "fusion_result.json")
        write_or_warn(counts, lambda: write_fusion_result(report, counts))
        written.append(Path(counts))
    except KeyboardInterrupt:  # half a conversion is none: take back what it wrote
        for path in written:
            path.unlink(missing_ok=True)
        raise
    print(f"{args.model} -> {output} ({report['soc_version']}): "
          f"{report['npu_kernels']} NPU kernel(s) for {report['ops']} op(s), "
          f"{report['host_groups']} group(s) on the host")
    for op in report["host_ops"]:
        print(f"  host: {op['node'] or op['var']} ({op['op']}): {op['why']}")
    print()
    print(lib.report)
    return 0


def _explain_parser(sub) -> None:
    p = sub.add_parser("explain", help="why an ONNX node is, or is not, fused with its neighbours "
                       "(--rules: every fusion rule, its level and ATC names)")
    p.add_argument("--model", help="ONNX model file")
    p.add_argument("--node", help="ONNX node name")
    p.add_argument("--rules", action="store_true", help="list the fusion rules and exit")
    p.add_argument("--soc_version", default="Ascend910B1")
    p.add_argument("--input_shape", default="")
    _fusion_flags(p)


def _run_explain(args) -> int:
    from .partition.report import explain_node
    from .partition.rules import describe_rules
    from .pipeline import build

    if args.rules:
        print(describe_rules())
        return 0
    if not args.model or not args.node:
        raise FusionConfigError("explain needs --model and --node (or --rules)")
    report = build(args.model, target="ascend", config=_config(args)).fusion_report()
    print(explain_node(report, args.node))
    return 0


def _tune_parser(sub) -> None:
    p = sub.add_parser("tune", help="search each kernel's tiling knobs; record the best in a "
                       "tuning database that later builds reuse (CompileConfig.tuning_database)")
    p.add_argument("--model", required=True, help="ONNX model file")
    p.add_argument("--trials", type=int, default=16, help="candidates measured per kernel")
    p.add_argument("--database", required=True, help="tuning database folder")
    p.add_argument("--soc_version", default="Ascend910B1")
    p.add_argument("--input_shape", default="")
    p.add_argument("--runner", default="local", choices=("local", "emulator"),
                   help="local: plan counters + timing model; emulator: build and run each")
    p.add_argument("--cost_model", default="default",
                   help="XGBoost .json/.ubj model, 'default' (shipped) or 'none' (analytic)")
    p.add_argument("--seed", type=int, default=0)


def _run_tune(args) -> int:
    from .tuning import LocalRunner, summary_table, tune_model

    if args.trials < 1:
        raise FusionConfigError(f"--trials={args.trials} must be at least 1")
    config = CompileConfig(soc_version=args.soc_version, input_shape=_shapes(args)).with_env()
    results = tune_model(args.model, trials=args.trials, database=args.database, config=config,
                         runner=LocalRunner(mode="plan" if args.runner == "local" else args.runner),
                         cost_model=None if args.cost_model == "none" else args.cost_model,
                         seed=args.seed)
    print(summary_table(results))
    print(f"tuning database: {args.database} (estimated times, microseconds)")
    return 0


def _retrain_parser(sub) -> None:
    p = sub.add_parser("retrain", help="retrain the planner's XGBoost model from a tuning "
                       "database (board measurements first where there are some); builds use "
                       "it with --planner_model FILE")
    p.add_argument("--database", required=True, help="tuning database folder ('tune' wrote)")
    p.add_argument("--model", required=True, action="append",
                   help="ONNX model the records were tuned on (repeat for several)")
    p.add_argument("--output", required=True, help="the model file to write (.ubj or .json)")
    p.add_argument("--soc_version", default="Ascend910B1")
    p.add_argument("--input_shape", default="")
    p.add_argument("--base", type=int, default=48,
                   help="generated workloads trained on beside the records and the models' "
                   "variant groups (0: none)")


def _run_retrain(args) -> int:
    from .tuning import retrain_planner_model

    args.model, models = args.model[0], args.model  # _shapes names the first model's inputs
    config = CompileConfig(soc_version=args.soc_version, input_shape=_shapes(args)).with_env()
    summary = retrain_planner_model(args.database, models, args.output, config, base=args.base)
    print(json.dumps(summary, indent=1, sort_keys=True))
    print(f"planner model: {args.output} (use it with --planner_model {args.output})")
    return 0


def _compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="fusion off vs ATC-style vs conservative vs aggressive: "
                       "launches, HBM and L2 bytes, estimated latency with its band, and the "
                       "error of every output and fused group")
    p.add_argument("--model", required=True, help="ONNX model file")
    p.add_argument("--soc_version", default="Ascend910B1")
    p.add_argument("--input_shape", default="")
    p.add_argument("--precision_mode", default="must_keep_origin_dtype", choices=PRECISION_MODES)
    p.add_argument("--variants", default="off,atc_style,conservative,aggressive",
                   help="comma-separated subset of off, atc_style, conservative, aggressive")
    p.add_argument("--no_groups", action="store_true", help="skip the per-group error check")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--fusion_switch_file", default=None,
                   help="ATC switch file, given to every variant and to the real atc")
    p.add_argument("--atc", nargs="?", const=True, default=None, metavar="DIR",
                   help="side by side with a real ATC: alone, run the atc on PATH (or under "
                   "ASCEND_HOME_PATH) with the same flags; with DIR, read a recorded ATC run "
                   "(its fusion_result.json and ge_onnx_*.pbtxt graph dump); with the path of "
                   "an atc, run that one")
    p.add_argument("--atc_timeout", type=float, default=None,
                   help="seconds the real atc may run (default 1800)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="also write the comparison (variants and the ATC side-by-side) as JSON")
    _gear_flags(p)


def _run_compare(args) -> int:
    from .atc_compare import format_side_by_side
    from .compare import VARIANTS, compare_model, format_comparison

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise FusionConfigError(f"--variants: unknown {unknown}; choose from "
                                f"{', '.join(VARIANTS)}")
    config = CompileConfig(soc_version=args.soc_version, precision_mode=args.precision_mode,
                           fusion_switch_file=args.fusion_switch_file,
                           input_shape=_shapes(args), **_gears(args)).with_env()
    found = compare_model(args.model, config, variants, args.seed, groups=not args.no_groups,
                          atc=args.atc, atc_timeout_s=args.atc_timeout)
    results, source = found[:2]
    print(format_comparison(results, source))
    side = found[2] if len(found) > 2 else None
    if side is not None:
        print()
        print(side if isinstance(side, str) else format_side_by_side(side))
    if args.json:
        _write_json(args.json, {"reference": source,
                                "variants": [dataclasses.asdict(r) for r in results],
                                "atc": {"skipped": side} if isinstance(side, str) else side})
        print(f"written: {args.json}")
    return 0


def _write_json(path: str, document: dict) -> None:
    """``document`` to ``path`` whole or not at all (a temporary file renamed over it)."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=".json")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=1, default=str)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _profile_parser(sub) -> None:
    p = sub.add_parser("profile", help="build the model, run it once on seeded random inputs and "
                       "write msprof-style op_summary.csv and trace_view.json (Perfetto) of "
                       "every launch: the timing model's ESTIMATES, not measurements")
    p.add_argument("--model", required=True, help="ONNX model file")
    p.add_argument("--output", required=True, help="folder for the profile files (as msprof's "
                   "--output; made if missing)")
    p.add_argument("--soc_version", default="Ascend910B1")
    p.add_argument("--input_shape", default="")
    p.add_argument("--precision_mode", default="must_keep_origin_dtype", choices=PRECISION_MODES)
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    _fusion_flags(p)


def _run_profile(args) -> int:
    import onnx

    from .compare import random_inputs
    from .pipeline import build
    from .runtime.profile_files import OP_SUMMARY, TRACE, check_profile_folder, launch_rows

    check_profile_folder(args.output)  # before the build, not after minutes of it
    config = _config(args, precision_mode=args.precision_mode)
    lib = build(args.model, target="ascend", config=config)  # its errors name a bad model
    lib.profile(reset=True)  # launches of this run only
    graph = onnx.load(args.model, load_external_data=False)  # the inputs' names and shapes
    lib.run(random_inputs(graph, config.input_shape, args.seed))
    records = lib.profile(output=args.output)
    rows = launch_rows(records, lib.fusion_report())
    print(f"{args.model} on {lib.soc_version}: {len(rows)} launch(es); ESTIMATED times "
          "(timing model from the emulator's counters, not measured)")
    print(f"  {'us':>9}  {'bound':<8} {'task type':<15} op name")
    for row in rows:
        duration = row["Task Duration(us)"]
        shown = f"{duration:9.3f}" if duration != "N/A" else f"{'N/A':>9}"
        print(f"  {shown}  {row['Bound']:<8} {row['Task Type']:<15} {row['Op Name']}")
    total = sum(r["Task Duration(us)"] for r in rows if r["Task Duration(us)"] != "N/A")
    print(f"  {total:9.3f}  total (estimate)")
    folder = Path(args.output)
    print(f"written: {folder / OP_SUMMARY}, {folder / TRACE} (open it in https://ui.perfetto.dev)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tvm-ascend", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log each stage")
    sub = parser.add_subparsers(dest="command", required=True)
    _compile_parser(sub)
    _explain_parser(sub)
    _tune_parser(sub)
    _retrain_parser(sub)
    _compare_parser(sub)
    _profile_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    # signal handlers can only be set from the main thread (main() may run in another)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return {"compile": _run_compile, "explain": _run_explain, "tune": _run_tune,
                "retrain": _run_retrain,
                "compare": _run_compare, "profile": _run_profile}[args.command](args)
    except AscendError as err:
        print(f"tvm-ascend: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:  # the writers' cleanup has run on the way here
        word, code = ("terminated", 143) if isinstance(stop, _Terminated) else ("interrupted", 130)
        # tune keeps the records it measured; only compile takes back all it wrote
        print(f"tvm-ascend: {word}{'; nothing written' if args.command == 'compile' else ''}",
              file=sys.stderr)
        return code
    finally:
        if main_thread:  # None: a handler set outside Python, which cannot be put back
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C, so that temporaries are cleaned up."""


def _on_sigterm(signum, frame):
    raise _Terminated()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
