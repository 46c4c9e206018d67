"""Conv2D groups on the cube (img2col + Matmul API) with fused epilogues; BatchNorm folding; on
SoCs with DataCopyPad (910B) and without it (310P3).

Several independent convolutions share one model so that one g++ build covers the sweep; every
kernel's GM bytes and cube MACs from its tiling plan must EQUAL the emulator's counters.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tvm_ascend
from build_checks import conv_plan, npu_launches
from conftest import TOLERANCES, run_onnxruntime
from onnx_models import ModelBuilder, add_conv, conv_bn
from tvm_ascend import ir_attrs
from tvm_ascend.frontend import load_model
from tvm_ascend.prepare import prepare
from tvm_ascend.schedules.tiling import Tiling

# A conv output sums K = Cin/G * kh * kw products in another order than onnxruntime (K chunks
# on the cube, then added): float32 differs by a few ulps of the largest partial sum; float16
# rounds each K chunk's product to fp16 before the add, so ~1e-3 relative per chunk.

# (N, Cin, H, W, Cout, kernel, stride, pad, dilation, groups, epilogue)
SWEEP = [
    (1, 3, 11, 13, 5, 3, 1, 1, 1, 1, "bias_relu"),      # odd sizes, Cout not a multiple of 16
    (2, 8, 9, 9, 8, 3, 2, 1, 1, 4, "bias_clip6"),       # stride 2, groups, batch 2, ReLU6
    (1, 6, 10, 10, 6, 3, 1, 2, 2, 6, "sigmoid"),        # depthwise, dilation 2
    (1, 4, 16, 16, 20, 7, 2, 3, 1, 1, "silu"),          # 7x7 stride 2 (a ResNet stem)
    (1, 17, 6, 6, 33, 1, 1, 0, 1, 1, "bias"),           # 1x1
    (1, 16, 24, 24, 96, 3, 1, 1, 1, 1, "relu_residual"),  # 18 tiles over several cores
    (1, 288, 6, 6, 16, 3, 1, 1, 1, 1, "none"),          # img2col of K = 2592 > one UB: 3 chunks
    (1, 24, 27, 29, 150, 1, 1, 0, 1, 1, "bias_relu"),   # 1x1: B read from GM; 39 tiles
    (1, 16, 23, 25, 140, 3, 1, 1, 1, 1, "none"),        # window, 27 tiles: channel tiles share
    (1, 2, 2, 20000, 3, 3, 1, 1, 1, 1, "bias"),         # window wider than the UB: scalar gather
]


def _check_counters(lib) -> list[dict]:
    """Every NPU group's plan equals its launch's counters; returns the conv groups."""
    convs = []
    for group, launch in npu_launches(lib):
        tiling = group["tiling"]
        if tiling["template"] == "conv2d":
            # the scalar unit's elements (Gather offsets, the fallback's img2col, row tails
            # without DataCopyPad) and the window's vector Gathers: as the kernel did them
            p, work = conv_plan(group), tiling["work"]
            s, mode = p.shape, p.img2col.mode
            assert launch["scalar_writes"] == work["scalar_elems"], group["kernel"]
            gathered = launch["vector_by_op"].get("Gather", {}).get("elems", 0)
            assert gathered == work["gather_elems"], group["kernel"]
            assert (gathered > 0) == (mode == "window"), group["kernel"]
            # no method does more scalar work than gathering every tile's whole img2col block
            # element by element (the only method before the window and the rows copies)
            by_element = s.n * s.groups * p.tiles_m * s.k * s.pixels
            tails = 0 if p.data_copy_pad else launch["scalar_writes"]
            assert work["scalar_elems"] <= by_element + tails
            if mode != "scalar" and p.data_copy_pad and s.k > s.kh * s.kw:
                assert work["scalar_elems"] < by_element
            convs.append(group)
    return convs


def test_conv_sweep_float32_matches_onnxruntime_and_counters():
    b = ModelBuilder("float32", seed=11)
    for index, case in enumerate(SWEEP):
        add_conv(b, case, index)
    model = b.model()
    lib = tvm_ascend.build(model)
    outs, refs = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    for case, out, ref in zip(SWEEP, outs, refs):
        np.testing.assert_allclose(out, ref, **TOLERANCES["cube/float32"], err_msg=str(case))
    convs = _check_counters(lib)
    assert len(convs) == len(SWEEP)  # every conv, with its whole epilogue, is one NPU kernel
    report = lib.report.to_json()
    assert report["kernels"]["host"] == 0
    plans = [conv_plan(g) for g in convs]
    assert max(p.chunks for p in plans) > 1        # the K = 2592 case is split
    assert max(g["tiling"]["cores"] for g in convs) > 1
    assert {p.img2col.mode for p in plans} == {"direct", "window", "scalar"}
    # one K chunk: a core builds each pixel tile's block once for its run of channel tiles
    shared = [p for p in plans if p.tiles_m > 1 and p.chunks == 1 and p.img2col.mode != "direct"]
    assert all(p.tiles_n <= p.col_builds <= p.tiles_m * p.tiles_n for p in shared)
    assert sum(p.col_builds < p.tiles_m * p.tiles_n for p in shared) >= 1


def _numpy_conv(x, w, stride, pad, dil, groups):
    """Reference NCHW conv in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, cout, oh, ow))
    cout_g = cout // groups
    for co in range(cout):
        g = co // cout_g
        for ky in range(kh):
            for kx in range(kw):
                win = xp[:, g * cin_g:(g + 1) * cin_g, ky * dil:ky * dil + stride * oh:stride,
                         kx * dil:kx * dil + stride * ow:stride]
                out[:, co] += np.einsum("ncij,c->nij", win, w[co, :, ky, kx])
    return out


def test_conv_float16_bias_relu_and_residual():
    b = ModelBuilder("float16", seed=5)
    x = b.input("x", (1, 12, 10, 10))
    w1 = b.rng.standard_normal((24, 12, 3, 3)) * 0.1
    bias = b.rng.standard_normal(24) * 0.5
    y = b.node("Relu", [b.node("Conv", [x, b.const(w1, "w"), b.const(bias, "b")],
                               strides=[2, 2], pads=[1, 1, 1, 1])])
    w2 = b.rng.standard_normal((24, 24, 1, 1)) * 0.1
    z = b.node("Add", [b.node("Conv", [y, b.const(w2, "w")]), b.input("r", (1, 24, 5, 5))])
    b.output(z, (1, 24, 5, 5))
    lib = tvm_ascend.build(b.model())
    (out,) = lib.run(b.feeds)
    x16 = b.feeds["x"]
    ref1 = np.maximum(_numpy_conv(x16, w1.astype(np.float16), 2, 1, 1, 1)
                      + bias.astype(np.float16).reshape(1, -1, 1, 1), 0).astype(np.float16)
    ref = _numpy_conv(ref1, w2.astype(np.float16), 1, 0, 1, 1) + b.feeds["r"]
    np.testing.assert_allclose(out.astype(np.float64), ref, **TOLERANCES["cube/float16"])
    assert len(_check_counters(lib)) == 2


def test_conv_bn_relu_and_residual_block_are_one_kernel_each():
    b = ModelBuilder("float32", seed=7)
    x = b.input("x", (1, 8, 12, 12))
    y = conv_bn(b, x, 8, 8)                 # conv + bn + relu
    z = conv_bn(b, y, 8, 8, residual=x)     # conv + bn + residual add + relu
    b.output(z, (1, 8, 12, 12))
    model = b.model()
    lib = tvm_ascend.build(model)
    np.testing.assert_allclose(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0],
                               **TOLERANCES["cube/float32"])
    convs = _check_counters(lib)
    assert len(convs) == 2 and lib.report.to_json()["kernels"] == {"ascend": 2, "host": 0}
    nodes = [set(g["onnx_nodes"]) for g in convs]
    kinds = [{n.split("_")[0] for n in ns} for ns in nodes]
    assert kinds[0] == {"conv", "batchnormalization", "relu"}
    assert kinds[1] == {"conv", "batchnormalization", "add", "relu"}


def test_fold_batch_norm_leaves_no_batch_norm():
    b = ModelBuilder("float32", seed=8)
    x = b.input("x", (1, 4, 6, 6))
    b.output(conv_bn(b, x, 4, 4, relu=False), (1, 4, 6, 6))
    text = prepare(load_model(b.model(), None))["main"].script()
    assert "nn.batch_norm(" not in text and "conv2d" in text


# Ascend310P3 (no DataCopyPad, coupled cores): (case, dtype) built into one model per dtype
SWEEP_310P = [
    (1, 3, 11, 13, 5, 3, 1, 1, 1, 1, "bias_relu"),      # 143 pixels: row tails in both dtypes
    (1, 6, 10, 10, 6, 3, 1, 2, 2, 6, "sigmoid"),        # depthwise, dilation 2
    (1, 16, 15, 15, 40, 3, 1, 1, 1, 1, "relu_residual"),  # residual read with tails; cores
    (1, 12, 5, 7, 20, 1, 1, 0, 1, 1, "bias"),           # 1x1 rows copy, 35-pixel row tails
    (2, 8, 7, 7, 8, 3, 2, 1, 1, 4, "bias_clip6"),       # rows narrower than a block; groups
    (1, 288, 6, 6, 16, 3, 1, 1, 1, 1, "relu_residual"),  # K chunks; residual rows of 36
]


@pytest.fixture
def img2col_only(monkeypatch):
    """The img2col kernel for every conv: the partitioner does not estimate the Load3D
    variant (``tests/test_conv_load3d.py`` tests that kernel)."""
    import tvm_ascend.schedules.conv2d as conv2d

    monkeypatch.setattr(conv2d, "load3d_variant_refusal", lambda shape, soc: "not here")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_sweep_on_soc_without_datacopypad(dtype, img2col_only):

    """310P3: each output row of a tile moves as whole 32-byte blocks plus an element-wise
    tail, so no block reaches into the pixels another core writes; rows copied into the UB
    (img2col rows, slab rows, residual rows) are whole blocks that read on past the row,
    except at the input's end (``CopyTileInBlocks``), and a slab row's margin is zeroed again.
    Every conv with its epilogue is one NPU kernel whose plan equals the emulator's counters
    (GM bytes and scalar writes included). The float32 model adds a Conv + folded BatchNorm +
    ReLU over 121 pixels (4-byte row tails)."""
    from tvm_ascend.schedules.conv2d.img2col import chunk_channels, count_col_builds, window_rows

    b = ModelBuilder(dtype, seed=12)
    for index, case in enumerate(SWEEP_310P):
        add_conv(b, case, index)
    if dtype == "float32":
        b.output(conv_bn(b, b.input("xbn", (1, 8, 11, 11)), 8, 12), (1, 12, 11, 11))
    model = b.model()
    lib = tvm_ascend.build(model, target="ascend/310p3")
    outs, refs = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    assert len(outs) == len(refs) == len(SWEEP_310P) + (dtype == "float32")
    for index, (out, ref) in enumerate(zip(outs, refs)):
        np.testing.assert_allclose(out.astype(np.float64), ref, **TOLERANCES["cube/" + dtype],
                                   err_msg=f"output {index}")
    convs = _check_counters(lib)
    report = lib.report.to_json()
    assert len(convs) == len(outs) and report["kernels"] == {"ascend": len(outs), "host": 0}
    assert all(conv_plan(g).data_copy_pad is False for g in convs)
    assert max(g["tiling"]["cores"] for g in convs) > 1
    assert all("DataCopyPad" not in src for src in lib.kernel_sources().values())
    # the window's slab rows: whole blocks, their margins zeroed again; the scalar unit does
    # fewer elements in all than the rows' tails alone would have been, copied exactly
    c0 = 32 // (4 if dtype == "float32" else 2)
    for g in convs:
        p = conv_plan(g)
        shape = p.shape
        if p.img2col.mode != "window" or shape.w % c0 == 0:
            continue
        assert "CopyTileInBlocks(slab[" in lib.kernel_sources()[g["kernel"]]
        assert "margin, " in lib.kernel_sources()[g["kernel"]]
        total = shape.n * shape.groups * p.tiles_m * p.tiles_n
        per_core = g["tiling"]["tiles_per_core"]
        builds, offsets = count_col_builds(p.tiles_m, p.tiles_n, per_core, total, p.chunks)
        channels = sum(chunk_channels(shape, p.img2col.k_chunk))
        starts = range(0, shape.pixels, p.base_n)
        exact_tails = sum(built * channels * window_rows(shape, p0, p.base_n)[1]
                          * (shape.w % c0) for built, p0 in zip(builds, starts))
        out_tails = shape.n * shape.cout * sum(min(p.base_n, shape.pixels - p0) % c0
                                               for p0 in starts)
        others = sum(offsets) * p.align_n + out_tails  # the offsets' first row, outputs
        assert others <= g["tiling"]["work"]["scalar_elems"] < others + exact_tails, g["kernel"]
    if dtype == "float32":  # the BatchNorm folded into the conv, the ReLU fused after it
        kinds = [{n.split("_")[0] for n in g["onnx_nodes"]} for g in convs]
        assert {"conv", "batchnormalization", "relu"} in kinds


@pytest.mark.parametrize("target,dtype", [("ascend", "float32"), ("ascend/310p3", "float16")])
def test_conv_epilogue_covers_many_rows_per_call(target, dtype):
    """Per-channel operands of a conv epilogue are columns (one 32-byte block per output row,
    by Brcb) and the epilogue covers several rows per vector call: ``s - conv`` (a copied
    column, first operand of Sub), ``* (a + c)`` (a column computed row by row on the scalar
    unit), ``/ d`` (batch 2: the channel is the row modulo Cout). Numbers match onnxruntime
    and the plan's bytes, scalar writes and UB equal the emulator's (``_check_counters``)."""
    b = ModelBuilder(dtype, seed=3)
    x = b.input("x", (2, 16, 9, 11))
    y = b.node("Conv", [x, b.const(b.rng.standard_normal((40, 16, 3, 3)) * 0.2, "w")],
               pads=[1, 1, 1, 1])
    per_channel = [b.input(name, (1, 40, 1, 1)) for name in ("s", "a", "c")]
    y = b.node("Sub", [per_channel[0], y])
    y = b.node("Mul", [y, b.node("Add", per_channel[1:])])
    d = b.const(b.rng.uniform(1.0, 2.0, (1, 40, 1, 1)), "d")
    b.output(b.node("Div", [y, d]), (2, 40, 9, 11))
    model = b.model()
    lib = tvm_ascend.build(model, target=target)
    (out,), (ref,) = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref, **TOLERANCES["cube/" + dtype])
    (launch,) = lib.profile(reset=False)
    (conv,) = _check_counters(lib)
    p = conv_plan(conv)
    assert p.epilogue_rows > 1 and p.row_columns == 3
    (source,) = lib.kernel_sources().values()
    assert "AscendC::Brcb(" in source and "values.SetValue(" in source
    assert source.count("BinaryRepeatParams(1, 0, 1,") == 1  # s - conv: the column first
    # per tile and column one Brcb of a repeat per 8 rows; one Sub repeat per output row
    rows = [min(p.base_m, 40 - m0) for m0 in range(0, 40, p.base_m)]
    by_op = launch["vector_by_op"]
    assert by_op["Brcb"]["instrs"] == 3 * 2 * p.tiles_n * sum(-(-m // 8) for m in rows)
    assert by_op["Sub"]["instrs"] == 2 * p.tiles_n * 40


def test_conv_epilogue_row_by_row_when_a_record_asks(tmp_path):
    """``Conv2dKnobs(epilogue_rows=1)`` (a tuning record's) prints the epilogue one output row
    per call, each row's BatchNorm shift read on the scalar unit: the same numbers, and the
    plan still equals the emulator's counters."""
    from tvm_ascend.cost_model import TuningDatabase, workload_of
    from tvm_ascend.schedules.conv2d import Conv2dKnobs, Conv2dSchedule
    from tvm_ascend.soc import get_soc

    b = ModelBuilder("float32", seed=9)
    x = b.input("x", (2, 8, 7, 9))
    b.output(conv_bn(b, x, 8, 24, residual=b.input("r", (2, 24, 7, 9))), (2, 24, 7, 9))
    model = b.model()
    result = tvm_ascend.partition_for_ascend(model)
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    db = TuningDatabase(tmp_path / "db")
    db.commit(workload_of(func, "conv2d", get_soc("Ascend910B1")),
              Conv2dKnobs(epilogue_rows=1), 1.0)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        tuning_database=str(db.path), build_cache=False))
    (out,), (ref,) = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    np.testing.assert_allclose(out, ref, **TOLERANCES["cube/float32"])
    (conv,) = _check_counters(lib)
    assert conv_plan(conv).epilogue_rows == 1
    assert Conv2dSchedule.schedule(func, get_soc("Ascend910B1"))[1].plan.epilogue_rows > 1
    source = lib.kernel_sources()[conv["kernel"]]
    assert "Brcb" not in source and "param_1Row = param_1Gm.GetValue(" in source


def test_split_chip_conv_keeps_its_col_block_in_the_gm_workspace():
    """910B: the col block (K = 2592 rows, built in 32-byte-row K chunks in the UB) goes to the
    core's part of the GM workspace once per run of channel tiles of a pixel tile, and the
    Matmul takes B from there, all of K at once: no partial products, fewer builds than
    tiles. 310P keeps the UB operand (on chip there), chunk by chunk."""
    from tvm_ascend.codegen.launcher import (ACL_SYS_WORKSPACE_BYTES, emit_acl_launcher,
                                             emit_launcher)
    from tvm_ascend.codegen.code_buffer import CodeBuffer
    from tvm_ascend.codegen.kernels.conv2d import ConvKernelPrinter
    from tvm_ascend.schedules.conv2d import Conv2dSchedule
    from tvm_ascend.soc import get_soc

    b = ModelBuilder("float32", seed=13)
    x = b.input("x", (1, 288, 16, 16))
    w = b.const(b.rng.standard_normal((400, 288, 3, 3)) * 0.05, "w")
    b.output(b.node("Relu", [b.node("Conv", [x, w], pads=[1, 1, 1, 1])]), (1, 400, 16, 16))
    model = b.model()
    lib = tvm_ascend.build(model)
    (out,), (ref,) = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    np.testing.assert_allclose(out, ref, **TOLERANCES["cube/float32"])
    (conv,) = _check_counters(lib)  # the col copies and B reads are in the GM bytes
    p = conv_plan(conv)
    assert p.col_in_gm and p.chunks > 1 and p.mm_chunks == 1
    assert p.col_builds < p.tiles_m * p.tiles_n  # a block serves several tiles
    assert conv["tiling"]["work"]["workspace_write_bytes"] > \
        p.col_builds * p.shape.k * p.align_n * 4 > 0
    source = lib.kernel_sources()[conv["kernel"]]
    assert "mm.SetTensorB(colGm);" in source and "GetUserWorkspace(workspace)" in source
    assert "partBuf" not in source
    # the launcher reserves every core's block after the system part
    result = tvm_ascend.partition_for_ascend(model)
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    scheduled, tiling = Conv2dSchedule.schedule(func, get_soc("Ascend910B1"))
    printer = ConvKernelPrinter("k", scheduled, tiling)
    assert printer.user_workspace_bytes() == tiling.cores * p.shape.k * p.align_n * 4
    buf = CodeBuffer()
    emit_launcher(buf, "k", printer, tiling.cores)
    assert f"kSysWorkspaceBytes + {printer.user_workspace_bytes()}" in buf.text()
    acl = CodeBuffer()
    emit_acl_launcher(acl, "k", printer, tiling.cores, timed=False)
    size = ACL_SYS_WORKSPACE_BYTES + printer.user_workspace_bytes()
    assert f"aclrtMalloc(reinterpret_cast<void**>(&devWorkspace), {size}," in acl.text()
    _, coupled = Conv2dSchedule.schedule(func, get_soc("Ascend310P3"))
    assert not coupled.plan.col_in_gm and coupled.plan.col_workspace_bytes == 0
    assert coupled.plan.mm_chunks == coupled.plan.chunks


def test_coupled_chip_takes_the_gm_col_block_when_the_estimate_says_so():
    """310P: a col block of several K chunks in the UB is built again for every channel tile;
    with 2 channel tiles per core the partitioner's variant through the GM workspace is
    estimated faster, chosen (the reason says so) and runs right, its bytes as planned."""
    b = ModelBuilder("float16", seed=14)
    x = b.input("x", (4, 288, 12, 12))
    w = b.const(b.rng.standard_normal((256, 288, 3, 3)) * 0.05, "w")
    b.output(b.node("Relu", [b.node("Conv", [x, w], pads=[1, 1, 1, 1])]), (4, 256, 12, 12))
    model = b.model()
    lib = tvm_ascend.build(model, target="ascend/310p3")
    (out,), (ref,) = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref, **TOLERANCES["cube/float16"])
    (conv,) = _check_counters(lib)
    p = conv_plan(conv)
    assert p.col_in_gm and p.chunks > 1 and p.mm_chunks == 1
    assert p.col_builds < p.tiles_m * p.tiles_n * p.shape.n
    assert "'col_in_gm': True" in conv["reason"]


def test_consecutive_rows_tells_a_channel_walk_from_others():
    """A copied column needs the channel's values one after another in GM."""
    from tvm import tirx

    from tvm_ascend.schedules.conv2d import ConvShape
    from tvm_ascend.schedules.conv2d.epilogue import consecutive_rows

    row = tirx.Var("row", "int64")
    shape = ConvShape(2, 8, 9, 9, 40, 3, 3, 9, 9, (1, 1), (1, 1), (1, 1), 1, "float32", "x", "w")
    c = tirx.IntImm("int64", 40)
    assert consecutive_rows(tirx.FloorMod(row, c), row, shape)          # bias[c]
    assert consecutive_rows(row, row, shape)                              # a [n, c] tensor
    assert not consecutive_rows(tirx.FloorMod(row, c) * 2, row, shape)   # every other value
    assert not consecutive_rows(tirx.FloorDiv(row, c), row, shape)       # per image


LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


@pytest.mark.slow
def test_light_resnet50_compiles_and_matches():
    """The ONNX backend's light ResNet-50 with the input its runner makes (arange / n): every
    Conv (BatchNorm folded, ReLU and residual Sum fused) runs on the cube. About 3 minutes
    here (30 s to compile the graph, the rest g++ and the emulated run)."""
    model = onnx.load(os.path.join(LIGHT, "light_resnet50.onnx"))
    expected = numpy_helper.to_array(
        onnx.load_tensor(os.path.join(LIGHT, "light_resnet50_output_0.pb")))
    lib = tvm_ascend.build(model)
    data = model.graph.input[0]
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    feed = (np.arange(np.prod(shape)).reshape(shape) / np.prod(shape)).astype(np.float32)
    (out,) = lib.run({data.name: feed})
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out, run_onnxruntime(model, {data.name: feed})[0],
                               rtol=1e-4, atol=1e-5)
    groups = lib.report.to_json()["groups"]
    convs = [g for g in groups if any(o["op"] == "relax.nn.conv2d" for o in g["ops"])]
    assert len(convs) == 53 and all(g["on_npu"] for g in convs)
    # the 16 residual Sums: bias Add + residual Add + ReLU in the conv's kernel
    assert sum(1 for g in convs if [o["op"] for o in g["ops"]].count("relax.add") == 2) == 16


def test_partitioner_takes_smaller_tiles_when_the_default_leaves_cores_idle():
    """A deep conv on a 7x7 map: the default 64x64 float32 tiles make 2 tiles for 24 cores.
    The partitioner estimates the template's smaller-tile variants, keeps the fastest, says so
    in the reason, and the kernel is printed with those tiles (plan == counters)."""
    b = ModelBuilder("float32", seed=13)
    add_conv(b, (1, 96, 7, 7, 128, 3, 1, 1, 1, 1, "bias_relu"), 0)
    model = b.model()
    lib = tvm_ascend.build(model)
    np.testing.assert_allclose(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0],
                               **TOLERANCES["cube/float32"])
    (conv,) = _check_counters(lib)
    p = conv_plan(conv)
    assert (p.base_m, p.base_n) != (64, 64) and conv["tiling"]["cores"] > 2
    assert "knobs" in conv["reason"] and "with the defaults" in conv["reason"]


def test_conv_knob_space_starts_with_the_defaults():
    from tvm_ascend.schedules.conv2d import Conv2dKnobs, Conv2dSchedule, conv_shape
    from tvm_ascend.soc import get_soc
    b = ModelBuilder("float16", seed=14)
    add_conv(b, (1, 32, 14, 14, 256, 3, 1, 1, 1, 1, "none"), 0)
    soc = get_soc("Ascend910B1")
    result = tvm_ascend.partition_for_ascend(b.model())
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    assert conv_shape(func) is not None
    space = Conv2dSchedule.knob_space(func, soc)
    assert space[0] == Conv2dKnobs() and len(space) == len(set(space)) > 4
    assert Conv2dSchedule.schedule(func, soc)[1] == Conv2dSchedule.schedule(
        func, soc, Conv2dKnobs())[1]
    assert len(Conv2dSchedule.variants(func, soc)) > 1  # 2 x 2 default tiles on 24 cores
    with pytest.raises(tvm_ascend.errors.TilingError, match="base_m=24"):
        Conv2dSchedule.schedule(func, soc, Conv2dKnobs(base_m=24))
    with pytest.raises(tvm_ascend.errors.TilingError, match="img2col='direct'"):
        Conv2dSchedule.schedule(func, soc, Conv2dKnobs(img2col="direct"))  # a 3x3 conv


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_one_conv_analysis_plans_every_variant_as_schedule_does(soc, monkeypatch):
    """The partitioner estimates up to nine variants of a conv: the cube templates' ``applies``
    and one ``analyse`` (the epilogue inlined and laid out as rows) build two TIR Schedules
    in all (the root blocks, the inlining), every variant plans from that one analysis, each
    plan applied is what ``schedule`` gives, and ``apply`` leaves the analysis as it found
    it."""
    import tvm

    from template_contract import check_analyse_plan_apply
    from tvm_ascend.schedules import (AttentionSchedule, Conv2dSchedule, MatmulRowsSchedule,
                                      MatmulSchedule, Pool2dSchedule)
    from tvm_ascend.soc import get_soc

    b = ModelBuilder("float16", seed=17)
    x = b.input("x", (1, 64, 7, 7))
    b.output(conv_bn(b, x, 64, 128, residual=b.input("r", (1, 128, 7, 7))), (1, 128, 7, 7))
    result = tvm_ascend.partition_for_ascend(b.model())
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    chip, built, schedule = get_soc(soc), [], tvm.s_tir.Schedule
    monkeypatch.setattr(tvm.s_tir, "Schedule", lambda *a: built.append(a) or schedule(*a))
    cube = (MatmulSchedule, MatmulRowsSchedule, AttentionSchedule, Pool2dSchedule,
            Conv2dSchedule)
    assert [t for t in cube if t.applies(func)] == [Conv2dSchedule]
    analysis, variants = Conv2dSchedule.analyse(func), Conv2dSchedule.variants(func, chip)
    tilings = [Conv2dSchedule.plan(analysis, chip, knobs) for knobs in variants]
    assert len(built) == 2 and len(tilings) == len(variants) >= 4
    monkeypatch.undo()
    check_analyse_plan_apply(Conv2dSchedule, func, chip, [None] + variants)


def test_pointwise_conv_reads_b_from_gm_on_910b_and_copies_rows_on_310p():
    """The two methods of a 1x1 conv: on 910B the Matmul reads B from the input planes (no
    copy, and no B staged through GM, so fewer GM bytes than the rows copy); on 310P the rows
    copy stays on chip and serves the channel tiles of its pixel tile."""
    from tvm_ascend.schedules.conv2d import Conv2dKnobs, Conv2dSchedule
    from tvm_ascend.soc import get_soc
    b = ModelBuilder("float16", seed=15)
    add_conv(b, (1, 64, 28, 28, 256, 1, 1, 0, 1, 1, "none"), 0)
    result = tvm_ascend.partition_for_ascend(b.model())
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    b910, p310 = get_soc("Ascend910B1"), get_soc("Ascend310P3")
    direct = Conv2dSchedule.schedule(func, b910)[1]
    rows = Conv2dSchedule.schedule(func, b910, Conv2dKnobs(img2col="rows"))[1]
    assert direct.plan.img2col.mode == "direct" and direct.plan.chunks == 1
    assert direct.gm_read_bytes + direct.gm_write_bytes < rows.gm_read_bytes + rows.gm_write_bytes
    assert direct.ub_bytes < rows.ub_bytes  # no col buffer
    assert Conv2dSchedule.schedule(func, p310)[1].plan.img2col.mode == "rows"
    assert Conv2dKnobs(img2col="rows") in Conv2dSchedule.variants(func, b910)


def test_conv_plan_is_typed_and_round_trips_through_json():
    """The conv template's decisions are its ``ConvPlan`` (the shape it planned for, the
    img2col method with the window's slab, the tiles, the epilogue), nothing in ``params``;
    the Tiling's JSON (what the IR and the fusion report carry) reads back to the same plan,
    tuples and the nested slab layout included, on both kinds of chip."""
    import dataclasses

    from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_source
    from tvm_ascend.codegen.kernels.conv2d import ConvKernelPrinter
    from tvm_ascend.schedules.conv2d import ConvPlan, Conv2dSchedule
    from tvm_ascend.schedules.conv2d.img2col import WindowLayout
    from tvm_ascend.soc import get_soc

    b = ModelBuilder("float16", seed=16)
    add_conv(b, (2, 16, 9, 11, 40, 3, 2, 1, 1, 1, "bias_relu"), 0)
    result = tvm_ascend.partition_for_ascend(b.model())
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    for soc in ("Ascend910B1", "Ascend310P3"):
        scheduled, tiling = Conv2dSchedule.schedule(func, get_soc(soc))
        plan = tiling.plan
        assert isinstance(plan, ConvPlan)
        assert plan.shape.stride == (2, 2) and plan.shape.k == 16 * 9
        assert plan.img2col.mode == "window" and isinstance(plan.img2col.layout, WindowLayout)
        assert plan.col_in_gm == (soc == "Ascend910B1")
        assert plan.cube_dims() == (0, 2, 16 * 9, plan.base_m, plan.base_n, 0, 0)
        # groups that share one kernel differ only in their buffers' names: one plan
        assert dataclasses.replace(plan.shape, x_name="other") == plan.shape
        again = Tiling.from_json(tiling.to_json())
        assert again == tiling and again.plan.img2col.layout == plan.img2col.layout
    with pytest.raises(tvm_ascend.errors.CodegenError, match="without the template's ConvPlan"):
        ConvKernelPrinter("k", scheduled, dataclasses.replace(tiling, plan=None))
    # the plan says which SoC's copies it chose (310P's, here): the unit's helpers must agree
    kernel = ScheduledKernel("k", scheduled, tiling, {})
    assert "CopyTileInBlocks" in kernel_source(kernel, get_soc("Ascend310P3"))
    with pytest.raises(tvm_ascend.errors.CodegenError, match="without DataCopyPad but printed"):
        kernel_source(kernel, get_soc("Ascend910B1"))
