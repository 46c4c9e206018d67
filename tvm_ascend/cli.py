"""``tvm-ascend``: the command line, with flags spelled as ATC spells them.

Example
-------
    tvm-ascend compile --model model.onnx --output model.so --soc_version Ascend910B1 \\
        --input_shape "x:1,3,224,224"
"""
from __future__ import annotations

import argparse
import logging
import sys

from .config import FUSION_LEVELS, PRECISION_MODES, CompileConfig
from .errors import AscendError, FusionConfigError
from .frontend import parse_input_shape

ONNX_FRAMEWORK = 5  # ATC's --framework number for ONNX


def _compile_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile an ONNX model into one deployable .so")
    p.add_argument("--model", required=True, help="ONNX model file")
    p.add_argument("--output", required=True,
                   help="output library; '.so' is added when the name has no suffix")
    p.add_argument("--framework", type=int, default=ONNX_FRAMEWORK,
                   help="ATC framework id; only 5 (ONNX) is supported")
    p.add_argument("--soc_version", default="Ascend910B1", help="e.g. Ascend910B1, Ascend310P3")
    p.add_argument("--input_shape", default="", help='static shapes, "x:1,3,224,224;y:8"')
    p.add_argument("--fusion_level", default="conservative", choices=FUSION_LEVELS)
    p.add_argument("--precision_mode", default="must_keep_origin_dtype", choices=PRECISION_MODES,
                   help="only must_keep_origin_dtype is implemented; others are refused")
    p.add_argument("--dump_graph", action="store_true",
                   help="write fusion_report.json and kernel sources into --dump_path")
    p.add_argument("--dump_path", default="tvm_ascend_dump")
    p.add_argument("--report", default=None, help="also write the fusion report to this file")


def _run_compile(args) -> int:
    from .partition.report import write_json_atomic
    from .pipeline import build

    if args.framework != ONNX_FRAMEWORK:
        raise FusionConfigError(f"--framework={args.framework}: only 5 (ONNX) is supported")
    output = args.output if "." in args.output.rsplit("/", 1)[-1] else args.output + ".so"
    config = CompileConfig(soc_version=args.soc_version, fusion_level=args.fusion_level,
                           precision_mode=args.precision_mode, dump_graph=args.dump_graph,
                           dump_path=args.dump_path,
                           input_shape=parse_input_shape(args.input_shape))
    lib = build(args.model, target="ascend", config=config.with_env())
    lib.export_library(output)
    report = lib.fusion_report()
    if args.report:
        write_json_atomic(args.report, report)
    print(f"{args.model} -> {output} ({report['soc_version']}): "
          f"{report['npu_kernels']} NPU kernel(s) for {report['ops']} op(s), "
          f"{report['host_groups']} group(s) on the host")
    for op in report["host_ops"]:
        print(f"  host: {op['node'] or op['var']} ({op['op']}): {op['why']}")
    print()
    print(lib.report)
    return 0


def _explain_parser(sub) -> None:
    p = sub.add_parser("explain", help="why an ONNX node is, or is not, fused with its neighbours")
    p.add_argument("--model", required=True, help="ONNX model file")
    p.add_argument("--node", required=True, help="ONNX node name")
    p.add_argument("--soc_version", default="Ascend910B1")
    p.add_argument("--input_shape", default="")
    p.add_argument("--fusion_level", default="conservative", choices=FUSION_LEVELS)


def _run_explain(args) -> int:
    from .partition.report import explain_node
    from .pipeline import build

    config = CompileConfig(soc_version=args.soc_version, fusion_level=args.fusion_level,
                           input_shape=parse_input_shape(args.input_shape))
    report = build(args.model, target="ascend", config=config.with_env()).fusion_report()
    print(explain_node(report, args.node))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tvm-ascend", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log each stage")
    sub = parser.add_subparsers(dest="command", required=True)
    _compile_parser(sub)
    _explain_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    try:
        return {"compile": _run_compile, "explain": _run_explain}[args.command](args)
    except AscendError as err:
        print(f"tvm-ascend: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
