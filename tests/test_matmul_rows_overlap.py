"""Overlapped MIX pipelines of the matmul-rows template (issue #19, item 1): on 910B the
MatMul + bias + residual + LayerNorm/RMSNorm kernel iterates in the matmul template's
asynchronous rounds (Iterate<false> into the GM workspace, GetTensorC<false>, two tiles in
every queue) with its rows balanced over the cores; 310P stays synchronous. The kernels give
onnxruntime's numbers, the synchronous kernel's numbers bit for bit, and counters equal to
the plan."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import tvm_ascend
from matmul_rows_checks import _check_one_kernel, _linear_norm, _te_func
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_source
from tvm_ascend.cost_model import estimate_kernel
from tvm_ascend.schedules import MatmulRowsKnobs, MatmulRowsSchedule
from tvm_ascend.schedules import matmul_rows
from tvm_ascend.schedules.tiling import ASYNC_EVENT_FETCHES, UB_RESERVED_BYTES
from tvm_ascend.soc import get_soc

B1, P3 = get_soc("Ascend910B1"), get_soc("Ascend310P3")


def _force_knobs(monkeypatch, knobs: MatmulRowsKnobs) -> None:
    """Every matmul-rows plan of the build uses ``knobs`` (as a tuning record would)."""
    plan = MatmulRowsSchedule.plan
    monkeypatch.setattr(MatmulRowsSchedule, "plan",
                        staticmethod(lambda analysis, soc, _knobs=None: plan(analysis, soc, knobs)))


def test_split_chip_plans_asynchronous_balanced_rounds():
    """BERT-base b16 s512 out-projection + residual + LayerNorm (fp16): 16-row tiles fit the
    UB twice with the residual's, the rounds are asynchronous (at most 14 tiles), every one of
    the 24 cores has rows (8192 rows in 32-row tiles left 8 of them idle), and the printed
    kernel is the matmul template's overlapped form."""
    func = _te_func(8192, 768, 768, "float16", residual=True)
    sched, tiling = MatmulRowsSchedule.schedule(func, B1)
    p = tiling.plan
    assert p.overlapped and "asynchronous rounds" in p.pipeline
    assert (p.base_m, tiling.buffer_num, tiling.cores) == (16, 2, 24)
    assert tiling.work.round_tiles == p.round_tiles <= ASYNC_EVENT_FETCHES
    assert p.workspace_bytes == p.round_tiles * p.base_m * p.base_n * 2
    assert tiling.ub_bytes == matmul_rows.ub_bytes(_program(func), 768, 2, 16, 2) \
        <= B1.ub_bytes - UB_RESERVED_BYTES
    # the busiest core has the fewest rows any split into 16-row tiles gives
    assert tiling.tiles_per_core * p.single_m == -(-8192 // (24 * 16)) * 16
    source = kernel_source(ScheduledKernel("k0", sched, tiling, {}), B1)
    for line in ("mm.SetWorkspace(wsGm);", "while (mm.template Iterate<false>()) {",
                 "mm.template GetTensorC<false, true>(cTile, 0, true, curM, curN);",
                 "pipe->InitBuffer(outQue, 2, ", "pipe->InitBuffer(resQue, 2, "):
        assert line in source, line
    # the timing model runs the rounds: faster than the same tiles in step
    overlapped = estimate_kernel(func, tiling, B1)
    in_step = estimate_kernel(func, dataclasses.replace(
        tiling, buffer_num=1, work=dataclasses.replace(tiling.work, round_tiles=0)), B1)
    assert overlapped.time_us < 0.85 * in_step.time_us
    assert overlapped.time_us >= overlapped.roofline_us + overlapped.launch_us


def _program(func):
    return MatmulRowsSchedule.analyse(func).program


def test_rows_too_wide_for_two_ub_tiles_stay_synchronous_and_say_why():
    """float32 rows of 768 with a residual: two 16-row tiles of C and of the residual take
    192 KB, more than 910B1's UB: synchronous, single-buffered, and the plan says why."""
    func = _te_func(256, 64, 768, "float32", residual=True)
    sched, tiling = MatmulRowsSchedule.schedule(func, B1)
    p = tiling.plan
    assert not p.overlapped and "two 16x768 C tiles" in p.pipeline
    assert (tiling.buffer_num, tiling.work.round_tiles, p.workspace_bytes) == (1, 0, 0)
    source = kernel_source(ScheduledKernel("k0", sched, tiling, {}), B1)
    assert "while (mm.Iterate()) {" in source and "SetWorkspace" not in source


def test_coupled_chip_stays_synchronous():
    func = _te_func(512, 64, 96, "float16", residual=True)
    sched, tiling = MatmulRowsSchedule.schedule(func, P3)
    assert not tiling.plan.overlapped and "coupled chip" in tiling.plan.pipeline
    assert (tiling.buffer_num, tiling.work.round_tiles) == (1, 0)
    source = kernel_source(ScheduledKernel("k0", sched, tiling, {}), P3)
    assert "while (mm.Iterate()) {" in source and "pipe->InitBuffer(outQue, 1, " in source
    with pytest.raises(tvm_ascend.errors.TilingError, match="round_tiles=-1"):
        MatmulRowsSchedule.schedule(func, B1, MatmulRowsKnobs(round_tiles=-1))


@pytest.mark.parametrize("a_shape,n,dtype,norm,knobs", [
    # RMSNorm, fp16: M = 900 and N = 100 not tile multiples, rounds of 2 tiles: several rounds
    # on each of several cores
    ((3, 300, 40), 100, "float16", "rms", MatmulRowsKnobs(base_m=16, round_tiles=2)),
    # LayerNormalization, fp32, N = 200 > baseK, K = 48 a tail of the 8-deep K step; the
    # template's defaults (the partitioner's estimate prefers the tall form's 1:2 mix here)
    ((2, 170, 48), 200, "float32", "op", MatmulRowsKnobs()),
    # the TorchScript LayerNorm chain without a residual; the template's defaults
    pytest.param((700, 64), 128, "float16", "chain", MatmulRowsKnobs(),
                 marks=pytest.mark.slow),
])
def test_overlapped_rows_match_onnx_and_the_synchronous_kernel(monkeypatch, a_shape, n, dtype,
                                                                norm, knobs):
    """910B: onnxruntime's numbers with counters equal to the plan (the workspace round trip
    included), and the same numbers bit for bit as the kernel forced synchronous."""
    if knobs is not None:
        _force_knobs(monkeypatch, knobs)
    b = _linear_norm(a_shape, n, dtype, norm, residual=norm != "chain")
    lib, tiling = _check_one_kernel(b, dtype)
    assert tiling["plan"]["overlapped"] and tiling["buffer_num"] == 2
    assert tiling["cores"] >= 2
    if knobs is not None and knobs.round_tiles:
        assert tiling["work"]["round_tiles"] <= knobs.round_tiles
        assert tiling["block_len"] >= 2  # several rounds on the busiest core
    source = "".join(lib.kernel_sources().values())
    assert "Iterate<false>" in source
    overlapped = lib.run(b.feeds)[0]
    monkeypatch.setattr(matmul_rows, "overlap",
                        lambda soc, *_: (False, "synchronous (forced by the test)"))
    sync_lib, sync_tiling = _check_one_kernel(b, dtype)
    assert not sync_tiling["plan"]["overlapped"] and sync_tiling["buffer_num"] == 1
    assert "Iterate<false>" not in "".join(sync_lib.kernel_sources().values())
    np.testing.assert_array_equal(sync_lib.run(b.feeds)[0], overlapped)


def test_rows_on_310p_stay_synchronous_and_match_onnx():
    """310P3 (coupled, no DataCopyPad): the synchronous form, several cores, tails."""
    b = _linear_norm((3, 50, 40), 100, "float16", "rms")
    lib, tiling = _check_one_kernel(b, "float16", target="ascend/310p3")
    assert not tiling["plan"]["overlapped"] and tiling["buffer_num"] == 1
    assert tiling["cores"] >= 2
    assert "Iterate<false>" not in "".join(lib.kernel_sources().values())


# ---- the tall form: IterateAll panels into the workspace, the row epilogue over UB chunks ----
@pytest.mark.parametrize("a_shape,n,dtype,norm,knobs", [
    # RMSNorm, fp16: M = 900, N = 300 (two 160-column cube tiles, a tail), 32-row cube tiles
    # (two a panel, the second short), 48-row panels over 19 cores
    ((3, 300, 40), 300, "float16", "rms", MatmulRowsKnobs(tall=True, base_m=32)),
    # LayerNormalization, fp32, N = 200, one 88-row panel on each of 4 cores, in chunks
    ((2, 170, 48), 200, "float32", "op", MatmulRowsKnobs(tall=True, cores=4, panels=1)),
    # the TorchScript LayerNorm chain, fp16, rows of 768 (three 256-column cube tiles)
    pytest.param((300, 64), 768, "float16", "chain", MatmulRowsKnobs(tall=True),
                 marks=pytest.mark.slow),
])
def test_tall_rows_match_onnx_and_the_short_kernel(monkeypatch, tmp_path, a_shape, n, dtype,
                                                    norm, knobs):
    """910B, the tall form: onnxruntime's numbers with counters equal to the plan (the panel's
    round trip through the workspace included), and the numbers of the default kernel. A
    fusion plan keeps the merge whatever the estimate says of the forced knobs."""
    b = _linear_norm(a_shape, n, dtype, norm, residual=norm != "chain")
    model = b.model()
    plan_file = tmp_path / "fusion_plan.json"
    plan_file.write_text(json.dumps({"format": "tvm_ascend.fusion_plan", "version": 1, "groups": [
        {"id": "G0", "nodes": [x.name for x in model.graph.node if x.op_type != "Identity"],
         "rules": ["MatMulEpilogueFusion", "LayerNormFusion"]}]}))
    config = tvm_ascend.CompileConfig(fusion_plan_file=str(plan_file))
    lib, _ = _check_one_kernel(b, dtype, config)
    short = lib.run(b.feeds)[0]
    _force_knobs(monkeypatch, knobs)
    lib, tiling = _check_one_kernel(b, dtype, config)
    plan = tiling["plan"]
    assert plan["chunk_m"] > 0 and "tall: IterateAll" in plan["pipeline"]
    assert tiling["cores"] >= 2
    if knobs.cores == 4:  # several chunks a panel (the last core's panel 76 rows: a short one)
        assert plan["single_m"] > plan["chunk_m"]
    source = "".join(lib.kernel_sources().values())
    # panels posted asynchronously into two slots, no asynchronous rounds of tiles
    assert "mm.template IterateAll<false>(" in source and "mm.WaitIterateAll();" in source
    assert "Iterate<false>()" not in source
    assert "CubeFormat::ND," in source  # C's type: the panel goes to GM
    np.testing.assert_allclose(np.asarray(lib.run(b.feeds)[0], np.float64),
                               np.asarray(short, np.float64), rtol=1e-6, atol=1e-6)


def test_tall_form_is_split_chip_only_and_reads_b_once_a_panel():
    """The tall form refuses 310P (no GM round trip needed there); on 910B1 it reads B once
    per panel where the short form reads it once per 16-row tile, and the partitioner's
    variants offer it."""
    func = _te_func(8192, 768, 768, "float16", residual=True)
    with pytest.raises(tvm_ascend.errors.TilingError, match="coupled chip"):
        MatmulRowsSchedule.schedule(func, P3, MatmulRowsKnobs(tall=True))
    _, short = MatmulRowsSchedule.schedule(func, B1)
    _, tall = MatmulRowsSchedule.schedule(func, B1, MatmulRowsKnobs(tall=True))
    assert MatmulRowsKnobs(tall=True) in MatmulRowsSchedule.variants(func, B1)
    assert tall.plan.tall and tall.plan.base_n == 256 and tall.tiles_per_core == 4
    # B once per 88-row panel, four a core on all 24 cores, and A once (an 88-row panel of A
    # stays in L1 over its three 256-column tiles), against B once per 16 rows
    a_bytes, b_bytes = 8192 * 768 * 2, 768 * 768 * 2
    assert tall.plan.single_m == 88 and tall.total == -(-8192 // 88) == 94
    assert tall.cores == 24
    assert tall.work.cube_operand_bytes == a_bytes + 94 * b_bytes
    assert short.work.cube_operand_bytes >= 8192 // 16 * b_bytes
    assert estimate_kernel(func, tall, B1).time_us < estimate_kernel(func, short, B1).time_us
