"""The movement program: a data-movement group's output read back from its TIR, per row.

The group's PrimFunc is inlined into its output block, viewed per output row ``r`` and column
``c``. Every maximal data-movement subtree of the output expression (a load, or an
``if_then_else`` over loads and constants) is an ``Operand``; its columns are cut into
``Segment``s where a condition on ``c`` changes, each filled by a tree of ``Leaf`` sources
(a run, a strided span or box, one element per row, a constant) chosen per row by ``Choice``
nodes. Index expressions are evaluated on numpy arrays over every row to find pitches and runs.

The template (``data_movement.py``) sizes its tiles from this program and the printer prints
its copies from it; reading it needs only TIR and index arithmetic, not the SoC, so it lives
apart from the planning.

Example
-------
>>> program = movement_program(transpose_021)   # (4, 6, 8) -> (4, 8, 6)  # doctest: +SKIP
>>> [leaf.kind for seg in program.segments() for leaf in seg.leaves()]   # strided columns
['span']
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym.analyzer import Analyzer

from tvm_ascend.errors import TilingError

from .tile_values import (VECTOR_BINARY, VECTOR_CALLS, AccessKind, Access,
                          expr_key, flat_offset, plan_tile_values)
from .tir_walk import BufferLoad, Call, cached_by_identity, expr_dtype, load_buffer, param_buffers
from ..tiling import dtype_bytes, round_up
from ..tiling import BLOCK_BYTES, SUPPORTED_DTYPES

ROW, COL = tirx.Var("r", "int64"), tirx.Var("c", "int64")
MAX_BURSTS = 4095      # DataCopyPad blockCount limit
ITE_OPS = ("prim.if_then_else", "tirx.if_then_else")
INDEX_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class Leaf:
    """Where one segment of an operand comes from: a buffer read or a constant."""

    kind: str             # "run" (stride 1), "span" (per-row strided), "box", "scalar", "const"
    buffer: object = None
    base: object = None   # element offset of column c0 as a function of ``r``
    stride: int = 0
    value: object = None  # the constant (FloatImm) of a "const" leaf

    @property
    def index_loads(self) -> list:
        """Loads of index tensors inside ``base`` (a Gather's ids), read on the scalar unit."""
        found = []
        _collect_loads(self.base, found)
        return found


@dataclass(frozen=True)
class Choice:
    """A source chosen per row: ``then`` where ``cond(r)`` holds, else ``other``."""

    cond: object
    then: object
    other: object


@dataclass
class Segment:
    """Columns ``[c0, c1)`` of one operand and the tree of sources that fills them."""

    c0: int
    c1: int
    tree: object                 # Leaf or Choice
    layout: str = "rows"         # "rows": one staging row per output row; "box": per column
    row_len: int = 0             # elements one row copies ("rows" layout)
    pitch: int | None = None     # base(r + 1) - base(r) where constant
    pitch_runs: int = 1          # rows between changes of that pitch (gcd)
    offset: int = 0              # element offset of the segment's staging region (set per tile)

    @property
    def width(self) -> int:
        return self.c1 - self.c0

    def leaves(self) -> list:
        return _leaves(self.tree)

    def data_leaf(self) -> Leaf | None:
        data = [leaf for leaf in self.leaves() if leaf.kind != "const"]
        return data[0] if data else None

    def region(self, tile_rows: int, align: int) -> int:
        """Staging elements of this segment for ``tile_rows`` rows."""
        if self.layout == "box":
            return self.width * round_up(tile_rows, align)
        return tile_rows * round_up(self.row_len, align)

    def column(self, jj: int) -> int:
        """Staging element of local column ``jj`` within one row (rows layout)."""
        leaf = self.data_leaf()
        if leaf is None or leaf.kind == "run":
            return jj
        if leaf.kind == "scalar":
            return 0
        return jj * leaf.stride if leaf.stride > 0 else (self.width - 1 - jj) * -leaf.stride


@dataclass
class Operand:
    """One data-movement subtree of the output expression, assembled into a UB tile."""

    index: int
    expr: object
    placeholder: object            # the load that stands for it in the compute expression
    segments: list = field(default_factory=list)
    direct: bool = False           # its staging buffer is the operand tile (no Gather)

    def layout(self, tile_rows: int, align: int) -> int:
        """Set every segment's staging offset for ``tile_rows``; returns staging elements."""
        total = 0
        for seg in self.segments:
            seg.offset = total
            total += seg.region(tile_rows, align)
        return total


@dataclass
class MovementProgram:
    """Everything the template sizes and the printer prints, derived from the output block."""

    rows: int
    cols: int
    dtype: str
    out_buffer: object
    operands: list
    root: object                   # the output expression with operands as placeholders
    plan: object                   # TileValuePlan of ``root``
    scalars: dict                  # load key -> (buffer, offset) of kernel-wide scalars
    inputs: list                   # every input buffer the kernel reads

    @property
    def align(self) -> int:
        return BLOCK_BYTES // dtype_bytes(self.dtype)

    @property
    def row_stride(self) -> int:
        return round_up(self.cols, self.align)

    @property
    def box_runs(self) -> int:
        """Tile rows must divide this: box copies need consecutive bases in a tile."""
        runs = 0
        for seg in self.segments():
            if seg.layout == "box":
                runs = math.gcd(runs, seg.pitch_runs)
        return runs or self.rows

    @property
    def max_box_rows(self) -> int:
        strides = [abs(s.data_leaf().stride) for s in self.segments() if s.layout == "box"]
        return min(strides) if strides else MAX_BURSTS

    def segments(self) -> list:
        return [seg for op in self.operands for seg in op.segments]


def _leaves(tree) -> list:
    if isinstance(tree, Choice):
        return _leaves(tree.then) + _leaves(tree.other)
    return [tree]


def _collect_loads(expr, found: list) -> None:
    if expr is None:
        return
    if isinstance(expr, BufferLoad):
        found.append(expr)
        for index in expr.indices:
            _collect_loads(index, found)
        return
    for child in _kids(expr):
        _collect_loads(child, found)


def _kids(expr) -> list:
    if isinstance(expr, BufferLoad):
        return list(expr.indices)
    if isinstance(expr, Call):
        return list(expr.args)
    if type(expr).__name__ == "Cast":
        return [expr.value]
    if type(expr).__name__ == "Not":
        return [expr.a]
    if type(expr).__name__ == "Select":
        return [expr.condition, expr.true_value, expr.false_value]
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return [expr.a, expr.b]
    return []


def uses(expr, var) -> bool:
    """Whether ``var`` occurs in ``expr``, index expressions of loads included."""
    if isinstance(expr, tirx.Var):
        return expr.same_as(var)
    return any(uses(child, var) for child in _kids(expr))


# ---- numeric evaluation of index expressions over every row --------------------------------
class DataDependent(Exception):
    """An expression reads a tensor (a Gather's ids): known only at run time."""


_NUMERIC = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide,
            "FloorMod": np.mod, "Div": np.floor_divide, "Min": np.minimum, "Max": np.maximum,
            "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
            "EQ": np.equal, "NE": np.not_equal, "And": np.logical_and, "Or": np.logical_or}


def evaluate(expr, env: dict, load=None):
    """Value of an integer/boolean expression, vectorised: ``env`` maps var names to arrays;
    ``load(buffer, flat offsets)`` gives the values a load of memory reads (None: such an
    expression is ``DataDependent``)."""
    kind = type(expr).__name__
    if kind == "Var":
        return env[expr.name]
    if kind == "IntImm":
        return np.int64(expr.value)
    if kind == "Cast":
        return evaluate(expr.value, env, load)
    if kind == "Not":
        return np.logical_not(evaluate(expr.a, env, load))
    if kind in _NUMERIC:
        return _NUMERIC[kind](evaluate(expr.a, env, load), evaluate(expr.b, env, load))
    if kind == "TensorLoad" and load is not None:
        buffer = load_buffer(expr)
        return load(buffer, evaluate(flat_offset(buffer, expr.indices), env, load))
    if kind == "TensorLoad":
        raise DataDependent(str(expr))
    raise TilingError(f"index expression {kind} ({expr}) is not affine arithmetic")


def _over_rows(expr, rows: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(evaluate(expr, {"r": np.arange(rows, dtype=np.int64)})),
                           (rows,))


def _pitch(base, rows: int, step: int | None = None) -> tuple[int | None, int]:
    """(pitch, runs): base(r + 1) - base(r) == pitch except at multiples of ``runs`` rows."""
    try:
        values = _over_rows(base, rows)
    except DataDependent:
        return None, 1
    if rows == 1:
        return step, 1
    diffs = np.diff(values)
    pitch = int(diffs[0]) if step is None else step
    breaks = np.nonzero(diffs != pitch)[0] + 1
    runs = rows
    for position in breaks:
        runs = math.gcd(runs, int(position))
    return pitch, runs


# ---- analysis ----------------------------------------------------------------------------------
def inlined_output_block(func):
    """(TIR Schedule of ``func`` with every block inlined into the output block, that block's
    BlockRV); TilingError when a block cannot be inlined or the output reduces.

    Examples
    --------
    >>> sch, out_rv = inlined_output_block(prim_func)             # doctest: +SKIP
    >>> len(sch.get_loops(out_rv))                             # one loop per output axis
    3
    """
    sch = tvm.s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for block_rv in blocks[:-1]:
        try:
            sch.compute_inline(block_rv)
        except Exception as err:  # noqa: BLE001 - TVM refuses reductions and the like
            raise TilingError(f"block {sch.get(block_rv).name_hint} cannot be inlined into the "
                              f"output: not a data-movement group ({err})") from err
    out = sch.get(blocks[-1])
    if any(int(iv.iter_type) == 2 for iv in out.iter_vars):  # 2: CommReduce
        # a MatMul or reduction computes its output; moving data does not
        raise TilingError(f"block {out.name_hint} reduces: not a data-movement group")
    return sch, blocks[-1]


def _row_bindings(block) -> tuple[dict, int, int]:
    extents = [int(iv.dom.extent) for iv in block.iter_vars]
    bindings, stride = {}, 1
    cols = extents[-1]
    bindings[block.iter_vars[-1].var] = COL
    for iv, extent in reversed(list(zip(block.iter_vars[:-1], extents[:-1]))):
        value = tirx.FloorDiv(ROW, tirx.IntImm("int64", stride)) if stride > 1 else ROW
        bindings[iv.var] = tirx.FloorMod(value, tirx.IntImm("int64", extent)) \
            if extent > 1 else tirx.IntImm("int64", 0)
        stride *= extent
    return bindings, stride, cols


def _analyzer(bindings: dict, rows: int, c0: int, c1: int) -> Analyzer:
    analyzer = Analyzer()
    analyzer.bind(ROW, tvm.ir.Range(0, rows))
    analyzer.bind(COL, tvm.ir.Range(c0, c1))
    for var, value in bindings.items():
        analyzer.bind(var, value)
    return analyzer


def _is_ite(expr) -> bool:
    return type(expr).__name__ == "Select" or (isinstance(expr, Call) and
                                               expr.op.name in ITE_OPS)


def _ite_parts(expr):
    if type(expr).__name__ == "Select":
        return expr.condition, expr.true_value, expr.false_value
    return expr.args[0], expr.args[1], expr.args[2]


def _atoms(cond, found: list) -> None:
    kind = type(cond).__name__
    if kind in ("And", "Or"):
        _atoms(cond.a, found)
        _atoms(cond.b, found)
    elif kind == "Not":
        _atoms(cond.a, found)
    else:
        found.append(cond)


def _rebuild(expr, replace):
    """``expr`` with every subtree for which ``replace`` returns a value replaced by it."""
    new = replace(expr)
    if new is not None:
        return new
    kind = type(expr).__name__
    if kind in VECTOR_BINARY:
        return getattr(tirx, kind)(_rebuild(expr.a, replace), _rebuild(expr.b, replace))
    if kind == "Cast":
        return tirx.Cast(expr_dtype(expr), _rebuild(expr.value, replace))
    if isinstance(expr, Call):
        return Call(expr.op, [_rebuild(a, replace) for a in expr.args], ret_ty=expr.ty)
    return expr


class _Analysis:
    """Builds the MovementProgram of one inlined output block."""

    def __init__(self, func, block):
        self.func = func
        self.bindings, self.rows, self.cols = _row_bindings(block)
        self.store = block.body
        self.dtype = str(self.store.buffer.dtype)
        self.full = _analyzer(self.bindings, self.rows, 0, self.cols)

    def run(self) -> MovementProgram:
        if self.dtype not in SUPPORTED_DTYPES:
            raise TilingError(f"writes {self.dtype}; data-movement kernels take "
                              f"{' or '.join(SUPPORTED_DTYPES)}")
        operands, scalars = {}, {}
        self._find(self.store.value, operands, scalars)
        if not operands:
            raise TilingError("no tensor operand")
        bounds = self._boundaries(list(operands.values()))
        for operand in operands.values():
            for c0, c1 in zip(bounds[:-1], bounds[1:]):
                operand.segments.extend(self._segment(operand.expr, c0, c1))
            self._merge_runs(operand)
            only = operand.segments[0]
            operand.direct = (len(operand.segments) == 1 and only.layout == "rows"
                              and all(leaf.kind in ("run", "const") for leaf in only.leaves()))
        if all(self._whole_rows(op) for op in operands.values()):
            raise TilingError("every operand is whole rows at fixed bases: a row copy (the "
                              "elementwise and row templates' job)")
        placeholders = {k: op.placeholder for k, op in operands.items()}
        root = _rebuild(self.store.value, lambda e: placeholders.get(expr_key(e)))
        plan = plan_tile_values(root, self._classify(placeholders, scalars))
        dtypes = {expr_dtype(n) for n in plan.order} | {self.dtype}
        if len(dtypes) != 1:
            raise TilingError(f"data-movement kernels compute in one dtype; this group mixes "
                              f"{sorted(dtypes)}")
        inputs = param_buffers(self.func)[0]
        return MovementProgram(self.rows, self.cols, self.dtype, self.store.buffer,
                               list(operands.values()), root, plan, scalars, inputs)

    def _whole_rows(self, operand: Operand) -> bool:
        seg = operand.segments[0]
        if len(operand.segments) != 1 or not isinstance(seg.tree, Leaf) or \
                seg.tree.kind != "run":
            return False
        return seg.pitch is not None  # bases known at compile time (not a Gather's ids)

    def _classify(self, placeholders, scalars):
        keys = {expr_key(p) for p in placeholders.values()}

        def classify(load):
            key = expr_key(load)
            if key in keys:
                return Access(AccessKind.FULL, load_buffer(load), 0)
            if key in scalars:
                return Access(AccessKind.SCALAR, load_buffer(load), scalars[key][1])
            raise TilingError(f"load {load} is neither an operand nor a scalar")
        return classify

    def _find(self, expr, operands: dict, scalars: dict) -> None:
        """Operands (movement subtrees) and kernel scalars of the compute expression."""
        kind = type(expr).__name__
        if isinstance(expr, BufferLoad):
            offset = self.full.simplify(flat_offset(load_buffer(expr), expr.indices))
            if not uses(offset, ROW) and not uses(offset, COL):
                scalars[expr_key(expr)] = (load_buffer(expr), offset)
                return
        if isinstance(expr, BufferLoad) or _is_ite(expr):
            key = expr_key(expr)
            if key not in operands:
                index = len(operands)
                holder = tirx.decl_buffer((1,), expr_dtype(expr), f"operand{index}")
                operands[key] = Operand(index, expr, tirx.BufferLoad(
                    holder, [tirx.IntImm("int64", 0)]))
            return
        if kind in ("FloatImm", "IntImm"):
            return
        if kind in VECTOR_BINARY or kind == "Cast" or (isinstance(expr, Call)
                                                        and expr.op.name in VECTOR_CALLS):
            for child in _kids(expr):
                self._find(child, operands, scalars)
            return
        what = expr.op.name if isinstance(expr, Call) else kind
        raise TilingError(f"TIR construct {what} has no vector instruction")

    def _boundaries(self, operands) -> list:
        """Column positions where some condition on ``c`` changes value."""
        atoms: list = []
        for operand in operands:
            self._conditions(operand.expr, atoms)
        cuts = {0, self.cols}
        columns = np.arange(self.cols, dtype=np.int64)
        for atom in atoms:
            simple = self.full.simplify(atom)
            if not uses(simple, COL):
                continue
            if uses(simple, ROW):
                raise TilingError(f"condition {atom} depends on both the row and the column")
            values = np.broadcast_to(np.asarray(evaluate(simple, {"c": columns})), columns.shape)
            cuts.update(int(i) + 1 for i in np.nonzero(values[1:] != values[:-1])[0])
        return sorted(cuts)

    def _conditions(self, expr, atoms: list) -> None:
        if _is_ite(expr):
            cond, then, other = _ite_parts(expr)
            _atoms(cond, atoms)
            self._conditions(then, atoms)
            self._conditions(other, atoms)

    def _segment(self, expr, c0: int, c1: int) -> list:
        analyzer = _analyzer(self.bindings, self.rows, c0, c1)
        tree = self._tree(expr, analyzer, c0, c1)
        data = [leaf for leaf in _leaves(tree) if leaf.kind != "const"]
        kinds = {(leaf.kind, leaf.stride) for leaf in data}
        if len(kinds) > 1:
            raise TilingError(f"columns {c0}..{c1} choose per row between sources read with "
                              f"different strides {sorted(kinds)}")
        seg = Segment(c0, c1, tree)
        leaf = data[0] if data else None
        width = c1 - c0
        if leaf is None or leaf.kind == "run":
            seg.row_len = width
        elif leaf.kind == "scalar":
            seg.row_len = 1
        else:
            seg.row_len = (width - 1) * abs(leaf.stride) + 1
        if isinstance(tree, Leaf) and leaf is not None:
            if leaf.kind == "span":
                pitch, runs = _pitch(leaf.base, self.rows, 1)
                if pitch == 1 and runs > 1 and width <= MAX_BURSTS:
                    seg.layout, seg.pitch, seg.pitch_runs = "box", 1, runs
                    return [seg]
            seg.pitch, seg.pitch_runs = _pitch(leaf.base, self.rows)
        return [seg]

    def _tree(self, expr, analyzer, c0: int, c1: int):
        if _is_ite(expr):
            cond, then, other = _ite_parts(expr)
            resolved = self._resolve(cond, analyzer, c0, c1)
            if resolved is True:
                return self._tree(then, analyzer, c0, c1)
            if resolved is False:
                return self._tree(other, analyzer, c0, c1)
            return Choice(resolved, self._tree(then, analyzer, c0, c1),
                          self._tree(other, analyzer, c0, c1))
        if isinstance(expr, BufferLoad):
            return self._leaf(expr, analyzer, c0)
        if type(expr).__name__ in ("FloatImm", "IntImm"):
            return Leaf("const", value=expr)
        raise TilingError(f"computes ({type(expr).__name__}) inside a data-movement branch: "
                          "only the consumer of a data movement fuses")

    def _resolve(self, cond, analyzer, c0: int, c1: int):
        """True/False where ``cond`` is constant over the segment, else a condition on ``r``."""
        kind = type(cond).__name__
        if kind in ("And", "Or"):
            a = self._resolve(cond.a, analyzer, c0, c1)
            b = self._resolve(cond.b, analyzer, c0, c1)
            absorbing = kind == "Or"
            if a is absorbing or b is absorbing:
                return absorbing
            if isinstance(a, bool):
                return b
            if isinstance(b, bool):
                return a
            return getattr(tirx, kind)(a, b)
        if kind == "Not":
            inner = self._resolve(cond.a, analyzer, c0, c1)
            return (not inner) if isinstance(inner, bool) else tirx.Not(inner)
        simple = analyzer.simplify(cond)
        if uses(simple, COL):
            values = np.broadcast_to(np.asarray(evaluate(simple, {
                "c": np.arange(c0, c1, dtype=np.int64)})), (c1 - c0,))
            return bool(values[0])
        if type(simple).__name__ == "IntImm":
            return bool(simple.value)
        _over_rows(simple, 1)  # conditions must be arithmetic on r (raises otherwise)
        return simple

    def _leaf(self, load, analyzer, c0: int) -> Leaf:
        buffer = load_buffer(load)
        if str(buffer.dtype) != self.dtype:
            raise TilingError(f"{buffer.name} is {buffer.dtype}, the output {self.dtype}: casts "
                              "are not fused into data movement")
        offset = analyzer.simplify(flat_offset(buffer, load.indices))
        at = [Analyzer(), Analyzer()]
        for a, value in zip(at, (c0, c0 + 1)):
            a.bind(COL, tirx.IntImm("int64", value))
        step = analyzer.simplify(at[1].simplify(offset) - at[0].simplify(offset))
        if type(step).__name__ != "IntImm":
            raise TilingError(f"{buffer.name} is read as {load}: not a fixed stride along the "
                              "last axis")
        stride = int(step.value)
        rest = analyzer.simplify(offset - tirx.IntImm("int64", stride) * COL)
        if uses(rest, COL):
            raise TilingError(f"{buffer.name} is read as {load}: not linear along the last axis")
        base = analyzer.simplify(rest + tirx.IntImm("int64", stride * c0))
        for index_load in index_loads(base):
            if str(load_buffer(index_load).dtype) not in INDEX_DTYPES:
                raise TilingError(f"index tensor {load_buffer(index_load).name} is "
                                  f"{load_buffer(index_load).dtype}")
        kind = {1: "run", 0: "scalar"}.get(stride, "span")
        return Leaf(kind, buffer, base, stride)

    @staticmethod
    def _merge_runs(operand: Operand) -> None:
        """Neighbouring segments that continue one run (a pad's cut that only one operand sees)
        become one segment."""
        merged = []
        for seg in operand.segments:
            prev = merged[-1] if merged else None
            if prev is not None and isinstance(prev.tree, Leaf) and isinstance(seg.tree, Leaf) \
                    and prev.tree.kind == seg.tree.kind == "run" \
                    and prev.tree.buffer.same_as(seg.tree.buffer) \
                    and tvm_ffi.structural_equal(Analyzer().simplify(
                        prev.tree.base + tirx.IntImm("int64", prev.width)), seg.tree.base):
                merged[-1] = Segment(prev.c0, seg.c1, prev.tree, "rows", seg.c1 - prev.c0,
                                     prev.pitch, prev.pitch_runs)
            elif prev is not None and isinstance(prev.tree, Leaf) and \
                    isinstance(seg.tree, Leaf) and prev.tree.kind == seg.tree.kind == "const" \
                    and tvm_ffi.structural_equal(prev.tree.value, seg.tree.value):
                merged[-1] = Segment(prev.c0, seg.c1, prev.tree, "rows", seg.c1 - prev.c0)
            else:
                merged.append(seg)
        operand.segments = merged


def index_loads(base) -> list:
    """The loads inside an index expression (a Gather's ids read to address another load)."""
    found: list = []
    _collect_loads(base, found)
    return found


def movement_program(func) -> MovementProgram:
    """The MovementProgram of ``func`` (scheduled or not); TilingError says why not."""
    sch, out_rv = inlined_output_block(func)
    return _Analysis(func, sch.get(out_rv)).run()


@cached_by_identity
def prepared_movement(func) -> tuple[MovementProgram, object]:
    """(MovementProgram of ``func``, ``func`` with every block inlined into its output block):
    the template's ``applies`` and ``analyse`` both ask it of a candidate, so the answer is
    kept for the last few functions (shared: never modify it); TilingError says why not."""
    sch, out_rv = inlined_output_block(func)
    return _Analysis(func, sch.get(out_rv)).run(), sch.mod["main"]


__all__ = ["MovementProgram", "Operand", "Segment", "Leaf", "Choice", "DataDependent",
           "movement_program", "prepared_movement", "inlined_output_block", "evaluate", "uses",
           "MAX_BURSTS", "index_loads"]
