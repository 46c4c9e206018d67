"""Reductions and the normalisations built on them: over the last axis (row-reduce template), and
plain ReduceSum/Mean/Max/Min over adjacent non-last axes (axis-reduce template)."""
from __future__ import annotations

from tvm.relax.dpl.pattern import is_op, wildcard

from ...decision import Decision
from tvm import tirx

from .elementwise import (SUPPORTED_DTYPES, short_op_name, static_shape, tensor_type_of,
                          whole_dims_shape)

# relax op -> (operands, name of the axis attribute)
REDUCTION_OPS = {
    "relax.sum": (1, "axis"), "relax.mean": (1, "axis"), "relax.max": (1, "axis"),
    "relax.min": (1, "axis"), "relax.nn.softmax": (1, "axis"),
    "relax.nn.log_softmax": (1, "axis"), "relax.nn.layer_norm": (3, "axes"),
    "relax.nn.rms_norm": (2, "axes"),
}
# Reductions the axis-reduce template also takes over adjacent axes that are not the last one
# (softmax and the normalisations read their reduced values back per element: two passes).
# Last-axis reductions the row template tiles at run time over rows of symbolic length: no
# constant of theirs is the length (a mean's 1 / C would be the range's upper bound's)
RUNTIME_LENGTH_OPS = ("relax.nn.softmax", "relax.nn.log_softmax")
AXIS_REDUCTION_OPS = ("relax.sum", "relax.mean", "relax.max", "relax.min")


def make_reduction_pattern(op_name: str, arity: int):
    """(pattern, annotations) for one last-axis reduction."""
    root = is_op(op_name)(*[wildcard() for _ in range(arity)])
    return root, {"root": root}


def _axes(call, attr: str) -> list[int] | None:
    value = getattr(call.attrs, attr, None)
    if value is None:
        return None
    if isinstance(value, int) or hasattr(value, "value"):
        return [int(value)]
    return [int(v) for v in value]


def check_reduction_call(call) -> Decision | None:
    """Decision for a reduction op, or None when ``call`` is not one (another family decides)."""
    name = getattr(getattr(call, "op", None), "name", None)
    if name not in REDUCTION_OPS:
        return None
    data = tensor_type_of(call.args[0])
    if data is None or data.dtype not in SUPPORTED_DTYPES or not whole_dims_shape(data):
        return Decision.no(f"{short_op_name(name)} needs a static {' or '.join(SUPPORTED_DTYPES)} "
                           "input; it runs on the host")
    rank = len(data.shape.values)
    axes = _axes(call, REDUCTION_OPS[name][1])
    last = data.shape.values[-1] if rank else None
    if axes is not None and sorted(a % rank for a in axes) == [rank - 1]:
        if not static_shape(data) and not isinstance(last, tirx.IntImm):
            if name not in RUNTIME_LENGTH_OPS:
                return Decision.no(f"{short_op_name(name)} reduces a symbolic axis ({last}); "
                                   "run-time tiling takes rows of symbolic length for Softmax "
                                   "only, so it runs on the host")
            return Decision.yes(f"{short_op_name(name)} over the last axis: row-reduce kernel "
                                f"(rows of symbolic length {last}: tiled at run time)")
        tiled = "" if static_shape(data) else " (symbolic rows: tiled at run time)"
        return Decision.yes(f"{short_op_name(name)} over the last axis: row-reduce kernel{tiled}")
    if not static_shape(data):
        return Decision.no(f"{short_op_name(name)} over axes {axes} of a symbolic shape: only "
                           "last-axis reductions are tiled at run time; it runs on the host")
    if axes is not None and name in AXIS_REDUCTION_OPS and _adjacent_not_last(axes, rank):
        return Decision.yes(f"{short_op_name(name)} over axes {axes}: axis-reduce kernel")
    return Decision.no(f"{short_op_name(name)} over axes {axes}: the row-reduce kernel reduces the "
                       "last axis only, the axis-reduce kernel adjacent axes before it "
                       "(ReduceSum/Mean/Max/Min); it runs on the host")


def _adjacent_not_last(axes: list[int], rank: int) -> bool:
    """Whether ``axes`` are one run of adjacent axes that ends before the last axis."""
    found = sorted({a % rank for a in axes})
    return bool(found) and found == list(range(found[0], found[-1] + 1)) and \
        found[-1] < rank - 1


def _registry_check(context) -> bool:
    decision = check_reduction_call(context.annotated_expr["root"])
    return bool(decision)


def reduction_patterns() -> list:
    """Entries ``("ascend.<op>", pattern, annotations, check)`` for every reduction op."""
    entries = []
    for op_name, (arity, _) in REDUCTION_OPS.items():
        pattern, annotations = make_reduction_pattern(op_name, arity)
        entries.append((f"ascend.{short_op_name(op_name)}", pattern, annotations, _registry_check))
    return entries


__all__ = ["reduction_patterns", "check_reduction_call"]
