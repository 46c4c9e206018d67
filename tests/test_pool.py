"""MaxPool / AveragePool on the vector unit (schedules/pool2d.py, codegen/kernels/pool2d.py).

Several independent pools share one model so that one g++ build covers a sweep; every output
is compared with onnxruntime and every kernel's GM bytes, cores and UB bytes from its tiling
plan must EQUAL the emulator's counters.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from tvm import relax, te, topi

import tvm_ascend
from conftest import TOLERANCES, assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.schedules import knobs_from_json
from tvm_ascend.errors import TilingError
from tvm_ascend.partition.patterns.conv import check_conv_call
from tvm_ascend.schedules import TEMPLATES, plan_template
from tvm_ascend.schedules.pool2d import Pool2dKnobs, Pool2dSchedule
from tvm_ascend.schedules.tiling import Tiling
from tvm_ascend.schedules.analysis.pool_window import pool_shape
from tvm_ascend.soc import get_soc

SOC = get_soc("Ascend910B1")

# (N, C, H, W, op, kernel, stride, pads (top, left, bottom, right), ceil_mode,
#  count_include_pad, dilation)
SWEEP = [
    (2, 5, 15, 15, "MaxPool", 3, 2, (1, 1, 1, 1), 0, 0, 1),     # odd H/W, C=5, batch 2
    (1, 2, 21, 19, "MaxPool", 7, 2, (3, 3, 3, 3), 0, 0, 1),     # 7x7
    (1, 3, 9, 9, "MaxPool", 3, 2, (1, 0, 2, 1), 1, 0, 1),       # asymmetric; ceil adds a row
    (1, 2, 12, 12, "MaxPool", 3, 1, (2, 2, 2, 2), 0, 0, 2),     # stride 1, dilation 2
    (1, 3, 10, 9, "AveragePool", 3, 2, (1, 1, 1, 1), 1, 1, 1),  # ceil + count_include_pad
    (1, 17, 12, 12, "AveragePool", 2, 2, (0, 0, 0, 0), 0, 0, 1),  # C=17: not a multiple of 8
    (2, 5, 17, 15, "AveragePool", 3, 1, (1, 1, 1, 1), 0, 0, 1),  # border windows: fewer taps
    (1, 4, 11, 10, "AveragePool", 3, 2, (0, 1, 1, 0), 1, 0, 1),  # asymmetric, ceil, no pads
    (1, 1, 7, 7, "AveragePool", 7, 1, (0, 0, 0, 0), 0, 1, 1),   # one unit: one core
    (4, 24, 14, 14, "MaxPool", 3, 2, (1, 1, 1, 1), 0, 0, 1),    # 96 planes: whole planes/tile
    (1, 1, 160, 400, "MaxPool", 3, 1, (1, 1, 1, 1), 0, 0, 1),   # input larger than the UB
]
# more of the same in the slow run
EXTRA_SWEEP = [
    (1, 3, 8, 8, "MaxPool", 2, 2, (0, 0, 0, 0), 0, 0, 1),
    (1, 3, 9, 11, "MaxPool", 3, 1, (0, 1, 2, 0), 1, 0, 1),
    (1, 3, 7, 7, "AveragePool", 7, 1, (0, 0, 0, 0), 0, 0, 1),
    (3, 16, 33, 31, "AveragePool", 3, 2, (1, 1, 1, 1), 1, 0, 1),
]


def _out_extent(size, kernel, stride, begin, end, ceil_mode, dilation) -> int:
    """ONNX / PyTorch output size: a ceil-mode window must start inside the padded input."""
    span = size + begin + end - ((kernel - 1) * dilation + 1)
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + begin:
        out -= 1
    return out


def _add_pool(b: ModelBuilder, case, index: int) -> tuple:
    n, c, h, w, op, k, s, pads, ceil_mode, cip, dil = case
    x = b.input(f"x{index}", (n, c, h, w))
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "ceil_mode": ceil_mode,
             "pads": [pads[0], pads[1], pads[2], pads[3]]}
    if op == "AveragePool":
        attrs["count_include_pad"] = cip
    else:
        attrs["dilations"] = [dil, dil]
    y = b.node(op, [x], **attrs)
    shape = (n, c, _out_extent(h, k, s, pads[0], pads[2], ceil_mode, dil),
             _out_extent(w, k, s, pads[1], pads[3], ceil_mode, dil))
    b.output(y, shape)
    return shape


def _pool_groups(lib, launches: dict | None = None) -> list[dict]:
    """The pool groups; every NPU group's plan equals its launch's counters (``launches``:
    ``lib.profile()`` by kernel, which a profile read empties)."""
    report = lib.report.to_json()
    launches = launches or {p["kernel"]: p for p in lib.profile()}
    pools = []
    for group in report["groups"]:
        if not group["on_npu"]:
            continue
        tiling, launch = group["tiling"], launches[group["kernel"]]
        assert launch["gm_read_bytes"] == tiling["gm_read_bytes"], group["kernel"]
        assert launch["gm_write_bytes"] == tiling["gm_write_bytes"], group["kernel"]
        assert launch["block_dim"] == tiling["cores"], group["kernel"]
        assert launch["peak_ub_bytes"] == tiling["ub_bytes"], group["kernel"]
        assert launch["warnings"] == [], group["kernel"]
        if tiling["template"] == "pool2d":
            pools.append(group)
    return pools


def _build_and_compare(b: ModelBuilder):
    model = b.model()
    lib = tvm_ascend.build(model)
    outs, refs = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    return lib, outs, refs


def _add_fused_pools(b: ModelBuilder) -> None:
    """Conv -> ReLU -> MaxPool (the conv keeps its ReLU, the pool is its own kernel);
    AveragePool -> per-channel Mul -> residual Add -> ReLU, ReLU -> MaxPool -> Sigmoid and
    per-channel Mul -> Sub -> AveragePool (padded): one pooling kernel each, its epilogue and
    prologue fused."""
    x = b.input("cx", (1, 3, 12, 12))
    weight = b.const(b.rng.standard_normal((8, 3, 3, 3)) * 0.2, "w")
    y = b.node("Relu", [b.node("Conv", [x, weight], pads=[1, 1, 1, 1], kernel_shape=[3, 3])])
    y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    b.output(y, (1, 8, 6, 6))
    x2 = b.input("ax", (2, 5, 10, 10))
    y2 = b.node("AveragePool", [x2], kernel_shape=[2, 2], strides=[2, 2])
    y2 = b.node("Mul", [y2, b.const(b.rng.standard_normal((1, 5, 1, 1)), "scale")])
    y2 = b.node("Relu", [b.node("Add", [y2, b.input("residual", (2, 5, 5, 5))])])
    b.output(y2, (2, 5, 5, 5))
    x3 = b.input("mx", (1, 4, 9, 9))
    y3 = b.node("MaxPool", [b.node("Relu", [x3])], kernel_shape=[3, 3], strides=[2, 2],
                pads=[1, 1, 1, 1])
    b.output(b.node("Sigmoid", [y3]), (1, 4, 5, 5))
    x4 = b.input("px", (2, 5, 10, 10))
    y4 = b.node("Mul", [x4, b.const(b.rng.standard_normal((1, 5, 1, 1)), "scale")])
    y4 = b.node("Sub", [y4, b.const(np.array(0.5), "shift")])
    y4 = b.node("AveragePool", [y4], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    b.output(y4, (2, 5, 5, 5))


@pytest.fixture(scope="module")
def float32_build():
    """One build (one g++ run) for the float32 sweep and the fused models."""
    b = ModelBuilder("float32", seed=5)
    shapes = [_add_pool(b, case, index) for index, case in enumerate(SWEEP)]
    _add_fused_pools(b)
    lib, outs, refs = _build_and_compare(b)
    launches = {p["kernel"]: p for p in lib.profile()}
    return lib, launches, shapes, outs, refs


def test_pool_sweep_float32_matches_onnxruntime_and_counters(float32_build):
    lib, launches, shapes, outs, refs = float32_build
    for case, shape, out, ref in zip(SWEEP, shapes, outs, refs):
        assert out.shape == ref.shape == shape, case
        np.testing.assert_allclose(out, ref, **TOLERANCES["float32"], err_msg=str(case))
    pools = _pool_groups(lib, launches)
    assert len(pools) == len(SWEEP) + 4  # every pool is one NPU kernel
    assert lib.report.to_json()["kernels"]["host"] == 0
    tilings = [g["tiling"] for g in pools]
    cores = sorted(t["cores"] for t in tilings)
    assert cores[0] == 1 and cores[-1] == SOC.vector_blocks  # one core and all of them
    assert max(t["plan"]["planes_per_tile"] for t in tilings) > 1  # whole planes per tile
    big = next(t for t in tilings if t["plan"]["shape"]["h"] == 160)
    assert 160 * 400 * 4 > big["ub_capacity"] and big["plan"]["chunks"] > 1


def test_conv_relu_maxpool_and_fused_epilogues(float32_build):
    lib, launches, _, outs, refs = float32_build
    for out, ref in zip(outs[len(SWEEP):], refs[len(SWEEP):]):
        assert_close(out, ref, "float32_model")  # the conv's sums run in another order
    groups = lib.report.to_json()["groups"]
    conv = next(g for g in groups if any(op["op"] == "relax.nn.conv2d" for op in g["ops"]))
    assert [op["op"] for op in conv["ops"]] == ["relax.nn.conv2d", "relax.nn.relu"]
    fused = {g["kernel"]: g for g in _pool_groups(lib, launches) if len(g["ops"]) > 1}
    assert all(g["rule"] == "PoolingFusion" and g["on_npu"] for g in fused.values())
    ops = sorted([op["op"].split(".")[-1] for op in g["ops"]] for g in fused.values())
    assert ops == [["avg_pool2d", "multiply", "add", "relu"],
                   ["multiply", "subtract", "avg_pool2d"],
                   ["relu", "max_pool2d", "sigmoid"]]


def _float16_against_float32(cases, seed: int):
    """(lib, outputs, references) of ``cases`` built in float16; the references are
    onnxruntime's float32 run of the same model on the same (fp16-valued) inputs: its float16
    AveragePool sizes ceil-mode outputs differently from its own float32 kernel (one row short
    for a 10x9 input, 3x3 stride 2, pads 1), which TVM and the ONNX spec do not."""
    b16, b32 = ModelBuilder("float16", seed=seed), ModelBuilder("float32", seed=seed)
    for index, case in enumerate(cases):
        _add_pool(b16, case, index)
        _add_pool(b32, case, index)
    lib = tvm_ascend.build(b16.model())
    outs = lib.run(b16.feeds)
    refs = run_onnxruntime(b32.model(), {k: v.astype(np.float32) for k, v in b16.feeds.items()})
    return lib, outs, refs


def _in_order(text: str, parts: list[str]) -> bool:
    at = 0
    for part in parts:
        at = text.find(part, at)
        if at < 0:
            return False
    return True


def test_kernel_sources_reduce_windows_on_the_vector_unit(float32_build):
    """The window is reduced by vector instructions (rows, then one Gather of the columns);
    no input element is read on the scalar unit."""
    lib = float32_build[0]
    sources = lib.kernel_sources()
    groups = lib.report.to_json()["groups"]
    plain = {g["ops"][0]["op"]: sources[g["kernel"]] for g in groups if len(g["ops"]) == 1}
    common = ["AscendC::Duplicate(vRow", "offs.SetValue", "HardEvent::S_V", "CopyRowsIn(inTile"]
    assert _in_order(plain["relax.nn.max_pool2d"], common + [
        "AscendC::Max(vRow[V_LEFT]", "AscendC::Gather(taps, vRow, offs", "AscendC::Max(dst, taps",
        "AscendC::Maxs(dst, dst", "CopyRowsOut("])
    assert _in_order(plain["relax.nn.avg_pool2d"], common + [
        "AscendC::Add(vRow[V_LEFT]", "AscendC::Gather(taps, vRow, offs", "AscendC::Add(dst, taps",
        "AscendC::Muls(divisor, counts", "AscendC::Div(dst, dst, divisor", "CopyRowsOut("])
    for source in plain.values():
        assert "Gm.GetValue" not in source


def test_pool_float16_matches_onnxruntime_and_counters():
    """One fp16 max and one fp16 average (with exclusive border counts) in the default run."""
    cases = [SWEEP[0], SWEEP[6]]
    lib, outs, refs = _float16_against_float32(cases, seed=7)
    for case, out, ref in zip(cases, outs, refs):
        assert out.dtype == np.float16 and out.shape == ref.shape, case
        assert_close(out, ref, "float16")
    assert len(_pool_groups(lib)) == len(cases)


@pytest.mark.slow
def test_pool_sweep_slow_float32():
    """Both sweeps in float32."""
    cases = SWEEP + EXTRA_SWEEP
    b = ModelBuilder("float32", seed=6)
    for index, case in enumerate(cases):
        _add_pool(b, case, index)
    lib, outs, refs = _build_and_compare(b)
    for case, out, ref in zip(cases, outs, refs):
        assert out.shape == ref.shape, case
        assert_close(out, ref, "float32")
    assert len(_pool_groups(lib)) == len(cases)


@pytest.mark.slow
def test_pool_sweep_slow_float16():
    """Both sweeps in float16."""
    cases = SWEEP + EXTRA_SWEEP
    lib, outs, refs = _float16_against_float32(cases, seed=6)
    for case, out, ref in zip(cases, outs, refs):
        assert out.shape == ref.shape, case
        assert_close(out, ref, "float16")
    assert len(_pool_groups(lib)) == len(cases)


# ---- decisions and plans without a build --------------------------------------------------
def _pool_func(op, shape=(1, 3, 9, 9), dtype="float32", **attrs):
    """The fused PrimFunc FuseOps + FuseTIR make of ``op -> relu``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(bb.emit(op(x, **attrs))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))
    funcs = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    return next(f for f in funcs if "pool" in f.script())


def test_template_recognises_topi_pools_and_plans_fit_the_ub():
    func = _pool_func(relax.op.nn.avg_pool2d, pool_size=(3, 3), strides=(2, 2),
                      padding=(1, 0, 2, 1), ceil_mode=True, count_include_pad=True)
    shape = pool_shape(func)
    assert shape.kind == "avg" and shape.pad == (1, 0) and shape.stride == (2, 2)
    assert shape.count_bounds[0][0] == -1  # padding counted above the image
    template, tiling, decision = plan_template(func, SOC)
    assert template is Pool2dSchedule and decision and tiling.ub_bytes <= tiling.ub_capacity
    # the plan carries the shape the printer prints from, and reads back from JSON equal
    assert tiling.plan.shape == shape
    assert Tiling.from_json(tiling.to_json()) == tiling
    # one core, a plane far larger than the UB: the rows per tile are cut to fit it
    big = _pool_func(relax.op.nn.max_pool2d, shape=(1, 1, 600, 500), pool_size=(3, 3),
                     strides=(1, 1), padding=(1, 1, 1, 1))
    _, one_core = Pool2dSchedule.schedule(big, SOC, Pool2dKnobs(cores=1))
    assert one_core.cores == 1 and 1 < one_core.plan.rows_per_tile < 600
    assert one_core.ub_bytes <= SOC.ub_bytes
    space = Pool2dSchedule.knob_space(big, SOC)
    assert space[0] == Pool2dKnobs() and len(space) > 4
    for knobs in space:  # every candidate plans within the UB and obeys its knobs
        _, tiling = Pool2dSchedule.schedule(big, SOC, knobs)
        assert tiling.ub_bytes <= SOC.ub_bytes and tiling.buffer_num == (
            2 if knobs.double_buffer else 1)
        assert tiling.cores <= (knobs.cores or SOC.vector_blocks)
        if knobs.rows_per_tile:
            assert tiling.plan.rows_per_tile <= knobs.rows_per_tile
    assert knobs_from_json("pool2d", {"cores": 1}) == Pool2dKnobs(cores=1)
    with pytest.raises(TilingError, match="rows_per_tile=0"):
        Pool2dSchedule.schedule(big, SOC, Pool2dKnobs(rows_per_tile=0))


def test_one_pool_analysis_plans_every_knob_as_schedule_does():
    """One analysis (the epilogue and the prologue inlined into one block each, the pool read
    back from that) serves every plan, each plan applied (its loops fused and split as the
    plan cuts the work) is what ``schedule`` gives, and ``apply`` leaves the analysis as it
    found it."""
    from template_contract import check_analyse_plan_apply

    knobs = [None, Pool2dKnobs(cores=1), Pool2dKnobs(rows_per_tile=2, double_buffer=False)]
    avg = _pool_func(relax.op.nn.avg_pool2d, shape=(2, 3, 12, 12), pool_size=(3, 3),
                     strides=(2, 2), padding=(1, 1, 1, 1))
    check_analyse_plan_apply(Pool2dSchedule, avg, SOC, knobs)
    x = te.placeholder((1, 3, 9, 9), name="x")
    relu = te.compute(x.shape, lambda *i: tvm.tirx.max(x(*i), tvm.tirx.const(0.0, "float32")),
                      name="relu")
    prologue = te.create_prim_func([x, topi.nn.pool2d(relu, (2, 2), (1, 1), (1, 1),
                                                      (1, 0, 0, 0), "max")])
    analysis = Pool2dSchedule.analyse(prologue)
    assert analysis.prologue is not None and analysis.program is None
    check_analyse_plan_apply(Pool2dSchedule, prologue, SOC, knobs)


def test_prologues_and_refusals():
    x = te.placeholder((1, 3, 9, 9), name="x")
    relu = te.compute(x.shape, lambda *i: tvm.tirx.max(x(*i), tvm.tirx.const(0.0, "float32")),
                      name="relu")
    for pads in ((0, 0, 0, 0), (1, 0, 0, 0)):  # a prologue read directly, or through padding
        func = te.create_prim_func([x, topi.nn.pool2d(relu, (2, 2), (1, 1), (1, 1), pads,
                                                      "max")])
        assert Pool2dSchedule.applies(func) and pool_shape(func).prologue == 1
        assert Pool2dSchedule.schedule(func, SOC)[1].template == "pool2d"
    other = te.placeholder((1, 3, 9, 9), name="other")
    both = te.compute(x.shape, lambda *i: x(*i) + other(*i), name="both")
    func = te.create_prim_func([x, other, topi.nn.pool2d(both, (2, 2), (1, 1), (1, 1),
                                                         (0, 0, 0, 0), "max")])
    with pytest.raises(TilingError, match="reads 2 whole tensors"):
        Pool2dSchedule.schedule(func, SOC)
    weight = te.placeholder((3, 3, 1, 1), name="w")
    conv = topi.nn.conv2d_nchw(x, weight, 1, 0, 1)
    func = te.create_prim_func([x, weight, topi.nn.pool2d(conv, (2, 2), (2, 2), (1, 1),
                                                          (0, 0, 0, 0), "max")])
    decision = Pool2dSchedule.applies(func)
    assert not decision and "not elementwise" in decision.reason
    wide = _pool_func(relax.op.nn.max_pool2d, shape=(1, 1, 4, 70000), pool_size=(2, 2),
                      strides=(2, 2))
    with pytest.raises(TilingError, match="rows wider than the UB"):
        Pool2dSchedule.schedule(wide, SOC)
    assert TEMPLATES[-1] is Pool2dSchedule


def _call(op, shape=(1, 3, 8, 8), dtype="float32", **attrs):
    x = relax.Var("x", relax.TensorType(shape, dtype))
    bb = relax.BlockBuilder()
    with bb.function("f", [x]):
        out = bb.emit(op(x, **attrs))
        bb.emit_func_output(out)
    return bb.get()["f"].body.blocks[0].bindings[0].value


def test_pattern_decisions_for_pool_ops():
    assert check_conv_call(_call(relax.op.nn.max_pool2d, pool_size=(2, 2)))
    assert check_conv_call(_call(relax.op.nn.avg_pool2d, pool_size=(3, 3), dtype="float16"))
    nhwc = check_conv_call(_call(relax.op.nn.max_pool2d, shape=(1, 8, 8, 3), pool_size=(2, 2),
                                 layout="NHWC"))
    assert not nhwc and "NCHW" in nhwc.reason
    ints = check_conv_call(_call(relax.op.nn.max_pool2d, dtype="int32", pool_size=(2, 2)))
    assert not ints and "int32" in ints.reason
    n = tvm.tirx.Var("n", "int64")
    dynamic = check_conv_call(_call(relax.op.nn.max_pool2d, shape=(n, 3, 8, 8),
                                    pool_size=(2, 2)))
    assert not dynamic and "dynamic" in dynamic.reason
    adaptive = check_conv_call(_call(relax.op.nn.adaptive_avg_pool2d, output_size=(2, 2)))
    assert not adaptive and "adaptive_avg_pool2d" in adaptive.reason
