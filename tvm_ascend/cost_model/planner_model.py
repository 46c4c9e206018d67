"""The planner's learned model: XGBoost ranks a group's candidate tilings before the timing
model estimates the top ones, as MetaSchedule prunes with its model before it measures.

``GroupCost`` (partition/cost.py) plans every tiling variant of a group's template; with a
``PlannerRanking`` over a loaded model it scores the distinct plans (variants that plan to
equal tilings are one candidate, the first of them) with ``planner_model.ubj`` (plan
features only: ``features.PLAN_FEATURE_NAMES``, normalised within the group, nothing read
from the timing estimate, so the ranking is not the estimate in disguise) and runs the
timing model on the ``top_k`` highest-scored; the fastest estimate is kept. ``PlannerRanking.timing()`` estimates every
plan (the timing model alone). A model that cannot be loaded is one warning per file and the
timing model alone, never an error.

Example
-------
>>> ranking = planner_ranking("timing", None)
>>> ranking.choose(None, [object(), object()], None)
([0, 1], 'timing model, all 2 tilings estimated')
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .features import PLAN_FEATURE_NAMES, plan_feature_matrix
from .xgb_model import PLANNER_MODEL_PATH, CostModel, CostModelError

logger = logging.getLogger("tvm_ascend.cost_model")

TIMING_ONLY = "timing model"

_LOADED: dict[str, CostModel | None] = {}  # path -> model, or None once its warning is out
_LOCK = threading.Lock()


@dataclass(frozen=True)
class PlannerRanking:
    """How the planner picks among a group's tilings: ``model`` (a ``CostModel`` over
    ``PLAN_FEATURE_NAMES``, or None for the timing model alone) and ``top_k`` (how many of
    the best-scored the timing model estimates; None or 0: all of them). ``name`` is what
    the fusion report says decided."""

    model: CostModel | None = None
    top_k: int | None = None
    name: str = "timing"

    @staticmethod
    def timing() -> "PlannerRanking":
        """The timing model alone: every tiling is estimated."""
        return PlannerRanking()

    @property
    def ranks(self) -> bool:
        """Whether the model prunes at all (a model and a positive ``top_k``)."""
        return self.model is not None and bool(self.top_k)

    def choose(self, prim, tilings: list, soc) -> tuple[list[int], str]:
        """(indices of ``tilings`` for the timing model to estimate, in their order, and what
        decided, for the report). The first tiling is the template's defaults."""
        total = len(tilings)
        if not self.ranks or total <= self.top_k:
            label = TIMING_ONLY if total == 1 else f"{TIMING_ONLY}, all {total} tilings estimated"
            if self.ranks and total > 1:
                label += f" (no more than planner_top_k={self.top_k})"
            return list(range(total)), label
        # variants that plan to the same tiling estimate the same: only the first of them is
        # a candidate (the one the timing model alone would keep of equal estimates)
        distinct = distinct_tilings(tilings)
        if len(distinct) <= self.top_k:
            return distinct, (f"{TIMING_ONLY}, all {len(distinct)} distinct of {total} "
                              f"tilings estimated (no more than planner_top_k={self.top_k})")
        features = plan_feature_matrix(prim, [tilings[i] for i in distinct], soc)
        # a few rows: XGBoost's in-place predict on one thread (its thread pool and a
        # DMatrix cost 100x more than the trees on a busy machine); the layout was checked
        # when the file was loaded
        scores = self.model.booster.inplace_predict(features)
        top = sorted(distinct[int(i)] for i in np.argsort(-scores, kind="stable")[:self.top_k])
        return top, f"ranked by {self.name}, top {self.top_k} of {total} estimated"


def distinct_tilings(tilings: list) -> list[int]:
    """Indices of the first of each distinct tiling of ``tilings`` (equal ones estimate the
    same, and the timing model alone keeps the first of equal estimates)."""
    first: list[int] = []
    for index, tiling in enumerate(tilings):
        if not any(tilings[j] == tiling for j in first):
            first.append(index)
    return first


def load_planner_model(path=None) -> CostModel | None:
    """The planner's model at ``path`` (default: ``planner_model.ubj`` in the package), loaded
    once per process; None, with one warning per file, when it cannot be used."""
    path = Path(path) if path else PLANNER_MODEL_PATH
    key = str(path.resolve())
    with _LOCK:
        if key not in _LOADED:
            try:
                _LOADED[key] = CostModel.load(path, feature_names=PLAN_FEATURE_NAMES)
                _LOADED[key].booster.set_param({"nthread": 1})
            except CostModelError as err:
                logger.warning("%s; the planner uses the timing model alone (every tiling "
                               "estimated)", err)
                _LOADED[key] = None
        return _LOADED[key]


def forget_loaded_models() -> None:
    """Drop the models loaded so far (a retrained file is read again; a warning repeats)."""
    with _LOCK:
        _LOADED.clear()


def planner_ranking(choice: str, top_k: int | None) -> PlannerRanking:
    """The ``PlannerRanking`` of ``CompileConfig.planner_model`` / ``planner_top_k``:
    ``"timing"``, ``"xgboost"`` (the shipped model) or the path of a ``.json``/``.ubj`` model
    (one ``retrain_planner_model`` wrote). A model that cannot be loaded: the timing model."""
    if choice == "timing" or not top_k:
        return PlannerRanking.timing()
    model = load_planner_model(None if choice == "xgboost" else choice)
    if model is None:
        return PlannerRanking.timing()
    return PlannerRanking(model, int(top_k), "xgboost")


__all__ = ["PlannerRanking", "TIMING_ONLY", "distinct_tilings",
           "load_planner_model", "planner_ranking", "forget_loaded_models"]
