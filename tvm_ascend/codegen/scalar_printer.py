"""C++ text of scalar TIR expressions: kernel-wide scalars and gather index arithmetic."""
from __future__ import annotations

from tvm.ir.expr import Call

from ..errors import CodegenError
from .cpp_types import cpp_type, float_literal

_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "FloorDiv": "/", "FloorMod": "%",
           "LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "EQ": "==", "NE": "!=",
           "And": "&&", "Or": "||"}
# Row values (a mean, 1/sqrt(var + eps)) are computed on the scalar unit; every construct the
# vector unit takes must also print here (a test checks VECTOR_CALLS against this table).
_CALLS = {"tirx.exp": "expf({})", "tirx.log": "logf({})", "tirx.sqrt": "sqrtf({})",
          "tirx.rsqrt": "(1.0f / sqrtf({}))", "tirx.fabs": "fabsf({})",
          "tirx.floor": "floorf({})", "tirx.ceil": "ceilf({})", "tirx.tanh": "tanhf({})",
          "tirx.erf": "erff({})", "tirx.sigmoid": "(1.0f / (1.0f + expf(-({}))))",
          "tirx.sin": "sinf({})", "tirx.cos": "cosf({})", "tirx.pow": "powf({}, {})",
          "tirx.isnan": "std::isnan({})"}
SCALAR_CALLS = frozenset(_CALLS)


class ScalarPrinter:
    """Prints scalar PrimExprs; ``names`` maps vars and scalar loads (by key) to C++ names."""

    def __init__(self, names: dict, load_key=None):
        self.names = names
        self.load_key = load_key

    def print(self, expr) -> str:
        kind = type(expr).__name__
        method = getattr(self, f"print_{kind}", None)
        if method is None:
            raise CodegenError(f"cannot print scalar expression {kind}: {expr}")
        return method(expr)

    def print_Var(self, expr) -> str:
        return self.names.get(expr.name, expr.name)

    def print_IntImm(self, expr) -> str:
        if str(expr.ty.dtype) == "bool":
            return "true" if int(expr.value) else "false"
        return f"{int(expr.value)}LL" if "64" in str(expr.ty.dtype) else str(int(expr.value))

    def print_FloatImm(self, expr) -> str:
        return float_literal(float(expr.value), str(expr.ty.dtype))

    def print_TensorLoad(self, expr) -> str:
        key = self.load_key(expr) if self.load_key else None
        if key in self.names:
            return self.names[key]
        raise CodegenError(f"scalar load {expr} has no kernel variable")

    def print_Cast(self, expr) -> str:
        if str(expr.ty.dtype) == "bool":  # C++ would truncate 0.5 to 0
            return f"({self.print(expr.value)} != 0)"
        return f"static_cast<{cpp_type(str(expr.ty.dtype))}>({self.print(expr.value)})"

    def print_Max(self, expr) -> str:
        a, b = self.print(expr.a), self.print(expr.b)
        return f"(({a}) > ({b}) ? ({a}) : ({b}))"

    def print_Min(self, expr) -> str:
        a, b = self.print(expr.a), self.print(expr.b)
        return f"(({a}) < ({b}) ? ({a}) : ({b}))"

    def print_Not(self, expr) -> str:
        return f"(!{self.print(expr.a)})"

    def print_Select(self, expr) -> str:
        return (f"(({self.print(expr.condition)}) ? ({self.print(expr.true_value)}) : "
                f"({self.print(expr.false_value)}))")

    def print_Call(self, expr: Call) -> str:
        name = expr.op.name
        if name not in _CALLS:
            raise CodegenError(f"cannot print scalar call {name}")
        args = [f"static_cast<float>({self.print(a)})" for a in expr.args]
        if str(expr.ty.dtype) == "bool":
            return f"({_CALLS[name].format(*args)})"
        return f"static_cast<{cpp_type(str(expr.ty.dtype))}>({_CALLS[name].format(*args)})"

    def _binary(self, expr) -> str:
        return f"({self.print(expr.a)} {_BINARY[type(expr).__name__]} {self.print(expr.b)})"

    print_Add = print_Sub = print_Mul = print_Div = print_FloorDiv = print_FloorMod = _binary
    print_LT = print_LE = print_GT = print_GE = print_EQ = print_NE = _binary
    print_And = print_Or = _binary


__all__ = ["ScalarPrinter", "SCALAR_CALLS"]
