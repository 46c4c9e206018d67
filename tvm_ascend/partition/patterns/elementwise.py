"""Elementwise and broadcast operators (one vector instruction or a short sequence each)."""
from __future__ import annotations

from tvm import relax, tirx
from tvm.relax.dpl.pattern import is_op, wildcard

from ...decision import Decision

# relax op -> number of tensor operands; every name here has a printer rule in codegen.
ELEMENTWISE_OPS = {
    "relax.add": 2, "relax.subtract": 2, "relax.multiply": 2, "relax.divide": 2,
    "relax.maximum": 2, "relax.minimum": 2, "relax.power": 2,
    "relax.nn.relu": 1, "relax.sigmoid": 1, "relax.tanh": 1, "relax.exp": 1, "relax.log": 1,
    "relax.sqrt": 1, "relax.rsqrt": 1, "relax.abs": 1, "relax.negative": 1, "relax.erf": 1,
    "relax.clip": 1, "relax.nn.gelu": 1, "relax.nn.gelu_tanh": 1, "relax.nn.silu": 1,
    "relax.floor": 1, "relax.ceil": 1,
    "relax.sign": 1, "relax.nn.leakyrelu": 1, "relax.nn.softplus": 1,
    # bool results: bit masks on the UB (Compare / Compares), 1 byte per element in GM
    "relax.equal": 2, "relax.not_equal": 2, "relax.less": 2, "relax.less_equal": 2,
    "relax.greater": 2, "relax.greater_equal": 2, "relax.isnan": 1, "relax.isinf": 1,
    # bool operands
    "relax.where": 3, "relax.logical_not": 1, "relax.logical_and": 2, "relax.logical_or": 2,
    "relax.astype": 1,
}
SUPPORTED_DTYPES = ("float32", "float16")
COMPARISONS = frozenset({"relax.equal", "relax.not_equal", "relax.less", "relax.less_equal",
                         "relax.greater", "relax.greater_equal"})
LOGICAL = frozenset({"relax.logical_not", "relax.logical_and", "relax.logical_or"})
# astype pairs with a vector Cast (bool -> float reads 0/1 bytes; float -> bool is x != 0)
CASTS = frozenset({("float16", "float32"), ("float32", "float16"), ("bool", "float16"),
                   ("bool", "float32"), ("float16", "bool"), ("float32", "bool")})


def make_elementwise_pattern(op_name: str, arity: int):
    """(pattern, annotations) for one elementwise op applied to any operands."""
    root = is_op(op_name)(*[wildcard() for _ in range(arity)])
    return root, {"root": root}


def short_op_name(op_name: str) -> str:
    return op_name.split(".")[-1]


def tensor_type_of(expr):
    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def static_shape(ty) -> bool:
    shape = getattr(ty, "shape", None)
    if shape is None:
        return False
    try:
        return all(isinstance(int(dim), int) for dim in shape.values)
    except (TypeError, AttributeError):
        return False


def whole_dims_shape(ty) -> bool:
    """Whether every entry of ``ty``'s shape is a constant or a whole symbolic dimension
    (``(2, s, 8)``, not ``(2, s * 2)``): what run-time tiling takes (schedules/symbolic.py;
    the template refuses a dimension without a range, naming it)."""
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return False
    return all(isinstance(dim, (tirx.IntImm, tirx.Var)) for dim in values)


def _operand_dtypes(name: str, out_dtype: str, arg_dtypes: list) -> Decision:
    """Whether the operand and result dtypes of op ``name`` have a vector kernel."""
    short = short_op_name(name)
    floats = " or ".join(SUPPORTED_DTYPES)
    if name == "relax.astype":
        pair = (arg_dtypes[0], out_dtype)
        if pair not in CASTS:
            return Decision.no(f"astype {pair[0]} -> {pair[1]}: the vector Cast of the Ascend "
                               f"kernels converts between {floats} and bool; it runs on the host")
        return Decision.yes(f"astype {pair[0]} -> {pair[1]}: vector Cast")
    if name in LOGICAL:
        expected, result = ["bool"] * len(arg_dtypes), "bool"
    elif name == "relax.where":
        expected, result = ["bool", out_dtype, out_dtype], out_dtype
    elif name in COMPARISONS or name in ("relax.isnan", "relax.isinf"):
        expected, result = [arg_dtypes[0]] * len(arg_dtypes), "bool"
        if arg_dtypes[0] not in SUPPORTED_DTYPES:
            return Decision.no(f"{short} on {arg_dtypes[0]}: the Ascend compare kernels take "
                               f"{floats}; it runs on the host")
    else:
        expected, result = [out_dtype] * len(arg_dtypes), out_dtype
    if result == out_dtype != "bool" and out_dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"{short} on {out_dtype}: the Ascend elementwise kernels take "
                           f"{floats} (and bool masks); it runs on the host")
    if out_dtype != result or list(arg_dtypes) != expected:
        return Decision.no(f"{short} takes {', '.join(arg_dtypes)} -> {out_dtype}; a vector "
                           f"kernel needs {', '.join(expected)} -> {result} (a group never "
                           "mixes dtypes without a Cast)")
    return Decision.yes("")


def check_elementwise_call(call) -> Decision:
    """Whether ``call`` is an elementwise op the NPU path supports, and why not if it is not.

    Example
    -------
    >>> check_elementwise_call(relax.op.isnan(x)).ok          # doctest: +SKIP
    True
    """
    op = getattr(call, "op", None)
    name = getattr(op, "name", None)
    if name not in ELEMENTWISE_OPS:
        return Decision.no(f"operator {name or type(op).__name__} has no Ascend kernel yet; "
                           "it runs on the host (llvm)")
    out = tensor_type_of(call)
    if out is None:
        return Decision.no(f"{short_op_name(name)} has no tensor result; it runs on the host")
    # tensor operands come first; attributes held as arguments (clip's PrimValue bounds) after
    types = [tensor_type_of(arg) for arg in call.args[:ELEMENTWISE_OPS[name]]]
    if any(ty is None for ty in types):
        return Decision.no(f"{short_op_name(name)} has a non-tensor operand; it runs on the host")
    decision = _operand_dtypes(name, str(out.dtype), [str(ty.dtype) for ty in types])
    if not decision:
        return decision
    for ty in types:
        if not whole_dims_shape(ty):
            return Decision.no(f"{short_op_name(name)} has a dynamic shape {ty.shape}; give static "
                               "shapes (or ranges of whole dimensions) with --input_shape")
    if name == "relax.power":
        exponent = types[1]
        if any(not isinstance(d, tirx.IntImm) or int(d) != 1 for d in exponent.shape.values):
            return Decision.no("power with a tensor exponent has no Ascend kernel yet (only a "
                               "constant scalar exponent); it runs on the host")
    if not whole_dims_shape(out):
        return Decision.no(f"{short_op_name(name)} has a dynamic output shape; give --input_shape")
    tiled = "" if static_shape(out) else " (symbolic shape: tiled at run time)"
    return Decision.yes(f"{short_op_name(name)} on {out.dtype}: vector unit{tiled}")


def _registry_check(context) -> bool:
    return check_elementwise_call(context.annotated_expr["root"]).ok


def elementwise_patterns() -> list:
    """Entries ``("ascend.<op>", pattern, annotations, check)`` for every elementwise op."""
    entries = []
    for op_name, arity in ELEMENTWISE_OPS.items():
        pattern, annotations = make_elementwise_pattern(op_name, arity)
        entries.append((f"ascend.{short_op_name(op_name)}", pattern, annotations, _registry_check))
    return entries
