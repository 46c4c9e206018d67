"""Vector-unit instruction selection: one emitter per TIR construct, AscendC count-form calls.

Each emitter gets the code buffer, the destination tile, its operands (tiles or kernel scalars)
and the element count variable, and prints AscendC calls. Identities used (CANN 8.x has no
Subs/Divs): t - s = Adds(t, -s); s - t = Muls(t, -1) then Adds(s); t / s = Muls(t, 1/s);
s / t = Reciprocal(t) then Muls(s).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CodegenError
from .cpp_types import cpp_type


@dataclass(frozen=True)
class Operand:
    """A tile (LocalTensor name) or a kernel scalar (C++ expression) of one dtype."""

    text: str
    is_tile: bool
    dtype: str


def _scalar(op: Operand, dtype: str) -> str:
    return f"static_cast<{cpp_type(dtype)}>({op.text})"


def emit_add(buf, dst, a, b, n):
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Add({dst}, {a.text}, {b.text}, {n});")
    else:
        tile, scalar = (a, b) if a.is_tile else (b, a)
        buf.line(f"AscendC::Adds({dst}, {tile.text}, {_scalar(scalar, tile.dtype)}, {n});")


def emit_sub(buf, dst, a, b, n):
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Sub({dst}, {a.text}, {b.text}, {n});")
    elif a.is_tile:
        negated = f"static_cast<{cpp_type(a.dtype)}>(-static_cast<float>({b.text}))"
        buf.line(f"AscendC::Adds({dst}, {a.text}, {negated}, {n});")
    else:
        buf.line(f"AscendC::Muls({dst}, {b.text}, static_cast<{cpp_type(b.dtype)}>(-1.0f), {n});")
        buf.line(f"AscendC::Adds({dst}, {dst}, {_scalar(a, b.dtype)}, {n});")


def emit_mul(buf, dst, a, b, n):
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Mul({dst}, {a.text}, {b.text}, {n});")
    else:
        tile, scalar = (a, b) if a.is_tile else (b, a)
        buf.line(f"AscendC::Muls({dst}, {tile.text}, {_scalar(scalar, tile.dtype)}, {n});")


def emit_div(buf, dst, a, b, n):
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Div({dst}, {a.text}, {b.text}, {n});")
    elif a.is_tile:
        ctype = cpp_type(a.dtype)
        buf.line(f"AscendC::Muls({dst}, {a.text}, static_cast<{ctype}>(1.0f / "
                 f"static_cast<float>({b.text})), {n});")
    else:
        buf.line(f"AscendC::Reciprocal({dst}, {b.text}, {n});")
        buf.line(f"AscendC::Muls({dst}, {dst}, {_scalar(a, b.dtype)}, {n});")


def _emit_minmax(name):
    def emit(buf, dst, a, b, n):
        if a.is_tile and b.is_tile:
            buf.line(f"AscendC::{name}({dst}, {a.text}, {b.text}, {n});")
            return
        tile, scalar = (a, b) if a.is_tile else (b, a)
        if name == "Max" and scalar.text in ("0.0f", "static_cast<half>(0.0f)"):
            buf.line(f"AscendC::Relu({dst}, {tile.text}, {n});")
        else:
            buf.line(f"AscendC::{name}s({dst}, {tile.text}, {_scalar(scalar, tile.dtype)}, {n});")
    return emit


def _emit_unary(name):
    def emit(buf, dst, a, n):
        buf.line(f"AscendC::{name}({dst}, {a.text}, {n});")
    return emit


def emit_pow(buf, dst, a, b, n):
    if not a.is_tile or b.is_tile:
        raise CodegenError("pow is printed only as tile ** kernel scalar (constant exponent)")
    buf.line(f"AscendC::Power({dst}, {a.text}, {_scalar(b, a.dtype)}, {n});")


def emit_cast(buf, dst, a, n, to_dtype):
    mode = "CAST_NONE" if {a.dtype, to_dtype} <= {"float32", "float16"} else "CAST_RINT"
    buf.line(f"AscendC::Cast({dst}, {a.text}, AscendC::RoundMode::{mode}, {n});")


BINARY_EMITTERS = {
    "Add": emit_add, "Sub": emit_sub, "Mul": emit_mul, "Div": emit_div,
    "Max": _emit_minmax("Max"), "Min": _emit_minmax("Min"),
}
CALL_EMITTERS = {
    "tirx.exp": _emit_unary("Exp"), "tirx.log": _emit_unary("Ln"),
    "tirx.sqrt": _emit_unary("Sqrt"), "tirx.rsqrt": _emit_unary("Rsqrt"),
    "tirx.fabs": _emit_unary("Abs"), "tirx.sigmoid": _emit_unary("Sigmoid"),
    "tirx.tanh": _emit_unary("Tanh"), "tirx.erf": _emit_unary("Erf"),
    "tirx.floor": _emit_unary("Floor"), "tirx.ceil": _emit_unary("Ceil"),
    "tirx.sin": _emit_unary("Sin"), "tirx.cos": _emit_unary("Cos"),
}
BINARY_CALL_EMITTERS = {"tirx.pow": emit_pow}

# Every AscendC API name the emitters above can print; a test checks that the emulator header
# declares each one (the header is the executable spec of the subset).
EMITTED_API = ("Add", "Adds", "Sub", "Mul", "Muls", "Div", "Reciprocal", "Max", "Maxs", "Min",
               "Mins", "Relu", "Exp", "Ln", "Sqrt", "Rsqrt", "Abs", "Sigmoid", "Tanh", "Erf",
               "Floor", "Ceil", "Sin", "Cos", "Power", "Cast", "DataCopy", "DataCopyPad")
