"""Search: per kernel, candidates from the template's knob space, pruned by the cost model,
the top ones measured by a runner, the best recorded in the tuning database.

Example
-------
>>> results = tune_model("m.onnx", trials=16, database="tuning_db")   # doctest: +SKIP
>>> print(summary_table(results))                                    # doctest: +SKIP
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..cost_model.database import TuningDatabase, knobs_to_json, open_database, workload_of
from ..cost_model.features import extract_features
from ..cost_model.timing import estimate_kernel
from ..errors import TilingError
from ..schedules import template_by_name
from .runner import Candidate, LocalRunner

logger = logging.getLogger("tvm_ascend.tuning")


@dataclass
class TuneResult:
    """Outcome of tuning one kernel (times in microseconds, estimated by the runner)."""

    kernel: str
    template: str
    workload: dict
    default_us: float | None
    best_us: float | None
    best_knobs: dict
    candidates: int
    measured: int
    history: list = field(default_factory=list)  # measured times in measurement order

    @property
    def speedup(self) -> float:
        if not self.default_us or not self.best_us:
            return 1.0
        return self.default_us / self.best_us


def planned_candidates(kernel, template, prim_func, soc, model=None, config=None):
    """(candidates that plan, their tilings) from the template's knob space, default first."""
    cands, tilings = [], []
    for knobs in template.knob_space(prim_func, soc):
        try:
            _, tiling = template.schedule(prim_func, soc, knobs)
        except TilingError:
            continue
        cands.append(Candidate(kernel, template.name, prim_func, knobs, soc, model, config))
        tilings.append(tiling)
    return cands, tilings


def rank(cands, tilings, cost_model=None) -> np.ndarray:
    """Candidate indices, most promising first: by the learned model's score, or by the
    analytic estimate when there is no model."""
    if cost_model is None:
        times = [estimate_kernel(c.prim_func, t, c.soc).time_us for c, t in zip(cands, tilings)]
        return np.argsort(np.asarray(times), kind="stable")
    feats = np.stack([extract_features(c.prim_func, t, c.soc) for c, t in zip(cands, tilings)])
    return np.argsort(-cost_model.predict(feats), kind="stable")


def tune_kernel(kernel: str, template, prim_func, soc, trials: int = 16, runner=None,
                cost_model=None, database: TuningDatabase | None = None, model=None,
                config=None, seed: int = 0, batch: int = 8, progress=None,
                strategy: str = "model") -> TuneResult:
    """Tune one kernel: measure the default and the ``trials - 1`` best-ranked candidates.

    Parameters
    ----------
    kernel : str
        Kernel name (for messages and runners that build the model).
    template : schedule template class
    prim_func : tvm.tirx.PrimFunc
    soc : SocProfile
    trials : int
        Candidates measured, the default included.
    runner : LocalRunner or RPCRunner, optional
        ``LocalRunner()`` by default.
    cost_model : CostModel, optional
        Ranks candidates; None ranks by the analytic estimate.
    database : TuningDatabase, optional
        Every measured candidate is committed; the best is what later builds use.
    seed : int
        Order of the random search (``strategy="random"``).
    strategy : str
        ``"model"`` (ranked by ``cost_model`` or the analytic estimate) or ``"random"``.
    """
    runner = runner or LocalRunner()
    cands, tilings = planned_candidates(kernel, template, prim_func, soc, model, config)
    workload = workload_of(prim_func, template.name, soc)
    if not cands:
        return TuneResult(kernel, template.name, workload, None, None, {}, 0, 0)
    if strategy == "random":  # the baseline a guided search must beat
        order = [int(i) for i in np.random.default_rng(seed).permutation(len(cands))]
    else:
        order = [int(i) for i in rank(cands, tilings, cost_model)]
    chosen = [0] + [i for i in order if i != 0][:max(0, trials - 1)]
    history, best = [], (None, None)
    default_us = None
    for start in range(0, len(chosen), batch):
        part = chosen[start:start + batch]
        for index, result in zip(part, runner.measure([cands[i] for i in part])):
            if progress is not None:
                progress.update(1)
            if not result.ok:
                logger.info("%s: candidate %s failed: %s", kernel,
                            knobs_to_json(cands[index].knobs), result.error)
                continue
            history.append(result.time_us)
            if index == 0:
                default_us = result.time_us
            if database is not None:
                database.commit(workload, cands[index].knobs, result.time_us, result.runner)
            if best[0] is None or result.time_us < best[0]:
                best = (result.time_us, knobs_to_json(cands[index].knobs))
    return TuneResult(kernel, template.name, workload, default_us, best[0], best[1] or {},
                      len(cands), len(history), history)


def tune_model(model, trials: int = 16, database=None, config=None, runner=None,
               cost_model="default", seed: int = 0, show_progress: bool = True
               ) -> list[TuneResult]:
    """Tune every NPU kernel of ``model`` (ONNX path, ModelProto or Relax IRModule).

    ``cost_model``: a ``CostModel``, a path to one, ``"default"`` (the model shipped in the
    package) or None (rank by the analytic timing model). A model that cannot be loaded is
    logged and the analytic ranking used.
    """
    from tqdm import tqdm

    from .. import ir_attrs
    from ..config import CompileConfig
    from ..kernel_record import record_of
    from ..cost_model.xgb_model import CostModel, load_or_none
    from ..pipeline import partition_for_ascend

    config = config or CompileConfig()
    soc = config.soc
    db = open_database(database)
    if isinstance(cost_model, str):
        cost_model = load_or_none(None if cost_model == "default" else cost_model)
    elif cost_model is not None and not isinstance(cost_model, CostModel):
        raise TypeError(f"cost_model must be a CostModel, a path, 'default' or None, not "
                        f"{type(cost_model).__name__}")
    result = partition_for_ascend(model, config)
    kernels = [(gv.name_hint, f) for gv, f in result.mod.functions.items()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    outcomes = []
    for name, func in sorted(kernels, key=lambda kv: kv[0]):
        template = template_by_name(record_of(func).template)
        prim = func.attrs[ir_attrs.PRIM_FUNC]
        with tqdm(total=trials, desc=f"{name} ({template.name})", unit="trial",
                  disable=not show_progress, leave=True) as bar:
            outcomes.append(tune_kernel(name, template, prim, soc, trials, runner, cost_model,
                                        db, model, config, seed, progress=bar))
    return outcomes


def summary_table(results: list[TuneResult]) -> str:
    """A plain-text table: kernel, template, candidates, measured, default, best, speedup."""
    head = ("kernel", "template", "cands", "measured", "default_us", "best_us", "speedup")
    rows = [head] + [(r.kernel, r.template, str(r.candidates), str(r.measured),
                      f"{r.default_us:.2f}" if r.default_us else "-",
                      f"{r.best_us:.2f}" if r.best_us else "-", f"{r.speedup:.2f}x")
                     for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
