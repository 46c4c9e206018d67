"""The row program: what a row group computes per row, read back from its TIR.

A group of blocks over rows of ``C`` elements (a softmax, a LayerNorm chain, the epilogue of a
matmul, a conv or a pool) is read as a list of steps (reductions, full rows, one value per row),
each load classified by how it walks a row (``RowAccessKind``). The row template plans its UB
from it, the matmul, conv and pool templates size their epilogues with it, and every printer of
those kernels prints from it; it lives apart from any one template so that they all read the
same program (and the template files keep only their own planning).

Example
-------
>>> program = row_program(schedule_blocks(sch), func, rows, cols)   # doctest: +SKIP
>>> [step.kind for step in program.steps]     # softmax: max, exp(x - max), its sum, output
['reduce', 'full', 'reduce', 'full']
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx

from tvm_ascend.errors import TilingError

from .tile_values import (FLOAT_DTYPES, VECTOR_DTYPES, Access, AccessKind, buffer_size, expr_key,
                          flat_offset, make_analyzer, plan_tile_values, uses_var)
from .tir_walk import (BufferLoad, expr_dtype, load_buffer, param_buffers, reduce_iter_vars,
                       reducer_of)


class RowAccessKind(enum.Enum):
    """How one load of a row program walks the rows: what the kernel copies or keeps per row."""

    ROWS = "rows"            # [rows, C] input: streamed row tiles
    COLUMN = "column"        # [C] input broadcast over rows (gamma, beta): resident in the UB
    ROW_SCALAR = "row"       # one value per row (any broadcast that does not vary along C)
    ROW_SLICE = "slice"      # C contiguous elements per row at base(row) (masks [b,1,1,s])
    SCALAR = "scalar"        # one value for the kernel
    INTERMEDIATE = "inter"   # a full row computed by an earlier step
    REDUCED = "reduced"      # a row value computed by an earlier reduction


@dataclass
class RowStep:
    """One block of the row program: a reduction, a full row, or one value per row."""

    kind: str            # "reduce", "full" or "row"
    buffer: object       # the buffer it writes (names may repeat: use ``index``)
    expr: object         # value of a full row, or the operand of the reduction
    reducer: str = ""    # "sum", "max" or "min"
    plan: object = None  # TileValuePlan of ``expr``
    is_output: bool = False
    index: int = 0       # position in the program; names its row value / row buffer


@dataclass
class RowProgram:
    """Everything the template sizes and the printer prints, derived from the scheduled TIR."""

    rows: int
    cols: int
    steps: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)    # input buffer name -> RowAccessKind
    bases: dict = field(default_factory=dict)     # input name -> element offset of row ``row``
    row_var: object = None                        # the variable ``row`` in ``bases``
    loads: dict = field(default_factory=dict)     # load key -> (kind, buffer, producing step)
    out_buffer: object = None
    out_full: bool = True
    exports: list = field(default_factory=list)   # steps whose rows are outputs too

    @property
    def intermediates(self) -> list:
        """Full rows kept in a row slot: not the output, nor a row exported (that one is
        computed into its output's own tile)."""
        return [s for s in self.steps if s.kind == "full" and not s.is_output
                and s.index not in self.exports]

    @property
    def temp_slots(self) -> int:
        """Row buffers for temporaries: a reduction's composite operand needs one more."""
        return max([0] + [s.plan.n_slots + (1 if s.kind == "reduce" and s.plan.order else 0)
                          for s in self.steps])

    def intermediate_slot(self, step_index: int) -> int:
        """Row buffer of the full intermediate made by step ``step_index``."""
        return [s.index for s in self.intermediates].index(step_index)


def is_full_row_block(extents, rows: int, cols: int) -> bool:
    """Whether a block of iteration ``extents`` runs over every element of ``rows`` rows of
    ``cols`` (as opposed to one value per row).

    Examples
    --------
    >>> is_full_row_block([4, 8, 128], 32, 128), is_full_row_block([4, 8], 32, 128)
    (True, False)
    >>> is_full_row_block([7, 1], 7, 1), is_full_row_block([7], 7, 1)
    (True, False)
    """
    # a block of [rows] is one value per row; with rows of one element, a block of
    # [rows, 1] is still a full row (its trailing axis says so)
    return bool(extents) and extents[-1] == cols and math.prod(extents[:-1]) == rows and (
        cols > 1 or len(extents) > 1)


def row_program(blocks, func, rows: int, cols: int, given=None) -> RowProgram:
    """The row program of ``blocks`` (in execution order), from their iteration variables and
    bodies only, so the inlined schedule and the final scheduled TIR give the same program.

    ``given`` lists buffers already in the UB row by row when the program starts (a matmul's
    result for its epilogue); loads of them are INTERMEDIATE with step -1.

    Examples
    --------
    >>> program = row_program(schedule_blocks(sch), func, 8, 1000)   # doctest: +SKIP
    >>> program.inputs                    # topi.nn.softmax of x (8, 1000), blocks inlined
    {'x': <RowAccessKind.ROWS: 'rows'>}
    """
    row, col = tirx.Var("row", "int64"), tirx.Var("col", "int64")
    _, outputs = param_buffers(func)
    # a group that also exports an intermediate (MultiOutputFusion) writes it first
    program = RowProgram(rows, cols, out_buffer=outputs[-1], row_var=row)
    # buffer (by identity) -> (kind of step, step index)
    produced = {buffer: ("full", -1) for buffer in (given or [])}
    for index, block in enumerate(blocks):
        bindings = _row_col_bindings(block, rows, cols, row, col)
        analyzer = make_analyzer(row, rows, bindings)
        analyzer.bind(col, tvm.ir.Range(0, cols))
        store = block.body
        if reduce_iter_vars(block):
            reducer, expr = reducer_of(store)
            kind = "reduce"
        else:
            extents = [int(iv.dom.extent) for iv in block.iter_vars]
            # a row of one element is its own row value: computed as a (1-element) row, so
            # that inputs it reads are row tiles wherever they are read
            kind = "full" if cols == 1 or is_full_row_block(extents, rows, cols) else "row"
            reducer, expr = "", store.value

        def classify(load, analyzer=analyzer):
            access, base = _classify_row_load(load, analyzer, row, col, rows, cols, produced)
            step = produced.get(load_buffer(load), (None, None))[1]
            program.loads[expr_key(load)] = (access, load_buffer(load), step)
            if access not in (RowAccessKind.INTERMEDIATE, RowAccessKind.REDUCED):
                _record_input(program, load_buffer(load).name, access, base)
            tile = access in (RowAccessKind.ROWS, RowAccessKind.COLUMN, RowAccessKind.ROW_SLICE,
                              RowAccessKind.INTERMEDIATE)
            return Access(AccessKind.FULL if tile else AccessKind.SCALAR, load_buffer(load), 0)

        plan = plan_tile_values(expr, classify)
        is_output = index == len(blocks) - 1
        program.steps.append(RowStep(kind, store.buffer, expr, reducer, plan, is_output, index))
        if not is_output and any(store.buffer.same_as(b) for b in outputs):
            program.exports.append(index)
        produced[store.buffer] = (kind, index)
        if is_output:
            program.out_full = kind == "full"
    return program


def _row_col_bindings(block, rows, cols, row, col) -> dict:
    """Block iteration variables as functions of (row, col)."""
    spatial = [iv for iv in block.iter_vars if int(iv.iter_type) == 0]
    reduce_vars = reduce_iter_vars(block)
    extents = [int(iv.dom.extent) for iv in spatial]
    full = not reduce_vars and is_full_row_block(extents, rows, cols)
    row_vars = spatial[:-1] if full else spatial
    bindings = {}
    stride = 1
    for iv in reversed(row_vars):
        extent = int(iv.dom.extent)
        bindings[iv.var] = tirx.FloorMod(tirx.FloorDiv(row, tirx.IntImm("int64", stride)),
                                         tirx.IntImm("int64", extent)) if extent > 1 \
            else tirx.IntImm("int64", 0)
        stride *= extent
    if full:
        bindings[spatial[-1].var] = col
    if reduce_vars:
        bindings[reduce_vars[0].var] = col
    return bindings


def _record_input(program: RowProgram, name: str, access, base) -> None:
    known = program.inputs.get(name)
    if known is not None and (known is not access or (
            base is not None and not tvm_ffi.structural_equal(program.bases[name], base))):
        raise TilingError(f"{name} is read in two ways ({known.value}, {access.value}) in one "
                          "row kernel")
    program.inputs[name] = access
    if base is not None:
        program.bases[name] = base


def _classify_row_load(load, analyzer, row, col, rows, cols, produced):
    """(kind, base offset of the row or None) of one load, relative to (row, col)."""
    buffer = load_buffer(load)
    if any(_reads_memory(index) for index in load.indices):
        # p0[ids[row], col]: which row is read depends on data (an embedding Gather)
        raise TilingError(f"{buffer.name} is read at indices loaded from memory ({load}): a "
                          "gather, which the data-movement template prints, not the row one")
    offset = analyzer.simplify(flat_offset(buffer, load.indices))
    if buffer in produced:  # computed in this kernel: must be read where it was written
        full = produced[buffer][0] == "full"
        where = row * cols + col if full else row
        if not analyzer.can_prove_equal(offset, where):
            raise TilingError(f"{buffer.name} is read in another layout than it was computed "
                              "in (a transpose of an intermediate): not printed yet")
        return (RowAccessKind.INTERMEDIATE if full else RowAccessKind.REDUCED), None
    size = buffer_size(buffer)
    if size == rows * cols and analyzer.can_prove_equal(offset, row * cols + col):
        return RowAccessKind.ROWS, None
    if size == cols and analyzer.can_prove_equal(offset, col):
        return RowAccessKind.COLUMN, None
    if size == 1:
        return RowAccessKind.SCALAR, None
    if not uses_var(offset, col):
        return RowAccessKind.ROW_SCALAR, offset
    base = analyzer.simplify(offset - col)
    if not uses_var(base, col):
        return RowAccessKind.ROW_SLICE, base
    raise TilingError(f"{buffer.name} is read as {load}, not along the rows' last axis (as a "
                      "row, a column, one value per row or a scalar)")


def _reads_memory(expr) -> bool:
    """Whether an index expression loads from a buffer."""
    if isinstance(expr, BufferLoad):
        return True
    children = list(getattr(expr, "args", None) or []) + \
        [getattr(expr, name) for name in ("a", "b", "value") if hasattr(expr, name)]
    return any(_reads_memory(c) for c in children if isinstance(c, tvm.ir.Expr))


def program_dtypes(program: RowProgram) -> set:
    """Every dtype a row program touches: loads, the output and every computed value (an fp16
    erf is computed in float32 by TOPI, for instance)."""
    dtypes = {str(b.dtype) for _, b, _ in program.loads.values()}
    dtypes.add(str(program.out_buffer.dtype))
    for step in program.steps:
        dtypes.update(expr_dtype(node) for node in step.plan.order)
    return dtypes


def check_program_dtypes(program: RowProgram) -> None:
    """Refuse dtypes the row kernels cannot print. Each value is computed in its own dtype
    (a Cast(fp16 -> fp32) before a reduction keeps its accumulation in float32); bool values
    are masks and bool tensors 0/1 bytes."""
    dtypes = program_dtypes(program)
    for step in program.steps:
        dtypes.add(str(step.buffer.dtype))
    unsupported = sorted(d for d in dtypes if d not in VECTOR_DTYPES)
    if unsupported:
        raise TilingError(f"row kernels compute in {' and '.join(FLOAT_DTYPES)} (with bool "
                          f"masks); this group uses {', '.join(unsupported)}")
    for step in program.steps:
        if step.kind == "reduce" and str(step.buffer.dtype) not in FLOAT_DTYPES:
            raise TilingError(f"a reduction into {step.buffer.dtype} has no vector instruction")


def input_dtypes(program: RowProgram) -> dict:
    """GM input name -> dtype, for every input the row kernel reads."""
    return {buffer.name: str(buffer.dtype) for _, buffer, _ in program.loads.values()
            if buffer.name in program.inputs}


__all__ = ["RowAccessKind", "RowStep", "RowProgram", "row_program", "is_full_row_block",
           "program_dtypes", "check_program_dtypes", "input_dtypes"]
