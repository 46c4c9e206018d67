"""A build's dumps (report, ATC's fusion_result.json, the plan, graphs) and the plan read back:
the same groups again, a person's edit honoured, a pinned group that cannot form an error."""
from __future__ import annotations

import json
import os

import onnx
import pytest

import tvm_ascend
from build_checks import groups_of
from conftest import assert_close, run_onnxruntime
from onnx_models import model_with_a_part_per_rule
from tvm_ascend.partition.plan_file import load_plan, merge_groups, onnx_node_graph, split_group
from tvm_ascend.partition.plan_file import write_plan


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    builder, parts = model_with_a_part_per_rule()
    folder = tmp_path_factory.mktemp("dump")
    model = builder.model()
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    lib = tvm_ascend.build(str(path), config=tvm_ascend.CompileConfig(
        dump_graph=True, dump_path=str(folder / "out")))
    return builder, parts, folder, lib.fusion_report()


def _node_sets(report) -> set:
    return {frozenset(g["nodes"]) for g in report["groups"]}


def test_dumps_written(dumped):
    _, _, folder, report = dumped
    out = folder / "out"
    assert json.loads((out / "fusion_report.json").read_text())["groups"] == \
        json.loads(json.dumps(report["groups"]))
    result = json.loads((out / "fusion_result.json").read_text())
    graph = next(iter(result.values()))
    assert graph["graph_fusion"]["SoftmaxFusionPass"]["effect_times"] == "1"
    assert graph["graph_fusion"]["LayerNormFusionPass"]["effect_times"] == "1"
    after = onnx.load(str(out / "graphs" / "graph_after.onnx"))
    onnx.checker.check_model(after)
    fused = [n for n in after.graph.node if n.op_type == "FusionGroup"]
    assert len(fused) == len([g for g in report["groups"] if g["nodes"]])
    for name in ("000_imported.py", "010_partitioned.py", "020_scheduled.py",
                 "fusion_plan.json", "graphs/graph_before.dot", "graphs/graph_after.json"):
        assert (out / name).is_file(), name


def test_plan_round_trip_and_edit(dumped, tmp_path):
    builder, parts, folder, report = dumped
    model = onnx.load(str(folder / "model.onnx"))
    plan_path = str(folder / "out" / "fusion_plan.json")
    again = tvm_ascend.partition_for_ascend(model, tvm_ascend.CompileConfig(
        fusion_plan_file=plan_path))
    assert {frozenset(m.node for m in g.members) for g in again.groups} == _node_sets(report)
    # a person splits the LayerNorm group in two: the build follows the plan
    plan = load_plan(plan_path, *onnx_node_graph(model))
    ln_group = next(g for g in plan.groups if set(parts["layernorm"]) <= set(g.nodes))
    edited = split_group(plan, ln_group.id, parts["layernorm"][-2:])  # scale and shift apart
    edited_path = str(tmp_path / "plan.json")
    write_plan(edited, edited_path)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(fusion_plan_file=edited_path))
    split = lib.fusion_report()
    assert len(groups_of(split, parts["layernorm"])) == 2
    for out, ref in zip(lib.run(builder.feeds), run_onnxruntime(model, builder.feeds)):
        assert_close(out, ref, "float32")


def test_pinned_group_that_cannot_form_is_an_error(dumped, tmp_path):
    _, parts, folder, _ = dumped
    model = onnx.load(str(folder / "model.onnx"))
    plan = load_plan(str(folder / "out" / "fusion_plan.json"), *onnx_node_graph(model))
    shared = [g for g in plan.groups if set(g.nodes) & set(parts["shared"])]
    producer = next(g for g in shared if parts["shared"][1] in g.nodes)  # Mul+Exp, read twice
    reader = next(g for g in shared if g is not producer)
    merged = merge_groups(plan, producer.id, reader.id)
    document = merged.to_json()
    for group in document["groups"]:
        group["pinned"] = True
    path = tmp_path / "pinned.json"
    path.write_text(json.dumps(document))
    with pytest.raises(tvm_ascend.FusionConfigError, match="pinned.json.*did not form.*read by 2"):
        tvm_ascend.partition_for_ascend(model, tvm_ascend.CompileConfig(
            fusion_plan_file=str(path)))


def test_plan_naming_an_unknown_node_is_an_error(dumped, tmp_path):
    _, _, folder, _ = dumped
    document = json.loads((folder / "out" / "fusion_plan.json").read_text())
    document["groups"][0]["nodes"].append("no_such_node")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(tvm_ascend.FusionConfigError, match="bad.json.*no_such_node"):
        tvm_ascend.build(str(folder / "model.onnx"),
                         config=tvm_ascend.CompileConfig(fusion_plan_file=str(path)))


def _tiny_model():
    """x -> Relu -> Exp: one kernel, so a build with dumps on is quick."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Exp", ["r"], ["y"], name="exp")]
    graph = helper.make_graph(nodes, "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _build_checked(dump_path, caplog) -> list[str]:
    """Build the tiny model with dumps into ``dump_path``; check its numbers; the warnings."""
    import logging

    import numpy as np

    model = _tiny_model()
    with caplog.at_level(logging.WARNING, logger="tvm_ascend.dumps"):
        lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
            dump_graph=True, dump_path=str(dump_path)))
    x = np.random.default_rng(0).standard_normal((4, 32)).astype("float32")
    for out, ref in zip(lib.run({"x": x}), run_onnxruntime(model, {"x": x})):
        assert_close(out, ref, "float32")
    return [r.getMessage() for r in caplog.records if r.name == "tvm_ascend.dumps"
            and r.levelname == "WARNING"]


def test_a_dump_writer_that_raises_is_a_warning_naming_the_file(tmp_path, monkeypatch, caplog):
    """Regression: an exception in any dump writer failed the whole build; now the build goes
    on, the warning names the file, and the other dumps are written."""
    import tvm_ascend.dumps
    import tvm_ascend.dumps.graphs

    def broken(*args, **kwargs):
        raise RuntimeError("writer broke")

    monkeypatch.setattr(tvm_ascend.dumps, "export_plan", broken)
    monkeypatch.setattr(tvm_ascend.dumps.graphs, "graph_dot", broken)
    warnings = _build_checked(tmp_path, caplog)
    plan, dot = tmp_path / "fusion_plan.json", tmp_path / "graphs" / "graph_before.dot"
    assert any(str(plan) in w and "writer broke" in w for w in warnings), warnings
    assert any(str(dot) in w for w in warnings), warnings
    assert not plan.exists() and not dot.exists()
    for name in ("fusion_report.json", "fusion_result.json", "010_partitioned.py",
                 "graphs/graph_before.json", "graphs/graph_after.onnx"):
        assert (tmp_path / name).is_file(), name
    assert [p for p in tmp_path.rglob(".tmp_*")] == []


def test_a_graph_dump_that_cannot_be_drawn_is_a_warning(tmp_path, monkeypatch, caplog):
    import tvm_ascend.dumps.graphs

    def broken(*args, **kwargs):
        raise tvm_ascend.AscendError("the report's groups form a cycle")

    monkeypatch.setattr(tvm_ascend.dumps.graphs, "fused_onnx_model", broken)
    warnings = _build_checked(tmp_path, caplog)
    assert any(str(tmp_path / "graphs") in w and "form a cycle" in w for w in warnings)
    assert (tmp_path / "fusion_plan.json").is_file()


def test_a_dump_path_that_is_a_regular_file_is_one_warning(tmp_path, caplog):
    path = tmp_path / "dump"
    path.write_text("not a folder")
    warnings = _build_checked(path, caplog)
    assert len(warnings) == 1 and str(path) in warnings[0], warnings
    assert path.read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_dump_path_is_a_warning_per_file(tmp_path, caplog):
    folder = tmp_path / "dump"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        warnings = _build_checked(folder, caplog)
    finally:
        folder.chmod(0o755)
    assert any(str(folder / "fusion_report.json") in w for w in warnings), warnings
    assert list(folder.iterdir()) == []
