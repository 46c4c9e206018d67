"""ViT-base/16 at 224 (timm ``vit_base_patch16_224``, HF ``google/vit-base-patch16-224``) as
PyTorch's exporters write it, random weights.

A Conv of kernel and stride ``patch`` cuts the image into patches, Reshape + Transpose makes them
tokens, a learned class token (Expand to the batch) is concatenated in front and a learned
position embedding added; then pre-LN encoder layers (LayerNorm eps 1e-6 -> self-attention over
every token, no mask -> residual; LayerNorm -> MLP with GELU (erf) -> residual), a final
LayerNorm, and the classifier (Gemm) on the class token. ``style="torchscript"``: LayerNorm and
GELU as op chains, separate q/k/v MatMul + Add, attention as MatMul / Div(sqrt d) / Softmax /
MatMul. ``style="dynamo"``: LayerNormalization, one fused QKV projection + Split, SDPA's Softmax
+ IsNaN / Where, the Gelu op from opset 20.

    python -m benchmarks.models.vit out.onnx [torchscript|dynamo]

Example
-------
>>> m = vit_model(batch=1, image=32, patch=8, hidden=32, heads=2, layers=1, classes=10)
>>> [o.name for o in m.graph.output]
['logits']
"""
from __future__ import annotations

import sys

import onnx

from .common import OnnxGraph, check_style, image_inputs

LN_EPS = 1e-6  # timm's ViT LayerNorm (HF's port of the same weights says 1e-12)


def _encoder_layer(g: OnnxGraph, x: str, batch: int, tokens: int, hidden: int, heads: int,
                   mlp: int, style: str, stem: str) -> str:
    """One pre-LN ViT block on x [batch, tokens, hidden]."""
    h = g.layer_norm(x, hidden, f"{stem}.norm1", style, eps=LN_EPS)
    attn = g.self_attention(h, None, batch, tokens, hidden, heads, f"{stem}.attn", style)
    x = g.op("Add", [attn, x], f"{stem}.attn.residual")
    h = g.layer_norm(x, hidden, f"{stem}.norm2", style, eps=LN_EPS)
    return g.op("Add", [g.mlp(h, hidden, mlp, f"{stem}.mlp", style), x],
                f"{stem}.mlp.residual")


def vit_model(style: str = "torchscript", batch: int = 1, image: int = 224, patch: int = 16,
              hidden: int = 768, heads: int = 12, layers: int = 12, mlp: int | None = None,
              classes: int = 1000, dtype: str = "float32", seed: int = 0,
              opset: int | None = None) -> onnx.ModelProto:
    """ViT (ViT-base/16 with the defaults): input ``pixel_values`` [batch, 3, image, image],
    output ``logits`` [batch, classes]; ``mlp`` defaults to ``4 * hidden``.

    Example
    -------
    >>> m = vit_model(style="dynamo", batch=1, image=32, patch=8, hidden=32, heads=2, layers=1)
    >>> [n.op_type for n in m.graph.node][:4]
    ['Conv', 'Reshape', 'Transpose', 'Expand']
    """
    opset = check_style(style, opset)
    if image % patch or hidden % heads:
        raise ValueError(f"vit: image={image} must divide by patch={patch} and "
                         f"hidden={hidden} by heads={heads}")
    mlp = 4 * hidden if mlp is None else mlp
    patches = (image // patch) ** 2
    tokens = patches + 1  # the class token in front
    g = OnnxGraph("vit", dtype, seed, opset)
    pixels = g.input("pixel_values", [batch, 3, image, image])
    embedded = g.conv(pixels, 3, hidden, patch, patch, "patch_embed.proj", bias=True)
    # flatten(2).transpose(1, 2): [b, hidden, h, w] -> [b, h*w, hidden]
    flat = g.op("Reshape", [embedded, g.int64([batch, hidden, patches], "patch_embed.shape")],
                "patch_embed.flatten")
    x = g.op("Transpose", [flat], "patch_embed.transpose", perm=[0, 2, 1])
    cls = g.op("Expand", [g.weight((1, 1, hidden), 1, "cls_token"),
                          g.int64([batch, 1, hidden], "cls_token.shape")], "cls_token.expand")
    x = g.op("Concat", [cls, x], "cls_token.concat", axis=1)
    x = g.op("Add", [x, g.weight((1, tokens, hidden), 1, "pos_embed")], "pos_embed.add")
    for index in range(layers):
        x = _encoder_layer(g, x, batch, tokens, hidden, heads, mlp, style, f"blocks.{index}")
    x = g.layer_norm(x, hidden, "norm", style, eps=LN_EPS)
    logits = g.linear(g.first_token(x, "head"), hidden, classes, "head", gemm=True)
    g.output(logits, [batch, classes], name="logits")
    return g.model()


example_inputs = image_inputs("pixel_values", "vit_model")


if __name__ == "__main__":
    onnx.save(vit_model(style=sys.argv[2] if len(sys.argv) > 2 else "torchscript"),
              sys.argv[1] if len(sys.argv) > 1 else "vit_base.onnx")
