"""Run-time tiling of vector kernels over symbolic dimensions (issue 20, item 2).

Elementwise groups and row reductions over symbolic rows (here x * 0.5 -> Softmax over rows
of 24) whose shapes hold a dimension given as a range (``x: (2, "1~3000", 5)``) are compiled
once: its UB tiles are sized for the range's upper bound, its printed kernel reads every
extent from the tiling struct, and its host tiling function fills that struct per call from
the arguments' shapes (cached by shape). Checked here on both SoCs at the lower end (1), a
length whose tiles and blocks have tails (7, and 1501: 15010 elements, no multiple of a
32-byte block), and the upper bound: outputs against onnxruntime, each launch's emulator
counters (blockDim, GM bytes, peak UB) against the Python plan of that call
(``schedules.tiling_at``), and the C++ tiling function against that plan at every length
of a sweep. Refusals (a broadcast whose offsets depend on the dimension, a dimension
without a range) name what is at fault, and the op stays on the host with that reason.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, tirx

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend import ir_attrs
from tvm_ascend.errors import TilingError
from tvm_ascend.frontend import load_model
from tvm_ascend.partition.dynamic_report import RUNTIME_TILED_TEMPLATES
from tvm_ascend.partition.legalize import legalize_map
from tvm_ascend.schedules import ElementwiseSchedule, Tiling, tiling_at
from tvm_ascend.schedules.runtime_tiling import _AT
from tvm_ascend.soc import get_soc

SOCS = ("Ascend910B1", "Ascend310P3")
LOW, HIGH = 1, 3000
LENGTHS = (1, 7, 1501, HIGH)  # lower end, tails, upper bound
WIDTH = 5  # 10 * s elements: most lengths end mid-block on both dtypes


def _chain(bias_shape=(WIDTH,), dims=(2, "s", WIDTH)):
    """x + b -> Relu -> * 3 over x of shape ``dims`` (s symbolic)."""
    import onnx

    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["y"], name="mul")]
    bias = np.linspace(-1, 1, int(np.prod(bias_shape))).astype(np.float32).reshape(bias_shape)
    inits = [numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(3.0, np.float32), "k")]
    graph = helper.make_graph(
        nodes, "ranged", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


ROW_COLS = 24  # the Softmax's rows: static length, symbolic count


def _scaled_softmax():
    """Softmax(x * 0.5) over the last axis of x (2, s, 24): rows of static length."""
    import onnx

    nodes = [helper.make_node("Mul", ["x", "k"], ["m"], name="scale"),
             helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1)]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "k")]
    dims = [2, "s", ROW_COLS]
    graph = helper.make_graph(
        nodes, "ranged_softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# kind -> (model, inner width, range's upper bound, lengths: lower end, tails, upper bound);
# the elementwise chain adds a scalar: with a bias per column the row template takes it
# (a column it keeps in the UB beats the elementwise template's scalar gather)
KINDS = {"elementwise": (lambda: _chain(bias_shape=(1,)), WIDTH, HIGH, LENGTHS),
         "row_reduce": (_scaled_softmax, ROW_COLS, 700, (1, 7, 351, 700))}


@pytest.fixture(scope="module", params=[(soc, kind) for kind in KINDS for soc in SOCS],
                ids=lambda p: f"{p[1]}-{p[0]}")
def built(request):
    soc, kind = request.param
    make, width, high, _ = KINDS[kind]
    model = make()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version=soc, input_shape={"x": (2, f"{LOW}~{high}", width)}))
    return soc, model, lib


def _kernel(lib) -> tuple[str, Tiling]:
    (group,) = [g for g in lib.fusion_report()["groups"] if g["on_npu"]]
    return group["kernel"], Tiling.from_dict(group["tiling"])


def _kind(lib) -> tuple:
    """(model kind, width, upper bound, lengths) of a build of this file."""
    template = _kernel(lib)[1].template
    return (template, *KINDS[template][1:])


def _struct(call: Tiling) -> dict:
    """What the host tiling function of ``call``'s kernel fills in, from the Python plan."""
    if call.template == "row_reduce":
        return {"rows": call.total, "blockRows": call.block_len, "tileRows": call.tile_len,
                "cols": call.cols, "blockDim": call.cores}
    return {"totalLength": call.total, "blockLength": call.block_len,
            "tileLength": call.tile_len, "blockDim": call.cores}


def test_the_whole_group_is_one_kernel_tiled_at_run_time(built):
    soc, _, lib = built
    kind, width, high, _ = _kind(lib)
    report = lib.fusion_report()
    assert report["npu_kernels"] == 1 and report["host_groups"] == 0
    section = report["dynamic"]
    assert section["host_ops"] == []
    assert section["runtime_tiling"]["templates"] == ["elementwise", "row_reduce", "matmul",
                                                      "attention", "data_movement"]
    (kernel,) = section["runtime_tiling"]["kernels"]
    assert kernel["dims"] == ["s"] and kernel["template"] == kind
    # estimated at the range's ends and midpoint; the group's estimate is their mean
    sizes = [r["sizes"]["s"] for r in kernel["range_us"]]
    assert sizes == [LOW, (LOW + high) // 2, high]
    times = [r["time_us"] for r in kernel["range_us"]]
    assert times[0] < times[1] < times[2]
    (group,) = report["groups"]
    assert group["estimate"]["time_us"] == pytest.approx(sum(times) / 3, abs=2e-3)
    # planned at the upper bound: UB tiles sized for it, on this SoC
    name, tiling = _kernel(lib)
    assert tiling.total == 2 * high * (width if kind == "elementwise" else 1)
    assert tiling.ub_bytes <= tiling.ub_capacity and get_soc(soc).name == lib.soc_version
    cap = tiling.plan.runtime.tile_cap if kind == "elementwise" else tiling.plan.runtime.rows_cap
    assert cap == tiling.tile_len


def test_the_printed_kernel_reads_every_extent_from_its_tiling_struct(built):
    _, _, lib = built
    name, tiling = _kernel(lib)
    _, _, high, _ = _kind(lib)
    source = lib.kernel_sources()[name]
    fields = [f for f in _struct(tiling) if f != "blockDim"]
    for field in fields:
        assert f"tiling.{field}" in source, field
    # no size that depends on s is a constant of the kernel: not the bound's total or block
    # (the UB's queues are sized from the tile field), nor s's bound itself
    body = source.split("class Kernel", 1)[1]
    for constant in (tiling.total, tiling.block_len, high):
        assert not re.search(rf"\b{constant}\b", body), constant


@pytest.mark.parametrize("which", range(4))
def test_each_length_matches_onnxruntime_and_its_plan(built, which):
    _, model, lib = built
    kind, width, _, lengths = _kind(lib)
    length = lengths[which]
    name, tiling = _kernel(lib)
    lib.profile()  # reset the counters
    feeds = {"x": np.random.default_rng(length).standard_normal((2, length, width))
             .astype(np.float32)}
    (out,) = lib.run(feeds)
    assert out.shape == (2, length, width)
    assert_close(out, run_onnxruntime(model, feeds)[0], "float32")
    (launch,) = lib.profile()
    call = tiling_at(tiling, {"s": length})
    assert call.total == 2 * length * (width if kind == "elementwise" else 1)
    assert call.tile_len <= tiling.tile_len
    assert launch["block_dim"] == call.cores
    assert launch["gm_read_bytes"] == call.gm_read_bytes
    assert launch["gm_write_bytes"] == call.gm_write_bytes == 2 * length * width * 4
    assert launch["peak_ub_bytes"] == call.ub_bytes <= tiling.ub_bytes
    assert launch["warnings"] == []
    assert lib.kernel_tiling(name, length) == _struct(call)


def test_the_host_tiling_function_equals_the_plan_over_the_range(built):
    _, _, lib = built
    name, tiling = _kernel(lib)
    _, _, high, _ = _kind(lib)
    for length in [*range(1, 80), 255, 256, 257, 511, high // 2, high - 1, high]:
        call = tiling_at(tiling, {"s": length})
        assert lib.kernel_tiling(name, length) == _struct(call), length
    at_bound = tiling_at(tiling, {"s": high})
    assert (at_bound.cores, at_bound.block_len, at_bound.tile_len, at_bound.ub_bytes) == \
        (tiling.cores, tiling.block_len, tiling.tile_len, tiling.ub_bytes)


def test_a_length_outside_the_range_is_an_error_naming_it(built):
    _, _, lib = built
    name, _ = _kernel(lib)
    _, width, high, _ = _kind(lib)
    with pytest.raises(Exception, match=rf"symbolic dimension s = {high + 1} .* outside its "
                                        rf"range 1~{high}"):
        lib.kernel_tiling(name, high + 1)
    with pytest.raises(Exception, match="x"):
        lib.run({"x": np.zeros((2, high + 1, width), np.float32)})


def test_an_exported_library_loads_back_with_its_tiling_functions(built, tmp_path):
    _, model, lib = built
    name, tiling = _kernel(lib)
    _, width, high, lengths = _kind(lib)
    again = tvm_ascend.load(lib.export_library(tmp_path / "model.so"))
    for length in (lengths[1], high):
        feeds = {"x": np.random.default_rng(length).standard_normal((2, length, width))
                 .astype(np.float32)}
        assert_close(again.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
        assert again.kernel_tiling(name, length) == _struct(tiling_at(tiling, {"s": length}))


# ---- the template alone: what it takes and what it refuses ------------------------------------
def _fused_prim(model, shape, bounds):
    mod = load_model(model, input_shape={"x": shape})
    low = relax.transform.LegalizeOps(legalize_map())(mod)
    low = relax.transform.FuseTIR()(relax.transform.FuseOps()(
        relax.transform.AnnotateTIROpPattern()(low)))
    (prim,) = [f for f in low.functions.values() if isinstance(f, tirx.PrimFunc)]
    return prim.with_attr(ir_attrs.DIM_BOUNDS, json.dumps(bounds)) if bounds else prim


def test_a_broadcast_whose_offsets_depend_on_the_dimension_is_refused_naming_it():
    model = _chain(bias_shape=(2, 1, WIDTH))
    prim = _fused_prim(model, (2, "2~64", WIDTH), {"s": [2, 64]})
    with pytest.raises(TilingError, match=r"input param_0 \(shape 2, 1, 5\) is read at an "
                                          r"offset that depends on the symbolic dimensions"):
        ElementwiseSchedule.analyse(prim)
    # from 1 on, it is even read whole at s = 1 and gathered elsewhere: refused too
    prim = _fused_prim(model, (2, "1~64", WIDTH), {"s": [1, 64]})
    with pytest.raises(TilingError, match=r"param_0 .* is read as FULL at \{'s': 1\} and as "
                                          "GATHER"):
        ElementwiseSchedule.analyse(prim)


def test_a_dimension_without_a_range_is_refused_naming_it():
    prim = _fused_prim(_chain(), (2, "1~64", WIDTH), None)
    with pytest.raises(TilingError, match=r"symbolic dimension s \(parameter x, axis 1\) has "
                                          r"no range"):
        ElementwiseSchedule.analyse(prim)


@pytest.mark.parametrize("soc", SOCS)
def test_every_call_s_tiling_is_a_valid_plan_within_the_bound_s_buffers(soc):
    prim = _fused_prim(_chain(), (2, "1~3000", WIDTH), {"s": [1, 3000]})
    tiling = ElementwiseSchedule.plan(ElementwiseSchedule.analyse(prim), get_soc(soc))
    for length in range(1, 3001, 37):
        call = tiling_at(tiling, {"s": length})  # Tiling's own checks: cores cover total
        assert call.tile_len <= tiling.tile_len and call.ub_bytes <= tiling.ub_bytes
        assert call.cores <= get_soc(soc).vector_blocks
        assert call.tile_len % 8 == 0 and call.plan.runtime is None
    with pytest.raises(TilingError, match="outside its range 1~3000"):
        tiling_at(tiling, {"s": 0})


def test_the_report_names_the_templates_that_tile_at_run_time():
    assert set(RUNTIME_TILED_TEMPLATES) == set(_AT)
