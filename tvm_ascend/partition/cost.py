"""The one cost interface the planner asks: estimated time of a candidate kernel.

It uses the timing model of ``tvm_ascend.cost_model`` (per-core pipes, double buffering, launch
overhead) and, for a kernel that model fails on, the roofline of the kernel's GM traffic plus
the SoC's launch overhead, so every decision still has a number. Plans (template choice and
tiling) are cached by the structural hash of the PrimFunc: a transformer repeats the same
candidate once per layer.

Example
-------
>>> cost = GroupCost(get_soc("Ascend910B1"))                     # doctest: +SKIP
>>> plan = cost.plan(prim_func); plan.time_us                    # doctest: +SKIP
3.41
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm.ir.expr import Call, TensorLoad
from tvm.s_tir.stmt import SBlock

from ..cost_model.timing import estimate_kernel, estimate_launch
from ..decision import Decision
from ..errors import TilingError
from ..schedules import plan_template
from ..schedules.analysis.tir_walk import walk

logger = logging.getLogger("tvm_ascend.partition")


@dataclass(frozen=True)
class KernelPlan:
    """A candidate kernel: its template and tiling (None when none fits) and estimate."""

    template: object
    tiling: object
    decision: Decision
    time_us: float = float("inf")
    roofline_us: float = 0.0
    source: str = ""  # which model made the estimate
    knobs: object = None  # the template's knobs the estimate chose (None: its defaults)

    @property
    def ok(self) -> bool:
        return self.template is not None


def _arith_nodes(expr) -> int:
    """Arithmetic operations in one stored value (loads and constants are free)."""
    if isinstance(expr, TensorLoad) or not hasattr(expr, "ty"):
        return 0
    children = list(getattr(expr, "args", None) or []) + \
        [getattr(expr, name) for name in ("a", "b", "value") if hasattr(expr, name)]
    own = 1 if (hasattr(expr, "a") or isinstance(expr, Call)) else 0
    return own + sum(_arith_nodes(c) for c in children if isinstance(c, tvm.ir.Expr))


def tir_flops(prim) -> float:
    """Floating-point operations of a PrimFunc: per block, its iteration count times the
    arithmetic in its stored value (a multiply-add counts 2), the way a roofline counts them."""
    total = [0.0]

    def visit(node):
        if isinstance(node, SBlock) and node.iter_vars:
            count = 1.0
            for iv in node.iter_vars:
                count *= float(iv.dom.extent.value) if hasattr(iv.dom.extent, "value") else 1.0
            store = node.body
            value = getattr(store, "value", None)
            total[0] += count * max(1, _arith_nodes(value) if value is not None else 1)

    walk(prim.body, visit)
    return total[0]


def host_estimate(io_bytes: int, soc, flops: float = 0.0) -> dict:
    """A group with no Ascend kernel, counted as one device launch at its roofline (what it
    would cost if an op-by-op kernel ran it), so whole-model estimates compare like with like:
    its GM bytes and its flops (a host Conv costs its MACs, not only its bytes)."""
    est = estimate_launch(io_bytes, flops, soc, dtype_bytes=4)
    return {"time_us": round(est.time_us, 3), "roofline_us": round(est.roofline_us, 3),
            "source": "host op counted as one device launch (timing model)"}


class GroupCost:
    """Plans and estimates candidate kernels for one SoC (cached per PrimFunc)."""

    def __init__(self, soc):
        self.soc = soc
        self._cache: dict[int, list] = {}

    def plan(self, prim) -> KernelPlan:
        """The plan of ``prim``: template, tiling and estimated time."""
        key = tvm_ffi.structural_hash(prim, map_free_vars=True)
        for seen, plan in self._cache.get(key, []):
            if tvm_ffi.structural_equal(seen, prim, map_free_vars=True):
                return plan
        template, tiling, decision = plan_template(prim, self.soc)
        plan = KernelPlan(template, tiling, decision)
        if template is not None:
            plan = self._fastest_variant(self._with_estimate(plan, prim), prim)
        self._cache.setdefault(key, []).append((prim, plan))
        return plan

    def _fastest_variant(self, plan: KernelPlan, prim) -> KernelPlan:
        """The template's variants (``template.variants``: knobs worth a look beside its
        defaults) estimated too; the fastest is kept and its knobs passed down, and the
        decision says what it beat."""
        variants = getattr(plan.template, "variants", None)
        if variants is None:
            return plan
        best, default_us = plan, plan.time_us
        for knobs in variants(prim, self.soc)[1:]:
            try:
                _, tiling = plan.template.schedule(prim, self.soc, knobs)
            except TilingError:
                continue
            candidate = self._with_estimate(
                KernelPlan(plan.template, tiling, plan.decision, knobs=knobs), prim)
            if candidate.time_us < best.time_us:
                best = candidate
        if best is plan:
            return plan
        changed = {k: v for k, v in dataclasses.asdict(best.knobs).items() if v is not None}
        reason = (f"{plan.decision.reason}; knobs {changed}: est. {best.time_us:.1f} us "
                  f"against {default_us:.1f} us with the defaults")
        return dataclasses.replace(best, decision=Decision.yes(reason))

    def _with_estimate(self, plan: KernelPlan, prim) -> KernelPlan:
        tiling = plan.tiling
        try:
            est = estimate_kernel(prim, tiling, self.soc)
            return KernelPlan(plan.template, tiling, plan.decision, est.time_us,
                              est.roofline_us, "timing model", plan.knobs)
        except Exception as err:  # noqa: BLE001 - an estimate must never stop a build
            logger.warning("timing model failed on a %s kernel (%s); using the GM-bytes "
                           "roofline instead", plan.template.name, err)
        gm = tiling.gm_read_bytes + tiling.gm_write_bytes
        roofline = gm / (self.soc.gm_bandwidth_gbps * 1e3)  # GB/s -> bytes per us
        return KernelPlan(plan.template, tiling, plan.decision,
                          roofline + self.soc.launch_overhead_us, roofline, "GM-bytes roofline",
                          plan.knobs)


__all__ = ["GroupCost", "KernelPlan", "host_estimate", "tir_flops"]
