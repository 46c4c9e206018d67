"""Running fuzz cases: build at a fusion level and SoC, run, compare with onnxruntime, classify.

An outcome's ``kind`` is one of ``ok``, ``build`` (``tvm_ascend.build`` raised), ``compile``
(g++ rejected the printed kernels, raised by the first ``lib.run``), ``run`` (running raised),
``mismatch`` (shape, dtype or values differ from onnxruntime beyond ``TOLERANCES``; a graph
with float16 tensors also matches if it matches onnxruntime run node by node, each float16
tensor rounded as the graph declares: ``reference_per_node``), ``crash``
(the process died: a signal), ``timeout``, or ``discarded`` (onnxruntime rejected the graph: a
generator bug, counted apart). Every outcome names its ``(seed, index, level, soc)``, which is
all it takes to reproduce it.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .generate import Case, generate

LEVELS = ("off", "conservative", "aggressive")
SOCS = ("Ascend910B1", "Ascend310P3")
DTYPE_WORDS = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
               "bfloat16"}
FAILURES = ("build", "compile", "run", "mismatch", "crash", "timeout")


@dataclass
class Outcome:
    """What one (case, level, soc) run gave."""
    seed: int
    index: int
    level: str
    soc: str
    kind: str
    cause: str = ""           # normalised: groups outcomes of one bug
    detail: str = ""          # the first lines of the error, or the errors of a mismatch
    size: tuple = (0, 0)      # Case.size, to pick the smallest case of a cause
    ops: list = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of the case's process and its g++: what it costs on an idle core

    @property
    def case_id(self) -> str:
        return f"{self.seed}-{self.index}"

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


def tolerances() -> dict:
    """The test suite's one tolerance table (tests/conftest.py), also outside pytest."""
    tests_dir = str(Path(__file__).resolve().parents[1])
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    from conftest import TOLERANCES

    return TOLERANCES


def compile_config(level: str, soc: str):
    """The CompileConfig of a fuzz build: no whole-build cache (each case is new anyway), and
    ``strict`` where this tree's CompileConfig has it, so a failing kernel is an error here
    instead of a silent move to the host."""
    from tvm_ascend import CompileConfig

    options = {"fusion_level": level, "soc_version": soc, "build_cache": False}
    if "strict" in CompileConfig.__dataclass_fields__:
        options["strict"] = True
    return CompileConfig(**options)


def tolerance_key(case: Case, dtype) -> str:
    """The row of TOLERANCES an output is compared with: float16 wherever the graph computes
    in float16; float32_model where a MatMul or a long reduction sums in another order."""
    if case.half or dtype == np.float16:
        return "float16"
    return "float32_model" if case.accumulates else "float32"


def reference(case: Case) -> list:
    """onnxruntime's outputs of ``case`` (CPU provider): what every build is compared with."""
    import onnxruntime as ort

    session = ort.InferenceSession(case.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, case.feeds)


def reference_per_node(case: Case) -> list:
    """onnxruntime's outputs of ``case`` with every tensor rounded to the dtype the graph
    declares: each node run alone, fed what the nodes before it gave.

    onnxruntime runs a chain of float16 nodes that have no float16 CPU kernel (Softmax,
    LayerNormalization, Add, ...) in float32 with no rounding between them (its
    InsertCastTransformer casts at the chain's ends only), even where an intermediate is a
    graph output. A build that stores each float16 tensor, as separate kernels do, rounds
    there, as the ONNX graph says; where a node magnifies its input's rounding (a
    LayerNormalization of a near-constant row, its variance far below epsilon) the two
    results differ beyond any fixed tolerance, and both are onnxruntime's."""
    import onnxruntime as ort

    graph = case.model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in
             onnx.shape_inference.infer_shapes(case.model).graph.value_info}
    types.update({v.name: v.type.tensor_type.elem_type for v in graph.output})
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    values.update(case.feeds)
    for node in graph.node:
        names = [n for n in dict.fromkeys(node.input) if n]
        inputs = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(values[n].dtype), values[n].shape) for n in names]
        outputs = [helper.make_tensor_value_info(n, types[n], None) for n in node.output if n]
        model = helper.make_model(helper.make_graph([node], "node", inputs, outputs),
                                  opset_imports=case.model.opset_import)
        model.ir_version = case.model.ir_version
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        results = session.run(None, {n: values[n] for n in names})
        values.update(zip([n for n in node.output if n], results))
    return [values[v.name] for v in graph.output]


def compare(case: Case, outs: list, refs: list) -> str:
    """"" when ``outs`` match ``refs``, else one line per output that differs."""
    table = tolerances()
    problems = []
    for k, (out, ref) in enumerate(zip(outs, refs)):
        out, ref = np.asarray(out), np.asarray(ref)
        name = case.model.graph.output[k].name
        if out.shape != ref.shape:
            problems.append(f"output {name}: shape {out.shape}, onnxruntime {ref.shape}")
        elif out.dtype != ref.dtype:
            problems.append(f"output {name}: dtype {out.dtype}, onnxruntime {ref.dtype}")
        elif ref.dtype.kind != "f":
            wrong = int(np.sum(out != ref))
            if wrong:
                problems.append(f"output {name}: {wrong} of {ref.size} {ref.dtype} values differ")
        else:
            key = tolerance_key(case, ref.dtype)
            tol = table[key]
            a, e = out.astype(np.float64), ref.astype(np.float64)
            bad = ~np.isclose(a, e, **tol) & ~(np.isnan(a) & np.isnan(e))
            if bad.any():
                err = np.abs(a - e)
                problems.append(
                    f"output {name}: {int(bad.sum())} of {ref.size} values off, max abs error "
                    f"{np.nanmax(err):.3g}, max rel error "
                    f"{np.nanmax(err / np.maximum(np.abs(e), 1e-30)):.3g} ({key} tolerance)")
    if len(outs) != len(refs):
        problems.append(f"{len(outs)} outputs, onnxruntime {len(refs)}")
    return "\n".join(problems)


def normalise(text: str) -> str:
    """One line that names a bug whatever graph showed it: g++'s first error, else the first
    line; tensor names and numbers replaced by #."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    gxx = [ln for ln in lines if " error: " in ln]
    line = gxx[0].split(" error: ", 1)[1] if gxx else (lines[0] if lines else "")
    line = re.sub(r"\b\w+\[[^\]]*\]", "#[...]", line)    # an indexed buffer: where, not what
    line = re.sub(r"(\w\*\s*)\w+", r"\1#", line)          # a pointer's name, as in 'uint8_t* x'
    line = re.sub(r"\b\w*\d\w*\b", lambda m: m[0] if _kept(m[0]) else "#", line)
    return line[:160]


def _kept(word: str) -> bool:
    """Words with digits that say what went wrong rather than where: dtypes, C integer types."""
    return word in DTYPE_WORDS or re.fullmatch(r"(u?int|b?float)\d+(_t)?", word) is not None


def run_case(seed: int, index: int, level: str, soc: str) -> Outcome:
    """Generate, build, run and compare one case, in this process."""
    return run_built(generate(seed, index), level, soc)


def run_built(case: Case, level: str, soc: str) -> Outcome:
    """Build, run and compare ``case`` at (level, soc), in this process."""
    start = time.time()
    outcome = Outcome(case.seed, case.index, level, soc, "ok", size=case.size, ops=case.ops)
    try:
        refs = reference(case)
    except Exception as err:  # noqa: BLE001 - any refusal is the generator's bug
        return _failed(outcome, "discarded", err, start)
    import tvm_ascend
    from tvm_ascend.errors import ToolchainError

    try:
        lib = tvm_ascend.build(case.model, target="ascend", config=compile_config(level, soc))
    except Exception as err:  # noqa: BLE001 - classifying every failure is the point
        return _failed(outcome, "build", err, start)
    try:
        outs = lib.run(case.feeds)
    except ToolchainError as err:
        return _failed(outcome, "compile", err, start)
    except Exception as err:  # noqa: BLE001
        return _failed(outcome, "run", err, start)
    problems = compare(case, outs, refs)
    if problems and case.half and not compare(case, outs, reference_per_node(case)):
        problems = ""  # right as the graph rounds its float16 tensors (reference_per_node)
        outcome.detail = "matches onnxruntime run node by node, not run whole"
    if problems:
        outcome.kind, outcome.detail = "mismatch", problems
        outcome.cause = "mismatch: " + _mismatch_cause(problems.splitlines()[0])
    outcome.seconds = time.time() - start
    return outcome


def _mismatch_cause(problem: str) -> str:
    """The kind of a compare() line without its output name or figures."""
    what = problem.split(": ", 1)[-1]
    if " values off" in what:
        return "values off (" + what.rsplit("(", 1)[-1]
    if " values differ" in what:
        return what.split(" ", 3)[-1]
    return normalise(what)


def _failed(outcome: Outcome, kind: str, err: BaseException, start: float) -> Outcome:
    text = str(err)
    outcome.kind = kind
    outcome.cause = f"{kind}: {type(err).__name__}: {normalise(text)}"
    outcome.detail = "\n".join(text.strip().splitlines()[:40]) or \
        "".join(traceback.format_exception_only(type(err), err))
    outcome.seconds = time.time() - start
    return outcome


# ---- many cases, each in a process of its own ------------------------------------------------
def _child(conn, task):
    try:
        outcome = run_case(*task)
        outcome.cpu_seconds = _cpu_seconds()
        conn.send(asdict(outcome))
    except BaseException as err:  # noqa: BLE001 - the generator itself failed
        seed, index, level, soc = task
        conn.send(asdict(_failed(Outcome(seed, index, level, soc, "discarded"), "discarded",
                                 err, time.time())))
    conn.close()


def _cpu_seconds() -> float:
    import resource

    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_many(tasks, jobs: int = 1, timeout: float = 600.0, on_outcome=None) -> list[Outcome]:
    """Run ``(seed, index, level, soc)`` tasks, ``jobs`` at a time, each in a process forked
    from a server that imported tvm_ascend once, so that a kernel that kills its process (an
    emulator abort, a segfault) is one ``crash`` outcome, not the end of the run."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__.rsplit(".", 1)[0] + ".generate", "tvm_ascend",
                                "onnxruntime", "onnx"])
    pending, running, results = list(tasks)[::-1], [], []
    while pending or running:
        while pending and len(running) < max(1, jobs):
            task = pending.pop()
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(send, task), daemon=True)
            proc.start()
            send.close()
            running.append((proc, recv, task, time.time()))
        time.sleep(0.05)
        for item in list(running):
            proc, recv, task, began = item
            outcome = None
            if recv.poll():
                try:
                    outcome = Outcome(**recv.recv())
                except EOFError:
                    outcome = None
                proc.join()
            elif not proc.is_alive():
                proc.join()
                code = proc.exitcode
                cause = (f"crash: {signal.Signals(-code).name}" if code and code < 0 else
                         f"crash: exit status {code}")
                outcome = Outcome(*task, kind="crash", cause=cause, detail=cause)
            elif time.time() - began > timeout:
                proc.kill()
                proc.join()
                outcome = Outcome(*task, kind="timeout", cause=f"timeout: over {timeout:.0f} s")
            if outcome is None:
                continue
            if outcome.kind in ("crash", "timeout"):
                case = generate(task[0], task[1])
                outcome.size, outcome.ops = case.size, case.ops
            running.remove(item)
            results.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
    return results


def combos(levels=LEVELS, socs=SOCS) -> list[tuple]:
    """Every (level, soc) pair, levels outermost."""
    return [(level, soc) for level in levels for soc in socs]


def tasks_for(seed: int, indices, levels=LEVELS, socs=SOCS, per_graph: int | None = None):
    """The tasks of graphs ``indices``: each at every (level, soc), or at ``per_graph`` of
    them, rotated over the graphs so that every combination is covered as often."""
    pairs = combos(levels, socs)
    per_graph = len(pairs) if not per_graph else min(per_graph, len(pairs))
    tasks = []
    for n, index in enumerate(indices):
        for k in range(per_graph):
            level, soc = pairs[(n * per_graph + k) % len(pairs)]
            tasks.append((seed, index, level, soc))
    return tasks


def summary(outcomes: list[Outcome]) -> str:
    """Counts, and one row per cause: how many runs, graphs, the levels/SoCs and the smallest
    case."""
    graphs = {o.case_id for o in outcomes}
    failed = [o for o in outcomes if o.failed]
    lines = [f"{len(outcomes)} runs of {len(graphs)} graphs: "
             f"{sum(o.kind == 'ok' for o in outcomes)} ok, {len(failed)} failed "
             f"({len({o.case_id for o in failed})} graphs), "
             f"{sum(o.kind == 'discarded' for o in outcomes)} discarded (generator bugs)"]
    causes: dict[str, list[Outcome]] = {}
    for o in outcomes:
        if o.kind != "ok":
            causes.setdefault(o.cause, []).append(o)
    rows = sorted(causes.items(), key=lambda kv: -len(kv[1]))
    if rows:
        lines.append(f"{'runs':>5} {'graphs':>6}  {'smallest (seed-index level soc)':<40} cause")
    for cause, group in rows:
        small = min(group, key=lambda o: o.size)
        where = f"{small.case_id} {small.level} {small.soc}"
        lines.append(f"{len(group):>5} {len({o.case_id for o in group}):>6}  {where:<40} "
                     f"{cause}")
    return "\n".join(lines)


def save_failures(outcomes: list[Outcome], folder) -> Path:
    """Write each failing graph as ``<seed>-<index>.onnx`` with its feeds (``.npz``) and
    outcomes (``.txt``) into ``folder``."""
    import onnx

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for o in outcomes:
        if not o.failed:
            continue
        case = generate(o.seed, o.index)
        onnx.save(case.model, folder / f"{o.case_id}.onnx")
        np.savez(folder / f"{o.case_id}.npz", **case.feeds)
        with open(folder / f"{o.case_id}.txt", "a") as log:
            log.write(f"{o.level} {o.soc} {o.kind}: {o.cause}\n{o.detail}\n\n")
    return folder


def default_cache() -> None:
    """Kernels of fuzz graphs are compiled into a private cache, not the user's ~/.cache."""
    if "TVM_ASCEND_CACHE_DIR" not in os.environ:
        import tempfile

        os.environ["TVM_ASCEND_CACHE_DIR"] = tempfile.mkdtemp(prefix="tvm_ascend_fuzz_")
