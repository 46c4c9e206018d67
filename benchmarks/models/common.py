"""What every benchmark model builder shares: a graph builder, the two export styles' op chains.

The builders write ONNX the way PyTorch's exporters do, with deterministic seeded random weights
stored as ``raw_data`` tensors (so even GPT-2 medium serialises quickly). Two styles:

- ``"torchscript"`` (``torch.onnx.export`` before dynamo, opset 14): LayerNorm and GELU as op
  chains, projections as MatMul + Add, attention as MatMul / Div / Add(mask) / Softmax / MatMul.
- ``"dynamo"`` (``torch.onnx.export(..., dynamo=True)``, opset 18; 20 gives the Gelu op):
  LayerNormalization, Gemm or MatMul projections, one fused QKV projection and Split, SDPA's
  Softmax followed by IsNaN / Where.

Example
-------
>>> g = OnnxGraph("demo", dtype="float16", seed=0)
>>> x = g.input("x", [2, 8])
>>> y = g.output(g.linear(x, 8, 4, "proj"), [2, 4])
>>> model = g.model()
>>> [n.op_type for n in model.graph.node]
['MatMul', 'Add']
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STYLES = ("torchscript", "dynamo")
DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}
# torch.onnx.export's defaults: the TorchScript exporter's opset for these models, and dynamo's.
DEFAULT_OPSET = {"torchscript": 14, "dynamo": 18}


def check_style(style: str, opset: int | None) -> int:
    """The opset for ``style`` (``opset`` if given); a clear error for an unknown style."""
    if style not in STYLES:
        raise ValueError(f"style={style!r} is not one of {', '.join(STYLES)}")
    opset = DEFAULT_OPSET[style] if opset is None else int(opset)
    if style == "dynamo" and opset < 18:
        raise ValueError(f"opset={opset}: the dynamo exporter writes opset 18 or newer")
    if style == "torchscript" and opset >= 17:
        # from opset 17 on, the TorchScript exporter writes LayerNormalization, not the chain
        raise ValueError(f"opset={opset}: style 'torchscript' writes op chains, opset <= 16")
    return opset


class OnnxGraph:
    """Nodes, initializers, inputs and outputs of one ONNX graph under construction.

    Parameters
    ----------
    name : str
        Graph name.
    dtype : str
        ``"float32"`` or ``"float16"``: the dtype of activations and weights.
    seed : int
        Seed of the weight generator (same seed, same weights).
    opset : int
        ONNX opset of the default domain.
    """

    def __init__(self, name: str, dtype: str = "float32", seed: int = 0, opset: int = 17):
        if dtype not in DTYPES:
            raise ValueError(f"dtype={dtype!r} is not one of {', '.join(DTYPES)}")
        self.name, self.dtype, self.opset = name, dtype, opset
        self.np_dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self._names: set[str] = set()

    # ---- names and tensors ----------------------------------------------------------------
    def unique(self, stem: str) -> str:
        """``stem`` if unused, else ``stem_1``, ``stem_2``, ..."""
        name, index = stem, 0
        while name in self._names:
            index += 1
            name = f"{stem}_{index}"
        self._names.add(name)
        return name

    def _init(self, array: np.ndarray, stem: str) -> str:
        name = self.unique(stem)
        array = np.asarray(array)  # np.ascontiguousarray would make a 0-d index 1-d
        if not array.flags.c_contiguous:
            array = array.copy()
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, shape, fan_in: int, stem: str, gain: float = 1.0) -> str:
        """Random normal weight with std ``gain / sqrt(fan_in)``, which keeps activations near
        unit scale layer after layer, so float16 neither overflows nor flushes to zero."""
        std = gain / math.sqrt(fan_in)
        values = self.rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std)
        return self._init(values.astype(self.np_dtype), stem)

    def uniform(self, shape, low: float, high: float, stem: str) -> str:
        values = self.rng.uniform(low, high, size=tuple(shape)).astype(self.np_dtype)
        return self._init(values, stem)

    def const(self, value, stem: str = "const", dtype=None) -> str:
        """A constant initializer in the model's dtype (or ``dtype``)."""
        return self._init(np.asarray(value, dtype or self.np_dtype), stem)

    def int64(self, values, stem: str = "shape") -> str:
        return self._init(np.asarray(values, np.int64), stem)

    def input(self, name: str, shape, elem_type: int | None = None) -> str:
        kind = DTYPES[self.dtype] if elem_type is None else elem_type
        self.inputs.append(helper.make_tensor_value_info(name, kind, list(shape)))
        self._names.add(name)
        return name

    def output(self, value: str, shape, elem_type: int | None = None, name: str = "") -> str:
        """Mark ``value`` as a graph output (through an Identity named ``name`` if given)."""
        if name:
            value = self.op("Identity", [value], name)
        kind = DTYPES[self.dtype] if elem_type is None else elem_type
        self.outputs.append(helper.make_tensor_value_info(value, kind, list(shape)))
        return value

    def op(self, kind: str, inputs: list[str], stem: str, outputs: int = 1, **attrs):
        """Append one node; returns its output name (a list of names when ``outputs > 1``)."""
        node_name = self.unique(stem)
        names = [node_name] if outputs == 1 else [self.unique(f"{node_name}.out{i}")
                                                   for i in range(outputs)]
        self.nodes.append(helper.make_node(kind, inputs, names, name=node_name, **attrs))
        return names[0] if outputs == 1 else names

    def model(self, check: bool = True) -> onnx.ModelProto:
        """The finished ``ModelProto`` (checked by ``onnx.checker`` unless ``check=False``)."""
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="tvm-ascend benchmarks")
        model.ir_version = 8
        if check:
            onnx.checker.check_model(model)
        return model

    # ---- building blocks shared by the transformer models -----------------------------------
    def linear(self, x: str, n_in: int, n_out: int, stem: str, gemm: bool = False) -> str:
        """``nn.Linear``: MatMul + Add (TorchScript, or dynamo on 3-D input), or one Gemm with
        ``transB=1`` (dynamo on 2-D input), weights of shape [in, out] or [out, in]."""
        if gemm:
            weight = self.weight((n_out, n_in), n_in, f"{stem}.weight")
            bias = self.uniform((n_out,), -0.1, 0.1, f"{stem}.bias")
            return self.op("Gemm", [x, weight, bias], f"{stem}.gemm", transB=1)
        weight = self.weight((n_in, n_out), n_in, f"{stem}.weight")
        bias = self.uniform((n_out,), -0.1, 0.1, f"{stem}.bias")
        return self.op("Add", [self.op("MatMul", [x, weight], f"{stem}.matmul"), bias],
                       f"{stem}.bias_add")

    def layer_norm(self, x: str, hidden: int, stem: str, style: str, eps: float = 1e-5) -> str:
        """LayerNorm over the last axis: the TorchScript op chain or LayerNormalization."""
        gamma = self.uniform((hidden,), 0.8, 1.2, f"{stem}.weight")
        beta = self.uniform((hidden,), -0.1, 0.1, f"{stem}.bias")
        if style == "dynamo":
            return self.op("LayerNormalization", [x, gamma, beta], stem, axis=-1, epsilon=eps)
        mean = self.reduce_mean(x, [-1], f"{stem}.mean")
        centred = self.op("Sub", [x, mean], f"{stem}.sub")
        square = self.op("Pow", [centred, self.const(2.0, f"{stem}.two")], f"{stem}.pow")
        var = self.reduce_mean(square, [-1], f"{stem}.var")
        std = self.op("Sqrt", [self.op("Add", [var, self.const(eps, f"{stem}.eps")],
                                       f"{stem}.add_eps")], f"{stem}.sqrt")
        normed = self.op("Div", [centred, std], f"{stem}.div")
        return self.op("Add", [self.op("Mul", [normed, gamma], f"{stem}.mul"), beta],
                       f"{stem}.add")

    def reduce_mean(self, x: str, axes: list[int], stem: str, keepdims: int = 1) -> str:
        """ReduceMean with axes as an attribute (opset < 18) or as an input (opset >= 18)."""
        if self.opset >= 18:
            return self.op("ReduceMean", [x, self.int64(axes, f"{stem}.axes")], stem,
                           keepdims=keepdims)
        return self.op("ReduceMean", [x], stem, axes=axes, keepdims=keepdims)

    def gelu(self, x: str, stem: str, style: str, approximate: str = "none") -> str:
        """GELU: the Gelu op where the dynamo style's opset has it (20+), else the erf chain
        (``approximate="none"``) or the tanh chain (``"tanh"``, GPT-2's ``gelu_new``)."""
        if style == "dynamo" and self.opset >= 20:
            return self.op("Gelu", [x], stem, approximate=approximate)
        if approximate == "none":
            scaled = self.op("Div", [x, self.const(math.sqrt(2.0), f"{stem}.sqrt2")],
                             f"{stem}.div")
            erf = self.op("Erf", [scaled], f"{stem}.erf")
            one_plus = self.op("Add", [erf, self.const(1.0, f"{stem}.one")], f"{stem}.add")
            return self.op("Mul", [self.op("Mul", [x, one_plus], f"{stem}.mul"),
                                   self.const(0.5, f"{stem}.half")], f"{stem}.mul_half")
        if approximate != "tanh":
            raise ValueError(f"approximate={approximate!r} is not 'none' or 'tanh'")
        half_x = self.op("Mul", [x, self.const(0.5, f"{stem}.half")], f"{stem}.mul_half")
        cube = self.op("Pow", [x, self.const(3.0, f"{stem}.three")], f"{stem}.pow")
        inner = self.op("Add", [x, self.op("Mul", [cube, self.const(0.044715, f"{stem}.c")],
                                           f"{stem}.mul_c")], f"{stem}.add_x")
        tanh = self.op("Tanh", [self.op("Mul", [inner, self.const(math.sqrt(2.0 / math.pi),
                                                                  f"{stem}.k")],
                                        f"{stem}.mul_k")], f"{stem}.tanh")
        one_plus = self.op("Add", [tanh, self.const(1.0, f"{stem}.one")], f"{stem}.add_one")
        return self.op("Mul", [half_x, one_plus], f"{stem}.mul")

    def split_heads(self, x: str, batch: int, seq: int, heads: int, head_dim: int, stem: str,
                    perm=(0, 2, 1, 3)) -> str:
        """[b, s, h*d] -> Reshape [b, s, h, d] -> Transpose ``perm``."""
        shaped = self.op("Reshape", [x, self.int64([batch, seq, heads, head_dim],
                                                   f"{stem}.shape")], f"{stem}.reshape")
        return self.op("Transpose", [shaped], f"{stem}.transpose", perm=list(perm))

    def merge_heads(self, context: str, batch: int, seq: int, hidden: int, stem: str) -> str:
        """[b, h, s, d] -> Transpose [b, s, h, d] -> Reshape [b, s, h*d]."""
        moved = self.op("Transpose", [context], f"{stem}.transpose", perm=[0, 2, 1, 3])
        return self.op("Reshape", [moved, self.int64([batch, seq, hidden], f"{stem}.shape")],
                       f"{stem}.reshape")

    def attention_core(self, q: str, k_t: str, v: str, mask: str | None, head_dim: int,
                       stem: str, style: str, causal: str | None = None) -> str:
        """Scores, mask, softmax, context for q [b,h,s,d], k_t [b,h,d,s], v [b,h,s,d].

        TorchScript: MatMul -> Div(sqrt d) [-> Where(causal)] -> Add(mask) -> Softmax -> MatMul.
        Dynamo (SDPA decomposed): q and k_t each scaled by d**-0.25 -> MatMul -> Add(mask) ->
        Softmax -> IsNaN / Where(0) -> MatMul; a causal mask is already inside ``mask``.
        ``mask=None`` (a model that attends to every token, ViT) writes no Add.
        """
        if style == "torchscript":
            scores = self.op("Div", [self.op("MatMul", [q, k_t], f"{stem}.qk"),
                                     self.const(math.sqrt(head_dim), f"{stem}.sqrt_d")],
                             f"{stem}.scale")
            if causal is not None:
                lowest = self.const(np.finfo(self.np_dtype).min, f"{stem}.min")
                scores = self.op("Where", [causal, scores, lowest], f"{stem}.causal")
            probs = self.op("Softmax", [self._masked(scores, mask, stem)], f"{stem}.softmax",
                            axis=-1)
        else:
            root = self.const(head_dim ** -0.25, f"{stem}.root_scale")
            scores = self.op("MatMul", [self.op("Mul", [q, root], f"{stem}.q_scale"),
                                        self.op("Mul", [k_t, root], f"{stem}.k_scale")],
                             f"{stem}.qk")
            softmax = self.op("Softmax", [self._masked(scores, mask, stem)],
                              f"{stem}.softmax", axis=-1)
            is_nan = self.op("IsNaN", [softmax], f"{stem}.isnan")
            probs = self.op("Where", [is_nan, self.const(0.0, f"{stem}.zero"), softmax],
                            f"{stem}.where")
        return self.op("MatMul", [probs, v], f"{stem}.pv")

    def _masked(self, scores: str, mask: str | None, stem: str) -> str:
        return scores if mask is None else self.op("Add", [scores, mask], f"{stem}.mask")

    def heads_attention(self, q: str, k: str, v: str, mask: str | None, batch: int, seq: int,
                        hidden: int, heads: int, stem: str, style: str,
                        causal: str | None = None) -> str:
        """Projected q, k, v [b, s, h*d] -> heads split -> ``attention_core`` -> heads merged
        [b, s, h*d], ready for the output projection."""
        head_dim = hidden // heads
        q = self.split_heads(q, batch, seq, heads, head_dim, f"{stem}.q")
        k_t = self.split_heads(k, batch, seq, heads, head_dim, f"{stem}.k", perm=(0, 2, 3, 1))
        v = self.split_heads(v, batch, seq, heads, head_dim, f"{stem}.v")
        context = self.attention_core(q, k_t, v, mask, head_dim, stem, style, causal)
        return self.merge_heads(context, batch, seq, hidden, f"{stem}.merge")

    def self_attention(self, x: str, mask: str | None, batch: int, seq: int, hidden: int,
                       heads: int, stem: str, style: str) -> str:
        """HF's BERT / ViT self-attention with its output projection on x [b, s, hidden]:
        separate q / k / v projections (TorchScript), or one fused QKV projection and Split
        (dynamo); ``mask`` is the additive mask, or None to attend to every token."""
        if style == "dynamo":
            qkv = self.linear(x, hidden, 3 * hidden, f"{stem}.qkv")
            q, k, v = self.op("Split", [qkv, self.int64([hidden] * 3, f"{stem}.split_sizes")],
                              f"{stem}.split", outputs=3, axis=-1)
        else:
            q, k, v = (self.linear(x, hidden, hidden, f"{stem}.{name}") for name in "qkv")
        merged = self.heads_attention(q, k, v, mask, batch, seq, hidden, heads, stem, style)
        return self.linear(merged, hidden, hidden, f"{stem}.out")

    def mlp(self, x: str, hidden: int, inner: int, stem: str, style: str,
            names: tuple[str, str] = ("fc1", "fc2"), approximate: str = "none") -> str:
        """The transformer feed-forward block: Linear(hidden -> inner) -> GELU -> Linear(inner
        -> hidden), the projections named ``{stem}.{names[i]}`` and the GELU ``{stem}.gelu``."""
        up = self.gelu(self.linear(x, hidden, inner, f"{stem}.{names[0]}"), f"{stem}.gelu",
                       style, approximate=approximate)
        return self.linear(up, inner, hidden, f"{stem}.{names[1]}")

    def first_token(self, x: str, stem: str) -> str:
        """``x[:, 0]`` of [b, s, hidden] (BERT's pooler, ViT's class token) as both exporters
        write a select: Gather with a 0-d index on axis 1."""
        return self.op("Gather", [x, self.int64(0, f"{stem}.index")], f"{stem}.first", axis=1)

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, stride: int, stem: str,
             pad: int = 0, bias: bool = False, gain: float = 1.0) -> str:
        """``nn.Conv2d`` (square kernel, stride and padding; bias optional), weights
        [c_out, c_in, k, k] of std ``gain / sqrt(c_in * k * k)``."""
        weight = self.weight((c_out, c_in, kernel, kernel), c_in * kernel * kernel,
                             f"{stem}.weight", gain=gain)
        inputs = [x, weight]
        if bias:
            inputs.append(self.uniform((c_out,), -0.1, 0.1, f"{stem}.bias"))
        return self.op("Conv", inputs, f"{stem}.conv", kernel_shape=[kernel, kernel],
                       strides=[stride, stride], pads=[pad] * 4, dilations=[1, 1], group=1)


def padding_mask(batch: int, seq: int) -> np.ndarray:
    """An int64 attention mask [batch, seq]: row i has its last ``i * seq // (2 * batch)``
    tokens padded, so batched configurations exercise the mask and row 0 is unpadded."""
    mask = np.ones((batch, seq), np.int64)
    for row in range(batch):
        padded = row * seq // (2 * batch)
        if padded:
            mask[row, seq - padded:] = 0
    return mask


def extended_mask(g: OnnxGraph, mask: str, stem: str = "mask") -> str:
    """HF's extended attention mask: (1 - mask[:, None, None, :]) * finfo(dtype).min."""
    unsqueezed = (g.op("Unsqueeze", [mask, g.int64([1, 2], f"{stem}.axes")], f"{stem}.unsqueeze")
                  if g.opset >= 13 else
                  g.op("Unsqueeze", [mask], f"{stem}.unsqueeze", axes=[1, 2]))
    as_float = g.op("Cast", [unsqueezed], f"{stem}.cast", to=DTYPES[g.dtype])
    inverted = g.op("Sub", [g.const(1.0, f"{stem}.one"), as_float], f"{stem}.invert")
    return g.op("Mul", [inverted, g.const(np.finfo(g.np_dtype).min, f"{stem}.min")],
                f"{stem}.scale")


def token_ids(rng: np.random.Generator, batch: int, seq: int, vocab: int) -> np.ndarray:
    """Random int64 token ids in ``[0, vocab)``."""
    return rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)



def image_inputs(name: str, model: str):
    """The feeds builder of an image model (``model``) whose one input is ``name``: a random
    unit-normal batch [batch, 3, image, image], the scale of normalised pixels."""
    def example_inputs(batch: int = 1, image: int = 224, dtype: str = "float32", seed: int = 0,
                       **_knobs) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {name: rng.standard_normal((batch, 3, image, image)).astype(dtype)}

    example_inputs.__doc__ = f"Feeds for ``{model}``: a normalised random image batch."
    return example_inputs
