"""Plan once and carry the plan (issue 17, F1/F3): the partitioner's plans, tuning records
included, are what the schedule stage applies, and no candidate is scheduled twice."""
from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter

import pytest
import tvm
import tvm_ffi

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder, conv_bn
from tvm_ascend import CompileConfig, ir_attrs
from tvm_ascend.codegen import ext_codegen
from tvm_ascend.codegen.ext_codegen import scheduled_kernels
from tvm_ascend.cost_model import TuningDatabase, workload_of
from tvm_ascend.errors import CodegenError
from tvm_ascend.frontend import load_model
from tvm_ascend.kernel_record import KernelRecord, record_of
from tvm_ascend.partition.cost import GroupCost
from tvm_ascend.pipeline import fusion_policy, plan_fusion
from tvm_ascend.schedules import TEMPLATES, RowReduceKnobs
from tvm_ascend.scheduling import schedule_groups
from tvm_ascend.soc import get_soc

SOC = get_soc("Ascend910B1")


def record_template(func) -> str:
    """The template the partitioner chose for a codegen function."""
    return record_of(func).template


def _mlp_and_conv():
    """MatMul + bias + Relu (a cube kernel with an elementwise epilogue) beside a Conv +
    BatchNorm + Relu: both cube templates, each with variants to estimate."""
    b = ModelBuilder("float32", seed=21)
    x = b.input("x", (2, 70, 96))
    w = b.const(b.rng.standard_normal((96, 144)) * 0.1, "w")
    bias = b.const(b.rng.standard_normal(144), "bias")
    b.output(b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])]), (2, 70, 144))
    image = b.input("image", (1, 8, 12, 12))
    b.output(conv_bn(b, image, 8, 16), (1, 16, 12, 12))
    return b


def _count_schedules(monkeypatch) -> Counter:
    """Wrap every template's ``analyse``, ``plan`` and ``apply``; the Counter counts calls per
    (step, template, PrimFunc structure, knobs), the defaults however spelled (None or
    ``Knobs()``) counted as one. ``schedule`` is the three in a row, so it is counted too."""
    calls: Counter = Counter()
    structure_of = {}  # id of an analysis -> the structure of the PrimFunc it analysed

    def default(template, knobs):
        return json.dumps(dataclasses.asdict(knobs if knobs is not None else template.Knobs()),
                          sort_keys=True)

    for template in TEMPLATES:
        analyse, plan, apply = template.analyse, template.plan, template.apply

        def counted_analyse(func, _t=template, _f=analyse):
            analysis = _f(func)
            structure = tvm_ffi.structural_hash(func, map_free_vars=True)
            structure_of[id(analysis)] = structure
            calls[("analyse", _t.name, structure, "")] += 1
            return analysis

        def counted_plan(analysis, soc, knobs=None, _t=template, _f=plan):
            calls[("plan", _t.name, structure_of.get(id(analysis)), default(_t, knobs))] += 1
            return _f(analysis, soc, knobs)

        def counted_apply(analysis, tiling, _t=template, _f=apply):
            calls[("apply", _t.name, structure_of.get(id(analysis)), tiling.to_json())] += 1
            return _f(analysis, tiling)

        monkeypatch.setattr(template, "analyse", staticmethod(counted_analyse))
        monkeypatch.setattr(template, "plan", staticmethod(counted_plan))
        monkeypatch.setattr(template, "apply", staticmethod(counted_apply))
    return calls


def test_a_build_schedules_each_candidate_of_each_kernel_once(monkeypatch):
    """A build planned every kernel up to 1 + templates + variants times and the schedule
    stage scheduled the chosen one once more from its knobs: now the partitioner's plan
    keeps the scheduled PrimFunc, and the schedule stage applies it."""
    calls = _count_schedules(monkeypatch)
    b = _mlp_and_conv()
    lib = tvm_ascend.build(b.model(), config=CompileConfig(build_cache=False))
    templates = {name for _, name, _, _ in calls}
    assert {"matmul", "conv2d"} <= templates, calls
    assert any(step == "plan" and knobs != json.dumps(dataclasses.asdict(t.Knobs()),
                                                      sort_keys=True)
               for step, name, _, knobs in calls for t in TEMPLATES if t.name == name), \
        "no variant was estimated, so the count proves little"
    twice = {key: n for key, n in calls.items() if n > 1}
    assert not twice, f"analysed, planned or applied more than once: {twice}"
    # only kernels are scheduled: one apply per NPU kernel, however many candidates were planned
    kernels = [g for g in lib.report.to_json()["groups"] if g["on_npu"]]
    applies = sum(n for (step, _, _, _), n in calls.items() if step == "apply")
    plans = sum(n for (step, _, _, _), n in calls.items() if step == "plan")
    assert applies == len(kernels) < plans, (applies, len(kernels), plans)
    assert {"matmul", "conv2d"} <= {g["tiling"]["template"] for g in kernels}
    for out, ref in zip(lib.run(b.feeds), run_onnxruntime(b.model(), b.feeds)):
        assert_close(out, ref, "cube/float32")


def test_the_schedule_stage_applies_the_partitioners_plan(monkeypatch):
    """The scheduled PrimFunc on each codegen function is the one the plan holds (not a
    second schedule of its PrimFunc), and a module partitioned with another cost is planned
    through the cost it is scheduled with."""
    config = CompileConfig()
    imported = load_model(_mlp_and_conv().model(), {})
    policy = fusion_policy(config, imported)
    cost = GroupCost(SOC)
    result = plan_fusion(imported, policy, SOC, cost=cost)
    prims = {gv: f.attrs[ir_attrs.PRIM_FUNC] for gv, f in result.mod.functions.items()
             if f.attrs and f.attrs.get("Codegen") == "ascend"}
    assert len(prims) == 2
    calls = _count_schedules(monkeypatch)
    scheduled, tilings = schedule_groups(result.mod, cost)
    # every kernel's plan was in the cost: only applied, never analysed or planned again
    assert {step for step, _, _, _ in calls} == {"apply"} and sum(calls.values()) == 2
    for gv, prim in prims.items():
        plan = cost.plan(prim)
        kernel = cost.kernel(prim, record_template(result.mod[gv]), record_of(
            result.mod[gv]).knobs)
        assert scheduled[gv].attrs[ir_attrs.PRIM_FUNC].same_as(kernel.scheduled)
        assert tilings[gv.name_hint] == plan.tiling == kernel.tiling
    assert sum(calls.values()) == 2  # asking again applies nothing more
    elsewhere = plan_fusion(imported, policy, SOC, cost=GroupCost(SOC))
    _, again = schedule_groups(elsewhere.mod, GroupCost(SOC))
    assert again == tilings and calls  # planned afresh, to the same tilings


def test_an_equal_function_under_other_names_is_scheduled_as_itself():
    """Two structurally equal kernels share one plan's estimate, but each is scheduled as
    itself: the printers print its parameters' names."""
    b = ModelBuilder("float32", seed=2)
    x = b.input("x", (4, 64))
    b.output(b.node("Exp", [b.node("Relu", [x])]), (4, 64))
    ((prim, template),) = [(f.attrs[ir_attrs.PRIM_FUNC], record_template(f))
                           for f in tvm_ascend.partition_for_ascend(b.model()).mod.functions
                           .values() if f.attrs and f.attrs.get("Codegen") == "ascend"]
    name = prim.params[0].name
    renamed = tvm.script.from_source(re.sub(rf"\b{name}\b", "renamed_input", prim.script()))
    assert tvm_ffi.structural_equal(renamed, prim, map_free_vars=True)
    cost = GroupCost(SOC)
    first = cost.kernel(prim, template, None)
    assert first.scheduled is not None and cost.plan(prim).scheduled is None
    assert cost.kernel(prim, template, None) is first  # applied once
    kernel = cost.kernel(renamed, template, None)
    assert cost.plan(renamed) is cost.plan(prim)  # one plan, one estimate
    assert kernel.prim.same_as(renamed) and kernel.tiling == cost.plan(prim).tiling
    assert kernel.scheduled.params[0].name == "renamed_input"
    assert cost.kernel(renamed, template, None) is kernel  # applied once


def test_groups_are_formed_on_the_tuning_records_estimate(tmp_path):
    """The tuning database was asked only by the schedule stage, after the groups were formed
    on untuned estimates (and the report re-estimated afterwards). Asked at plan time, a
    record whose tiling makes the merged Mul + Softmax slower than its two parts keeps them
    apart, and the report's estimates are the ones the decision was made on."""
    b = ModelBuilder("float32", seed=6)
    x = b.input("x", (37, 200))
    b.output(b.node("Softmax", [b.node("Mul", [x, b.const([0.5], "s")])], axis=-1), (37, 200))
    model = b.model()
    (merged,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in tvm_ascend.partition_for_ascend(model)
                 .mod.functions.values() if f.attrs and f.attrs.get("Codegen") == "ascend"]
    db = TuningDatabase(tmp_path / "db")
    db.commit(workload_of(merged, "row_reduce", SOC),
              RowReduceKnobs(cores=1, rows_per_tile=1, double_buffer=False), 1.0)
    tuned = GroupCost(SOC, db).plan(merged)
    # one core, one row a step: slower than the two kernels apart even though one core starts
    # faster than all of them (the device's start-up grows with the cores a launch uses)
    assert tuned.source == "timing model, tiling of the tuning record" and tuned.tiling.cores == 1
    config = CompileConfig(tuning_database=str(db.path), build_cache=False)
    lib = tvm_ascend.build(model, config=config)
    groups = [g for g in lib.report.to_json()["groups"] if g["on_npu"]]
    assert len(groups) == 2  # Mul and Softmax apart
    assert sum(g["estimate"]["time_us"] for g in groups) < tuned.time_us
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float32")


def test_one_kernel_record_written_by_the_partitioner_completed_by_the_schedule_stage():
    """Template, knobs, tiling and group were four attributes with four encoders; now one
    ``ascend.kernel`` record: the partitioner's decisions, then the tiling, read by codegen."""
    cost = GroupCost(SOC)
    config = CompileConfig()
    imported = load_model(_mlp_and_conv().model(), {})
    result = plan_fusion(imported, fusion_policy(config, imported), SOC, cost=cost)
    funcs = {gv: f for gv, f in result.mod.functions.items()
             if f.attrs and f.attrs.get("Codegen") == "ascend"}
    records = {gv: record_of(f) for gv, f in funcs.items()}
    groups = {g.symbol: g for g in result.groups if g.on_npu}
    for gv, record in records.items():
        plan = cost.plan(funcs[gv].attrs[ir_attrs.PRIM_FUNC])
        assert record.template == plan.template.name and record.tiling is None
        assert record.knobs == (dataclasses.asdict(plan.knobs) if plan.knobs else None)
        assert record.group["name"] == groups[gv.name_hint].name
        assert KernelRecord.from_json(record.to_json()) == record
    with pytest.raises(CodegenError, match="partitioned but not scheduled"):
        scheduled_kernels(list(funcs.values()))
    scheduled, tilings = schedule_groups(result.mod, cost)
    for kernel in scheduled_kernels([scheduled[gv] for gv in records]):
        assert kernel.tiling == tilings[kernel.symbol]
        assert record_of(scheduled[result.mod.get_global_var(kernel.symbol)]).tiling == \
            json.loads(tilings[kernel.symbol].to_json())
    with pytest.raises(CodegenError, match=r"kernel record holds \['group', 'knobs', "):
        KernelRecord.from_json('{"template": "matmul"}')


def test_the_pipeline_keeps_the_unit_codegen_printed_and_the_library_carries_it(
        monkeypatch, tmp_path):
    """The pipeline parsed the kernel sources and metadata back out of the generated C++ text;
    now relax.ext.ascend hands its unit back as data (``PrintedUnits`` in RunCodegen's options),
    and a library exported and loaded again reads the same metadata from its own export."""
    printed = []
    original = ext_codegen.unit_module

    def spy(*args, **kwargs):
        module, unit = original(*args, **kwargs)
        printed.append(unit)
        return module, unit

    monkeypatch.setattr(ext_codegen, "unit_module", spy)
    b = _mlp_and_conv()
    lib = tvm_ascend.build(b.model(), config=CompileConfig(build_cache=False))
    (unit,) = printed
    assert lib.metadata == unit.metadata and len(unit.kernel_sources) == 2
    assert lib.kernel_sources() == unit.kernel_sources
    assert all(symbol in unit.code for symbol in unit.kernel_sources)
    again = tvm_ascend.load(lib.export_library(tmp_path / "model.so"))
    assert again.metadata == lib.metadata
