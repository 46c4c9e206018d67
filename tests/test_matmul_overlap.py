"""Overlapped MIX pipelines of the matmul template (issue #19, item 1): on split chips the
rounds are asynchronous (Iterate<false> into the GM workspace, GetTensorC<false>, two UB
tiles), the plan records it and why, the timing model overlaps what the kernel overlaps, and
the kernels give onnxruntime's numbers with counters equal to the plan."""
from __future__ import annotations

import dataclasses

import pytest
from tvm import te

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_source
from tvm_ascend.cost_model import estimate_kernel
from tvm_ascend.cost_model.timing import _overlapped_cycles, _pipeline_cycles
from tvm_ascend.schedules import MatmulKnobs, MatmulSchedule
from tvm_ascend.schedules.tiling import ASYNC_EVENT_FETCHES
from tvm_ascend.soc import get_soc

B1, P3 = get_soc("Ascend910B1"), get_soc("Ascend310P3")


def _func(m, n, k, residual=False, dtype="float16"):
    a = te.placeholder((m, k), dtype, "a")
    w = te.placeholder((k, n), dtype, "w")
    bias = te.placeholder((n,), dtype, "bias")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="c")
    d = te.compute((m, n), lambda i, j: te.max(c[i, j] + bias[j], te.const(0, dtype)), name="d")
    args = [a, w, bias]
    if residual:
        res = te.placeholder((m, n), dtype, "res")
        args.append(res)
        d = te.compute((m, n), lambda i, j: d[i, j] + res[i, j], name="e")
    return te.create_prim_func(args + [d])


def test_split_chip_plans_asynchronous_rounds_of_at_most_14_tiles():
    func = _func(2048, 3072, 768)
    sched, tiling = MatmulSchedule.schedule(func, B1)
    plan = tiling.plan
    assert plan.overlapped and "asynchronous rounds" in plan.pipeline
    assert tiling.buffer_num == 2
    assert tiling.work.round_tiles == plan.round_tiles <= ASYNC_EVENT_FETCHES
    assert plan.workspace_bytes == plan.round_tiles * plan.base_m * plan.base_n * 2
    # two C tiles in the UB, and what the printed kernel reserves
    assert tiling.ub_bytes >= 2 * plan.base_m * plan.align_n * 2
    source = kernel_source(ScheduledKernel("k0", sched, tiling, {}), B1)
    assert "mm.SetWorkspace(wsGm);" in source
    assert "while (mm.template Iterate<false>()) {" in source
    assert "mm.template GetTensorC<false, true>(cTile, 0, true, curM, curN);" in source
    assert "pipe->InitBuffer(outQue, 2, " in source
    # rounds of any size stay for the tuner: one round per core here, 4 x fewer A re-reads
    _, loose = MatmulSchedule.schedule(func, B1, MatmulKnobs(round_tiles=0))
    assert loose.work.round_tiles > ASYNC_EVENT_FETCHES
    assert loose.work.cube_operand_bytes <= tiling.work.cube_operand_bytes


def test_coupled_chip_stays_synchronous():
    """310P3 has no asynchronous Iterate or SetWorkspace (Atlas inference cores): its
    kernels keep the synchronous, single-buffered form and say why."""
    sched, tiling = MatmulSchedule.schedule(_func(512, 768, 768), P3)
    assert not tiling.plan.overlapped and "coupled chip" in tiling.plan.pipeline
    assert (tiling.buffer_num, tiling.work.round_tiles, tiling.plan.workspace_bytes) == (1, 0, 0)
    source = kernel_source(ScheduledKernel("k0", sched, tiling, {}), P3)
    assert "while (mm.Iterate()) {" in source and "SetWorkspace" not in source
    assert "pipe->InitBuffer(outQue, 1, " in source


def test_two_tiles_that_do_not_fit_the_ub_stay_single_buffered_and_say_why():
    """256 x 128 float32 tiles of C alone, twice, take 256 KB of 910B1's UB: the plan stays
    synchronous. In fp16 two C tiles fit and the residual, which does not fit twice beside
    them, streams in chunks of rows (tests/test_matmul_stream_rows.py)."""
    func = _func(2048, 768, 768, dtype="float32")
    _, tiling = MatmulSchedule.schedule(func, B1, MatmulKnobs(base_m=256, base_n=128))
    assert not tiling.plan.overlapped and tiling.buffer_num == 1
    assert not tiling.plan.stream_rows
    assert "two 256x128 C tiles with the epilogue's buffers need" in tiling.plan.pipeline
    assert MatmulSchedule.schedule(func, B1)[1].plan.overlapped
    half = _func(2048, 768, 768, residual=True)
    _, streamed = MatmulSchedule.schedule(half, B1, MatmulKnobs(base_m=256, base_n=128))
    assert streamed.plan.overlapped and streamed.plan.stream_rows


def test_the_timing_model_overlaps_what_the_rounds_let_overlap():
    # one tile a round: the next round starts after the fetch, so only the AIV's epilogue and
    # copy-out overlap the AIC (2 + 3 of each 1 + 1 + 2 + 3 cycles after the first)
    assert _overlapped_cycles([10, 10, 20, 30], 10, 1) == pytest.approx(
        _pipeline_cycles([10, 10, 20, 30], 10, True))
    # past the API's 14 fine-grained events a fetch waits for the round: a round of 28 tiles
    # is slower than two of 14 when the AIV's work matches the AIC's
    stages = [280.0, 0.0, 280.0, 0.0]
    assert _overlapped_cycles(stages, 28, 28) > _overlapped_cycles(stages, 28, 14)
    # never faster than the busiest pipe, never slower than running them in step
    for stages in ([100, 10, 10, 10], [10, 100, 50, 50], [40, 30, 20, 10]):
        cycles = _overlapped_cycles(stages, 20, 10)
        assert max(stages) <= cycles <= _pipeline_cycles(stages, 20, False)


def test_an_overlapped_kernel_is_estimated_faster_than_in_step_and_above_its_roofline():
    func = _func(2048, 3072, 768)
    _, tiling = MatmulSchedule.schedule(func, B1)
    overlapped = estimate_kernel(func, tiling, B1)
    in_step = estimate_kernel(func, dataclasses.replace(
        tiling, buffer_num=1, work=dataclasses.replace(tiling.work, round_tiles=0)), B1)
    assert overlapped.time_us < 0.7 * in_step.time_us
    assert overlapped.time_us >= overlapped.roofline_us + overlapped.launch_us
    assert overlapped.time_us >= overlapped.cube_us


@pytest.mark.parametrize("soc", ["ascend", "ascend/310p3"])
def test_overlapped_kernel_matches_onnx_with_counters_equal_to_the_plan(soc):
    """Tails in M, N and K, a batch over shared weights, several cores and two rounds on some,
    a residual streamed in double-buffered, and a weight (550 KB) larger than L1:
    onnxruntime's numbers, and the emulator's counters (the workspace round trip included)
    equal the plan's."""
    b = ModelBuilder("float16", seed=5)
    x = b.input("x", (16, 250, 1100))
    w = b.const(b.rng.standard_normal((1100, 250)) * 0.05, "w")
    bias = b.const(b.rng.standard_normal(250), "bias")
    y = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])])
    y = b.node("Add", [y, b.input("r", (16, 250, 250))])
    b.output(y, (16, 250, 250))
    model = b.model()
    lib = tvm_ascend.build(model, target=soc)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float16")
    (group,) = lib.report.to_json()["groups"]
    tiling = group["tiling"]
    assert tiling["template"] == "matmul"
    assert tiling["plan"]["overlapped"] == (soc == "ascend")
    if soc == "ascend":
        assert tiling["block_len"] >= 2 and tiling["cores"] >= 2  # several rounds, cores
        assert tiling["buffer_num"] == 2
    (launch,) = lib.profile()
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["cube_macs"] == tiling["work"]["cube_macs"]
    assert launch["peak_ub_bytes"] == tiling["ub_bytes"] and launch["warnings"] == []
