"""Bytes of tensors over ranged symbolic dimensions (partition/dim_bounds.bound_bytes): at the
range's upper bound, for which buffers are sized, both in the report's peak memory and in the
traffic a host group is charged (site_cost.io_bytes); both counted such tensors as 0 bytes
(``int()`` of a Var raised and was swallowed), so a host copy over ``seq`` cost its launch
alone."""
from __future__ import annotations

import json
from types import SimpleNamespace

from tvm import relax, tirx

from tvm_ascend import ir_attrs
from tvm_ascend.partition.dim_bounds import bound_bytes, range_analyzer
from tvm_ascend.partition.site_cost import io_bytes

S = tirx.Var("s", "int64")


def _ty(*shape, dtype="float32"):
    return relax.TensorType(shape, dtype)


def test_a_dimension_counts_at_its_bound_and_an_expression_of_it_too():
    types = [_ty(2, S, 8), _ty(2, S * 2)]
    analyzer = range_analyzer(types, {"s": [1, 64]})
    assert bound_bytes(types[0], analyzer) == 2 * 64 * 8 * 4
    assert bound_bytes(types[1], analyzer) == 2 * 128 * 4
    assert bound_bytes(_ty(3, 5, dtype="float16")) == 30


def test_a_dimension_without_a_range_is_unknown_not_a_guess():
    t = tirx.Var("t", "int64")
    analyzer = range_analyzer([_ty(2, t)], {"s": [1, 64]})
    assert bound_bytes(_ty(2, t), analyzer) == 0
    assert bound_bytes(_ty(2, S)) == 0  # no analyzer: no range known


def test_a_host_group_over_a_range_is_charged_its_bytes_at_the_bound():
    prim = tirx.PrimFunc([], tirx.Evaluate(0)).with_attr(
        ir_attrs.DIM_BOUNDS, json.dumps({"s": [2, 32]}))
    site = SimpleNamespace(args=[SimpleNamespace(ty=_ty(2, S, 64))],
                           var=SimpleNamespace(ty=_ty(2, S, 64)), prim=prim)
    assert io_bytes(site) == 2 * (2 * 32 * 64 * 4)
    unbounded = SimpleNamespace(args=site.args, var=site.var, prim=None)
    assert io_bytes(unbounded) == 0
