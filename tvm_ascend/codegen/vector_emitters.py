"""Vector-unit instruction selection: one emitter per TIR construct, AscendC count-form calls.

Each emitter gets the code buffer, the destination tile, its operands (tiles or kernel scalars)
and the element count variable, and prints AscendC calls. Identities used (CANN 8.x has no
Subs/Divs): t - s = Adds(t, -s); s - t = Muls(t, -1) then Adds(s); t / s = Muls(t, 1/s);
s / t = Reciprocal(t) then Muls(s).

Bool values are bit masks (bit i of byte i/8, LSB first), as Compare/Compares write them and
Select reads them. And/Or/Not combine masks as uint16 words (the device has them for 16-bit
integers only), ``ceil(n / 16)`` words for n elements. isnan(t) = Not(t <= +inf): Compares has no
256-byte count rule, Compare(t, t, NE) has.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CodegenError
from .cpp_types import cpp_type


@dataclass(frozen=True)
class ColumnLayout:
    """How a tile op with a column covers the tile's rows (C++ expressions): ``rows`` repeats
    of ``cols`` elements (the mask), rows ``pitch`` 32-byte blocks apart."""

    cols: str
    rows: str
    pitch: str


@dataclass(frozen=True)
class Operand:
    """A tile (LocalTensor name), a kernel scalar (C++ expression) or a column (one 32-byte
    block per row, each a row's scalar: ``column`` says how the op covers the rows) of one
    dtype."""

    text: str
    is_tile: bool
    dtype: str
    mask: bool = False  # a bool tile as a bit mask (else the 0/1 bytes of a bool GM tensor)
    column: ColumnLayout | None = None


def _scalar(op: Operand, dtype: str) -> str:
    return f"static_cast<{cpp_type(dtype)}>({op.text})"


def _emit_column(buf, name, dst, a, b) -> bool:
    """``name`` of a tile and a column in the repeat form, one repeat per row: the column's
    block stride is 0 (a row's 8 blocks all read its one block), its repeat stride 1 block.
    False where neither operand is a column."""
    layout = a.column or b.column
    if layout is None:
        return False

    def strides(op):
        return ("0", "1") if op.column else ("1", layout.pitch)

    (a_blk, a_rep), (b_blk, b_rep) = strides(a), strides(b)
    buf.line(f"AscendC::{name}({dst}, {a.text}, {b.text}, static_cast<uint64_t>({layout.cols}), "
             f"static_cast<uint8_t>({layout.rows}), AscendC::BinaryRepeatParams(1, {a_blk}, "
             f"{b_blk}, {layout.pitch}, {a_rep}, {b_rep}));")
    return True


def emit_add(buf, dst, a, b, n):
    if _emit_column(buf, "Add", dst, a, b):
        return
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Add({dst}, {a.text}, {b.text}, {n});")
    else:
        tile, scalar = (a, b) if a.is_tile else (b, a)
        buf.line(f"AscendC::Adds({dst}, {tile.text}, {_scalar(scalar, tile.dtype)}, {n});")


def emit_sub(buf, dst, a, b, n):
    if _emit_column(buf, "Sub", dst, a, b):
        return
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Sub({dst}, {a.text}, {b.text}, {n});")
    elif a.is_tile:
        negated = f"static_cast<{cpp_type(a.dtype)}>(-static_cast<float>({b.text}))"
        buf.line(f"AscendC::Adds({dst}, {a.text}, {negated}, {n});")
    else:
        buf.line(f"AscendC::Muls({dst}, {b.text}, static_cast<{cpp_type(b.dtype)}>(-1.0f), {n});")
        buf.line(f"AscendC::Adds({dst}, {dst}, {_scalar(a, b.dtype)}, {n});")


def emit_mul(buf, dst, a, b, n):
    if _emit_column(buf, "Mul", dst, a, b):
        return
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Mul({dst}, {a.text}, {b.text}, {n});")
    else:
        tile, scalar = (a, b) if a.is_tile else (b, a)
        buf.line(f"AscendC::Muls({dst}, {tile.text}, {_scalar(scalar, tile.dtype)}, {n});")


def emit_div(buf, dst, a, b, n):
    if _emit_column(buf, "Div", dst, a, b):
        return
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
        if _emit_column(buf, name, dst, a, b):
            return
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
    """Cast between float16/float32, bool and uint8 (bool GM tensors hold 0/1 bytes)."""
    if a.dtype == "bool" and a.mask:  # mask -> 0/1 of a float type
        one = f"static_cast<{cpp_type(to_dtype)}>(1.0f)"
        zero = f"static_cast<{cpp_type(to_dtype)}>(0.0f)"
        buf.line(f"AscendC::Duplicate({dst}, {one}, {n});")
        buf.line(f"AscendC::Select({dst}, {a.text}, {dst}, {zero}, "
                 f"AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, {n});")
        return
    if to_dtype == "bool":  # a float is true where it is not zero (NaN included)
        buf.line(f"AscendC::Compares({dst}, {a.text}, static_cast<{cpp_type(a.dtype)}>(0.0f), "
                 f"AscendC::CMPMODE::NE, {n});")
        return
    mode = "CAST_NONE" if {a.dtype, to_dtype} <= {"float32", "float16"} else "CAST_RINT"
    if a.dtype == "bool":  # 0/1 bytes read from GM: uint8 -> half
        mode = "CAST_NONE"
    buf.line(f"AscendC::Cast({dst}, {a.text}, AscendC::RoundMode::{mode}, {n});")


_CMP_SWAPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


_CMP_CPP = {"LT": "<", "GT": ">", "LE": "<=", "GE": ">=", "EQ": "==", "NE": "!="}


def emit_tile_compare(buf, dst, a, b, n, mode):
    """Compare of two tiles. Compare takes whole 256-byte repeats only, and a tile may end
    anywhere: whole repeats go to Compare, the last partial repeat is compared on the scalar
    unit (at most 63 floats or 127 halves), with the V->S and S->V syncs around it."""
    lanes = 256 // {"float32": 4, "float16": 2}[a.dtype]
    with buf.indent("{", "}"):
        buf.line(f"uint32_t whole = ({n}) / {lanes} * {lanes};")
        buf.line(f"AscendC::Compare({dst}, {a.text}, {b.text}, AscendC::CMPMODE::{mode}, whole);")
        with buf.indent(f"if (whole < ({n})) {{"):
            buf.line("AscendC::SetFlag<AscendC::HardEvent::V_S>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);")
            with buf.indent(f"for (uint32_t k = whole; k < ({n}); k += 8) {{"):
                buf.line("uint8_t bits = 0;")
                with buf.indent(f"for (uint32_t j = k; j < k + 8 && j < ({n}); ++j) {{"):
                    buf.line(f"bool on = {a.text}.GetValue(j) {_CMP_CPP[mode]} "
                             f"{b.text}.GetValue(j);")
                    buf.line("bits |= static_cast<uint8_t>(on ? 1u : 0u) << (j - k);")
                buf.line(f"{dst}.SetValue(k / 8, bits);")
            buf.line("AscendC::SetFlag<AscendC::HardEvent::S_V>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);")


def _emit_compare(mode):
    def emit(buf, dst, a, b, n):
        if a.is_tile and b.is_tile:
            emit_tile_compare(buf, dst, a, b, n, mode)
            return
        tile, scalar, cmp = (a, b, mode) if a.is_tile else (b, a, _CMP_SWAPPED[mode])
        buf.line(f"AscendC::Compares({dst}, {tile.text}, {_scalar(scalar, tile.dtype)}, "
                 f"AscendC::CMPMODE::{cmp}, {n});")
    return emit


def _words(text: str) -> str:
    return f"{text}.ReinterpretCast<uint16_t>()"


def _word_count(n: str) -> str:
    return f"(({n}) + 15) / 16"


def _emit_mask_copy(buf, dst, tile, n):
    buf.line(f"AscendC::Or({_words(dst)}, {_words(tile.text)}, {_words(tile.text)}, "
             f"{_word_count(n)});")


def _emit_mask_fill(buf, dst, value: bool, n):
    fill = "static_cast<uint16_t>(0xFFFF)" if value else "static_cast<uint16_t>(0)"
    buf.line(f"AscendC::Duplicate({_words(dst)}, {fill}, {_word_count(n)});")


def _emit_logic(name):
    def emit(buf, dst, a, b, n):
        if a.is_tile and b.is_tile:
            buf.line(f"AscendC::{name}({_words(dst)}, {_words(a.text)}, {_words(b.text)}, "
                     f"{_word_count(n)});")
            return
        tile, scalar = (a, b) if a.is_tile else (b, a)
        # And(t, s) = s ? t : 0; Or(t, s) = s ? 1 : t (a kernel scalar: decided at run time)
        keeps = scalar.text if name == "And" else f"!({scalar.text})"
        with buf.indent(f"if ({keeps}) {{", None):  # the else line closes it
            _emit_mask_copy(buf, dst, tile, n)
        with buf.indent("} else {", "}"):
            _emit_mask_fill(buf, dst, name == "Or", n)
    return emit


def emit_not(buf, dst, a, n):
    buf.line(f"AscendC::Not({_words(dst)}, {_words(a.text)}, {_word_count(n)});")


def emit_isnan(buf, dst, a, n):
    infinity = f"static_cast<{cpp_type(a.dtype)}>(INFINITY)"
    buf.line(f"AscendC::Compares({dst}, {a.text}, {infinity}, AscendC::CMPMODE::LE, {n});")
    emit_not(buf, dst, Operand(dst, True, "bool", True), n)


def _emit_value_copy(buf, dst, op: Operand, dtype: str, n):
    """``dst = op`` over ``n`` elements of ``dtype``: a tile added to 0, a scalar duplicated."""
    if not op.is_tile:
        buf.line(f"AscendC::Duplicate({dst}, {_scalar(op, dtype)}, {n});")
    elif op.text != dst:
        buf.line(f"AscendC::Adds({dst}, {op.text}, static_cast<{cpp_type(dtype)}>(0), {n});")


def emit_select(buf, dst, cond, a, b, n):
    """dst = cond ? a : b for a mask or a kernel scalar ``cond``; the planner never gives
    ``dst`` the slot of a tile ``b`` when ``a`` is a scalar (the destination is filled with ``a``
    first)."""
    dtype = a.dtype if a.is_tile else b.dtype
    if not cond.is_tile:
        # one condition for the whole tile (a 0-d bool, one element of a sliced mask): the
        # scalar unit picks the operand at run time
        with buf.indent(f"if ({cond.text}) {{", None):  # the else line closes it
            _emit_value_copy(buf, dst, a, dtype, n)
        with buf.indent("} else {", "}"):
            _emit_value_copy(buf, dst, b, dtype, n)
        return
    tensor_tensor = "AscendC::SELMODE::VSEL_TENSOR_TENSOR_MODE"
    tensor_scalar = "AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE"
    if a.is_tile and b.is_tile:
        buf.line(f"AscendC::Select({dst}, {cond.text}, {a.text}, {b.text}, {tensor_tensor}, {n});")
        return
    if a.is_tile:
        buf.line(f"AscendC::Select({dst}, {cond.text}, {a.text}, {_scalar(b, dtype)}, "
                 f"{tensor_scalar}, {n});")
        return
    buf.line(f"AscendC::Duplicate({dst}, {_scalar(a, dtype)}, {n});")
    if b.is_tile:
        buf.line(f"AscendC::Select({dst}, {cond.text}, {dst}, {b.text}, {tensor_tensor}, {n});")
    else:
        buf.line(f"AscendC::Select({dst}, {cond.text}, {dst}, {_scalar(b, dtype)}, "
                 f"{tensor_scalar}, {n});")


BINARY_EMITTERS = {
    "Add": emit_add, "Sub": emit_sub, "Mul": emit_mul, "Div": emit_div,
    "Max": _emit_minmax("Max"), "Min": _emit_minmax("Min"),
    **{mode: _emit_compare(mode) for mode in _CMP_SWAPPED},
    "And": _emit_logic("And"), "Or": _emit_logic("Or"),
}
CALL_EMITTERS = {
    "tirx.exp": _emit_unary("Exp"), "tirx.log": _emit_unary("Ln"),
    "tirx.sqrt": _emit_unary("Sqrt"), "tirx.rsqrt": _emit_unary("Rsqrt"),
    "tirx.fabs": _emit_unary("Abs"), "tirx.sigmoid": _emit_unary("Sigmoid"),
    "tirx.tanh": _emit_unary("Tanh"), "tirx.erf": _emit_unary("Erf"),
    "tirx.floor": _emit_unary("Floor"), "tirx.ceil": _emit_unary("Ceil"),
    "tirx.sin": _emit_unary("Sin"), "tirx.cos": _emit_unary("Cos"),
    "tirx.isnan": emit_isnan,
}
BINARY_CALL_EMITTERS = {"tirx.pow": emit_pow}

# Every AscendC API name the emitters above can print; a test checks that the emulator header
# declares each one (the header is the executable spec of the subset).
EMITTED_API = ("Add", "Adds", "Sub", "Mul", "Muls", "Div", "Reciprocal", "Max", "Maxs", "Min",
               "Mins", "Relu", "Exp", "Ln", "Sqrt", "Rsqrt", "Abs", "Sigmoid", "Tanh", "Erf",
               "Floor", "Ceil", "Sin", "Cos", "Power", "Cast", "DataCopy", "DataCopyPad",
               "Compare", "Compares", "Select", "And", "Or", "Not", "Duplicate")
