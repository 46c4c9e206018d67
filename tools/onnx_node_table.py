"""ONNX's own backend node tests through ``tvm_ascend.build``: what passes, and where it runs.

The onnx wheel may not ship ``onnx/backend/test/data/node`` (1.23 does not); the same cases
(models, inputs and expected outputs, numpy seeded with 0 before every export) are then
generated in memory from ``onnx.backend.test.case.node``, exactly as ONNX's
``backend-test-tools generate-data`` writes them to disk. Nothing is downloaded.

Every case is classified:

* ``not_applicable``: sequence / optional / map / string values, the frontend cannot import
  it, or its Relax lowering holds no op of the ``ascend.*`` pattern table (the partition's
  claim), with the reason;
* ``passed``: built, run, and every output matches within ``TOLERANCES`` of its dtype
  (NaN-aware); ``where`` says whether its ops ran on the NPU, the host, or both;
* ``known_limit``: failed in a way recorded in ``onnx_node_limits`` (a test's entry in
  ``KNOWN_LIMITS`` or a ``LIMIT_RULES`` family; the reason is quoted in the table);
* ``failed``: any other mismatch or crash, with the first line of the error;
* ``not_run``: a table written from an interrupted run's log (``--no-run``) has not built it.

Regenerate the committed table (``tests/ONNX_NODE_TESTS.md`` and its JSON twin)::

    python -m tools.onnx_node_table --write          # from the repository root

Example
-------
>>> from tools.onnx_node_table import run_node_tests             # doctest: +SKIP
>>> rows = run_node_tests(["test_relu", "test_argmax_default_axis_example"])  # doctest: +SKIP
>>> [(r["test"], r["result"], r["where"]) for r in rows]   # doctest: +SKIP
[('test_relu', 'passed', 'npu'), ('test_argmax_default_axis_example', 'not_applicable', '')]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

# KNOWN_LIMITS is re-exported: callers read ``onnx_node_table.KNOWN_LIMITS``
from .onnx_node_limits import KNOWN_LIMITS, limits_table, with_known_limit  # noqa: F401

# The table is a record of the test suite's reach, kept beside the tests (README points there);
# this script, which writes it, is no test.
TESTS = Path(__file__).resolve().parents[1] / "tests"
TABLE_MD = TESTS / "ONNX_NODE_TESTS.md"
TABLE_JSON = TESTS / "ONNX_NODE_TESTS.json"
COMMAND = "python -m tools.onnx_node_table --write"
RESULTS = ("passed", "failed", "known_limit", "not_applicable", "not_run")


def _suite_tolerances() -> dict:
    """The test suite's one tolerance table (tests/conftest.py), also outside pytest."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from conftest import TOLERANCES as table

    return table


# Tolerances per output dtype, the suite's rows: float32 / float16 one kernel on the vector
# unit, float64 on the host (llvm) where only a reduction's order differs; integers and bool
# must match exactly.
TOLERANCES = {dtype: _suite_tolerances()[dtype] for dtype in ("float64", "float32", "float16")}
EXACT = {"rtol": 0.0, "atol": 0.0}

# seconds one batch may take (build + run) before its worker is stopped and the batch split;
# a build takes 5-60 s on a loaded 2-core machine, a batch of 24 a few minutes
CASE_TIMEOUT_S = 900


# ---- the cases -----------------------------------------------------------------------------
def _node_data_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


def _case_from_dir(path: Path) -> dict:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path / "model.onnx"))
    data = path / "test_data_set_0"

    def read(prefix: str) -> list:
        files = sorted(data.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        return [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in files]

    return {"name": path.name, "model": model, "inputs": read("input"),
            "outputs": read("output")}


@lru_cache(maxsize=1)
def node_cases() -> dict[str, dict]:
    """Every ONNX backend node test: ``{name: {"name", "model", "inputs", "outputs"}}``.

    Read from ``onnx/backend/test/data/node`` where the onnx package ships it, else generated
    in memory from ``onnx.backend.test.case.node`` (about 15 s; the same data).
    """
    data_dir = _node_data_dir()
    if data_dir.is_dir():
        return {p.name: _case_from_dir(p) for p in sorted(data_dir.iterdir())
                if (p / "model.onnx").exists()}
    from onnx.backend.test.case import node

    with warnings.catch_warnings():  # the exporters overflow casts on purpose
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    return {c.name: {"name": c.name, "model": c.model, "inputs": list(c.data_sets[0][0]),
                     "outputs": list(c.data_sets[0][1])} for c in cases if c.data_sets}


def load_cases(names, modules) -> dict:
    """Only the named cases: ``{name: case}``, generating just the ``onnx.backend.test.case.node``
    ``modules`` that export them (a second, not fifteen, when the data is not on disk).

    Example
    -------
    >>> load_cases(["test_relu"], ["relu"])["test_relu"]["outputs"][0].shape   # doctest: +SKIP
    (3, 4, 5)
    """
    import importlib

    data_dir = _node_data_dir()
    if data_dir.is_dir():
        return {name: _case_from_dir(data_dir / name) for name in names}
    node = importlib.import_module("onnx.backend.test.case.node")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in modules:  # exporting runs when a module's classes are defined
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    found = {c.name: c for c in node._NodeTestCases if c.name in set(names)}  # noqa: SLF001
    missing = sorted(set(names) - set(found))
    if missing:
        raise KeyError(f"node tests {missing} are not exported by modules {sorted(modules)}")
    return {name: {"name": name, "model": found[name].model,
                   "inputs": list(found[name].data_sets[0][0]),
                   "outputs": list(found[name].data_sets[0][1])} for name in names}


def _as_array(value):
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


# ---- the claim -----------------------------------------------------------------------------
def _pattern_ops(pattern, found: set) -> None:
    """Names of the Relax ops a DFPattern matches (walks call / alternative sub-patterns)."""
    from tvm import ir
    from tvm.relax.dpl import pattern as dpl

    if isinstance(pattern, dpl.ExprPattern) and isinstance(pattern.expr, ir.Op):
        found.add(pattern.expr.name)
    elif isinstance(pattern, dpl.CallPattern):
        _pattern_ops(pattern.op, found)
        for arg in pattern.args or []:
            _pattern_ops(arg, found)
    elif isinstance(pattern, (dpl.OrPattern, dpl.AndPattern)):
        _pattern_ops(pattern.left, found)
        _pattern_ops(pattern.right, found)


@lru_cache(maxsize=1)
def claimed_ops() -> frozenset:
    """Relax ops the partition claims (each may still be refused per call): those of the
    ``ascend.*`` pattern table, and those its check families answer without a pattern of their
    own (module-level op lists such as pooling's ``POOL_OPS``)."""
    import importlib
    import pkgutil

    from tvm_ascend.partition import patterns

    found: set = set()
    for entry in patterns.pattern_table():
        _pattern_ops(entry[1], found)
    for info in pkgutil.iter_modules(patterns.__path__):
        module = importlib.import_module(f"{patterns.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, (dict, tuple, list, set, frozenset)):
                found.update(v for v in value if isinstance(v, str) and v.startswith("relax."))
    return frozenset(found)


def stale_not_applicable(row: dict) -> bool:
    """Whether a logged not_applicable row lowers to an op the partition claims now."""
    marker = "not in the ascend.* claim: lowers to "
    if row["result"] != "not_applicable" or not row["reason"].startswith(marker):
        return False
    return bool(set(row["reason"][len(marker):].split(", ")) & claimed_ops())


def _relax_ops(mod) -> list[str]:
    from tvm import relax

    names = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = getattr(binding.value, "op", None)
            if isinstance(binding.value, relax.Call) and hasattr(op, "name"):
                names.append(op.name)
    return list(dict.fromkeys(names))


def _value_kind_problem(model) -> str:
    """Why the graph's interface is out of scope (non-tensor or string values), or ''."""
    from onnx import TensorProto

    for value in list(model.graph.input) + list(model.graph.output):
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            return f"{value.name!r} is a {kind.replace('_type', '')} value (tensors only)"
        if value.type.tensor_type.elem_type == TensorProto.STRING:
            return f"{value.name!r} is a string tensor"
    return ""


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return f"{type(err).__name__}: {text.splitlines()[0]}"[:300]


def applicability(case: dict) -> tuple[str, list[str]]:
    """('' or why the case is not applicable, the Relax ops of its lowering)."""
    from tvm_ascend.frontend import load_model
    from tvm_ascend.prepare import prepare

    problem = _value_kind_problem(case["model"])
    if problem:
        return problem, []
    try:
        mod = prepare(load_model(case["model"]))
    except Exception as err:  # noqa: BLE001 - any import failure makes the case inapplicable
        return f"frontend cannot import it: {_first_line(err)}", []
    ops = _relax_ops(mod)
    if not set(ops) & claimed_ops():
        lowered = ", ".join(ops) if ops else "nothing (folded to constants)"
        return f"not in the ascend.* claim: lowers to {lowered}", ops
    return "", ops


# ---- one case ------------------------------------------------------------------------------
def tolerance(dtype) -> dict:
    """rtol/atol for outputs of ``dtype`` (exact for integers and bool)."""
    return TOLERANCES.get(str(np.dtype(dtype)), EXACT)


def compare(actual, expected) -> str:
    """'' when ``actual`` matches ``expected`` (NaN where NaN), else what differs."""
    expected = _as_array(expected)
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != expected {expected.shape}"
    # ml_dtypes' bfloat16 / float8 / float4 are numpy kind 'V' (but float8_e5m2): floats too,
    # compared exactly (tolerance) but NaN-aware, since NaN != NaN
    if expected.dtype.kind in "fc" or str(expected.dtype).startswith(("bfloat", "float")):
        tol = tolerance(expected.dtype)
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        if not np.array_equal(np.isnan(a), np.isnan(e)):
            return "NaN at other positions than expected"
        ok = np.isclose(a, e, equal_nan=True, **tol) | (a == e)  # inf == inf
        if not ok.all():
            bad = np.argwhere(~ok)[0]
            index = tuple(int(i) for i in bad)
            return (f"{int((~ok).sum())}/{ok.size} values off (rtol {tol['rtol']:g}, atol "
                    f"{tol['atol']:g}); at {index}: {a[index]!r} vs {e[index]!r}")
        return ""
    if not np.array_equal(actual.astype(expected.dtype), expected):
        return f"{int((actual != expected).sum())}/{expected.size} values differ (exact dtype)"
    return ""


def _where(report: dict) -> tuple[str, str]:
    """('npu' | 'host' | 'npu+host' | 'none', why the host part runs there) from the report.

    A test of a batch is placed by ``where_alone``: in a merged graph the importer's ONNX node
    names credit helper ops to neighbouring nodes, which may belong to another test."""
    launched = [g for g in report["groups"] if g.get("launch", True)]
    npu = any(g["on_npu"] for g in launched)
    host = [g for g in launched if not g["on_npu"]]
    why = ""
    if host:
        reasons = [op["why"] for g in host for op in g["ops"] if not op["supported"]]
        why = reasons[0] if reasons else host[0].get("reason", "")
    where = "npu+host" if npu and host else "npu" if npu else "host" if host else "none"
    return where, why


def where_alone(case: dict) -> tuple[str, str]:
    """``_where`` of the case partitioned alone, as ``tvm_ascend.build`` would (no g++): the
    place a test of a batch runs when it is built by itself."""
    import tvm_ascend

    result = tvm_ascend.partition_for_ascend(case["model"])
    return _where({"groups": [group.to_json() for group in result.groups]})


def _output_dtype(case: dict) -> str:
    """The dtypes of the expected outputs ('sequence' / 'optional' for non-tensor values)."""
    from onnx import TensorProto

    dtypes = []
    for value in case["outputs"]:
        if isinstance(value, (np.ndarray, np.generic, TensorProto)):
            dtypes.append(str(_as_array(value).dtype))
        else:
            dtypes.append("sequence" if isinstance(value, list) else type(value).__name__)
    return ",".join(dict.fromkeys(dtypes))


def _row(case: dict) -> dict:
    model = case["model"]
    op = model.graph.node[0].op_type if model.graph.node else ""
    if len(model.graph.node) > 1:
        op = case["name"].split("_expanded")[0].removeprefix("test_") + " (expanded)"
    return {"test": case["name"], "op": op, "dtype": _output_dtype(case), "result": "",
            "where": "", "reason": "", "seconds": 0.0}


def _mismatch(results: list, expected: list) -> str:
    if len(results) != len(expected):
        return f"{len(results)} outputs, expected {len(expected)}"
    return "; ".join(f"output {i}: {m}" for i, (a, e) in enumerate(zip(results, expected))
                     if (m := compare(a, e)))


def _finish(row: dict, mismatch: str, where: str, why: str) -> dict:
    row = {**row, "where": where}
    if not mismatch:
        return {**row, "result": "passed", "reason": why if where != "npu" else ""}
    return with_known_limit({**row, "result": "failed", "reason": mismatch})


def _strict():
    """The table's builds are strict: a kernel that fails fails its test rather than passing
    on the host fallback (tvm_ascend/fallback.py)."""
    from tvm_ascend import CompileConfig

    return CompileConfig(strict=True)


def run_case(case: dict) -> dict:
    """Classify one node test (see the module docstring), built alone; a JSON-ready row."""
    import tvm_ascend

    row, start = _row(case), time.time()
    problem, _ = applicability(case)
    if problem:
        return {**row, "result": "not_applicable", "reason": problem}
    where, why = "", ""
    try:
        lib = tvm_ascend.build(case["model"], config=_strict())
        results = lib.run([_as_array(v) for v in case["inputs"]])
        where, why = _where(lib.fusion_report())
        mismatch = _mismatch(results, case["outputs"])
    except Exception as err:  # noqa: BLE001 - every crash is recorded, none stops the table
        mismatch = _first_line(err)
    row["seconds"] = round(time.time() - start, 1)
    return _finish(row, mismatch, where, why)


# ---- batches: several tests as disjoint subgraphs of one model (one g++ run) ---------------
def batch_key(case: dict):
    """Cases with equal keys can share one model (same opsets, no functions or subgraphs);
    None: the case is always built alone."""
    from onnx import AttributeProto

    model = case["model"]
    subgraph = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    if model.functions or any(a.type in subgraph for n in model.graph.node for a in n.attribute):
        return None
    return tuple(sorted((o.domain or "ai.onnx", o.version) for o in model.opset_import))


def _prefixed_graph(case: dict, prefix: str):
    """A copy of the case's graph with every value and node name prefixed."""
    graph = type(case["model"].graph)()
    graph.CopyFrom(case["model"].graph)

    def rename(name: str) -> str:
        return prefix + name if name else name

    for index, node in enumerate(graph.node):
        node.name = prefix + (node.name or f"{node.op_type}_{index}")
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        value.name = rename(value.name)
    for init in graph.initializer:
        init.name = rename(init.name)
    return graph


def merge_cases(cases: list):
    """One ONNX model holding every case's graph side by side; names prefixed ``t<i>_``."""
    import onnx

    graphs = [_prefixed_graph(case, f"t{i}_") for i, case in enumerate(cases)]
    merged = onnx.helper.make_graph(
        [n for g in graphs for n in g.node], "node_test_batch",
        [v for g in graphs for v in g.input], [v for g in graphs for v in g.output],
        [t for g in graphs for t in g.initializer],
        value_info=[v for g in graphs for v in g.value_info])
    first = cases[0]["model"]
    model = onnx.helper.make_model(merged, opset_imports=list(first.opset_import))
    model.ir_version = max(c["model"].ir_version for c in cases)
    return model


def run_batch(cases: list) -> list:
    """Rows of ``cases`` (one batch key), built together as one model.

    A test that passes in the batch is recorded as passed, placed by ``where_alone``; a build
    or run that fails is split in halves and retried, and a test whose outputs mismatch is
    rebuilt alone, so every failure recorded is that of the test built alone (``run_case``)."""
    import tvm_ascend

    rows, todo = {}, []
    for case in cases:
        problem, _ = applicability(case)
        if problem:
            rows[case["name"]] = {**_row(case), "result": "not_applicable", "reason": problem}
        else:
            todo.append(case)
    if len(todo) == 1:
        rows[todo[0]["name"]] = run_case(todo[0])
    elif todo:
        start = time.time()
        try:
            lib = tvm_ascend.build(merge_cases(todo), config=_strict())
            results = lib.run([_as_array(v) for case in todo for v in case["inputs"]])
        except Exception:  # noqa: BLE001 - the halves find the test at fault
            half = len(todo) // 2
            return _ordered(cases, {**rows, **_by_name(run_batch(todo[:half])),
                                    **_by_name(run_batch(todo[half:]))})
        seconds = round((time.time() - start) / len(todo), 1)
        offset = 0
        for i, case in enumerate(todo):
            count = len(case["outputs"])
            mismatch = _mismatch(results[offset:offset + count], case["outputs"])
            offset += count
            if mismatch:
                rows[case["name"]] = run_case(case)
            else:
                row = {**_row(case), "seconds": seconds}
                rows[case["name"]] = _finish(row, "", *where_alone(case))
    return _ordered(cases, rows)


def _by_name(rows: list) -> dict:
    return {row["test"]: row for row in rows}


def _ordered(cases: list, rows: dict) -> list:
    return [rows[case["name"]] for case in cases]


def make_batches(names, size: int) -> list:
    """``names`` in batches of at most ``size`` sharing a batch key (others alone)."""
    cases = node_cases()
    groups: dict = {}
    for name in sorted(names):
        key = batch_key(cases[name])
        groups.setdefault(key if key is not None else ("alone", name), []).append(name)
    return [group[i:i + size] for group in groups.values() for i in range(0, len(group), size)]


# ---- many batches, each in a worker process ------------------------------------------------
def _serve(conn) -> None:
    """Worker loop: receive a batch of case names, send back their rows; None ends it."""
    import logging

    logging.disable(logging.WARNING)  # the frontend's dynamic-shape warnings, once per case
    while True:
        names = conn.recv()
        if names is None:
            return
        cases = [node_cases()[name] for name in names]
        try:
            rows = run_batch(cases)
        except Exception as err:  # noqa: BLE001 - a harness error is this batch's failure
            rows = [{**_crash_row(case["name"], f"harness error: {_first_line(err)}")}
                    for case in cases]
        conn.send(rows)


class _Worker:
    """One spawned process running batches (a crash or hang loses one batch, which is then
    split; a single test that crashes its worker is recorded as failed)."""

    def __init__(self, context):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.names, self.started = None, 0.0

    def submit(self, names: list) -> None:
        self.names, self.started = names, time.time()
        self.conn.send(names)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def _crash_row(name: str, why: str) -> dict:
    return with_known_limit({**_row(node_cases()[name]), "result": "failed", "reason": why})


def run_node_tests(names=None, jobs: int = 1, isolate: bool = True, progress=None,
                   batch: int = 24) -> list:
    """Classify node tests; one row per test (see ``run_case``), in name order.

    Parameters
    ----------
    names : iterable of str, optional
        Node tests to run (default: all of them).
    jobs : int
        Worker processes (each builds one batch at a time).
    isolate : bool
        Run batches in worker processes (a crash, or a batch over ``CASE_TIMEOUT_S``, is split
        and a single test is recorded as failed); ``False`` runs them here (a few cases).
    progress : callable, optional
        Called with each row as it is done (e.g. to append it to a log).
    batch : int
        Tests built together as one model (one g++ run); 1 builds every test alone.

    Example
    -------
    >>> rows = run_node_tests(["test_relu"], isolate=False)   # doctest: +SKIP
    >>> rows[0]["result"], rows[0]["where"]                   # doctest: +SKIP
    ('passed', 'npu')
    """
    from tqdm import tqdm

    names = sorted(node_cases()) if names is None else sorted(set(names))
    rows = {}
    bar = tqdm(total=len(names), desc="ONNX node tests", unit="test", file=sys.stderr)

    def done(batch_rows):
        for row in batch_rows:
            rows[row["test"]] = row
            if progress is not None:
                progress(row)
        bar.update(len(batch_rows))
        bar.set_postfix_str(f"{batch_rows[-1]['test'][:30]} {batch_rows[-1]['result']}")

    batches = make_batches(names, max(1, batch))
    if not isolate:
        for names_in_batch in batches:
            done(run_batch([node_cases()[n] for n in names_in_batch]))
    else:
        _run_isolated(batches, max(1, jobs), done)
    bar.close()
    return [rows[name] for name in names]


def _run_isolated(batches: list, jobs: int, done) -> None:
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")
    pending = list(reversed(batches))
    workers = [_Worker(context) for _ in range(min(jobs, len(batches)))]
    for worker in workers:
        if pending:
            worker.submit(pending.pop())
    while any(w.names for w in workers):
        busy = [w for w in workers if w.names]
        ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=5)
        for index, worker in enumerate(workers):
            if not worker.names:
                continue
            rows, lost = None, ""
            if worker.conn in ready and worker.conn.poll():
                try:
                    rows = worker.conn.recv()
                except EOFError:
                    rows = None
            if rows is None and not worker.process.is_alive():
                lost = f"worker process died (exit code {worker.process.exitcode})"
            elif rows is None and time.time() - worker.started > CASE_TIMEOUT_S:
                lost = f"timeout: over {CASE_TIMEOUT_S} s"
            if rows is None and not lost:
                continue
            names, worker.names = worker.names, None
            if lost:  # the worker is gone or hung: split the batch, a fresh worker goes on
                worker.stop()
                worker = workers[index] = _Worker(context)
                if len(names) > 1:
                    pending += [names[len(names) // 2:], names[:len(names) // 2]]
                else:
                    done([_crash_row(names[0], lost)])
            else:
                done(rows)
            if pending:
                worker.submit(pending.pop())
    for worker in workers:
        worker.conn.send(None)
        worker.process.join(timeout=30)
        worker.stop()


# ---- the committed table -------------------------------------------------------------------
def summarize(rows: list) -> dict:
    """Counts per result, and of passed tests per place they ran."""
    summary = {"total": len(rows), **{r: sum(1 for x in rows if x["result"] == r)
                                       for r in RESULTS}}
    passed = [x for x in rows if x["result"] == "passed"]
    summary["passed_where"] = {w: sum(1 for x in passed if x["where"] == w)
                               for w in ("npu", "npu+host", "host", "none")}
    return summary


def _header(rows: list) -> dict:
    import onnx
    import tvm

    import tvm_ascend

    now = datetime.datetime.now(datetime.timezone.utc)
    return {"generated": now.strftime("%Y-%m-%d %H:%M UTC"),
            "tvm_ascend_version": tvm_ascend.__version__, "tvm_version": tvm.__version__,
            "onnx_version": onnx.__version__, "command": COMMAND,
            "tolerances": {**TOLERANCES, "integer and bool": EXACT},
            "summary": summarize(rows), "known_limits": limits_table()}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(table: dict) -> str:
    """The table as Markdown: generated header, summary, failures first, then every test."""
    summary, rows = table["summary"], table["rows"]
    lines = [
        "# ONNX backend node tests through tvm-ascend",
        "",
        f"Generated {table['generated']} by `{table['command']}` (tvm_ascend "
        f"{table['tvm_ascend_version']}, TVM {table['tvm_version']}, onnx "
        f"{table['onnx_version']}). Do not edit by hand; `tests/ONNX_NODE_TESTS.json` is the "
        "same table for scripts.",
        "",
        "Each test is built with `tvm_ascend.build(model)`, run on the AscendC emulator / host, "
        "and compared with ONNX's expected outputs (NaN-aware; rtol/atol per dtype: "
        + ", ".join(f"{k} {v['rtol']:g}/{v['atol']:g}" for k, v in table["tolerances"].items())
        + "). *where*: `npu` all ops in Ascend kernels, `host` all on the host (llvm), "
        "`npu+host` both, `none` nothing launched. not_applicable: no op of the lowering is in "
        "the `ascend.*` pattern table, the frontend cannot import it, or non-tensor values; "
        "not_run: the run that wrote this table stopped before the test.",
        "",
        "## Summary",
        "",
        "| result | tests |",
        "|---|---|",
        *(f"| {r} | {summary[r]} |" for r in RESULTS),
        f"| total | {summary['total']} |",
        "",
        "Passed tests by where they ran: "
        + ", ".join(f"{w} {n}" for w, n in summary["passed_where"].items()) + ".",
        "",
    ]
    if table["known_limits"]:
        lines += ["## Known limits", "", "| test | reason |", "|---|---|"]
        lines += [f"| {t} | {_cell(r)} |" for t, r in sorted(table["known_limits"].items())]
        lines.append("")
    failed = [r for r in rows if r["result"] == "failed"]
    if failed:
        lines += ["## Failures", "", "| test | op | dtype | where | error |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['test']} | {r['op']} | {r['dtype']} | {r['where']} | "
                  f"{_cell(r['reason'])} |" for r in failed]
        lines.append("")
    lines += ["## All tests", "", "| test | op | dtype | result | where | reason |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['test']} | {_cell(r['op'])} | {r['dtype']} | {r['result']} | {r['where']} | "
              f"{_cell(r['reason'])} |" for r in rows]
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the table is a committed file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_table(rows: list, md_path: Path = TABLE_MD, json_path: Path = TABLE_JSON) -> dict:
    """Write the Markdown table and its JSON twin (each atomically); the table written."""
    table = {**_header(rows), "rows": sorted(rows, key=lambda r: r["test"])}
    _write_atomic(json_path, json.dumps(table, indent=1) + "\n")
    _write_atomic(md_path, render_markdown(table))
    return table


def committed_rows() -> dict:
    """``{test: row}`` of the committed JSON table."""
    with open(TABLE_JSON, encoding="utf-8") as handle:
        return {row["test"]: row for row in json.load(handle)["rows"]}


def _read_log(path: Path) -> dict:
    rows = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row["test"]] = row
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.onnx_node_table",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help=f"write {TABLE_MD.name} and {TABLE_JSON.name} in tests/")
    parser.add_argument("tests", nargs="*", help="node tests to run (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--batch", type=int, default=24,
                        help="tests built together as one model (default 24; 1: each alone)")
    parser.add_argument("--no-run", action="store_true",
                        help="build nothing: rows from --log; the others not_applicable "
                             "or not_run")
    parser.add_argument("--log", type=Path, default=None,
                        help="JSON-lines log of finished rows; rows already in it are not run "
                             "again (resumes an interrupted run)")
    args = parser.parse_args(argv)
    if args.write and args.tests:
        parser.error("--write regenerates the whole table; give no test names with it")
    names = args.tests or sorted(node_cases())
    unknown = sorted(set(names) - set(node_cases()))
    if unknown:
        parser.error(f"unknown node tests: {', '.join(unknown[:5])}")
    done = _read_log(args.log) if args.log else {}
    # a row logged before the claim grew (a new kernel family) is run again
    done = {n: r for n, r in done.items() if not stale_not_applicable(r)}
    todo = [n for n in names if n not in done]
    if args.no_run:
        if not args.log:
            parser.error("--no-run takes its rows from --log")
        for name in todo:  # not_applicable needs no build: classify those completely
            problem, _ = applicability(node_cases()[name])
            done[name] = {**_row(node_cases()[name]), "result": "not_applicable",
                          "reason": problem} if problem else {
                **_row(node_cases()[name]), "result": "not_run",
                "reason": "the run was stopped before this test; rerun the command"}
        todo = []

    def log(row):
        if args.log:
            with open(args.log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")

    rows = (run_node_tests(todo, jobs=args.jobs, progress=log, batch=args.batch)
            if todo else [])
    # rows from the log are classified again against the known limits as they stand now
    rows = sorted([*(with_known_limit(done[n]) for n in names if n in done), *rows],
                  key=lambda r: r["test"])
    summary = summarize(rows)
    print(json.dumps(summary))
    for row in rows:
        if row["result"] == "failed" or args.tests:
            print(f"{row['test']}: {row['result']} {row['where']} {row['reason']}")
    if args.write:
        write_table(rows)
        print(f"wrote {TABLE_MD} and {TABLE_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
