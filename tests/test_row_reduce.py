"""Row reductions (softmax, normalisations, last-axis reduces): kernels vs onnxruntime and llvm."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from onnx import TensorProto, helper

from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder, layernorm_chain

# rows x cols: odd widths (tails not 32-byte multiples), one row, many rows over 48 cores,
# rows wide enough that only a few fit one UB tile
SHAPES = [(4, 6, 10), (1, 37), (300, 65), (3, 1000), (2, 7, 4096)]


def _compare(builder, expect_npu_only=True, config=None):
    model = builder.model()
    lib = tvm_ascend.build(model, config=config)
    outs = lib.run(builder.feeds)
    for out, ref in zip(outs, run_onnxruntime(model, builder.feeds)):
        assert_close(out, ref, builder.dtype)
    report = lib.fusion_report()
    if expect_npu_only:
        assert report["host_groups"] == 0, [g["reason"] for g in report["groups"]]
    by_kernel = {p["kernel"]: p for p in lib.profile()}
    for group in report["groups"]:
        if group["on_npu"]:
            launch = by_kernel[group["kernel"]]
            assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
            assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"]
            assert launch["peak_ub_bytes"] == group["tiling"]["ub_bytes"]
            assert launch["warnings"] == []
    return lib, report


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_and_layernorm_chain(shape):
    b = ModelBuilder("float32", seed=20)
    x = b.input("x", shape)
    b.feeds["x"] = b.rng.standard_normal(shape).astype(np.float32) * 3
    scaled = b.node("Mul", [x, b.const(np.array(0.125), "scale")])
    b.output(b.node("Softmax", [scaled], axis=-1), shape)
    y = b.input("y", shape)
    b.output(layernorm_chain(b, y, shape[-1]), shape)
    _, report = _compare(b)
    # FuseOps alone gives 2 groups for the scaled softmax and 3 for the LayerNorm chain; the
    # merge rule makes each one row_reduce kernel, keeping the intermediates on chip.
    assert report["npu_kernels"] == 2
    for group in report["groups"]:
        assert group["tiling"]["template"] == "row_reduce"
        assert "ascend.merge" in group["formed_by"] and group["gm_bytes_saved"] > 0
    assert sorted(g["rule"] for g in report["groups"]) == ["LayerNormFusion", "SoftmaxFusion"]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_reduce_ops_keepdims_and_not(dtype):
    b = ModelBuilder(dtype, seed=21)
    shape = (5, 9, 33)
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"):
        for keep in (0, 1):
            x = b.input(f"x_{op}_{keep}", shape)
            out_shape = shape[:-1] + ((1,) if keep else ())
            if op == "ReduceSum":  # opset 13+: axes is an input
                node = b.node(op, [x, b.int_const([-1])], keepdims=keep)
            else:
                node = b.node(op, [x], axes=[-1], keepdims=keep)
            b.output(node, out_shape)
    _compare(b)


def test_fp16_softmax_and_rmsnorm():
    b = ModelBuilder("float16", seed=22)
    x = b.input("x", (16, 200))
    b.output(b.node("Softmax", [x], axis=-1), (16, 200))
    y = b.input("y", (16, 200))
    b.output(layernorm_chain(b, y, 200, rms=True), (16, 200))
    _compare(b)


def test_layer_normalization_op_and_log_softmax():
    b = ModelBuilder("float32", seed=23)
    x = b.input("x", (6, 130))
    gamma = b.const(b.rng.uniform(0.5, 1.5, 130), "gamma")
    beta = b.const(b.rng.standard_normal(130), "beta")
    b.output(b.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5), (6, 130))
    y = b.input("y", (6, 130))
    b.output(b.node("LogSoftmax", [y], axis=-1), (6, 130))
    _compare(b)


def test_rows_longer_than_the_ub_run_in_passes_and_other_axes_become_rows():
    b = ModelBuilder("float32", seed=24)
    x = b.input("x", (2, 70000))
    b.output(b.node("Softmax", [x], axis=-1), (2, 70000))
    # axes that are neither the last nor one run of adjacent axes (the axis-reduce kernel's):
    # the prepare stage moves them last (tvm_ascend/prepare/reductions.py)
    y = b.input("y", (4, 6, 5))
    b.output(b.node("ReduceSum", [y, b.int_const([0, 2])], keepdims=0), (6,))
    _, report = _compare(b, expect_npu_only=False)
    # rows longer than the UB: a multi-pass kernel (tests/test_row_reduce_long.py)
    (softmax,) = [g for g in report["groups"] if g["on_npu"]
                  and g["tiling"]["template"] == "row_reduce" and g["tiling"]["plan"]["chunked"]
                  and g["tiling"]["plan"]["chunked"]["passes"]["count"] == 3]
    assert softmax["tiling"]["cols"] == 70000
    assert report["host_groups"] == 0
    (record,) = report["prepare_rewrites"]
    assert record["rewrite"] == "ReductionAxesToRows" and record["applied"]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_attention_scores_scale_mask_softmax_is_one_kernel(dtype):
    """scores [b, h, s, s] * scale + mask [b, 1, 1, s] -> Softmax: one row kernel, the mask read
    as one slice per row, a per-(b, h, row) bias read as one value per row."""
    b = ModelBuilder(dtype, seed=25)
    shape = (2, 3, 17, 17)
    scores = b.input("scores", shape)
    b.feeds["scores"] = b.rng.standard_normal(shape).astype(dtype)
    mask = b.input("mask", (2, 1, 1, 17))
    b.feeds["mask"] = np.where(b.rng.random((2, 1, 1, 17)) < 0.2, -1e4, 0).astype(dtype)
    bias = b.input("bias", (2, 3, 17, 1))
    scaled = b.node("Mul", [scores, b.const(np.array(0.25), "scale")])
    masked = b.node("Add", [b.node("Add", [scaled, mask]), bias])
    b.output(b.node("Softmax", [masked], axis=-1), shape)
    lib, report = _compare(b)
    assert report["npu_kernels"] == 1
    (source,) = lib.kernel_sources().values()
    assert "CopyGmToUb(" in source and "Gm.GetValue(" in source


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_transpose_keeping_the_last_axis_is_a_row_copy(dtype):
    b = ModelBuilder(dtype, seed=26)
    x = b.input("x", (2, 9, 3, 40))
    b.output(b.node("Transpose", [x], perm=[0, 2, 1, 3]), (2, 3, 9, 40))
    y = b.input("y", (4, 6))
    b.output(b.node("Transpose", [y], perm=[1, 0]), (6, 4))
    lib, report = _compare(b)
    # the transpose that keeps the last axis copies whole rows; the one that moves it is the
    # data-movement template's (a vector Gather per tile)
    npu = [g for g in report["groups"] if g["on_npu"]]
    assert [g["tiling"]["template"] for g in npu] == ["row_reduce", "data_movement"]


SOCS_AND_LEVELS = [(soc, level) for soc in ("Ascend910B1", "Ascend310P3")
                   for level in ("conservative", "aggressive")]


def _bool_input(b: ModelBuilder, name: str, shape) -> str:
    b.inputs.append(helper.make_tensor_value_info(name, TensorProto.BOOL, shape))
    b.feeds[name] = b.rng.random(shape) < 0.6
    return name


@pytest.mark.parametrize("soc,level", SOCS_AND_LEVELS)
def test_and_with_a_per_row_mask_then_where_in_a_row_kernel(soc, level):
    """BERT as torch dynamo exports it: And of a per-row bool (one value per row, read on the
    scalar unit) and a [b, 1, 1, s] mask, then Where, in one row kernel. The printer closed the
    `if` of the scalar branch twice (`} } else {`), which g++ refused."""
    b = ModelBuilder("float32", seed=27)
    batch, seq = 2, 24
    row_mask = _bool_input(b, "row_mask", (seq, 1))
    key_mask = _bool_input(b, "key_mask", (batch, 1, 1, seq))
    keep = b.node("And", [row_mask, key_mask])
    bias = b.node("Where", [keep, b.const(np.array(0.0), "zero"), b.const(np.array(-1e4), "neg")])
    scores = b.input("scores", (batch, 1, seq, seq))
    b.output(b.node("Add", [bias, scores]), (batch, 1, seq, seq))
    config = tvm_ascend.CompileConfig(soc_version=soc, fusion_level=level)
    lib, report = _compare(b, config=config)
    (group,) = report["groups"]
    assert group["tiling"]["template"] == "row_reduce"
    (source,) = lib.kernel_sources().values()
    assert "GetValue((row % 24LL))" in source and "} else {" in source


@pytest.mark.parametrize("soc,level", SOCS_AND_LEVELS)
def test_reductions_over_a_length_one_axis(soc, level):
    """A row of one element (Softmax of [7, 1], LayerNormalization of [3, 1], a Slice down to
    [4, 1, 1], a reduction of a reduction): the row is its own row value. The printer found
    no kernel variable for the row's element, or refused the "reduction of a row scalar"."""
    b = ModelBuilder("float32", seed=28)
    x = b.input("x", (7, 1))
    b.feeds["x"] = b.rng.standard_normal((7, 1)).astype(np.float32)
    b.output(b.node("Softmax", [x], axis=-1), (7, 1))
    y = b.input("y", (3, 1))
    b.output(b.node("LayerNormalization", [y, b.const([1.5], "gamma"), b.const([0.5], "beta")],
                    axis=-1), (3, 1))
    z = b.input("z", (4, 3, 5))
    sliced = b.node("Slice", [z, b.int_const([0, 2]), b.int_const([1, 3]), b.int_const([1, 2])])
    b.output(b.node("ReduceMax", [sliced], axes=[-1], keepdims=1), (4, 1, 1))
    w = b.input("w", (4, 1, 1))
    total = b.node("ReduceSum", [w, b.int_const([-1])], keepdims=1)
    b.output(b.node("ReduceMin", [total], axes=[-1], keepdims=1), (4, 1, 1))
    v, u = b.input("v", (7, 1)), b.input("u", (7,))
    b.output(b.node("Mul", [b.node("ReduceSum", [v, b.int_const([-1])], keepdims=0), u]), (7,))
    config = tvm_ascend.CompileConfig(soc_version=soc, fusion_level=level)
    _, report = _compare(b, config=config)
    assert {g["tiling"]["template"] for g in report["groups"]} == {"row_reduce"}


def test_sum_of_a_row_value_broadcast_along_the_row():
    """ReduceSum over an Expand of one value per row: the reduced operand does not vary along
    the row, so its sum is cols times it (no vector reduction of a scalar)."""
    b = ModelBuilder("float32", seed=29)
    x, y = b.input("x", (4, 1)), b.input("y", (4, 1))
    wide = b.node("Expand", [x, b.int_const([4, 8])])
    b.output(b.node("Add", [b.node("ReduceSum", [wide, b.int_const([-1])], keepdims=1), y]),
             (4, 1))
    lib, report = _compare(b)
    assert [g["tiling"]["template"] for g in report["groups"]] == ["row_reduce"]
    (source,) = lib.kernel_sources().values()
    assert "ReduceSum(" not in source
