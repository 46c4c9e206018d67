"""A BERT-style encoder layer as PyTorch's TorchScript exporter writes it (op chains).

LayerNorm and GELU are decomposed (ReduceMean/Sub/Pow/Sqrt/Div, Div/Erf/Add/Mul), attention is
MatMul -> Div(sqrt d) -> Add(mask) -> Softmax -> MatMul with Reshape/Transpose around the heads.

    python -m benchmarks.models.transformer out.onnx
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Graph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, value, dtype=np.float32) -> str:
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def weight(self, *shape) -> str:
        return self.const(self.rng.standard_normal(shape) * 0.05)

    def op(self, kind: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(kind, inputs, [name], name=name, **attrs))
        return name


def _layernorm(g: _Graph, x: str, hidden: int, prefix: str) -> str:
    mean = g.op("ReduceMean", [x], f"{prefix}.mean", axes=[-1])
    centred = g.op("Sub", [x, mean], f"{prefix}.sub")
    var = g.op("ReduceMean", [g.op("Pow", [centred, g.const(2.0)], f"{prefix}.pow")],
               f"{prefix}.var", axes=[-1])
    std = g.op("Sqrt", [g.op("Add", [var, g.const(1e-12)], f"{prefix}.eps")], f"{prefix}.sqrt")
    normed = g.op("Div", [centred, std], f"{prefix}.div")
    scaled = g.op("Mul", [normed, g.const(np.ones(hidden))], f"{prefix}.gamma")
    return g.op("Add", [scaled, g.const(np.zeros(hidden))], f"{prefix}.beta")


def _linear(g: _Graph, x: str, n_in: int, n_out: int, prefix: str) -> str:
    return g.op("Add", [g.op("MatMul", [x, g.weight(n_in, n_out)], f"{prefix}.matmul"),
                        g.weight(n_out)], f"{prefix}.bias")


def _heads(g: _Graph, x: str, batch, seq, heads, head_dim, prefix, perm) -> str:
    shaped = g.op("Reshape", [x, g.const([batch, seq, heads, head_dim], np.int64)],
                  f"{prefix}.reshape")
    return g.op("Transpose", [shaped], f"{prefix}.transpose", perm=perm)


def encoder_layer(batch=1, seq=16, hidden=64, heads=2, ffn=128, seed=0) -> onnx.ModelProto:
    """One post-LN encoder layer: inputs x [batch, seq, hidden] and mask [batch, 1, 1, seq]."""
    g, head_dim = _Graph(seed), hidden // heads
    q = _heads(g, _linear(g, "x", hidden, hidden, "q"), batch, seq, heads, head_dim, "q",
               [0, 2, 1, 3])
    k = _heads(g, _linear(g, "x", hidden, hidden, "k"), batch, seq, heads, head_dim, "k",
               [0, 2, 3, 1])
    v = _heads(g, _linear(g, "x", hidden, hidden, "v"), batch, seq, heads, head_dim, "v",
               [0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k], "attn.qk"), g.const(np.sqrt(head_dim))],
                  "attn.scale")
    probs = g.op("Softmax", [g.op("Add", [scores, "mask"], "attn.mask")], "attn.softmax",
                 axis=-1)
    context = g.op("Transpose", [g.op("MatMul", [probs, v], "attn.pv")], "attn.transpose",
                   perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [context, g.const([batch, seq, hidden], np.int64)], "attn.merge")
    attn = _linear(g, merged, hidden, hidden, "attn.out")
    h = _layernorm(g, g.op("Add", [attn, "x"], "attn.residual"), hidden, "ln1")
    up = _linear(g, h, hidden, ffn, "ffn.up")
    erf = g.op("Erf", [g.op("Div", [up, g.const(np.sqrt(2.0))], "gelu.div")], "gelu.erf")
    gelu = g.op("Mul", [g.op("Mul", [up, g.op("Add", [erf, g.const(1.0)], "gelu.add")],
                             "gelu.mul"), g.const(0.5)], "gelu.half")
    down = _linear(g, gelu, ffn, hidden, "ffn.down")
    out = _layernorm(g, g.op("Add", [down, h], "ffn.residual"), hidden, "ln2")
    g.nodes.append(helper.make_node("Identity", [out], ["y"], name="output"))
    graph = helper.make_graph(
        g.nodes, "encoder_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [batch, 1, 1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(encoder_layer(), sys.argv[1] if len(sys.argv) > 1 else "encoder_layer.onnx")
