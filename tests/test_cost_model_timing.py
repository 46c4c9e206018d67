"""The timing model: roofline floor, monotone in bytes, double buffering, vector work, speed."""
from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given, settings, strategies as st
from tvm import te

from tvm_ascend.cost_model import (KernelEstimate, count_vector_work, estimate_kernel,
                                   estimate_launch)
from tvm_ascend.schedules import ElementwiseKnobs, ElementwiseSchedule, MatmulSchedule, Tiling
from tvm_ascend.schedules.tiling import KernelWork
from tvm_ascend.schedules import RowReduceSchedule
from tvm_ascend.soc import get_soc, soc_profiles

SOCS = sorted(soc_profiles())


def _chain(n, dtype="float16"):
    x = te.placeholder((n,), dtype, "x")
    y = te.compute((n,), lambda i: te.exp(x[i]) * x[i] + x[i], name="y")
    return te.create_prim_func([x, y])


def _softmax(rows, cols, dtype="float32"):
    from tvm import topi

    x = te.placeholder((rows, cols), dtype, "x")
    return te.create_prim_func([x, topi.nn.softmax(x, axis=-1)])


def _matmul(m, n, k, dtype="float16"):
    a = te.placeholder((m, k), dtype, "a")
    b = te.placeholder((k, n), dtype, "b")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    d = te.compute((m, n), lambda i, j: te.max(c[i, j], te.const(0, dtype)), name="d")
    return te.create_prim_func([a, b, d])


def _floor(est: KernelEstimate, soc, gm_bytes, macs, vec_bytes, dtype_bytes):
    """The roofline bound computed here independently of the model."""
    clock = soc.clock_mhz * 1e6
    rate = 1.0 if dtype_bytes <= 2 else 0.5
    return max(gm_bytes / (soc.gm_bandwidth_gbps * 1e9),
               macs / (soc.ai_cores * soc.cube_macs_per_cycle_fp16 * rate * clock),
               vec_bytes / (soc.vector_bytes_per_cycle * soc.vector_blocks * clock)) * 1e6


@st.composite
def plans(draw):
    """A random but consistent tiling plan (elementwise or matmul-like)."""
    soc = get_soc(draw(st.sampled_from(SOCS)))
    cores = draw(st.integers(1, soc.vector_blocks))
    tile_len = draw(st.integers(1, 1 << 16))
    tiles = draw(st.integers(1, 64))
    block_len = tile_len * tiles
    total = draw(st.integers((cores - 1) * block_len + 1, cores * block_len))
    read = draw(st.integers(0, 1 << 34))
    write = draw(st.integers(0, 1 << 32))
    gather = draw(st.integers(0, total))
    macs = draw(st.integers(0, 1 << 40))
    template = draw(st.sampled_from(["elementwise", "row_reduce", "matmul"]))
    steps = tiles
    if template == "matmul":  # base tiles of a singleM x singleN block each
        steps *= draw(st.integers(1, 32)) * draw(st.integers(1, 32))
    work = KernelWork(steps=steps, vector_repeats=min(block_len, total), cube_macs=macs,
                      scalar_elems=gather, per_output_element=template == "elementwise")
    tiling = Tiling(template, total, cores, block_len, tile_len, tiles,
                    draw(st.sampled_from([1, 2])), 0, 0, soc.ub_bytes, read, write, 1,
                    work=work)
    return soc, tiling


@settings(max_examples=150, deadline=None)
@given(plan=plans(), dtype=st.sampled_from(["float16", "float32"]))
def test_never_below_the_roofline_on_random_plans(plan, dtype):
    soc, tiling = plan
    func = _chain(64, dtype)
    work = count_vector_work(func, per_output_element=True)
    # the work counted from a 64-element function is scaled to this plan's size
    work = dataclasses.replace(work, by_class={c: n * tiling.total // 64
                                               for c, n in work.by_class.items()})
    est = estimate_kernel(func, tiling, soc, work=work)
    floor = _floor(est, soc, tiling.gm_read_bytes + tiling.gm_write_bytes,
                   tiling.work.cube_macs, work.weighted_ops * work.elem_bytes,
                   work.elem_bytes)
    assert est.roofline_us >= floor * (1 - 1e-12)
    assert est.time_us >= floor + est.launch_us - 1e-9
    assert est.time_us >= est.roofline_us + est.launch_us - 1e-9
    # the device's start-up: catlass' 1 + 7 x blocks / cores on 910B, of the AIVs for a
    # vector kernel, of the AICs for one that uses the cube
    capacity = soc.ai_cores if tiling.work.cube_macs else soc.vector_blocks
    share = min(1.0, tiling.cores / capacity)
    assert est.launch_us == pytest.approx(soc.startup_base_us + soc.startup_all_cores_us * share)
    assert (est.submit_low_us, est.submit_high_us) == (soc.submit_low_us, soc.submit_high_us)


@settings(max_examples=60, deadline=None)
@given(plan=plans(), extra_read=st.integers(0, 1 << 30), extra_write=st.integers(0, 1 << 30))
def test_monotone_in_bytes(plan, extra_read, extra_write):
    soc, tiling = plan
    func = _chain(64)
    more = dataclasses.replace(tiling, gm_read_bytes=tiling.gm_read_bytes + extra_read,
                               gm_write_bytes=tiling.gm_write_bytes + extra_write)
    assert estimate_kernel(func, more, soc).time_us >= estimate_kernel(func, tiling, soc).time_us


@settings(max_examples=60, deadline=None)
@given(plan=plans())
def test_double_buffering_is_never_slower(plan):
    soc, tiling = plan
    func = _chain(64)
    single = estimate_kernel(func, dataclasses.replace(tiling, buffer_num=1), soc)
    double = estimate_kernel(func, dataclasses.replace(tiling, buffer_num=2), soc)
    assert double.time_us <= single.time_us + 1e-9
    assert double.double_buffered and not single.double_buffered


@settings(max_examples=30, deadline=None)
@given(a=st.integers(0, 1 << 36), b=st.integers(0, 1 << 36), flops=st.integers(0, 1 << 44),
       soc_name=st.sampled_from(SOCS))
def test_estimate_launch_is_the_roofline_plus_launch_and_monotone(a, b, flops, soc_name):
    soc = get_soc(soc_name)
    lo, hi = sorted((a, b))
    est = estimate_launch(lo, flops, soc)
    startup = soc.startup_base_us + soc.startup_all_cores_us  # counted as a launch on all cores
    assert est.launch_us == pytest.approx(startup)
    assert est.time_us >= lo / (soc.gm_bandwidth_gbps * 1e3) + startup - 1e-9
    assert est.time_us == pytest.approx(est.roofline_us + startup)
    assert estimate_launch(hi, flops, soc).time_us >= est.time_us


def test_estimate_launch_rejects_negative_sizes():
    with pytest.raises(ValueError, match="gm_bytes"):
        estimate_launch(-1, 0, get_soc("Ascend910B1"))


def test_vector_work_counts_each_class_from_the_tir():
    work = count_vector_work(_chain(1000, "float32"), per_output_element=True)
    assert work.by_class["transcendental"] == 1000  # exp
    assert work.by_class["basic"] == 2000           # * and +
    assert work.elem_bytes == 4 and work.ops_per_unit == 3
    x = te.placeholder((256,), "float16", "x")
    func = te.create_prim_func([x, te.compute((256,), lambda i: te.sigmoid(x[i]) / x[i])])
    work = count_vector_work(func, per_output_element=True)
    assert work.by_class["composite"] == 256 and work.by_class["divide"] == 256
    assert work.weighted_ops == 256 * (8 + 2)


def test_transcendental_groups_cost_more_than_basic_ones():
    soc = get_soc("Ascend910B1")
    x = te.placeholder((1 << 20,), "float16", "x")
    basic = te.create_prim_func([x, te.compute(x.shape, lambda i: x[i] * x[i] + x[i])])
    heavy = te.create_prim_func([x, te.compute(x.shape, lambda i: te.tanh(te.exp(x[i])))])
    _, tb = ElementwiseSchedule.schedule(basic, soc)
    _, th = ElementwiseSchedule.schedule(heavy, soc)
    assert estimate_kernel(heavy, th, soc).vector_us > estimate_kernel(basic, tb, soc).vector_us


def test_scalar_gathers_cost_scalar_unit_time():
    soc = get_soc("Ascend910B1")
    func = _chain(1 << 16)
    _, tiling = ElementwiseSchedule.schedule(func, soc)
    gathered = dataclasses.replace(
        tiling, work=dataclasses.replace(tiling.work, scalar_elems=tiling.total))
    slow, fast = estimate_kernel(func, gathered, soc), estimate_kernel(func, tiling, soc)
    assert slow.scalar_us > 0 == fast.scalar_us and slow.time_us > fast.time_us


def test_matmul_rereads_from_l2_and_operand_loads_behind_the_cube():
    """Operand blocks read again are L2 hits (the plan's l2_operand_bytes): charged at HBM
    speed they would cost more MTE2 time; and the operand loads overlap the cube, so the
    estimate is below the serial sum of the pipes."""
    soc = get_soc("Ascend910B1")
    func = _matmul(2048, 3072, 768)
    _, tiling = MatmulSchedule.schedule(func, soc)
    assert tiling.work.l2_operand_bytes > 0
    from_hbm = dataclasses.replace(
        tiling, work=dataclasses.replace(tiling.work, l2_operand_bytes=0))
    fast, slow = estimate_kernel(func, tiling, soc), estimate_kernel(func, from_hbm, soc)
    assert fast.mte2_us < slow.mte2_us and fast.time_us <= slow.time_us
    serial = fast.mte2_us + fast.cube_us + fast.vector_us + fast.mte3_us + fast.launch_us
    assert fast.roofline_us + fast.launch_us <= fast.time_us < serial


@pytest.mark.parametrize("soc_name", ["Ascend910B1", "Ascend310P3"])
def test_real_templates_give_estimates_above_the_floor(soc_name):
    soc = get_soc(soc_name)
    cases = [(_chain(3_000_000), ElementwiseSchedule), (_softmax(4096, 1024), RowReduceSchedule)]
    if soc.has_data_copy_pad:
        cases.append((_matmul(1024, 1024, 1024), MatmulSchedule))
    for func, template in cases:
        _, tiling = template.schedule(func, soc)
        est = estimate_kernel(func, tiling, soc)
        assert est.time_us >= est.roofline_us + est.launch_us
        assert est.gm_bytes == tiling.gm_read_bytes + tiling.gm_write_bytes
        if template is MatmulSchedule:
            assert est.cube_us > 0 and est.flops >= 2 * 1024 ** 3
        else:
            assert est.vector_us > 0
        assert set(est.to_json()) >= {"time_us", "roofline_us", "mte2_us", "vector_us",
                                      "cube_us", "mte3_us", "launch_us", "submit_low_us",
                                      "submit_high_us"}


def test_template_double_buffer_knob_is_not_slower_on_a_streaming_chain():
    soc = get_soc("Ascend910B1")
    func = _chain(1 << 24)
    _, double = ElementwiseSchedule.schedule(func, soc, ElementwiseKnobs(double_buffer=True))
    _, single = ElementwiseSchedule.schedule(func, soc, ElementwiseKnobs(double_buffer=False))
    assert estimate_kernel(func, double, soc).time_us <= estimate_kernel(func, single, soc).time_us


def test_one_estimate_takes_well_under_a_millisecond():
    soc = get_soc("Ascend910B1")
    func = _softmax(512, 768)
    _, tiling = RowReduceSchedule.schedule(func, soc)
    estimate_kernel(func, tiling, soc)  # warm the per-function vector-work memo
    start = time.perf_counter()
    for _ in range(200):
        estimate_kernel(func, tiling, soc)
    per_call = (time.perf_counter() - start) / 200
    assert per_call < 2e-4, f"{per_call * 1e6:.0f} us per estimate"


def test_conv_vector_work_is_its_epilogue_per_epilogue_rows():
    """The conv kernel pads while it builds img2col (the plan counts that): the pad_temp block
    is no vector work; the epilogue (here a ReLU) is one call per ``epilogue_rows`` output-channel
    rows of a tile, and one per row when printed row by row."""
    import tvm_ascend
    from onnx_models import ModelBuilder
    from tvm_ascend import ir_attrs
    from tvm_ascend.schedules.conv2d import Conv2dKnobs, Conv2dSchedule

    b = ModelBuilder("float32", seed=3)
    x = b.input("x", (1, 8, 10, 10))
    w = b.const(b.rng.standard_normal((16, 8, 3, 3)), "w")
    b.output(b.node("Relu", [b.node("Conv", [x, w], pads=[1, 1, 1, 1])]), (1, 16, 10, 10))
    result = tvm_ascend.partition_for_ascend(b.model())
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    work = count_vector_work(func, img2col_prologue=True)
    assert work.ops_per_unit == 1 and work.total_ops == 16 * 100  # max(x, 0) per output
    soc = get_soc("Ascend910B1")
    _, tiling = Conv2dSchedule.schedule(func, soc)
    p = tiling.plan
    assert p.epilogue_rows == p.base_m and p.row_columns == 0  # a whole tile a call
    assert tiling.work.vector_repeats == tiling.tiles_per_core
    _, by_row = Conv2dSchedule.schedule(func, soc, Conv2dKnobs(epilogue_rows=1))
    assert by_row.work.vector_repeats == p.base_m * tiling.tiles_per_core
