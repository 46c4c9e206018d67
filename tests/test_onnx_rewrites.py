"""The frontend's ONNX rewrites for nodes TVM 0.27 imports wrongly (frontend/onnx_rewrites.py),
each checked against onnxruntime on shapes the node tests do not use."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from tvm_ascend.frontend.onnx_rewrites import rewrite_for_import
from conftest import assert_close, run_onnxruntime


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("shape, axis, dtype, opset", [
    ((5, 7, 33), -1, "float32", 17), ((5, 7, 33), 1, "float32", 18),
    ((6, 40), -1, "float16", 17)])
def test_layer_norm_mean_and_inv_std_dev_have_their_shapes(shape, axis, dtype, opset):
    elem = TensorProto.FLOAT if dtype == "float32" else TensorProto.FLOAT16
    rng = np.random.default_rng(0)
    norm = shape[axis % len(shape):]
    reduced = list(shape[:axis % len(shape)]) + [1] * len(norm)
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv"],
                            axis=axis, epsilon=1e-3, name="ln")
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, norm).astype(dtype), "scale"),
             numpy_helper.from_array(rng.uniform(-1, 1, norm).astype(dtype), "bias")]
    outs = [helper.make_tensor_value_info("y", elem, list(shape)),
            helper.make_tensor_value_info("mean", TensorProto.FLOAT, reduced),
            helper.make_tensor_value_info("inv", TensorProto.FLOAT, reduced)]
    model = _model([node], [helper.make_tensor_value_info("x", elem, list(shape))], outs, inits,
                   opset)
    feeds = {"x": rng.uniform(-2, 2, shape).astype(dtype)}
    lib = tvm_ascend.build(model)
    got = lib.run(feeds)
    expected = run_onnxruntime(model, feeds)
    for out, ref, kind in zip(got, expected, (dtype, "float32", "float32")):
        assert out.shape == ref.shape
        assert_close(out, ref, kind)
    assert lib.fusion_report()["nodes_before"] == 1  # the model's node, not the rewrite's


def test_layer_norm_with_only_y_read_is_not_rewritten():
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
                            helper.make_tensor_value_info("s", TensorProto.FLOAT, [8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    assert rewrite_for_import(model) is model


@pytest.mark.parametrize("data, shape", [((3, 1), (2, 1, 6)), ((4, 1, 5), (3, 1)),
                                         ((1,), (2, 3)), ((2, 3), (2, 3))])
def test_expand_to_a_shape_given_at_run_time_broadcasts_with_the_data(data, shape):
    """Regression (issue 16, ONNX's test_expand_dim_changed): TVM took a run-time shape as the
    result's shape, (3, 1) to [2, 1, 6] gave (2, 1, 6) instead of (2, 3, 6)."""
    node = helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")
    out_shape = np.broadcast_shapes(data, shape)
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(data)),
                            helper.make_tensor_value_info("shape", TensorProto.INT64,
                                                          [len(shape)])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))])
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, data).astype("float32"),
             "shape": np.array(shape, "int64")}
    (out,) = tvm_ascend.build(model).run(feeds)
    (ref,) = run_onnxruntime(model, feeds)
    assert out.shape == ref.shape == out_shape
    assert_close(out, ref, "float32")


def test_batch_norm_in_training_mode_normalises_with_the_batch_statistics():
    """Regression (issue 16): TVM normalised a training-mode BatchNormalization with the running
    statistics. Checked against numpy (onnxruntime's CPU build has no training mode)."""
    rng = np.random.default_rng(2)
    x = rng.uniform(-2, 2, (3, 4, 5, 6)).astype("float32")
    scale, bias = rng.uniform(0.5, 1.5, 4).astype("float32"), rng.uniform(-1, 1, 4).astype(
        "float32")
    mean, var = rng.uniform(-1, 1, 4).astype("float32"), rng.uniform(0.5, 1, 4).astype("float32")
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            training_mode=1, epsilon=1e-2, momentum=0.7, name="bn")
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((scale, "s"), (bias, "b"), (mean, "m"), (var, "v"))]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape)),
            helper.make_tensor_value_info("rm", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("rv", TensorProto.FLOAT, [4])]
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          list(x.shape))], outs, inits, 15)
    y, running_mean, running_var = tvm_ascend.build(model).run({"x": x})
    axes = (0, 2, 3)
    batch_mean, batch_var = x.mean(axis=axes), x.var(axis=axes)
    c = (1, 4, 1, 1)
    expected = (x - batch_mean.reshape(c)) / np.sqrt(batch_var.reshape(c) + 1e-2) \
        * scale.reshape(c) + bias.reshape(c)
    assert_close(y, expected, "float32_model")
    assert_close(running_mean, mean * 0.7 + batch_mean * 0.3, "float32_model")
    assert_close(running_var, var * 0.7 + batch_var * 0.3, "float32_model")


def test_constant_of_an_empty_shape_is_a_0d_constant():
    """Regression (issue 16, corpus): PyTorch's TorchScript exporter writes an attention mask's
    True as ConstantOfShape of an empty shape; TVM failed to import it ('broadcast_to expects
    the input shape to have the number of ndim at least as the input tensor's')."""
    nodes = [helper.make_node("Constant", [], ["s"], name="s",
                              value=helper.make_tensor("s", TensorProto.INT64, [0], [])),
             helper.make_node("ConstantOfShape", ["s"], ["t"], name="cos",
                              value=helper.make_tensor("v", TensorProto.BOOL, [1], [True])),
             helper.make_node("Where", ["t", "x", "z"], ["y"], name="where")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("x", "z")]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    rng = np.random.default_rng(3)
    feeds = {n: rng.uniform(-1, 1, (2, 3)).astype("float32") for n in ("x", "z")}
    (out,) = tvm_ascend.build(model).run(feeds)
    assert_close(out, run_onnxruntime(model, feeds)[0], "float32")
