"""Tiling templates (installed as ``tvm_ascend.schedules``): one per op class, knobs as data.

A template recognises a fused PrimFunc of its class, plans a ``Tiling`` for a SoC, and applies it
with TVM's TIR schedule primitives. Templates know TIR and the SoC profile, never ONNX.
"""
import dataclasses

from .attention import AttentionKnobs, AttentionSchedule
from .axis_reduce import AxisReduceKnobs, AxisReduceSchedule
from .conv2d import Conv2dKnobs, Conv2dSchedule
from .data_movement import DataMovementKnobs, DataMovementSchedule
from .elementwise import ElementwiseKnobs, ElementwiseSchedule
from .matmul import MatmulKnobs, MatmulSchedule
from .matmul_gated import GatedMatmulSchedule
from .matmul_rows import MatmulRowsKnobs, MatmulRowsSchedule
from .pool2d import Pool2dKnobs, Pool2dSchedule
from .row_reduce import RowReduceKnobs, RowReduceSchedule
from .runtime_tiling import is_runtime_tiled, tiling_at
from .tiling import Tiling
from .analysis.tile_values import AccessKind, classify_load, plan_tile_values

# Conv2dSchedule last: no other template takes a conv (its first block is pad_temp and its
# reduction runs over three axes), so its place only matters for ties, which it cannot have.
# AttentionSchedule after MatmulSchedule: the matmul template refuses any group with a
# reduction after its product, so the two never both take a group; attention only takes groups
# with two products around a softmax, which no other template tiles.
# MatmulRowsSchedule right after MatmulSchedule: it takes only groups with a reduction over the
# product's N axis after the product, which MatmulSchedule refuses, and MatmulSchedule takes
# only groups without one, so the two never both take a group; it refuses a second product
# (attention's PV reduces into whole rows, not one value per row), which AttentionSchedule takes.
# GatedMatmulSchedule after MatmulRowsSchedule: it takes only groups whose first two blocks are
# products of one A (SwiGLU's gate and up), which the matmul template refuses (its second block
# reduces) and so do matmul-rows (a product is no reduction of each row of the first) and
# attention (no softmax between them).
# Pool2dSchedule last: it only takes a reduction over a 2-D (kh, kw) window, which every other
# template refuses (row-reduce wants one reduced axis, conv three, matmul a product).
# DataMovementSchedule before RowReduceSchedule: it refuses groups whose every operand is whole
# rows read at fixed bases (a Transpose that keeps the last axis, a slice of outer axes), which
# stay row copies; it takes rows gathered by an index tensor (Gather), which the row template
# would read as row slices it cannot print.
# AxisReduceSchedule right after RowReduceSchedule: it takes only reductions whose reduced axes
# have inner axes after them (I > 1), which the row template refuses (it reduces the last axis),
# and refuses the last-axis ones, so the two never both take a group.
TEMPLATES = (ElementwiseSchedule, DataMovementSchedule, RowReduceSchedule, AxisReduceSchedule,
             MatmulSchedule, MatmulRowsSchedule, GatedMatmulSchedule, Conv2dSchedule, AttentionSchedule, Pool2dSchedule)

__all__ = ["ElementwiseKnobs", "ElementwiseSchedule", "RowReduceSchedule", "MatmulSchedule",
           "Conv2dSchedule", "Conv2dKnobs", "AttentionSchedule", "AttentionKnobs",
           "DataMovementSchedule", "DataMovementKnobs",
           "RowReduceKnobs", "AxisReduceSchedule", "AxisReduceKnobs",
           "MatmulKnobs", "MatmulRowsSchedule", "MatmulRowsKnobs", "GatedMatmulSchedule",
           "Pool2dSchedule", "Pool2dKnobs",
           "Tiling", "AccessKind", "classify_load",
           "plan_tile_values", "TEMPLATES", "plan_template", "choose_template", "tiled_decision",
           "select_template", "template_by_name", "knobs_from_json", "supports",
           "tiling_at", "is_runtime_tiled"]


def plan_template(func, soc):
    """(template, Tiling, Decision) for ``func`` on ``soc``, as ``choose_template`` chooses."""
    template, _, tiling, decision = choose_template(func, soc)
    return template, tiling, decision


def choose_template(func, soc):
    """(template, analysis, Tiling, Decision) for ``func`` on ``soc``: among the templates that
    tile it, the one with the fewest elements gathered on the scalar unit, then the first in
    TEMPLATES order (a scalar gather is slow on the device, vector work is not). Each
    template that applies is analysed and planned once, nothing is scheduled: the caller
    applies the plan it keeps (``template.apply(analysis, tiling)``), and plans other knobs
    from the same analysis. Template, analysis and Tiling are None when no template fits; the
    Decision then says why for each."""
    from tvm_ascend.decision import Decision
    from tvm_ascend.errors import TilingError

    reasons, fits, closest = [], [], []
    for template in TEMPLATES:
        decision = _applies(template, func)
        if not decision:
            reasons.append(f"{template.name}: {_one_line(decision.reason)}")
            continue
        try:
            analysis = template.analyse(func)
            tiling = template.plan(analysis, soc)
        except TilingError as err:
            reasons.append(f"{template.name}: {_one_line(err)}")
            closest.append(f"the {template.name} template takes it but cannot tile it: "
                           f"{_first_line(err)}")
            continue
        except Exception as err:  # noqa: BLE001 - a schedule primitive refusing is a refusal
            # (TVM's ScheduleError and the like): the group goes to another template or the
            # host with the reason, never a crash of the build
            reasons.append(f"{template.name}: {type(err).__name__} while scheduling "
                           f"({_one_line(err)})")
            closest.append(f"the {template.name} template takes it but TVM could not schedule "
                           f"it ({type(err).__name__})")
            continue
        fits.append((tiling.work.scalar_elems, len(fits), template, analysis, tiling))
    if not fits:
        # the summary is a template that recognised the group and failed to tile it (a tiling
        # refusal before a TVM error); none when no template recognised it
        closest.sort(key=lambda text: "TVM could not" in text)
        return None, None, None, Decision.no(
            "no schedule template fits (" + "; ".join(reasons) + ")", closest[0] if closest else "")
    _, _, best, analysis, tiling = min(fits, key=lambda fit: fit[:2])
    return best, analysis, tiling, tiled_decision(best, analysis, tiling, soc)


def tiled_decision(template, analysis, tiling, soc):
    """The Decision that ``template`` tiles the group on ``soc`` as ``tiling`` plans it, with
    what the report should say of that plan (``analysis.report_note(tiling, soc)``: attention's
    causal mask, skipped or not by the kernel printed; a matmul's run-time tiling). The
    partitioner asks again for the variant it keeps, since the note follows the plan."""
    from tvm_ascend.decision import Decision

    note = analysis.report_note(tiling, soc) if hasattr(analysis, "report_note") else ""
    return Decision.yes(f"{template.name} template tiles it on {soc.name}"
                        + (f"; {note}" if note else ""))


def _one_line(err) -> str:
    """An error as one report line: TVM's schedule errors print the whole function between
    their first line and the ``Error message:`` that says what went wrong; keep those two."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    detail = next((line for line in lines[1:] if "Error message:" in line), "")
    return f"{lines[0]} {detail}".strip()


def _first_line(err) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _applies(template, func):
    """``template.applies(func)``; an analysis that raises (an index TVM's arithmetic cannot
    bound, ...) is a refusal with its reason, never a crash of the build."""
    from tvm_ascend.decision import Decision

    try:
        return template.applies(func)
    except Exception as err:  # noqa: BLE001 - any analysis failure means "not this template"
        return Decision.no(f"{type(err).__name__} while analysing ({_one_line(err)})")


def select_template(func, soc):
    """(template, Decision) for ``func`` on ``soc``, as ``plan_template`` chooses."""
    template, _, decision = plan_template(func, soc)
    return template, decision


def template_by_name(name: str):
    for template in TEMPLATES:
        if template.name == name:
            return template
    raise KeyError(name)


def knobs_from_json(template_name: str, values: dict):
    """The knobs dataclass of ``template_name`` (its template's ``Knobs``) from a record's
    ``knobs`` object."""
    cls = template_by_name(template_name).Knobs
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise TypeError(f"unknown {template_name} knobs {sorted(unknown)}")
    return cls(**values)


def supports(func):
    """Decision: does any template take ``func`` (legality only, no tiling)?"""
    from tvm_ascend.decision import Decision

    reasons = []
    for template in TEMPLATES:
        decision = _applies(template, func)
        if decision:
            return decision
        reasons.append(decision.reason)
    return Decision.no("; ".join(reasons))
