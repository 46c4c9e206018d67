"""MatMul on the cube unit (the matmul template; its epilogue joins through FuseOps)."""
from __future__ import annotations

from tvm import tirx
from tvm.relax.dpl.pattern import is_op, wildcard

from ...decision import Decision
from .elementwise import SUPPORTED_DTYPES, static_shape, tensor_type_of, whole_dims_shape


def make_matmul_pattern():
    """(pattern, annotations) for ``relax.matmul``."""
    root = is_op("relax.matmul")(wildcard(), wildcard())
    return root, {"root": root}


def check_matmul_call(call) -> Decision | None:
    """Decision for a matmul, or None when ``call`` is not one."""
    if getattr(getattr(call, "op", None), "name", None) != "relax.matmul":
        return None
    a, b, out = tensor_type_of(call.args[0]), tensor_type_of(call.args[1]), tensor_type_of(call)
    if None in (a, b, out):
        return Decision.no("matmul with a dynamic shape runs on the host")
    tiled = ""
    if not all(static_shape(t) for t in (a, b, out)):
        why = _symbolic_m_refusal(a, b, out)
        if why:
            return Decision.no(f"matmul with a dynamic shape runs on the host: {why}")
        tiled = f" (symbolic {_symbolic_axes(a, out)}: tiled at run time)"
    if {a.dtype, b.dtype, out.dtype} != {out.dtype} or out.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"matmul of {a.dtype} x {b.dtype} -> {out.dtype}: the cube kernel "
                           "takes float16 or float32 throughout; it runs on the host")
    a_dims = [_size(d) for d in a.shape.values]
    b_dims = [_size(d) for d in b.shape.values]
    if len(a_dims) < 2 or len(b_dims) < 2:
        return Decision.no("matmul of a vector runs on the host")
    if len(b_dims) > 2 and a_dims[:-2] != b_dims[:-2]:
        return Decision.no(f"matmul with broadcast batch dimensions {a_dims[:-2]} x "
                           f"{b_dims[:-2]} runs on the host")
    return Decision.yes(f"matmul: cube unit, epilogue on the vector unit{tiled}")


def _size(dim):
    """A static size as an int, a symbolic one as its name (compared, never counted)."""
    return int(dim) if isinstance(dim, tirx.IntImm) else str(dim)


def _symbolic_m_refusal(a, b, out) -> str:
    """Why a matmul with symbolic sizes cannot be tiled at run time, or "" where it can: the
    matmul template tiles a symbolic M, N or K (whole dimensions: x[.., s, K] @ W[K, N] of an
    FFN, attention's Q @ K^T with N = s and P @ V with K = s) over static batch dimensions;
    the template checks the rest (one dimension, its range, an epilogue it can tile) and
    refuses with the reason."""
    if not all(whole_dims_shape(t) for t in (a, b, out)):
        return "a shape entry is an expression of symbolic dimensions"
    a_dims, b_dims, out_dims = list(a.shape.values), list(b.shape.values), list(out.shape.values)
    if len(a_dims) < 2 or len(b_dims) < 2 or len(out_dims) < 2:
        return "a matmul of a vector"
    if not all(isinstance(d, tirx.IntImm) for d in a_dims[:-2] + b_dims[:-2] + out_dims[:-2]):
        return "a batch dimension is symbolic (run-time tiling takes a symbolic M, N or K)"
    return ""


def _symbolic_axes(a, out) -> str:
    """Which of M, N, K are symbolic, as the decision names them ("M", "M and N")."""
    m, k, n = a.shape.values[-2], a.shape.values[-1], out.shape.values[-1]
    return " and ".join(name for name, d in (("M", m), ("N", n), ("K", k))
                        if not isinstance(d, tirx.IntImm)) or "M"


def _registry_check(context) -> bool:
    return bool(check_matmul_call(context.annotated_expr["root"]))


def matmul_patterns() -> list:
    return [("ascend.matmul", *make_matmul_pattern(), _registry_check)]
