"""Merges of kernels tiled at run time are compared at each point of the range the
partitioner estimates them at (its ends and midpoint), not by the means alone: a fused kernel
that wins at the low end and loses at the high end (a size a call may reach) is refused, with
the point named (site_cost.slower_point), by the region search, which runs first and summed
the means, as by merge.py's pairwise and look-ahead passes and export.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend.partition.region_search import RegionCandidates
from tvm_ascend.partition.site_cost import slower_point


def _site(name, op="relax.add"):
    return SimpleNamespace(name=name, prim=name, members=[SimpleNamespace(op=op)],
                           var=None, args=[])


def _cost(plans: dict):
    return SimpleNamespace(plan=lambda prim: plans[prim])


def _region_merge(fused):
    """RegionCandidates.evaluate of the merge of two kernels tiled at run time, each
    4 / 6 / 8 us at s = 1 / 50 / 100, into ``fused``."""
    a, b = _site("a"), _site("b")
    cost = _cost({"a": _plan((1, 4.0), (50, 6.0), (100, 8.0)),
                  "b": _plan((1, 4.0), (50, 6.0), (100, 8.0))})
    candidate = lambda producer, consumer: ("ab", [], fused, ["ElementwiseFusion"])  # noqa: E731
    search = RegionCandidates([a, b], cost, candidate, fuse=None)
    return search, search.evaluate(frozenset({0, 1}), frozenset({0}), frozenset({1}))


def test_the_region_search_drops_a_merge_slower_at_the_bound_though_faster_on_average():
    search, fused_us = _region_merge(_plan((1, 5.0), (50, 11.0), (100, 18.0)))
    assert fused_us is None and frozenset({0, 1}) not in search.found  # 11.33 us mean < 12
    search, fused_us = _region_merge(_plan((1, 5.0), (50, 11.0), (100, 15.0)))
    assert fused_us == pytest.approx(31.0 / 3) and frozenset({0, 1}) in search.found


def _plan(*points, static_us=None):
    range_us = tuple(({"s": s}, us) for s, us in points)
    time_us = static_us if static_us is not None else sum(us for _, us in points) / len(points)
    return SimpleNamespace(ok=True, time_us=time_us, range_us=range_us)


def test_a_merge_faster_on_average_but_slower_at_the_bound_is_named_there():
    a, b = _site("a"), _site("b")
    cost = _cost({"a": _plan((1, 4.0), (50, 6.0), (100, 8.0)),
                  "b": _plan((1, 4.0), (50, 6.0), (100, 8.0))})
    # mean 12.67 fused vs 12.0 split would refuse; 11.33 vs 12 passes the means, but at s = 100
    fused = _plan((1, 5.0), (50, 11.0), (100, 18.0))
    assert fused.time_us < 12.0
    assert slower_point(fused, cost, a, b) == \
        "at s = 100 it is slower: 18.00 us fused vs 16.00 us apart"


def test_a_merge_no_slower_anywhere_passes_and_a_static_part_costs_the_same_everywhere():
    a, w = _site("a"), _site("w")
    cost = _cost({"a": _plan((1, 4.0), (50, 6.0), (100, 8.0)),
                  "w": _plan(static_us=3.0)})  # static: no range_us
    assert slower_point(_plan((1, 6.0), (50, 9.0), (100, 11.0)), cost, a, w) == ""
    assert slower_point(_plan((1, 6.0), (50, 9.5), (100, 11.0)), cost, a, w) == \
        "at s = 50 it is slower: 9.50 us fused vs 9.00 us apart"


def test_a_static_merge_has_no_point_to_compare():
    cost = _cost({"a": _plan(static_us=3.0)})
    assert slower_point(_plan(static_us=9.0), cost, _site("a")) == ""


def _chain_model():
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "x"], ["y"], name="mul")]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s", 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s", 48])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_an_elementwise_chain_over_a_range_merges_at_every_point_and_matches_onnxruntime():
    model = _chain_model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version="Ascend910B1", input_shape={"x": (2, "1~3000", 48)}))
    (group,) = [g for g in lib.fusion_report()["groups"] if g["on_npu"]]
    assert len(group["ops"]) == 3
    times = [r["time_us"] for r in group["estimate"]["range_us"]]
    assert len(times) == 3 and times[0] < times[-1]
    for length in (1, 7, 3000):
        x = np.random.default_rng(length).standard_normal((2, length, 48)).astype(np.float32)
        assert_close(lib.run({"x": x})[0], run_onnxruntime(model, {"x": x})[0], "float32")
