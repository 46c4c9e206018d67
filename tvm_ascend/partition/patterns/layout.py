"""Layout views (Reshape, Squeeze, Unsqueeze, Flatten): free inside a group, where the element
order does not change, so they join elementwise and row kernels instead of splitting them.
Data movement that copies (Transpose, Slice, Concat, Gather, Expand, Tile) runs on the
data-movement template (schedules/data_movement.py), fused with its consumer by the merge rule.
"""
from __future__ import annotations

from tvm.relax.dpl.pattern import is_op, wildcard

from ...decision import Decision
from .elementwise import (SUPPORTED_DTYPES, short_op_name, static_shape, tensor_type_of,
                          whole_dims_shape)

VIEW_OPS = {"relax.reshape": 2, "relax.squeeze": 1, "relax.expand_dims": 1,
            "relax.flatten": 1}
# Data movement that copies; FuseOps leaves these alone and the merge rule (which checks that a
# template tiles the result) joins them with their consumer. Values are the pattern arities.
MOVE_OPS = {"relax.permute_dims": 1, "relax.strided_slice": 5, "relax.concat": 1,
            "relax.take": 2, "relax.broadcast_to": 2, "relax.tile": 1}
INDEX_DTYPES = ("int32", "int64")
# Ops whose kernels tile at run time over a ranged symbolic dimension (whole dimensions in
# every shape): the views, a transpose that keeps the last axis and a slice (row copies the
# row template tiles per call, schedules/row_reduce.py), a Gather of rows (the embeddings')
# and a concat of the last axis (schedules/data_movement.py); the template refuses the rest,
# naming why, and the op stays on the host.
SYMBOLIC_OPS = frozenset(VIEW_OPS) | {"relax.permute_dims", "relax.strided_slice",
                                      "relax.take", "relax.concat"}
# Ops the VM runs on the host without a copy or a kernel: a view of rows of a tensor (the
# HorizontalFusion results) and the zero-offset check that hands the view on with its data
# pointer moved (prepare.horizontal.VIEW_ALIGN_BYTES keeps that copy-free).
HOST_VIEW_OPS = frozenset({"relax.memory.view", "relax.memory.ensure_zero_offset"})


def make_view_pattern(op_name: str, arity: int):
    """(pattern, annotations) for one layout view."""
    root = is_op(op_name)(*[wildcard() for _ in range(arity)])
    return root, {"root": root}


def check_view_call(call) -> Decision | None:
    """Decision for a view op, or None when ``call`` is not one."""
    name = getattr(getattr(call, "op", None), "name", None)
    if name not in VIEW_OPS and name not in MOVE_OPS:
        return None
    sources = list(call.args[0].fields) if name == "relax.concat" else [call.args[0]]
    types = [tensor_type_of(src) for src in sources]
    out = tensor_type_of(call)
    if out is None or any(t is None or t.dtype not in SUPPORTED_DTYPES for t in types):
        return Decision.no(f"{short_op_name(name)} of a non-float tensor runs on the host")
    tiled = ""
    if not (all(static_shape(t) for t in types) and static_shape(out)):
        if name not in SYMBOLIC_OPS or not all(whole_dims_shape(t) for t in [*types, out]):
            return Decision.no(f"{short_op_name(name)} with a dynamic shape runs on the host")
        tiled = " (symbolic: tiled at run time)"
    if name == "relax.take":
        ids = tensor_type_of(call.args[1])
        if ids is None or ids.dtype not in INDEX_DTYPES or not (
                static_shape(ids) or (tiled and whole_dims_shape(ids))):
            return Decision.no("take with indices that are not int32/int64 of a static shape "
                               "runs on the host")
    if name == "relax.permute_dims":
        rank = len(types[0].shape.values)
        axes = getattr(call.attrs, "axes", None)
        perm = [int(a) for a in axes] if axes is not None else list(range(rank))[::-1]
        if perm and perm[-1] % rank == rank - 1:
            return Decision.yes(f"transpose {perm} keeps the last axis: whole rows are "
                                f"copied{tiled}")
        if tiled:
            return Decision.no(f"transpose {perm} moves the last axis over a symbolic "
                               "dimension: its box copies are static only; it runs on the host")
        return Decision.yes(f"transpose {perm} moves the last axis: box copies and a vector "
                            "Gather")
    if name in MOVE_OPS:
        return Decision.yes(f"{short_op_name(name)}: rows copied by DataCopyPad on the "
                            f"data-movement template{tiled}")
    return Decision.yes(f"{short_op_name(name)}: a view, free inside a kernel{tiled}")


def is_view_only(op_names) -> bool:
    """Whether a group holds nothing but views (on the host these cost no copy at all)."""
    return all(name in VIEW_OPS or name in HOST_VIEW_OPS for name in op_names)


def _registry_check(context) -> bool:
    return bool(check_view_call(context.annotated_expr["root"]))


def view_patterns() -> list:
    """Entries ``("ascend.<op>", pattern, annotations, check)`` for every layout op."""
    return [(f"ascend.{short_op_name(op)}", *make_view_pattern(op, arity), _registry_check)
            for op, arity in {**VIEW_OPS, **MOVE_OPS}.items()]
