"""Runners: measure tuning candidates (MetaSchedule's builder/runner split).

``LocalRunner`` measures on this machine: in ``"plan"`` mode the counters come from the tiling
plan (equal to the emulator's counters, checked in the tests), in ``"emulator"`` mode the
candidate's model is built with the knobs pinned, run in the AscendC emulator, and its counters
feed the timing model. Candidates are measured in batches, over processes when ``workers > 1``.
``RPCRunner`` sends candidates through TVM's RPC tracker (``tvm.rpc``) to boards; without a
CANN runtime on the remote, the device part is skipped and said so in each result.

Example
-------
>>> results = LocalRunner().measure([Candidate("k0", "elementwise", func, knobs, soc)])
>>> results[0].time_us                                           # doctest: +SKIP
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import tempfile
from dataclasses import dataclass, field

import numpy as np
import tvm

from ..cost_model.counters import group_tiling
from ..cost_model.database import TuningDatabase, knobs_to_json, workload_of
from ..cost_model.timing import estimate_kernel
from ..errors import AscendError, TilingError
from ..schedules import knobs_from_json, template_by_name
from ..soc import get_soc

logger = logging.getLogger("tvm_ascend.tuning")


@dataclass
class Candidate:
    """One kernel with one choice of knobs. ``model`` (ONNX path/ModelProto/IRModule) and
    ``config`` are needed only by runners that build the whole model (emulator, RPC)."""

    kernel: str
    template: str
    prim_func: object
    knobs: object
    soc: object
    model: object = None
    config: object = None


@dataclass
class MeasureResult:
    """The measured (estimated) time of a candidate, or why it could not be measured."""

    time_us: float | None
    tiling: object = None
    counters: dict = field(default_factory=dict)
    error: str | None = None
    runner: str = "local"

    @property
    def ok(self) -> bool:
        return self.error is None and self.time_us is not None


def plan(candidate: Candidate):
    """(scheduled PrimFunc, Tiling) of a candidate; raises TilingError where it does not fit."""
    return template_by_name(candidate.template).schedule(candidate.prim_func, candidate.soc,
                                                        candidate.knobs)


def _measure_plan(candidate: Candidate) -> MeasureResult:
    try:
        _, tiling = plan(candidate)
    except TilingError as err:
        return MeasureResult(None, error=str(err))
    est = estimate_kernel(candidate.prim_func, tiling, candidate.soc)
    return MeasureResult(est.time_us, tiling, {"gm_read_bytes": tiling.gm_read_bytes,
                                               "gm_write_bytes": tiling.gm_write_bytes,
                                               "cube_macs": tiling.work.cube_macs})


def _measure_plan_job(job) -> tuple:
    """Process-pool entry: the PrimFunc travels as TVMScript (tvm.ir.save_json crashes on
    PrimFuncs in TVM 0.27)."""
    func_text, template, knobs, soc_name = job
    func = tvm.script.from_source(func_text)
    candidate = Candidate("", template, func, knobs_from_json(template, knobs), get_soc(soc_name))
    result = _measure_plan(candidate)
    return result.time_us, result.tiling.to_json() if result.tiling else None, result.error


def build_with_knobs(candidate: Candidate, workdir):
    """The candidate's whole model built with its knobs pinned through a tuning database."""
    import tvm_ascend
    from tvm_ascend import CompileConfig

    if candidate.model is None:
        raise AscendError(f"{candidate.kernel}: the emulator runner needs the candidate's model")
    db = TuningDatabase(workdir)
    workload = workload_of(candidate.prim_func, candidate.template, candidate.soc)
    db.commit(workload, candidate.knobs, 1.0, runner="pin")
    config = (candidate.config or CompileConfig()).replace(
        soc_version=candidate.soc.name, tuning_database=str(workdir))
    return tvm_ascend.build(candidate.model, config=config)


def measure_on_emulator(candidate: Candidate, inputs: dict) -> MeasureResult:
    """Build, run and profile the candidate's model; the kernel's emulator counters replace
    the plan's in the timing model."""
    try:
        _, tiling = plan(candidate)
    except TilingError as err:
        return MeasureResult(None, error=str(err), runner="emulator")
    with tempfile.TemporaryDirectory(prefix="tvm_ascend_tune_") as workdir:
        lib = build_with_knobs(candidate, workdir)
        groups = [g for g in lib.fusion_report().get("groups", [])
                  if g.get("kernel") == candidate.kernel]
        used = group_tiling(groups[0]) if groups else None
        if used and (used.tile_len, used.cores) != (tiling.tile_len, tiling.cores):
            return MeasureResult(None, tiling, error="the build did not apply the pinned knobs "
                                 f"(tiling {used.tile_len}x{used.cores} cores); "
                                 "is CompileConfig.tuning_database wired?", runner="emulator")
        lib.run(inputs)
        launches = [p for p in lib.profile() if p.get("kernel") == candidate.kernel]
    if not launches:
        return MeasureResult(None, tiling, error=f"kernel {candidate.kernel} did not launch",
                             runner="emulator")
    counters = launches[0]
    measured = dataclasses.replace(
        tiling, gm_read_bytes=int(counters["gm_read_bytes"]),
        gm_write_bytes=int(counters["gm_write_bytes"]),
        work=dataclasses.replace(tiling.work, cube_macs=int(counters.get("cube_macs", 0))))
    est = estimate_kernel(candidate.prim_func, measured, candidate.soc)
    return MeasureResult(est.time_us, tiling, counters, runner="emulator")


class LocalRunner:
    """Measure candidates on this machine (plan counters or emulator counters + timing model).

    Parameters
    ----------
    mode : str
        ``"plan"`` (fast, counters from the tiling plan) or ``"emulator"`` (build and run).
    workers : int
        Processes for plan-mode batches (1: in this process).
    inputs : dict, optional
        Model inputs for emulator runs (random in [-1, 1] otherwise).
    """

    def __init__(self, mode: str = "plan", workers: int = 1, inputs: dict | None = None):
        if mode not in ("plan", "emulator"):
            raise AscendError(f"LocalRunner mode={mode!r} is not 'plan' or 'emulator'")
        self.mode, self.workers, self.inputs = mode, max(1, int(workers)), inputs

    def measure(self, candidates: list[Candidate]) -> list[MeasureResult]:
        """Measure a batch; results in candidate order (failures carry ``error``)."""
        if self.mode == "emulator":
            results = []
            for cand in candidates:
                try:
                    results.append(measure_on_emulator(cand, self._inputs(cand)))
                except AscendError as err:
                    results.append(MeasureResult(None, error=str(err), runner="emulator"))
            return results
        if self.workers == 1 or len(candidates) < 2 * self.workers:
            return [_measure_plan(c) for c in candidates]
        scripts: dict = {}  # one script per function, not per candidate
        jobs = [(scripts.setdefault(id(c.prim_func), c.prim_func.script()), c.template,
                 knobs_to_json(c.knobs), c.soc.name) for c in candidates]
        from multiprocessing import get_context

        from ..schedules.tiling import Tiling

        with concurrent.futures.ProcessPoolExecutor(self.workers,
                                                    mp_context=get_context("spawn")) as pool:
            raw = list(pool.map(_measure_plan_job, jobs, chunksize=max(1, len(jobs) // (
                4 * self.workers))))
        return [MeasureResult(t, Tiling.from_json(tj) if tj else None, error=e)
                for t, tj, e in raw]

    def _inputs(self, candidate: Candidate) -> dict:
        if self.inputs is not None:
            return self.inputs
        from ..frontend import load_model

        config = candidate.config
        mod = load_model(candidate.model, config.input_shape if config else {})
        rng = np.random.default_rng(0)
        return {p.name: rng.uniform(-1, 1, [int(d) for d in p.ty.shape]).astype(str(p.ty.dtype))
                for p in mod["main"].params}
