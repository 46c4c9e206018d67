"""C++ spellings of TIR dtypes and literals, as AscendC kernels write them."""
from __future__ import annotations

import math

from ..errors import CodegenError

CPP_TYPES = {"float32": "float", "float16": "half", "int32": "int32_t", "int64": "int64_t",
             "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "bfloat16": "bfloat16_t",
             # a bool tensor is one byte per element in GM; on the UB a bool is a bit mask,
             # viewed as uint8_t words by Compare/Select
             "bool": "uint8_t"}


def cpp_type(dtype: str) -> str:
    try:
        return CPP_TYPES[str(dtype)]
    except KeyError as err:
        raise CodegenError(f"dtype {dtype} has no AscendC type in this printer") from err


def dtype_bytes(dtype: str) -> int:
    import tvm

    return max(1, tvm.runtime.DataType(str(dtype)).bits // 8)  # bool: 1 byte


# The values a tiling struct's integer fields can hold (TCubeTiling's are int32_t).
INT_RANGES = {"int32_t": (-2**31, 2**31 - 1), "uint32_t": (0, 2**32 - 1),
              "int64_t": (-2**63, 2**63 - 1), "uint64_t": (0, 2**64 - 1)}


def field_literal(symbol: str, field: str, ctype: str, value) -> str:
    """``value`` as the literal of the tiling field ``field`` declared ``ctype``. A value the
    type cannot hold is refused, naming the kernel and the field: C++ would store it
    truncated, and the kernel would walk another shape than the plan's.

    Example
    -------
    >>> field_literal("k0", "cols", "uint32_t", 4096)
    '4096'
    """
    lo, hi = INT_RANGES[ctype]
    if not lo <= int(value) <= hi:
        raise CodegenError(f"{symbol}: tiling field {field} = {int(value)} does not fit its "
                           f"{ctype} (range {lo}..{hi}); the kernel keeps it in that type "
                           "throughout, so this shape is not printed for the NPU")
    return str(int(value))


def float_literal(value: float, dtype: str) -> str:
    """A literal of ``dtype``; half literals are written as casts from float."""
    if math.isinf(value):
        text = "(-INFINITY)" if value < 0 else "INFINITY"
    elif math.isnan(value):
        text = "NAN"
    else:
        text = repr(float(value))
        if "e" not in text and "." not in text:
            text += ".0"
        text += "f"
    if str(dtype) == "float16":
        return f"static_cast<half>({text})"
    return text
