"""GPT-2 small and medium (HF ``GPT2LMHeadModel``) as PyTorch's exporters write them.

Pre-LN decoder blocks with one fused QKV projection (``c_attn``) and Split, as GPT-2 itself
computes it. ``style="torchscript"``: LayerNorm and GELU (tanh, ``gelu_new``) as op chains,
MatMul + Add projections, the causal mask as Where(bias, scores, min) before Add(mask).
``style="dynamo"``: LayerNormalization, SDPA with the causal and padding masks combined once
into a [b, 1, s, s] additive mask, Softmax + IsNaN / Where, Gelu(tanh) op from opset 20.

    python -m benchmarks.models.gpt2 out.onnx [small|medium] [torchscript|dynamo]

Example
-------
>>> m = gpt2_model(style="dynamo", batch=1, seq=8, hidden=32, heads=2, layers=1, vocab=50)
>>> [o.name for o in m.graph.output]
['logits']
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto

from .common import (OnnxGraph, check_style, extended_mask, padding_mask, token_ids)

SIZES = {"small": {"hidden": 768, "heads": 12, "layers": 12},
         "medium": {"hidden": 1024, "heads": 16, "layers": 24}}


def _causal(g: OnnxGraph, seq: int, stem: str) -> str:
    """HF's ``bias`` buffer sliced to [1, 1, seq, seq]: True where a key may be attended."""
    return g.const(np.tril(np.ones((seq, seq), bool))[None, None], stem, dtype=bool)


def _decoder_layer(g: OnnxGraph, x: str, mask: str, causal: str | None, batch: int, seq: int,
                   hidden: int, heads: int, style: str, stem: str) -> str:
    """One pre-LN GPT-2 block on x [batch, seq, hidden]."""
    h = g.layer_norm(x, hidden, f"{stem}.ln_1", style)
    qkv = g.linear(h, hidden, 3 * hidden, f"{stem}.attn.c_attn")
    q, k, v = g.op("Split", [qkv, g.int64([hidden] * 3, f"{stem}.attn.split_sizes")],
                   f"{stem}.attn.split", outputs=3, axis=2)
    merged = g.heads_attention(q, k, v, mask, batch, seq, hidden, heads, f"{stem}.attn", style,
                               causal)
    attn = g.linear(merged, hidden, hidden, f"{stem}.attn.c_proj")
    x = g.op("Add", [attn, x], f"{stem}.attn.residual")
    h = g.layer_norm(x, hidden, f"{stem}.ln_2", style)
    down = g.mlp(h, hidden, 4 * hidden, f"{stem}.mlp", style, names=("c_fc", "c_proj"),
                 approximate="tanh")
    return g.op("Add", [down, x], f"{stem}.mlp.residual")


def _sdpa_mask(g: OnnxGraph, padding: str, seq: int) -> str:
    """The dynamo export's [b, 1, s, s] additive mask: causal and padding combined once."""
    lowest = g.const(np.finfo(g.np_dtype).min, "mask.causal_min")
    return g.op("Where", [_causal(g, seq, "mask.causal"), padding, lowest], "mask.combine")


def gpt2_model(style: str = "torchscript", size: str | None = None, batch: int = 1,
               seq: int = 512, hidden: int = 768, heads: int = 12, layers: int = 12,
               vocab: int = 50257, max_positions: int = 1024, dtype: str = "float32",
               seed: int = 0, opset: int | None = None, lm_head: bool = True
               ) -> onnx.ModelProto:
    """GPT-2 (``size="small"`` or ``"medium"`` sets hidden/heads/layers): inputs ``input_ids``
    and ``attention_mask`` (int64 [batch, seq]); output ``logits`` [batch, seq, vocab] through
    the tied LM head (``last_hidden_state`` [batch, seq, hidden] without ``lm_head``).

    Example
    -------
    >>> m = gpt2_model(batch=1, seq=8, hidden=32, heads=2, layers=1, vocab=50, lm_head=False)
    >>> [o.name for o in m.graph.output]
    ['last_hidden_state']
    """
    opset = check_style(style, opset)
    if size is not None:
        if size not in SIZES:
            raise ValueError(f"gpt2: size={size!r} is not one of {', '.join(SIZES)}")
        hidden, heads, layers = (SIZES[size][k] for k in ("hidden", "heads", "layers"))
    if hidden % heads or seq > max_positions:
        raise ValueError(f"gpt2: hidden={hidden} must divide by heads={heads} and "
                         f"seq={seq} be at most max_positions={max_positions}")
    g = OnnxGraph(f"gpt2_{size or 'custom'}", dtype, seed, opset)
    ids = g.input("input_ids", [batch, seq], TensorProto.INT64)
    padding = extended_mask(g, g.input("attention_mask", [batch, seq], TensorProto.INT64))
    wte = g.weight((vocab, hidden), 1, "wte")
    x = g.op("Add", [g.op("Gather", [wte, ids], "wte_gather"),
                     g.op("Gather", [g.weight((max_positions, hidden), 1, "wpe"),
                                     g.int64(np.arange(seq)[None, :], "position_ids")],
                          "wpe_gather")], "embeddings.add")
    if style == "dynamo":
        mask, causal = _sdpa_mask(g, padding, seq), None
    else:
        mask, causal = padding, _causal(g, seq, "causal_bias")
    for index in range(layers):
        x = _decoder_layer(g, x, mask, causal, batch, seq, hidden, heads, style, f"h.{index}")
    x = g.layer_norm(x, hidden, "ln_f", style)
    if lm_head:
        wte_t = g.op("Transpose", [wte], "lm_head.transpose", perm=[1, 0])
        g.output(g.op("MatMul", [x, wte_t], "lm_head"), [batch, seq, vocab], name="logits")
    else:
        g.output(x, [batch, seq, hidden], name="last_hidden_state")
    return g.model()


def example_inputs(batch: int = 1, seq: int = 512, vocab: int = 50257, seed: int = 0,
                   **_knobs) -> dict[str, np.ndarray]:
    """Feeds for ``gpt2_model``: random token ids and a padding mask."""
    rng = np.random.default_rng(seed)
    return {"input_ids": token_ids(rng, batch, seq, vocab),
            "attention_mask": padding_mask(batch, seq)}


def decoder_layer_model(style: str = "torchscript", batch: int = 1, seq: int = 512,
                        hidden: int = 768, heads: int = 12, dtype: str = "float32",
                        seed: int = 0, opset: int | None = None) -> onnx.ModelProto:
    """One GPT-2 block alone: inputs ``x`` [batch, seq, hidden] and ``mask``, the additive mask
    as the full model feeds it to every block ([b, 1, 1, s] padding for TorchScript, whose block
    applies the causal Where itself; [b, 1, s, s] causal + padding for dynamo); output ``y``.

    Example
    -------
    >>> m = decoder_layer_model(style="torchscript", batch=1, seq=8, hidden=32, heads=2)
    >>> "Where" in {n.op_type for n in m.graph.node}
    True
    """
    opset = check_style(style, opset)
    g = OnnxGraph("gpt2_block", dtype, seed, opset)
    x = g.input("x", [batch, seq, hidden])
    mask_shape = [batch, 1, seq, seq] if style == "dynamo" else [batch, 1, 1, seq]
    mask = g.input("mask", mask_shape)
    causal = None if style == "dynamo" else _causal(g, seq, "causal_bias")
    y = _decoder_layer(g, x, mask, causal, batch, seq, hidden, heads, style, "h")
    g.output(y, [batch, seq, hidden], name="y")
    return g.model()


def decoder_layer_inputs(style: str = "torchscript", batch: int = 1, seq: int = 512,
                         hidden: int = 768, dtype: str = "float32", seed: int = 0,
                         **_knobs) -> dict[str, np.ndarray]:
    """Feeds for ``decoder_layer_model``: unit-scale x and the mask in the style's form."""
    rng = np.random.default_rng(seed)
    lowest = np.finfo(np.dtype(dtype)).min
    keep = padding_mask(batch, seq)[:, None, None, :] == 1
    if style == "dynamo":
        keep = keep & np.tril(np.ones((seq, seq), bool))[None, None]
    return {"x": rng.standard_normal((batch, seq, hidden)).astype(dtype),
            "mask": np.where(keep, 0.0, lowest).astype(dtype)}


if __name__ == "__main__":
    onnx.save(gpt2_model(size=sys.argv[2] if len(sys.argv) > 2 else "small",
                         style=sys.argv[3] if len(sys.argv) > 3 else "torchscript"),
              sys.argv[1] if len(sys.argv) > 1 else "gpt2.onnx")
