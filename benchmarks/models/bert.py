"""BERT-base (HF ``BertModel``) as PyTorch's exporters write it, random weights.

``style="torchscript"``: LayerNorm and GELU (erf) as op chains, separate q/k/v MatMul + Add,
attention as MatMul / Div / Add(mask) / Softmax / MatMul. ``style="dynamo"``: LayerNormalization,
one fused QKV projection + Split, SDPA's Softmax + IsNaN / Where, Gelu op from opset 20.

    python -m benchmarks.models.bert out.onnx [torchscript|dynamo]

Example
-------
>>> model = bert_model(style="dynamo", batch=1, seq=8, hidden=32, heads=2, layers=1, vocab=50)
>>> feeds = example_inputs(batch=1, seq=8, vocab=50)
>>> sorted(feeds)
['attention_mask', 'input_ids']
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto

from .common import (OnnxGraph, check_style, extended_mask, padding_mask, token_ids)


def _encoder_layer(g: OnnxGraph, x: str, mask: str, batch: int, seq: int, hidden: int,
                   heads: int, ffn: int, style: str, stem: str) -> str:
    """One post-LN encoder layer on x [batch, seq, hidden] with an additive mask [b,1,1,s]."""
    attn = g.self_attention(x, mask, batch, seq, hidden, heads, f"{stem}.attn", style)
    h = g.layer_norm(g.op("Add", [attn, x], f"{stem}.attn.residual"), hidden,
                     f"{stem}.ln1", style, eps=1e-12)
    down = g.mlp(h, hidden, ffn, f"{stem}.ffn", style, names=("up", "down"))
    return g.layer_norm(g.op("Add", [down, h], f"{stem}.ffn.residual"), hidden,
                        f"{stem}.ln2", style, eps=1e-12)


def bert_model(style: str = "torchscript", batch: int = 1, seq: int = 128, hidden: int = 768,
               heads: int = 12, layers: int = 12, ffn: int | None = None, vocab: int = 30522,
               max_positions: int = 512, dtype: str = "float32", seed: int = 0,
               opset: int | None = None, pooler: bool = True) -> onnx.ModelProto:
    """BERT (BERT-base with the defaults): inputs ``input_ids`` and ``attention_mask`` (int64
    [batch, seq]); outputs ``last_hidden_state`` and, with ``pooler``, ``pooler_output``.

    Example
    -------
    >>> m = bert_model(batch=1, seq=8, hidden=32, heads=2, layers=1, vocab=50)
    >>> [o.name for o in m.graph.output]
    ['last_hidden_state', 'pooler_output']
    """
    opset = check_style(style, opset)
    if hidden % heads or seq > max_positions:
        raise ValueError(f"bert: hidden={hidden} must divide by heads={heads} and "
                         f"seq={seq} be at most max_positions={max_positions}")
    ffn = 4 * hidden if ffn is None else ffn
    g = OnnxGraph("bert", dtype, seed, opset)
    ids = g.input("input_ids", [batch, seq], TensorProto.INT64)
    mask = g.input("attention_mask", [batch, seq], TensorProto.INT64)
    words = g.op("Gather", [g.weight((vocab, hidden), 1, "embeddings.word"), ids],
                 "embeddings.word_gather")
    positions = g.op("Gather", [g.weight((max_positions, hidden), 1, "embeddings.position"),
                                g.int64(np.arange(seq)[None, :], "embeddings.position_ids")],
                     "embeddings.position_gather")
    token_types = g.op("Gather", [g.weight((2, hidden), 1, "embeddings.token_type"),
                                  g.int64(np.zeros((1, seq)), "embeddings.token_type_ids")],
                       "embeddings.token_type_gather")
    summed = g.op("Add", [g.op("Add", [words, token_types], "embeddings.add_type"), positions],
                  "embeddings.add_position")
    x = g.layer_norm(summed, hidden, "embeddings.ln", style, eps=1e-12)
    additive = extended_mask(g, mask)
    for index in range(layers):
        x = _encoder_layer(g, x, additive, batch, seq, hidden, heads, ffn, style,
                           f"encoder.{index}")
    g.output(x, [batch, seq, hidden], name="last_hidden_state")
    if pooler:
        dense = g.linear(g.first_token(x, "pooler"), hidden, hidden, "pooler.dense", gemm=True)
        g.output(g.op("Tanh", [dense], "pooler.tanh"), [batch, hidden], name="pooler_output")
    return g.model()


def example_inputs(batch: int = 1, seq: int = 128, vocab: int = 30522, seed: int = 0,
                   **_knobs) -> dict[str, np.ndarray]:
    """Feeds for ``bert_model``: random token ids and a padding mask."""
    rng = np.random.default_rng(seed)
    return {"input_ids": token_ids(rng, batch, seq, vocab),
            "attention_mask": padding_mask(batch, seq)}


def encoder_layer_model(style: str = "torchscript", batch: int = 1, seq: int = 128,
                        hidden: int = 768, heads: int = 12, ffn: int | None = None,
                        dtype: str = "float32", seed: int = 0,
                        opset: int | None = None) -> onnx.ModelProto:
    """One BERT encoder layer alone: inputs ``x`` [batch, seq, hidden] and the additive mask
    ``mask`` [batch, 1, 1, seq] (as the full model computes it once); output ``y``.

    Example
    -------
    >>> m = encoder_layer_model(style="dynamo", batch=1, seq=8, hidden=32, heads=2)
    >>> "Split" in {n.op_type for n in m.graph.node}
    True
    """
    opset = check_style(style, opset)
    ffn = 4 * hidden if ffn is None else ffn
    g = OnnxGraph("bert_encoder_layer", dtype, seed, opset)
    x = g.input("x", [batch, seq, hidden])
    mask = g.input("mask", [batch, 1, 1, seq])
    y = _encoder_layer(g, x, mask, batch, seq, hidden, heads, ffn, style, "layer")
    g.output(y, [batch, seq, hidden], name="y")
    return g.model()


def encoder_layer_inputs(batch: int = 1, seq: int = 128, hidden: int = 768,
                         dtype: str = "float32", seed: int = 0,
                         **_knobs) -> dict[str, np.ndarray]:
    """Feeds for ``encoder_layer_model``: unit-scale x and a padding mask in additive form."""
    rng = np.random.default_rng(seed)
    keep = padding_mask(batch, seq)[:, None, None, :]
    lowest = np.finfo(np.dtype(dtype)).min
    return {"x": rng.standard_normal((batch, seq, hidden)).astype(dtype),
            "mask": np.where(keep == 1, 0.0, lowest).astype(dtype)}


if __name__ == "__main__":
    onnx.save(bert_model(style=sys.argv[2] if len(sys.argv) > 2 else "torchscript"),
              sys.argv[1] if len(sys.argv) > 1 else "bert_base.onnx")
