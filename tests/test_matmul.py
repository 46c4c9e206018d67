"""MatMul groups on the cube with their epilogue: numerics, exact GM bytes and MACs, on SoCs
with DataCopyPad (910B) and without it (310P3)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import te, topi

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_source
from tvm_ascend.errors import CodegenError
from tvm_ascend.schedules import MatmulSchedule
from tvm_ascend.schedules.matmul import MatmulPlan
from tvm_ascend.schedules.tiling import Tiling
from tvm_ascend.soc import get_soc

CASES = [  # (A shape, W shape, dtype, residual)
    ((37, 70), (70, 50), "float32", False),          # tails in M, N and K; one core
    ((2, 100, 64), (64, 96), "float32", True),       # batch with shared weights, residual add
    ((300, 128), (128, 200), "float16", False),      # several cores, fp16 with fp32 accumulate
    ((1, 8, 33), (33, 17), "float16", True),         # smaller than one fractal
]


def _mlp(a_shape, w_shape, dtype, residual, seed=3):
    b = ModelBuilder(dtype, seed=seed)
    x = b.input("x", a_shape)
    w = b.const(b.rng.standard_normal(w_shape) * 0.1, "w")
    bias = b.const(b.rng.standard_normal(w_shape[-1]), "bias")
    y = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])])
    out_shape = tuple(a_shape[:-1]) + (w_shape[-1],)
    if residual:
        y = b.node("Add", [y, b.input("r", out_shape)])
    b.output(y, out_shape)
    return b


@pytest.mark.parametrize("a_shape,w_shape,dtype,residual", CASES)
def test_matmul_bias_relu_is_one_kernel(a_shape, w_shape, dtype, residual):
    b = _mlp(a_shape, w_shape, dtype, residual)
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], dtype)
    (group,) = lib.report.to_json()["groups"]
    assert group["on_npu"] and group["tiling"]["template"] == "matmul"
    (launch,) = lib.profile()
    tiling = group["tiling"]
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["cube_macs"] == tiling["work"]["cube_macs"]
    # a 1:1 mix (one AIV per AIC) or the 1:2 variant where the partitioner estimates it faster
    # (fewer AIC blocks start sooner): the kernel runs the mix its plan chose, one block per AIC
    ratio = tiling["work"]["aiv_ratio"]
    assert ratio == launch["task_ratio"] in (1, 2)
    assert launch["block_dim"] == -(-tiling["cores"] // ratio) and launch["warnings"] == []
    assert f"KERNEL_TYPE_MIX_AIC_1_{ratio}" in lib.kernel_sources()[group["kernel"]]
    if tiling["plan"]["epilogue_rows"] > 1:  # the epilogue runs over several rows a call
        assert "for (uint32_t r = 0; r < curM; r += " in lib.kernel_sources()[group["kernel"]]


def test_batched_matmul_of_two_activations():
    b = ModelBuilder("float32", seed=4)
    q = b.input("q", (3, 20, 16))
    k = b.input("k", (3, 16, 24))
    b.output(b.node("MatMul", [q, k]), (3, 20, 24))
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float32")
    assert lib.report.to_json()["kernels"] == {"ascend": 1, "host": 0}


CASES_310P = {  # dtype: [(A shape, W shape, residual)]; Ascend310P3 has no DataCopyPad
    "float32": [((2, 100, 64), (64, 93), True)],   # batch, several cores, 20-byte row tails
    "float16": [((300, 128), (128, 200), False),   # several cores split along N, 16-byte tails
                ((1, 8, 33), (33, 7), True)],      # rows shorter than one block: all tail
}


def _add_mlp(b, index, a_shape, w_shape, residual):
    """MatMul -> bias -> ReLU (-> residual Add) on inputs of its own, as one more output."""
    x = b.input(f"x{index}", a_shape)
    w = b.const(b.rng.standard_normal(w_shape) * 0.1, "w")
    bias = b.const(b.rng.standard_normal(w_shape[-1]), "bias")
    y = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])])
    out_shape = tuple(a_shape[:-1]) + (w_shape[-1],)
    if residual:
        y = b.node("Add", [y, b.input(f"r{index}", out_shape)])
    b.output(y, out_shape)


@pytest.mark.parametrize("dtype", list(CASES_310P))
def test_matmul_on_soc_without_datacopypad(dtype):
    """310P3: rows go out (and the residual in) as whole 32-byte blocks plus element-wise
    tails; every MatMul with its epilogue is one cube kernel, the plan's GM bytes exactly the
    emulator's counters (tails counted as the scalar unit moves them), no block written into
    another core's columns (the emulator fails a launch whose blocks' GM writes overlap)."""
    cases = CASES_310P[dtype]
    b = ModelBuilder(dtype, seed=3)
    for index, case in enumerate(cases):
        _add_mlp(b, index, *case)
    model = b.model()
    lib = tvm_ascend.build(model, target="ascend/310p3")
    for out, ref in zip(lib.run(b.feeds), run_onnxruntime(model, b.feeds)):
        assert_close(out, ref, dtype)
    report = lib.report.to_json()
    assert report["kernels"] == {"ascend": len(cases), "host": 0}
    assert all("DataCopyPad" not in src for src in lib.kernel_sources().values())
    launches = {p["kernel"]: p for p in lib.profile()}
    c0 = 32 // np.dtype(dtype).itemsize
    for (a_shape, w_shape, residual), group in zip(cases, report["groups"]):
        tiling, launch = group["tiling"], launches[group["kernel"]]
        assert group["on_npu"] and tiling["template"] == "matmul"
        assert tiling["plan"]["data_copy_pad"] is False and launch["soc"] == "Ascend310P3"
        assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
        assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
        assert launch["cube_macs"] == tiling["work"]["cube_macs"]
        assert launch["peak_ub_bytes"] == tiling["ub_bytes"]
        # coupled cores: one per block (a 1:1 mix)
        assert tiling["work"]["aiv_ratio"] == launch["task_ratio"] == 1
        assert launch["block_dim"] == tiling["cores"] and launch["warnings"] == []
        # every row of the output (and of the residual) has a tail past its whole blocks,
        # and so has the bias column each core reads
        rows, tail = int(np.prod(a_shape[:-1])), w_shape[1] % c0
        assert tiling["work"]["scalar_elems"] == \
            rows * tail * (2 if residual else 1) + tiling["cores"] * tail
    assert max(g["tiling"]["cores"] for g in report["groups"]) > 1


def _te_matmul_bias_relu(m, k, n, dtype):
    """The PrimFunc FuseTIR makes of MatMul -> Add(bias) -> Relu, from TE/TOPI."""
    a, w = te.placeholder((m, k), dtype, "a"), te.placeholder((k, n), dtype, "w")
    bias = te.placeholder((n,), dtype, "bias")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="matmul")
    return te.create_prim_func([a, w, bias, topi.nn.relu(topi.add(c, bias))])


def test_matmul_plan_on_310p3_has_no_workspace_round_trip():
    """Coupled cube and vector cores: the product reaches the UB on chip, so the same group
    reads and writes fewer GM bytes on 310P3 than on 910B1 (where it goes through GM); the
    bias column's tail is read element by element on each core."""
    func = _te_matmul_bias_relu(300, 128, 200, "float16")
    _, t910 = MatmulSchedule.schedule(func, get_soc("Ascend910B1"))
    _, t310 = MatmulSchedule.schedule(func, get_soc("Ascend310P3"))
    out_bytes = 300 * 200 * 2
    assert t910.gm_write_bytes == 2 * out_bytes and t310.gm_write_bytes == out_bytes
    assert t910.gm_read_bytes - t310.gm_read_bytes == out_bytes
    assert 1 < t310.cores <= 8 and t310.plan.data_copy_pad is False
    assert t310.work.scalar_elems == 300 * (200 % 16) + t310.cores * (200 % 16)
    assert t910.work.scalar_elems == 0 and t910.plan.data_copy_pad is True


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_one_matmul_analysis_plans_every_variant_as_schedule_does(soc):
    """The partitioner estimates each of ``variants`` of a group: one analysis (the epilogue
    inlined, its row program read) serves them all and is kept for the function, each plan
    applied is what ``schedule`` gives, and ``apply`` leaves the analysis as it found it."""
    from template_contract import check_analyse_plan_apply

    func, chip = _te_matmul_bias_relu(300, 128, 200, "float16"), get_soc(soc)
    variants = MatmulSchedule.variants(func, chip)
    assert len(variants) >= 2  # twice the base tile along M; on 910B1 the 1:2 mix too
    check_analyse_plan_apply(MatmulSchedule, func, chip, [None] + variants)
    assert MatmulSchedule.analyse(func) is MatmulSchedule.analyse(func)


def test_matmul_tiling_reads_back_from_its_json_with_its_plan():
    """A Tiling reads back equal from its JSON (the IR carries it so from the schedule stage
    to the printer), MatmulPlan and product shape included; no untyped params are left."""
    func = _te_matmul_bias_relu(300, 128, 200, "float16")
    _, tiling = MatmulSchedule.schedule(func, get_soc("Ascend910B1"))
    assert isinstance(tiling.plan, MatmulPlan)
    back = Tiling.from_json(tiling.to_json())
    assert back == tiling and (back.plan.shape.a_name, back.plan.shape.b_name) == ("a", "w")
    assert (tiling.plan.shape.m, tiling.plan.shape.n, tiling.plan.shape.k) == (300, 200, 128)
    assert tiling.plan.cube_dims()[:3] == (300, 200, 128)


def test_a_plan_for_a_soc_with_datacopypad_is_not_printed_for_one_without():
    """The unit's copy helpers are the SoC's: a kernel whose MatmulPlan chose DataCopyPad
    (910B1) printed for 310P3 is refused with the reason (the check reads the typed plan)."""
    func = _te_matmul_bias_relu(64, 32, 48, "float32")
    scheduled, tiling = MatmulSchedule.schedule(func, get_soc("Ascend910B1"))
    kernel = ScheduledKernel("k0", scheduled, tiling, {})
    assert "DataCopyPad" in kernel_source(kernel, get_soc("Ascend910B1"))
    with pytest.raises(CodegenError, match="planned for a SoC with DataCopyPad but printed "
                                           "for Ascend310P3"):
        kernel_source(kernel, get_soc("Ascend310P3"))


def test_four_dimensional_batched_matmul_with_mask_epilogue():
    """Attention scores as exporters write them: [b, h, s, d] @ [b, h, d, s] * scale + mask."""
    b = ModelBuilder("float16", seed=5)
    q = b.input("q", (2, 3, 17, 16))
    k = b.input("k", (2, 3, 16, 17))
    mask = b.input("mask", (2, 1, 1, 17))
    scores = b.node("Mul", [b.node("MatMul", [q, k]), b.const(np.array(0.25), "scale")])
    b.output(b.node("Add", [scores, mask]), (2, 3, 17, 17))
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float16")
    (group,) = lib.report.to_json()["groups"]
    (launch,) = lib.profile()
    assert group["on_npu"] and launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]


def test_fp16_matmul_with_gelu_epilogue_computes_erf_in_float32_temporaries():
    """TOPI evaluates an fp16 erf in float32: the epilogue's temporaries are sized for it."""
    b = ModelBuilder("float16", seed=6)
    x = b.input("x", (24, 40))
    up = b.node("Add", [b.node("MatMul", [x, b.const(b.rng.standard_normal((40, 72)) * 0.1)]),
                        b.const(b.rng.standard_normal(72) * 0.1)])
    erf = b.node("Erf", [b.node("Div", [up, b.const(np.array(np.sqrt(2.0)))])])
    gelu = b.node("Mul", [b.node("Mul", [up, b.node("Add", [erf, b.const(np.array(1.0))])]),
                          b.const(np.array(0.5))])
    b.output(gelu, (24, 72))
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float16")
    (group,) = lib.report.to_json()["groups"]
    assert group["on_npu"] and group["tiling"]["template"] == "matmul"
    assert group["tiling"]["plan"]["slot_bytes"] == 4
    (launch,) = lib.profile()
    assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]


def test_partitioner_keeps_the_faster_tiling_variant_and_the_kernel_obeys_it():
    """The cost interface estimates the template's variants beside its defaults (here a
    128 x 256 base tile, which re-reads A half as often on 310P3) and passes the winner's knobs
    down: the built kernel has that tiling, its counters equal the plan, the report says what
    the variant beat."""
    b = ModelBuilder("float16", seed=9)
    _add_mlp(b, 0, (512, 1024), (1024, 512), False)
    model = b.model()
    lib = tvm_ascend.build(model, target="ascend/310p3")
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float16")
    (group,) = lib.report.to_json()["groups"]
    tiling = group["tiling"]
    assert (tiling["plan"]["base_m"], tiling["plan"]["base_n"]) == (128, 256)
    assert "knobs {'base_m': 128, 'base_n': 256}" in group["reason"]
    (launch,) = lib.profile()
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["peak_ub_bytes"] == tiling["ub_bytes"] and launch["warnings"] == []


def test_gemm_with_a_full_matrix_c_alone_matches_onnx():
    """ONNX's test_gemm_default_matrix_bias built alone (the node table builds it batched, its
    tensors prefixed): the epilogue input ``c`` made ``cTile``, the product tile's own name,
    and g++ refused the kernel."""
    from tools import onnx_node_table as table

    case = table.load_cases(["test_gemm_default_matrix_bias"], ["gemm"])[
        "test_gemm_default_matrix_bias"]
    assert [i.name for i in case["model"].graph.input] == ["a", "b", "c"]
    row = table.run_case(case)
    assert (row["result"], row["where"]) == ("passed", "npu"), row


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_matmul_with_k_1_is_an_outer_product_on_the_vector_unit(soc):
    """x[2, 1] @ w[1, 129] and a batched K = 1 product with its epilogue: each output is one
    product, a "reduction" over one element, which the row kernel refused ("reduction of a row
    scalar"); it is now a row kernel over rows of one element."""
    b = ModelBuilder("float32", seed=31)
    x, w = b.input("x", (2, 1)), b.input("w", (1, 129))
    b.output(b.node("MatMul", [x, w]), (2, 129))
    u, v = b.input("u", (2, 3, 1)), b.input("v", (2, 1, 5))
    bias = b.const(b.rng.standard_normal(5), "bias")
    b.output(b.node("Relu", [b.node("Add", [b.node("MatMul", [u, v]), bias])]), (2, 3, 5))
    model = b.model()
    for level in ("conservative", "aggressive"):
        lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(soc_version=soc,
                                                                      fusion_level=level))
        for out, ref in zip(lib.run(b.feeds), run_onnxruntime(model, b.feeds)):
            assert_close(out, ref, "float32")
        report = lib.fusion_report()
        assert report["host_groups"] == 0 and report["npu_kernels"] == 2
