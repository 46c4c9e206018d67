"""Softmax over a symbolic key axis on the NPU, tiled at run time (issue 20, item 2).

Attention scores x [B, heads, s, s] with s given as a range: the row template's rows are s
long, so the row length as well as the row count come from the call. The printed kernel
already reads ``cols`` from its tiling struct and keeps its UB row slots ROW_STRIDE apart (the
range's upper bound's), so the host tiling function fills ``cols`` from the call's s and the
plan of each call (``tiling_at``) counts GM bytes for rows that long. Checked on both SoCs
against onnxruntime at s = 1, 7, 64, 129 and the top of the range, with each launch's emulator
counters equal to that call's plan. Refused with a reason, the op on the host: a mean over a
symbolic last axis (its 1 / s would be the upper bound's), and rows longer than the UB at
the upper bound (the multi-pass kernel is not tiled at run time yet).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, tirx

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend import ir_attrs
from tvm_ascend.errors import TilingError
from tvm_ascend.frontend import load_model
from tvm_ascend.partition.legalize import legalize_map
from tvm_ascend.schedules import RowReduceSchedule, Tiling, tiling_at
from tvm_ascend.soc import get_soc

SOCS = ("Ascend910B1", "Ascend310P3")
HIGH = 160
LENGTHS = (1, 7, 64, 129, HIGH)


def _model(op: str = "Softmax", dims=(2, 3, "s", "s")):
    """``op`` over the last axis of x (attention scores [B, heads, s, s])."""
    import onnx

    attrs = {"axis": -1} if op == "Softmax" else {"axes": [-1], "keepdims": 1}
    nodes = [helper.make_node(op, ["x"], ["y"], name="op", **attrs)]
    out = list(dims) if op == "Softmax" else [*dims[:-1], 1]
    graph = helper.make_graph(
        nodes, "keys", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module", params=SOCS)
def built(request):
    model = _model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version=request.param, input_shape={"x": (2, 3, f"1~{HIGH}", f"1~{HIGH}")}))
    return model, lib


def _kernel(lib):
    (group,) = [g for g in lib.fusion_report()["groups"] if g["on_npu"]]
    return group["kernel"], Tiling.from_dict(group["tiling"])


def test_the_softmax_is_one_row_kernel_tiled_at_run_time(built):
    _, lib = built
    report = lib.fusion_report()
    assert report["npu_kernels"] == 1 and report["host_groups"] == 0
    assert report["dynamic"]["host_ops"] == []
    (kernel,) = report["dynamic"]["runtime_tiling"]["kernels"]
    assert kernel["template"] == "row_reduce" and kernel["dims"] == ["s"]
    name, tiling = _kernel(lib)
    assert tiling.cols == HIGH and tiling.plan.runtime.cols_dim == "s"
    assert "tiling.cols" in lib.kernel_sources()[name]


def test_each_length_matches_onnxruntime_and_its_plan(built):
    model, lib = built
    name, tiling = _kernel(lib)
    for length in LENGTHS:
        lib.profile()  # reset the counters
        feeds = {"x": np.random.default_rng(length).standard_normal((2, 3, length, length))
                 .astype(np.float32) * 4}
        (out,) = lib.run(feeds)
        assert_close(out, run_onnxruntime(model, feeds)[0], "float32")
        (launch,) = lib.profile()
        call = tiling_at(tiling, {"s": length})
        assert (call.total, call.cols) == (6 * length, length)
        assert launch["block_dim"] == call.cores, length
        assert launch["gm_read_bytes"] == call.gm_read_bytes == 6 * length * length * 4
        assert launch["gm_write_bytes"] == call.gm_write_bytes == 6 * length * length * 4
        assert launch["peak_ub_bytes"] == call.ub_bytes <= tiling.ub_bytes
        assert launch["warnings"] == []
        assert lib.kernel_tiling(name, length) == {
            "rows": call.total, "blockRows": call.block_len, "tileRows": call.tile_len,
            "cols": length, "blockDim": call.cores}


def test_a_mean_over_a_symbolic_axis_stays_on_the_host_naming_it():
    lib = tvm_ascend.build(_model("ReduceMean"), config=tvm_ascend.CompileConfig(
        input_shape={"x": (2, 3, "1~16", "1~16")}))
    (op,) = [o for o in lib.fusion_report()["dynamic"]["host_ops"] if o["op"] == "relax.mean"]
    assert "mean reduces a symbolic axis (s)" in op["why"] and "Softmax only" in op["why"]


def test_rows_longer_than_the_ub_at_the_bound_are_refused_naming_it():
    mod = load_model(_model(dims=(2, "s")), input_shape={"x": (2, "1~70000")})
    low = relax.transform.LegalizeOps(legalize_map())(mod)
    low = relax.transform.FuseTIR()(relax.transform.FuseOps()(
        relax.transform.AnnotateTIROpPattern()(low)))
    (prim,) = [f for f in low.functions.values() if isinstance(f, tirx.PrimFunc)]
    prim = prim.with_attr(ir_attrs.DIM_BOUNDS, json.dumps({"s": [1, 70000]}))
    with pytest.raises(TilingError, match="rows of 70000 elements do not fit the UB whole; "
                                          "multi-pass rows are not tiled at run time yet"):
        RowReduceSchedule.plan(RowReduceSchedule.analyse(prim), get_soc("Ascend910B1"))
