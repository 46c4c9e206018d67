"""The Load3D convolution's plan (schedules/conv2d/load3d.py) without the emulator: what it
refuses and why, the sizes it picks against the SoC's memories, and that the timing model
charges exactly the counts the plan hands it (tests/test_emulator_load3d.py checks those
counts against the emulator's)."""

from __future__ import annotations

import pytest

from tvm_ascend.cost_model.timing import estimate_kernel
from tvm_ascend.cost_model.vector_work import VectorWork
from tvm_ascend.errors import TilingError
from tvm_ascend.schedules.conv2d.load3d import load3d_plan, load3d_refusal, pad_bottom_right
from tvm_ascend.schedules.conv2d.shape import ConvShape
from tvm_ascend.soc import get_soc


def conv(n, c, h, cout, k, s=1, p=0, dtype="float16", groups=1, d=1):
    o = (h + 2 * p - d * (k - 1) - 1) // s + 1
    return ConvShape(n, c, h, h, cout, k, k, o, o, (s, s), (d, d), (p, p), groups, dtype, "x", "w")


def test_refusals_name_the_rule():
    b1, p3 = get_soc("Ascend910B1"), get_soc("Ascend310P3")
    assert load3d_refusal(conv(1, 16, 8, 16, 3, p=1), b1) is None
    fp32 = conv(1, 16, 8, 16, 3, dtype="float32")
    assert "takes half only, not float32" in load3d_refusal(fp32, p3)
    assert load3d_refusal(conv(1, 16, 8, 16, 3, dtype="float32"), b1) is None
    assert "grouped convolution (4 groups)" in load3d_refusal(conv(1, 16, 8, 16, 3, groups=4), b1)
    assert "not on Ascend910A" in load3d_refusal(conv(1, 16, 8, 16, 3), get_soc("Ascend910A"))
    with pytest.raises(TilingError, match="conv2d through Load3D: stride"):
        load3d_plan(conv(1, 16, 200, 16, 3, s=64), b1)


def test_bottom_right_padding_comes_from_the_output_size():
    assert pad_bottom_right(conv(1, 16, 56, 16, 3, s=2, p=1)) == (0, 0)  # (27 * 2 + 3) - 56 - 1
    assert pad_bottom_right(conv(1, 16, 57, 16, 3, s=2, p=1)) == (1, 1)


@pytest.mark.parametrize("shape", [conv(32, 3, 224, 64, 7, 2, 3), conv(32, 64, 56, 64, 3, 1, 1),
                                   conv(32, 512, 7, 512, 3, 1, 1), conv(32, 1024, 14, 2048, 1, 2)])
def test_default_plan_fits_the_memories(shape):
    soc = get_soc("Ascend910B1")
    plan = load3d_plan(shape, soc)
    assert plan.l1_bytes <= soc.l1_bytes and plan.l0a_bytes <= soc.l0a_bytes
    assert plan.l0b_bytes <= soc.l0b_bytes and plan.l0c_bytes <= soc.l0c_bytes
    assert plan.n_tile % 16 == 0 and (plan.tap_step == shape.kh * shape.kw or plan.c1_step == 1)
    # every MAC of the convolution is issued (padding to fractals on top)
    macs = sum(b["cube_macs"] for b in plan.block_counts(7, "5hd"))
    assert macs >= shape.n * shape.cout * shape.pixels * shape.cin * shape.kh * shape.kw


def test_given_sizes_that_do_not_fit_are_a_sentence():
    with pytest.raises(TilingError, match=r"need L1 \d+, L0A \d+, L0B \d+, L0C \d+ B; Ascend910B1"):
        load3d_plan(conv(1, 64, 56, 64, 3, p=1), get_soc("Ascend910B1"), rows=8, c1_step=4)
    with pytest.raises(TilingError, match="split taps take one group"):
        load3d_plan(conv(1, 64, 56, 64, 3, p=1), get_soc("Ascend910B1"), 1, 2, 64, 4)


@pytest.mark.parametrize("soc_name,io", [("Ascend910B1", "5hd"), ("Ascend910B1", "nhwc"),
                                         ("Ascend310P3", "nchw")])
def test_timing_model_charges_the_plans_counts(soc_name, io):
    soc = get_soc(soc_name)
    plan = load3d_plan(conv(4, 64, 28, 96, 3, 1, 1), soc)
    tiling = plan.tiling(soc, io)
    blocks = plan.block_counts(tiling.cores, io)
    assert tiling.gm_read_bytes == sum(b["gm_read_bytes"] for b in blocks)
    assert tiling.gm_write_bytes == sum(b["gm_write_bytes"] for b in blocks)
    assert tiling.work.cube_macs == sum(b["cube_macs"] for b in blocks)
    est = estimate_kernel(None, tiling, soc, work=VectorWork(elem_bytes=2))
    share = tiling.block_len / tiling.total
    cube_cycles = tiling.work.cube_macs * share / soc.cube_macs_per_cycle_fp16
    assert est.cube_us == pytest.approx(cube_cycles / (soc.clock_mhz * 1e6) * 1e6)
    assert est.gm_bytes == tiling.gm_read_bytes + tiling.gm_write_bytes
    trans = sum(b["trans5hd_instrs"] for b in blocks)
    assert tiling.work.template_vector_bytes == trans * 512
    assert (est.vector_us > 0) == (io == "nchw")
