"""The matmul-rows tall form with asynchronous panels (issue #19, item 1): on 910B each core
cuts its rows into ``panels`` panels, posts panel i + 1 (``IterateAll<false>``) into the other
of two GM workspace slots before it waits for panel i (``WaitIterateAll``), so panel i's row
epilogue overlaps panel i + 1's cube work, and copies the next UB chunk in during this chunk's
epilogue where two fit. The kernels give onnxruntime's numbers with counters equal to the plan;
the timing model overlaps what the printed kernel overlaps."""
from __future__ import annotations

import json

import pytest

from tvm import te, topi

import tvm_ascend
from matmul_rows_checks import _check_one_kernel, _linear_norm, _te_func
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_source
from tvm_ascend.cost_model import estimate_kernel
from tvm_ascend.cost_model.timing import _overlapped_cycles
from tvm_ascend.partition.cost import GroupCost
from tvm_ascend.schedules import MatmulRowsKnobs, MatmulRowsSchedule
from tvm_ascend.schedules.matmul_rows import TALL_PANELS, TALL_SLOTS
from tvm_ascend.soc import get_soc

B1 = get_soc("Ascend910B1")
P3 = get_soc("Ascend310P3")


def _split_funcs(m, k, n, dtype):
    """The two kernels the partitioner weighs the fused one against: the MatMul + residual
    and the LayerNorm after it."""
    a, w = te.placeholder((m, k), dtype, "a"), te.placeholder((k, n), dtype, "w")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="matmul")
    res = te.placeholder((m, n), dtype, "res")
    x = te.placeholder((m, n), dtype, "x")
    gamma, beta = te.placeholder((n,), dtype, "gamma"), te.placeholder((n,), dtype, "beta")
    return (te.create_prim_func([a, w, res, topi.add(c, res)]),
            te.create_prim_func([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[-1],
                                                                    epsilon=1e-5)]))


def _force_knobs(monkeypatch, knobs: MatmulRowsKnobs) -> None:
    """Every matmul-rows plan of the build uses ``knobs`` (as a tuning record would)."""
    plan = MatmulRowsSchedule.plan
    monkeypatch.setattr(MatmulRowsSchedule, "plan",
                        staticmethod(lambda analysis, soc, _knobs=None: plan(analysis, soc, knobs)))


def _one_group_config(tmp_path, model):
    """A fusion plan that keeps the MatMul and its row epilogue one kernel whatever the
    estimate says of forced knobs."""
    plan_file = tmp_path / "fusion_plan.json"
    plan_file.write_text(json.dumps({"format": "tvm_ascend.fusion_plan", "version": 1, "groups": [
        {"id": "G0", "nodes": [x.name for x in model.graph.node if x.op_type != "Identity"],
         "rules": ["MatMulEpilogueFusion", "LayerNormFusion"]}]}))
    return tvm_ascend.CompileConfig(fusion_plan_file=str(plan_file))


@pytest.mark.parametrize("a_shape,n,dtype,norm,knobs,half", [
    # RMSNorm fp16, M = 900 over 3 panels a core (the last core's short), N = 300: two
    # 160-column cube tiles, 32-row cube tiles (a panel's last one short)
    ((3, 300, 40), 300, "float16", "rms", MatmulRowsKnobs(tall=True, base_m=32, panels=3), False),
    # LayerNormalization fp32, N = 200 on 4 cores, 2 panels each: several chunks a panel
    ((2, 170, 48), 200, "float32", "op", MatmulRowsKnobs(tall=True, cores=4, panels=2), False),
    # fp32 rows of 1000 (+ residual): 16 rows do not fit the UB twice, 8 do: half chunks,
    # still prefetched; 70 rows in 8-row panel steps (24-row panels, a 22-row tail), N not a
    # multiple of the 256-column cube tile
    ((70, 32), 1000, "float32", "op", MatmulRowsKnobs(tall=True, cores=3, panels=2), True),
    # the 1:2 mix: each AIV a client with its own panels, two an AIC. LayerNormalization fp32
    # on 6 clients (3 AIC blocks), 2 panels each, N = 200 in one 208-column cube tile
    ((2, 170, 48), 200, "float32", "op",
     MatmulRowsKnobs(tall=True, cores=6, panels=2, aiv_ratio=2), False),
    # RMSNorm fp16 M = 900 on 38 clients, an odd count (the last AIC block runs one), 3
    # panels of 8 rows each (so 8-row chunks), N = 300 in 160-column cube tiles, K = 40
    ((3, 300, 40), 300, "float16", "rms",
     MatmulRowsKnobs(tall=True, base_m=32, panels=3, aiv_ratio=2), True),
    # LayerNorm chain fp32 (+ residual) over rows of 1000: half chunks, 5 clients
    ((70, 32), 1000, "float32", "chain",
     MatmulRowsKnobs(tall=True, cores=5, panels=2, aiv_ratio=2), True),
])
def test_tall_panels_match_onnx_with_the_plans_counters(monkeypatch, tmp_path, a_shape, n,
                                                        dtype, norm, knobs, half):
    b = _linear_norm(a_shape, n, dtype, norm)
    config = _one_group_config(tmp_path, b.model())
    _force_knobs(monkeypatch, knobs)
    lib, tiling = _check_one_kernel(b, dtype, config)
    plan = tiling["plan"]
    assert plan["chunk_m"] > 0 and "IterateAll<false>" in plan["pipeline"]
    assert tiling["cores"] >= 2 and tiling["tiles_per_core"] == knobs.panels
    assert tiling["work"]["aiv_ratio"] == (knobs.aiv_ratio or 1)
    assert ("a 1:2 mix" in plan["pipeline"]) == (knobs.aiv_ratio == 2)
    assert tiling["buffer_num"] == 2 and (plan["chunk_m"] == 8) == half
    source = "".join(lib.kernel_sources().values())
    for line in ("if (tile + 1 < last) Post(tile + 1, 1 - slot);", "mm.WaitIterateAll();",
                 "mm.template IterateAll<false>(wsGm[static_cast<uint64_t>(slot) * panelElems], "
                 "0, false, true);", f"+ AscendC::GetBlockIdx() * {TALL_SLOTS} * panelElems",
                 # the next chunk's copies before this chunk's epilogue
                 "Finish(mOff + r0, curM, c % 2);"):
        assert line in source, line


def test_both_aivs_of_an_aic_make_the_out_projection_and_layernorm_pay():
    """BERT b16 s512's out-projection + residual + LayerNorm (8192x768x768, fp16, 910B1): at
    1:1 the row epilogue runs on one AIV an AIC and the fused kernel is no faster than the
    matmul and a LayerNorm kernel (est. 77.3 vs 77.6 us); in the 1:2 mix both AIVs take
    panels, the vector time halves and the partitioner's plan (the fastest variant) is the
    1:2 tall form, faster than the two kernels by over 10% (ESTIMATES). Each client has half
    its AIC's L0 and L1: 128-column cube tiles instead of 256."""
    func = _te_func(8192, 768, 768, "float16", residual=True)
    matmul, norm = _split_funcs(8192, 768, 768, "float16")
    cost = GroupCost(B1)
    split_us = cost.plan(matmul).time_us + cost.plan(norm).time_us
    fused = cost.plan(func)
    assert fused.template is MatmulRowsSchedule and fused.knobs.tall
    assert fused.knobs.aiv_ratio == 2 and fused.tiling.work.aiv_ratio == 2
    assert fused.tiling.cores > B1.ai_cores and fused.tiling.plan.base_n == 128
    assert fused.time_us < 0.9 * split_us
    one = [estimate_kernel(func, MatmulRowsSchedule.plan(MatmulRowsSchedule.analyse(func), B1,
                                                         MatmulRowsKnobs(tall=True, panels=p)),
                           B1).time_us for p in TALL_PANELS]
    assert min(one) > 0.97 * split_us  # at 1:1 the fusion would not pay
    est = estimate_kernel(func, fused.tiling, B1)
    assert est.time_us >= est.roofline_us + est.launch_us


def test_the_mix_is_the_tall_forms_and_910bs():
    """The 1:2 mix only in the tall form (the short one keeps whole rows in L0C, which two
    clients would share); 910B's variants try it, 310P's (coupled: no tall form) do not."""
    func = _te_func(512, 64, 256, "float32", residual=True)
    tall = [k for k in MatmulRowsSchedule.variants(func, B1) if k.tall]
    assert [(k.panels, k.aiv_ratio) for k in tall] == \
        [(p, None) for p in TALL_PANELS] + [(p, 2) for p in TALL_PANELS]
    assert MatmulRowsSchedule.variants(func, P3) == [MatmulRowsKnobs()]
    with pytest.raises(tvm_ascend.errors.TilingError, match="the 1:2 mix is the tall form's"):
        MatmulRowsSchedule.schedule(func, B1, MatmulRowsKnobs(aiv_ratio=2))
    with pytest.raises(tvm_ascend.errors.TilingError, match="a MIX kernel has 1 or 2 AIVs"):
        MatmulRowsSchedule.schedule(func, B1, MatmulRowsKnobs(tall=True, aiv_ratio=3))
    with pytest.raises(tvm_ascend.errors.TilingError, match="coupled chip"):
        MatmulRowsSchedule.schedule(func, P3, MatmulRowsKnobs(tall=True, aiv_ratio=2))


def test_panels_knob_cuts_each_cores_rows():
    """BERT b16 s512's out-projection + residual + LayerNorm: ``panels`` panels a core, two
    workspace slots of a panel each, B read once a panel; the partitioner's variants try 4, 3
    and 2; panels < 1 is refused."""
    func = _te_func(8192, 768, 768, "float16", residual=True)
    assert [k.panels for k in MatmulRowsSchedule.variants(func, B1)
            if k.tall and k.aiv_ratio is None] == list(TALL_PANELS) == [4, 3, 2]
    b_bytes = 768 * 768 * 2
    for panels in TALL_PANELS:
        sched, t = MatmulRowsSchedule.schedule(func, B1, MatmulRowsKnobs(tall=True,
                                                                         panels=panels))
        assert t.tiles_per_core == panels and t.work.panel_chunks == -(-t.plan.single_m // 16)
        assert t.plan.single_m % 8 == 0 and t.cores >= 22
        # B once a panel; A once, or once per 256-column cube tile where a panel of A
        # outgrows L1
        a_reads = (t.work.cube_operand_bytes - t.total * b_bytes) / (8192 * 768 * 2)
        assert a_reads == (1 if t.plan.single_m * 768 * 2 * 2 <= B1.l1_bytes else 3)
        printer = kernel_source(ScheduledKernel("k0", sched, t, {}), B1)
        assert f"constexpr uint32_t CHUNK_M = {t.plan.chunk_m};" in printer
    with pytest.raises(tvm_ascend.errors.TilingError, match="panels=0 must be >= 1"):
        MatmulRowsSchedule.schedule(func, B1, MatmulRowsKnobs(tall=True, panels=0))


def test_tall_panels_beat_the_synchronous_panel_and_the_short_form():
    """8192x768x768 + LayerNorm fp16: asynchronous panels overlap the cube with the epilogue,
    so four a core estimate faster than one (nothing to overlap: the AIC idles during the
    epilogue) and than the short form; no estimate beats the roofline (ESTIMATES)."""
    func = _te_func(8192, 768, 768, "float16", residual=True)
    _, short = MatmulRowsSchedule.schedule(func, B1)
    times = {}
    for panels in (1, 4):
        _, t = MatmulRowsSchedule.schedule(func, B1, MatmulRowsKnobs(tall=True, panels=panels))
        est = estimate_kernel(func, t, B1)
        assert est.time_us >= est.roofline_us + est.launch_us
        times[panels] = est.time_us
    assert times[4] < 0.95 * times[1]
    assert times[4] < 0.6 * estimate_kernel(func, short, B1).time_us


def test_panel_timing_overlaps_what_the_kernel_overlaps():
    """The timing of asynchronous panels, by hand: 2 panels of 2 chunks, cube 10 a chunk, AIV
    fetch 1, vector 5, copy-out 1. Panels 0 and 1 are both posted at 0: panel 0 ends at 20,
    panel 1 at 40 (back to back). Prefetch (two buffers): chunk 1's fetch is issued before
    chunk 0's epilogue. Panel 0: fetches 21, 22; vector 26, 31; outs 27, 32. Panel 1's
    first fetch waits for 40: 41, then 42 (gated by chunk 1 of panel 0's vector, 31); vector
    46, 51; last out 52."""
    stages = [40.0, 4.0, 20.0, 4.0]
    assert _overlapped_cycles(stages, 4, 2, buffers=2, gated=True, panel=True) == 52.0
    # one buffer: each fetch waits for the last chunk's vector work and copy-out
    # panel 0: 21 -> 26 -> 27; 28 -> 33 -> 34; panel 1: 41 -> 46 -> 47; 48 -> 53 -> 54
    assert _overlapped_cycles(stages, 4, 2, buffers=1, gated=True, panel=True) == 54.0
    # a third panel is posted only once panel 0's last vector work is done (31): it starts at
    # max(40, 31) = 40 and ends at 60; its first chunk: fetch 61, vector 66, ...
    assert _overlapped_cycles([60.0, 6.0, 30.0, 6.0], 6, 2, buffers=2, gated=True,
                              panel=True) == 72.0


def test_short_rounds_start_after_the_last_tiles_vector_work():
    """The short form's asynchronous rounds, gated (each row's reductions read back on the
    scalar unit): the next round's Iterate<false> is issued after the last tile's vector work,
    as the printed loop runs. Rounds of 1 tile, cube 10, fetch 1, vector 20, out 1: round 0
    ends at 10 (fetch 11, vector 31, out 32); round 1 starts at 31, not at 11: ends 41, fetch
    42, vector 62, out 63."""
    assert _overlapped_cycles([20.0, 2.0, 40.0, 2.0], 2, 1, buffers=2, gated=True) == 63.0
    # not gated (no reductions to wait for): the round starts once the last tile is fetched
    assert _overlapped_cycles([20.0, 2.0, 40.0, 2.0], 2, 1, buffers=2, gated=False) == 52.0
