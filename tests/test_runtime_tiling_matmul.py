"""Run-time tiling of matmul kernels over a symbolic M (issue 20, item 2).

An FFN / projection shape, x[2, s, K] @ W[K, N] + b -> Relu with s given as a range, is one
NPU kernel: the matmul template plans it at the range's upper bound (base tiles, K step,
singleN, L1 walk and UB buffers fixed there, singleM one base block), the printed kernel
reads M and every M-derived count (tilesM, tilesPerCore, totalTiles, the GM views of x and
y) from its tiling struct while K and N stay constants, and the host tiling function counts
each call's tiles (the M tail the last one's) and spreads them over the cores. Checked on
both SoCs at M = 1, 7 (a tail within one tile), 64 (one whole fp32 tile), 129 (tail, several
cores) and the range's top (M larger than several tiles): outputs against onnxruntime, each
launch's emulator counters against the Python plan of that call (``schedules.tiling_at``),
the C++ tiling function against that plan over a sweep. Refusals name what is at fault.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, tirx

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend import ir_attrs
from tvm_ascend.frontend import load_model
from tvm_ascend.partition.legalize import legalize_map
from tvm_ascend.schedules import MatmulSchedule, Tiling, tiling_at
from tvm_ascend.schedules.matmul import _plan
from tvm_ascend.soc import get_soc

SOCS = ("Ascend910B1", "Ascend310P3")
K, N = 64, 48
HIGH = 300
LENGTHS = (1, 7, 64, 129, HIGH)  # lower end, a tail, one whole tile, tail + cores, top


def _ffn(b_symbolic: bool = False):
    """x (2, s, K) @ W (K, N) + b -> Relu; with ``b_symbolic`` x @ x^T (B depends on s)."""
    import onnx

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((K, N)) * 0.2).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b")]
    if b_symbolic:
        nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                 helper.make_node("MatMul", ["x", "xt"], ["y"], name="mm")]
        out = [2, "s", "s"]
        inits = []
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                 helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
                 helper.make_node("Relu", ["a"], ["y"], name="relu")]
        out = [2, "s", N]
    graph = helper.make_graph(
        nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module", params=SOCS)
def built(request):
    model = _ffn()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version=request.param, input_shape={"x": (2, f"1~{HIGH}", K)}))
    return request.param, model, lib


def _kernel(lib) -> tuple[str, Tiling]:
    (group,) = [g for g in lib.fusion_report()["groups"] if g["on_npu"]]
    return group["kernel"], Tiling.from_dict(group["tiling"])


def _struct(call: Tiling) -> dict:
    """What the host tiling function fills in for ``call``, from the Python plan."""
    return {"cube.M": call.plan.shape.m, "cube.usedCoreNum": call.cores,
            "cube.baseM": call.plan.base_m, "cube.singleCoreM": call.plan.single_m, "batch": call.plan.shape.batch,
            "tilesM": -(-call.plan.shape.m // call.plan.single_m),
            "tilesN": -(-N // call.plan.single_n), "tilesPerCore": call.block_len,
            "totalTiles": call.total, "blockDim": -(-call.cores // call.work.aiv_ratio)}


def _feeds(length: int) -> dict:
    return {"x": np.random.default_rng(length).standard_normal((2, length, K))
            .astype(np.float32)}


def test_matmul_and_its_epilogue_are_one_kernel_tiled_at_run_time(built):
    _, _, lib = built
    report = lib.fusion_report()
    assert report["npu_kernels"] == 1 and report["host_groups"] == 0
    (group,) = report["groups"]
    assert [op["node"] for op in group["ops"]] == ["mm", "bias", "relu"]
    assert "symbolic M: tiled at run time" in group["ops"][0]["why"]
    assert f"run-time tiled: M over s in 1~{HIGH}" in group["reason"]
    section = report["dynamic"]
    assert section["host_ops"] == [] and "matmul" in section["runtime_tiling"]["templates"]
    (kernel,) = section["runtime_tiling"]["kernels"]
    assert kernel["template"] == "matmul" and kernel["dims"] == ["s"]
    # the decision was taken over the range: estimated (so tiled) at both ends and between
    sizes = [r["sizes"]["s"] for r in kernel["range_us"]]
    assert sizes == [1, (1 + HIGH) // 2, HIGH]
    times = [r["time_us"] for r in kernel["range_us"]]
    assert times[0] < times[2]
    assert group["estimate"]["time_us"] == pytest.approx(sum(times) / 3, abs=2e-3)
    _, tiling = _kernel(lib)
    assert tiling.plan.runtime.max_cores >= tiling.cores > 1  # the bound uses several cores
    assert tiling.plan.single_m == tiling.plan.base_m  # one base block a tile along M
    assert tiling.plan.shape.m == HIGH and tiling.plan.k_splits == 1


def test_the_printed_kernel_reads_m_from_its_tiling_struct(built):
    _, _, lib = built
    name, tiling = _kernel(lib)
    source = lib.kernel_sources()[name]
    body = source.split("class Kernel", 1)[1].split("extern \"C\"", 1)[0]
    assert f"xGm.SetGlobalBuffer((__gm__ float*)x, 2 * static_cast<uint64_t>(tiling.cube.M) " \
        f"* {K});" in body
    for field in ("tiling.cube.M", "tiling.tilesM", "tiling.tilesPerCore", "tiling.totalTiles"):
        assert field in body, field
    # nothing of the bound's M is a constant of the kernel: not M, its rows, nor its tiles
    for constant in (HIGH, 2 * HIGH, 2 * HIGH * K, 2 * HIGH * N, tiling.total):
        if constant not in (K, N, 2):
            assert f" {constant})" not in body and f" {constant};" not in body, constant


@pytest.mark.parametrize("length", LENGTHS)
def test_each_m_matches_onnxruntime_and_its_plan(built, length):
    _, model, lib = built
    name, tiling = _kernel(lib)
    lib.profile()  # reset the counters
    feeds = _feeds(length)
    (out,) = lib.run(feeds)
    assert out.shape == (2, length, N)
    assert_close(out, run_onnxruntime(model, feeds)[0], "cube/float32")
    (launch,) = lib.profile()
    call = tiling_at(tiling, {"s": length})
    assert call.plan.shape.m == length and call.plan.runtime is None
    assert launch["block_dim"] == -(-call.cores // call.work.aiv_ratio)
    assert launch["gm_read_bytes"] == call.gm_read_bytes
    assert launch["gm_write_bytes"] == call.gm_write_bytes
    # a short M takes a short base tile (16 rows at M <= 16), its UB queues sized by it
    assert call.plan.base_m == min(tiling.plan.base_m, -(-length // 16) * 16)
    assert launch["peak_ub_bytes"] == call.ub_bytes <= tiling.ub_bytes
    assert launch["warnings"] == []
    assert lib.kernel_tiling(name, length) == _struct(call)


def test_the_host_tiling_function_equals_the_plan_over_the_range(built):
    _, _, lib = built
    name, tiling = _kernel(lib)
    for length in [*range(1, 70), 127, 128, 129, 130, 191, 192, 193, HIGH - 1, HIGH]:
        assert lib.kernel_tiling(name, length) == _struct(tiling_at(tiling, {"s": length}))
    with pytest.raises(Exception, match=rf"symbolic dimension s = {HIGH + 1} .* outside its "
                                        rf"range 1~{HIGH}"):
        lib.kernel_tiling(name, HIGH + 1)


def test_an_exported_library_keeps_its_tiling_function(built, tmp_path):
    _, model, lib = built
    name, tiling = _kernel(lib)
    again = tvm_ascend.load(lib.export_library(tmp_path / "model.so"))
    feeds = _feeds(129)
    assert_close(again.run(feeds)[0], run_onnxruntime(model, feeds)[0], "cube/float32")
    assert again.kernel_tiling(name, 129) == _struct(tiling_at(tiling, {"s": 129}))


# ---- the template alone ------------------------------------------------------------------------
def _group(model, shape, bounds):
    """The fused group PrimFunc of ``model`` with ``shape``, its ranges as the partitioner
    records them."""
    mod = load_model(model, input_shape={"x": shape})
    low = relax.transform.LegalizeOps(legalize_map())(mod)
    low = relax.transform.FuseTIR()(relax.transform.FuseOps()(
        relax.transform.AnnotateTIROpPattern()(low)))
    (prim,) = [f for f in low.functions.values() if isinstance(f, tirx.PrimFunc)]
    return prim.with_attr(ir_attrs.DIM_BOUNDS, json.dumps(bounds))


@pytest.mark.parametrize("soc", SOCS)
def test_a_call_at_the_bound_is_the_bound_s_static_plan(soc):
    """matmul_tiling_at counts a call as _plan counts a static kernel: at the upper bound the
    two agree field for field (cores, tiles, GM bytes, the timing model's work)."""
    prim = _group(_ffn(), (2, f"1~{HIGH}", K), {"s": [1, HIGH]})
    analysis = MatmulSchedule.analyse(prim)
    for knobs in MatmulSchedule.variants(prim, get_soc(soc)):
        if (knobs.k_splits or 1) > 1:
            continue
        tiling = MatmulSchedule.plan(analysis, get_soc(soc), knobs)
        static = _plan(analysis.shape, analysis.program, get_soc(soc), knobs, analysis.affine,
                       m_at_run_time=True)
        at_bound = tiling_at(tiling, {"s": HIGH})
        assert dataclasses.replace(at_bound, plan=None) == dataclasses.replace(static, plan=None)
        assert at_bound.plan == static.plan
        for length in range(1, HIGH + 1, 23):  # every call a valid Tiling within the bound's
            call = tiling_at(tiling, {"s": length})
            assert call.cores <= tiling.plan.runtime.max_cores
            assert call.ub_bytes <= tiling.ub_bytes and call.plan.base_m <= tiling.plan.base_m
            assert call.plan.l1_bytes <= tiling.plan.l1_bytes


def test_split_k_is_refused_over_a_symbolic_m():
    from tvm_ascend.errors import TilingError
    from tvm_ascend.schedules import MatmulKnobs

    prim = _group(_ffn(), (2, f"1~{HIGH}", K), {"s": [1, HIGH]})
    with pytest.raises(TilingError, match="split-K is not tiled at run time"):
        MatmulSchedule.plan(MatmulSchedule.analyse(prim), get_soc("Ascend910B1"),
                            MatmulKnobs(k_splits=2))


def test_a_matmul_whose_b_depends_on_the_dimension_is_tiled_at_run_time_too():
    """x @ x^T: B (the host's transpose of x) and N are the dimension as well as M; the
    product is one kernel over M and N (tests/test_runtime_tiling_attention.py checks its
    plans and counters)."""
    model = _ffn(b_symbolic=True)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        input_shape={"x": (2, "1~64", K)}))
    (group,) = [g for g in lib.fusion_report()["groups"]
                if any(op["node"] == "mm" for op in g["ops"])]
    assert group["on_npu"] and "symbolic M and N: tiled at run time" in group["ops"][0]["why"]
    for length in (1, 7, 64):
        feeds = _feeds(length)
        assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "cube/float32")


# ---- rows flattened over the dimension (GPT-2's Conv1D: x.view(-1, K) @ W) -----------------------
def _flat_ffn():
    """x (2, s, K) -> Reshape (-1, K) -> MatMul W -> Reshape (2, -1, N) -> + b -> Relu: the
    product's M is ``s * 2``, an expression, until prepare's FlatMatmulRows."""
    import onnx

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal((K, N)) * 0.2).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([-1, K], np.int64), "flat"),
             numpy_helper.from_array(np.array([2, -1, N], np.int64), "back")]
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["xf"], name="view"),
             helper.make_node("MatMul", ["xf", "w"], ["m"], name="mm"),
             helper.make_node("Reshape", ["m", "back"], ["m3"], name="unview"),
             helper.make_node("Add", ["m3", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "flat_ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s", N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_product_of_flattened_rows_is_one_kernel_over_the_rows():
    model = _flat_ffn()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        input_shape={"x": (2, "1~200", K)}))
    report = lib.fusion_report()
    (record,) = [r for r in report["prepare_rewrites"] if r["rewrite"] == "FlatMatmulRows"]
    assert record["applied"] and record["node"] == "mm"
    # the Reshapes are gone: the product over (2, s, K) and its epilogue are one kernel
    assert report["npu_kernels"] == 1 and report["host_groups"] == 0
    (group,) = report["groups"]
    assert {"mm", "bias", "relu"} <= {op["node"] for op in group["ops"]}
    name, tiling = _kernel(lib)
    assert tiling.plan.shape.batch == 2 and tiling.plan.runtime.dim == "s"
    for length in (1, 7, 129, 200):
        feeds = _feeds(length)
        assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "cube/float32")
        assert lib.kernel_tiling(name, length) == _struct(tiling_at(tiling, {"s": length}))


def test_a_static_flattened_product_is_left_as_it_is():
    from tvm_ascend.prepare import prepare
    from tvm_ascend.prepare.relax_rewrite import prepare_rewrites

    mod = prepare(load_model(_flat_ffn(), input_shape={"x": (2, 16, K)}))
    assert not [r for r in prepare_rewrites(mod) if r["rewrite"] == "FlatMatmulRows"]


@pytest.mark.slow
@pytest.mark.parametrize("soc", SOCS)
def test_a_float16_ffn_matches_onnxruntime_at_each_m(soc):
    """The same kernel in float16 (base tiles of 128): tails and several cores."""
    import onnx

    model = _ffn()
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16),
                                              init.name))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.checker.check_model(model)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version=soc, input_shape={"x": (2, f"1~{HIGH}", K)}))
    name, tiling = _kernel(lib)
    assert tiling.plan.shape.dtype == "float16"
    for length in LENGTHS:
        feeds = {"x": _feeds(length)["x"].astype(np.float16)}
        assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "cube/float16")
        assert lib.kernel_tiling(name, length) == _struct(tiling_at(tiling, {"s": length}))


def test_a_second_symbolic_dimension_is_refused_naming_both():
    from tvm_ascend.errors import TilingError

    prim = _group(_ffn(), ("1~4", "1~64", K), None)
    prim = prim.with_attr(ir_attrs.DIM_BOUNDS, json.dumps(
        {str(d): [1, 64] for p in prim.params for d in p.shape if isinstance(d, tirx.Var)}))
    names = sorted({str(d) for p in prim.params for d in p.shape if isinstance(d, tirx.Var)})
    assert len(names) == 2
    with pytest.raises(TilingError, match=rf"matmul over 2 symbolic dimensions .*{names[0]}"):
        MatmulSchedule.analyse(prim)
    # and the partitioner keeps such a product on the host, saying why
    lib = tvm_ascend.build(_ffn(), config=tvm_ascend.CompileConfig(
        input_shape={"x": ("1~4", "1~64", K)}))
    (op,) = [op for g in lib.fusion_report()["groups"] for op in g["ops"] if op["node"] == "mm"]
    assert not op["supported"] and "a batch dimension is symbolic" in op["why"]
