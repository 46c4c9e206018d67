"""MatMul on the cube unit (the matmul template; its epilogue joins through FuseOps)."""
from __future__ import annotations

from tvm.relax.dpl.pattern import is_op, wildcard

from ...decision import Decision
from .elementwise import SUPPORTED_DTYPES, static_shape, tensor_type_of


def make_matmul_pattern():
    """(pattern, annotations) for ``relax.matmul``."""
    root = is_op("relax.matmul")(wildcard(), wildcard())
    return root, {"root": root}


def check_matmul_call(call) -> Decision | None:
    """Decision for a matmul, or None when ``call`` is not one."""
    if getattr(getattr(call, "op", None), "name", None) != "relax.matmul":
        return None
    a, b, out = tensor_type_of(call.args[0]), tensor_type_of(call.args[1]), tensor_type_of(call)
    if None in (a, b, out) or not all(static_shape(t) for t in (a, b, out)):
        return Decision.no("matmul with a dynamic shape runs on the host")
    if {a.dtype, b.dtype, out.dtype} != {out.dtype} or out.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"matmul of {a.dtype} x {b.dtype} -> {out.dtype}: the cube kernel "
                           "takes float16 or float32 throughout; it runs on the host")
    a_dims = [int(d) for d in a.shape.values]
    b_dims = [int(d) for d in b.shape.values]
    if len(a_dims) < 2 or len(b_dims) < 2:
        return Decision.no("matmul of a vector runs on the host")
    if len(b_dims) > 2 and a_dims[:-2] != b_dims[:-2]:
        return Decision.no(f"matmul with broadcast batch dimensions {a_dims[:-2]} x "
                           f"{b_dims[:-2]} runs on the host")
    return Decision.yes("matmul: cube unit, epilogue on the vector unit")


def _registry_check(context) -> bool:
    return bool(check_matmul_call(context.annotated_expr["root"]))


def matmul_patterns() -> list:
    return [("ascend.matmul", *make_matmul_pattern(), _registry_check)]
