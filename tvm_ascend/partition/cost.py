"""The one cost interface the planner asks: estimated time of a candidate kernel.

It uses the timing model of ``tvm_ascend.cost_model`` (per-core pipes, double buffering, launch
overhead) and, when that model is not installed, the roofline of the kernel's GM traffic plus
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

import logging
from dataclasses import dataclass

import tvm_ffi

from ..decision import Decision
from ..schedules import plan_template

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

    @property
    def ok(self) -> bool:
        return self.template is not None


def _timing_model():
    try:
        from ..cost_model import estimate_kernel
    except ImportError:
        return None
    return estimate_kernel


def host_estimate(io_bytes: int, soc) -> dict:
    """A group with no Ascend kernel, counted as one device launch at its GM roofline (what it
    would cost if an op-by-op kernel ran it), so whole-model estimates compare like with like."""
    try:
        from ..cost_model import estimate_launch
        est = estimate_launch(io_bytes, 0.0, soc)
        return {"time_us": round(est.time_us, 3), "roofline_us": round(est.roofline_us, 3),
                "source": "host op counted as one device launch (timing model)"}
    except ImportError:
        roofline = io_bytes / (soc.gm_bandwidth_gbps * 1e3)
        return {"time_us": round(roofline + soc.launch_overhead_us, 3),
                "roofline_us": round(roofline, 3),
                "source": "host op counted as one device launch (GM-bytes roofline)"}


class GroupCost:
    """Plans and estimates candidate kernels for one SoC (cached per PrimFunc)."""

    def __init__(self, soc):
        self.soc = soc
        self._cache: dict[int, list] = {}
        self._estimate = _timing_model()

    def plan(self, prim) -> KernelPlan:
        """The plan of ``prim``: template, tiling and estimated time."""
        key = tvm_ffi.structural_hash(prim, map_free_vars=True)
        for seen, plan in self._cache.get(key, []):
            if tvm_ffi.structural_equal(seen, prim, map_free_vars=True):
                return plan
        template, tiling, decision = plan_template(prim, self.soc)
        plan = KernelPlan(template, tiling, decision)
        if template is not None:
            plan = self._with_estimate(plan, prim)
        self._cache.setdefault(key, []).append((prim, plan))
        return plan

    def _with_estimate(self, plan: KernelPlan, prim) -> KernelPlan:
        tiling = plan.tiling
        if self._estimate is not None:
            try:
                est = self._estimate(prim, tiling, self.soc)
                return KernelPlan(plan.template, tiling, plan.decision, est.time_us,
                                  est.roofline_us, "timing model")
            except Exception as err:  # noqa: BLE001 - an estimate must never stop a build
                logger.warning("timing model failed on a %s kernel (%s); using the GM-bytes "
                               "roofline instead", plan.template.name, err)
        gm = tiling.gm_read_bytes + tiling.gm_write_bytes
        roofline = gm / (self.soc.gm_bandwidth_gbps * 1e3)  # GB/s -> bytes per us
        return KernelPlan(plan.template, tiling, plan.decision,
                          roofline + self.soc.launch_overhead_us, roofline, "GM-bytes roofline")


__all__ = ["GroupCost", "KernelPlan", "host_estimate"]
