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


def layernorm_chain(b: ModelBuilder, x: str, cols: int, rms: bool = False) -> str:
    """LayerNorm / RMSNorm as PyTorch's TorchScript exporter writes them (op chains)."""
    if rms:
        centred = x
    else:
        centred = b.node("Sub", [x, b.node("ReduceMean", [x], axes=[-1])])
    var = b.node("ReduceMean", [b.node("Pow", [centred, b.const(np.array(2.0), "two")])],
                 axes=[-1])
    std = b.node("Sqrt", [b.node("Add", [var, b.const(np.array(1e-5), "eps")])])
    normed = b.node("Div", [centred, std])
    gamma = b.const(b.rng.uniform(0.5, 1.5, cols), "gamma")
    beta = b.const(b.rng.standard_normal(cols), "beta")
    return b.node("Add", [b.node("Mul", [normed, gamma]), beta])


def attention_model(batch=2, seq=20, heads=2, dim=64, proj=True, mask="row", dtype="float32",
                    scale_op="Div", seed=3, scale_shape=()):
    """MatMul(Q, K^T) -> Div/Mul scale -> Add mask -> Softmax -> MatMul V, with the head
    Reshape/Transpose around it (``proj``) or on [B, H, S, D] inputs. A ``scale_shape`` other
    than 0-d makes the scale an ONNX Constant node of that shape (as exporters write it)."""
    mb = ModelBuilder(dtype, seed=seed)
    if proj:
        q, k, v = (mb.input(n, [batch, seq, heads * dim]) for n in "qkv")

        def heads_of(x, perm):
            shaped = mb.node("Reshape", [x, mb.int_const([batch, seq, heads, dim], "shape")])
            return mb.node("Transpose", [shaped], perm=perm)

        qh, kh, vh = heads_of(q, [0, 2, 1, 3]), heads_of(k, [0, 2, 3, 1]), heads_of(v, [0, 2, 1, 3])
    else:
        qh, k, vh = (mb.input(n, [batch, heads, seq, dim]) for n in "qkv")
        kh = mb.node("Transpose", [k], perm=[0, 1, 3, 2])
    m = mb.input("mask", [batch, 1, 1, seq] if mask == "row" else [batch, 1, seq, seq])
    mb.feeds["mask"] = np.where(mb.rng.random(mb.feeds["mask"].shape) < 0.2, -10000.0,
                                0.0).astype(mb.np_dtype)
    scores = mb.node("MatMul", [qh, kh])
    factor = np.sqrt(dim) if scale_op == "Div" else 1.0 / np.sqrt(dim)
    if scale_shape:
        scale = mb.name("scale")
        mb.nodes.append(helper.make_node("Constant", [], [scale], name=scale,
                                         value=numpy_helper.from_array(np.full(
                                             scale_shape, factor, mb.np_dtype))))
    else:
        scale = mb.const(np.array(factor), "scale")
    scores = mb.node(scale_op, [scores, scale])
    probs = mb.node("Softmax", [mb.node("Add", [scores, m])], axis=-1)
    out = mb.node("MatMul", [probs, vh])
    if proj:
        out = mb.node("Transpose", [out], perm=[0, 2, 1, 3])
        out = mb.node("Reshape", [out, mb.int_const([batch, seq, heads * dim], "shape")])
        mb.output(out, [batch, seq, heads * dim])
    else:
        mb.output(out, [batch, heads, seq, dim])
    return mb


def model_with_a_part_per_rule():
    """One graph with a part per rule; returns (builder, {part: [ONNX node names]})."""
    b = ModelBuilder("float32", seed=3)
    parts = {}
    x = b.input("x", (6, 40))
    first = len(b.nodes)
    y = b.node("Mul", [b.node("Relu", [b.node("Add", [x, b.const(np.ones(40), "bias")])]),
                       b.const(np.array(0.5), "half")])
    parts["elementwise"] = [n.name for n in b.nodes[first:]]
    b.output(y, (6, 40))
    a = b.input("a", (6, 24))
    first = len(b.nodes)
    mm = b.node("MatMul", [a, b.const(b.rng.standard_normal((24, 40)) * 0.2, "w")])
    mm = b.node("Relu", [b.node("Add", [mm, b.const(b.rng.standard_normal(40), "mbias")])])
    parts["matmul"] = [n.name for n in b.nodes[first:]]
    b.output(mm, (6, 40))
    s = b.input("s", (6, 40))
    first = len(b.nodes)
    soft = b.node("Softmax", [b.node("Mul", [s, b.const(np.array(0.125), "scale")])], axis=-1)
    parts["softmax"] = [n.name for n in b.nodes[first:]]
    b.output(soft, (6, 40))
    n = b.input("n", (6, 40))
    first = len(b.nodes)
    norm = layernorm_chain(b, n, 40)
    parts["layernorm"] = [n.name for n in b.nodes[first:]]
    b.output(norm, (6, 40))
    r = b.input("r", (6, 40))
    first = len(b.nodes)
    shared = b.node("Exp", [b.node("Mul", [r, b.const(np.array(0.25), "q")])])
    left = b.node("Add", [shared, b.const(np.ones(40), "one")])
    right = b.node("Sub", [shared, b.const(np.array(0.5), "h")])
    parts["shared"] = [n.name for n in b.nodes[first:]]
    b.output(left, (6, 40))
    b.output(right, (6, 40))
    return b, parts


def add_conv(b: ModelBuilder, case, index: int) -> str:
    """A Conv (with the epilogue a test case names) on input ``x{index}``: ``case`` is
    (n, cin, h, w, cout, k, stride, pad, dil, groups, epilogue); returns the output."""
    n, cin, h, w, cout, k, stride, pad, dil, groups, epilogue = case
    x = b.input(f"x{index}", (n, cin, h, w))
    weight = b.const(b.rng.standard_normal((cout, cin // groups, k, k)) * 0.2, "w")
    inputs = [x, weight]
    if epilogue.startswith("bias"):
        inputs.append(b.const(b.rng.standard_normal(cout), "bias"))
    y = b.node("Conv", inputs, strides=[stride, stride], pads=[pad] * 4,
               dilations=[dil, dil], group=groups, kernel_shape=[k, k])
    oh = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    out_shape = (n, cout, oh, ow)
    if epilogue in ("bias_relu", "relu_residual"):
        y = b.node("Relu", [y])
    elif epilogue == "bias_clip6":
        y = b.node("Clip", [y, b.const(np.array(0.0), "lo"), b.const(np.array(6.0), "hi")])
    elif epilogue == "sigmoid":
        y = b.node("Sigmoid", [y])
    elif epilogue == "silu":
        y = b.node("Mul", [y, b.node("Sigmoid", [y])])
    if epilogue == "relu_residual":
        y = b.node("Add", [y, b.input(f"r{index}", out_shape)])
    b.output(y, out_shape)
    return y


def causal_attention_model(batch=2, heads=2, seq=40, dim=16, dtype="float32", where="gpt2",
                           seed=3, keep=None):
    """Attention with a Where on a bool condition before the softmax. ``where``: "gpt2"
    (GPT-2's TorchScript export: Where(causal, S / sqrt(d), lowest) + padding mask),
    "inside" (Where(causal, S / sqrt(d) + mask, lowest)), "rows" (a [b, 1, 1, s] bool keep
    mask, broadcast over the queries, filled with a constant), "causal" (GPT-2's Where
    without a padding mask), "additive" (no Where: S / sqrt(d) + a constant [1, 1, s, s]
    mask, 0 where kept, the lowest float elsewhere). ``keep``: the [s, s] bool constant in
    place of the lower triangle ("causal", "additive")."""
    mb = ModelBuilder(dtype, seed=seed)
    q, k_t, v = (mb.input(n, shape) for n, shape in (("q", [batch, heads, seq, dim]),
                                                      ("kt", [batch, heads, dim, seq]),
                                                      ("v", [batch, heads, seq, dim])))
    lowest = np.finfo(mb.np_dtype).min
    tri = np.tril(np.ones((seq, seq), bool)) if keep is None else keep
    scores = mb.node("Div", [mb.node("MatMul", [q, k_t]), mb.const(np.array(np.sqrt(dim)), "d")])
    if where in ("causal", "additive"):
        if where == "causal":
            name = mb.name("keep")
            mb.inits.append(numpy_helper.from_array(tri[None, None], name))
            scores = mb.node("Where", [name, scores,
                                       mb.const(np.array(lowest), "lowest")])
        else:
            scores = mb.node("Add", [scores, mb.const(
                np.where(tri, 0.0, lowest).astype(mb.np_dtype)[None, None], "causal")])
        probs = mb.node("Softmax", [scores], axis=-1)
        mb.output(mb.node("MatMul", [probs, v]), [batch, heads, seq, dim])
        return mb
    mask = mb.input("mask", [batch, 1, 1, seq])
    mb.feeds["mask"] = np.where(mb.rng.random(mb.feeds["mask"].shape) < 0.2, lowest,
                                0.0).astype(mb.np_dtype)
    keep = mb.name("keep")
    if where == "rows":
        values = mb.rng.random((batch, 1, 1, seq)) < 0.7
        values[..., 0] = True  # every query keeps a key
    else:
        values = tri[None, None]
    mb.inits.append(numpy_helper.from_array(values, keep))
    if where == "inside":
        scores = mb.node("Add", [scores, mask])
    fill = mb.const(np.array(lowest), "lowest") if where != "rows" else \
        mb.const(np.array(-1e4), "fill")
    scores = mb.node("Where", [keep, scores, fill])
    if where != "inside":
        scores = mb.node("Add", [scores, mask])
    probs = mb.node("Softmax", [scores], axis=-1)
    mb.output(mb.node("MatMul", [probs, v]), [batch, heads, seq, dim])
    return mb


def repeated_key_scores_model(batch=2, heads=4, kv_heads=2, seq=16, dim=16, dtype="float16",
                              seed=5):
    """LLaMA's attention scores over a repeated K, without the Softmax: repeat_kv (Unsqueeze,
    Expand, Reshape) and the transpose of K, then MatMul(Q, K^T) * scale + mask. Without a
    Softmax and P @ V the grouped-query rewrite (prepare/gqa.py) does not apply, so K's
    data-movement prologue stays a kernel of its own beside the MatMul, as LLaMA's was before
    that rewrite (the shapes are the corpus LLaMA's)."""
    mb = ModelBuilder(dtype, seed=seed)
    q = mb.input("q", [batch, heads, seq, dim])
    k = mb.input("k", [batch, kv_heads, 1, seq, dim])  # K with repeat_kv's Unsqueeze done
    mask = mb.input("mask", [batch, 1, seq, seq])
    mb.feeds["mask"] = np.where(mb.rng.random(mb.feeds["mask"].shape) < 0.2, -10000.0,
                                0.0).astype(mb.np_dtype)
    repeated = mb.node("Expand", [k, mb.int_const(
        [batch, kv_heads, heads // kv_heads, seq, dim], "shape")])
    repeated = mb.node("Reshape", [repeated, mb.int_const([batch, heads, seq, dim], "shape")])
    k_t = mb.node("Transpose", [repeated], perm=[0, 1, 3, 2])
    scores = mb.node("Mul", [mb.node("MatMul", [q, k_t]),
                             mb.const(np.array(1.0 / np.sqrt(dim)), "scale")])
    mb.output(mb.node("Add", [scores, mask]), [batch, heads, seq, seq])
    return mb


def llama_attention_model(batch=2, seq=16, heads=4, kv_heads=2, dim=16, dtype="float32",
                          seed=7):
    """A LLaMA-style attention block as PyTorch's exporters write it: Q, K, V projections of
    one input, the head Reshape/Transpose, rotary embedding (``x * cos + rotate_half(x) *
    sin``, rotate_half a Concat of the negated upper half and the lower half), repeat_kv on K
    and V (Unsqueeze, Expand, Reshape), K's transpose, the scaled, masked softmax, the heads
    joined again and the output projection. Returns (builder, names), ``names`` the ONNX
    nodes of K's head transpose, K's rotary Add and K's transpose for the scores."""
    mb = ModelBuilder(dtype, seed=seed)
    hidden = heads * dim
    x = mb.input("x", [batch, seq, hidden])
    mask = mb.input("mask", [batch, 1, seq, seq])
    mb.feeds["mask"] = np.where(mb.rng.random(mb.feeds["mask"].shape) < 0.2, -10000.0,
                                0.0).astype(mb.np_dtype)
    angles = np.arange(seq)[:, None] * (1e-2 ** (np.arange(dim) % (dim // 2) / (dim // 2)))
    cos = mb.const(np.cos(angles)[None, None], "cos")
    sin = mb.const(np.sin(angles)[None, None], "sin")
    names = {}

    def heads_of(n_heads, stem):
        w = mb.const(mb.rng.standard_normal((hidden, n_heads * dim)) / np.sqrt(hidden), stem)
        shaped = mb.node("Reshape", [mb.node("MatMul", [x, w]),
                                     mb.int_const([batch, seq, n_heads, dim], "shape")])
        out = mb.node("Transpose", [shaped], perm=[0, 2, 1, 3])
        names[f"{stem}_heads"] = out
        return out

    def half(t, start, end):
        return mb.node("Slice", [t, mb.int_const([start]), mb.int_const([end]),
                                 mb.int_const([3])])

    def rotary(t, stem):
        rotated = mb.node("Concat", [mb.node("Neg", [half(t, dim // 2, dim)]),
                                     half(t, 0, dim // 2)], axis=-1)
        out = mb.node("Add", [mb.node("Mul", [t, cos]), mb.node("Mul", [rotated, sin])])
        names[f"{stem}_rotary"] = out
        return out

    def repeat_kv(t):
        t = mb.node("Unsqueeze", [t, mb.int_const([2])])
        t = mb.node("Expand", [t, mb.int_const([batch, kv_heads, heads // kv_heads, seq, dim],
                                               "shape")])
        return mb.node("Reshape", [t, mb.int_const([batch, heads, seq, dim], "shape")])

    q = rotary(heads_of(heads, "q"), "q")
    k = repeat_kv(rotary(heads_of(kv_heads, "k"), "k"))
    v = repeat_kv(heads_of(kv_heads, "v"))
    k_t = names["k_t"] = mb.node("Transpose", [k], perm=[0, 1, 3, 2])
    scores = mb.node("Mul", [mb.node("MatMul", [q, k_t]),
                             mb.const(np.array(1.0 / np.sqrt(dim)), "scale")])
    probs = mb.node("Softmax", [mb.node("Add", [scores, mask])], axis=-1)
    out = mb.node("Transpose", [mb.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    out = mb.node("Reshape", [out, mb.int_const([batch, seq, hidden], "shape")])
    w_o = mb.const(mb.rng.standard_normal((hidden, hidden)) / np.sqrt(hidden), "wo")
    mb.output(mb.node("MatMul", [out, w_o]), [batch, seq, hidden])
    return mb, names


def atc_recording_model() -> onnx.ModelProto:
    """The model of the recorded ATC run in tests/fixtures/atc_recording/matmul_softmax:
    x[32, 64] -> MatMul -> Add(bias) -> Relu -> Softmax -> Mul(scale) -> Sub(one). Its node
    names are the ones the recording's original op names refer to."""
    rng = np.random.default_rng(0)

    def init(value, name):
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    inits = [init(rng.standard_normal((64, 48)) * 0.1, "w"), init(rng.standard_normal(48), "bias"),
             init([0.5], "scale"), init(1.0, "one")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
             helper.make_node("Add", ["mm", "bias"], ["b"], name="add_bias"),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["p"], name="softmax", axis=-1),
             helper.make_node("Mul", ["p", "scale"], ["s"], name="scale"),
             helper.make_node("Sub", ["s", "one"], ["y"], name="shift")]
    graph = helper.make_graph(
        nodes, "atc_demo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 48])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
