"""The fusion report a library carries: the documented keys, group ids, unfused edges and why."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import tvm_ascend
from onnx_models import ModelBuilder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from make_demo import make_demo_model  # noqa: E402


def test_report_keys_scripts_depend_on():
    report = tvm_ascend.build(make_demo_model()).report.to_json()
    assert report["nodes_before"] == 8
    assert report["kernels"] == {"ascend": 2, "host": 0}
    for group in report["groups"]:
        assert {"id", "rule", "nodes", "kernel", "gm_bytes_saved"} <= set(group)
    g0 = report["groups"][0]
    assert g0["nodes"] == ["add_bias", "relu", "scale", "transpose"]
    assert g0["rules"] == ["ElementwiseFusion", "DataMovementFusion"]
    # three intermediates of 2*64*100 floats stay on chip: each saves a write and a read
    assert g0["gm_bytes_saved"] == 3 * 2 * (2 * 64 * 100 * 4)
    edges = {(e["producer"], e["consumer"]): e for e in report["unfused_edges"]}
    assert set(edges) == {("G0", "G1")}
    assert "would not tile" in edges[("G0", "G1")]["reason"]
    assert "would not tile" in edges[("G0", "G1")]["summary"]
    assert report["estimate"]["latency_us"] > report["estimate"]["roofline_us"] > 0


def test_the_summary_gives_each_unfused_edge_one_line_with_the_reason_that_decided():
    """Regression: the compile summary printed, for the demo's one unfused edge, every
    template's refusal (a raw TVM ScheduleError among them, about 1 KB) and the hint "a
    template for the merged class would fuse it", which gives a user nothing to do. The table
    now has one line per edge; the report keeps every refusal."""
    lib = tvm_ascend.build(make_demo_model())
    report, text = lib.report.to_json(), str(lib.report)
    (edge,) = report["unfused_edges"]
    for template in ("elementwise", "data_movement", "row_reduce", "matmul", "attention"):
        assert f"{template}: " in edge["reason"]  # the full detail stays in the report
    assert edge["summary"] == ("the merged group would not tile: no schedule template takes "
                               "an ElementwiseFusion+DataMovementFusion group followed by a "
                               "MatMulEpilogueFusion group as one kernel")
    assert edge["hint"] == ""  # nothing a flag can change
    lines = text.splitlines()
    start = lines.index("unfused edges:")
    assert lines[start + 1] == f"  G0 -> G1: {edge['summary']}"
    assert "fusion_report.json" in lines[start + 2] and len(lines) == start + 3
    assert "ScheduleError" not in text and "merged class" not in text


def test_a_refused_merge_in_the_summary_keeps_its_hint_on_its_line(tmp_path):
    switch = tmp_path / "switch.cfg"
    switch.write_text("DataMovementFusion:off\n")
    lib = tvm_ascend.build(make_demo_model(), config=tvm_ascend.CompileConfig(
        fusion_switch_file=str(switch)))
    lines = [line for line in str(lib.report).splitlines() if "rule DataMovementFusion" in line]
    assert lines and all("; hint: turn DataMovementFusion on: a switch file line "
                         "'DataMovementFusion:on'" in line for line in lines), lines


def test_multi_consumer_edge_is_explained():
    b = ModelBuilder("float32", seed=30)
    x = b.input("x", (8, 40))
    e = b.node("Exp", [x])
    b.output(b.node("Softmax", [e], axis=-1), (8, 40))
    b.output(b.node("ReduceMax", [e], axes=[-1], keepdims=1), (8, 1))
    lib = tvm_ascend.build(b.model())
    report = lib.report.to_json()
    reasons = [edge["reason"] for edge in report["unfused_edges"]]
    assert any("read by 2 consumers" in r for r in reasons), reasons
    text = str(lib.report)
    assert "unfused edges:" in text and "read by 2 consumers" in text
    out = lib.run(b.feeds)
    ex = np.exp(b.feeds["x"])
    np.testing.assert_allclose(out[1], ex.max(axis=-1, keepdims=True), rtol=1e-5)


def test_fusion_off_edges_say_so():
    b = ModelBuilder("float32", seed=31)
    x = b.input("x", (64,))
    b.output(b.node("Relu", [b.node("Exp", [x])]), (64,))
    cfg = tvm_ascend.CompileConfig(fusion_level="off")
    report = tvm_ascend.build(b.model(), config=cfg).report.to_json()
    assert report["kernels"]["ascend"] == 2
    (edge,) = report["unfused_edges"]
    assert "fusion is off" in edge["reason"]


def test_hbm_and_l2_bytes_are_reported_apart():
    """Every group's GM bytes split into what L2 serves (the 910B cube-vector workspace round
    trip, operand blocks read again) and what HBM moves, by the timing model's own rule
    (``cost_model.timing.l2_bytes``); the estimate totals the three. A matmul with an
    epilogue stages its product through the GM workspace on 910B, not on 310P (coupled)."""
    from tvm_ascend.cost_model import l2_bytes
    from tvm_ascend.schedules.tiling import Tiling

    b = ModelBuilder("float32", seed=3)
    x = b.input("x", (64, 96))
    w = b.const(b.rng.standard_normal((96, 80)), "w")
    b.output(b.node("Relu", [b.node("MatMul", [x, w])]), (64, 80))
    split = {}
    for soc in ("Ascend910B1", "Ascend310P3"):
        report = tvm_ascend.build(b.model(), target=f"ascend/{soc[6:].lower()}").report \
            .to_json()
        for group in report["groups"]:
            assert group["hbm_bytes"] + group["l2_bytes"] == group["gm_bytes"]
            if group["on_npu"]:
                assert group["l2_bytes"] == sum(l2_bytes(Tiling.from_dict(group["tiling"])))
        totals = report["estimate"]
        assert totals["hbm_bytes"] + totals["l2_bytes"] == totals["gm_bytes"]
        assert totals["gm_bytes"] == sum(g["gm_bytes"] for g in report["groups"] if g["launch"])
        (matmul,) = [g for g in report["groups"] if g.get("tiling", {}).get("template")
                     == "matmul"]
        split[soc] = matmul["tiling"]["work"]["workspace_read_bytes"], matmul["l2_bytes"]
    assert split["Ascend910B1"][0] > 0 and split["Ascend910B1"][1] >= split["Ascend910B1"][0]
    assert split["Ascend310P3"][0] == 0


# ---- the "dynamic" section (issue 20): nothing falls back to the host silently ---------------
def _ranged_chain(reduce_s: bool = False):
    """x (2, s, 8) + b -> Relu -> * 3, with s given as a range: every op depends on s;
    ``reduce_s``: then a ReduceMax over s (axis 1; only last-axis reductions over symbolic
    rows are tiled at run time), y of shape (2, 1, 8)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.full([8], -0.5, np.float32), "b"),
             numpy_helper.from_array(np.array(3.0, np.float32), "k")]
    if reduce_s:
        nodes[-1].output[0] = "m"
        nodes.append(helper.make_node("ReduceMax", ["m"], ["y"], name="reducemax", axes=[1],
                                      keepdims=1))
    out = [2, 1, 8] if reduce_s else [2, "s", 8]
    graph = helper.make_graph(
        nodes, "ranged", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_ops_a_symbolic_dim_keeps_on_the_host_are_in_the_report_and_one_warning(caplog):
    """The elementwise chain over s is one kernel tiled at run time; the ReduceMax over s after
    it stays on the host, named in the section and in one warning, never silently."""
    import logging

    from conftest import assert_close, run_onnxruntime

    model = _ranged_chain(reduce_s=True)
    with caplog.at_level(logging.WARNING, logger="tvm_ascend"):
        lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
            input_shape={"x": (2, "2~16", 8)}))
    section = lib.fusion_report()["dynamic"]
    assert section["symbolic_dims"] == {"s": {"range": [2, 16], "inputs": [["x", 1]],
                                              "shapes": {"x": [2, -1, 8]}}}
    assert [(o["node"], o["dims"]) for o in section["host_ops"]] == [("reducemax", ["s"])]
    assert section["npu_kernels"] == 1
    (kernel,) = section["runtime_tiling"]["kernels"]
    assert kernel["dims"] == ["s"]  # row_reduce: the bias is a column it keeps in the UB
    assert [r["sizes"] for r in kernel["range_us"]] == [{"s": 2}, {"s": 9}, {"s": 16}]
    assert '--input_shape "x:2,-1,8" --input_format ND --dynamic_dims "2;9;16"' in \
        section["hint"]
    warnings = [r.getMessage() for r in caplog.records if "because a dimension is symbolic"
                in r.getMessage()]
    assert len(warnings) == 1
    assert "1 op(s)" in warnings[0] and "s in 2~16" in warnings[0]
    assert "reducemax (max)" in warnings[0]
    assert "--dynamic_dims" in warnings[0] and "run-time tiling covers elementwise, " \
        "row_reduce, matmul, attention and data_movement kernels only, 1 of this build's " \
        "kernels use it" in warnings[0]
    for length in (2, 5, 16):  # right on both sides
        feeds = {"x": np.random.default_rng(length).standard_normal((2, length, 8))
                 .astype(np.float32)}
        assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")


def test_a_static_build_of_the_same_model_has_no_dynamic_section_and_no_warning(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="tvm_ascend"):
        lib = tvm_ascend.build(_ranged_chain(), config=tvm_ascend.CompileConfig(
            input_shape={"x": (2, 5, 8)}))
    report = lib.fusion_report()
    assert "dynamic" not in report and report["npu_kernels"] == 1
    assert not [r for r in caplog.records if "symbolic" in r.getMessage()]


def test_peak_memory_over_a_range_counts_every_tensor_at_the_upper_bound():
    """The report's peak memory counted tensors over a symbolic dimension as 0 bytes (their
    size is no integer), so a dynamic build reported about its weights alone. Buffers are
    sized for the range's upper bound: the peak equals the static build's at that size."""
    model = _ranged_chain(reduce_s=False)
    peaks = [tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        input_shape={"x": (2, s, 8)})).fusion_report()["peak_memory_bytes"]
        for s in ("2~400", 400)]
    assert peaks[0] == peaks[1] >= 2 * (2 * 400 * 8 * 4)  # x and y at least
