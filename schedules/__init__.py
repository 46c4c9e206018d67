"""Tiling templates (installed as ``tvm_ascend.schedules``): one per op class, knobs as data.

A template recognises a fused PrimFunc of its class, plans a ``Tiling`` for a SoC, and applies it
with TVM's TIR schedule primitives. Templates know TIR and the SoC profile, never ONNX.
"""
from .elementwise import ElementwiseKnobs, ElementwiseSchedule
from .matmul import MatmulSchedule
from .row_reduce import RowReduceSchedule
from .tiling import Tiling
from .tile_values import AccessKind, classify_load, plan_tile_values

TEMPLATES = (ElementwiseSchedule, RowReduceSchedule, MatmulSchedule)

__all__ = ["ElementwiseKnobs", "ElementwiseSchedule", "RowReduceSchedule", "MatmulSchedule",
           "Tiling", "AccessKind", "classify_load",
           "plan_tile_values", "TEMPLATES", "select_template", "template_by_name",
           "supports"]


def select_template(func, soc):
    """(template, Decision): the first template that applies to ``func`` and tiles it on ``soc``."""
    from tvm_ascend.decision import Decision
    from tvm_ascend.errors import TilingError

    reasons = []
    for template in TEMPLATES:
        decision = template.applies(func)
        if not decision:
            reasons.append(f"{template.name}: {decision.reason}")
            continue
        try:
            template.schedule(func, soc)
        except TilingError as err:
            reasons.append(f"{template.name}: {err}")
            continue
        return template, Decision.yes(f"{template.name} template tiles it on {soc.name}")
    return None, Decision.no("no schedule template fits (" + "; ".join(reasons) + ")")


def template_by_name(name: str):
    for template in TEMPLATES:
        if template.name == name:
            return template
    raise KeyError(name)


def supports(func):
    """Decision: does any template take ``func`` (legality only, no tiling)?"""
    from tvm_ascend.decision import Decision

    reasons = []
    for template in TEMPLATES:
        decision = template.applies(func)
        if decision:
            return decision
        reasons.append(decision.reason)
    return Decision.no("; ".join(reasons))
