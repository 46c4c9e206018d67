"""L2 accounting of the plain matmul from its walk (``schedules/matmul.py::blocks_in_flight``):
the reuse distance counts the A blocks and B panels actually in flight (the cores' contiguous
ranges of tiles, M fastest), a block several cores read in one step is fetched from HBM once
(the others' reads are L2 hits whatever the distance), and every estimate reports its HBM and
L2 bytes apart. All times are the timing model's estimates."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from tvm import te

from tvm_ascend.cost_model.timing import estimate_kernel
from tvm_ascend.schedules import MatmulSchedule
from tvm_ascend.schedules.matmul import blocks_in_flight
from tvm_ascend.soc import get_soc

B1, P3 = get_soc("Ascend910B1"), get_soc("Ascend310P3")


def _func(m, k, n, dtype="float16"):
    a, w = te.placeholder((m, k), dtype, "a"), te.placeholder((k, n), dtype, "w")
    r = te.reduce_axis((0, k), "r")
    return te.create_prim_func([a, w, te.compute(
        (m, n), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="c")])


def _shape(m, n, batch=1, a_batched=False, b_batched=False):
    return SimpleNamespace(batch=batch, m=m, n=n, a_batched=a_batched, b_batched=b_batched)


def test_blocks_in_flight_follow_the_cores_ranges():
    # 4 x 4 tiles, a column of 4 a core: one A block (read by all four at once), four panels
    assert blocks_in_flight(_shape(512, 512), 128, 128, 4) == (1, 4, 12, 0)
    # one tile a core: every tile at once, 4 A blocks and 4 B panels, each shared 4 ways
    assert blocks_in_flight(_shape(512, 512), 128, 128, 1) == (4, 4, 12, 12)
    # 24 cores, 43 tiles each of a 32 x 32 grid: 43 is 11 mod 32, so no two cores share an
    # A block in a step, and their ranges cross 24 columns
    assert blocks_in_flight(_shape(4096, 4096), 128, 128, 43)[:3] == (24, 24, 0)


def test_batched_operands_are_blocks_of_their_own_batch():
    shared = blocks_in_flight(_shape(128, 128, batch=4), 128, 128, 1)
    batched = blocks_in_flight(_shape(128, 128, batch=4, a_batched=True, b_batched=True),
                               128, 128, 1)
    assert shared == (1, 1, 3, 3) and batched == (4, 4, 0, 0)


def test_split_k_slices_are_blocks_of_their_own():
    """Two cores on two K slices of one tile read different halves of A and B."""
    assert blocks_in_flight(_shape(128, 128), 128, 128, 1, splits=2) == (2, 2, 0, 0)


def test_shared_panel_is_served_by_l2_beyond_its_reach():
    """310P3 (16 MB L2), 2048 x 8192 x 2048 fp16: eight cores each take one 256-row block of A
    against all of B (32 MB), which they read together: the walk's distance exceeds the L2,
    yet each B byte comes from HBM once for all eight (est. 6568 -> 5480 us)."""
    func = _func(2048, 8192, 2048)
    _, tiling = MatmulSchedule.schedule(func, P3)
    plan = tiling.plan
    in_a, in_b, shared_a, shared_b = blocks_in_flight(plan.shape, plan.single_m, plan.single_n,
                                                      tiling.block_len)
    assert (in_a, in_b, shared_a) == (tiling.cores, 1, 0) and shared_b == tiling.cores - 1
    work = tiling.work
    assert work.l2_operand_bytes == shared_b * plan.single_n * 8192 * 2 > 0
    est = estimate_kernel(func, tiling, P3)
    missed = dataclasses.replace(tiling, work=dataclasses.replace(work, l2_operand_bytes=0))
    assert est.time_us < estimate_kernel(func, missed, P3).time_us
    assert est.time_us == pytest.approx(5480, rel=0.02)


def test_every_estimate_reports_hbm_and_l2_bytes():
    func = _func(1024, 4096, 1024)
    for soc in (B1, P3):
        _, tiling = MatmulSchedule.schedule(func, soc)
        est = estimate_kernel(func, tiling, soc)
        assert est.hbm_bytes + est.l2_bytes == est.gm_bytes
        assert est.l2_bytes >= tiling.work.l2_operand_bytes > 0
        assert est.to_json()["hbm_bytes"] == est.hbm_bytes


def test_unshared_walk_beyond_l2_stays_hbm():
    """4096 x 32768 x 4096 fp16 on 910B1: 24 distinct 8 MB A blocks and 24 B panels in flight
    (384 MB > 192 MB) and no block shared in a step: every re-read is HBM traffic (est.
    11874 us). A swizzled tile order would share blocks, but no benchmark model's matmul
    needs one (their walks fit L2), so there is no swizzle knob."""
    func = _func(4096, 32768, 4096)
    _, tiling = MatmulSchedule.schedule(func, B1)
    assert tiling.work.l2_operand_bytes == 0
    est = estimate_kernel(func, tiling, B1)
    assert est.l2_bytes == tiling.work.workspace_read_bytes + tiling.work.workspace_write_bytes
