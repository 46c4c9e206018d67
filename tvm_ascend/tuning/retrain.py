"""Retraining the planner's learned model from tuning records (and generated workloads).

A tuning database (``tvm-ascend tune``) holds, per kernel workload, every measured candidate:
its knobs, its time and the runner that measured it (``"local"``: plan counters through the
timing model; ``"emulator"``: the emulator's counters through it; ``"rpc"``: a board). A
record names its kernel by workload (shapes, dtypes, SoC, structure hash), not by PrimFunc, so
the models the records were tuned on are partitioned again to find each kernel's PrimFunc;
each record's knobs are then planned into a Tiling, whose plan features
(``PLAN_FEATURE_NAMES``) are the model's input and the record's time its label. Where a
workload was measured by several runners, only the most trusted runner's records are used
(a board over the emulator over the local runner): times of different runners are not on one
scale. Runner pins (``"pin"``: a knob forced for one build) are no measurements and are
skipped.

Beside the records, a retrain learns from the planner's own problems (``variant_groups``):
every group whose tilings the planner compares while partitioning the models, its distinct
variants labelled by the timing model; and from generated matmul and conv2d workloads
(``generated_groups``). Each group is one ranking problem: its targets are normalised within
it (``best / time``) and the ranking objective takes it as one query.

``retrain_planner_model`` writes the model a build then names with
``CompileConfig(planner_model=PATH)``; ``python benchmarks/train_cost_model.py --planner``
trains the shipped one from generated workloads and the variant groups of benchmark models
(at other batch sizes, sequences and image sizes than ``benchmarks/planner_model.py``
measures). Calibration rows (measured whole
kernels, ``benchmarks/calibration.py``) enter through ``extra_groups``: each group is the
candidates of one workload with measured times, which is what a row becomes once it carries
more than one tiling of its kernel.

Example
-------
>>> summary = retrain_planner_model("tuning_db", ["bert.onnx"], output="planner.ubj")  # doctest: +SKIP
>>> CompileConfig(planner_model="planner.ubj", planner_top_k=2)                       # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import tvm_ffi

from ..cost_model.database import open_database, workload_of
from ..cost_model.features import PLAN_FEATURE_NAMES, PLAN_TEMPLATES, plan_feature_matrix
from ..cost_model.planner_model import (PlannerRanking, distinct_tilings,
                                        forget_loaded_models)
from ..cost_model.xgb_model import CostModel, CostModelError, evaluate
from ..errors import TilingError
from ..schedules import knobs_from_json, template_by_name

logger = logging.getLogger("tvm_ascend.tuning")

# the runners a record may name, most trusted first; "pin" (a forced knob) is no measurement
RUNNER_TRUST = ("rpc", "emulator", "local")


def _kernels(models, config) -> list[tuple[str, object]]:
    """(template name, PrimFunc) of every NPU kernel of ``models``, partitioned as ``config``
    says (without its tuning database, so each kernel is planned as the records found it)."""
    from .. import ir_attrs
    from ..kernel_record import record_of
    from ..pipeline import partition_for_ascend

    config = config.replace(tuning_database=None, planner_model="timing")
    found = []
    for model in models:
        result = partition_for_ascend(model, config)
        for _, func in result.mod.functions.items():
            if func.attrs and func.attrs.get("Codegen") == "ascend":
                found.append((record_of(func).template, func.attrs[ir_attrs.PRIM_FUNC]))
    return found


def _trusted(records: list[dict]) -> tuple[str, list[dict]]:
    """(runner, records) of the most trusted runner among ``records`` (pins left out)."""
    for runner in RUNNER_TRUST:
        chosen = [r for r in records if r.get("runner", "local") == runner]
        if chosen:
            return runner, chosen
    return "", []


def record_groups(database, models, config=None) -> tuple[list[dict], dict]:
    """Training groups from the records of ``database`` whose kernels are in ``models``: one
    group per workload (``{"workload", "op_class", "soc", "runner", "features", "times"}``),
    and counts of what was used and skipped (by reason)."""
    from ..config import CompileConfig

    config = config or CompileConfig()
    db = open_database(database)
    soc = config.soc
    counts = {"workloads": 0, "records": 0, "skipped_template": 0, "skipped_unplannable": 0,
              "skipped_single": 0, "by_runner": {}}
    groups, seen = [], set()
    for template_name, prim in _kernels(models, config):
        workload = workload_of(prim, template_name, soc)
        key = str(sorted(workload.items()))
        records = db.records(workload)
        if key in seen or not records:
            continue
        seen.add(key)
        if template_name not in PLAN_TEMPLATES:
            counts["skipped_template"] += len(records)  # the planner ranks no other template
            continue
        runner, records = _trusted(records)
        template = template_by_name(template_name)
        try:
            analysis = template.analyse(prim)
        except TilingError:  # the template no longer takes it: its records plan nothing
            counts["skipped_unplannable"] += len(records)
            continue
        tilings, times = [], []
        for record in records:
            try:
                knobs = knobs_from_json(template_name, record["knobs"])
                tiling = template.plan(analysis, soc, knobs)
            except (TypeError, TilingError):
                counts["skipped_unplannable"] += 1
                continue
            tilings.append(tiling)
            times.append(float(record["time_us"]))
        if len(times) < 2:  # one candidate teaches a ranking nothing
            counts["skipped_single"] += len(times)
            continue
        groups.append({"workload": workload["structure"], "op_class": template_name,
                       "soc": soc.name, "runner": runner,
                       "features": plan_feature_matrix(prim, tilings, soc),
                       "times": np.asarray(times)})
        counts["workloads"] += 1
        counts["records"] += len(times)
        counts["by_runner"][runner] = counts["by_runner"].get(runner, 0) + len(times)
    return groups, counts


def generated_groups(count: int = 48, seed: int = 1, socs=("Ascend910B1", "Ascend310P3")
                     ) -> list[dict]:
    """Training groups from ``count`` generated matmul and conv2d workloads (timing-model
    labels), the shipped model's data: a retrained model keeps what it knew. Each workload
    gives two groups per SoC: its knob space (how the plan's counts turn into time) and its
    variants alone (what the planner ranks)."""
    from ..soc import get_soc
    from .workloads import PLANNER_OP_CLASSES, generate_workloads, planner_dataset

    workloads = generate_workloads(count, seed, PLANNER_OP_CLASSES)
    chips = [get_soc(name) for name in socs]
    return planner_dataset(workloads, chips) + planner_dataset(workloads, chips,
                                                               knob_space=False)


@dataclasses.dataclass(frozen=True)
class _Recording(PlannerRanking):
    """The timing model alone, keeping every group's candidate tilings it was asked about."""

    seen: list = dataclasses.field(default_factory=list, compare=False)

    def choose(self, prim, tilings: list, soc) -> tuple[list[int], str]:
        distinct = distinct_tilings(tilings)
        if len(distinct) >= 2:
            self.seen.append((prim, [tilings[i] for i in distinct], soc))
        return super().choose(prim, tilings, soc)


def variant_groups(models, socs=("Ascend910B1", "Ascend310P3"), config=None) -> list[dict]:
    """Training groups from the planner's own problems: every group of ``models`` whose
    tilings the planner compares while it partitions them for each SoC of ``socs`` (the
    kept partition's and the alternatives' groups), its distinct variants labelled by the
    timing model. ``config``: the shapes, dtype and fusion level (default ``CompileConfig``)."""
    from ..config import CompileConfig
    from ..frontend import load_model
    from ..partition.cost import GroupCost
    from ..pipeline import fusion_policy, plan_fusion, precision_of
    from .workloads import planner_group

    config = config or CompileConfig()
    groups, seen_keys = [], set()
    for model in models:
        imported = load_model(model, config.input_shape)
        for soc_name in socs:
            built = config.replace(soc_version=soc_name, planner_model="timing")
            recording = _Recording()
            plan_fusion(imported, fusion_policy(built, imported), built.soc,
                        precision=precision_of(built),
                        cost=GroupCost(built.soc, None, recording))
            for prim, tilings, soc in recording.seen:
                key = (tvm_ffi.structural_hash(prim, map_free_vars=True), soc.name)
                if key in seen_keys:  # a layer repeated: one group teaches as much
                    continue
                seen_keys.add(key)
                groups.append(planner_group(f"{soc.name}/{len(groups)}", tilings[0].template,
                                            prim, tilings, soc))
    return groups


def recall_at(model: CostModel, groups: list[dict], k: int) -> float:
    """The fraction of ``groups`` whose fastest candidate (the first of equal times, as the
    timing model alone keeps) is among the ``k`` that ``model`` scores highest: how often
    the planner at ``planner_top_k=k`` keeps the timing model's tiling."""
    hits = []
    for group in groups:
        scores = model.booster.inplace_predict(np.asarray(group["features"], np.float32))
        top = np.argsort(-scores, kind="stable")[:k]
        hits.append(int(np.argmin(group["times"])) in top)
    return float(np.mean(hits)) if hits else 1.0


def planner_metrics(model: CostModel, groups: list[dict]) -> dict:
    """``xgb_model.evaluate``'s metrics of ``model`` on ``groups`` and its ``recall_at`` 1..4."""
    metrics = evaluate(model, [(g["features"], g["times"]) for g in groups])
    metrics.update({f"recall_at_{k}": recall_at(model, groups, k) for k in (1, 2, 3, 4)})
    return metrics


def train_planner_model(train: list[dict], valid: list[dict] | None = None,
                        rounds: int = 60) -> tuple[CostModel, dict]:
    """The planner model fit on ``train`` groups and its metrics (``planner_metrics``): with
    ``valid``, the regression and the pairwise-ranking objective are both fit and the one
    that more often has the fastest candidate among its top 3, then top 2, top 1, on
    ``valid`` is kept (the planner keeps the timing model's tiling exactly then); without
    it, the regression one, with its metrics on ``train``."""
    pairs = [(g["features"], g["times"]) for g in train]
    if not pairs:
        raise CostModelError("no training groups: no workload has two or more usable records")
    if not valid:
        model = CostModel("reg", rounds, feature_names=PLAN_FEATURE_NAMES).fit(pairs)
        return model, {"reg": planner_metrics(model, train)}
    models = {o: CostModel(o, rounds, feature_names=PLAN_FEATURE_NAMES).fit(pairs)
              for o in ("reg", "rank")}
    results = {o: planner_metrics(m, valid) for o, m in models.items()}
    best = max(results, key=lambda o: (results[o]["recall_at_3"], results[o]["recall_at_2"],
                                       results[o]["recall_at_1"], results[o]["top1_score"]))
    logger.info("planner model objectives on validation: %s; kept %s", results, best)
    return models[best], results


def retrain_planner_model(database, models, output, config=None, base: int = 48,
                          extra_groups=(), rounds: int = 60, model_variants: bool = True
                          ) -> dict:
    """Retrain the planner's model from the tuning records of ``database`` (see the module
    docstring) and write it to ``output`` (``.ubj`` or ``.json``).

    Parameters
    ----------
    database : str, Path or TuningDatabase
        The tuning database (``tvm-ascend tune --database``).
    models : list
        The models (ONNX paths, ModelProtos or Relax modules) the records were tuned on.
    output : str or Path
        Where the model goes; a build uses it with ``CompileConfig(planner_model=output)``.
    config : CompileConfig, optional
        The SoC and shapes the records were measured with (``tvm-ascend tune``'s).
    base : int
        Generated workloads trained on beside the records (0: the records alone).
    extra_groups : list of dict
        More groups (``{"features": [n, len(PLAN_FEATURE_NAMES)], "times": [n]}``), e.g.
        measured calibration candidates.
    rounds : int
        Boosting rounds.
    model_variants : bool
        Also train on the groups whose variants the planner compares in ``models`` on the
        records' SoC, labelled by the timing model (``variant_groups``), as the shipped
        model is.

    Returns a summary: the counts of ``record_groups``, the groups trained on, the metrics on
    the records' groups, the output path.
    """
    from ..config import CompileConfig

    output = Path(output)
    config = config or CompileConfig()
    from_records, counts = record_groups(database, models, config)
    extra = list(extra_groups)
    variants = variant_groups(models, (config.soc.name,), config) \
        if model_variants and (from_records or extra) else []
    train = from_records + extra + variants + (generated_groups(base) if base else [])
    if not from_records and not extra:
        raise CostModelError(f"tuning database {database}: no records of a matmul or conv2d "
                             f"kernel of the given models with two or more candidates "
                             f"({counts}); run 'tvm-ascend tune' on them first")
    model, _ = train_planner_model(train, rounds=rounds)
    model.save(output)
    forget_loaded_models()  # a build in this process reads the new file
    on_records = evaluate(model, [(g["features"], g["times"]) for g in from_records + extra])
    logger.info("planner model retrained on %d record groups (%s) + %d of the models' "
                "variants + %d generated: %s", len(from_records), counts["by_runner"],
                len(variants), len(train) - len(from_records) - len(extra) - len(variants),
                on_records)
    return {**counts, "record_groups": len(from_records), "extra_groups": len(extra),
            "variant_groups": len(variants), "train_groups": len(train),
            "on_records": on_records, "output": str(output)}


__all__ = ["record_groups", "generated_groups", "variant_groups", "recall_at", "planner_metrics",
           "train_planner_model", "retrain_planner_model", "RUNNER_TRUST"]
