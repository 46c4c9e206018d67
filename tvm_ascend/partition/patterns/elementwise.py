"""Elementwise and broadcast operators (one vector instruction or a short sequence each)."""
from __future__ import annotations

from tvm import relax
from tvm.relax.dpl.pattern import is_op, wildcard

from ..decision import Decision

# relax op -> number of tensor operands; every name here has a printer rule in codegen.
ELEMENTWISE_OPS = {
    "relax.add": 2, "relax.subtract": 2, "relax.multiply": 2, "relax.divide": 2,
    "relax.maximum": 2, "relax.minimum": 2, "relax.power": 2,
    "relax.nn.relu": 1, "relax.sigmoid": 1, "relax.tanh": 1, "relax.exp": 1, "relax.log": 1,
    "relax.sqrt": 1, "relax.rsqrt": 1, "relax.abs": 1, "relax.negative": 1, "relax.erf": 1,
    "relax.clip": 1, "relax.nn.gelu": 1, "relax.nn.gelu_tanh": 1, "relax.nn.silu": 1,
    "relax.floor": 1, "relax.ceil": 1,
}
SUPPORTED_DTYPES = ("float32", "float16")


def make_elementwise_pattern(op_name: str, arity: int):
    """(pattern, annotations) for one elementwise op applied to any operands."""
    root = is_op(op_name)(*[wildcard() for _ in range(arity)])
    return root, {"root": root}


def _short(op_name: str) -> str:
    return op_name.split(".")[-1]


def _tensor_type(expr):
    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def _static_shape(ty) -> bool:
    shape = getattr(ty, "shape", None)
    if shape is None:
        return False
    try:
        return all(isinstance(int(dim), int) for dim in shape.values)
    except (TypeError, AttributeError):
        return False


def check_elementwise_call(call) -> Decision:
    """Whether ``call`` is an elementwise op the NPU path supports, and why not if it is not."""
    op = getattr(call, "op", None)
    name = getattr(op, "name", None)
    if name not in ELEMENTWISE_OPS:
        return Decision.no(f"operator {name or type(op).__name__} has no Ascend kernel yet; "
                           "it runs on the host (llvm)")
    out = _tensor_type(call)
    if out is None or out.dtype not in SUPPORTED_DTYPES:
        dtype = getattr(out, "dtype", "?")
        return Decision.no(f"{_short(name)} on {dtype}: the Ascend elementwise kernels take "
                           f"{' or '.join(SUPPORTED_DTYPES)}; it runs on the host")
    for arg in call.args:
        ty = _tensor_type(arg)
        if ty is None:
            return Decision.no(f"{_short(name)} has a non-tensor operand; it runs on the host")
        if ty.dtype != out.dtype:
            return Decision.no(f"{_short(name)} mixes {ty.dtype} and {out.dtype}; a group never "
                               "mixes dtypes without a Cast rule")
        if not _static_shape(ty):
            return Decision.no(f"{_short(name)} has a dynamic shape {ty.shape}; give static "
                               "shapes with --input_shape")
    if name == "relax.power":
        exponent = _tensor_type(call.args[1])
        if exponent is None or any(int(d) != 1 for d in exponent.shape.values):
            return Decision.no("power with a tensor exponent has no Ascend kernel yet (only a "
                               "constant scalar exponent); it runs on the host")
    if not _static_shape(out):
        return Decision.no(f"{_short(name)} has a dynamic output shape; give --input_shape")
    return Decision.yes(f"{_short(name)} on {out.dtype}: vector unit")


def _registry_check(context) -> bool:
    return check_elementwise_call(context.annotated_expr["root"]).ok


def elementwise_patterns() -> list:
    """Entries ``("ascend.<op>", pattern, annotations, check)`` for every elementwise op."""
    entries = []
    for op_name, arity in ELEMENTWISE_OPS.items():
        pattern, annotations = make_elementwise_pattern(op_name, arity)
        entries.append((f"ascend.{_short(op_name)}", pattern, annotations, _registry_check))
    return entries
