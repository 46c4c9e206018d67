"""C++ text of scalar TIR expressions: kernel-wide scalars and gather index arithmetic."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir.expr import Call
from tvm.sym.analyzer import Analyzer

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

    def _floor(self, expr) -> str:
        # C++ rounds / and % towards zero; TIR's floordiv/floormod towards minus infinity. They
        # agree where the dividend is >= 0 and the divisor > 0 (nearly every index); elsewhere
        # (a negative-step slice's reversed index, a Gather's negative ids) the prelude's
        # helpers keep TIR's meaning: an index printed with C++'s would point before its tensor
        dtype = str(expr.ty.dtype)
        if not dtype.startswith("int") or _nonnegative_operands(expr):
            return self._binary(expr)
        helper = "FloorDivInt" if type(expr).__name__ == "FloorDiv" else "FloorModInt"
        return (f"static_cast<{cpp_type(dtype)}>({helper}({self.print(expr.a)}, "
                f"{self.print(expr.b)}))")

    print_Add = print_Sub = print_Mul = print_Div = _binary
    print_FloorDiv = print_FloorMod = _floor
    print_LT = print_LE = print_GT = print_GE = print_EQ = print_NE = _binary
    print_And = print_Or = _binary


def _nonnegative_operands(expr) -> bool:
    """Whether ``expr.a >= 0`` and ``expr.b > 0`` are provable, every variable being a loop
    position (the kernels print indices over rows, elements and tiles, all counted from 0);
    a tensor load (a Gather's id) can be anything."""
    analyzer = Analyzer()
    for var in _variables(expr, {}).values():
        dtype = str(var.ty.dtype)
        top = (1 << (int(dtype[3:] or 32) - 1)) - 1 if dtype.startswith("int") else None
        if top is not None:
            analyzer.bind(var, tvm.ir.Range.from_min_extent(tirx.IntImm(dtype, 0),
                                                           tirx.IntImm(dtype, top)))
    zero = tirx.IntImm(str(expr.ty.dtype), 0)
    return bool(analyzer.can_prove(expr.a >= zero)) and bool(analyzer.can_prove(expr.b > zero))


def _variables(expr, found: dict) -> dict:
    kind = type(expr).__name__
    if kind == "Var":
        found.setdefault(expr.name, expr)
    elif kind != "TensorLoad":  # a load's value is unknown whatever its indices
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(expr, name, None)
            if child is not None and not isinstance(child, (int, float, str)):
                _variables(child, found)
        for child in getattr(expr, "args", None) or []:
            _variables(child, found)
    return found


__all__ = ["ScalarPrinter", "SCALAR_CALLS"]
