"""The ``ascend.*`` pattern table: what the NPU supports, registered with TVM's pattern registry.

List order is priority order for FuseOpsByPattern (later entries win); each family lives in
its own file and contributes ``(name, pattern, annotations, check)`` entries.
"""
from __future__ import annotations

from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns

from ...decision import Decision
from .conv import check_conv_call, conv_patterns
from .elementwise import check_elementwise_call, elementwise_patterns
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
    for family in (check_reduction_call, check_view_call, check_matmul_call,
                   check_conv_call):
        decision = family(call)
        if decision is not None:
            return decision
    return check_elementwise_call(call)


__all__ = ["pattern_table", "register_ascend_patterns", "ascend_patterns", "check_call",
           "is_view_only", "HOST_VIEW_OPS"]
