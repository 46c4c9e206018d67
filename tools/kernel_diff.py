"""Show that a change left every printed kernel and fusion report as it was, or what it changed.

``python tools/kernel_diff.py --against REV`` builds a fixed corpus of models twice, with the
tree you are in and with commit ``REV`` (checked out into a temporary git worktree), and diffs
every kernel source and fusion report the two builds print. It exits 0 and prints ``kernels
unchanged`` when nothing differs, 1 with the differences otherwise. A refactor that claims to
be a pure move puts that line in its commit body.

The corpus (``--set``):

* ``quick`` (about 35 builds, a few minutes on 2 cores): the bundled demo at every fusion level
  on both SoCs, one file per model of ``tests/corpus`` (the real PyTorch exports) at one
  (level, SoC) pair each, and the first 20 graphs of the fuzzer's default sample at the pair the
  sample gives each;
* ``full`` (about 390 builds): the demo, every corpus file and the 40 sample graphs at every
  level on both SoCs.

Every model is written once, by the tree you are in, into the work folder, so both sides build
the same bytes (the fuzzer's generator may differ between commits). Builds are strict
(``strict=True``): a kernel that fails is an error line in the diff, not a quiet move to the
host. A build's wall time is kept apart (``timings.json``) and printed per side; it never counts
as a difference.

Other uses::

    python tools/kernel_diff.py dump --out DIR [--set quick]   # this tree's kernels into DIR
    python tools/kernel_diff.py compare OLD_DIR NEW_DIR        # diff two dumps

Only the public API is used (``tvm_ascend.build``, ``CompileConfig``, ``kernel_sources``,
``fusion_report``), so any commit since the compile cache's ``op_compiler_cache_mode`` landed
can be the other side.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LEVELS = ("off", "conservative", "aggressive")
SOCS = ("Ascend910B1", "Ascend310P3")
PAIRS = [(level, soc) for level in LEVELS for soc in SOCS]
QUICK_FUZZ_GRAPHS, FULL_FUZZ_GRAPHS = 20, 40
DIFF_LINES = 40  # of one file's unified diff, printed; the whole diff is in the work folder


# ---- the corpus (written by the tree under test) ---------------------------------------------
def write_models(tree: Path, models: Path, corpus_set: str) -> list[dict]:
    """Write every model of ``corpus_set`` into ``models`` and return the cases to build:
    ``{"name", "model", "level", "soc"}`` each."""
    sys.path.insert(0, str(tree))
    from tests.fuzz.generate import generate
    from tests.fuzz.run import tasks_for

    import onnx

    models.mkdir(parents=True, exist_ok=True)
    cases: list[dict] = []
    demo = models / "demo.onnx"
    shutil.copyfile(tree / "examples" / "demo.onnx", demo)
    cases += [_case("demo", demo, level, soc) for level, soc in PAIRS]
    corpus = sorted((tree / "tests" / "corpus").glob("*.onnx"))
    if corpus_set == "quick":
        corpus = _one_per_model(corpus)
    for i, path in enumerate(corpus):
        target = models / path.name
        shutil.copyfile(path, target)
        pairs = PAIRS if corpus_set == "full" else [PAIRS[i % len(PAIRS)]]
        cases += [_case(path.stem, target, level, soc) for level, soc in pairs]
    graphs = FULL_FUZZ_GRAPHS if corpus_set == "full" else QUICK_FUZZ_GRAPHS
    sampled = {index: (level, soc) for _, index, level, soc in
               tasks_for(0, range(graphs), per_graph=1)}
    for index in range(graphs):
        target = models / f"fuzz_0_{index}.onnx"
        onnx.save(generate(0, index).model, str(target))
        pairs = PAIRS if corpus_set == "full" else [sampled[index]]
        cases += [_case(target.stem, target, level, soc) for level, soc in pairs]
    return cases


def _one_per_model(files: list[Path]) -> list[Path]:
    """The first file of each model (``bert_dynamo_op17_fp16`` -> ``bert``)."""
    seen: dict[str, Path] = {}
    for path in files:
        seen.setdefault(path.stem.split("_")[0], path)
    return list(seen.values())


def _case(name: str, model: Path, level: str, soc: str) -> dict:
    return {"name": f"{name}__{level}__{soc}", "model": str(model), "level": level, "soc": soc}


# ---- one side's dump ---------------------------------------------------------------------
def build_case(case: dict, out: str) -> tuple[str, float]:
    """Build one case and write its kernels (``<kernel>.cpp``), its fusion report
    (``fusion_report.json``) or its error (``error.txt``) under ``out/<case name>/``."""
    import tvm_ascend
    from tvm_ascend import CompileConfig

    folder = Path(out) / case["name"]
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kdiff-cache-") as cache:
        config = CompileConfig(fusion_level=case["level"], soc_version=case["soc"],
                               build_cache=False, strict=True, cache_dir=cache,
                               op_compiler_cache_mode="disable")
        try:
            lib = tvm_ascend.build(case["model"], config=config)
        except Exception as err:  # the error is the case's result, compared like a kernel
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            (folder / "error.txt").write_text(f"{type(err).__name__}: {first}\n")
            return case["name"], time.perf_counter() - start
    seconds = time.perf_counter() - start
    for kernel, source in sorted(lib.kernel_sources().items()):
        (folder / f"{kernel}.cpp").write_text(source)
    report = json.dumps(lib.fusion_report(), indent=1, sort_keys=True, default=str)
    (folder / "fusion_report.json").write_text(report + "\n")
    return case["name"], seconds


def dump(cases: list[dict], out: Path, jobs: int) -> dict[str, float]:
    """Build every case into ``out`` with ``jobs`` worker processes; {case name: seconds}."""
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    context = multiprocessing.get_context("spawn")  # TVM's threads do not survive a fork
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(build_case, case, str(out)) for case in cases]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            name, seconds = future.result()
            timings[name] = seconds
            print(f"  [{done}/{len(cases)}] {name} {seconds:.1f} s", file=sys.stderr, flush=True)
    (out / "timings.json").write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")
    return timings


# ---- comparing two dumps -------------------------------------------------------------------
def compare(old: Path, new: Path) -> list[str]:
    """The differences between two dumps, as printable lines (empty: nothing differs)."""
    lines: list[str] = []
    names = sorted({p.relative_to(old).as_posix() for p in old.rglob("*") if p.is_file()}
                   | {p.relative_to(new).as_posix() for p in new.rglob("*") if p.is_file()})
    for name in names:
        if name == "timings.json":
            continue
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            lines.append(f"only in {'new' if b.exists() else 'old'}: {name}")
            continue
        before, after = a.read_text().splitlines(), b.read_text().splitlines()
        if before != after:
            diff = list(difflib.unified_diff(before, after, f"old/{name}", f"new/{name}",
                                             lineterm="", n=1))
            lines += diff[:DIFF_LINES]
            if len(diff) > DIFF_LINES:
                lines.append(f"... {len(diff) - DIFF_LINES} more diff lines in {name}")
    return lines


def counts(folder: Path) -> tuple[int, int, int]:
    """(builds, kernels, builds that failed) of a dump."""
    builds = [p for p in folder.iterdir() if p.is_dir()]
    kernels = sum(len(list(p.glob("*.cpp"))) for p in builds)
    failed = sum((p / "error.txt").exists() for p in builds)
    return len(builds), kernels, failed


# ---- the two sides -----------------------------------------------------------------------
def _tree_of(path: Path) -> Path:
    out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def _checkout(tree: Path, rev: str, where: Path) -> Path:
    """``rev`` of ``tree``'s repository as a detached worktree at ``where``, laid out as an
    installed package (``tvm_ascend.schedules`` and ``tvm_ascend.contrib`` are folders beside
    ``tvm_ascend`` in the repository; pyproject maps them in)."""
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(where), rev],
                   cwd=tree, check=True)
    for name in ("schedules", "contrib"):
        link = where / "tvm_ascend" / name
        if (where / name).is_dir() and not link.exists():
            link.symlink_to(Path("..") / name)
    return where


def _run_side(tree: Path, args: list[str]) -> None:
    """Run this script's subcommand ``args`` with ``tree``'s tvm_ascend on the path."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, str(Path(__file__).resolve()), *args, "--tree", str(tree)],
                   cwd=tree, env=env, check=True)


def _check_tree(tree: Path) -> None:
    """Refuse to dump if ``import tvm_ascend`` does not load ``tree`` (an installed copy
    elsewhere would make both sides the same)."""
    import tvm_ascend
    import tvm_ascend.schedules as schedules

    for module in (tvm_ascend, schedules):
        where = Path(module.__file__).resolve()
        if tree.resolve() not in where.parents:
            raise SystemExit(f"kernel_diff: {module.__name__} loads from {where}, not from "
                             f"{tree}; run with PYTHONPATH={tree}")


def against(rev: str, corpus_set: str, jobs: int, work: Path, tree: Path, only: str = ""
            ) -> int:
    """Dump ``tree`` and ``rev`` over the same models and compare; the exit status."""
    models, old, new = work / "models", work / "old", work / "new"
    _run_side(tree, ["models", "--out", str(models), "--set", corpus_set, "--only", only])
    base = _checkout(tree, rev, work / "base")
    try:
        for side, root in ((old, base), (new, tree)):
            print(f"building with {root} ...", file=sys.stderr, flush=True)
            _run_side(root, ["dump", "--cases", str(models / "cases.json"), "--out", str(side),
                             "--jobs", str(jobs)])
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=tree)
    return report(old, new, rev)


def report(old: Path, new: Path, rev: str) -> int:
    differences = compare(old, new)
    builds, kernels, failed = counts(new)
    seconds = {side.name: sum(json.loads((side / "timings.json").read_text()).values())
               for side in (old, new)}
    times = f"summed build time {seconds['old']:.0f} s at {rev}, {seconds['new']:.0f} s here"
    if not differences:
        print(f"kernels unchanged: {builds} builds, {kernels} kernels, {failed} failed builds "
              f"identical to {rev} ({times})")
        return 0
    print("\n".join(differences))
    changed = len({line.split("/")[1] for line in differences if line.startswith("+++ new/")})
    print(f"kernels CHANGED: {changed} of {builds} builds differ from {rev} ({times}); "
          f"dumps in {old.parent}")
    return 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="against",
                        choices=("against", "models", "dump", "compare"))
    parser.add_argument("dirs", nargs="*", help="compare: the OLD and NEW dump folders")
    parser.add_argument("--against", dest="rev", default="HEAD",
                        help="the commit to compare with (default HEAD)")
    parser.add_argument("--set", dest="corpus_set", choices=("quick", "full"), default="quick")
    parser.add_argument("--only", default="", help="build only the cases whose name holds "
                        "this text (e.g. demo, bert, fuzz, Ascend310P3)")
    parser.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, help="models/dump: the folder to write")
    parser.add_argument("--cases", type=Path, help="dump: cases.json written by `models`")
    parser.add_argument("--tree", type=Path, help="the repository to build (default: the one "
                        "holding the current folder)")
    parser.add_argument("--work", type=Path, help="work folder (default: a new temporary one, "
                        "kept when kernels differ)")
    args = parser.parse_args(argv)
    tree = (args.tree or _tree_of(Path.cwd())).resolve()
    if args.command == "compare":
        old, new = map(Path, args.dirs)
        differences = compare(old, new)
        print("\n".join(differences) if differences else "kernels unchanged")
        return 1 if differences else 0
    if args.command == "models":
        cases = [case for case in write_models(tree, args.out, args.corpus_set)
                 if args.only in case["name"]]
        (args.out / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
        return 0
    if args.command == "dump":
        _check_tree(tree)
        if args.cases is None:
            models = Path(tempfile.mkdtemp(prefix="kdiff-models-"))
            cases = write_models(tree, models, args.corpus_set)
        else:
            cases = json.loads(args.cases.read_text())
        dump([case for case in cases if args.only in case["name"]], args.out, args.jobs)
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="kernel-diff-"))
    status = against(args.rev, args.corpus_set, args.jobs, work, tree, args.only)
    if status == 0 and args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
