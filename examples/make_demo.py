"""Writes examples/demo.onnx: a small model with two fusable groups.

    python examples/make_demo.py [output.onnx]

x[2,64,100] -> Add(bias) -> Relu -> Mul(scale) -> Transpose -> MatMul(w) -> Sigmoid -> Mul(x2)
-> Sub -> out[2,100,48]. The elementwise chain and the Transpose (which moves the last axis)
are one vector kernel (ElementwiseFusion + DataMovementFusion); the MatMul and its epilogue are
one cube kernel (MatMulEpilogueFusion).
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_demo_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal(100).astype(np.float32), "bias"),
        numpy_helper.from_array(np.array([0.5], dtype=np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32) * 0.1, "w"),
        numpy_helper.from_array(np.array([2.0], dtype=np.float32), "two"),
        numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"], name="add_bias"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "scale"], ["s"], name="scale"),
        helper.make_node("Transpose", ["s"], ["t"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "w"], ["m"], name="matmul"),
        helper.make_node("Sigmoid", ["m"], ["g"], name="sigmoid"),
        helper.make_node("Mul", ["g", "two"], ["g2"], name="double"),
        helper.make_node("Sub", ["g2", "one"], ["out"], name="shift"),
    ]
    graph = helper.make_graph(
        nodes, "tvm_ascend_demo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 100])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 100, 48])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="tvm-ascend examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "examples/demo.onnx"
    onnx.save(make_demo_model(), path)
    print(f"wrote {path}")
