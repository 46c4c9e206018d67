"""The learned cost model: XGBoost over candidate features, trained MetaSchedule-style.

Targets are normalised per workload (``best time / time``, 1.0 for the fastest candidate of its
workload), the squared error is weighted by that target so fast candidates count most, and the
model is judged by the top-k peak score. A pairwise-ranking objective (``rank:pairwise`` with
one query per workload) is trained beside it by ``fit_best`` and the better one on held-out
workloads is kept. Models are saved only as XGBoost JSON or UBJ (never pickle), with the
feature names stored in the file so a foreign or stale file is refused. Two models ship:
``default_model.ubj`` (the tuner's, over ``FEATURE_NAMES``) and ``planner_model.ubj`` (the
partitioner's, over ``PLAN_FEATURE_NAMES``: no feature of it is read from the timing estimate).

Example
-------
>>> model = CostModel("reg").fit(groups)            # doctest: +SKIP
>>> scores = model.predict(features)                # higher is faster
>>> model.save("model.json"); CostModel.load("model.json")
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from ..errors import AscendError
from .features import FEATURE_NAMES, PLAN_FEATURE_NAMES

logger = logging.getLogger("tvm_ascend.cost_model")

DEFAULT_MODEL_PATH = Path(__file__).resolve().parent / "default_model.ubj"
PLANNER_MODEL_PATH = Path(__file__).resolve().parent / "planner_model.ubj"
FEATURES_ATTR = "tvm_ascend_features"
OBJECTIVE_ATTR = "tvm_ascend_objective"
OBJECTIVES = {"reg": "reg:squarederror", "rank": "rank:pairwise"}
# MetaSchedule's XGBModel defaults (performance.md section 2), fewer rounds: labels here are
# deterministic and the shipped model must stay small
BASE_PARAMS = {"max_depth": 6, "eta": 0.2, "gamma": 0.001, "min_child_weight": 0, "seed": 43,
               "nthread": 2, "verbosity": 0}


class CostModelError(AscendError):
    """A cost-model file is missing, truncated, foreign or was trained on other features."""


def features_digest(names=FEATURE_NAMES) -> str:
    """Fingerprint of the feature layout ``names`` stored in every saved model."""
    return hashlib.sha256("|".join(names).encode()).hexdigest()[:16]


def normalised_targets(costs: np.ndarray) -> np.ndarray:
    """``min(costs) / costs`` of one workload: 1.0 for the fastest candidate."""
    costs = np.asarray(costs, dtype=np.float64)
    return costs.min() / costs


def _stack(groups):
    xs, ys, qid = [], [], []
    for index, (features, costs) in enumerate(groups):
        xs.append(np.asarray(features, dtype=np.float32))
        ys.append(normalised_targets(costs))
        qid.append(np.full(len(costs), index, dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(qid)


class CostModel:
    """An XGBoost model scoring candidates (higher score = faster).

    Parameters
    ----------
    objective : str
        ``"reg"`` (weighted squared error on normalised throughput, as MetaSchedule) or
        ``"rank"`` (XGBoost ``rank:pairwise``, one query per workload).
    rounds : int
        Boosting rounds.
    feature_names : tuple of str
        The feature layout: ``FEATURE_NAMES`` (the tuner's) or ``PLAN_FEATURE_NAMES`` (the
        planner's).
    """

    def __init__(self, objective: str = "reg", rounds: int = 60, booster=None,
                 feature_names=FEATURE_NAMES):
        if objective not in OBJECTIVES:
            raise CostModelError(f"objective={objective!r} is not one of {sorted(OBJECTIVES)}")
        self.objective = objective
        self.rounds = rounds
        self.booster = booster
        self.feature_names = tuple(feature_names)

    def fit(self, groups) -> "CostModel":
        """Train on ``groups``: a list of (features [n, d], costs [n]) per workload."""
        import xgboost as xgb

        groups = [(f, c) for f, c in groups if len(c) > 0]
        if not groups:
            raise CostModelError("no training records: every workload group is empty")
        x, y, qid = _stack(groups)
        if self.objective == "reg":
            data = xgb.DMatrix(x, label=y, weight=y, feature_names=list(self.feature_names))
        else:
            data = xgb.DMatrix(x, label=y, qid=qid, feature_names=list(self.feature_names))
        params = dict(BASE_PARAMS, objective=OBJECTIVES[self.objective])
        self.booster = xgb.train(params, data, num_boost_round=self.rounds)
        self.booster.set_attr(**{FEATURES_ATTR: features_digest(self.feature_names),
                                 OBJECTIVE_ATTR: self.objective})
        return self

    def predict(self, features) -> np.ndarray:
        """Scores of candidates (rows of ``features``); higher means faster."""
        import xgboost as xgb

        if self.booster is None:
            raise CostModelError("the cost model is not trained; call fit() or load()")
        x = np.atleast_2d(np.asarray(features, dtype=np.float32))
        return self.booster.predict(xgb.DMatrix(x, feature_names=list(self.feature_names)))

    def save(self, path) -> str:
        """Write the model as XGBoost JSON (``.json``) or UBJ (``.ubj``), atomically."""
        path = Path(path)
        if path.suffix not in (".json", ".ubj"):
            raise CostModelError(f"{path}: a cost model is saved as .json or .ubj (XGBoost's own "
                                 "formats), never pickled")
        if self.booster is None:
            raise CostModelError("nothing to save: the model is not trained")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
        os.close(fd)
        try:
            self.booster.save_model(tmp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it owner-only; a model is shared
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return str(path)

    @classmethod
    def load(cls, path, feature_names=FEATURE_NAMES) -> "CostModel":
        """Read a model written by ``save`` over the layout ``feature_names``; a missing,
        truncated, foreign or stale file (or one of the other layout) raises
        ``CostModelError`` naming the file."""
        import xgboost as xgb

        path = Path(path)
        if path.suffix not in (".json", ".ubj"):
            raise CostModelError(f"{path}: not an XGBoost .json/.ubj model file (pickles and "
                                 "other formats are never loaded)")
        if not path.is_file():
            raise CostModelError(f"cost model file {path} does not exist")
        booster = xgb.Booster()
        try:
            booster.load_model(str(path))
        except Exception as err:  # noqa: BLE001 - XGBoostError for any unreadable content
            raise CostModelError(f"cost model file {path} is truncated or not an XGBoost "
                                 f"model: {str(err).splitlines()[0]}") from err
        digest, expected = booster.attr(FEATURES_ATTR), features_digest(feature_names)
        if digest != expected:
            which = "planner" if tuple(feature_names) == PLAN_FEATURE_NAMES else "tuner"
            raise CostModelError(
                f"cost model file {path} was not written by this tvm-ascend for the {which} "
                f"(feature layout {digest!r}, expected {expected!r}); retrain it with "
                "benchmarks/train_cost_model.py")
        return cls(booster.attr(OBJECTIVE_ATTR) or "reg", booster=booster,
                   feature_names=feature_names)


def load_or_none(path=None) -> CostModel | None:
    """The model at ``path`` (default: the one shipped in the package), or None with a logged
    warning when it cannot be used: callers then rank by the analytic timing model."""
    path = Path(path) if path else DEFAULT_MODEL_PATH
    try:
        return CostModel.load(path)
    except CostModelError as err:
        logger.warning("%s; falling back to the analytic timing model", err)
        return None


def pairwise_accuracy(scores, costs) -> float:
    """Fraction of candidate pairs (with different costs) that ``scores`` order like ``costs``
    (higher score should mean lower cost)."""
    scores, costs = np.asarray(scores, dtype=np.float64), np.asarray(costs, dtype=np.float64)
    i, j = np.triu_indices(len(costs), k=1)
    differ = costs[i] != costs[j]
    if not differ.any():
        return 1.0
    right = np.sign(scores[i] - scores[j]) == np.sign(costs[j] - costs[i])
    return float(right[differ].mean())


def top_k_score(scores, costs, k: int = 1) -> float:
    """Best cost / best cost among the ``k`` highest-scored candidates (1.0 is perfect)."""
    costs = np.asarray(costs, dtype=np.float64)
    top = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]
    return float(costs.min() / costs[top].min())


def peak_score(scores, costs, k_max: int = 32) -> float:
    """MetaSchedule's a-peak@k: the mean of ``top_k_score`` over k = 1..k_max."""
    k_max = min(k_max, len(costs))
    return float(np.mean([top_k_score(scores, costs, k) for k in range(1, k_max + 1)]))


def evaluate(model: CostModel, groups) -> dict:
    """Mean pairwise accuracy, top-1 and a-peak@32 of ``model`` over workload groups."""
    pairs, top1, peak = [], [], []
    for features, costs in groups:
        scores = model.predict(features)
        pairs.append(pairwise_accuracy(scores, costs))
        top1.append(top_k_score(scores, costs, 1))
        peak.append(peak_score(scores, costs))
    return {"pairwise_accuracy": float(np.mean(pairs)), "top1_score": float(np.mean(top1)),
            "peak32": float(np.mean(peak))}


def fit_best(train_groups, valid_groups, rounds: int = 60, feature_names=FEATURE_NAMES
             ) -> tuple[CostModel, dict]:
    """Train the regression and the pairwise-ranking model; keep the one with the better
    validation (top-1 score, then pairwise accuracy). Returns (model, {objective: metrics})."""
    results = {}
    models = {}
    for objective in ("reg", "rank"):
        models[objective] = CostModel(objective, rounds,
                                      feature_names=feature_names).fit(train_groups)
        results[objective] = evaluate(models[objective], valid_groups)
    best = max(results, key=lambda o: (results[o]["top1_score"],
                                       results[o]["pairwise_accuracy"]))
    logger.info("cost model objectives on validation: %s; kept %s", results, best)
    return models[best], results
