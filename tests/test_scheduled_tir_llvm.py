"""Every template's scheduled TIR is itself checkable: the PrimFunc a template hands the printer,
compiled by TVM for llvm, computes what the group's unscheduled PrimFunc computes. A tiling bug
then shows here, a printing bug only in the emulator.

The models hold a group of each template (conv2d, matmul, matmul_rows, attention, pool2d,
data movement, axis and row reductions; elementwise has its own in test_schedules.py); each is
scheduled for both SoC profiles.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import tvm_ascend
from tvm_ascend import ir_attrs
from tvm_ascend.kernel_record import record_of
from tvm_ascend.schedules import template_by_name
from tvm_ascend.soc import get_soc
from onnx_models import ModelBuilder, attention_model

SOCS = ("Ascend910B1", "Ascend310P3")


def _cnn(b: ModelBuilder) -> None:
    """Conv + folded BatchNorm + residual + ReLU, a depthwise conv, MaxPool, AveragePool."""
    x = b.input("x", (2, 8, 9, 11))
    w = b.const(b.rng.standard_normal((8, 8, 3, 3)) * 0.2, "w")
    stats = [b.const(b.rng.uniform(0.5, 1.5, 8), "g"), b.const(b.rng.standard_normal(8), "b"),
             b.const(b.rng.standard_normal(8) * 0.1, "m"), b.const(b.rng.uniform(0.5, 1.5, 8),
                                                                  "v")]
    y = b.node("BatchNormalization", [b.node("Conv", [x, w], pads=[1, 1, 1, 1]), *stats])
    y = b.node("Relu", [b.node("Add", [y, x])])
    d = b.node("Conv", [y, b.const(b.rng.standard_normal((8, 1, 3, 3)), "dw")], group=8,
               strides=[2, 2], pads=[1, 1, 1, 1])
    b.output(b.node("MaxPool", [d], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             (2, 8, 3, 3))
    b.output(b.node("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2]), (2, 8, 4, 5))


def _transformer(b: ModelBuilder) -> None:
    """MatMul + bias + GELU, MatMul + residual + LayerNorm, a Transpose and a Concat, a sum over
    the first axis, Softmax."""
    x = b.input("x", (2, 17, 48))
    w1 = b.const(b.rng.standard_normal((48, 40)) * 0.1, "w1")
    h = b.node("Add", [b.node("MatMul", [x, w1]), b.const(b.rng.standard_normal(40), "b1")])
    h = b.node("Mul", [h, b.node("Sigmoid", [b.node("Mul", [h, b.const(np.array(1.702),
                                                                        "k")])])])
    w2 = b.const(b.rng.standard_normal((40, 48)) * 0.1, "w2")
    r = b.node("Add", [b.node("MatMul", [h, w2]), x])
    b.output(b.node("LayerNormalization", [r, b.const(np.ones(48), "gamma"),
                                           b.const(np.zeros(48), "beta")], axis=-1), (2, 17, 48))
    t = b.node("Transpose", [x], perm=[0, 2, 1])
    b.output(b.node("Concat", [t, t], axis=2), (2, 48, 34))
    b.output(b.node("ReduceSum", [x, b.int_const([0])], keepdims=0), (17, 48))
    b.output(b.node("Softmax", [b.node("Exp", [x])], axis=-1), (2, 17, 48))


def _groups(model):
    # the aggressive level: attention's chain is one group there
    result = tvm_ascend.partition_for_ascend(
        model, tvm_ascend.CompileConfig(fusion_level="aggressive"))
    return [(record_of(f).template, f.attrs[ir_attrs.PRIM_FUNC])
            for f in result.mod.functions.values()
            if f.attrs and f.attrs.get("Codegen") == "ascend"]


def _run_llvm(func, args):
    lib = tvm.compile(func.with_attr("global_symbol", "main"), target="llvm")
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def _args(func, seed):
    rng = np.random.default_rng(seed)
    args = []
    for param in func.params:
        shape, dtype = [int(d) for d in param.shape], str(param.dtype)
        args.append(rng.uniform(-1, 1, shape).astype(dtype) if dtype.startswith("float")
                    else np.zeros(shape, dtype))
    args[-1] = np.zeros_like(args[-1])
    return args


def _models():
    cnn = ModelBuilder("float32", seed=21)
    _cnn(cnn)
    transformer = ModelBuilder("float32", seed=22)
    _transformer(transformer)
    return {"cnn": cnn.model(), "transformer": transformer.model(),
            "attention": attention_model(batch=1, seq=24, heads=2, dim=32).model()}


MODELS = _models()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_scheduled_tir_on_llvm_equals_the_groups_own(name):
    groups = _groups(MODELS[name])
    assert groups
    checked = set()
    for index, (template_name, func) in enumerate(groups):
        template = template_by_name(template_name)
        args = _args(func, index)
        want = _run_llvm(func, [a.copy() for a in args])
        for soc in SOCS:
            scheduled, _ = template.schedule(func, get_soc(soc))
            got = _run_llvm(scheduled, [a.copy() for a in args])
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{template_name} on {soc}")
        checked.add(template_name)
    expected = {"cnn": {"conv2d", "pool2d"},
                "transformer": {"matmul", "matmul_rows", "data_movement", "axis_reduce",
                                "row_reduce"},
                "attention": {"attention"}}[name]
    assert expected <= checked, checked
