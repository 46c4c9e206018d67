"""ResNet-50 (torchvision, v1.5: stride on the 3x3 conv) as PyTorch's exporters write it.

Conv (no bias) / BatchNormalization / Relu / Add / MaxPool / GlobalAveragePool / Flatten / Gemm,
BatchNormalization kept as a node (exported with ``training=TrainingMode.PRESERVE`` or without
constant folding, so the compiler sees it). ``style="dynamo"`` writes opset 18 and flattens with
Reshape (``aten.view``), as the dynamo exporter does.

    python -m benchmarks.models.resnet50 out.onnx [torchscript|dynamo]

Example
-------
>>> m = resnet50_model(batch=1, image=32, width=8, blocks=(1, 1, 1, 1), classes=10)
>>> [o.name for o in m.graph.output]
['logits']
"""
from __future__ import annotations

import sys

import numpy as np
import onnx

from .common import OnnxGraph, check_style, image_inputs

RESNET50_BLOCKS = (3, 4, 6, 3)


def _conv_bn(g: OnnxGraph, x: str, c_in: int, c_out: int, kernel: int, stride: int, stem: str,
             relu: bool = True, gamma: tuple[float, float] = (0.8, 1.2)) -> str:
    """Conv(kernel, stride, same padding, no bias) -> BatchNormalization [-> Relu].

    Weights keep activations near unit scale (He gain for the ReLU that follows); ``gamma``
    sets the BatchNorm scale, small on a block's last BN so the residual sum stays bounded.
    """
    conv = g.conv(x, c_in, c_out, kernel, stride, stem, pad=kernel // 2, gain=np.sqrt(2))
    bn = g.op("BatchNormalization",
              [conv, g.uniform((c_out,), *gamma, f"{stem}.bn.weight"),
               g.uniform((c_out,), -0.1, 0.1, f"{stem}.bn.bias"),
               g.uniform((c_out,), -0.1, 0.1, f"{stem}.bn.running_mean"),
               g.uniform((c_out,), 0.9, 1.1, f"{stem}.bn.running_var")],
              f"{stem}.bn", epsilon=1e-5, momentum=0.9)
    return g.op("Relu", [bn], f"{stem}.relu") if relu else bn


def _bottleneck(g: OnnxGraph, x: str, c_in: int, width: int, stride: int, stem: str) -> str:
    """1x1 -> 3x3 (stride) -> 1x1 (x4), identity or 1x1-conv downsample, Add, Relu."""
    c_out = 4 * width
    h = _conv_bn(g, x, c_in, width, 1, 1, f"{stem}.conv1")
    h = _conv_bn(g, h, width, width, 3, stride, f"{stem}.conv2")
    h = _conv_bn(g, h, width, c_out, 1, 1, f"{stem}.conv3", relu=False, gamma=(0.2, 0.4))
    if stride != 1 or c_in != c_out:
        x = _conv_bn(g, x, c_in, c_out, 1, stride, f"{stem}.downsample", relu=False)
    return g.op("Relu", [g.op("Add", [h, x], f"{stem}.add")], f"{stem}.relu")


def resnet50_model(style: str = "torchscript", batch: int = 1, image: int = 224,
                   width: int = 64, blocks: tuple[int, ...] = RESNET50_BLOCKS,
                   classes: int = 1000, dtype: str = "float32", seed: int = 0,
                   opset: int | None = None) -> onnx.ModelProto:
    """ResNet-50 with the defaults: input ``input`` [batch, 3, image, image], output ``logits``
    [batch, classes]. ``width`` (64) and ``blocks`` ((3, 4, 6, 3)) shrink it for tests.

    Example
    -------
    >>> m = resnet50_model(style="dynamo", batch=1, image=32, width=8, blocks=(1, 1, 1, 1))
    >>> sorted({n.op_type for n in m.graph.node})[:3]
    ['Add', 'BatchNormalization', 'Conv']
    """
    opset = check_style(style, opset)
    if image % 32:
        raise ValueError(f"resnet50: image={image} must be a multiple of 32 (five halvings)")
    g = OnnxGraph("resnet50", dtype, seed, opset)
    x = g.input("input", [batch, 3, image, image])
    x = _conv_bn(g, x, 3, width, 7, 2, "conv1")
    x = g.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = width
    for stage, count in enumerate(blocks):
        stage_width = width * 2 ** stage
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            x = _bottleneck(g, x, c_in, stage_width, stride, f"layer{stage + 1}.{index}")
            c_in = 4 * stage_width
    pooled = g.op("GlobalAveragePool", [x], "avgpool")
    if style == "dynamo":
        flat = g.op("Reshape", [pooled, g.int64([batch, c_in], "flatten.shape")], "flatten")
    else:
        flat = g.op("Flatten", [pooled], "flatten", axis=1)
    g.output(g.linear(flat, c_in, classes, "fc", gemm=True), [batch, classes], name="logits")
    return g.model()


example_inputs = image_inputs("input", "resnet50_model")


if __name__ == "__main__":
    onnx.save(resnet50_model(style=sys.argv[2] if len(sys.argv) > 2 else "torchscript"),
              sys.argv[1] if len(sys.argv) > 1 else "resnet50.onnx")
