"""LayerNorm over symbolic rows on the NPU, tiled at run time (issue 20, item 2).

x of shape (s, H), s given as a range from 1, normalised over the static H: the ONNX
LayerNormalization and the chain exporters decompose it into (ReduceMean, Sub, Pow,
ReduceMean, Add, Sqrt, Div, Mul, Add) are each one row-reduce kernel whose row count comes
from the tiling struct. At one row the row classifier cannot tell gamma / beta (a [H] column)
from the row itself; the upper bound's program reads them as columns, which is right at one
row too, so a range from 1 is tiled at run time instead of the group running on the host.
Checked on both SoCs against onnxruntime at s = 1, 7, 64, 129 and the range's top, with the
report saying run-time tiled and naming no host op (the importer's ``gv = lv`` output alias
is no op: it used to be listed as one).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend.schedules import Tiling, tiling_at

SOCS = ("Ascend910B1", "Ascend310P3")
HIDDEN = 96  # rows of 384 bytes: not a power of two
HIGH = 300
LENGTHS = (1, 7, 64, 129, HIGH)


def _layer_norm(decomposed: bool):
    """LayerNorm over the last axis of x (s, HIDDEN): the ONNX op, or its decomposition."""
    import onnx

    gamma = np.linspace(0.5, 1.5, HIDDEN).astype(np.float32)
    beta = np.linspace(-0.2, 0.2, HIDDEN).astype(np.float32)
    inits = [numpy_helper.from_array(gamma, "g"), numpy_helper.from_array(beta, "b")]
    if decomposed:
        inits += [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                  numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
        nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1], name="mean"),
                 helper.make_node("Sub", ["x", "m"], ["d"], name="sub"),
                 helper.make_node("Pow", ["d", "two"], ["p"], name="pow"),
                 helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1], name="var"),
                 helper.make_node("Add", ["v", "eps"], ["ve"], name="add_eps"),
                 helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
                 helper.make_node("Div", ["d", "sd"], ["n"], name="div"),
                 helper.make_node("Mul", ["n", "g"], ["ng"], name="scale"),
                 helper.make_node("Add", ["ng", "b"], ["y"], name="shift")]
    else:
        nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1,
                                  epsilon=1e-5, name="ln")]
    dims = ["s", HIDDEN]
    graph = helper.make_graph(
        nodes, "ranged_ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module", params=[(soc, dec) for dec in (False, True) for soc in SOCS],
                ids=lambda p: f"{'decomposed' if p[1] else 'onnx_op'}-{p[0]}")
def built(request):
    soc, decomposed = request.param
    model = _layer_norm(decomposed)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version=soc, input_shape={"x": (f"1~{HIGH}", HIDDEN)}))
    return model, lib


def test_layer_norm_is_one_row_kernel_tiled_at_run_time(built):
    _, lib = built
    report = lib.fusion_report()
    assert report["npu_kernels"] == 1 and report["host_groups"] == 0
    section = report["dynamic"]
    assert section["host_ops"] == []  # not even the output alias
    (kernel,) = section["runtime_tiling"]["kernels"]
    assert kernel["template"] == "row_reduce" and kernel["dims"] == ["s"]
    (group,) = report["groups"]
    tiling = Tiling.from_dict(group["tiling"])
    assert tiling.cols == HIDDEN and tiling.total == HIGH  # planned at the bound


def test_each_length_matches_onnxruntime_and_its_plan(built):
    model, lib = built
    (group,) = lib.fusion_report()["groups"]
    tiling = Tiling.from_dict(group["tiling"])
    for length in LENGTHS:
        lib.profile()  # reset the counters
        feeds = {"x": np.random.default_rng(length).standard_normal((length, HIDDEN))
                 .astype(np.float32) * 3 + 1}
        (out,) = lib.run(feeds)
        assert out.shape == (length, HIDDEN)
        assert_close(out, run_onnxruntime(model, feeds)[0], "float32")
        (launch,) = lib.profile()
        call = tiling_at(tiling, {"s": length})
        assert call.total == length and launch["block_dim"] == call.cores, length
        assert launch["gm_write_bytes"] == length * HIDDEN * 4
        assert launch["warnings"] == []
        assert lib.kernel_tiling(group["kernel"], length)["rows"] == length
