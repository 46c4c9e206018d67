"""The benchmark harness: every model x configuration x baseline, one record each.

A record holds the figures of ``BENCHMARKS.md``: kernel launches and GM bytes from the build's
fusion report, the two graph references (``graph_bytes``), the cost model's latency estimate
and roofline per SoC where the report carries them, compile time with an empty and with a warm
compile cache, and the error against onnxruntime on configurations small enough to run here.
A figure the build does not report is ``None``, never a stand-in.

Example
-------
>>> from benchmarks import harness
>>> config = harness.QUICK_CONFIGS[0]                                  # doctest: +SKIP
>>> records = harness.benchmark_config(config, ["conservative"])       # doctest: +SKIP
>>> records[0]["kernels"], records[0]["max_abs_err"]                   # doctest: +SKIP
(31, 1.1e-06)
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from tvm_ascend.errors import FusionConfigError

from . import results_file
from .graph_bytes import graph_references
from .kernel_classes import report_efficiency
from .models import bert, gpt2, resnet50, vit

logger = logging.getLogger("tvm_ascend.benchmarks")

REPO_ROOT = Path(__file__).resolve().parent.parent
SOCS = ("Ascend910B1", "Ascend310P3")
# Baseline -> CompileConfig fields. atc_style and tvm_fuseops need ``rule_set``; on a
# CompileConfig without that field their records say "unavailable" with the reason.
BASELINES = {
    "op_by_op": {"fusion_level": "off"},
    "atc_style": {"rule_set": "atc_style"},
    "tvm_fuseops": {"rule_set": "tvm_fuseops"},
    "conservative": {"fusion_level": "conservative"},
    "aggressive": {"fusion_level": "aggressive"},
}
BASELINE_LABELS = {
    "op_by_op": "op-by-op (fusion off)",
    "atc_style": "ATC-style (emulated fixed rules)",
    "tvm_fuseops": "plain TVM FuseOps",
    "conservative": "tvm-ascend conservative",
    "aggressive": "tvm-ascend aggressive",
}
# Run on the CPU emulator and compare with onnxruntime only up to this many MatMul/Gemm/Conv
# multiply-adds: the emulator runs the cube as scalar C++ loops and host ops run untuned on
# llvm, so larger models take minutes per run on a 2-core machine.
RUN_LIMIT_MACS = 2_000_000_000
RESULT_KEYS = ("model", "config", "baseline", "dtype", "style", "status", "error", "onnx_nodes",
               "kernels", "kernels_ascend", "kernels_host", "npu_kernels", "gm_bytes",
               "hbm_bytes", "l2_bytes", "npu_gm_bytes", "emulator_gm_bytes", "compulsory_bytes", "matmul_boundary_bytes",
               "matmul_macs", "est_latency_us", "est_latency_us_low", "est_latency_us_high",
               "est_band_us", "roofline_us", "peak_memory_bytes",
               "compile_s_cold", "compile_s_warm", "compile_s_warm_replan", "max_abs_err",
               "max_rel_err", "ref_max_abs",
               "nonfinite_outputs", "kernel_efficiency",
               "stage_s", "commit", "date")
# Per SoC, the record's latency estimates and the fusion report's figures they come from: the
# device's timeline (host submission hidden) and the same launches end to end at the low and
# the high end of the measured host submission time per launch (partition/report.py).
_ESTIMATE_KEYS = {"est_latency_us": "latency_us", "est_latency_us_low": "latency_us_low",
                  "est_latency_us_high": "latency_us_high", "est_band_us": "latency_band_us"}
# Environment variables that would silently override a baseline's CompileConfig.
_OVERRIDING_ENV = ("AUTOFUSION_ENABLE", "TVM_ASCEND_SOC_VERSION", "DUMP_GRAPH",
                   "TVM_ASCEND_BUILD_CACHE")


@dataclass(frozen=True)
class ModelFamily:
    """A model builder, the builder of its example inputs, and knobs fixed for the family."""

    build: Callable[..., onnx.ModelProto]
    inputs: Callable[..., dict]
    fixed: tuple = ()


FAMILIES = {
    "resnet50": ModelFamily(resnet50.resnet50_model, resnet50.example_inputs),
    "bert_base": ModelFamily(bert.bert_model, bert.example_inputs),
    "gpt2_small": ModelFamily(gpt2.gpt2_model, gpt2.example_inputs, (("size", "small"),)),
    "gpt2_medium": ModelFamily(gpt2.gpt2_model, gpt2.example_inputs, (("size", "medium"),)),
    "vit_base": ModelFamily(vit.vit_model, vit.example_inputs),
}


@dataclass(frozen=True)
class BenchConfig:
    """One model configuration: model family, name (``b1_s128``), dtype, style and knobs.

    Example
    -------
    >>> cfg = BenchConfig("bert_base", "b1_s128", "float16", knobs=(("batch", 1), ("seq", 128)))
    >>> cfg.key
    'bert_base/b1_s128/float16'
    """

    model: str
    name: str
    dtype: str
    style: str = "torchscript"
    knobs: tuple = ()

    def __post_init__(self):
        if self.model not in FAMILIES:
            raise ValueError(f"unknown model {self.model!r}; known: {', '.join(FAMILIES)}")

    @property
    def key(self) -> str:
        return f"{self.model}/{self.name}/{self.dtype}"

    def onnx_model(self) -> onnx.ModelProto:
        family = FAMILIES[self.model]
        return family.build(style=self.style, dtype=self.dtype,
                            **dict(family.fixed + self.knobs))

    def inputs(self) -> dict[str, np.ndarray]:
        return FAMILIES[self.model].inputs(dtype=self.dtype, **dict(self.knobs))


def _configs(model, name, style, dtypes, **knobs) -> list[BenchConfig]:
    return [BenchConfig(model, name, dtype, style, tuple(sorted(knobs.items())))
            for dtype in dtypes]


BOTH = ("float16", "float32")
# The configurations users quote (issue #7), smallest first and float16 before float32, so a
# run cut short by --max-minutes still covers the headline figures; then one configuration
# per model small enough to run on the emulator here.
_QUOTED = (("bert_base", "b1_s128", {"batch": 1, "seq": 128}),
           ("resnet50", "b1_224", {"batch": 1, "image": 224}),
           ("gpt2_medium", "b1_s512", {"batch": 1, "seq": 512}),
           ("resnet50", "b32_224", {"batch": 32, "image": 224}),
           ("bert_base", "b16_s512", {"batch": 16, "seq": 512}),
           ("gpt2_medium", "b8_s512", {"batch": 8, "seq": 512}))
_RUNNABLE = (("resnet50", "b1_64", {"batch": 1, "image": 64}),
             ("bert_base", "b1_s8", {"batch": 1, "seq": 8}),
             ("gpt2_small", "b1_s8", {"batch": 1, "seq": 8}))
FULL_CONFIGS = tuple(config for table in (_QUOTED, _RUNNABLE) for dtype in BOTH
                     for model, name, knobs in table
                     for config in _configs(model, name, "torchscript", (dtype,), **knobs))
# Tiny configurations of the same architectures for ``--quick`` and the tests.
QUICK_CONFIGS = (
    _configs("resnet50", "tiny", "torchscript", ("float32",), batch=1, image=32, width=8,
             blocks=(1, 1, 1, 1), classes=10)
    + _configs("bert_base", "tiny", "torchscript", ("float32",), batch=2, seq=16, hidden=32,
               heads=2, layers=2, vocab=64)
    + _configs("gpt2_small", "tiny", "torchscript", ("float32",), batch=2, seq=16, hidden=32,
               heads=2, layers=2, vocab=64, size=None)
    + _configs("gpt2_medium", "tiny", "dynamo", ("float32",), batch=1, seq=16, hidden=32,
               heads=2, layers=2, vocab=64, size=None)
    + _configs("vit_base", "tiny", "torchscript", ("float32",), batch=2, image=32, patch=8,
               hidden=32, heads=2, layers=2, classes=10)
)


def select_configs(configs, models=(), names=(), dtypes=()) -> list[BenchConfig]:
    """The configurations matching every given filter (an empty filter matches all)."""
    chosen = [c for c in configs if (not models or c.model in models)
              and (not names or c.name in names) and (not dtypes or c.dtype in dtypes)]
    if not chosen:
        raise ValueError(f"no configuration matches models={list(models)} names={list(names)} "
                         f"dtypes={list(dtypes)}")
    return chosen


def compile_config(baseline: str, soc: str = SOCS[0], cache_dir: str | None = None):
    """The ``tvm_ascend.CompileConfig`` of ``baseline``.

    Raises ``FusionConfigError`` for an unknown baseline and ``LookupError`` when this
    version of tvm-ascend has no field the baseline needs (e.g. ``rule_set``).

    Example
    -------
    >>> compile_config("op_by_op", "Ascend310P3").fusion_level
    'off'
    """
    from tvm_ascend import CompileConfig

    if baseline not in BASELINES:
        raise FusionConfigError(f"unknown baseline {baseline!r}; known: {', '.join(BASELINES)}")
    fields = {f.name for f in dataclasses.fields(CompileConfig)}
    wanted = dict(BASELINES[baseline], soc_version=soc, cache_dir=cache_dir)
    missing = sorted(set(wanted) - fields)
    if missing:
        raise LookupError(f"baseline {baseline!r} needs CompileConfig field(s) "
                          f"{', '.join(missing)}, which this tvm-ascend does not have yet")
    return CompileConfig(**wanted)


@contextlib.contextmanager
def _pinned_environment(cache_dir: str):
    """Point the compile cache at ``cache_dir`` and hide variables that would override a
    baseline (CompileConfig.with_env lets the environment win over the config)."""
    saved = {name: os.environ.get(name) for name in _OVERRIDING_ENV + ("TVM_ASCEND_CACHE_DIR",)}
    for name in _OVERRIDING_ENV:
        os.environ.pop(name, None)
    os.environ["TVM_ASCEND_CACHE_DIR"] = cache_dir
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def error_metrics(outputs, reference) -> dict:
    """Errors of ``outputs`` against ``reference`` (lists of arrays, one per model output).

    ``max_abs_err`` = max |a - b| over all outputs; ``max_rel_err`` = the largest, over the
    outputs, of max |a - b| / max |b| (relative to each output's scale, so values near zero
    do not blow it up); ``ref_max_abs`` = the largest finite |b|; ``nonfinite_outputs`` = how
    many values are NaN or infinite in one but not equal in the other. Any such value makes
    both errors ``inf``: a NaN must never compare as "no error" (``max(0.0, nan)`` is 0.0,
    which is how GPT-2 once reported errors of exactly 0).

    Example
    -------
    >>> m = error_metrics([np.array([1.0, 2.5])], [np.array([1.0, 2.0])])
    >>> m["max_abs_err"], m["max_rel_err"], m["nonfinite_outputs"]
    (0.5, 0.25, 0)
    """
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs against {len(reference)} reference outputs")
    abs_err = rel_err = scale = 0.0
    nonfinite = 0
    for index, (got, want) in enumerate(zip(outputs, reference)):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            raise ValueError(f"output {index}: shape {got.shape} differs from the reference "
                             f"{want.shape}")
        finite = np.isfinite(got) & np.isfinite(want)
        # the same inf, or NaN in both, is agreement (e.g. a masked row both compute as -inf)
        agree = ~finite & ((got == want) | (np.isnan(got) & np.isnan(want)))
        nonfinite += int(np.count_nonzero(~finite & ~agree))
        diff = float(np.max(np.abs(got[finite] - want[finite]))) if finite.any() else 0.0
        finite_want = want[np.isfinite(want)]
        peak = float(np.max(np.abs(finite_want))) if finite_want.size else 0.0
        abs_err, scale = max(abs_err, diff), max(scale, peak)
        rel_err = max(rel_err, diff / peak if peak else diff)
    if nonfinite:
        abs_err = rel_err = float("inf")
    return {"max_abs_err": abs_err, "max_rel_err": rel_err, "ref_max_abs": scale,
            "nonfinite_outputs": nonfinite}


def run_onnxruntime(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """The reference outputs, from onnxruntime's CPU provider."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def report_figures(report: dict) -> dict:
    """Figures read from a fusion report; ``None`` where the report does not carry them."""
    groups = report.get("groups", [])
    npu = [g for g in groups if g.get("on_npu")]
    kernels = report.get("kernels", {})
    with_bytes = [g.get("gm_bytes") for g in groups]
    estimate = report.get("estimate")
    # a report before HBM and L2 were told apart has neither: None, never a guess
    split = groups and all("hbm_bytes" in g and "l2_bytes" in g for g in groups)
    return {
        "kernels_ascend": kernels.get("ascend"), "kernels_host": kernels.get("host"),
        "kernels": (kernels["ascend"] + kernels["host"]
                    if "ascend" in kernels and "host" in kernels else None),
        "npu_kernels": report.get("npu_kernels"),
        # the total only where every group (host ones too) reports its bytes
        "gm_bytes": sum(with_bytes) if groups and None not in with_bytes else None,
        "hbm_bytes": sum(g["hbm_bytes"] for g in groups) if split else None,
        "l2_bytes": sum(g["l2_bytes"] for g in groups) if split else None,
        "npu_gm_bytes": (sum(g["gm_bytes"] for g in npu)
                         if all("gm_bytes" in g for g in npu) else None),
        "peak_memory_bytes": report.get("peak_memory_bytes"),
        "estimate": estimate if isinstance(estimate, dict) else None,
        # per kernel class, the launches' estimates over their own bounds (kernel_classes)
        "kernel_efficiency": report_efficiency(report),
    }


def _estimate_for(estimate: dict | None, soc: str, key: str):
    if not estimate or str(estimate.get("soc", "")).lower() != soc.lower():
        return None
    return estimate.get(key)


def _timed_build(model, baseline, soc, cache_dir, library_path, build_cache=True):
    """build + export_library; returns (module, build seconds, export seconds).
    ``build_cache=False`` plans the model again even when the cache holds the whole build
    (only the compiled kernels come from the cache then)."""
    import tvm_ascend

    config = compile_config(baseline, soc, cache_dir)
    if hasattr(config, "build_cache"):
        config = config.replace(build_cache=build_cache)
    with _pinned_environment(cache_dir):
        start = time.perf_counter()
        lib = tvm_ascend.build(model, config=config)
        built = time.perf_counter()
        if library_path is not None:
            lib.export_library(library_path)
        return lib, built - start, time.perf_counter() - built


def _blank_record(config: BenchConfig, baseline: str, refs: dict, nodes: int) -> dict:
    record = dict.fromkeys(RESULT_KEYS)
    record.update(model=config.model, config=config.name, baseline=baseline,
                  dtype=config.dtype, style=config.style, onnx_nodes=nodes,
                  **{key: dict.fromkeys(SOCS) for key in _ESTIMATE_KEYS},
                  roofline_us=dict.fromkeys(SOCS), kernel_efficiency=dict.fromkeys(SOCS),
                  stage_s={}, compulsory_bytes=refs["compulsory_bytes"],
                  matmul_boundary_bytes=refs["matmul_boundary_bytes"],
                  matmul_macs=refs["matmul_macs"])
    return record


def benchmark_baseline(config: BenchConfig, baseline: str, model: onnx.ModelProto,
                       refs: dict, feeds: dict | None, reference: list | None,
                       work_dir: Path, measure_cold: bool = True) -> dict:
    """One record: build (cold and warm), report figures, estimates, and the error when
    ``reference`` is given. Failures end up in the record (``status``, ``error``)."""
    record = _blank_record(config, baseline, refs, len(model.graph.node))
    try:
        compile_config(baseline)
    except LookupError as err:
        record.update(status="unavailable", error=str(err))
        return record
    folder = Path(tempfile.mkdtemp(prefix=f"{baseline}_", dir=work_dir))
    stages = record["stage_s"]
    # compile times on a shared 2-core machine depend on what else runs: say how busy it was
    record["load_avg_1m"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    try:
        if measure_cold:
            cold_cache = str(folder / "cold_cache")
            _, build_s, export_s = _timed_build(model, baseline, SOCS[0], cold_cache,
                                                folder / "cold.so")
            stages.update(build_cold=build_s, export_cold=export_s)
            record["compile_s_cold"] = build_s + export_s
            warm_cache = cold_cache
        else:  # tests: the caller's (already filled) cache stands in for the warm one
            warm_cache = os.environ.get("TVM_ASCEND_CACHE_DIR") or str(folder / "cache")
        # warm: the whole build from the build cache; warm_replan: planned again, with only
        # the compiled kernels from the cache (what a changed configuration costs)
        _, build_s, export_s = _timed_build(model, baseline, SOCS[0], warm_cache,
                                            folder / "warm.so")
        stages.update(build_warm=build_s, export_warm=export_s)
        record["compile_s_warm"] = build_s + export_s
        lib, build_s, export_s = _timed_build(model, baseline, SOCS[0], warm_cache,
                                              folder / "warm_replan.so", build_cache=False)
        stages.update(build_warm_replan=build_s, export_warm_replan=export_s)
        record["compile_s_warm_replan"] = build_s + export_s
        figures = report_figures(lib.fusion_report())
        estimates = {SOCS[0]: figures.pop("estimate")}
        record["kernel_efficiency"][SOCS[0]] = figures.pop("kernel_efficiency")
        record.update(figures)
        if estimates[SOCS[0]] is not None:  # the other SoCs' estimates need their own builds
            for soc in SOCS[1:]:
                other, build_s, _ = _timed_build(model, baseline, soc, warm_cache, None)
                stages[f"build_{soc}"] = build_s
                other_figures = report_figures(other.fusion_report())
                estimates[soc] = other_figures["estimate"]
                record["kernel_efficiency"][soc] = other_figures["kernel_efficiency"]
        for soc in SOCS:
            for key, report_key in _ESTIMATE_KEYS.items():
                record[key][soc] = _estimate_for(estimates.get(soc), soc, report_key)
            record["roofline_us"][soc] = _model_roofline_us(record, soc)
        if reference is not None:
            # the counters live in the loaded library, which every build of this model in
            # this process shares through the compile cache: count this run's launches only
            lib.profile(reset=True)
            start = time.perf_counter()
            outputs = lib.run(feeds)
            stages["run"] = time.perf_counter() - start
            record.update(error_metrics(outputs, reference))
            record["emulator_gm_bytes"] = sum(p["gm_read_bytes"] + p["gm_write_bytes"]
                                              for p in lib.profile())
        record["status"] = "ok"
    except Exception as err:  # noqa: BLE001 - one failing build must not end the whole run
        logger.exception("%s %s failed", config.key, baseline)
        record.update(status="failed", error=f"{type(err).__name__}: {str(err)[:2000]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return record


def _model_roofline_us(record: dict, soc: str) -> float | None:
    """The model's roofline on ``soc``: its compulsory bytes at GM bandwidth or its MatMul/Conv
    flops at the cube's peak, whichever is slower; one figure per model and SoC, the same for
    every baseline (design.md: no estimate may beat it)."""
    if record.get("compulsory_bytes") is None or record.get("matmul_macs") is None:
        return None
    from tvm_ascend.cost_model import estimate_launch
    from tvm_ascend.soc import get_soc
    bytes_per_elem = 2 if record.get("dtype") == "float16" else 4
    est = estimate_launch(record["compulsory_bytes"], 2.0 * record["matmul_macs"], get_soc(soc),
                          dtype_bytes=bytes_per_elem)
    return round(est.roofline_us, 3)


def benchmark_config(config: BenchConfig, baselines, run_limit_macs: int = RUN_LIMIT_MACS,
                     measure_cold: bool = True, work_dir: str | None = None) -> list[dict]:
    """Records of ``config`` under each of ``baselines`` (the ONNX model and the onnxruntime
    reference are made once)."""
    stages = {}
    start = time.perf_counter()
    model = config.onnx_model()
    stages["onnx_model"] = time.perf_counter() - start
    refs = graph_references(model)
    feeds = reference = None
    if refs["matmul_macs"] <= run_limit_macs:
        feeds = config.inputs()
        start = time.perf_counter()
        reference = run_onnxruntime(model, feeds)
        stages["onnxruntime"] = time.perf_counter() - start
    records = []
    with tempfile.TemporaryDirectory(prefix="tvm_ascend_bench_") as scratch:
        for baseline in baselines:
            logger.info("benchmark %s %s", config.key, baseline)
            record = benchmark_baseline(config, baseline, model, refs, feeds, reference,
                                        Path(work_dir or scratch), measure_cold)
            record["stage_s"] = {**stages, **record["stage_s"]}
            records.append(record)
    return records


def run_header(run_limit_macs: int = RUN_LIMIT_MACS) -> dict:
    """Machine, date and commit of this run."""
    import tvm

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": results_file.git_commit(),
        "machine": {"node": platform.node(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "python": platform.python_version(),
                    "tvm": getattr(tvm, "__version__", None), "onnx": onnx.__version__},
        "socs": list(SOCS),
        "baselines": dict(BASELINE_LABELS),
        "run_limit_macs": run_limit_macs,
    }


def _merged(out_path, merge: bool, existing: dict | None, results: dict) -> dict:
    """``results`` merged into the file as it is now: re-read, so that a run of other
    configurations that wrote it meanwhile keeps its records (the file itself was checked
    before the run started: ``existing``)."""
    if merge and out_path is not None:
        existing = results_file.load_results(out_path) or existing
    return results_file.merge_results(existing, results)


def run_benchmarks(configs, baselines, out_path=None, run_limit_macs: int = RUN_LIMIT_MACS,
                   measure_cold: bool = True, max_minutes: float | None = None,
                   merge: bool = True) -> dict:
    """Benchmark every configuration under every baseline; returns ``{"header", "records"}``,
    every record stamped with this run's ``commit`` and ``date``.

    With ``out_path``, the results are written there (atomically) after each configuration,
    so an interrupted run keeps what it measured. With ``merge`` (the default) the records
    already in ``out_path`` are kept except those this run re-measures (same model, config,
    baseline and dtype), and the returned results are the merged file; without it the file is
    overwritten. Configurations not started within ``max_minutes`` get records with
    ``status="skipped"``, which replace no earlier measurement.

    Example
    -------
    >>> results = run_benchmarks(QUICK_CONFIGS[:1], ["conservative"])     # doctest: +SKIP
    >>> results["records"][0]["status"]                                    # doctest: +SKIP
    'ok'
    """
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise FusionConfigError(f"unknown baseline(s) {', '.join(unknown)}; known: "
                       f"{', '.join(BASELINES)}")
    # read before measuring anything: a corrupt file fails now, not after an hour of builds
    existing = results_file.load_results(out_path) if merge and out_path is not None else None
    results = {"header": run_header(run_limit_macs), "records": []}
    start = time.perf_counter()
    for config in configs:
        elapsed_min = (time.perf_counter() - start) / 60
        if max_minutes is not None and elapsed_min > max_minutes:
            for baseline in baselines:
                record = dict.fromkeys(RESULT_KEYS)
                record.update(model=config.model, config=config.name, baseline=baseline,
                              dtype=config.dtype, style=config.style, status="skipped",
                              error=f"not started: the run's budget of {max_minutes} min "
                                    "was spent",
                              **{key: dict.fromkeys(SOCS) for key in _ESTIMATE_KEYS},
                              roofline_us=dict.fromkeys(SOCS), stage_s={})
                results["records"].append(record)
            continue
        results["records"].extend(benchmark_config(config, baselines, run_limit_macs,
                                                   measure_cold))
        results["header"]["wall_s"] = time.perf_counter() - start
        if out_path is not None:
            results_file.write_results(out_path, _merged(out_path, merge, existing, results))
    merged = _merged(out_path, merge, existing, results)
    if out_path is not None:
        results_file.write_results(out_path, merged)
    return merged
