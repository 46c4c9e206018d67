"""What a site costs left alone (partition/site_cost.py): a view the host makes free is charged
0 us and no launch by the merges, the region search and the report alike; a view the host
copies (two views in one FuseOps group, a view that is the model's output) is charged its host
copy, and is no free view in the report; a copying op (Transpose) its own kernel."""
from __future__ import annotations

import pytest

import tvm_ascend
import tvm_ascend.partition.grouping as grouping
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.partition.cost import host_estimate, tir_flops
from tvm_ascend.partition.site_cost import (FREE_VIEW, alone_cost, alone_launches, io_bytes,
                                            view_copy_reason)

AGGRESSIVE = tvm_ascend.CompileConfig(fusion_level="aggressive", soc_version="Ascend910B1")


def _chain(middle: str) -> ModelBuilder:
    """MatMul -> ``middle`` -> MatMul, which no template fuses across, so the middle is left
    alone: a Reshape (free), Reshape + Flatten (one FuseOps group: a host copy) or a
    Transpose (a data-movement kernel)."""
    b = ModelBuilder("float32", seed=3)
    x = b.input("x", (64, 128))
    m = b.node("MatMul", [x, b.const(b.rng.standard_normal((128, 128)) * 0.1, "w")])
    if middle == "reshape":
        v, k, rows = b.node("Reshape", [m, b.int_const([128, 64])]), 64, (128,)
    elif middle == "reshape_flatten":
        r = b.node("Reshape", [m, b.int_const([4, 16, 128])])
        v, k, rows = b.node("Flatten", [r], axis=1), 2048, (4,)
    else:
        v, k, rows = b.node("Transpose", [m], perm=[1, 0]), 64, (128,)
    y = b.node("MatMul", [v, b.const(b.rng.standard_normal((k, 32)) * 0.1, "w2")])
    b.output(y, rows + (32,))
    return b


@pytest.fixture
def merged_sites(monkeypatch):
    """The sites and cost of the last partition, as the merges left them."""
    seen = {}
    real = grouping.merge_sites

    def spy(sites, main, policy, cost, matches):
        out = real(sites, main, policy, cost, matches)
        seen["sites"], seen["cost"] = out, cost
        return out

    monkeypatch.setattr(grouping, "merge_sites", spy)
    return seen


def _alone(seen, op_names):
    (site,) = [s for s in seen["sites"] if s.absorbed_into is None
               and [m.op for m in s.members] == op_names]
    return site, alone_cost(site, seen["cost"])


def test_a_view_left_alone_the_host_makes_free_costs_nothing(merged_sites):
    tvm_ascend.partition_for_ascend(_chain("reshape").model(), AGGRESSIVE)
    site, alone = _alone(merged_sites, ["relax.reshape"])
    assert view_copy_reason(site) == ""
    assert (alone.time_us, alone.launches, alone.how) == (0.0, 0, FREE_VIEW)
    # what it would cost as an NPU copy kernel, which it never becomes: the old charge
    assert merged_sites["cost"].plan(site.prim).time_us > 1.0


def test_views_the_host_copies_are_charged_their_host_copy(merged_sites):
    tvm_ascend.partition_for_ascend(_chain("reshape_flatten").model(), AGGRESSIVE)
    site, alone = _alone(merged_sites, ["relax.reshape", "relax.reshape"])
    assert "RewriteDataflowReshape" in view_copy_reason(site)
    cost = merged_sites["cost"]
    expected = host_estimate(io_bytes(site), cost.soc, tir_flops(site.prim))["time_us"]
    assert alone.time_us == expected and alone.time_us > 0
    assert alone.launches == 1 and "copied on the host" in alone.how
    assert io_bytes(site) == 2 * 64 * 128 * 4  # read once, written once


def test_a_transpose_left_alone_is_its_own_kernel(merged_sites):
    tvm_ascend.partition_for_ascend(_chain("transpose").model(), AGGRESSIVE)
    site, alone = _alone(merged_sites, ["relax.permute_dims"])
    plan = merged_sites["cost"].plan(site.prim)
    assert view_copy_reason(site) is None and plan.ok
    assert (alone.time_us, alone.launches) == (plan.time_us, 1)
    assert alone_launches(merged_sites["cost"], site) == 1


@pytest.mark.parametrize("middle, free", [("reshape", True), ("reshape_flatten", False)])
def test_the_report_marks_free_only_what_the_host_does_not_copy(middle, free):
    """The grouping this changes: Reshape + Flatten in one FuseOps group was reported a free
    view (0 us, no launch) while the host ran it as a copy; it is now a host group with its
    launch and estimate. Both run as onnxruntime does."""
    b = _chain(middle)
    lib = tvm_ascend.build(b.model(), config=AGGRESSIVE)
    report = lib.report.to_json()
    (views,) = [g for g in report["groups"] if not g["on_npu"]]
    assert views["launch"] is (not free)
    assert report["kernels"] == {"ascend": 2, "host": 0 if free else 1}
    if free:
        assert views["estimate"] == {} and "free (no copy)" in views["reason"]
    else:
        assert views["estimate"]["time_us"] > 0
        assert "only layout views, but TVM's RewriteDataflowReshape" in views["reason"]
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(b.model(), b.feeds)[0], "float32_model")


def test_the_region_search_charges_a_free_view_nothing_and_says_so():
    """MatMul -> Unsqueeze -> MatMul: the Unsqueeze joins the first MatMul's epilogue at no
    cost. Its note gives the region's estimate without a copy kernel for the view (it was
    charged one, about 8 us, that the build never launches) and names the free view."""
    b = ModelBuilder("float32", seed=4)
    x = b.input("x", (64, 128))
    m = b.node("MatMul", [x, b.const(b.rng.standard_normal((128, 128)) * 0.1, "w")])
    v = b.node("Unsqueeze", [m, b.int_const([0])])
    b.output(b.node("MatMul", [v, b.const(b.rng.standard_normal((128, 32)) * 0.1, "w2")]),
             (1, 64, 32))
    lib = tvm_ascend.build(b.model(), config=AGGRESSIVE)
    report = lib.report.to_json()
    (first,) = [g for g in report["groups"] if "relax.expand_dims" in
                [op["op"] for op in g["ops"]]]
    assert first["on_npu"]
    assert f"with expand_dims left alone as {FREE_VIEW}" in first["reason"]
    region = float(first["reason"].split("est. ")[1].split(" ->")[0])
    launched = sum(g["estimate"]["time_us"] for g in report["groups"] if g["on_npu"])
    # the unmerged region: the two MatMuls alone, the view free
    assert region == pytest.approx(launched, abs=0.02)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(b.model(), b.feeds)[0], "float32_model")


def test_a_head_merge_reshape_is_left_free_beside_its_transpose(merged_sites):
    """The grouping this changes (T5's attention output, [B, H, S, D] -> Transpose -> Reshape
    [B, S, H*D] -> MatMul): the Reshape was charged a copy kernel of its own (about 8 us), so
    merging it into the Transpose's kernel looked a gain though that kernel is slower; it now
    stays a free view beside the Transpose, and the refusal names it."""
    b = ModelBuilder("float32", seed=5)
    x = b.input("x", (1, 8, 16, 64))
    t = b.node("Transpose", [x], perm=[0, 2, 1, 3])
    r = b.node("Reshape", [t, b.int_const([1, 16, 512])])
    b.output(b.node("MatMul", [r, b.const(b.rng.standard_normal((512, 64)) * 0.05, "w")]),
             (1, 16, 64))
    lib = tvm_ascend.build(b.model(), config=AGGRESSIVE)
    report = lib.report.to_json()
    kinds = {tuple(op["op"] for op in g["ops"]): g for g in report["groups"]}
    assert kinds[("relax.permute_dims",)]["on_npu"]
    assert not kinds[("relax.reshape",)]["launch"]
    assert report["kernels"] == {"ascend": 2, "host": 0}
    (edge,) = [e for e in report["unfused_edges"] if "slower" in e["reason"]]
    assert f"left alone as {FREE_VIEW}" in edge["reason"] and "estimate" in edge["reason"]
    figures = edge["reason"].split("slower: ")[1].split(" us apart")[0]
    fused, apart = (float(v) for v in figures.split(" us fused vs "))
    transpose, _ = _alone(merged_sites, ["relax.permute_dims"])
    view, _ = _alone(merged_sites, ["relax.reshape"])
    cost = merged_sites["cost"]
    assert apart == pytest.approx(cost.plan(transpose.prim).time_us, abs=0.01)
    assert apart < fused
    # the charge before: the view as a copy kernel, which made the slower kernel look faster
    assert fused < apart + cost.plan(view.prim).time_us
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(b.model(), b.feeds)[0], "float32_model")
