"""Knob spaces, tuned builds in the emulator, the tuning database and the search."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import tvm_ascend
from tvm_ascend import ir_attrs
from tvm_ascend.cost_model import TuningDatabase, TuningDatabaseError, estimate_kernel, workload_of
from tvm_ascend.kernel_record import record_of
from tvm_ascend.partition.cost import GroupCost
from tvm_ascend.schedules import (DataMovementKnobs, DataMovementSchedule,
                                  ElementwiseKnobs, ElementwiseSchedule, MatmulKnobs,
                                  MatmulSchedule, RowReduceKnobs, RowReduceSchedule,
                                  template_by_name)
from tvm_ascend.scheduling import schedule_groups
from tvm_ascend.soc import get_soc
from tvm_ascend.tuning import Candidate, LocalRunner, summary_table, tune_model
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder, add_chain

SOC = get_soc("Ascend910B1")


def _chain_model(shape=(4, 300, 129), dtype="float32"):
    b = ModelBuilder(dtype, seed=5)
    add_chain(b, 0, shape, ["relu", "mul_scalar", "exp", "sub_input", "tanh"])
    return b


def _softmax_model(shape=(37, 200)):
    b = ModelBuilder("float32", seed=6)
    x = b.input("x", shape)
    b.output(b.node("Softmax", [b.node("Mul", [x, b.const([0.5], "s")])], axis=-1), shape)
    return b


def _mlp_model(a_shape=(2, 70, 96), w_shape=(96, 80), dtype="float16"):
    b = ModelBuilder(dtype, seed=7)
    x = b.input("x", a_shape)
    w = b.const(b.rng.standard_normal(w_shape) * 0.1, "w")
    bias = b.const(b.rng.standard_normal(w_shape[-1]), "bias")
    b.output(b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])]),
             tuple(a_shape[:-1]) + (w_shape[-1],))
    return b


def _kernels(model):
    result = tvm_ascend.partition_for_ascend(model)
    return [(gv.name_hint, template_by_name(record_of(f).template),
             f.attrs[ir_attrs.PRIM_FUNC]) for gv, f in result.mod.functions.items()
            if f.attrs and f.attrs.get("Codegen") == "ascend"]


def _build_with(model, database):
    """Build with the tuning database ``database`` (its records decide the plans)."""
    config = tvm_ascend.CompileConfig(tuning_database=str(database.path), build_cache=False)
    return tvm_ascend.build(model, config=config)


@pytest.mark.parametrize("template,knobs_cls", [(ElementwiseSchedule, ElementwiseKnobs),
                                                (RowReduceSchedule, RowReduceKnobs),
                                                (MatmulSchedule, MatmulKnobs)])
def test_default_knobs_give_todays_tiling(template, knobs_cls):
    builder = {"elementwise": _chain_model, "row_reduce": _softmax_model,
               "matmul": _mlp_model}[template.name]()
    ((_, found, func),) = _kernels(builder.model())
    assert found is template
    space = template.knob_space(func, SOC)
    assert space[0] == knobs_cls() and len(space) == len(set(space)) > 4
    assert template.schedule(func, SOC)[1] == template.schedule(func, SOC, knobs_cls())[1]


@pytest.mark.parametrize("make,knobs", [
    (_chain_model, ElementwiseKnobs(cores=5, tile_len=256, double_buffer=False)),
    # a record is planned with at partition time: with 3 cores the merged Mul + Softmax would
    # be estimated slower than its two parts and not formed (tests/test_plan_once.py)
    (_softmax_model, RowReduceKnobs(cores=6, rows_per_tile=2, double_buffer=False)),
    (_mlp_model, MatmulKnobs(base_m=32, base_n=32, cores=5)),
    (_mlp_model, MatmulKnobs(cores=5, aiv_ratio=2)),  # 910B's 1:2 mix: 5 AIV clients, 3 AICs
])
def test_non_default_knobs_print_correct_kernels(tmp_path, make, knobs):
    builder = make()
    model = builder.model()
    ((name, template, func),) = _kernels(model)
    _, default = template.schedule(func, SOC)
    _, tuned = template.schedule(func, SOC, knobs)
    assert tuned != default
    db = TuningDatabase(tmp_path / "db")
    db.commit(workload_of(func, template.name, SOC), knobs, 1.0)
    lib = _build_with(model, db)
    assert_close(lib.run(builder.feeds)[0], run_onnxruntime(model, builder.feeds)[0],
                 builder.dtype)
    (group,) = lib.report.to_json()["groups"]
    assert group["tiling"]["cores"] == tuned.cores
    assert group["tiling"]["tile_len"] == tuned.tile_len
    (launch,) = lib.profile()
    # a 1:2 MIX matmul launches AIC groups of two clients; everything else one block a core
    ratio = tuned.work.aiv_ratio
    assert launch["block_dim"] == -(-tuned.cores // ratio) and launch["task_ratio"] == ratio
    assert launch["gm_read_bytes"] == tuned.gm_read_bytes
    assert launch["gm_write_bytes"] == tuned.gm_write_bytes
    assert launch["peak_ub_bytes"] <= tuned.ub_bytes


def test_database_round_trip_and_best_record(tmp_path):
    ((_, template, func),) = _kernels(_chain_model().model())
    workload = workload_of(func, template.name, SOC)
    db = TuningDatabase(tmp_path / "db")
    db.commit(workload, ElementwiseKnobs(tile_len=512), 9.0)
    db.commit(workload, ElementwiseKnobs(cores=4), 7.5)
    db.commit(workload, ElementwiseKnobs(double_buffer=False), 8.0)
    again = TuningDatabase(tmp_path / "db")
    assert len(again) == 3
    assert again.best(workload)["knobs"] == dataclasses.asdict(ElementwiseKnobs(cores=4))
    assert again.best(workload)["time_us"] == 7.5
    # the same model partitioned again gives the same workload key (reuse on rebuild)
    ((_, _, func2),) = _kernels(_chain_model().model())
    assert again.best(workload_of(func2, template.name, SOC)) is not None
    assert again.best(dict(workload, soc="Ascend310P3")) is None


def test_bad_database_files_give_clear_errors_or_skip_a_cut_last_line(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"not": "a record"}\n{"also": 1}\n')
    with pytest.raises(TuningDatabaseError, match="records.jsonl:1"):
        TuningDatabase(path)
    ((_, template, func),) = _kernels(_chain_model((64,)).model())
    db = TuningDatabase(tmp_path / "ok.jsonl")
    db.commit(workload_of(func, template.name, SOC), ElementwiseKnobs(cores=2), 3.0)
    with open(tmp_path / "ok.jsonl", "a") as out:  # a crash in the middle of a write
        out.write('{"workload": {"op_cl')
    assert len(TuningDatabase(tmp_path / "ok.jsonl")) == 1
    forged = json.loads((tmp_path / "ok.jsonl").read_text().splitlines()[0])
    forged["key"] = "0" * 20
    (tmp_path / "forged.jsonl").write_text(json.dumps(forged) + "\n" + json.dumps(forged) + "\n")
    with pytest.raises(TuningDatabaseError, match="key does not match"):
        TuningDatabase(tmp_path / "forged.jsonl")
    (tmp_path / "binary.jsonl").write_bytes(b"\x80\x04\x95pickle\n")
    with pytest.raises(TuningDatabaseError, match="binary.jsonl"):
        TuningDatabase(tmp_path / "binary.jsonl")


def test_a_damaged_database_line_is_a_warning_naming_file_and_line_and_the_rest_is_used(
        tmp_path, caplog):
    """A damaged line in the middle made the whole database an error."""
    ((_, template, func),) = _kernels(_chain_model((64,)).model())
    path = tmp_path / "records.jsonl"
    db = TuningDatabase(path)
    db.commit(workload_of(func, template.name, SOC), ElementwiseKnobs(cores=2), 3.0)
    good = path.read_text()
    path.write_text(good + '{"workload": garbage}\n' + good.replace("3.0", "2.0"))
    with caplog.at_level("WARNING", logger="tvm_ascend.cost_model"):
        again = TuningDatabase(path)
    assert f"{path}:2: not a tuning record" in caplog.text
    assert len(again) == 2 and again.best(workload_of(func, template.name, SOC))["time_us"] == 2.0


def test_a_text_file_as_tuning_database_is_an_error_naming_the_file(tmp_path):
    """A file that is not a .jsonl was taken for a folder holding records.jsonl, never found:
    the build went on silently untuned."""
    notes = tmp_path / "notes.txt"
    notes.write_text("tuned on Monday\nsee the wiki\n")
    config = tvm_ascend.CompileConfig(tuning_database=str(notes))
    with pytest.raises(TuningDatabaseError, match=rf"tuning database {notes} holds no tuning "
                                                  rf"records .*notes.txt:1"):
        tvm_ascend.build(_chain_model((64,)).model(), config=config)


def test_unusable_recorded_knobs_fall_back_to_the_default(tmp_path, caplog):
    ((_, template, func),) = _kernels(_chain_model().model())
    db = TuningDatabase(tmp_path / "db")
    db.commit(workload_of(func, template.name, SOC), {"tile_len": 12}, 1.0)  # not aligned
    plan = GroupCost(SOC, db).plan(func)
    assert plan.tiling == template.schedule(func, SOC)[1] and plan.knobs is None
    assert "tuning record" not in plan.source
    assert "elementwise kernel of shapes 4x300x129" in caplog.text
    assert "not usable" in caplog.text
    # a usable record decides the plan: its knobs, its tiling, its estimate, and says so
    tuned = ElementwiseKnobs(tile_len=64)
    db.commit(workload_of(func, template.name, SOC), tuned, 0.5)
    plan = GroupCost(SOC, db).plan(func)
    assert plan.knobs == tuned
    assert plan.tiling == template.schedule(func, SOC, tuned)[1] != template.schedule(func, SOC)[1]
    assert plan.source == "timing model, tiling of the tuning record"
    assert "of a tuning record" in plan.decision.reason
    assert plan.time_us == pytest.approx(estimate_kernel(func, plan.tiling, SOC).time_us)


def test_tuning_beats_the_untuned_default_and_is_reused_on_rebuild(tmp_path):
    # fp16 with a tile that fits twice per core on few cores: a smaller tile uses every core
    builder = _chain_model((1, 1000, 1003), "float16")
    model = builder.model()
    results = tune_model(model, trials=12, database=tmp_path / "db", cost_model=None,
                         show_progress=False, seed=0)
    (result,) = results
    assert result.measured == 12 and result.best_us < result.default_us
    assert min(result.history) == result.best_us
    table = summary_table(results)
    assert result.kernel in table and "speedup" in table
    db = TuningDatabase(tmp_path / "db")
    ((name, template, func),) = _kernels(model)
    record = db.best(workload_of(func, template.name, SOC))
    assert record["time_us"] == pytest.approx(result.best_us)
    # partitioning with the database plans with the best knobs, and the kernel record carries
    # them to a schedule stage whose own cost holds no database
    config = tvm_ascend.CompileConfig(tuning_database=str(tmp_path / "db"))
    partitioned = tvm_ascend.partition_for_ascend(model, config)
    scheduled, tilings = schedule_groups(partitioned.mod, GroupCost(SOC))
    best_knobs = ElementwiseKnobs(**record["knobs"])
    assert tilings[name] == template.schedule(func, SOC, best_knobs)[1]
    # the search is deterministic for a fixed seed
    again = tune_model(model, trials=12, cost_model=None, show_progress=False, seed=0)
    assert again[0].best_us == result.best_us and again[0].history == result.history


@pytest.mark.slow  # two spawned workers import TVM: ~12 s on 2 cores
def test_local_runner_in_processes_matches_in_process(tmp_path):
    ((name, template, func),) = _kernels(_chain_model().model())
    cands = [Candidate(name, template.name, func, k, SOC)
             for k in template.knob_space(func, SOC)[:6]]
    inline = LocalRunner().measure(cands)
    pooled = LocalRunner(workers=2).measure(cands)
    assert [r.time_us for r in inline] == [r.time_us for r in pooled]
    assert all(r.ok for r in inline)


def test_tune_command_prints_a_summary_and_fills_the_database(tmp_path, capsys):
    import onnx

    from tvm_ascend.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(_softmax_model().model(), path)
    assert main(["tune", "--model", str(path), "--trials", "3", "--database",
                 str(tmp_path / "db"), "--cost_model", "none"]) == 0
    out = capsys.readouterr().out
    assert "row_reduce" in out and "speedup" in out
    assert len(TuningDatabase(tmp_path / "db")) == 3
    assert main(["tune", "--model", str(path), "--trials", "0", "--database",
                 str(tmp_path / "db")]) == 2
    assert "--trials=0" in capsys.readouterr().err


def test_tune_on_the_bundled_demo_tunes_its_data_movement_kernel(tmp_path, capsys):
    """Regression (issue 16): `tvm-ascend tune` on examples/demo.onnx crashed, the
    data-movement template had no knob space; the tuned rebuild still matches onnxruntime."""
    import onnx
    import numpy as np

    from tvm_ascend.cli import main
    from tvm_ascend.config import CompileConfig

    demo = Path(__file__).resolve().parents[1] / "examples" / "demo.onnx"
    assert main(["tune", "--model", str(demo), "--trials", "3", "--database",
                 str(tmp_path / "db"), "--cost_model", "none"]) == 0
    assert "data_movement" in capsys.readouterr().out
    records = [json.loads(line) for line in
               (tmp_path / "db" / "records.jsonl").read_text().splitlines() if line.strip()]
    assert sum(r["workload"]["op_class"] == "data_movement" for r in records) == 3
    lib = tvm_ascend.build(str(demo), config=CompileConfig(tuning_database=str(tmp_path / "db"),
                                                           build_cache=False))
    model = onnx.load(demo)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 64, 100)).astype("float32")
    (out,) = lib.run({"x": x})
    assert_close(out, run_onnxruntime(model, {"x": x})[0], "float32")


def test_data_movement_knob_space_starts_with_the_defaults():
    b = ModelBuilder()
    x = b.input("x", [6, 20, 36])
    b.output(b.node("Relu", [b.node("Transpose", [x], perm=[0, 2, 1])]), [6, 36, 20])
    ((_, template, func),) = _kernels(b.model())
    assert template is DataMovementSchedule
    space = template.knob_space(func, SOC)
    assert space[0] == DataMovementKnobs() and len(space) == len(set(space)) > 4
    assert template.schedule(func, SOC)[1] == template.schedule(func, SOC, space[0])[1]


@pytest.mark.slow  # one emulator build and run (~15 s)
def test_emulator_runner_reads_the_kernels_counters():
    builder = _softmax_model()
    model = builder.model()
    ((name, template, func),) = _kernels(model)
    knobs = RowReduceKnobs(cores=3, rows_per_tile=2)
    _, tiling = template.schedule(func, SOC, knobs)
    (result,) = LocalRunner(mode="emulator", inputs=builder.feeds).measure(
        [Candidate(name, template.name, func, knobs, SOC, model)])
    # the pinned knobs reach the build through CompileConfig.tuning_database (plan time)
    assert result.ok, result.error
    assert result.counters["gm_read_bytes"] == tiling.gm_read_bytes
    assert result.counters["block_dim"] == tiling.cores
    assert result.time_us == pytest.approx(LocalRunner().measure(
        [Candidate(name, template.name, func, knobs, SOC)])[0].time_us)


def test_report_estimates_the_tiling_of_a_tuning_record(tmp_path):
    """A record that changes a kernel's tiling: the partitioner plans the kernel with it (the
    tuning database is asked at plan time), so the report's estimate is the one the groups
    were formed on, for the tiling the kernel is built with, and says so."""
    builder = _chain_model()
    ((_, template, func),) = _kernels(builder.model())
    db = TuningDatabase(tmp_path / "db")
    db.commit(workload_of(func, template.name, SOC), ElementwiseKnobs(cores=2), 1.0)
    plain = tvm_ascend.build(builder.model()).report.to_json()
    config = tvm_ascend.CompileConfig(tuning_database=str(tmp_path / "db"))
    tuned = tvm_ascend.build(builder.model(), config=config)
    (before,) = [g for g in plain["groups"] if g["on_npu"]]
    (after,) = [g for g in tuned.report.to_json()["groups"] if g["on_npu"]]
    assert after["tiling"]["cores"] == 2 != before["tiling"]["cores"]
    assert after["estimate"]["source"] == "timing model, tiling of the tuning record"
    assert "of a tuning record" in after["reason"]
    assert after["estimate"]["time_us"] > before["estimate"]["time_us"]  # 2 cores, not 24
    # the partitioner's estimate is the record's: nothing is estimated again after scheduling
    (planned,) = [g for g in tvm_ascend.partition_for_ascend(builder.model(), config).groups
                  if g.on_npu]
    # (the report adds the estimate's uncertainty band to the planner's figures)
    reported = {k: v for k, v in after["estimate"].items() if k not in ("band", "band_us")}
    assert planned.estimate == reported
    assert tuned.report.to_json()["estimate"]["latency_us"] == pytest.approx(
        after["estimate"]["time_us"], abs=1e-3)
    assert_close(tuned.run(builder.feeds)[0], run_onnxruntime(builder.model(), builder.feeds)[0],
                 "float32")
