"""What an elementwise expression needs in the UB: how each input is read, how many tile buffers.

Shared by the elementwise template (which sizes the UB from it) and the AscendC printer (which
follows the same slot assignment), so the tiling and the printed kernel can never disagree.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym.analyzer import Analyzer

from .tir_walk import BufferLoad, Call, load_buffer


class AccessKind(enum.Enum):
    FULL = "full"        # input element i of the tile is the output's element i
    SCALAR = "scalar"    # one element for the whole kernel (constants, size-1 tensors)
    GATHER = "gather"    # broadcast of another kind: the index is a function of the output's


@dataclass(frozen=True)
class Access:
    """How one BufferLoad reads its buffer, relative to the flat output index ``flat``."""

    kind: AccessKind
    buffer: object  # the buffer Var (shape, dtype, name)
    offset: tvm.ir.PrimExpr  # flat element offset into ``buffer`` as a function of ``flat``


def flat_offset(buffer: tirx.Buffer, indices) -> tvm.ir.PrimExpr:
    """Row-major flat offset of ``buffer[indices]``."""
    offset = tirx.IntImm("int64", 0)
    for dim, index in zip(buffer.shape, indices):
        offset = offset * tirx.expr.Cast("int64", dim) + tirx.expr.Cast("int64", index)
    return offset


def buffer_size(buffer: tirx.Buffer) -> int:
    size = 1
    for dim in buffer.shape:
        size *= int(dim)
    return size


def make_analyzer(flat: tirx.Var, total: int, bindings: dict) -> Analyzer:
    """An analyzer that rewrites block/loop variables in terms of the flat output index."""
    analyzer = Analyzer()
    analyzer.bind(flat, tvm.ir.Range(0, total))
    for var, value in bindings.items():
        analyzer.bind(var, value)
    return analyzer


def classify_load(load: BufferLoad, analyzer: Analyzer, flat: tirx.Var,
                  total: int) -> Access:
    """Classify ``load`` as FULL, SCALAR or GATHER against the flat output index."""
    buffer = load_buffer(load)
    offset = analyzer.simplify(flat_offset(buffer, load.indices))
    if buffer_size(buffer) == total and analyzer.can_prove_equal(offset, flat):
        return Access(AccessKind.FULL, buffer, offset)
    if not uses_var(offset, flat):
        return Access(AccessKind.SCALAR, buffer, offset)
    return Access(AccessKind.GATHER, buffer, offset)


def uses_var(expr, var) -> bool:
    """Whether ``var`` occurs in ``expr``."""
    if isinstance(expr, tirx.Var):
        return expr.same_as(var)
    return any(uses_var(child, var) for child in _children(expr))


def _children(expr) -> list:
    if isinstance(expr, BufferLoad):
        return []
    if isinstance(expr, Call):
        return list(expr.args)
    if isinstance(expr, tirx.expr.Cast):
        return [expr.value]
    if isinstance(expr, tirx.expr.Select):
        return [expr.condition, expr.true_value, expr.false_value]
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return [expr.a, expr.b]
    return []


# TIR constructs that the vector unit computes (the printer has one emitter for each; a test
# checks the two stay equal). Leaves (loads, constants, variables) are always fine.
VECTOR_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})
VECTOR_CALLS = frozenset({"tirx.exp", "tirx.log", "tirx.sqrt", "tirx.rsqrt", "tirx.fabs",
                          "tirx.sigmoid", "tirx.tanh", "tirx.erf", "tirx.floor", "tirx.ceil",
                          "tirx.sin", "tirx.cos", "tirx.pow"})
_LEAVES = frozenset({"TensorLoad", "FloatImm", "IntImm", "Var"})


def unsupported_construct(expr) -> str | None:
    """The first construct in ``expr`` with no vector instruction, or None."""
    kind = type(expr).__name__
    if kind in _LEAVES:
        return None
    if isinstance(expr, Call):
        if expr.op.name not in VECTOR_CALLS:
            return expr.op.name
    elif kind not in VECTOR_BINARY and kind != "Cast":
        return kind
    for child in _children(expr):
        found = unsupported_construct(child)
        if found:
            return found
    return None


def expr_key(expr) -> str:
    """Structural identity used for common-subexpression elimination. Buffers are compared by
    identity, not name: a merged group may hold two buffers called ``x_red``."""
    return f"{tvm_ffi.structural_hash(expr)}|{expr}"


@dataclass
class TileValuePlan:
    """Evaluation order and UB slot of every tile-valued subexpression (after CSE).

    ``order`` lists the composite tile-valued nodes children-first; ``slot`` maps their keys to a
    temporary tile buffer, except the root, which is written into the output tensor.
    """

    root: tvm.ir.PrimExpr
    order: list = field(default_factory=list)
    slot: dict = field(default_factory=dict)
    n_slots: int = 0
    accesses: dict = field(default_factory=dict)  # load key -> Access
    tile_keys: set = field(default_factory=set)   # keys of every tile-valued node

    def is_tile(self, expr) -> bool:
        """Whether ``expr`` is a whole tile (else a scalar for the kernel)."""
        return expr_key(expr) in self.tile_keys


def plan_tile_values(root, classify) -> TileValuePlan:
    """Plan the UB tile buffers of ``root``; ``classify(load) -> Access`` for each BufferLoad.

    Operands that die at an instruction free their slot before its result is placed, so results
    may overwrite a dying operand (AscendC allows exact in-place overlap for elementwise ops).
    """
    plan = TileValuePlan(root)
    tile_nodes: dict[str, object] = {}
    uses: dict[str, int] = {}

    def is_tile(expr) -> bool:
        key = expr_key(expr)
        if isinstance(expr, BufferLoad):
            if key not in plan.accesses:
                plan.accesses[key] = classify(expr)
            tile = plan.accesses[key].kind is not AccessKind.SCALAR
        else:
            tile = any([is_tile(child) for child in _children(expr)])
        if tile:
            plan.tile_keys.add(key)
        return tile

    def count(expr):
        key = expr_key(expr)
        uses[key] = uses.get(key, 0) + 1
        if uses[key] > 1 or isinstance(expr, BufferLoad):
            return
        for child in _children(expr):
            if is_tile(child):
                count(child)

    is_tile(root)
    count(root)
    free: list[int] = []
    live = 0
    root_key = expr_key(root)

    def visit(expr):
        nonlocal live
        key = expr_key(expr)
        if key in tile_nodes or isinstance(expr, BufferLoad):
            return
        tile_children = [c for c in _children(expr) if is_tile(c)]
        for child in tile_children:
            visit(child)
        for child in tile_children:
            child_key = expr_key(child)
            uses[child_key] -= 1
            if uses[child_key] == 0 and child_key in plan.slot:
                free.append(plan.slot[child_key])
        tile_nodes[key] = expr
        plan.order.append(expr)
        if key == root_key:
            return
        if free:
            plan.slot[key] = free.pop()
        else:
            plan.slot[key] = live
            live += 1

    if is_tile(root):
        visit(root)
    plan.n_slots = live
    return plan
