"""Graph dumps (JSON, DOT, SVG, ONNX with FusionGroup nodes) and ATC's fusion_result.json,
checked against the fusion reports of real builds."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from onnx_models import ModelBuilder
from tvm_ascend.dumps import Dumper
from tvm_ascend.dumps.graphs import (FUSION_DOMAIN, FUSION_OP, fused_onnx_model, graph_dot,
                                     report_groups_json, write_graph_dumps)
from tvm_ascend.errors import AscendError, FusionConfigError, ToolchainError
from tvm_ascend.partition.fusion_result import fusion_result, result_name, write_fusion_result
from tvm_ascend.partition.plan_file import export_plan, load_plan, onnx_node_graph
from tvm_ascend.partition.report import fusion_report
from tvm_ascend.partition.rules import rule_by_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from make_demo import make_demo_model  # noqa: E402
from benchmarks.models.transformer import encoder_layer  # noqa: E402

FAKE_DOT = """#!/bin/sh
# stands in for Graphviz: writes a minimal SVG to the file after -o
out=""
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
printf '<svg xmlns="http://www.w3.org/2000/svg"><!-- fake dot --></svg>\\n' > "$out"
"""
FAILING_DOT = "#!/bin/sh\necho 'syntax error in line 3' >&2\nexit 1\n"


def _folded_nodes_model():
    """x -> Mul(Constant) -> Reshape -> Exp -> Identity: Constant and Identity join no group."""
    b = ModelBuilder("float32", seed=3)
    x = b.input("x", (4, 32))
    b.nodes.append(helper.make_node("Constant", [], ["half"], name="const_node",
                                    value=numpy_helper.from_array(np.full(32, 0.5, np.float32))))
    shaped = b.node("Reshape", [b.node("Mul", [x, "half"]), b.int_const([128], "shape")])
    b.output(b.node("Exp", [shaped]), (128,))
    return b.model()


def _multi_consumer_model():
    b = ModelBuilder("float32", seed=30)
    e = b.node("Exp", [b.input("x", (8, 40))])
    b.output(b.node("Softmax", [e], axis=-1), (8, 40))
    b.output(b.node("ReduceMax", [e], axes=[-1], keepdims=1), (8, 1))
    return b.model()


MODELS = {"demo": make_demo_model, "folded": _folded_nodes_model,
          "multi_consumer": _multi_consumer_model}


@pytest.fixture(scope="module")
def built():
    """(model, report) of each model, built once; the demo's Transpose is fenced off so the
    demo has three groups in a chain (the dumps' tests read G0 -> G1 -> G2)."""
    return {name: (make(), tvm_ascend.build(make(), config=DEMO_CONFIG if name == "demo"
                                            else None).fusion_report())
            for name, make in MODELS.items()}


DEMO_CONFIG = tvm_ascend.CompileConfig(no_fuse_nodes=("transpose",))


@pytest.fixture
def no_dot(monkeypatch, tmp_path):
    """Graphviz's dot is not found (the rest of PATH stays: build() runs g++)."""
    import shutil

    from tvm_ascend.dumps import graphs

    real = shutil.which
    monkeypatch.setattr(graphs.shutil, "which",
                        lambda name, *a, **k: None if name == "dot" else real(name, *a, **k))


def _fake_dot(monkeypatch, tmp_path, script: str) -> None:
    folder = tmp_path / "fake_bin"
    folder.mkdir()
    (folder / "dot").write_text(script)
    (folder / "dot").chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))


def parse_dot(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Node ids and edges of the one-statement-a-line DOT that graph_dot writes."""
    quoted = r'"((?:[^"\\]|\\.)*)"'
    lines = text.strip().splitlines()
    assert lines[0].startswith("digraph ") and lines[-1] == "}"
    assert text.count("{") == text.count("}")
    nodes, edges = [], []
    for line in lines[1:-1]:
        edge = re.match(rf"\s*{quoted}\s*->\s*{quoted}( \[label={quoted}\])?;$", line)
        node = re.match(rf"\s*{quoted} \[label={quoted}, fillcolor={quoted}\];$", line)
        if edge:
            edges.append((edge.group(1), edge.group(2)))
        elif node:
            nodes.append(node.group(1))
        else:
            assert re.match(r"\s*(rankdir=|node \[|subgraph |label=|\})", line), line
    return nodes, edges


def _grouped(model, report) -> tuple[list[dict], list[str]]:
    """The report groups holding ONNX nodes of the model, and the model's nodes in no group."""
    names = [n.name for n in model.graph.node]
    in_groups = {node for g in report["groups"] for node in g["nodes"]}
    groups = [g for g in report["groups"] if set(g["nodes"]) & set(names)]
    return groups, [n for n in names if n not in in_groups]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dumps_parse_and_counts_match_the_report(built, tmp_path, no_dot, name):
    model, report = built[name]
    paths = write_graph_dumps(model, report, str(tmp_path / "graphs"))
    assert [os.path.basename(p) for p in paths] == [
        "graph_before.json", "graph_before.dot", "graph_after.json", "graph_after.dot",
        "graph_after.onnx"]
    assert not [p for p in os.listdir(tmp_path / "graphs") if p.startswith(".tmp_")]
    before = json.loads(Path(paths[0]).read_text())
    after = json.loads(Path(paths[2]).read_text())
    groups, ungrouped = _grouped(model, report)
    # the documented relation: one node per group with ONNX nodes + each node in no group
    assert len(before["nodes"]) == report["nodes_before"] == len(model.graph.node)
    assert len(after["nodes"]) == len(groups) + len(ungrouped)
    assert sorted(n["name"] for n in after["nodes"] if n["op_type"] != FUSION_OP) == \
        sorted(ungrouped)
    for stage, path in (("before", paths[1]), ("after", paths[3])):
        graph = before if stage == "before" else after
        dot_nodes, dot_edges = parse_dot(Path(path).read_text())
        assert sorted(dot_nodes) == sorted(n["name"] for n in graph["nodes"])
        assert Counter(dot_edges) == Counter((e["src"], e["dst"]) for e in graph["edges"])
    fused = onnx.load(paths[4])
    onnx.checker.check_model(fused)
    assert len(fused.graph.node) == len(after["nodes"])
    assert {o.domain: o.version for o in fused.opset_import}[FUSION_DOMAIN] == 1
    fusion_nodes = [n for n in fused.graph.node if n.op_type == FUSION_OP]
    assert len(fusion_nodes) == len(groups)
    for node, group in zip(fusion_nodes, groups):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert node.domain == FUSION_DOMAIN and attrs["group_id"].decode() == group["id"]
        assert [n.decode() for n in attrs["node_names"]] == group["nodes"]
        assert attrs["kernel"].decode() == (group["kernel"] or "")
        assert attrs["on_npu"] == int(group["on_npu"])
        originals = {n.name: n.op_type for n in model.graph.node}
        assert [t.decode() for t in attrs["op_types"]] == [originals[n] for n in group["nodes"]]


def test_encoder_layer_dumps_and_plan_round_trip(tmp_path, no_dot):
    # same shapes as test_transformer_layer, so its kernels come from the compile cache
    model = encoder_layer(batch=2, seq=16, hidden=64, heads=2, ffn=128)
    report = tvm_ascend.build(model).fusion_report()
    paths = write_graph_dumps(model, report, str(tmp_path))
    after = json.loads(Path(paths[2]).read_text())
    groups, ungrouped = _grouped(model, report)
    assert len(after["nodes"]) == len(groups) + len(ungrouped)
    onnx.checker.check_model(onnx.load(paths[4]))
    export_plan(report, str(tmp_path / "fusion_plan.json"))
    plan = load_plan(str(tmp_path / "fusion_plan.json"), *onnx_node_graph(model))
    assert [list(g.nodes) for g in plan.groups] == [g["nodes"] for g in groups]


def test_group_boundaries_are_the_crossing_tensors(built):
    model, report = built["demo"]
    fused = fused_onnx_model(model, report)
    wiring = {n.name: (list(n.input), list(n.output)) for n in fused.graph.node}
    assert wiring == {"G0": (["x", "bias", "scale"], ["s"]), "G1": (["s"], ["t"]),
                      "G2": (["t", "w", "two", "one"], ["out"])}
    # weights are declared inputs without data; shapes of the crossing tensors are kept
    assert not fused.graph.initializer
    assert {i.name for i in fused.graph.input} == {"x", "bias", "scale", "w", "two", "one"}
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in fused.graph.value_info}
    assert shapes == {"s": [2, 64, 100], "t": [2, 100, 64]}
    model2, report2 = built["multi_consumer"]
    wiring2 = {n.name: list(n.input) for n in fused_onnx_model(model2, report2).graph.node}
    exp_group = next(g["id"] for g in report2["groups"] if g["nodes"] == ["exp_1"])
    assert sum("exp_1" in ins for ins in wiring2.values()) == 2 and exp_group in wiring2


def _toy(nodes, outputs):
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("x", "y")]
    made = [helper.make_node(op, ins, [name], name=name) for name, op, ins in nodes]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4]) for o in outputs]
    model = helper.make_model(helper.make_graph(made, "toy", info, outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _report(*groups):
    return {"groups": [{"id": gid, "rule": "ElementwiseFusion", "nodes": list(nodes),
                        "kernel": f"k_{gid}", "on_npu": True, "gm_bytes_saved": 0}
                       for gid, nodes in groups], "unfused_edges": []}


def test_a_group_is_placed_after_everything_it_reads():
    # a group {a, d} starts at a, but d also reads b, which comes later in the model
    model = _toy([("a", "Relu", ["x"]), ("b", "Exp", ["y"]), ("d", "Add", ["a", "b"])], ["d"])
    fused = fused_onnx_model(model, _report(("G0", ["a", "d"])))
    assert [n.name for n in fused.graph.node] == ["b", "G0"]


def test_inconsistent_reports_are_refused():
    diamond = _toy([("a", "Relu", ["x"]), ("b", "Exp", ["a"]), ("d", "Add", ["a", "b"])], ["d"])
    with pytest.raises(AscendError, match="cycle once each is one node: G0, G1"):
        fused_onnx_model(diamond, _report(("G0", ["a", "d"]), ("G1", ["b"])))
    with pytest.raises(AscendError, match="G0 names ONNX node 'zz'"):
        fused_onnx_model(diamond, _report(("G0", ["a", "zz"])))


def _split_report():
    """a -> b -> c, c split in three: its first part (a view) in G0 beside a, a middle part in
    G2, its last part (its output) in G1 beside b. As a LLaMA's attention is after the GQA
    rewrite (Q's view in the rotary kernel, the scores and the softmax kernels, the PV one)."""
    report = _report(("G0", ["a", "c"]), ("G1", ["b", "c"]), ("G2", ["c"]))
    parts = {"G0": [{"a": 0}, {"c": 0}], "G1": [{"b": 0}, {"c": 2}], "G2": [{"c": 1}]}
    for group in report["groups"]:
        group["ops"] = [{"parts": p} for p in parts[group["id"]]]
    return report


def test_a_node_split_between_groups_is_drawn_where_its_output_is_computed(tmp_path, no_dot):
    """The regression: drawn in the first group listing it, c went to G0, which then read
    b's group and fed it (a cycle: "the fusion report's groups depend on each other", no
    dump). c's output is its last part's, G1's; G2 holds no node of its own and is named
    in G1's split_with."""
    chain = _toy([("a", "Relu", ["x"]), ("b", "Exp", ["a"]), ("c", "Sigmoid", ["b"])], ["c"])
    fused = fused_onnx_model(chain, _split_report())
    assert [n.name for n in fused.graph.node] == ["G0", "G1"]
    attrs = [{a.name: helper.get_attribute_value(a) for a in n.attribute}
             for n in fused.graph.node]
    assert [[m.decode() for m in a["node_names"]] for a in attrs] == [["a"], ["b", "c"]]
    assert [[g.decode() for g in a.get("split_with", [])] for a in attrs] == \
        [[], ["G0", "G2"]]
    assert [list(n.input) for n in fused.graph.node] == [["x"], ["a"]]
    paths = write_graph_dumps(chain, _split_report(), str(tmp_path))
    after = json.loads(Path(paths[2]).read_text())
    assert [n.get("split_with") for n in after["nodes"]] == [None, ["G0", "G2"]]
    before = json.loads(Path(paths[0]).read_text())
    assert [n["group"] for n in before["nodes"]] == ["G0", "G1", "G1"]


def test_a_node_in_no_group_between_nodes_of_one_group_is_drawn_in_it():
    """TorchScript LLaMA's regression: a Cast the importer folds away (in no group) between
    two nodes of the attention's group read the group and fed it (a cycle). Between nodes of
    one group, only through nodes in no group, it is drawn in that group."""
    diamond = _toy([("a", "Relu", ["x"]), ("b", "Exp", ["a"]), ("c", "Identity", ["b"]),
                    ("d", "Add", ["a", "c"]), ("e", "Neg", ["d"])], ["e"])
    fused = fused_onnx_model(diamond, _report(("G0", ["a", "d"])))
    assert [n.name for n in fused.graph.node] == ["G0", "e"]
    attrs = {a.name: helper.get_attribute_value(a) for a in fused.graph.node[0].attribute}
    assert [m.decode() for m in attrs["node_names"]] == ["a", "b", "c", "d"]


def test_a_llama_build_writes_its_graph_dumps(tmp_path, caplog):
    """The corpus LLaMA (GQA attention split between its rotary, scores, softmax and PV
    kernels; its mask Add's view in the mask's kernel; a folded Cast between two parts of
    the attention) writes every dump, no warning; every group is drawn or named in the
    split_with of the group drawing its nodes."""
    model_path = Path(__file__).resolve().parent / "corpus" / "llama_torchscript_op17_fp32.onnx"
    config = tvm_ascend.CompileConfig(dump_graph=True, dump_path=str(tmp_path),
                                      soc_version="Ascend910B1")
    with caplog.at_level("WARNING", logger="tvm_ascend.dumps"):
        lib = tvm_ascend.build(str(model_path), config=config)
    assert not [r for r in caplog.records if r.name == "tvm_ascend.dumps"]
    assert {"graph_before.json", "graph_after.json", "graph_after.onnx"} <= \
        set(os.listdir(tmp_path / "graphs"))
    fused = onnx.load(str(tmp_path / "graphs" / "graph_after.onnx"))
    onnx.checker.check_model(fused)  # every node after all it reads: no cycle
    drawn, named, members = set(), set(), set()
    for node in fused.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == FUSION_OP:
            drawn.add(attrs["group_id"].decode())
            named |= {g.decode() for g in attrs.get("split_with", [])}
            members |= {n.decode() for n in attrs["node_names"]}
    report = lib.fusion_report()
    listed = {g["id"] for g in report["groups"] if g["nodes"]}
    assert drawn <= listed and listed <= drawn | named
    assert named - drawn  # the attention's scores and softmax kernels hold no node alone
    in_groups = {n for g in report["groups"] for n in g["nodes"]}
    assert [n for n in members - in_groups if n.endswith("self_attn/Cast_1")]  # the folded Cast


def test_svg_written_when_dot_is_on_path(built, tmp_path, monkeypatch):
    _fake_dot(monkeypatch, tmp_path, FAKE_DOT)
    paths = write_graph_dumps(*built["demo"], str(tmp_path / "g"))
    svgs = [p for p in paths if p.endswith(".svg")]
    assert [os.path.basename(p) for p in svgs] == ["graph_before.svg", "graph_after.svg"]
    assert all("fake dot" in Path(p).read_text() for p in svgs)


def test_failing_dot_is_a_toolchain_error(built, tmp_path, monkeypatch):
    _fake_dot(monkeypatch, tmp_path, FAILING_DOT)
    with pytest.raises(ToolchainError) as info:
        write_graph_dumps(*built["demo"], str(tmp_path / "g"))
    assert "graph_before.dot" in str(info.value) and "syntax error in line 3" in str(info.value)
    assert not [p for p in os.listdir(tmp_path / "g") if p.startswith(".tmp_")]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_real_graphviz_reads_our_dot(built, tmp_path):
    paths = write_graph_dumps(*built["demo"], str(tmp_path / "g"))
    for path in (p for p in paths if p.endswith(".dot")):
        subprocess.run(["dot", "-Tcanon", path], check=True, capture_output=True)
    assert sum(p.endswith(".svg") for p in paths) == 2


def test_without_an_onnx_model_the_report_is_drawn(built, tmp_path, no_dot):
    _, report = built["demo"]
    paths = write_graph_dumps(None, report, str(tmp_path / "g"))
    assert not any(p.endswith(".onnx") for p in paths)
    before = json.loads(Path(paths[0]).read_text())
    after = json.loads(Path(paths[2]).read_text())
    assert len(before["nodes"]) == sum(len(g["ops"]) for g in report["groups"])
    assert after == report_groups_json(report) and len(after["nodes"]) == len(report["groups"])
    assert [(e["src"], e["dst"]) for e in after["edges"]] == \
        [(e["producer"], e["consumer"]) for e in report["unfused_edges"]]
    assert parse_dot(graph_dot(after))[1] == [("G0", "G1"), ("G1", "G2")]


def test_dumper_writes_graphs_only_when_enabled(built, tmp_path, no_dot):
    model, report = built["folded"]
    Dumper(False, str(tmp_path / "off")).graphs(model, report)
    assert not (tmp_path / "off").exists()
    Dumper(True, str(tmp_path / "on")).graphs(model, report)
    assert sorted(os.listdir(tmp_path / "on" / "graphs")) == [
        "graph_after.dot", "graph_after.json", "graph_after.onnx", "graph_before.dot",
        "graph_before.json"]


# ATC's fusion_result.json ------------------------------------------------------------------

STATS = {"SoftmaxFusion": {"match_times": 3, "effect_times": 2},
         "MatMulEpilogueFusion": {"match_times": 1, "effect_times": 1},
         "ElementwiseFusion": {"match_times": 4, "effect_times": 4},
         "HorizontalFusion": {"match_times": 0, "effect_times": 0}}


def test_fusion_result_layout_is_atcs():
    result = fusion_result({"rule_stats": STATS}, session_and_graph_id="7_1")
    assert result == {"session_and_graph_id_7_1": {
        "graph_fusion": {"SoftmaxFusionPass": {"match_times": "3", "effect_times": "2"}},
        "ub_fusion": {
            "MatMulBiasAddFusionPass": {"match_times": "1", "repository_hit_times": "0",
                                        "effect_times": "1"},
            "ElementwiseFusion": {"match_times": "4", "repository_hit_times": "0",  # no ATC name
                                  "effect_times": "4"}}}}
    stats = {"LayerNormFusionPass": {"match_times": 2, "effect_times": 0}}
    assert fusion_result({"rule_stats": stats}) == {"session_and_graph_id_0_0": {
        "graph_fusion": {"LayerNormFusionPass": {"match_times": "2", "effect_times": "0"}}}}
    assert fusion_result({"rule_stats": {}}) == {}
    assert fusion_result({"rule_stats": {"CastFusion": {"match_times": 0,
                                                        "effect_times": 0}}}) == {}


def test_a_transpose_merge_is_not_counted_as_convconcatfusionpass():
    """Regression: fusion_result.json listed DataMovementFusion (a Transpose, Reshape, Slice,
    Concat or Split computed in its consumer) as ATC's ConvConcatFusionPass, which fuses only
    a Conv's output into a Concat; an ATC user's script then counted Conv+Concat fusions that
    the model does not have. Only the switch file still takes that name."""
    config = tvm_ascend.CompileConfig()
    result = tvm_ascend.partition_for_ascend(make_demo_model(), config)  # Transpose merged
    report = fusion_report(result, {}, config, 0)
    assert report["rule_stats"]["DataMovementFusion"]["effect_times"] >= 1
    sections = fusion_result(report)["session_and_graph_id_0_0"]
    names = {name for section in sections.values() for name in section}
    assert "ConvConcatFusionPass" not in names
    moved = sections["graph_fusion"]["DataMovementFusion"]
    assert moved["effect_times"] == str(report["rule_stats"]["DataMovementFusion"]
                                        ["effect_times"])
    assert rule_by_name("ConvConcatFusionPass").name == "DataMovementFusion"


@pytest.mark.parametrize("report, error, words", [
    ({"groups": []}, AscendError, ["rule_stats"]),
    ({"rule_stats": {"SoftmaxFusoin": {"match_times": 1, "effect_times": 1}}},
     FusionConfigError, ["'SoftmaxFusoin'", "did you mean", "rule_stats"]),
    ({"rule_stats": {"CastFusion": {"match_times": -1, "effect_times": 0}}}, AscendError,
     ["'CastFusion'", "'match_times'", "-1"]),
    ({"rule_stats": {"CastFusion": {"match_times": 1}}}, AscendError, ["'effect_times'", "None"]),
    ({"rule_stats": {"CastFusion": {"match_times": True, "effect_times": 0}}}, AscendError,
     ["True"]),
    ({"rule_stats": {"CastFusion": 3}}, AscendError, ["'CastFusion'"]),
])
def test_fusion_result_refuses_bad_rule_stats(report, error, words):
    with pytest.raises(error) as info:
        fusion_result(report)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_fusion_result_written_atomically_with_atcs_indent(tmp_path):
    path = tmp_path / "out" / "fusion_result.json"
    write_fusion_result({"rule_stats": STATS}, str(path))
    text = path.read_text()
    assert json.loads(text) == fusion_result({"rule_stats": STATS})
    assert '{\n    "session_and_graph_id_0_0": {\n        "graph_fusion": {' in text
    assert not [p for p in os.listdir(path.parent) if p.startswith(".tmp_")]


def test_fusion_result_of_a_real_report(built):
    """Every counted rule appears with its counts; a report without ``rule_stats`` (made
    before the planner counts rules) is refused with a clear error, never guessed."""
    _, report = built["demo"]
    if "rule_stats" not in report:
        with pytest.raises(AscendError, match="rule_stats"):
            fusion_result(report)
        return
    listed = {name: entry for section in fusion_result(report).get(
        "session_and_graph_id_0_0", {}).values() for name, entry in section.items()}
    for name, stats in report["rule_stats"].items():
        rule = rule_by_name(name)
        atc_name = result_name(rule)
        if stats["match_times"] or stats["effect_times"]:
            assert listed[atc_name]["match_times"] == str(stats["match_times"])
            assert listed[atc_name]["effect_times"] == str(stats["effect_times"])
        else:
            assert atc_name not in listed
