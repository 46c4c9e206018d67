"""What the NPU supports: ``check_call`` decides it for one Relax call, with the reason.

Grouping is decided by ``check_call`` and TVM's FuseOps (``partition/grouping.py``), never by
pattern matching. The ``ascend.*`` pattern table is a mirror of the same support, registered
with TVM's pattern registry for tools that look for a backend's patterns there (each family
lives in its own file and contributes ``(name, pattern, annotations, check)`` entries; list
order would be FuseOpsByPattern's priority, later entries winning).
"""
from __future__ import annotations

import tvm
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns

from ...decision import Decision
from .conv import check_conv_call, conv_patterns
from .elementwise import check_elementwise_call, elementwise_patterns, tensor_type_of
from .layout import HOST_VIEW_OPS, check_view_call, is_view_only, view_patterns
from .matmul import check_matmul_call, matmul_patterns
from .reduction import check_reduction_call, reduction_patterns

_REGISTERED = False


def pattern_table() -> list:
    """All ``ascend.*`` entries in priority order (lowest first)."""
    return (list(elementwise_patterns()) + list(reduction_patterns()) + list(view_patterns())
            + list(matmul_patterns()) + list(conv_patterns()))


def register_ascend_patterns() -> None:
    """Register the table once per process."""
    global _REGISTERED  # noqa: PLW0603 - registration is process-wide in TVM itself
    if not _REGISTERED:
        register_patterns(pattern_table())
        _REGISTERED = True


def ascend_patterns():
    """The registered patterns, as TVM's registry returns them."""
    register_ascend_patterns()
    return get_patterns_with_prefix("ascend")


def check_call(call) -> Decision:
    """Whether one Relax call can run on the NPU, with the reason (first family that knows it)."""
    empty = _zero_size_shape(call)
    if empty is not None:
        return Decision.no(f"{call.op.name} on a tensor with a zero-size dimension {empty}: it "
                           "has no elements to compute, so it runs on the host without a kernel")
    for family in (check_reduction_call, check_view_call, check_matmul_call,
                   check_conv_call):
        decision = family(call)
        if decision is not None:
            return decision
    return check_elementwise_call(call)


def _zero_size_shape(call) -> list | None:
    """The first static shape with a 0 among ``call``'s tensor arguments and result, or None.
    A template would tile zero elements into zero tiles (a division by zero while planning)."""
    for expr in list(call.args) + [call]:
        shape = getattr(tensor_type_of(expr), "shape", None)
        dims = getattr(shape, "values", None) or []
        static = [int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in dims]
        if 0 in static:
            return static
    return None


__all__ = ["pattern_table", "register_ascend_patterns", "ascend_patterns", "check_call",
           "is_view_only", "HOST_VIEW_OPS"]
