"""The one cost interface the planner asks: estimated time of a candidate kernel.

It uses the timing model of ``tvm_ascend.cost_model`` (per-core pipes, double buffering, the
device's start-up of a launch) and, for a kernel that model fails on, the roofline of the
kernel's GM traffic plus the start-up of a launch on every core, so every decision still has a
number. Decisions compare these device-side times; the host's submission of each launch is
left out of them (the host submits ahead of the device: ``cost_model.timing.end_to_end_us``). Plans (template choice,
knobs, tiling and the template's analysis) are cached by the structural hash of the PrimFunc:
a transformer repeats the same candidate once per layer. A candidate is analysed once per
template and planned once per knobs, and nothing is scheduled while the partitioner
explores: the schedule stage takes its kernels' plans from here and applies each once
(``GroupCost.kernel``). A tuning database, when given, is asked first: a kernel it holds a
record for is planned with the record's knobs. A ``PlannerRanking`` with a learned model
(``CompileConfig.planner_model``) ranks a template's tilings by their plans first, and the
timing model estimates only the ``planner_top_k`` best-ranked (``cost_model/planner_model.py``).

Example
-------
>>> cost = GroupCost(get_soc("Ascend910B1"), database="tuning_db")   # doctest: +SKIP
>>> plan = cost.plan(prim_func); plan.time_us                        # doctest: +SKIP
3.41
"""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm.ir.expr import Call, TensorLoad
from tvm.s_tir.stmt import SBlock

from ..cost_model.database import knobs_to_json, open_database, workload_of
from ..cost_model.planner_model import TIMING_ONLY, PlannerRanking
from ..cost_model.timing import device_startup_us, estimate_kernel, estimate_launch
from ..decision import Decision
from ..errors import TilingError
from ..schedules import (choose_template, is_runtime_tiled, knobs_from_json, template_by_name,
                         tiled_decision, tiling_at)
from ..schedules.symbolic import specialize
from ..schedules.analysis.tir_walk import walk

logger = logging.getLogger("tvm_ascend.partition")


@dataclass(frozen=True)
class KernelPlan:
    """A candidate kernel: its template and tiling (None when none fits), its estimate, and
    the analysis its plans come from; ``scheduled`` is set on the plans of kernels
    (``GroupCost.kernel``), which alone are scheduled."""

    template: object
    tiling: object
    decision: Decision
    time_us: float = float("inf")
    roofline_us: float = 0.0
    source: str = ""  # which model made the estimate
    knobs: object = None  # the template's knobs the estimate chose (None: its defaults)
    # which model chose the tiling among the template's variants, for the report
    decided_by: str = TIMING_ONLY
    scheduled: object = field(default=None, compare=False, repr=False)  # the applied PrimFunc
    prim: object = field(default=None, compare=False, repr=False)  # the PrimFunc it was made for
    # the template's analysis of ``prim``: other knobs plan from it, the kept plan applies it
    analysis: object = field(default=None, compare=False, repr=False)
    # a kernel tiled at run time: ((sizes, estimate in us), ...) at its range's ends and
    # midpoint, whose mean is ``time_us``; () for a static kernel
    range_us: tuple = field(default=(), compare=False)

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
    """Plans and estimates candidate kernels for one SoC (cached per PrimFunc); one per build.

    ``database`` (a tuning database folder or ``TuningDatabase``, or None): a kernel whose
    workload it holds is planned with the best recorded knobs that still plan, its estimate
    the timing model's on that tiling; the others with the fastest of the template's variants.
    ``ranking`` (``PlannerRanking``; default the timing model alone): which of those variants
    the timing model estimates.
    """

    def __init__(self, soc, database=None, ranking: PlannerRanking | None = None):
        self.soc = soc
        self.database = open_database(database)
        self.ranking = ranking or PlannerRanking.timing()
        self._cache: dict[int, list] = {}
        self._applied: dict[tuple, KernelPlan] = {}  # kernel() plans made for one PrimFunc

    def plan(self, prim) -> KernelPlan:
        """The plan of ``prim``: template, knobs, tiling and estimated time (analysed and
        planned, not scheduled)."""
        key = tvm_ffi.structural_hash(prim, map_free_vars=True)
        for seen, plan in self._cache.get(key, []):
            if tvm_ffi.structural_equal(seen, prim, map_free_vars=True):
                return plan
        template, analysis, tiling, decision = choose_template(prim, self.soc)
        plan = KernelPlan(template, tiling, decision, prim=prim, analysis=analysis)
        if template is not None:
            plan = self._recorded(plan, prim) or self._fastest_variant(plan, prim)
        self._cache.setdefault(key, []).append((prim, plan))
        return plan

    def kernel(self, prim, template: str, knobs: dict | None) -> KernelPlan:
        """The plan of the kernel ``prim`` with ``template`` and ``knobs`` (a kernel record's:
        None for the defaults), scheduled for ``prim`` itself: the partitioner's plan when it
        is that one. A module partitioned with another cost (another tuning database), or a
        kernel structurally equal to one planned before under other names (the printers print
        the parameters' names), is applied here once more."""
        plan = self.plan(prim)
        chosen = template_by_name(template)
        key = (prim, template, json.dumps(_knob_values(chosen, knobs), sort_keys=True))
        if key in self._applied:
            return self._applied[key]
        if plan.ok and plan.template is chosen and plan.prim.same_as(prim) and \
                _knob_values(chosen, plan.knobs) == _knob_values(chosen, knobs):
            # the partitioner's plan: scheduled now, once, for the kernel it became
            self._applied[key] = dataclasses.replace(
                plan, scheduled=chosen.apply(plan.analysis, plan.tiling))
        else:
            values = knobs_from_json(template, knobs) if knobs is not None else None
            scheduled, tiling = chosen.schedule(prim, self.soc, values) if values is not None \
                else chosen.schedule(prim, self.soc)
            decision = Decision.yes(f"{template} template, as the kernel's record names it")
            self._applied[key] = self._with_estimate(KernelPlan(
                chosen, tiling, decision, knobs=values, scheduled=scheduled, prim=prim), prim)
        return self._applied[key]

    def _recorded(self, plan: KernelPlan, prim) -> KernelPlan | None:
        """The plan with the tuning database's best knobs for ``prim``'s workload, or None
        when the database holds none that still plan (a warning says why, once per kernel)."""
        if self.database is None:
            return None
        record = self.database.best(workload_of(prim, plan.template.name, self.soc))
        if record is None:
            return None
        try:
            knobs = knobs_from_json(plan.template.name, record["knobs"])
            tiling = plan.tiling if \
                _knob_values(plan.template, knobs) == _knob_values(plan.template, None) else \
                plan.template.plan(plan.analysis, self.soc, knobs)
        except (TypeError, TilingError) as err:
            logger.warning("the tuning record of the %s kernel of shapes %s has knobs %s that "
                           "are not usable (%s); it is planned as if untuned",
                           plan.template.name, _shapes(prim), record["knobs"], err)
            return None
        reason = (f"{self._reason(plan, tiling)}; knobs {record['knobs']} of a tuning record "
                  f"({record['time_us']:.2f} us measured)")
        tuned = self._with_estimate(KernelPlan(plan.template, tiling, Decision.yes(reason),
                                               knobs=knobs, prim=prim, analysis=plan.analysis),
                                    prim)
        logger.info("the %s kernel of shapes %s: tuned knobs %s (%.2f us estimated)",
                    plan.template.name, _shapes(prim), record["knobs"], tuned.time_us)
        return dataclasses.replace(tuned, source=f"{tuned.source}, tiling of the tuning record")

    def _fastest_variant(self, plan: KernelPlan, prim) -> KernelPlan:
        """The template's variants (``template.variants``: knobs worth a look beside its
        defaults) planned too; the ranking says which of them the timing model estimates
        (all, with the timing model alone), the fastest estimate is kept and its knobs passed
        down, and the decision says what it beat."""
        variants = getattr(plan.template, "variants", None)
        candidates = [plan]  # the defaults first
        for knobs in (variants(prim, self.soc)[1:] if variants is not None else ()):
            try:
                tiling = plan.template.plan(plan.analysis, self.soc, knobs)
            except TilingError:
                continue
            candidates.append(KernelPlan(plan.template, tiling, plan.decision, knobs=knobs,
                                         prim=prim, analysis=plan.analysis))
        chosen, decided_by = self.ranking.choose(prim, [c.tiling for c in candidates],
                                                 self.soc)
        estimated = {i: self._with_estimate(candidates[i], prim) for i in chosen}
        # the first of the fastest, in the variants' order, as the timing model alone keeps
        best = min(chosen, key=lambda i: estimated[i].time_us)
        kept = dataclasses.replace(estimated[best], decided_by=decided_by)
        ranked = self.ranking.ranks and len(chosen) < len(candidates)
        if best == 0:
            if not ranked:
                return kept
            return dataclasses.replace(kept, decision=Decision.yes(
                f"{plan.decision.reason}; {decided_by}"))
        changed = {k: v for k, v in dataclasses.asdict(kept.knobs).items() if v is not None}
        against = (f"against {estimated[0].time_us:.1f} us with the defaults" if 0 in estimated
                   else "(the defaults not estimated)")
        reason = (f"{self._reason(plan, kept.tiling)}; knobs {changed}: est. "
                  f"{kept.time_us:.1f} us {against}")
        if ranked:
            reason += f"; {decided_by}"
        return dataclasses.replace(kept, decision=Decision.yes(reason))

    def _reason(self, plan: KernelPlan, tiling) -> str:
        """The template's decision worded for ``tiling`` (another variant than ``plan``'s
        defaults): its note follows the kernel planned (attention: flash or staged)."""
        return tiled_decision(plan.template, plan.analysis, tiling, self.soc).reason

    def _with_estimate(self, plan: KernelPlan, prim) -> KernelPlan:
        tiling = plan.tiling
        if is_runtime_tiled(tiling):
            return self._over_range(plan, prim)
        try:
            est = estimate_kernel(prim, tiling, self.soc)
            return dataclasses.replace(plan, time_us=est.time_us, roofline_us=est.roofline_us,
                                       source="timing model")
        except Exception as err:  # noqa: BLE001 - an estimate must never stop a build
            logger.warning("timing model failed on a %s kernel (%s); using the GM-bytes "
                           "roofline instead", plan.template.name, err)
        gm = tiling.gm_read_bytes + tiling.gm_write_bytes
        roofline = gm / (self.soc.gm_bandwidth_gbps * 1e3)  # GB/s -> bytes per us
        # the start-up of a launch on every core: this fallback knows the bytes, not the kind
        startup = device_startup_us(self.soc, 1, 1)
        return dataclasses.replace(plan, time_us=roofline + startup,
                                   roofline_us=roofline, source="GM-bytes roofline")


    def _over_range(self, plan: KernelPlan, prim) -> KernelPlan:
        """A kernel tiled at run time, estimated at its range's lower end, midpoint and upper
        end (the function and the call's tiling at each): its time is their mean, each kept
        in ``range_us`` for the report; the plan must tile at every one of them."""
        spec = tiling_spec(plan.tiling)
        samples = []
        for point in spec.samples():
            at = tiling_at(plan.tiling, point)
            est = self._with_estimate(dataclasses.replace(plan, tiling=at),
                                      specialize(prim, point))
            samples.append((point, est))
        mean = sum(e.time_us for _, e in samples) / len(samples)
        roofline = sum(e.roofline_us for _, e in samples) / len(samples)
        return dataclasses.replace(
            plan, time_us=mean, roofline_us=roofline,
            source=f"{samples[-1][1].source}, mean over the range's ends and midpoint",
            range_us=tuple((dict(point), round(e.time_us, 3)) for point, e in samples))


def tiling_spec(tiling):
    """The ``ShapeSpec`` of a kernel tiled at run time."""
    return tiling.plan.runtime.shapes


def _knob_values(template, knobs) -> dict:
    """Every knob's value (the template's defaults filled in) of ``knobs``: None, the
    template's Knobs, or a record's JSON object, so equal choices compare equal however they
    are spelled."""
    if isinstance(knobs, dict):
        knobs = knobs_from_json(template.name, knobs)
    return knobs_to_json(knobs if knobs is not None else template.Knobs())


def _shapes(prim) -> str:
    """A kernel's parameter shapes, as a warning names the kernel before it has a symbol."""
    return ", ".join("x".join(str(int(d)) for d in p.shape) for p in prim.params)


__all__ = ["GroupCost", "KernelPlan", "host_estimate", "tir_flops"]
