"""GatedMatMulFusion (issue 19, LLaMA's SwiGLU): gate and up, two MatMuls of one input, and
silu(gate) * up as one kernel of the gated matmul template, with onnxruntime's numbers and the
emulator's counters equal to the plan on both SoCs."""
from __future__ import annotations

import pytest
from tvm import te

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.cost_model import estimate_kernel
from tvm_ascend.errors import TilingError
from tvm_ascend.partition.rules import group_rules
from tvm_ascend.schedules import GatedMatmulSchedule, MatmulKnobs, MatmulSchedule
from tvm_ascend.soc import get_soc

B1, P3 = get_soc("Ascend910B1"), get_soc("Ascend310P3")


def _swiglu_func(m, n, k, dtype="float16"):
    x = te.placeholder((m, k), dtype, "x")
    wg = te.placeholder((k, n), dtype, "wg")
    wu = te.placeholder((k, n), dtype, "wu")
    r1, r2 = te.reduce_axis((0, k), "r1"), te.reduce_axis((0, k), "r2")
    gate = te.compute((m, n), lambda i, j: te.sum(x[i, r1] * wg[r1, j], axis=r1), name="gate")
    up = te.compute((m, n), lambda i, j: te.sum(x[i, r2] * wu[r2, j], axis=r2), name="up")
    out = te.compute((m, n), lambda i, j: gate[i, j] * te.sigmoid(gate[i, j]) * up[i, j],
                     name="out")
    return te.create_prim_func([x, wg, wu, out])


def _swiglu_model(dtype, rows, hidden, inter, seed=3):
    b = ModelBuilder(dtype, seed=seed)
    x = b.input("x", [2, rows, hidden])
    gate = b.node("MatMul", [x, b.const(b.rng.uniform(-0.3, 0.3, (hidden, inter)), "wg")])
    up = b.node("MatMul", [x, b.const(b.rng.uniform(-0.3, 0.3, (hidden, inter)), "wu")])
    silu = b.node("Mul", [gate, b.node("Sigmoid", [gate])])
    b.output(b.node("Mul", [silu, up]), [2, rows, inter])
    return b, b.model()


def test_the_gated_template_takes_two_products_of_one_a_and_counts_both():
    """Only the gated template takes the pair (the matmul template refuses the second
    product); the plan holds two C tiles, each object half the L0/L1, issues both products'
    MACs and runs in step; split-K is refused (the join is not affine)."""
    func = _swiglu_func(300, 200, 96)
    assert not MatmulSchedule.applies(func)
    assert GatedMatmulSchedule.applies(func)
    for soc in (B1, P3):
        _, tiling = GatedMatmulSchedule.schedule(func, soc)
        plan = tiling.plan
        assert tiling.template == "matmul_gated" and plan.products == 2
        assert tiling.work.cube_macs == 2 * 304 * 208 * 96
        assert not plan.overlapped and "2 products a tile" in plan.pipeline
        assert 2 * 2 * plan.base_m * plan.base_k * 2 <= soc.l0a_bytes  # two objects, dbL0A 2
        assert tiling.ub_bytes >= 2 * plan.base_m * plan.align_n * 2   # C of each product
        est = estimate_kernel(func, tiling, soc)
        assert est.time_us >= est.roofline_us + est.launch_us and est.time_us >= est.cube_us
    with pytest.raises(TilingError, match="gated epilogue .* is not affine"):
        GatedMatmulSchedule.plan(GatedMatmulSchedule.analyse(func), B1, MatmulKnobs(k_splits=2))


def test_a_group_of_two_products_and_a_join_is_the_gated_rule():
    ops = ["relax.matmul", "relax.matmul", "relax.sigmoid", "relax.multiply"]
    assert group_rules(ops) == ["GatedMatMulFusion"]
    assert group_rules(ops + ["relax.nn.softmax"])[0] == "AttentionFusion"


# ~11 s each on the 2-core machine (a g++ of the emulated kernel): slow; the default run's
# numerical check of the gated kernel is test_horizontal_fusion's LLaMA projections (both SoCs)
@pytest.mark.slow
@pytest.mark.parametrize("dtype, soc, rows, hidden, inter", [
    ("float16", "Ascend910B1", 70, 200, 144),   # tails in M, N and K; several cores
    ("float32", "Ascend310P3", 37, 72, 80),     # no DataCopyPad: scalar tails
    ("float16", "Ascend910B1", 40, 520, 650),   # each weight (676 KB) larger than L1
    ("float16", "Ascend310P3", 40, 520, 650),
])
def test_swiglu_is_one_kernel_matching_onnx_with_counters_equal_to_the_plan(dtype, soc, rows,
                                                                             hidden, inter):
    b, model = _swiglu_model(dtype, rows, hidden, inter)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        fusion_level="aggressive", soc_version=soc))
    tolerance = "cube/float32" if dtype == "float32" else dtype
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], tolerance)
    (group,) = lib.report.to_json()["groups"]
    assert "GatedMatMulFusion" in group["rule"]
    tiling = group["tiling"]
    assert tiling["template"] == "matmul_gated" and tiling["cores"] >= 2
    (launch,) = lib.profile()
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["cube_macs"] == tiling["work"]["cube_macs"]
    assert launch["peak_ub_bytes"] == tiling["ub_bytes"] and launch["warnings"] == []
    # the merge is the partitioner's, with its reason in the report
    report = lib.fusion_report()
    assert report["kernels"]["ascend"] == 1
    assert "by GatedMatMulFusion" in report["groups"][0]["reason"]
