"""Data-movement kernels (Transpose, Slice, Concat, Pad, Gather, Expand) alone and fused with their
elementwise consumer: emulator vs onnxruntime, the fusion report, and GM bytes plan == counters."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.schedules.data_movement import DataMovementPlan, DataMovementSchedule
from tvm_ascend.schedules.tiling import Tiling
from tvm_ascend.schedules.analysis.movement_program import movement_program


def _relu(b, x):
    return b.node("Relu", [b.node("Sub", [x, b.const(np.array(1.0), "one")])])


def _transpose(b, shape, perm):
    x = b.input(b.name("x"), shape)
    return b.node("Transpose", [x], perm=perm), tuple(shape[p] for p in perm)


def _slice(b, shape, starts, ends, axes, steps):
    x = b.input(b.name("x"), shape)
    ints = [b.int_const(v, "s") for v in (starts, ends, axes, steps)]
    out = b.node("Slice", [x] + ints)
    ref = np.zeros(shape)[tuple(slice(None) if a not in axes else
                                slice(starts[axes.index(a)], ends[axes.index(a)],
                                      steps[axes.index(a)]) for a in range(len(shape)))]
    return out, ref.shape


def _concat(b, shapes, axis):
    names = [b.input(b.name("x"), s) for s in shapes]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    return b.node("Concat", names, axis=axis), tuple(out_shape)


def _pad(b, shape, pads):
    x = b.input(b.name("x"), shape)
    rank = len(shape)
    out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shape))
    return b.node("Pad", [x, b.int_const(pads, "pads")], mode="constant"), out


def _gather(b, vocab, hidden, ids_shape):
    ids = b.name("ids")
    b.inputs.append(helper.make_tensor_value_info(ids, TensorProto.INT64, ids_shape))
    b.feeds[ids] = b.rng.integers(-vocab, vocab, size=ids_shape).astype(np.int64)
    table = b.const(b.rng.standard_normal((vocab, hidden)), "table")
    return b.node("Gather", [table, ids], axis=0), tuple(ids_shape) + (hidden,)


def _expand(b, shape, out_shape):
    x = b.input(b.name("x"), shape)
    return b.node("Expand", [x, b.int_const(list(out_shape), "shape")]), tuple(out_shape)


# (name, builder) pairs; every case is built alone and followed by a consumer in one model
CASES = [
    ("transpose_2d", lambda b: _transpose(b, (37, 20), [1, 0])),
    ("transpose_3d", lambda b: _transpose(b, (3, 37, 20), [0, 2, 1])),
    ("transpose_nchw_nhwc", lambda b: _transpose(b, (2, 5, 3, 7), [0, 2, 3, 1])),
    ("slice_neg_step", lambda b: _slice(b, (2, 5, 45), [-1], [-100], [2], [-3])),
    ("slice_steps", lambda b: _slice(b, (6, 9, 21), [1, 2], [6, 20], [1, 2], [2, 3])),
    ("concat_inner_3", lambda b: _concat(b, [(4, 5), (4, 7), (4, 9)], 1)),
    ("concat_outer_2", lambda b: _concat(b, [(3, 6, 10), (2, 6, 10)], 0)),
    ("concat_mid_4", lambda b: _concat(b, [(2, 1, 11), (2, 3, 11), (2, 2, 11), (2, 1, 11)], 1)),
    ("pad", lambda b: _pad(b, (3, 4, 10), [0, 1, 1, 0, 2, 3])),
    ("gather", lambda b: _gather(b, 50, 24, (2, 7))),
    ("expand", lambda b: _expand(b, (2, 1, 12), (2, 5, 12))),
]


def _build(cases, dtype, fused):
    b = ModelBuilder(dtype, seed=3)
    producers = {}
    for name, make in cases:
        out, shape = make(b)
        producers[name] = out
        b.output(_relu(b, out) if fused else out, shape)
    return b, producers


def _check(b, fused):
    model = b.model()
    lib = tvm_ascend.build(model)
    outs = lib.run(b.feeds)
    for out, ref in zip(outs, run_onnxruntime(model, b.feeds)):
        if fused:
            assert_close(out, ref, b.dtype)
        else:  # data movement is exact
            np.testing.assert_array_equal(out, ref)
    report = lib.fusion_report()
    profile = {p["kernel"]: p for p in lib.profile()}
    for group in report["groups"]:
        if group["on_npu"]:
            launch = profile[group["kernel"]]
            assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"], group["name"]
            assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"], group["name"]
            assert launch["peak_ub_bytes"] == group["tiling"]["ub_bytes"], group["name"]
            assert launch["warnings"] == [], group["name"]
    return report


def _group_of(report, node, on_npu=True):
    # the importer names the Gather's int64 index ops after an earlier node: skip host groups
    found = [g for g in report["groups"] if node in g["onnx_nodes"] and g["on_npu"] == on_npu]
    assert len(found) == 1, node
    return found[0]


@pytest.mark.parametrize("dtype,fused", [
    ("float32", False), ("float32", True), ("float16", True),
    pytest.param("float16", False, marks=pytest.mark.slow)],
    ids=["fp32-alone", "fp32-fused", "fp16-fused", "fp16-alone"])
def test_data_movement_ops(dtype, fused):
    b, producers = _build(CASES, dtype, fused)
    report = _check(b, fused)
    # only the Gather's index normalisation (negative ids + vocab, int64) runs on the host
    host = [g for g in report["groups"] if not g["on_npu"]]
    assert all(op["dtype"] in ("int64", "bool") for g in host for op in g["ops"]), \
        [g["reason"] for g in host]
    for name, node in producers.items():
        group = _group_of(report, node)
        expected = "row_reduce" if name == "expand" else "data_movement"  # whole rows: a row copy
        assert group["tiling"]["template"] == expected, (name, group["reason"])
        if fused:  # the movement and its consumer (Sub, Relu) are one kernel
            assert len(group["onnx_nodes"]) >= 3, (name, group["onnx_nodes"])
            if name != "pad":  # the importer emits Pad as TIR, which no rule name covers
                assert "DataMovementFusion" in group["rule"], (name, group["rule"])


def test_larger_than_ub_on_many_cores():
    b = ModelBuilder("float32", seed=4)
    out, shape = _transpose(b, (64, 300, 33), [0, 2, 1])
    b.output(_relu(b, out), shape)
    cat, cat_shape = _concat(b, [(40, 77, 30), (40, 77, 50)], 2)
    b.output(cat, cat_shape)
    report = _check(b, fused=True)
    for node in (out, cat):
        tiling = _group_of(report, node)["tiling"]
        assert tiling["template"] == "data_movement"
        assert tiling["cores"] > 1 and tiling["gm_read_bytes"] > 192 * 1024, tiling
    assert _group_of(report, out)["tiling"]["tiles_per_core"] > 1


def test_transpose_box_copy_plan():
    """A transpose reads whole column runs of its tile (box copy), never element by element."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 37, 20), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.permute_dims(x, [0, 2, 1]))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    func = next(f for gv, f in mod.functions.items() if gv.name_hint != "main")
    program = movement_program(func)
    (segment,) = program.segments()
    assert segment.layout == "box" and segment.data_leaf().stride == 20
    from tvm_ascend.soc import get_soc
    _, tiling = DataMovementSchedule.schedule(func, get_soc("Ascend910B1"))
    assert tiling.work.scalar_elems == 0
    assert 20 % tiling.tile_len == 0  # tiles never cross a batch (where bases jump)
    # the box is staged column by column, then permuted into the tile by one Gather
    assert tiling.plan == DataMovementPlan(gathered_operands=1)
    assert Tiling.from_json(tiling.to_json()) == tiling


def _typed_transpose(onnx_type, np_dtype):
    x = helper.make_tensor_value_info("x", onnx_type, (4, 6))
    y = helper.make_tensor_value_info("y", onnx_type, (6, 4))
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0], name="transpose_q")
    graph = helper.make_graph([node], "t", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, {"x": np.arange(24).reshape(4, 6).astype(np_dtype)}


@pytest.mark.parametrize("onnx_type,np_dtype", [(TensorProto.INT8, np.int8),
                                                (TensorProto.DOUBLE, np.float64)])
def test_unsupported_dtype_stays_on_host(onnx_type, np_dtype):
    model, feeds = _typed_transpose(onnx_type, np_dtype)
    lib = tvm_ascend.build(model)
    (out,) = lib.run(feeds)
    np.testing.assert_array_equal(out, feeds["x"].T)
    report = lib.fusion_report()
    group = _group_of(report, "transpose_q", on_npu=False)
    assert not group["on_npu"] and "non-float" in group["reason"], group["reason"]


def test_split_is_read_as_slices_fused_into_each_consumer():
    """A Split (a fused QKV projection's) is read as one slice per output (prepare stage), and
    each slice joins its consumer's kernel (DataMovementFusion): three kernels, no host op."""
    b = ModelBuilder("float32", seed=5)
    qkv = b.input("qkv", (2, 7, 3 * 12))
    parts = b.name("split")
    b.nodes.append(helper.make_node("Split", [qkv, b.int_const([12, 12, 12], "sp")],
                                    [f"{parts}_{i}" for i in range(3)], axis=2, name=parts))
    for i in range(3):
        b.output(_relu(b, f"{parts}_{i}"), (2, 7, 12))
    model = b.model()
    lib = tvm_ascend.build(model)
    for out, ref in zip(lib.run(b.feeds), run_onnxruntime(model, b.feeds)):
        assert_close(out, ref, "float32")
    report = lib.fusion_report()
    assert report["kernels"] == {"ascend": 3, "host": 0}
    groups = [g for g in report["groups"] if parts in g["nodes"]]
    assert len(groups) == 3 and all("DataMovementFusion" in g["rules"] for g in groups)


GATHER_PROBE = r"""
#include "kernel_operator.h"
#include "tikicpulib.h"
#include <cstdio>

extern "C" __global__ __aicore__ void gather_probe(GM_ADDR x, GM_ADDR y, GM_ADDR bad) {
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::VECCALC> srcBuf, dstBuf, offBuf;
  pipe.InitBuffer(srcBuf, 64 * sizeof(float));
  pipe.InitBuffer(dstBuf, 64 * sizeof(float));
  pipe.InitBuffer(offBuf, 64 * sizeof(uint32_t));
  AscendC::LocalTensor<float> src = srcBuf.Get<float>(), dst = dstBuf.Get<float>();
  AscendC::LocalTensor<uint32_t> offs = offBuf.Get<uint32_t>();
  AscendC::GlobalTensor<float> xGm, yGm;
  xGm.SetGlobalBuffer((__gm__ float*)x, 64);
  yGm.SetGlobalBuffer((__gm__ float*)y, 64);
  AscendC::DataCopy(src, xGm, 64);
  AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(0);
  AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(0);
  // an 8x8 transpose: dst[i * 8 + j] = src[j * 8 + i]
  for (uint32_t i = 0; i < 64; ++i) offs.SetValue(i, ((i % 8) * 8 + i / 8) * sizeof(float));
  if (*(__gm__ int32_t*)bad) offs.SetValue(5, 64 * sizeof(float));  // one past the end
  AscendC::SetFlag<AscendC::HardEvent::S_V>(0);
  AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);
  AscendC::Gather(dst, src, offs, 0, 64);
  AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(0);
  AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(0);
  AscendC::DataCopy(yGm, dst, 64);
}

int main(int argc, char** argv) {
  uint8_t* x = (uint8_t*)AscendC::GmAlloc(256);
  uint8_t* y = (uint8_t*)AscendC::GmAlloc(256);
  uint8_t* bad = (uint8_t*)AscendC::GmAlloc(32);
  for (int i = 0; i < 64; ++i) ((float*)x)[i] = static_cast<float>(i);
  *(int32_t*)bad = argc > 1;
  AscendC::SetKernelMode(KernelMode::AIV_MODE);
  try {
    ICPU_RUN_KF(gather_probe, 1, x, y, bad);
  } catch (const AscendC::emu::DeviceRuleError& err) {
    std::printf("error %s\n", err.what());
    return 3;
  }
  for (int i = 0; i < 64; ++i) std::printf("%g ", ((float*)y)[i]);
  std::printf("\n%s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
  return 0;
}
"""


def test_emulator_gather_permutes_and_checks_bounds(tmp_path):
    """Gather (count form, CANN 8.x signature) in the emulator: an 8x8 transpose by byte
    offsets, counted as vector work; an offset past its source is a device-rule error."""
    import json
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    emu = Path(__file__).resolve().parents[1] / "contrib" / "ascendc_emu"
    src = tmp_path / "gather_probe.cpp"
    src.write_text(GATHER_PROBE)
    exe = tmp_path / "gather_probe"
    subprocess.run(["g++", "-std=c++17", "-O0", "-DASCENDC_CPU_DEBUG", f"-I{emu}", str(src),
                    "-o", str(exe), "-pthread"], check=True, capture_output=True, text=True)
    ok = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    values, stats = ok.splitlines()[0], json.loads(ok.splitlines()[1])
    got = np.array([float(v) for v in values.split()]).reshape(8, 8)
    np.testing.assert_array_equal(got, np.arange(64).reshape(8, 8).T)
    assert stats["vector_by_op"]["Gather"] == {"instrs": 1, "elems": 64}
    assert stats["warnings"] == []
    bad = subprocess.run([str(exe), "bad"], capture_output=True, text=True)
    assert bad.returncode == 3 and "Gather" in bad.stdout and "outside src" in bad.stdout


# (input shape, Reshape target, starts, ends, axes, steps): the issue-16 case first; the reshape
# makes the slice's reversed index a floordiv/floormod of a possibly negative value
NEGATIVE_STEP_AFTER_RESHAPE = [
    ((3, 8, 32), [-1, 24, 4], [-1, 2, -1], [-100, 21, -100], [0, 1, 2], [-2, 1, -1]),
    ((6, 35), [5, 7, 6], [-1], [-100], [1], [-3]),
    ((6, 35), [5, 7, 6], [-2, 4], [-100, 0], [0, 2], [-1, -2]),
    ((4, 3, 50), [12, 50], [-1, 48], [-100, 1], [0, 1], [-1, -3]),
    ((2, 600, 64), [1200, 64], [-1, -1], [-2000, -100], [0, 1], [-1, -1]),   # many cores, tails
    ((4, 9000), [2, 18000], [-1], [-100000], [1], [-1]),
    ((4, 35000), [2, 70000], [-1, -3], [-9, -100000], [0, 1], [-1, -2]),       # rows > the UB
]


@pytest.mark.parametrize("soc,dtype,fused", [
    ("Ascend910B1", "float32", False), ("Ascend310P3", "float32", False),
    ("Ascend910B1", "float16", True), ("Ascend310P3", "float16", True)])
def test_negative_step_slice_after_reshape_reads_in_bounds(soc, dtype, fused):
    """x[3,8,32] -> Reshape [-1,24,4] -> Slice steps [-2,1,-1] read 4 * 2**32 bytes past its UB
    buffer: the fused index's floordiv of a negative value was printed as C++'s ``/``."""
    b = ModelBuilder(dtype, seed=6)
    slices = []
    for shape, target, starts, ends, axes, steps in NEGATIVE_STEP_AFTER_RESHAPE:
        x = b.input(b.name("x"), shape)
        view = b.node("Reshape", [x, b.int_const(target, "shape")])
        out = b.node("Slice", [view] + [b.int_const(v, "s") for v in (starts, ends, axes, steps)])
        ref = np.zeros(shape).reshape(target)[tuple(
            slice(starts[axes.index(a)], ends[axes.index(a)], steps[axes.index(a)])
            if a in axes else slice(None) for a in range(len(target)))]
        b.output(_relu(b, out) if fused else out, ref.shape)
        slices.append(out)
    model = b.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(soc_version=soc))
    for out, ref in zip(lib.run(b.feeds), run_onnxruntime(model, b.feeds)):
        if fused:
            assert_close(out, ref, dtype)
        else:
            np.testing.assert_array_equal(out, ref)
    report = lib.fusion_report()
    assert all(_group_of(report, node)["on_npu"] for node in slices)
    assert all(p["warnings"] == [] for p in lib.profile())


@pytest.mark.parametrize("data_shape,target", [
    ((3, 1), [2, 1, 6]),      # ONNX's test_expand_dim_changed: (2, 3, 6), TVM gave (2, 1, 6)
    ((2, 3, 4), [3, 1]),      # a target shorter than the data broadcasts right-aligned
    ((1, 5), [4, 1]),
])
def test_expand_to_a_shape_given_at_run_time_broadcasts_with_the_data(data_shape, target):
    """Expand's target is broadcast with the data's shape (ONNX), not taken as it is: TVM's
    importer expanded x[3, 1] to a [2, 1, 6] shape input as (2, 1, 6)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, data_shape)
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [len(target)])
    out_shape = np.broadcast_shapes(data_shape, tuple(target))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    graph = helper.make_graph([helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
                              "expand", [x, shape], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    feeds = {"x": np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape),
             "shape": np.array(target, np.int64)}
    (out,) = tvm_ascend.build(model).run(feeds)
    (ref,) = run_onnxruntime(model, feeds)
    assert out.shape == ref.shape == out_shape
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_a_gather_by_a_0d_id_fused_with_its_reader_declares_the_id_tensor(soc):
    """Regression (issue 16, fuzz case 1-69): Gather(x[37], id 0-d) + Add(g, z) is one kernel
    that reads x at the id's value; the id tensor was read (p1Gm.GetValue) but never declared,
    and g++ failed. Values against onnxruntime, GM bytes of plan and emulator equal."""
    b = ModelBuilder("float32", seed=8)
    x, z = b.input("x", [37]), b.input("z", [37])
    for value in (-3, 5):
        ids = b.int_const(np.array(value), "id")
        b.output(b.node("Add", [b.node("Gather", [x, ids], axis=0), z]), [37])
    model = b.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(soc_version=soc))
    for out, ref in zip(lib.run(b.feeds), run_onnxruntime(model, b.feeds)):
        assert_close(out, ref, "float32")
    report = lib.fusion_report()
    profile = {p["kernel"]: p for p in lib.profile()}
    fused = [g for g in report["groups"] if g["on_npu"] and len(g["nodes"]) == 2]
    assert len(fused) == 2
    for group in fused:
        assert profile[group["kernel"]]["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]


def test_analyse_once_plan_per_knobs_apply_per_plan_is_schedule():
    """The contract: one analysis (the transpose and its relu inlined) serves every plan, and
    apply leaves it as it found it."""
    from tvm import relax

    from template_contract import check_analyse_plan_apply
    from tvm_ascend.schedules.analysis.tir_walk import root_blocks
    from tvm_ascend.schedules.data_movement import DataMovementKnobs
    from tvm_ascend.soc import get_soc

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 37, 20), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(relax.op.permute_dims(x, [0, 2, 1])))
        bb.emit_func_output(out)
    legal = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(bb.get()))
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(legal))
    func = next(f for gv, f in mod.functions.items() if gv.name_hint != "main")
    assert len(root_blocks(func)) == 2  # the transpose and the relu, before analyse
    check_analyse_plan_apply(DataMovementSchedule, func, get_soc("Ascend910B1"),
                             [None, DataMovementKnobs(cores=4, tile_rows=2,
                                                      double_buffer=False)])
