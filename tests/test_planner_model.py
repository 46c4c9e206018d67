"""The planner's learned model: XGBoost ranks a group's tilings, the timing model estimates
the top ones; the same groups as the timing model alone, the top-k honoured, equal tilings
ranked once, features that see the launch's blocks and the busiest core, the shipped model
keeping the timing model's tiling on held-out ResNet-50 convs, a bad model file a warning,
the report saying which model decided, and retraining from a tuning database."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import tvm_ascend
from benchmarks.models.transformer import encoder_layer
from benchmarks.planner_model import partition_signature
from onnx_models import ModelBuilder, attention_model
from tvm_ascend import CompileConfig
from tvm_ascend.cost_model.features import FEATURE_NAMES, PLAN_FEATURE_NAMES
from tvm_ascend.cost_model import features as features_module
from tvm_ascend.cost_model.planner_model import (PlannerRanking, distinct_tilings,
                                                 forget_loaded_models, load_planner_model,
                                                 planner_ranking)
from tvm_ascend.cost_model.xgb_model import DEFAULT_MODEL_PATH, PLANNER_MODEL_PATH
from tvm_ascend.errors import FusionConfigError
from tvm_ascend.partition import cost as cost_module
from tvm_ascend.partition.cost import GroupCost
from tvm_ascend.pipeline import partition_for_ascend
from tvm_ascend.schedules import template_by_name
from tvm_ascend.schedules.matmul import MatmulKnobs
from tvm_ascend.soc import get_soc
from tvm_ascend.tuning import retrain_planner_model, tune_model
from tvm_ascend.tuning.retrain import recall_at, record_groups, variant_groups
from tvm_ascend.tuning.workloads import generate_workloads

SOC = get_soc("Ascend910B1")


def _matmul_bias_relu(dtype="float32"):
    """MatMul + bias + Relu large enough for every MatMul variant on 910B (2M, 2N, 1:2)."""
    b = ModelBuilder(dtype, seed=5)
    x = b.input("x", (2, 256, 128))
    w = b.const(b.rng.standard_normal((128, 256)) * 0.1, "w")
    bias = b.const(b.rng.standard_normal(256), "bias")
    b.output(b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])]), (2, 256, 256))
    return b.model()


def _models():
    return {"matmul_bias_relu": _matmul_bias_relu(),
            "encoder_layer": encoder_layer(batch=2, seq=64, hidden=128, heads=2, ffn=256),
            "attention": attention_model(batch=2, seq=64, heads=2, dim=64).model()}


@pytest.fixture(autouse=True)
def _fresh_models():
    forget_loaded_models()
    yield
    forget_loaded_models()


def _estimated_us(result) -> float:
    return sum(g.estimate.get("time_us", 0.0) for g in result.groups)


@pytest.mark.parametrize("name", ["matmul_bias_relu", "encoder_layer", "attention"])
@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_the_ranked_planner_forms_the_timing_models_groups(name, soc):
    model = _models()[name]
    timing = partition_for_ascend(model, CompileConfig(soc_version=soc))
    # the default planner_top_k (3)
    ranked = partition_for_ascend(model, CompileConfig(soc_version=soc,
                                                       planner_model="xgboost"))
    assert partition_signature(ranked) == partition_signature(timing)
    assert _estimated_us(ranked) == pytest.approx(_estimated_us(timing), rel=1e-12)
    kernels = [g for g in ranked.groups if g.on_npu]
    assert all("decided_by" in g.estimate for g in kernels)


def _matmul_prim():
    workload = next(w for w in generate_workloads(12, seed=4, op_classes=("matmul",))
                    if len(template_by_name("matmul").variants(w.prim_func, SOC)) == 4)
    return workload.prim_func


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_the_timing_model_estimates_only_the_top_k_tilings(monkeypatch, top_k):
    prim = _matmul_prim()
    calls = []
    real = cost_module.estimate_kernel
    monkeypatch.setattr(cost_module, "estimate_kernel",
                        lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    plan = GroupCost(SOC, ranking=planner_ranking("xgboost", top_k)).plan(prim)
    assert len(calls) == top_k
    assert plan.decided_by == f"ranked by xgboost, top {top_k} of 4 estimated"
    assert plan.tiling in calls  # the kept tiling is one the timing model estimated
    calls.clear()
    alone = GroupCost(SOC).plan(prim)
    assert len(calls) == 4 and alone.decided_by == "timing model, all 4 tilings estimated"
    assert plan.time_us >= alone.time_us  # never better than estimating every tiling


def test_top_k_zero_or_a_group_with_fewer_tilings_estimates_all(monkeypatch):
    prim = _matmul_prim()
    assert not planner_ranking("xgboost", 0).ranks and not planner_ranking("xgboost", None).ranks
    plan = GroupCost(SOC, ranking=planner_ranking("xgboost", 4)).plan(prim)
    assert plan.decided_by.startswith("timing model, all 4 tilings estimated")


def test_plan_features_never_read_the_timing_estimate(monkeypatch):
    assert not {n for n in PLAN_FEATURE_NAMES if n.endswith("_us")}
    assert {"log_kernel_us", "log_mte2_us"} <= set(FEATURE_NAMES)

    def refuse(*args, **kwargs):
        raise AssertionError("the planner's features asked the timing model")

    monkeypatch.setattr(features_module, "estimate_kernel", refuse)
    monkeypatch.setattr(cost_module, "estimate_kernel", refuse)
    prim = _matmul_prim()
    template = template_by_name("matmul")
    analysis = template.analyse(prim)
    tilings = [template.plan(analysis, SOC, k) for k in template.variants(prim, SOC)]
    chosen, label = planner_ranking("xgboost", 2).choose(prim, tilings, SOC)
    assert len(chosen) == 2 and label.startswith("ranked by xgboost")


def _features(prim, tiling, names):
    row = features_module.extract_plan_features(prim, tiling, SOC)
    return {n: float(row[PLAN_FEATURE_NAMES.index(n)]) for n in names}


def test_plan_features_see_the_blocks_the_launch_starts_and_the_busiest_core():
    prim = _matmul_prim()
    template = template_by_name("matmul")
    analysis = template.analyse(prim)
    every = template.plan(analysis, SOC, MatmulKnobs())
    half = template.plan(analysis, SOC, MatmulKnobs(cores=SOC.ai_cores // 2))
    mixed = template.plan(analysis, SOC, MatmulKnobs(aiv_ratio=2))
    names = ("launch_block_fraction", "busiest_share", "log_core_hbm", "log_core_macs",
             "imbalance")
    for tiling in (every, half, mixed):
        values = _features(prim, tiling, names)
        ratio = tiling.work.aiv_ratio
        # the blocks the start-up charges: AICs, each with ``ratio`` AIV clients
        assert values["launch_block_fraction"] == pytest.approx(
            -(-tiling.cores // ratio) / SOC.ai_cores)
        share = min(tiling.block_len, tiling.total) / tiling.total
        assert values["busiest_share"] == pytest.approx(share)
        assert values["imbalance"] == pytest.approx(share * tiling.cores, rel=1e-6)
    assert half.cores < every.cores
    a, b = _features(prim, every, names), _features(prim, half, names)
    assert b["launch_block_fraction"] < a["launch_block_fraction"]
    # fewer cores: each does more of the work
    assert b["busiest_share"] > a["busiest_share"]
    assert b["log_core_hbm"] > a["log_core_hbm"] and b["log_core_macs"] > a["log_core_macs"]


def test_a_groups_features_are_normalised_within_the_group():
    prim = _matmul_prim()
    template = template_by_name("matmul")
    analysis = template.analyse(prim)
    tilings = [template.plan(analysis, SOC, k) for k in template.variants(prim, SOC)]
    rows = features_module.plan_feature_matrix(prim, tilings, SOC)
    alone = np.stack([features_module.extract_plan_features(prim, t, SOC) for t in tilings])
    rel = [i for i, n in enumerate(PLAN_FEATURE_NAMES) if n.startswith("rel_")]
    own = [i for i, n in enumerate(PLAN_FEATURE_NAMES) if not n.startswith("rel_")]
    assert rel and np.array_equal(rows[:, own], alone[:, own]) and not alone[:, rel].any()
    for index in rel:
        source = PLAN_FEATURE_NAMES.index(PLAN_FEATURE_NAMES[index][len("rel_"):])
        assert np.allclose(rows[:, index], alone[:, source] - alone[:, source].min())
    assert rows[:, rel].min() == 0.0 and rows[:, rel].max() > 0.0


def test_equal_tilings_are_ranked_and_estimated_once():
    prim = _matmul_prim()
    template = template_by_name("matmul")
    analysis = template.analyse(prim)
    first, second, third, _ = [template.plan(analysis, SOC, k)
                               for k in template.variants(prim, SOC)]
    assert len({first, second, third}) == 3
    tilings = [first, second, first, third, second]  # two variants planned to equal tilings
    assert distinct_tilings(tilings) == [0, 1, 3]
    chosen, label = planner_ranking("xgboost", 3).choose(prim, tilings, SOC)
    assert chosen == [0, 1, 3]
    assert label == ("timing model, all 3 distinct of 5 tilings estimated (no more than "
                     "planner_top_k=3)")
    chosen, label = planner_ranking("xgboost", 2).choose(prim, tilings, SOC)
    assert len(chosen) == 2 and set(chosen) <= {0, 1, 3}
    assert label == "ranked by xgboost, top 2 of 5 estimated"


def test_the_shipped_model_keeps_the_timing_models_tiling_on_held_out_resnet50():
    from benchmarks.harness import BenchConfig
    from benchmarks import train_cost_model

    # ResNet-50 at batch 1, 224x224 is no configuration the shipped model was trained or
    # validated on (it learned from 160x160, 192x192 and batch 2)
    knobs = {"batch": 1, "image": 224}
    trained = train_cost_model.TRAIN_MODELS + train_cost_model.VALID_MODELS
    assert ("resnet50", knobs) not in trained and any(m == "resnet50" for m, _ in trained)
    onnx_model = BenchConfig("resnet50", "b1_224", "float16",
                             knobs=tuple(sorted(knobs.items()))).onnx_model()
    groups = variant_groups([onnx_model])
    convs = [g for g in groups if g["op_class"] == "conv2d"]
    assert len(convs) >= 30 and {g["soc"] for g in convs} == {"Ascend910B1", "Ascend310P3"}
    model = load_planner_model()
    # the fastest distinct tiling of every conv the planner compares is among the model's
    # top 3, so planner_top_k=3 keeps the timing model's tiling on each
    assert recall_at(model, groups, 3) == 1.0
    # and top 3 leaves tilings out (convs compare up to 9 distinct ones)
    assert sum(min(3, len(g["times"])) for g in convs) < 0.8 * sum(len(g["times"])
                                                                  for g in convs)


def test_training_groups_hold_each_distinct_tiling_once():
    from tvm_ascend.tuning.workloads import planner_candidates

    convs = [w for w in generate_workloads(6, seed=1, op_classes=("conv2d",))]
    template = template_by_name("conv2d")
    for workload in convs:
        knobs, tilings = planner_candidates(template, workload.prim_func, SOC,
                                            knob_space=False)
        assert len(tilings) == len(set(tilings)) == len(knobs)
        planned = [template.plan(template.analyse(workload.prim_func), SOC, k)
                   for k in template.variants(workload.prim_func, SOC)]
        assert set(tilings) <= set(planned) and len(tilings) == len(
            distinct_tilings(planned))


@pytest.mark.parametrize("content", [None, b"not an xgboost model", "tuner"])
def test_a_missing_or_bad_model_file_warns_once_and_the_timing_model_decides(
        tmp_path, caplog, content):
    path = tmp_path / "planner.ubj"
    if content == "tuner":  # a model of the other feature layout
        path = DEFAULT_MODEL_PATH
    elif content is not None:
        path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="tvm_ascend.cost_model"):
        first = planner_ranking(str(path), 2)
        again = planner_ranking(str(path), 2)
    assert first == again == PlannerRanking.timing()
    warnings = [r for r in caplog.records if "timing model alone" in r.getMessage()]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()
    if content is None:  # a build with it goes on with the timing model
        result = partition_for_ascend(_matmul_bias_relu(),
                                      CompileConfig(planner_model=str(path)))
        kernel = next(g for g in result.groups if g.on_npu)
        assert kernel.estimate["decided_by"].startswith("timing model")


def test_config_checks_the_planner_fields():
    with pytest.raises(FusionConfigError, match="planner_model='gbm'"):
        CompileConfig(planner_model="gbm")
    with pytest.raises(FusionConfigError, match="planner_top_k=-1"):
        CompileConfig(planner_top_k=-1)
    assert CompileConfig(planner_model="my.ubj", planner_top_k=None).planner_top_k is None


def test_the_report_and_the_reason_say_which_model_decided(tmp_path):
    config = CompileConfig(planner_model="xgboost", planner_top_k=2, cache_dir=str(tmp_path),
                           build_cache=False)
    report = tvm_ascend.build(_matmul_bias_relu(), config=config).fusion_report()
    kernel = next(g for g in report["groups"] if g.get("kernel"))
    assert kernel["estimate"]["decided_by"] == "ranked by xgboost, top 2 of 4 estimated"
    assert "ranked by xgboost, top 2 of 4 estimated" in kernel["reason"]
    timing = partition_for_ascend(_matmul_bias_relu(), CompileConfig())
    group = next(g for g in timing.groups if g.on_npu)
    assert group.estimate["decided_by"] == "timing model, all 4 tilings estimated"
    assert "ranked by" not in group.reason  # the timing model's reason text is as before


def test_the_planner_model_retrains_from_a_small_tuning_database(tmp_path):
    model = _matmul_bias_relu()
    database = tmp_path / "db"
    tune_model(model, trials=6, database=str(database), cost_model=None, show_progress=False)
    output = tmp_path / "planner.ubj"
    summary = retrain_planner_model(str(database), [model], output, base=0, rounds=10)
    assert summary["record_groups"] == 1 and summary["by_runner"] == {"local": 6}
    # and from the groups whose variants the planner compares in the model
    assert summary["variant_groups"] == 1
    assert summary["skipped_template"] == 0 and output.is_file()
    retrained = load_planner_model(output)
    assert retrained is not None and retrained.feature_names == PLAN_FEATURE_NAMES
    # a build with it ranks with it, and still forms the timing model's groups
    ranked = partition_for_ascend(model, CompileConfig(planner_model=str(output)))
    timing = partition_for_ascend(model, CompileConfig())
    assert partition_signature(ranked) == partition_signature(timing)
    assert next(g for g in ranked.groups if g.on_npu).estimate["decided_by"].startswith(
        "ranked by xgboost")


def test_board_records_are_preferred_and_pins_skipped(tmp_path):
    from tvm_ascend.cost_model.database import TuningDatabase, workload_of
    from tvm_ascend.tuning.retrain import _kernels

    model = _matmul_bias_relu()
    template, prim = next((t, p) for t, p in _kernels([model], CompileConfig())
                          if t == "matmul")
    workload = workload_of(prim, template, SOC)
    db = TuningDatabase(tmp_path / "db")
    variants = template_by_name("matmul").variants(prim, SOC)
    for index, knobs in enumerate(variants):
        db.commit(workload, knobs, 10.0 + index, runner="local")
        db.commit(workload, knobs, 20.0 - index, runner="rpc")
    db.commit(workload, variants[0], 1.0, runner="pin")
    groups, counts = record_groups(db, [model])
    assert counts["by_runner"] == {"rpc": len(variants)}
    assert groups[0]["runner"] == "rpc"
    assert np.array_equal(groups[0]["times"], [20.0 - i for i in range(len(variants))])


def test_the_shipped_planner_model_loads():
    model = load_planner_model()
    assert model is not None and model.feature_names == PLAN_FEATURE_NAMES
    assert PLANNER_MODEL_PATH.is_file()


def test_benchmarks_md_renders_the_planner_section(tmp_path):
    from benchmarks import markdown

    mode = {"planner_model": "timing", "planner_top_k": None, "same_partition": True,
            "est_us": 10.0, "estimate_calls": 8, "decided_by": {"timing model": 3},
            "partition_s_median": 1.5, "differs": []}
    ranked = dict(mode, planner_model="xgboost", planner_top_k=1, same_partition=False,
                  est_us=11.0, estimate_calls=5, decided_by={"ranked by xgboost": 2},
                  differs=["timing only: [['lv'], 'matmul', '{}']"])
    data = {"cases": [{"model": "bert_base", "config": "b1_s128", "dtype": "float16",
                       "soc": "Ascend910B1", "kernels": 3, "modes": [mode, ranked]}],
            "repeats": 3, "default": {"planner_model": "timing", "planner_top_k": 2},
            "conclusion": "From top 2 on, every case forms the timing model's partition."}
    lines = markdown.planner_section(data)
    assert lines[0] == "## The learned model in the planner"
    table = [line for line in lines if line.startswith("| bert_base")]
    assert len(table) == 2 and "| xgboost, top 1 | **no** |" in table[1]
    assert any("timing only" in line for line in lines) and data["conclusion"] in lines
    assert markdown.planner_section({}) == []


def test_the_retrain_command_says_what_is_missing(tmp_path, capsys):
    from tvm_ascend.cli import main

    path = tmp_path / "m.onnx"
    path.write_bytes(_matmul_bias_relu().SerializeToString())
    code = main(["retrain", "--database", str(tmp_path / "empty"), "--model", str(path),
                 "--output", str(tmp_path / "p.ubj"), "--base", "0"])
    assert code == 2
    assert "no records of a matmul or conv2d kernel" in capsys.readouterr().err


def test_the_build_key_covers_the_planner_and_a_model_files_bytes(tmp_path):
    from tvm_ascend.runtime.build_cache import build_key

    model = _matmul_bias_relu()

    def key(**fields):
        return build_key(model, None, CompileConfig(cache_dir=str(tmp_path), **fields))

    assert key(planner_model="xgboost") != key() != key(planner_top_k=2)
    path = tmp_path / "planner.ubj"
    path.write_bytes(PLANNER_MODEL_PATH.read_bytes())
    first = key(planner_model=str(path))
    path.write_bytes(PLANNER_MODEL_PATH.read_bytes() + b" ")  # retrained in place
    assert key(planner_model=str(path)) != first
