"""Measure the cold compile time of one model with this tree and with another commit.

``python tools/cold_compile.py --against REV`` writes the model once (BERT-base b1_s128 float16
from ``benchmarks/models`` unless ``--model`` names an ONNX file), then builds and exports it
``--repeat`` times with each tree, alternating the two so a change in the machine's load hits
both alike. Every build runs in a fresh process with an empty compile cache (no build-cache or
kernel-cache hit), at the default fusion level unless ``--level`` says otherwise. The
emulator's runtime object, which a machine compiles once for all models, is built before the
clock starts, as are the unit's precompiled headers where the tree has them. Per build it records the wall time of ``build`` and of ``export_library`` and
the CPU seconds of the process and of its children (g++), and prints the medians side by side
with the ratio.

The CPU seconds are the figure to quote on a shared machine: the wall time counts whatever
else the cores were doing.

Example::

    python tools/cold_compile.py --against 3dd57f3 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_diff import _checkout, _tree_of  # noqa: E402 - a sibling script, not a package

FIGURES = ("build_s", "export_s", "cpu_s", "gxx_cpu_s")


def write_model(out: Path) -> Path:
    """BERT-base b1_s128 float16 as the benchmarks build it, written to ``out``."""
    import onnx

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.harness import BenchConfig

    config = BenchConfig("bert_base", "b1_s128", "float16", knobs=(("batch", 1), ("seq", 128)))
    onnx.save(config.onnx_model(), str(out))
    return out


def measure(model: Path, level: str, soc: str) -> dict:
    """One cold build and export of ``model`` in this process (run in a fresh one)."""
    import tvm_ascend
    from tvm_ascend import CompileConfig
    from tvm_ascend.runtime import toolchain

    with tempfile.TemporaryDirectory(prefix="cold_compile_") as cache:
        os.environ["TVM_ASCEND_CACHE_DIR"] = cache
        # once per machine, not per model: the runtime object and (where the tree has them)
        # the unit's precompiled headers
        toolchain.emulator_runtime_object(soc, cache)
        if hasattr(toolchain, "unit_header"):
            toolchain.unit_header(soc, cache)
        config = CompileConfig(soc_version=soc, cache_dir=cache, **(
            {"fusion_level": level} if level != "default" else {}))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu0, start = time.process_time(), time.perf_counter()
        lib = tvm_ascend.build(str(model), config=config)
        built = time.perf_counter()
        lib.export_library(str(Path(cache) / "model.so"))
        done = time.perf_counter()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {"build_s": built - start, "export_s": done - built,
                "cpu_s": time.process_time() - cpu0,
                "gxx_cpu_s": (after.ru_utime + after.ru_stime)
                - (before.ru_utime + before.ru_stime),
                "npu_kernels": lib.fusion_report()["npu_kernels"]}


def _measure_in(tree: Path, model: Path, level: str, soc: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "measure",
                          "--model", str(model), "--level", level, "--soc", soc],
                         cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(rows: dict, rev: str) -> str:
    names = list(rows)
    lines = ["| figure (median) | " + " | ".join(names) + f" | {names[0]} / {names[1]} |",
             "|---|" + "---|" * (len(names) + 1)]
    for figure in FIGURES + ("total_s",):
        values = [statistics.median(r[figure] for r in rows[n]) for n in names]
        ratio = values[0] / values[1] if values[1] else float("nan")
        lines.append(f"| {figure} | " + " | ".join(f"{v:.2f}" for v in values)
                     + f" | {ratio:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="against", choices=("against", "measure"))
    parser.add_argument("--against", dest="rev", default="HEAD")
    parser.add_argument("--model", type=Path, help="an ONNX file (default: BERT-base b1_s128 "
                        "float16 from benchmarks/models)")
    parser.add_argument("--level", default="default", help="fusion level (default: the "
                        "CompileConfig default)")
    parser.add_argument("--soc", default="Ascend910B1")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure(args.model, args.level, args.soc)))
        return 0
    tree = _tree_of(Path.cwd())
    with tempfile.TemporaryDirectory(prefix="cold_compile_") as work:
        work = Path(work)
        model = args.model or write_model(work / "model.onnx")
        base = _checkout(tree, args.rev, work / "base")
        rows = {args.rev: [], "this tree": []}
        try:
            for index in range(args.repeat):
                for name, root in ((args.rev, base), ("this tree", tree)):
                    row = _measure_in(root, model, args.level, args.soc)
                    row["total_s"] = row["build_s"] + row["export_s"]
                    rows[name].append(row)
                    print(f"[{index + 1}/{args.repeat}] {name}: " + ", ".join(
                        f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in row.items()), file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=tree)
    print(_table(rows, args.rev))
    return 0


if __name__ == "__main__":
    sys.exit(main())
