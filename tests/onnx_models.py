"""ONNX models built in the tests (random weights, nothing downloaded)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ONNX_DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}

# A cycle of elementwise/broadcast steps. With inputs in (0.1, 2), every step's input stays in
# its op's domain wherever a chain starts: Sqrt follows Relu, Log follows Abs.
CHAIN_STEPS = ("add_bias", "relu", "mul_scalar", "sqrt", "sub_input", "tanh", "exp", "div_const",
               "sigmoid", "abs", "log", "neg", "erf", "clip", "pow2", "add_rowcol")


class ModelBuilder:
    """Accumulates nodes, inputs and initializers of one graph."""

    def __init__(self, dtype: str = "float32", seed: int = 0):
        self.dtype = dtype
        self.np_dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inputs, self.outputs, self.inits = [], [], [], []
        self.feeds: dict[str, np.ndarray] = {}
        self._count = 0

    def name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def input(self, name: str, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, ONNX_DTYPES[self.dtype], shape))
        self.feeds[name] = self.rng.uniform(0.1, 2.0, size=shape).astype(self.np_dtype)
        return name

    def const(self, value: np.ndarray, stem: str = "c") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value, self.np_dtype), name))
        return name

    def int_const(self, values, stem: str = "axes") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def output(self, name: str, shape) -> None:
        out = self.node("Identity", [name])
        self.outputs.append(helper.make_tensor_value_info(out, ONNX_DTYPES[self.dtype], shape))

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "test", self.inputs, self.outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model

    def step(self, kind: str, x: str, shape, second_input: str | None) -> str:
        """One chain step of kind ``kind`` applied to ``x``."""
        shape = tuple(shape)
        if kind == "add_bias":
            return self.node("Add", [x, self.const(self.rng.standard_normal(shape[-1]), "bias")])
        if kind == "mul_scalar":
            return self.node("Mul", [x, self.const([0.75], "scale")])
        if kind == "sub_input":
            return self.node("Sub", [x, second_input])
        if kind == "div_const":
            return self.node("Div", [x, self.const(np.array(1.5), "div")])
        if kind == "clip":
            return self.node("Clip", [x, self.const(np.array(-0.5), "lo"),
                                      self.const(np.array(1.25), "hi")])
        if kind == "pow2":
            return self.node("Pow", [x, self.const(np.array(2.0), "exp")])
        if kind == "add_rowcol":
            rowcol = (shape[0],) + (1,) * (len(shape) - 1)
            return self.node("Add", [x, self.const(self.rng.standard_normal(rowcol), "rowcol")])
        op = {"relu": "Relu", "sqrt": "Sqrt", "tanh": "Tanh", "exp": "Exp", "sigmoid": "Sigmoid",
              "abs": "Abs", "log": "Log", "neg": "Neg", "erf": "Erf"}[kind]
        return self.node(op, [x])


def chain_steps(length: int, start: int) -> list[str]:
    return [CHAIN_STEPS[(start + i) % len(CHAIN_STEPS)] for i in range(length)]


def add_chain(builder: ModelBuilder, index: int, shape, steps: list[str]) -> None:
    """Independent chain ``index``: x_i (and y_i for sub_input) -> steps -> output."""
    x = builder.input(f"x{index}", shape)
    second = builder.input(f"y{index}", shape) if "sub_input" in steps else None
    value = x
    for kind in steps:
        value = builder.step(kind, value, shape, second)
    builder.output(value, shape)


def conv_bn(b: ModelBuilder, x: str, cin: int, cout: int, relu: bool = True,
            residual=None) -> str:
    """A 3x3 Conv (pad 1) + BatchNormalization (+ residual Add) (+ Relu) on ``b``; its output."""
    w = b.const(b.rng.standard_normal((cout, cin, 3, 3)) * 0.2, "w")
    stats = [b.const(b.rng.uniform(0.5, 1.5, cout), "gamma"),
             b.const(b.rng.standard_normal(cout) * 0.1, "beta"),
             b.const(b.rng.standard_normal(cout) * 0.1, "mean"),
             b.const(b.rng.uniform(0.5, 1.5, cout), "var")]
    y = b.node("BatchNormalization", [b.node("Conv", [x, w], pads=[1, 1, 1, 1]), *stats],
               epsilon=1e-3)
    if residual is not None:
        y = b.node("Add", [y, residual])
    return b.node("Relu", [y]) if relu else y
