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
    if _reads_memory(offset):
        # ids read per element (a Gather whose ids vary along the output): neither a fixed
        # scalar nor an affine gather; the data-movement template gathers whole rows by ids
        from tvm_ascend.errors import TilingError
        raise TilingError(f"{buffer.name} is read at an index loaded from memory ({offset})")
    if buffer_size(buffer) == total and analyzer.can_prove_equal(offset, flat):
        return Access(AccessKind.FULL, buffer, offset)
    if not uses_var(offset, flat):
        return Access(AccessKind.SCALAR, buffer, offset)
    return Access(AccessKind.GATHER, buffer, offset)


def _reads_memory(expr) -> bool:
    if isinstance(expr, BufferLoad):
        return True
    return any(_reads_memory(child) for child in child_exprs(expr))


def uses_var(expr, var) -> bool:
    """Whether ``var`` occurs in ``expr``."""
    if isinstance(expr, tirx.Var):
        return expr.same_as(var)
    return any(uses_var(child, var) for child in child_exprs(expr))


def child_exprs(expr) -> list:
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
    if type(expr).__name__ == "Not":
        return [expr.a]
    return []


# TIR constructs that the vector unit computes (the printer has one emitter for each; a test
# checks the two stay equal). Leaves (loads, constants, variables) are always fine.
VECTOR_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min",
                           "LT", "LE", "GT", "GE", "EQ", "NE", "And", "Or"})
VECTOR_CALLS = frozenset({"tirx.exp", "tirx.log", "tirx.sqrt", "tirx.rsqrt", "tirx.fabs",
                          "tirx.sigmoid", "tirx.tanh", "tirx.erf", "tirx.floor", "tirx.ceil",
                          "tirx.sin", "tirx.cos", "tirx.pow", "tirx.isnan"})
# Constructs that make or read a bool value: on the UB a bool is a bit mask (Compare/Compares
# write one, Select reads one, And/Or/Not combine them as uint16 words). Only the elementwise
# and row templates print the bool inputs and outputs around them (see ``lower_bool_io``).
MASK_CONSTRUCTS = frozenset({"LT", "LE", "GT", "GE", "EQ", "NE", "And", "Or", "Not", "Select",
                             "tirx.isnan"})
FLOAT_DTYPES = ("float32", "float16")
# dtypes a vector value may have: floats, masks, and the 0/1 bytes of a bool tensor in GM.
VECTOR_DTYPES = FLOAT_DTYPES + ("bool", "uint8")
_LEAVES = frozenset({"TensorLoad", "FloatImm", "IntImm", "Var"})


def unsupported_construct(expr, masks: bool = False) -> str | None:
    """The first construct in ``expr`` with no vector instruction, or None.

    ``masks``: whether the caller's kernel prints bool values (comparisons, Select, logic,
    bool GM tensors; checked after ``lower_bool_io``, as they are printed); templates that do
    not keep the old refusal.
    """
    return _unsupported(lower_bool_io(expr) if masks else expr, masks)


def _unsupported(expr, masks: bool) -> str | None:
    kind = type(expr).__name__
    if kind in _LEAVES:
        if kind == "TensorLoad" and str(expr.ty.dtype) == "bool" and not masks:
            return "a bool tensor"
        return None
    what = expr.op.name if isinstance(expr, Call) else kind
    if what in MASK_CONSTRUCTS and not masks:
        return what
    if isinstance(expr, Call):
        if what not in VECTOR_CALLS:
            return what
    elif kind not in VECTOR_BINARY and kind not in ("Cast", "Select", "Not"):
        return kind
    dtype = str(expr.ty.dtype)
    if dtype not in (VECTOR_DTYPES if masks else FLOAT_DTYPES):
        return f"{what} on {dtype}"
    if kind == "Select" and dtype == "bool":
        return "Select between bool values"
    for child in child_exprs(expr):
        found = _unsupported(child, masks)
        if found:
            return found
    return None


def lower_bool_io(root):
    """``root`` with its bool GM reads and its bool result made explicit for the vector unit.

    A bool tensor in GM is one byte (0 or 1) per element; on the UB a bool is a bit mask. A bool
    load becomes ``Cast(float16, load) != 0`` (Cast uint8 -> half, then Compares), or just the
    Cast where the load is cast to a float anyway; a bool root becomes ``Cast(uint8,
    Cast(float16, root))`` (Select of 1/0, then Cast half -> uint8). Float roots are unchanged.
    """
    zero = tirx.FloatImm("float16", 0.0)

    def is_bool_load(expr) -> bool:
        return isinstance(expr, BufferLoad) and str(expr.ty.dtype) == "bool"

    def rebuild(expr):
        if is_bool_load(expr):
            return tirx.NE(tirx.Cast("float16", expr), zero)
        kind = type(expr).__name__
        condition = bool_behind_int_test(expr)
        if condition is not None:
            return rebuild(condition)
        if kind == "Cast":
            if is_bool_load(expr.value) and str(expr.ty.dtype) in FLOAT_DTYPES:
                half = tirx.Cast("float16", expr.value)
                return half if str(expr.ty.dtype) == "float16" else tirx.Cast("float32", half)
            return tirx.Cast(str(expr.ty.dtype), rebuild(expr.value))
        if kind == "Select":
            return tirx.Select(rebuild(expr.condition), rebuild(expr.true_value),
                               rebuild(expr.false_value))
        if kind == "Not":
            return tirx.Not(rebuild(expr.a))
        if isinstance(expr, Call):
            return Call(expr.op, [rebuild(a) for a in expr.args], ret_ty=str(expr.ty.dtype))
        if kind in VECTOR_BINARY:
            return getattr(tirx, kind)(rebuild(expr.a), rebuild(expr.b))
        return expr

    if not _has_bool(root):
        return root
    lowered = rebuild(root)
    if str(root.ty.dtype) == "bool":
        lowered = tirx.Cast("uint8", tirx.Cast("float16", lowered))
    return lowered


def bool_behind_int_test(expr):
    """``b`` of ``0 < Cast(int, b)`` or ``Cast(int, b) != 0`` (how TOPI's where tests a bool
    condition), else None."""
    kind = type(expr).__name__
    if kind not in ("LT", "NE", "GT"):
        return None
    zero, cast = (expr.a, expr.b) if kind == "LT" else (expr.b, expr.a)
    if kind == "NE" and type(zero).__name__ != "IntImm":
        zero, cast = cast, zero
    if type(zero).__name__ != "IntImm" or int(zero.value) != 0:
        return None
    if type(cast).__name__ != "Cast" or str(cast.value.ty.dtype) != "bool":
        return None
    return cast.value


def _has_bool(expr) -> bool:
    if str(expr.ty.dtype) == "bool":
        return True
    return any(_has_bool(child) for child in child_exprs(expr))


def writes_dst_first(expr, is_tile) -> bool:
    """Whether the printed instructions of ``expr`` write their destination before they read
    every operand (Select of a scalar and a tile fills the destination with the scalar first),
    so the destination may not share a slot with a dying operand."""
    return (type(expr).__name__ == "Select" and not is_tile(expr.true_value)
            and is_tile(expr.false_value))


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


def _elem_bytes(expr) -> int:
    return max(1, tvm.runtime.DataType(str(expr.ty.dtype)).bits // 8)


def plan_tile_values(root, classify) -> TileValuePlan:
    """Plan the UB tile buffers of ``root``; ``classify(load) -> Access`` for each BufferLoad.

    Operands that die at an instruction free their slot before its result is placed, so results
    may overwrite a dying operand of the same element size (AscendC allows exact in-place overlap
    for elementwise ops). Bool reads and results are lowered first (``lower_bool_io``), so
    ``plan.root`` may differ from ``root``.
    """
    root = lower_bool_io(root)
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
            tile = any([is_tile(child) for child in child_exprs(expr)])
        if tile:
            plan.tile_keys.add(key)
        return tile

    def count(expr):
        key = expr_key(expr)
        uses[key] = uses.get(key, 0) + 1
        if uses[key] > 1 or isinstance(expr, BufferLoad):
            return
        for child in child_exprs(expr):
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
        tile_children = [c for c in child_exprs(expr) if is_tile(c)]
        for child in tile_children:
            visit(child)
        dying = []
        for child in tile_children:
            child_key = expr_key(child)
            uses[child_key] -= 1
            if uses[child_key] == 0 and child_key in plan.slot:
                dying.append((plan.slot[child_key], _elem_bytes(child)))
        # A result may overwrite a dying operand only exactly (same element size: the device
        # allows 100% overlap, not a half-width view) and only if it reads it first.
        reusable = [] if writes_dst_first(expr, is_tile) else \
            [slot for slot, size in dying if size == _elem_bytes(expr)]
        tile_nodes[key] = expr
        plan.order.append(expr)
        if key != root_key:
            if reusable:
                plan.slot[key] = reusable[0]
            elif free:
                plan.slot[key] = free.pop()
            else:
                plan.slot[key] = live
                live += 1
        # the other dying operands are free for later results, never for this one
        free.extend(slot for slot, _ in dying if slot != plan.slot.get(key))

    if is_tile(root):
        visit(root)
    plan.n_slots = live
    return plan
