"""Split-K matmul (``MatmulKnobs.k_splits``): each work item is one K slice of an output tile,
added into C atomically after the launcher zeroed it; the epilogue (affine only) runs once per
tile. Numerics against onnxruntime with tails, several cores and K not divisible by the split,
plan figures equal to the emulator's counters, the refusals, the partitioner's suggestion, the
tuner's space and the timing model's zero fill."""
from __future__ import annotations

import dataclasses
import subprocess

import numpy as np
import pytest
from tvm import te, topi

import tvm
import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_printer, kernel_source
from tvm_ascend.codegen.code_buffer import CodeBuffer
from tvm_ascend.codegen.launcher import emit_acl_launcher, emit_launcher
from tvm_ascend.cost_model.timing import estimate_kernel, zero_fill_us
from tvm_ascend.errors import TilingError
from tvm_ascend.schedules import MatmulSchedule
from tvm_ascend.schedules.matmul import MatmulKnobs, matmul_shape, suggested_splits
from tvm_ascend.schedules.tiling import Tiling
from tvm_ascend.soc import get_soc

B1, P3 = get_soc("Ascend910B1"), get_soc("Ascend310P3")


def _te_func(m, k, n, dtype, epilogue="bias", batch=None):
    """C = A @ W (+ epilogue: "none", "bias", "scale" (0.5 * C + bias), "relu")."""
    lead = (batch,) if batch else ()
    a = te.placeholder(lead + (m, k), dtype, "a")
    w = te.placeholder(lead + (k, n), dtype, "w")
    bias = te.placeholder((n,), dtype, "bias")
    r = te.reduce_axis((0, k), "r")
    if batch:
        c = te.compute(lead + (m, n), lambda q, i, j: te.sum(a[q, i, r] * w[q, r, j], axis=r),
                       name="c")
    else:
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="c")
    out = {"none": c, "bias": topi.add(c, bias), "relu": topi.nn.relu(c),
           "scale": topi.add(topi.multiply(c, tvm.tirx.const(0.5, dtype)), bias)}[epilogue]
    return te.create_prim_func([a, w, out] if epilogue in ("none", "relu")
                               else [a, w, bias, out])


def _mlp(a_shape, w_shape, dtype, residual=False, bias=True, seed=5):
    b = ModelBuilder(dtype, seed=seed)
    x = b.input("x", a_shape)
    w = b.const(b.rng.standard_normal(w_shape) / np.sqrt(w_shape[-2]), "w")
    y = b.node("MatMul", [x, w])
    if bias:
        y = b.node("Add", [y, b.const(b.rng.standard_normal(w_shape[-1]), "bias")])
    out_shape = tuple(a_shape[:-1]) + (w_shape[-1],)
    if residual:
        y = b.node("Add", [y, b.input("r", out_shape)])
    b.output(y, out_shape)
    return b


@pytest.fixture
def force_splits(monkeypatch):
    """Every matmul plan has ``splits`` slices (the tuner's knob, forced so the build takes it
    whatever the estimate)."""
    plan = MatmulSchedule.plan

    def force(splits):
        def forced(analysis, soc, knobs=None):
            return plan(analysis, soc, dataclasses.replace(knobs or MatmulKnobs(),
                                                           k_splits=splits))
        monkeypatch.setattr(MatmulSchedule, "plan", staticmethod(forced))
    return force


CASES = [  # (A shape, W shape, dtype, splits, residual, target)
    ((37, 700), (700, 50), "float32", 3, False, "ascend"),       # tails in M, N, K; 3 slices
    ((300, 1000), (1000, 200), "float16", 4, True, "ascend"),    # several cores, residual
    ((2, 64, 520), (520, 96), "float16", 2, False, "ascend"),    # batch over shared weights
    ((100, 900), (900, 64), "float16", 2, True, "ascend/310p3"),  # no DataCopyPad, N aligned
]


@pytest.mark.parametrize("a_shape,w_shape,dtype,splits,residual,target", CASES)
def test_split_k_matches_onnxruntime_and_its_plan(force_splits, a_shape, w_shape, dtype,
                                                  splits, residual, target):
    force_splits(splits)
    b = _mlp(a_shape, w_shape, dtype, residual)
    model = b.model()
    lib = tvm_ascend.build(model, target=target)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], dtype)
    (group,) = lib.report.to_json()["groups"]
    tiling = group["tiling"]
    assert tiling["template"] == "matmul" and tiling["plan"]["k_splits"] == splits
    assert "split-K" in tiling["plan"]["split"]
    (launch,) = lib.profile()
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"]
    assert launch["cube_macs"] == tiling["work"]["cube_macs"]
    assert launch["warnings"] == []
    assert launch["block_dim"] == -(-tiling["cores"] // tiling["work"]["aiv_ratio"])
    source = lib.kernel_sources()[group["kernel"]]
    assert "mm.SetTail(singleM, singleN, singleK);" in source
    assert f"AscendC::SetAtomicAdd<{'half' if dtype == 'float16' else 'float'}>();" in source
    assert "if (kIdx == 0) {" in source  # the epilogue's offset once


def test_split_k_on_several_cores_with_a_tile_shared_by_them(force_splits):
    """One output tile, K cut in 8: eight cores add into the same C (the emulator's checks
    let atomic adds overlap, and would fail a plain write among them)."""
    force_splits(8)
    b = _mlp((64, 4096), (4096, 64), "float16", bias=False)
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float16")
    (group,) = lib.report.to_json()["groups"]
    assert group["tiling"]["total"] == 8 and group["tiling"]["cores"] == 8


def test_scaled_epilogue_scales_every_slice():
    """0.5 * C + bias: the first slice runs the epilogue, the others Muls by 0.5."""
    func = _te_func(128, 1024, 128, "float16", "scale")
    sched, tiling = MatmulSchedule.schedule(func, B1, MatmulKnobs(k_splits=4))
    assert tiling.plan.split_scale == 0.5 and "scale theirs by 0.5" in tiling.plan.split
    source = kernel_source(ScheduledKernel("k0", sched, tiling, {}), B1)
    assert "} else {" in source and "AscendC::Muls(cTile, cTile, static_cast<half>(0.5), " \
        "curM * stride);" in source


def test_non_affine_epilogue_refuses_split_k():
    func = _te_func(128, 1024, 128, "float16", "relu")
    with pytest.raises(TilingError, match="not scale \\* C \\+ t"):
        MatmulSchedule.schedule(func, B1, MatmulKnobs(k_splits=2))
    assert all(k.k_splits is None for k in MatmulSchedule.variants(func, B1))


def test_310p_refuses_split_k_where_rows_end_in_a_partial_block():
    """310P has no DataCopyPad: a row's last partial 32-byte block goes out by SetValue on the
    scalar unit, which does not add atomically."""
    func = _te_func(128, 1024, 100, "float16", "none")
    with pytest.raises(TilingError, match="cannot add atomically"):
        MatmulSchedule.schedule(func, P3, MatmulKnobs(k_splits=2))
    MatmulSchedule.schedule(func, B1, MatmulKnobs(k_splits=2))  # 910B: DataCopyPad


def test_k_slices_are_aligned_to_k_steps_and_the_last_takes_the_rest():
    func = _te_func(64, 700, 64, "float32", "none")
    _, tiling = MatmulSchedule.schedule(func, B1, MatmulKnobs(k_splits=3))
    plan = tiling.plan
    assert plan.k_slice % plan.base_k == 0 and plan.k_splits == 3
    assert 700 - 2 * plan.k_slice > 0
    with pytest.raises(TilingError, match="nothing to split"):
        MatmulSchedule.schedule(_te_func(64, 48, 64, "float32", "none"), B1,
                                MatmulKnobs(k_splits=2))


def test_split_plan_reads_back_from_json():
    _, tiling = MatmulSchedule.schedule(_te_func(128, 2048, 128, "float16"), B1,
                                        MatmulKnobs(k_splits=4))
    back = Tiling.from_json(tiling.to_json())
    assert back == tiling and back.work.zero_fill_bytes == 128 * 128 * 2


def test_suggested_splits_follow_catlass():
    """Split-K where the tiles are fewer than the cores; stream-K's balance where
    cores < tiles < 8 x cores and K > 3072; none for big outputs."""
    def shape(m, k, n):
        return matmul_shape(_te_func(m, k, n, "float16", "none"))
    assert suggested_splits(shape(128, 768, 768), B1) == 2      # BERT QKV: 6 tiles
    assert suggested_splits(shape(128, 3072, 768), B1) == 4     # BERT FFN-down: 6 tiles
    assert suggested_splits(shape(640, 4096, 1024), B1) == 4    # 40 tiles: waves 2 -> 1.75
    assert suggested_splits(shape(640, 2048, 1024), B1) == 1    # K <= 3072: no stream-K
    assert suggested_splits(shape(4096, 4096, 4096), B1) == 1   # 1024 tiles
    assert suggested_splits(shape(128, 256, 128), B1) == 1      # K too short to slice


def test_partitioner_estimates_the_suggested_split_and_the_tuner_searches_2_4_8():
    func = _te_func(128, 3072, 768, "float16")
    variants = MatmulSchedule.variants(func, B1)
    assert [k.k_splits for k in variants if k.k_splits] == [2, 4]  # up to the suggestion
    space = MatmulSchedule.knob_space(func, B1)
    assert {k.k_splits for k in space} >= {2, 4, 8}


def test_timing_model_charges_the_zero_fill():
    """BERT-base FFN-down at s128 (6 tiles of 128 x 128 on 24 cores): split in 2 on 12 cores,
    est. 13.9 us against 15.4 us even with C zeroed first (zero_fill_us in time_us); in 4 the
    start-up of 24 blocks costs more than the MTE2 time it saves."""
    func = _te_func(128, 3072, 768, "float16")
    _, plain = MatmulSchedule.schedule(func, B1)
    _, split = MatmulSchedule.schedule(func, B1, MatmulKnobs(k_splits=2))
    est_plain, est_split = estimate_kernel(func, plain, B1), estimate_kernel(func, split, B1)
    fill = zero_fill_us(128 * 768 * 2, B1)
    assert est_split.zero_fill_us == pytest.approx(fill) and fill > 0
    assert est_plain.zero_fill_us == 0
    assert est_split.time_us >= est_split.roofline_us + est_split.launch_us + fill
    assert est_split.time_us < est_plain.time_us


def test_launchers_zero_c_before_each_launch():
    """The emulator launcher memsets C; the ACL one aclrtMemsetAsync's it on the stream before
    the launch and before every timed launch, and passes g++ -fsyntax-only on the ACL stub."""
    from build_checks import acl_stub_command, acl_stub_unit
    from tvm_ascend.codegen.npu_unit import npu_unit_source

    sched, tiling = MatmulSchedule.schedule(_te_func(128, 2048, 128, "float16"), B1,
                                            MatmulKnobs(k_splits=4))
    kernel = ScheduledKernel("k0", sched, tiling, {"name": "k0", "rule": "test", "ops": []})
    printer = kernel_printer(kernel)
    printer.print(CodeBuffer())
    out = len(printer.kernel_params()) - 1
    buf = CodeBuffer()
    emit_launcher(buf, "k0", printer, printer.block_dim)
    assert f"std::memset(gm{out}, 0, {128 * 128 * 2});" in buf.text()
    buf = CodeBuffer()
    emit_acl_launcher(buf, "k0", printer, printer.block_dim)
    text = buf.text()
    memset = f"aclrtMemsetAsync(dev{out}, {128 * 128 * 2}, 0, {128 * 128 * 2}, stream)"
    assert text.count(memset) == 3  # Launch, the warm-up and each timed launch
    launch = text.index("k0<<<")
    assert text.index(memset) < launch
    rewritten, _ = acl_stub_unit(npu_unit_source(kernel, B1))
    done = subprocess.run(acl_stub_command(B1.name), input=rewritten, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_no_split_prints_as_before():
    """Without the knob nothing of split-K is printed or launched."""
    sched, tiling = MatmulSchedule.schedule(_te_func(128, 2048, 128, "float16"), B1)
    assert tiling.plan.k_splits == 1 and tiling.work.zero_fill_bytes == 0
    source = kernel_source(ScheduledKernel("k0", sched, tiling, {}), B1)
    assert "SetAtomicAdd<" not in source and "kIdx ==" not in source
