"""MatMul with a row-reduction epilogue (LayerNorm, RMSNorm, Softmax over N) as one kernel:
structure, numerics against onnxruntime, plan figures equal to the emulator's counters, the
refusal for rows too wide, and launches of a BERT encoder layer."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tvm_ascend
from conftest import run_onnxruntime
from tvm_ascend.errors import TilingError
from tvm_ascend.schedules import MatmulRowsKnobs, MatmulRowsSchedule, MatmulSchedule
from tvm_ascend.schedules.matmul_rows import MatmulRowsPlan
from tvm_ascend.schedules.tiling import UB_RESERVED_BYTES, Tiling
from benchmarks.models.bert import encoder_layer_inputs, encoder_layer_model
from tvm_ascend.soc import get_soc
from matmul_rows_checks import _assert_close, _check_one_kernel, _linear_norm, _te_func


CASES = [  # (A shape, N, dtype, norm): shapes where the timing model estimates the merge faster
    ((2, 20, 32), 64, "float32", "chain"),     # batch dims folded into M; M=40 not a tile multiple
    ((37, 48), 100, "float32", "op"),          # N not a multiple of 16; LayerNormalization
    ((3, 11, 40), 100, "float16", "rms"),      # RMSNorm chain; fp16 product, fp32 accumulation
    ((2, 100, 32), 768, "float32", "op"),      # BERT-base hidden: rows of 768 in one tile
    pytest.param((2, 50, 32), 768, "float16", "chain", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("a_shape,n,dtype,norm", CASES)
def test_matmul_with_row_epilogue_is_one_kernel(a_shape, n, dtype, norm):
    _check_one_kernel(_linear_norm(a_shape, n, dtype, norm), dtype)


def test_rows_tiling_reads_back_from_its_json_with_both_shapes():
    """The report's Tiling reads back as a Tiling (as the board reads it), equal through its
    JSON (as the IR carries it to the printer), with a MatmulRowsPlan and no untyped params;
    batch rows over shared weights are one taller product for the cube, while the printer
    addresses A by the group's batched shape."""
    b = _linear_norm((2, 20, 32), 64, "float32", "chain")
    _, reported = _check_one_kernel(b, "float32")
    tiling = Tiling.from_dict(reported)
    assert isinstance(tiling.plan, MatmulRowsPlan)
    assert Tiling.from_json(tiling.to_json()) == tiling
    shape, group = tiling.plan.shape, tiling.plan.group_shape
    assert (shape.batch, shape.m, shape.a_batched) == (1, 40, False)
    assert (group.batch, group.m, group.a_batched) == (2, 20, True)
    assert tiling.plan.cube_dims()[:3] == (40, 64, 32)


@pytest.mark.parametrize("a_shape,n,dtype,norm", [
    ((37, 48), 100, "float32", "op"),       # 100 % 8: 16-byte tails of the output and residual
    pytest.param((3, 11, 40), 100, "float16", "rms",  # 8-byte tails; batch folded into M
                 marks=pytest.mark.slow),
])
def test_matmul_with_row_epilogue_on_soc_without_datacopypad(a_shape, n, dtype, norm):
    """310P3 (no DataCopyPad, coupled cores): the row tails move element by element, counted
    exactly; several cores write neighbouring rows without overlap (the emulator checks)."""
    b = _linear_norm(a_shape, n, dtype, norm)
    lib, tiling = _check_one_kernel(b, dtype, target="ascend/310p3")
    lib.run(b.feeds)
    (launch,) = lib.profile()  # the check above took the first launch's
    assert launch["soc"] == "Ascend310P3" and tiling["cores"] > 1
    assert tiling["plan"]["data_copy_pad"] is False
    assert all("DataCopyPad" not in src for src in lib.kernel_sources().values())
    c0 = 32 // np.dtype(dtype).itemsize
    rows = int(np.prod(a_shape[:-1]))
    # output and residual rows, and the resident gamma/beta/bias columns on every core
    columns = {"op": 3, "rms": 2}[norm]
    assert tiling["work"]["scalar_elems"] == \
        2 * rows * (n % c0) + columns * tiling["cores"] * (n % c0)


def test_plan_of_rows_on_310p3_uses_its_larger_l0c_and_ub():
    """310P3's 256 KB L0C and UB hold more rows of 768 than 910B1's 128 KB / 192 KB, and no
    product goes through the GM workspace (coupled cores)."""
    func = _te_func(128, 768, 768, residual=True)
    soc310 = get_soc("Ascend310P3")
    _, t310 = MatmulRowsSchedule.schedule(func, soc310)
    _, t910 = MatmulRowsSchedule.schedule(func, SOC)
    p = t310.plan
    assert p.max_base_m > t910.plan.max_base_m == 16
    assert p.max_base_m * p.base_n * 4 <= soc310.l0c_bytes
    assert t310.ub_bytes <= soc310.ub_bytes - UB_RESERVED_BYTES
    out_bytes = 128 * 768 * 4
    assert t910.gm_write_bytes == 2 * out_bytes and t310.gm_write_bytes == out_bytes
    assert p.data_copy_pad is False and t310.work.scalar_elems == 0  # 768 % 8 == 0


def test_matmul_softmax_over_n_is_one_kernel():
    """MatMul -> Softmax over N is the AttentionFusion rule's (aggressive level)."""
    config = tvm_ascend.CompileConfig(fusion_level="aggressive")
    _check_one_kernel(_linear_norm((33, 24), 64, "float32", "softmax"), "float32", config)


@pytest.mark.slow
def test_bert_base_out_projection_with_layernorm_from_a_fusion_plan(tmp_path):
    """BERT-base out-projection sizes (K = N = 768): each core reads all of B for its rows, so
    the timing model estimates the merge slower and the default build keeps two kernels; a
    fusion plan that puts them in one group (a person's decision, no estimate overrides it)
    gets the one kernel: 16-row tiles (L0C and the UB hold 16 float32 rows of 768 with the
    residual tile) and an 8-deep K step (B's 768-wide tile must fit L0B twice)."""
    b = _linear_norm((40, 768), 768, "float32", "op")
    model = b.model()
    report = tvm_ascend.build(model).fusion_report()
    assert report["kernels"] == {"ascend": 2, "host": 0}
    (edge,) = report["unfused_edges"]
    assert "the cost model says the fused kernel is slower" in edge["reason"]
    plan = {"format": "tvm_ascend.fusion_plan", "version": 1, "groups": [
        {"id": "G0", "nodes": [n.name for n in model.graph.node if n.op_type != "Identity"],
         "rules": ["MatMulEpilogueFusion", "LayerNormFusion"]}]}
    path = tmp_path / "fusion_plan.json"
    path.write_text(json.dumps(plan))
    config = tvm_ascend.CompileConfig(fusion_plan_file=str(path))
    _, tiling = _check_one_kernel(b, "float32", config)
    p, soc = tiling["plan"], get_soc("Ascend910B1")
    assert (p["base_m"], p["base_n"], p["base_k"], tiling["cores"]) == (16, 768, 8, 3)
    assert p["base_m"] * p["base_n"] * 4 <= soc.l0c_bytes
    assert 2 * p["base_k"] * p["base_n"] * 4 <= soc.l0b_bytes


@pytest.mark.slow
def test_rows_too_wide_for_one_tile_stay_two_kernels():
    """N=4096 float32: 16 rows need 256 KiB of L0C; the template refuses with the numbers
    and the planner keeps the matmul and the LayerNorm apart, still correct."""
    b = _linear_norm((16, 16), 4096, "float32", "op", residual=False)
    model = b.model()
    lib = tvm_ascend.build(model)
    report = lib.fusion_report()
    assert report["kernels"] == {"ascend": 2, "host": 0}
    (edge,) = report["unfused_edges"]
    assert "matmul_rows: N=4096 is too wide for one tile of whole rows" in edge["reason"]
    assert "262144 L0C bytes" in edge["reason"]
    _assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float32")


# ---- the template on a PrimFunc (no planner, no build) ------------------------------------------
SOC = get_soc("Ascend910B1")


def test_template_takes_only_groups_with_a_row_reduction():
    """A MatMul with an elementwise epilogue is the matmul template's and attention scores the
    attention template's: the templates never take the same group."""
    func = _te_func(8, 16, 32, epilogue="relu")
    decision = MatmulRowsSchedule.applies(func)
    assert not decision and "no reduction after the matmul" in decision.reason
    assert MatmulSchedule.applies(func)
    with pytest.raises(TilingError, match="does not apply"):
        MatmulRowsSchedule.schedule(func, SOC)
    scores = _te_func(16, 16, 32, epilogue="softmax", batch=3)
    assert "attention template" in MatmulRowsSchedule.applies(scores).reason
    assert not MatmulSchedule.applies(_te_func(8, 16, 32))
    assert MatmulRowsSchedule.applies(_te_func(8, 16, 32))


@pytest.mark.parametrize("n,dtype,residual,limit", [
    (4096, "float32", False, "16 rows x 4096 float32 need 262144 L0C bytes"),
    (2032, "float32", True, "too wide for one UB tile of whole rows"),
    (2048, "float16", False, "16-deep B tile of 2048 columns needs 131072 L0B bytes"),
])
def test_rows_too_wide_are_refused_with_the_numbers(n, dtype, residual, limit):
    func = _te_func(32, 64, n, dtype, residual=residual)
    assert MatmulRowsSchedule.applies(func)
    with pytest.raises(TilingError, match=limit):
        MatmulRowsSchedule.schedule(func, SOC)


def test_plan_of_rows_of_768_fits_every_memory():
    """BERT-base out-projection sizes: 16-row float32 tiles (the UB holds C's tile and the
    residual's; L0C would hold 32), an 8-deep K step (B's 768-wide tile twice in L0B), one
    tile per core over 128 rows; the default knob first in the search space."""
    func = _te_func(128, 768, 768, residual=True)
    _, tiling = MatmulRowsSchedule.schedule(func, SOC)
    p = tiling.plan
    assert (p.base_m, p.base_n, p.base_k, p.max_base_m) == (16, 768, 8, 16)
    assert (tiling.cores, tiling.tiles_per_core, tiling.template) == (8, 1, "matmul_rows")
    assert p.base_m * p.base_n * 4 <= SOC.l0c_bytes
    assert 2 * p.base_k * p.base_n * 4 <= SOC.l0b_bytes
    assert tiling.ub_bytes <= SOC.ub_bytes - UB_RESERVED_BYTES
    space = MatmulRowsSchedule.knob_space(func, SOC)
    assert space[0] == MatmulRowsKnobs() and MatmulRowsKnobs(16, 12) in space
    with pytest.raises(TilingError, match="base_m=32 must be a multiple of 16 in 16..16"):
        MatmulRowsSchedule.schedule(func, SOC, MatmulRowsKnobs(base_m=32))


def test_one_rows_analysis_plans_every_knob_as_schedule_does():
    """One analysis (the row template's inlining, the LayerNorm's row program) serves every
    knob of the search space, each plan applied is what ``schedule`` gives, and ``apply``
    leaves the analysis as it found it; a plan the SoC cannot take is refused by ``plan``."""
    from template_contract import check_analyse_plan_apply

    func = _te_func(256, 64, 96, residual=True)
    space = MatmulRowsSchedule.knob_space(func, SOC)
    assert MatmulRowsKnobs(32, 12) in space  # 32-row tiles on half the cores
    check_analyse_plan_apply(MatmulRowsSchedule, func, SOC, [None] + space)
    wide = MatmulRowsSchedule.analyse(_te_func(32, 64, 4096, residual=True))
    with pytest.raises(TilingError, match="too wide"):
        MatmulRowsSchedule.plan(wide, SOC)


# Launches per layer now. TorchScript style: QKV, attention, out-proj + LN1, FFN-up + GELU,
# FFN-down + LN2, within issue #4's 6. Dynamo style adds the Split of the fused QKV (no Ascend
# kernel yet: host) and the Q and K reshape/transpose kernels (the data-movement rules'), 8.
MAX_LAUNCHES = {"torchscript": 6, "dynamo": 8}


@pytest.mark.slow  # tests/test_transformer_layer.py builds the same layers in the default run
@pytest.mark.parametrize("style", ["torchscript", "dynamo"])
def test_bert_encoder_layer_norms_join_their_projections(style):
    """Issue #4: a BERT layer as PyTorch exports it, fusion_level="aggressive": both
    LayerNorms (op chain or LayerNormalization) join the projection before them."""
    sizes = dict(batch=2, seq=16, hidden=64)
    model = encoder_layer_model(style=style, heads=2, **sizes)
    feeds = encoder_layer_inputs(**sizes)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(fusion_level="aggressive"))
    report = lib.fusion_report()
    launches = report["kernels"]["ascend"] + report["kernels"]["host"]
    rows = [g for g in report["groups"]
            if g["on_npu"] and g["tiling"]["template"] == "matmul_rows"]
    assert [[n for n in g["nodes"] if ".ln" in n][:1] for g in rows] == [
        ["layer.ln1" + ("" if style == "dynamo" else ".mean")],
        ["layer.ln2" + ("" if style == "dynamo" else ".mean")]]
    assert all(any(n.endswith("residual") for n in g["nodes"]) for g in rows)
    assert launches <= MAX_LAUNCHES[style], report["groups"]
    _assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
