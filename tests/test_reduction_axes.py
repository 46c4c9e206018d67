"""Reductions over several axes run as rows on the NPU (tvm_ascend/prepare/reductions.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder


def _reduce_model(op, shape, axes, keepdims=1, dtype="float32", seed=0):
    b = ModelBuilder(dtype, seed=seed)
    x = b.input("x", shape)
    if axes is None:
        y = b.node(op, [x], keepdims=keepdims)
    elif op == "ReduceSum":  # opset 13: axes as an input
        y = b.node(op, [x, b.int_const(axes)], keepdims=keepdims)
    else:
        y = b.node(op, [x], axes=axes, keepdims=keepdims)
    reduced = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    out = [1 if i in reduced else d for i, d in enumerate(shape)] if keepdims else \
        [d for i, d in enumerate(shape) if i not in reduced]
    b.output(y, out)
    return b, y


def _check(builder, node, dtype="float32"):
    model = builder.model()
    lib = tvm_ascend.build(model)
    for out, ref in zip(lib.run(builder.feeds), run_onnxruntime(model, builder.feeds)):
        assert_close(out, ref, dtype)
    report = lib.fusion_report()
    groups = [g for g in report["groups"] if node in g["nodes"]]
    records = [r for r in report.get("prepare_rewrites", [])
               if r["rewrite"] == "ReductionAxesToRows" and r["node"] == node]
    return groups, records, lib


@pytest.mark.parametrize("op, shape, axes, keepdims", [
    ("ReduceSum", (2, 3, 5, 7), [2, 3], 1),      # trailing axes: a reshape to rows of 35
    ("ReduceMax", (3, 5, 6, 9), [1, 2, 3], 0),   # everything but the batch
    ("ReduceMean", (4, 7, 9), None, 1),          # every axis: one row
    ("ReduceMin", (2, 5, 3, 11), [1, 3], 1),     # not adjacent: a transpose first
    ("ReduceSum", (3, 4, 5, 6), [-3, -1], 0),    # negative, not adjacent
])
def test_multi_axis_reductions_run_as_rows(op, shape, axes, keepdims):
    builder, node = _reduce_model(op, shape, axes, keepdims)
    groups, records, lib = _check(builder, node)
    assert [r["applied"] for r in records] == [True], records
    assert all(g["on_npu"] for g in groups), groups
    assert lib.fusion_report()["kernels"]["host"] == 0


def test_float16_and_rows_longer_than_the_ub():
    # 2 rows of 240 * 250 = 60000 halves: far more than one UB holds with its buffers
    builder, node = _reduce_model("ReduceSum", (2, 240, 250), [1, 2], 1, "float16", seed=2)
    builder.feeds["x"] = (builder.feeds["x"] / 64).astype(np.float16)
    groups, records, _ = _check(builder, node, "float16")
    assert records and records[0]["applied"] and all(g["on_npu"] for g in groups)


def test_single_and_leading_adjacent_axes_are_left_to_their_kernels():
    for axes in ([3], [1, 2]):
        builder, node = _reduce_model("ReduceSum", (2, 3, 5, 7), axes)
        groups, records, _ = _check(builder, node)
        assert records == [] and all(g["on_npu"] for g in groups)


def test_dynamic_extent_stays_on_the_host_with_the_reason():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 5, 7])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, 1, 1])
    node = helper.make_node("ReduceMax", ["x"], ["y"], name="rmax", axes=[2, 3], keepdims=1)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    lib = tvm_ascend.build(model)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(np.float32)}
    assert_close(lib.run(feeds)[0], feeds["x"].max(axis=(2, 3), keepdims=True), "float32")
    records = [r for r in lib.fusion_report()["prepare_rewrites"] if r["node"] == "rmax"]
    assert [r["applied"] for r in records] == [False]
    assert "dynamic" in records[0]["reason"] and "host" in records[0]["reason"]
