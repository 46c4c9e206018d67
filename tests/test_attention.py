"""Attention as one kernel: the AttentionSchedule template, its printed kernel on the emulator,
and the emulator's Matmul API with A in the UB (what the kernel's P @ V needs)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tvm_ascend
from tvm_ascend.schedules import AttentionSchedule, RowReduceSchedule
from tvm_ascend.schedules.analysis.attention_shape import attention_shape
from tvm_ascend.schedules.attention import AttentionKnobs, AttentionPlan
from tvm_ascend.schedules.tiling import Tiling
from tvm_ascend.soc import get_soc
from conftest import TOLERANCES, run_onnxruntime
from onnx_models import ModelBuilder, attention_model
from onnx_models import causal_attention_model
from build_checks import fused_prim_func

ROOT = Path(__file__).resolve().parents[1]
# Online softmax reorders the sums (and fp16 rounds P before the product), hence a looser
# tolerance than the table's for fp32.


def _build(mb):
    return tvm_ascend.build(mb.model(),
                            config=tvm_ascend.CompileConfig(fusion_level="aggressive"))


def _attention_group(lib):
    groups = [g for g in lib.fusion_report()["groups"] if g["on_npu"]]
    found = [g for g in groups if g["tiling"]["template"] == "attention"]
    assert len(found) == 1, [(g["rule"], g["nodes"]) for g in groups]
    return found[0]


# ---- the template on a PrimFunc (no planner) ---------------------------------------------------
@pytest.mark.parametrize("proj,mask", [(True, "row"), (False, "full")])
def test_template_reads_the_head_transposes_as_strides(proj, mask):
    mb = attention_model(batch=2, seq=20, heads=3, dim=40, proj=proj, mask=mask)
    func = fused_prim_func(mb.model())
    assert AttentionSchedule.applies(func)
    shape = attention_shape(func)
    hd = 3 * 40
    if proj:  # Q[b, h, s, d] = q[b, s, h * 40 + d]: the transposes became strides
        assert (shape.q.batch_coefs, shape.q.row_stride, shape.q.col_stride) == \
            ((20 * hd, 40), hd, 1)
        assert shape.k_transposed and shape.k.row_stride == hd
        assert shape.out.row_stride == hd and shape.out.batch_coefs == (20 * hd, 40)
        assert shape.mask.row_stride == 0  # [B, 1, 1, S] broadcasts over rows and heads
    else:
        assert shape.k_transposed and shape.k.row_stride == 40  # the Transpose is a flag
        assert shape.mask.row_stride == 20 and shape.mask.batch_coefs == (400, 0)
    assert shape.scale == pytest.approx(1 / np.sqrt(40), rel=1e-6)
    assert shape.mask_coef == 1.0
    _, tiling = AttentionSchedule.schedule(func, get_soc("Ascend910B1"))
    assert tiling.template == "attention" and tiling.total == 2 * 3  # one query block each
    # a Tiling reads back equal from its JSON (the IR carries it so to the printer), the
    # plan's shape (operand maps, tuples) and UB layout included; no untyped params
    assert isinstance(tiling.plan, AttentionPlan) and tiling.plan.shape == shape
    back = Tiling.from_json(tiling.to_json())
    assert back == tiling
    # the buffer names bind the plan to its PrimFunc (they take no part in equality)
    assert [op.param for op in (back.plan.shape.q, back.plan.shape.mask)] == \
        [shape.q.param, shape.mask.param]
    assert sum(size for _, size in tiling.plan.ub_buffers) == tiling.ub_bytes


def test_template_refuses_other_groups_and_bad_knobs():
    mb = ModelBuilder("float32")
    x = mb.input("x", [4, 32])
    mb.output(mb.node("Softmax", [x], axis=-1), [4, 32])
    decision = AttentionSchedule.applies(fused_prim_func(mb.model()))
    assert not decision and "matmul" in decision.reason
    func = fused_prim_func(attention_model(seq=16).model())
    with pytest.raises(tvm_ascend.TilingError, match="multiple of 16"):
        AttentionSchedule.schedule(func, get_soc("Ascend910B1"), AttentionKnobs(base_q=24))


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_one_attention_analysis_plans_every_knob_as_schedule_does(soc):
    """One analysis (the operands' index maps, scale and mask) serves every plan, each plan
    applied is what ``schedule`` gives, ``apply`` leaves the analysis as it found it, and a
    group that is not attention is refused by ``analyse`` with the reason."""
    from template_contract import check_analyse_plan_apply

    func = fused_prim_func(attention_model(seq=40).model())
    check_analyse_plan_apply(AttentionSchedule, func, get_soc(soc),
                             [None, AttentionKnobs(base_q=32, base_kv=32),
                              AttentionKnobs(base_kv=64, cores=2)])
    mb = ModelBuilder("float32")
    x = mb.input("x", [4, 32])
    mb.output(mb.node("Softmax", [x], axis=-1), [4, 32])
    with pytest.raises(tvm_ascend.TilingError, match="attention template does not apply"):
        AttentionSchedule.analyse(fused_prim_func(mb.model()))


def test_long_rows_tile_where_the_row_template_cannot():
    """A softmax row of 16384 scores does not fit the UB: the row template streams it in
    three passes over GM (max, sum of exp, output); the attention template's UB does not
    depend on the sequence at all and never writes the scores."""
    soc = get_soc("Ascend910B1")
    sizes = []
    for seq in (64, 16384):
        func = fused_prim_func(attention_model(batch=1, seq=seq, heads=1, dim=16).model())
        _, tiling = AttentionSchedule.schedule(func, soc)
        sizes.append(tiling.ub_bytes)
    assert sizes[0] == sizes[1]
    mb = ModelBuilder("float32")
    x = mb.input("x", [1, 1, 2, 16384])
    mb.output(mb.node("Softmax", [x], axis=-1), [1, 1, 2, 16384])
    _, rows = RowReduceSchedule.schedule(fused_prim_func(mb.model()), soc)
    assert rows.plan.chunked.passes.count == 3


# ---- end to end: one kernel, onnxruntime's numbers, the plan's counters -----------------------
CASES = [
    dict(proj=True, mask="row", dtype="float32", dim=64, seq=20),
    dict(proj=False, mask="full", dtype="float32", dim=40, seq=100, scale_op="Mul"),
    dict(proj=True, mask="full", dtype="float16", dim=64, seq=70),
    pytest.param(dict(proj=False, mask="row", dtype="float16", dim=72, seq=150),
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case", CASES, ids=["proj-row-fp32", "full-mul-d40-fp32",
                                             "proj-full-fp16", "row-d72-fp16"])
def test_attention_is_one_kernel_matching_onnxruntime(case):
    mb = attention_model(batch=2, heads=2, **case)
    lib = _build(mb)
    group = _attention_group(lib)
    assert "AttentionFusion" in group["rule"]
    for node in ("matmul", "softmax", "add"):
        assert sum(n.startswith(node) for n in group["nodes"]) == (2 if node == "matmul" else 1)
    (out,) = lib.run(mb.feeds)
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + case["dtype"]])
    (launch,) = [p for p in lib.profile() if p["kernel"] == group["kernel"]]
    tiling = group["tiling"]
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["cube_macs"] == tiling["work"]["cube_macs"]
    assert launch["peak_ub_bytes"] == tiling["ub_bytes"] and launch["warnings"] == []


@pytest.mark.parametrize("scale_shape,scale_op,dtype,target", [
    ((1,), "Mul", "float32", "ascend"), ((1, 1), "Div", "float16", "ascend/310p3"),
    ((1, 1, 1, 1), "Mul", "float16", "ascend")])
def test_attention_with_a_one_element_scale_is_one_kernel(scale_shape, scale_op, dtype, target):
    """Exporters write the scale as Mul(scores, Constant([0.125])): a one-element constant of
    any rank scales the scores as a 0-d one does (it was 4 kernels, the attention template
    saying the scores were scaled by something other than a constant)."""
    mb = attention_model(batch=2, heads=2, seq=30, dim=32, proj=True, mask="row", dtype=dtype,
                         scale_op=scale_op, scale_shape=scale_shape)
    lib = tvm_ascend.build(mb.model(), target=target,
                           config=tvm_ascend.CompileConfig(fusion_level="aggressive"))
    group = _attention_group(lib)
    assert any(n.startswith(scale_op.lower()) for n in group["nodes"]), group["nodes"]
    assert group["tiling"]["plan"]["shape"]["scale"] == pytest.approx(1 / np.sqrt(32), rel=1e-3)
    assert lib.fusion_report()["kernels"]["host"] == 0
    (out,), (ref,) = lib.run(mb.feeds), run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + dtype])


def test_a_scale_read_at_run_time_is_named_in_the_refusal():
    """A scale that is a graph input is no constant: the template says which tensor it is."""
    mb = attention_model(proj=False, scale_op="Mul")
    scale = next(n for n in mb.nodes if n.op_type == "Mul").input[1]
    mb.inits = [t for t in mb.inits if t.name != scale]
    mb.input(scale, [1])
    decision = AttentionSchedule.applies(fused_prim_func(mb.model()))
    assert not decision
    assert "multiplied by" in decision.reason and "not a compile-time constant" in \
        decision.reason, decision.reason


@pytest.mark.parametrize("case", [
    dict(proj=True, mask="row", dtype="float32", dim=20, seq=37),
    dict(proj=False, mask="full", dtype="float16", dim=40, seq=50),
], ids=["proj-row-d20-fp32", "full-d40-fp16"])
def test_attention_on_a_soc_without_datacopypad(case):
    """Ascend310P3: coupled cores (no workspace bytes), mask and output rows as whole 32-byte
    blocks plus scalar tails; head dims and key blocks that are not multiples of 32 bytes."""
    mb = attention_model(batch=2, heads=2, **case)
    lib = tvm_ascend.build(mb.model(), target="ascend/310p3",
                           config=tvm_ascend.CompileConfig(fusion_level="aggressive"))
    group = _attention_group(lib)
    assert lib.fusion_report()["kernels"]["host"] == 0
    (out,) = lib.run(mb.feeds)
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + case["dtype"]])
    plan, work = group["tiling"]["plan"], group["tiling"]["work"]
    assert not plan["data_copy_pad"] and work["scalar_elems"] > 0
    assert work["workspace_read_bytes"] == work["workspace_write_bytes"] == 0
    (launch,) = [p for p in lib.profile() if p["kernel"] == group["kernel"]]
    assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
    assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"]
    assert launch["warnings"] == []
    assert "DataCopyPad" not in lib.kernel_sources()[group["kernel"]]


@pytest.mark.parametrize("where,dtype,target", [
    ("gpt2", "float32", "ascend"), ("gpt2", "float16", "ascend/310p3"),
    ("inside", "float16", "ascend"), ("rows", "float32", "ascend/310p3")])
def test_attention_takes_a_where_before_the_softmax(where, dtype, target):
    """A bool Where before the softmax (GPT-2's causal mask) is part of the attention kernel:
    the condition block is read per score tile (a byte an element), made a bit mask on the
    vector unit, and the scores outside it take the fill, before or after the additive mask
    as the graph says. One kernel, onnxruntime's numbers, the plan's bytes and UB."""
    mb = causal_attention_model(where=where, dtype=dtype)
    lib = tvm_ascend.build(mb.model(), target=target,
                           config=tvm_ascend.CompileConfig(fusion_level="aggressive"))
    group = _attention_group(lib)
    assert lib.fusion_report()["kernels"] == {"ascend": 1, "host": 0}
    assert any(n.startswith("where") for n in group["nodes"])
    (out,), (ref,) = lib.run(mb.feeds), run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + dtype])
    shape = group["tiling"]["plan"]["shape"]
    assert shape["keep"] is not None and shape["mask_inside"] == (where == "inside")
    (launch,) = [p for p in lib.profile() if p["kernel"] == group["kernel"]]
    assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
    assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"]
    assert launch["peak_ub_bytes"] == group["tiling"]["ub_bytes"] and launch["warnings"] == []
    source = lib.kernel_sources()[group["kernel"]]
    assert "AscendC::Select(row, keepBits, row," in source


def _tensor_bytes(batch_heads, seq, dim, base, elem=4):
    """Q, K, V, row mask and output as the kernel reads them: per (query block, key block)
    the Q rows and the K and V rows of the head dim, the mask block; the output once."""
    blocks = [min(base, seq - s) for s in range(0, seq, base)]
    read = sum((q + 2 * kv) * dim * elem + kv * elem for q in blocks for kv in blocks)
    return batch_heads * read, batch_heads * seq * dim * elem


def test_gm_traffic_has_no_score_matrix_term():
    """Tensor traffic (plan == emulator) is the formula above at two sequence lengths: no
    seq x seq score or probability matrix goes to GM. On 910B the score/probability/product
    tiles cross between AIC and AIV through the GM workspace (L2): counted apart."""
    for seq in (64, 192):
        mb = attention_model(batch=2, seq=seq, heads=4, dim=64, proj=False)
        lib = _build(mb)
        lib.run(mb.feeds)
        group = _attention_group(lib)
        plan = group["tiling"]["plan"]
        read, write = _tensor_bytes(8, seq, 64, 64)
        assert (plan["tensor_read_bytes"], plan["tensor_write_bytes"]) == (read, write)
        (launch,) = [p for p in lib.profile() if p["kernel"] == group["kernel"]]
        workspace = group["tiling"]["work"]["workspace_read_bytes"]
        assert launch["gm_read_bytes"] == read + workspace
        # workspace: score tile (float), probabilities (fp32), product tile per block pair
        assert workspace == 8 * ((seq * seq * 4) * 2 + seq * (-(-seq // 64)) * 64 * 4)
        # the split pipeline writes and reads the scores and the probabilities
        assert read + write < 8 * (4 * seq * seq * 4 + 4 * seq * 64 * 4)


@pytest.mark.slow
def test_long_sequence_attention_on_the_emulator():
    mb = attention_model(batch=1, seq=2048, heads=1, dim=16, proj=False)
    lib = _build(mb)
    _attention_group(lib)
    (out,) = lib.run(mb.feeds)
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out, ref, **TOLERANCES["cube/float32"])


# ---- the emulator: Matmul with A from the UB ---------------------------------------------------
M, N, K = 20, 24, 40
KERNEL = r"""
#include "kernel_operator.h"
#include "lib/matmul_intf.h"
#include "tikicpulib.h"
#include <cstdio>
#include <cstring>
using AT = matmul::MatmulType<AscendC::TPosition::VECOUT, CubeFormat::ND, float>;
using BT = matmul::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, float>;
using CT = matmul::MatmulType<AscendC::TPosition::VECIN, CubeFormat::ND_ALIGN, float>;
constexpr int M = %(M)d, N = %(N)d, K = %(K)d;

extern "C" __global__ __aicore__ void ub_a(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR ws,
                                           GM_ADDR tiling) {
  AscendC::SetSysWorkspace(ws);
  TCubeTiling t = *reinterpret_cast<TCubeTiling*>(tiling);
  AscendC::TPipe pipe;
  matmul::Matmul<AT, BT, CT, CT> mm;
  REGIST_MATMUL_OBJ(&pipe, AscendC::GetSysWorkSpacePtr(), mm, &t);
  AscendC::GlobalTensor<float> aGm, bGm, cGm;
  aGm.SetGlobalBuffer((__gm__ float*)a, M * K);
  bGm.SetGlobalBuffer((__gm__ float*)b, K * N);
  cGm.SetGlobalBuffer((__gm__ float*)c, M * N);
  AscendC::TBuf<AscendC::TPosition::VECOUT> aBuf;
  AscendC::TBuf<AscendC::TPosition::VECCALC> cBuf;
  pipe.InitBuffer(aBuf, M * K * sizeof(float));
  pipe.InitBuffer(cBuf, 32 * N * sizeof(float));
  AscendC::LocalTensor<float> aLocal = aBuf.Get<float>();
  AscendC::DataCopy(aLocal, aGm, M * K);
  AscendC::SetFlag<AscendC::HardEvent::MTE2_MTE3>(0);
  AscendC::WaitFlag<AscendC::HardEvent::MTE2_MTE3>(0);
  mm.SetTensorA(aLocal);
  mm.SetTensorB(bGm);
  mm.SetTail(M, N, K);
  AscendC::LocalTensor<float> cLocal = cBuf.Get<float>();
  mm.Iterate();
  mm.template GetTensorC<true, true>(cLocal, 0, true, M, N);
  AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(0);
  AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(0);
  AscendC::DataCopy(cGm, cLocal, M * N);
  mm.End();
}

int main() {
  float *a = (float*)AscendC::GmAlloc(M * K * 4), *b = (float*)AscendC::GmAlloc(K * N * 4);
  float* c = (float*)AscendC::GmAlloc(M * N * 4);
  for (int i = 0; i < M * K; ++i) a[i] = float((i * 7) %% 11) - 5.0f;
  for (int i = 0; i < K * N; ++i) b[i] = float((i * 5) %% 13) - 6.0f;
  TCubeTiling t{};
  t.usedCoreNum = 1; t.M = M; t.N = N; t.Ka = K; t.Kb = K;
  t.singleCoreM = 32; t.singleCoreN = 32; t.singleCoreK = K;
  t.baseM = 32; t.baseN = 32; t.baseK = 16; t.depthA1 = 1; t.depthB1 = 1;
  uint8_t* tl = (uint8_t*)AscendC::GmAlloc(sizeof(t));
  std::memcpy(tl, &t, sizeof(t));
  uint8_t* ws = (uint8_t*)AscendC::GmAlloc(1024);
  AscendC::SetKernelMode(KernelMode::MIX_AIC_1_1);
  ICPU_RUN_KF(ub_a, 1, (uint8_t*)a, (uint8_t*)b, (uint8_t*)c, ws, tl);
  printf("%%s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
  for (int i = 0; i < M * N; ++i) printf("%%g ", c[i]);
  printf("\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def ub_a_exe(tmp_path_factory) -> Path:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        pytest.skip(f"{cxx} not found")
    out = tmp_path_factory.mktemp("emu_ub_a")
    (out / "ub_a.cpp").write_text(KERNEL % {"M": M, "N": N, "K": K})
    proc = subprocess.run([cxx, "-std=c++17", "-O1", "-DASCENDC_CPU_DEBUG",
                           f"-I{ROOT / 'contrib' / 'ascendc_emu'}", str(out / "ub_a.cpp"),
                           "-o", str(out / "ub_a"), "-pthread"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "ub_a"


@pytest.mark.parametrize("soc,staged", [("Ascend910B1", True), ("Ascend310P3", False)])
def test_emulator_matmul_with_a_in_the_ub(ub_a_exe, soc, staged):
    env = {**os.environ, "ASCENDC_EMU_SOC": soc}
    proc = subprocess.run([str(ub_a_exe)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    stats_line, values = proc.stdout.strip().splitlines()
    stats = json.loads(stats_line)
    a = (np.arange(M * K) * 7 % 11 - 5.0).reshape(M, K)
    b = (np.arange(K * N) * 5 % 13 - 6.0).reshape(K, N)
    c = np.array(values.split(), dtype=np.float64).reshape(M, N)
    np.testing.assert_allclose(c, a @ b, rtol=1e-6, atol=1e-6)
    a_bytes, tile = M * K * 4, M * N * 4   # A over its K steps; the tile fetched into the UB
    assert stats["gm_read_bytes"] == a_bytes + K * N * 4 + (a_bytes + tile if staged else 0)
    assert stats["gm_write_bytes"] == M * N * 4 + (a_bytes + tile if staged else 0)
    assert stats["cube_macs"] == 32 * 32 * 40
