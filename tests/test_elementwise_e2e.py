"""End to end: ONNX elementwise chains -> AscendC kernels (emulated) vs onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder, add_chain, chain_steps

ODD = (3, 7, 11)              # 231 elements: no multiple of a tile or of 32 bytes
TINY = (5,)                   # less than one tile per core
LARGE = (4, 300, 129)         # 154,800 elements: several UB tiles on every one of 48 cores
SHAPES = (ODD, TINY, ODD, LARGE, ODD, TINY, (2, 3, 5, 7), (33, 65))


def _build_and_compare(builder: ModelBuilder, expected_kernels: int):
    model = builder.model()
    lib = tvm_ascend.build(model, target="ascend")
    outs = lib.run(builder.feeds)
    refs = run_onnxruntime(model, builder.feeds)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        assert_close(out, ref, builder.dtype)
    report = lib.fusion_report()
    assert report["npu_kernels"] == expected_kernels, report
    return lib, report


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_chains_of_1_to_8_ops_match_onnxruntime(dtype):
    builder = ModelBuilder(dtype, seed=1)
    for length in range(1, 9):
        add_chain(builder, length, SHAPES[length - 1], chain_steps(length, start=3 * length))
    lib, report = _build_and_compare(builder, expected_kernels=8)
    assert report["host_groups"] == 0, "every op of every chain runs on the NPU"
    sizes = sorted(len(g["ops"]) for g in report["groups"])
    assert sizes[-1] >= 8, "the 8-op chain is ONE kernel (Clip counts as max + min)"
    for source in lib.kernel_sources().values():
        assert source.count("__global__") == 1


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_step_kind_on_large_and_tiny_shapes(dtype):
    builder = ModelBuilder(dtype, seed=2)
    add_chain(builder, 0, LARGE, chain_steps(8, start=0))
    add_chain(builder, 1, TINY, chain_steps(8, start=8))
    add_chain(builder, 2, ODD, chain_steps(8, start=4))
    add_chain(builder, 3, (1000, 3), chain_steps(8, start=12))
    lib, _ = _build_and_compare(builder, expected_kernels=4)
    launches = {p["kernel"]: p for p in lib.profile()}
    assert max(p["block_dim"] for p in launches.values()) == 48, "large shape uses all AIVs"
    assert min(p["block_dim"] for p in launches.values()) == 1, "tiny shape uses one core"


def test_gm_traffic_is_inputs_once_plus_output_once():
    builder = ModelBuilder("float32", seed=3)
    add_chain(builder, 0, LARGE, ["relu", "sigmoid", "sub_input", "abs", "tanh", "neg"])
    lib, report = _build_and_compare(builder, expected_kernels=1)
    (launch,) = lib.profile()
    elems = int(np.prod(LARGE))
    assert launch["gm_read_bytes"] == 2 * elems * 4     # x and y, once each
    assert launch["gm_write_bytes"] == elems * 4        # the output, once
    (group,) = [g for g in report["groups"] if g["on_npu"]]
    assert group["tiling"]["gm_read_bytes"] == launch["gm_read_bytes"]
    assert group["tiling"]["gm_write_bytes"] == launch["gm_write_bytes"]
    assert launch["warnings"] == []


def test_analytic_traffic_equals_emulator_with_broadcasts_and_scalars():
    builder = ModelBuilder("float32", seed=4)
    add_chain(builder, 0, ODD, ["add_bias", "mul_scalar", "add_rowcol", "div_const"])
    add_chain(builder, 1, (70000,), ["add_bias", "clip", "pow2"])
    lib, report = _build_and_compare(builder, expected_kernels=2)
    by_kernel = {p["kernel"]: p for p in lib.profile()}
    for group in report["groups"]:
        if group["on_npu"]:
            launch = by_kernel[group["kernel"]]
            assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
            assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"]
            assert launch["peak_ub_bytes"] == group["tiling"]["ub_bytes"]


def test_resident_source_read_by_every_core_is_l2_not_hbm_traffic():
    """A gather (Transpose then Reshape) keeps its 16 KB source whole in each core's UB: every
    core reads all of it from GM (the emulator counts cores x 16 KB), but only the first copy
    comes from HBM, the others from L2 (l2_reuse). The report once charged all 47 copies as
    HBM, so GPT-2's fused transposes showed more HBM bytes than ATC's plan."""
    builder = ModelBuilder("float32", seed=8)
    shape = (2, 32, 4, 16)
    x = builder.input("x", shape)
    moved = builder.node("Transpose", [x], perm=[0, 2, 1, 3])
    flat = builder.node("Reshape", [moved, builder.int_const([64, 64], "shape")])
    builder.output(builder.node("Neg", [flat]), (64, 64))
    lib, report = _build_and_compare(builder, expected_kernels=1)
    (group,) = [g for g in report["groups"] if g["on_npu"]]
    assert group["tiling"]["plan"]["resident_inputs"], "the source is kept resident"
    (launch,) = lib.profile()
    nbytes = int(np.prod(shape)) * 4  # the source, and the output: 16384 bytes each
    cores = launch["block_dim"]
    assert cores > 1 and launch["gm_read_bytes"] == cores * nbytes  # one copy per core
    assert group["gm_bytes"] == launch["gm_read_bytes"] + launch["gm_write_bytes"]
    assert launch["gm_write_bytes"] == nbytes
    assert group["hbm_bytes"] == 2 * nbytes            # compulsory: read once, written once
    assert group["l2_bytes"] == (cores - 1) * nbytes   # the other cores' copies
    assert report["estimate"]["hbm_bytes"] == 2 * nbytes


def test_fusion_off_gives_one_kernel_per_op():
    builder = ModelBuilder("float32", seed=5)
    add_chain(builder, 0, ODD, ["relu", "sigmoid", "abs"])
    model = builder.model()
    off = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(fusion_level="off"))
    assert off.fusion_report()["npu_kernels"] == 3
    assert_close(off.run(builder.feeds)[0], run_onnxruntime(model, builder.feeds)[0], "float32")


def test_group_with_more_inputs_than_vecin_buffers_is_split():
    """FuseOps makes one group of the 9 Adds; with 10 inputs it tiles in no template (8 live
    VECIN buffers), so its ops are planned one by one and merged back as far as they tile."""
    builder = ModelBuilder("float32", seed=6)
    inputs = [builder.input(f"x{i}", (64,)) for i in range(10)]
    total = inputs[0]
    for name in inputs[1:]:
        total = builder.node("Add", [total, name])
    builder.output(total, (64,))
    model = builder.model()
    lib = tvm_ascend.build(model)
    report = lib.fusion_report()
    assert report["kernels"] == {"ascend": 2, "host": 0}
    assert sum(len(g["nodes"]) for g in report["groups"]) == 9
    (edge,) = report["unfused_edges"]
    assert "VECIN" in edge["reason"]
    assert_close(lib.run(builder.feeds)[0], run_onnxruntime(model, builder.feeds)[0], "float32")


def test_reshape_joins_the_group_and_alone_stays_a_free_view():
    builder = ModelBuilder("float32", seed=7)
    x = builder.input("x", (6, 35))
    relu = builder.node("Relu", [x])
    shaped = builder.node("Reshape", [relu, builder.int_const([3, 2, 35], "shape")])
    builder.output(builder.node("Sigmoid", [shaped]), (3, 2, 35))
    y = builder.input("y", (4, 5))
    builder.output(builder.node("Reshape", [y, builder.int_const([20], "shape")]), (20,))
    lib, report = _build_and_compare(builder, expected_kernels=1)
    (npu,) = [g for g in report["groups"] if g["on_npu"]]
    assert [op["op"] for op in npu["ops"]] == ["relax.nn.relu", "relax.reshape", "relax.sigmoid"]
    assert any("free" in g["reason"] for g in report["groups"] if not g["on_npu"])


def test_tensor_names_that_are_cpp_keywords_or_start_with_a_digit():
    """ONNX tensor names are free text: printed kernels use them as C++ names (``long`` is
    escaped) and ``lib.run`` takes the ONNX names (TVM renames ``1`` to ``input_1``)."""
    b = ModelBuilder("float32", seed=5)
    x, y = b.input("long", (4, 9)), b.input("1", (4, 9))
    b.output(b.node("Relu", [b.node("Add", [x, y])]), (4, 9))
    lib, _ = _build_and_compare(b, 1)
    source = "\n".join(lib.kernel_sources().values())
    assert "long_" in source and lib.input_names == ["long", "1"]
