"""What a site (an op or a group) costs left alone: the one answer every merge is weighed against.

``merge.py``'s pairwise and recompute passes, ``export.py`` and ``region_search.py`` compare a
merged kernel's estimate with the sum of its parts' ``alone_cost``; ``grouping._offload`` marks a
site left alone free from the same ``view_copy_reason``, so the search cannot count a view free
(or charge it a kernel) where the build does otherwise.

A site of layout views only (reshape, squeeze, expand_dims, flatten) never becomes an NPU kernel
on its own: it stays on the host. There it is free only if TVM's ``RewriteDataflowReshape``
(run by ``tvm.compile``) turns its call_tir into a view: one reshape-pattern PrimFunc whose
result stays inside main's dataflow block. Anything else (two views FuseOps put in one group,
a view bound as main's single output) the host runs as a copy, charged like any host group: one
launch at the roofline of its GM bytes (``cost.host_estimate``). Charging such a site the NPU
copy kernel it never becomes made every merge absorbing a free view look that kernel's time
better than it is.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax

from .cost import host_estimate, tir_flops
from .dim_bounds import bound_bytes, prim_ranges, range_analyzer
from .patterns import is_view_only

UNTILED_US = 1e6  # a unit no template tiles alone: any merge that tiles it is worth taking

FREE_VIEW = "the view free on the host"
KERNEL = "a kernel of its own"


@dataclass(frozen=True)
class AloneCost:
    """A site's estimated time left alone, its launches (0 for a free view) and where it runs,
    in words for the decisions' text."""

    time_us: float
    launches: int
    how: str


def view_copy_reason(site) -> str | None:
    """None for a site that is not views only; "" for views the host makes free (no copy, no
    launch); otherwise why the host copies them."""
    if not is_view_only(m.op for m in site.members):
        return None
    if site.prim is None:  # a Relax view op the VM runs itself (memory.view, ...)
        return ""
    if not isinstance(site.var, relax.DataflowVar):
        return ("its result leaves main's dataflow block (a model output), where TVM's "
                "RewriteDataflowReshape leaves the call a copy")
    if not _host_rewrites_to_view(site):
        return ("TVM's RewriteDataflowReshape does not make its PrimFunc a view (no single "
                "reshape pattern, e.g. several views in one group), so the host copies it")
    return ""


# structural hash -> [(PrimFunc, answer)]: a layer repeats its views. Bounded: a process that
# builds many models (a tuner, the test run) must not keep every view PrimFunc it ever saw.
_REWRITTEN: dict = {}
_REWRITTEN_MAX = 4096


def _host_rewrites_to_view(site) -> bool:
    """Whether ``RewriteDataflowReshape`` turns the site's call into ``relax.reshape``: the
    pass itself is asked, on a function holding only that call, so its rule is not copied."""
    key = tvm_ffi.structural_hash(site.prim, map_free_vars=True)
    for seen, answer in _REWRITTEN.get(key, []):
        if tvm_ffi.structural_equal(seen, site.prim, map_free_vars=True):
            return answer
    params = [relax.Var(f"p{i}", arg.ty) for i, arg in enumerate(site.args)]
    bb = relax.BlockBuilder()
    callee = bb.add_func(site.prim, "view")
    with bb.function("main", params):
        with bb.dataflow():
            inner = bb.emit(relax.op.call_tir(callee, relax.Tuple(params), site.call.ty_args[0]))
            out = bb.emit_output(inner)
        bb.emit_func_output(out)
    rewritten = relax.transform.RewriteDataflowReshape()(bb.get())
    value = rewritten["main"].body.blocks[0].bindings[0].value
    answer = isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.reshape"
    if len(_REWRITTEN) >= _REWRITTEN_MAX:
        _REWRITTEN.clear()
    _REWRITTEN.setdefault(key, []).append((site.prim, answer))
    return answer


def alone_cost(site, cost) -> AloneCost:
    """The estimate of ``site`` as it ends up when no merge takes it (``cost``: the
    GroupCost): a free view 0 us and no launch, a view the host copies its host estimate, a
    kernel its plan's, and a kernel no template tiles ``UNTILED_US``."""
    copy = view_copy_reason(site)
    if copy == "":
        return AloneCost(0.0, 0, FREE_VIEW)
    if copy is not None:
        # as grouping._offload estimates any host group, so the search and the report agree
        estimate = host_estimate(io_bytes(site), cost.soc, tir_flops(site.prim))
        return AloneCost(estimate["time_us"], 1,
                         f"the view copied on the host ({copy})")
    plan = cost.plan(site.prim)
    if not plan.ok:
        return AloneCost(UNTILED_US, 1, "no template tiles it alone")
    return AloneCost(plan.time_us, 1, KERNEL)


def merged_us(merged, plan, cost) -> float:
    """The estimate of ``merged``, a site a merge would make, planned as ``plan``: the plan's,
    unless it holds views only, which no kernel runs (they stay on the host: ``alone_cost``)."""
    if view_copy_reason(merged) is not None:
        return alone_cost(merged, cost).time_us
    return plan.time_us


def alone_us(cost, *sites) -> float:
    """The summed estimate of ``sites`` each left alone."""
    return sum(alone_cost(site, cost).time_us for site in sites)


def alone_launches(cost, *sites) -> int:
    """The launches of ``sites`` each left alone (a free view launches nothing)."""
    return sum(alone_cost(site, cost).launches for site in sites)


def slower_point(plan, cost, *sites) -> str:
    """"" where a merged kernel tiled at run time (``plan.range_us``: its estimates at the
    range's ends and midpoint) is no slower than ``sites`` left alone at every one of those
    points; otherwise the first point where it is, in words. The means can hide a merge that
    wins at the low end and loses at the high end (a bound a call may reach): the issue asks
    for no slower across the range. A static part costs the same at every point; a part tiled
    at run time costs its own estimate there (matched on the dimensions it has)."""
    for sizes, fused in plan.range_us:
        split = sum(_alone_at(site, cost, sizes) for site in sites)
        if fused > split + 1e-9:
            where = ", ".join(f"{name} = {size}" for name, size in sizes.items())
            return f"at {where} it is slower: {fused:.2f} us fused vs {split:.2f} us apart"
    return ""


def _alone_at(site, cost, sizes: dict) -> float:
    alone = alone_cost(site, cost)
    if alone.how != KERNEL:
        return alone.time_us
    for own, us in cost.plan(site.prim).range_us:
        if all(sizes.get(name) == size for name, size in own.items()):
            return us
    return alone.time_us  # static, or sampled at other points: its mean


def free_views(cost, *sites) -> str:
    """", with X free on the host" naming the parts left alone as free views ("" if none):
    the decisions say when a part was charged nothing."""
    names = [site.name for site in sites if alone_cost(site, cost).how == FREE_VIEW]
    if not names:
        return ""
    return f", with {' and '.join(names)} left alone as {FREE_VIEW}"


def io_bytes(site) -> int:
    """Bytes a site reads and writes if each tensor crosses GM once (host groups' traffic); a
    tensor over a ranged symbolic dimension counts at the range's upper bound, as the
    report's peak memory does (``dim_bounds.bound_bytes``)."""
    types = [arg.ty for arg in site.args] + [site.var.ty]
    analyzer = range_analyzer(types, prim_ranges(site.prim))
    return sum(bound_bytes(ty, analyzer) for ty in types)


__all__ = ["AloneCost", "FREE_VIEW", "UNTILED_US", "alone_cost", "alone_launches", "alone_us",
           "free_views", "io_bytes", "merged_us", "slower_point", "view_copy_reason"]
