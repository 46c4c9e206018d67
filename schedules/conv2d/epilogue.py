"""How the conv kernel's epilogue covers a tile: ``epilogue_rows`` output-channel rows per
vector instruction.

A conv's epilogue reads one value per output channel: a bias, a folded BatchNorm's shift (a
*row scalar*: the tile's rows are output channels). Printed row by row, every epilogue op is
one vector call per row of every tile: 3 ops on a 64-row float32 tile are 192 calls, and a
call's start-up costs more than its 256 bytes of work. So the kernel covers ``rows`` rows per
call instead:

* the ops on whole tiles (the product, a streamed residual, temporaries) run over
  ``rows * stride`` elements, padding columns included (never written out);
* every per-row scalar operand becomes a *column* (``RowColumn``): the tile's values in the UB,
  moved by one copy where they lie contiguous in GM (a per-channel tensor read at the channel),
  else computed row by row on the scalar unit; then ``Brcb`` spreads each value over one
  32-byte block, and the op with it is printed in the repeat form, one repeat per row, the
  column's block stride 0 (a row's 8 blocks all read its one block).

That takes UB for the temporaries of ``rows`` rows and for the columns, which the img2col chunk
would otherwise have; the plan keeps the most rows that leave the number of K chunks as it was.
An epilogue that uses a row scalar any other way (a comparison, a Select, a power) keeps one
row per call.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.sym.analyzer import Analyzer

from ..analysis.row_program import RowAccessKind
from ..analysis.tile_values import child_exprs, expr_key
from ..tiling import BLOCK_BYTES  # a column holds one 32-byte block per row
from ..analysis.tir_walk import BufferLoad, expr_dtype, load_buffer

# tile-op-column instructions of the repeat form (both operand orders: Sub and Div too)
COLUMN_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})


@dataclass(frozen=True)
class RowColumn:
    """A per-row scalar operand of the epilogue, held as a column of the tile's rows."""

    key: str          # expr_key of the scalar expression
    expr: object      # the expression (of row scalar loads, constants, kernel scalars)
    copied: str | None = None  # input whose values lie contiguous in GM: one copy per tile


def row_columns(program, shape) -> list[RowColumn] | None:
    """The epilogue's per-row scalar operands, first use first, or None when one of them is
    used where a column cannot be (the epilogue then covers one row per call).

    A column is ``copied`` when it is a lone load of an input whose values for consecutive
    output channels of one image are consecutive in GM (``bias[c]``) and that input is read by
    no other column: each input is then read once per row either way.
    """
    if program is None or len(program.steps) != 1:
        return None
    plan = program.steps[0].plan
    row_keys = {key for key, (kind, _, _) in program.loads.items()
                if kind is RowAccessKind.ROW_SCALAR}
    found: dict[str, object] = {}
    for node in plan.order:
        if expr_dtype(node) != shape.dtype:
            return None  # masks and casts keep their one-row form
        children = child_exprs(node)
        for index, child in enumerate(children):
            if plan.is_tile(child) or not _reads_any(child, row_keys):
                continue
            others = children[:index] + children[index + 1:]
            if type(node).__name__ not in COLUMN_OPS or not all(map(plan.is_tile, others)):
                return None
            found.setdefault(expr_key(child), child)
    loads_by_column = {key: _loads_of(expr, row_keys) for key, expr in found.items()}
    columns = []
    for key, expr in found.items():
        copied = None
        if isinstance(expr, BufferLoad):
            name = load_buffer(expr).name
            shared = any(name in names for other, names in loads_by_column.items()
                         if other != key)
            if not shared and consecutive_rows(program.bases[name], program.row_var, shape):
                copied = name
        columns.append(RowColumn(key, expr, copied))
    return columns


def consecutive_rows(base, row_var, shape) -> bool:
    """Whether ``base`` (an element offset in terms of the output row ``n * cout + c``) steps
    by one from each output channel to the next within an image."""
    if shape.cout < 2:
        return True
    dtype = str(row_var.ty.dtype)
    n, c = tirx.Var("n", dtype), tirx.Var("c", dtype)

    def analyzer(row=None):
        found = Analyzer()
        found.bind(n, tvm.ir.Range(0, shape.n))
        found.bind(c, tvm.ir.Range(0, shape.cout - 1))  # c + 1 is a channel of the same image
        if row is not None:  # the analyzer substitutes what a variable is bound to
            found.bind(row_var, row)
        return found

    row = n * tirx.IntImm(dtype, shape.cout) + c
    step = analyzer(row + tirx.IntImm(dtype, 1)).simplify(base) - analyzer(row).simplify(base)
    return analyzer().can_prove_equal(step, 1)


def column_bytes(columns, base_m: int, elem: int) -> int:
    """UB bytes of the columns: the values of a tile's rows and their 32-byte blocks."""
    return len(columns) * base_m * (elem + BLOCK_BYTES)


def _reads_any(expr, keys) -> bool:
    if isinstance(expr, BufferLoad):
        return expr_key(expr) in keys
    return any(_reads_any(child, keys) for child in child_exprs(expr))


def _loads_of(expr, keys) -> set:
    if isinstance(expr, BufferLoad):
        return {load_buffer(expr).name} if expr_key(expr) in keys else set()
    return set().union(*[_loads_of(child, keys) for child in child_exprs(expr)])


__all__ = ["BLOCK_BYTES", "COLUMN_OPS", "RowColumn", "column_bytes", "consecutive_rows",
           "row_columns"]
