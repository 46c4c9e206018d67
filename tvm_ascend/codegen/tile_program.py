"""Prints a TileValuePlan as vector instructions: shared by every kernel printer.

The kernel printer supplies the leaves (input tiles and kernel scalars, by load key), where the
root goes, and how a temporary slot is named; this printer walks the plan's nodes in order and
dispatches each to its emitter.
"""
from __future__ import annotations

from ..errors import CodegenError
from ..schedules.analysis.tile_values import expr_key
from ..schedules.analysis.tir_walk import Call, expr_dtype
from .cpp_types import cpp_type
from .vector_emitters import (BINARY_CALL_EMITTERS, BINARY_EMITTERS, CALL_EMITTERS, Operand,
                              emit_cast, emit_not, emit_select)


class TileProgramPrinter:
    """Vector instructions for one expression; scalars are printed by ``scalars``."""

    def __init__(self, symbol: str, scalars):
        self.symbol = symbol
        self.scalars = scalars

    def emit(self, buf, plan, leaves: dict, root_dst: str, slot_name, count: str) -> Operand:
        """Print ``plan``; the root lands in ``root_dst``. Returns the root operand."""
        operands = dict(leaves)
        root_key = expr_key(plan.root)
        if not plan.order:
            return self._operand(plan, plan.root, operands)
        for node in plan.order:
            key = expr_key(node)
            dst = root_dst if key == root_key else slot_name(plan.slot[key], node)
            self.emit_node(buf, plan, node, dst, operands, count)
            dtype = expr_dtype(node)
            operands[key] = Operand(dst, True, dtype, mask=dtype == "bool")
        return operands[root_key]

    def _operand(self, plan, expr, operands) -> Operand:
        key = expr_key(expr)
        if key in operands:
            return operands[key]
        if plan.is_tile(expr):
            raise CodegenError(f"{self.symbol}: tile value {expr} used before it was computed")
        return Operand(self.scalars.print(expr), False, expr_dtype(expr))

    def emit_node(self, buf, plan, node, dst, operands, count):
        kind = type(node).__name__
        operand = lambda e: self._operand(plan, e, operands)  # noqa: E731
        if kind in BINARY_EMITTERS:
            BINARY_EMITTERS[kind](buf, dst, operand(node.a), operand(node.b), count)
        elif isinstance(node, Call) and node.op.name in CALL_EMITTERS:
            CALL_EMITTERS[node.op.name](buf, dst, operand(node.args[0]), count)
        elif isinstance(node, Call) and node.op.name in BINARY_CALL_EMITTERS:
            a, b = (operand(arg) for arg in node.args)
            BINARY_CALL_EMITTERS[node.op.name](buf, dst, a, b, count)
        elif kind == "Cast":
            emit_cast(buf, dst, operand(node.value), count, expr_dtype(node))
        elif kind == "Select":
            emit_select(buf, dst, operand(node.condition), operand(node.true_value),
                        operand(node.false_value), count)
        elif kind == "Not":
            emit_not(buf, dst, operand(node.a), count)
        else:
            what = node.op.name if isinstance(node, Call) else kind
            raise CodegenError(f"{self.symbol}: no AscendC vector instruction for {what} "
                               f"({node}); this group should have stayed on the host")

    @staticmethod
    def emit_copy(buf, dst: str, operand: Operand, count: str) -> None:
        """``dst = operand`` for a root that is a plain load or a scalar."""
        if not operand.is_tile:
            buf.line(f"AscendC::Duplicate({dst}, {operand.text}, {count});")
        else:
            buf.line(f"AscendC::Adds({dst}, {operand.text}, "
                     f"static_cast<{cpp_type(operand.dtype)}>(0), {count});")
