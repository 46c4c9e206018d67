"""Reductions over axes other than the last (axis-reduce template): kernels vs onnxruntime.

Each model holds several reductions, each its own kernel, so one g++ build covers many shapes:
axis 0, a middle axis, two adjacent axes, keepdims 0/1, inner sizes that are not a multiple of
8/16, R longer than one UB tile (the accumulation streams), many cores, fused prologues and
epilogues. Every NPU kernel's GM traffic and UB plan equal the emulator's counters.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.errors import TilingError
from tvm_ascend.schedules import TEMPLATES, AxisReduceKnobs, AxisReduceSchedule
from tvm_ascend.schedules.axis_reduce import AxisReducePlan
from tvm_ascend.schedules.tiling import Tiling
from tvm_ascend.soc import get_soc


def _reduce(b: ModelBuilder, op: str, x: str, axes, keep: int) -> str:
    if op == "ReduceSum":  # opset 13+: axes is an input
        return b.node(op, [x, b.int_const(list(axes))], keepdims=keep)
    return b.node(op, [x], axes=list(axes), keepdims=keep)


def _out_shape(shape, axes, keep) -> tuple:
    axes = {a % len(shape) for a in axes}
    return tuple(1 if a in axes else d for a, d in enumerate(shape) if keep or a not in axes)


def _add_reduction(b, op, shape, axes, keep, name):
    x = b.input(name, shape)
    b.output(_reduce(b, op, x, axes, keep), _out_shape(shape, axes, keep))


def _build_and_check(builder, target="ascend", host_groups=0, templates=("axis_reduce",)):
    """Build, compare every output with onnxruntime, and every NPU kernel's plan with the
    emulator's counters; returns (lib, report)."""
    model = builder.model()
    lib = tvm_ascend.build(model, target=target)
    outs = lib.run(builder.feeds)
    for out, ref in zip(outs, run_onnxruntime(model, builder.feeds)):
        assert out.shape == ref.shape
        assert_close(out, ref, builder.dtype)
    report = lib.fusion_report()
    assert report["host_groups"] == host_groups, [g["reason"] for g in report["groups"]]
    by_kernel = {p["kernel"]: p for p in lib.profile()}
    for group in report["groups"]:
        if not group["on_npu"]:
            continue
        assert group["tiling"]["template"] in templates, group
        launch = by_kernel[group["kernel"]]
        assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
        assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"]
        assert launch["peak_ub_bytes"] == group["tiling"]["ub_bytes"]
        assert launch["block_dim"] == group["tiling"]["cores"]
        assert launch["warnings"] == []
    return lib, report


# (op, shape, axes, keepdims): axis 0, a middle axis, two adjacent axes (keepdims and not),
# inner sizes 6, 7, 10, 13 (no multiple of 8), a 5-D NCDHW mean over [2, 3] (not a global pool)
CASES_FP32 = [
    ("ReduceSum", (8, 6), [0], 0),
    ("ReduceMean", (4, 9, 10), [1], 0),
    ("ReduceMax", (3, 5, 4, 7), [1, 2], 1),
    ("ReduceMin", (2, 3, 5, 13), [-2], 1),
    ("ReduceMean", (2, 3, 4, 5, 6), [2, 3], 0),
]


def _add_fused_chains(b: ModelBuilder) -> None:
    """Abs -> ReduceSum -> Mul; Pow -> ReduceMean -> Sqrt (an L2 norm over channels) + a
    [O, I] input + an [I] bias: each chain should be one kernel."""
    x = b.input("x", (3, 5, 4, 9))
    b.feeds["x"] = b.rng.standard_normal((3, 5, 4, 9)).astype(np.float32)
    summed = _reduce(b, "ReduceSum", b.node("Abs", [x]), [1, 2], 1)
    b.output(b.node("Mul", [summed, b.const(np.array(0.5), "half")]), (3, 1, 1, 9))
    y = b.input("y", (2, 30, 5, 6))
    squares = b.node("Pow", [y, b.const(np.array(2.0), "two")])
    norm = b.node("Sqrt", [_reduce(b, "ReduceMean", squares, [1], 0)])
    other = b.input("other", (2, 5, 6))
    bias = b.const(b.rng.standard_normal((5, 6)), "bias")
    b.output(b.node("Add", [b.node("Add", [norm, other]), bias]), (2, 5, 6))
    # masked mean pooling over the sequence (sentence embeddings): the mask [B, S, 1] is one
    # value per reduced row (prologue, row by row), the count one value per batch (epilogue)
    tokens = b.input("tokens", (3, 17, 40))
    mask = b.input("mask", (3, 17, 1))
    b.feeds["mask"] = (b.rng.random((3, 17, 1)) < 0.7).astype(np.float32)
    masked = _reduce(b, "ReduceSum", b.node("Mul", [tokens, mask]), [1], 0)
    count = _reduce(b, "ReduceSum", mask, [1], 0)
    b.output(b.node("Div", [masked, count]), (3, 40))


def test_reduce_ops_over_other_axes_and_fused_chains_fp32():
    b = ModelBuilder("float32", seed=50)
    for k, (op, shape, axes, keep) in enumerate(CASES_FP32):
        _add_reduction(b, op, shape, axes, keep, f"c{k}")
    # R = 3000 rows of 40: several UB tiles per unit, the accumulator carries over
    long = b.input("long_r", (2, 3000, 40))
    b.feeds["long_r"] = b.rng.standard_normal((2, 3000, 40)).astype(np.float32)
    b.output(_reduce(b, "ReduceMax", long, [1], 0), (2, 40))
    # one outer row, I = 5000: the inner axis is split into chunks over the cores
    wide = b.input("wide", (1, 20, 5000))
    b.output(_reduce(b, "ReduceSum", wide, [1], 0), (1, 5000))
    _add_fused_chains(b)
    lib, report = _build_and_check(b, templates=("axis_reduce", "row_reduce"))
    assert report["npu_kernels"] == len(CASES_FP32) + 6
    # the mask count reduces [B, S, 1] over S: its inner size is 1, a row reduction
    assert sorted(g["tiling"]["template"] for g in report["groups"]).count("row_reduce") == 1
    report["groups"] = [g for g in report["groups"] if g["tiling"]["template"] == "axis_reduce"]
    by_shape = {(t["plan"]["outer"], t["plan"]["reduce"], t["plan"]["inner"]): t
                for t in (g["tiling"] for g in report["groups"])}
    assert by_shape[(2, 3000, 40)]["plan"]["row_tiles"] > 1
    assert by_shape[(1, 20, 5000)]["cores"] > 1
    assert by_shape[(1, 20, 5000)]["plan"]["chunks"] > 1
    assert by_shape[(1, 8, 6)]["plan"]["chunk"] == 8
    # the chains: prologue, reduction and epilogue in one kernel, intermediates in the UB
    for shape in ((3, 20, 9), (2, 30, 30), (3, 17, 40)):
        group = next(g for g in report["groups"] if g["tiling"] is by_shape[shape])
        assert len(group["ops"]) >= 3 and group["gm_bytes_saved"] > 0, group
        assert group["rule"] == "ReductionFusion"
    masked = by_shape[(3, 17, 40)]
    assert masked["plan"]["row_by_row"] and not by_shape[(2, 30, 30)]["plan"]["row_by_row"]
    source = next(s for s in lib.kernel_sources().values() if "AscendC::Max(accLocal" in s)
    for line in ("AscendC::DataCopyPad(dst, src, params, pad);",
                 "for (uint32_t m = n; m > 1;) {", "AscendC::Max(folded, folded,",
                 "AscendC::Max(accLocal, accLocal, folded, CHUNK);"):
        assert line in source


def test_reduce_ops_over_other_axes_fp16_and_the_prepare_rewrites():
    """fp16 kernels; a reduction over non-adjacent axes and a Softmax over another axis reach
    the NPU through the prepare rewrites (a transpose moves the axes last: row kernels), with
    a report record each."""
    b = ModelBuilder("float16", seed=51)
    for k, (op, shape, axes, keep) in enumerate(CASES_FP32[:4]):
        _add_reduction(b, op, shape, axes, keep, f"c{k}")
    _add_reduction(b, "ReduceSum", (4, 5, 6), [0, 2], 0, "split")
    y = b.input("y", (3, 8, 5))
    b.output(b.node("Softmax", [y], axis=1), (3, 8, 5))
    # the split reduction's reshape + transpose is one copy kernel: data_movement's, or the
    # elementwise template's where that is estimated faster (fewer cores start sooner)
    _, report = _build_and_check(b, templates=("axis_reduce", "row_reduce", "data_movement",
                                               "elementwise"))
    axis_groups = [g for g in report["groups"]
                   if g["on_npu"] and g["tiling"]["template"] == "axis_reduce"]
    assert len(axis_groups) == 4
    # fp16 rows are 16 elements per 32 bytes
    assert {g["tiling"]["plan"]["align"] for g in axis_groups} == {16}
    applied = {r["rewrite"] for r in report["prepare_rewrites"] if r["applied"]}
    assert applied == {"ReductionAxesToRows", "SoftmaxAxisToLast"}


def test_ascend310p3_without_datacopypad():
    """310P has no DataCopyPad: rows are copied one by one (tails element by element), or in
    one DataCopy where a unit's rows are whole aligned chunks back to back."""
    b = ModelBuilder("float32", seed=53)
    x = b.input("x", (3, 5, 4, 7))
    b.output(b.node("Mul", [_reduce(b, "ReduceSum", b.node("Abs", [x]), [1, 2], 1),
                            b.const(np.array(0.5), "half")]), (3, 1, 1, 7))
    _add_reduction(b, "ReduceMean", (4, 9, 16), [1], 0, "aligned")
    _add_reduction(b, "ReduceMin", (20, 600, 3), [0], 1, "long")
    lib, report = _build_and_check(b, target="ascend/310p3")
    assert report["npu_kernels"] == 3
    sources = "\n".join(lib.kernel_sources().values())
    assert "DataCopyPad" not in sources
    assert "if (len == CHUNK && inner == CHUNK) {" in sources


# ---- template level: no g++ build ---------------------------------------------------------

def _te_reduction(shape, axes, keep, epilogue=False, dtype="float32"):
    x = te.placeholder(shape, dtype, "x")
    ks = [te.reduce_axis((0, shape[a]), f"k{a}") for a in axes]

    def body(*index):
        it, kit, full = iter(index), iter(ks), []
        for a in range(len(shape)):
            if a in axes:
                if keep:
                    next(it)
                full.append(next(kit))
            else:
                full.append(next(it))
        return te.sum(te.abs(x(*full)), axis=ks)

    out_shape = _out_shape(shape, axes, keep)
    red = te.compute(out_shape, body, "red")
    out = te.compute(out_shape, lambda *i: red(*i) * 0.5, "epi") if epilogue else red
    return te.create_prim_func([x, out]), out_shape


@pytest.mark.parametrize("knobs", [AxisReduceKnobs(), AxisReduceKnobs(cores=3, chunk=8),
                                   AxisReduceKnobs(chunk=16, double_buffer=False)])
def test_scheduled_tir_computes_the_reduction_on_llvm(knobs):
    """The tiled loop nest (units split over cores, chunk tails predicated, epilogue at the
    unit) still computes the group: built for llvm and compared with numpy."""
    func, out_shape = _te_reduction((3, 6, 5, 21), [1, 2], 0, epilogue=True)
    scheduled, tiling = AxisReduceSchedule.schedule(func, get_soc("Ascend910B1"), knobs)
    assert (tiling.plan.outer, tiling.plan.reduce, tiling.plan.inner) == \
        (3, 30, 21)
    if knobs.chunk:
        assert tiling.cols == knobs.chunk
    x = np.random.default_rng(5).standard_normal((3, 6, 5, 21)).astype("float32")
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target="llvm")
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib["main"](tvm.runtime.tensor(x), out)
    assert_close(out.numpy(), np.abs(x).sum(axis=(1, 2)) * 0.5, "float32")


def test_plan_is_typed_and_round_trips_through_json():
    """The plan is an AxisReducePlan (no string keys left in ``params``) and comes back from
    the Tiling's JSON form (a fusion report's) equal, the bool and str fields included."""
    func, _ = _te_reduction((4, 9, 10), [1], 1)
    _, tiling = AxisReduceSchedule.schedule(func, get_soc("Ascend310P3"))
    assert isinstance(tiling.plan, AxisReducePlan)
    assert tiling.plan.data_copy_pad is False and tiling.plan.reducer == "sum"
    assert Tiling.from_json(tiling.to_json()) == tiling


def test_plan_bytes_knob_space_and_refusals():
    soc = get_soc("Ascend910B1")
    func, _ = _te_reduction((4, 9, 10), [1], 1)
    _, tiling = AxisReduceSchedule.schedule(func, soc)
    assert tiling.gm_read_bytes == 4 * 9 * 10 * 4 and tiling.gm_write_bytes == 4 * 10 * 4
    assert tiling.total == 4 and tiling.cores == 4 and tiling.plan.tile_rows == 9
    space = AxisReduceSchedule.knob_space(func, soc)
    assert space[0] == AxisReduceKnobs() and len(space) == len(set(space)) > 4
    assert any(not k.double_buffer for k in space)
    with pytest.raises(TilingError, match="chunk=12 must be a multiple of 8"):
        AxisReduceSchedule.schedule(func, soc, AxisReduceKnobs(chunk=12))
    last, _ = _te_reduction((4, 9, 10), [2], 0)
    decision = AxisReduceSchedule.applies(last)
    assert not decision and "row-reduce template" in decision.reason
    split, _ = _te_reduction((4, 9, 10), [0, 2], 0)
    assert "not adjacent" in AxisReduceSchedule.applies(split).reason
    # a weight per reduced row (w[k]: a matrix-vector product) is read row by row; a weight
    # [R, I] shared by every outer index is no layout the kernel streams
    a, w = te.placeholder((64, 32), "float32", "a"), te.placeholder((64,), "float32", "w")
    k = te.reduce_axis((0, 64), "k")
    gemv = te.create_prim_func([a, w, te.compute((32,), lambda i: te.sum(a[k, i] * w[k],
                                                                          axis=k))])
    _, gemv_tiling = AxisReduceSchedule.schedule(gemv, soc)
    assert gemv_tiling.plan.row_by_row
    assert gemv_tiling.gm_read_bytes == (64 * 32 + 64 * gemv_tiling.plan.chunks) * 4
    x, w2 = te.placeholder((4, 9, 10), "float32", "x"), te.placeholder((9, 10), "float32", "w2")
    k = te.reduce_axis((0, 9), "k")
    shared = te.create_prim_func([x, w2, te.compute((4, 10), lambda o, i: te.sum(
        x[o, k, i] * w2[k, i], axis=k))])
    assert "w2 is read before the reduction" in AxisReduceSchedule.applies(shared).reason
    names = [t.name for t in TEMPLATES]
    assert names.index("axis_reduce") == names.index("row_reduce") + 1


@pytest.mark.slow
@pytest.mark.parametrize("dtype,target", [("float16", "ascend/310p3"),
                                          ("float32", "ascend/910b1")])
def test_sweep_of_shapes(dtype, target):
    rng = np.random.default_rng(55)
    b = ModelBuilder(dtype, seed=56)
    ops = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")
    for k in range(8):
        rank = int(rng.integers(2, 5))
        shape = tuple(int(d) for d in rng.integers(1, 40, rank))
        first = int(rng.integers(0, rank - 1))
        last = int(rng.integers(first, rank - 1))
        shape = shape[:-1] + (max(2, shape[-1]),)
        _add_reduction(b, ops[k % 4], shape, list(range(first, last + 1)), k % 2, f"x{k}")
    _build_and_check(b, target=target)


def test_analyse_once_plan_per_knobs_apply_per_plan_is_schedule():
    """The contract, on |x| summed over two axes with an epilogue: one analysis serves every
    plan, and apply leaves it as it found it."""
    from template_contract import check_analyse_plan_apply

    func, _ = _te_reduction((3, 6, 5, 21), [1, 2], 0, epilogue=True)
    check_analyse_plan_apply(AxisReduceSchedule, func, get_soc("Ascend910B1"), [
        None, AxisReduceKnobs(cores=3, chunk=8), AxisReduceKnobs(chunk=16, double_buffer=False)])
