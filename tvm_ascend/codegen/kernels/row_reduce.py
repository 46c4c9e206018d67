"""Prints a row-reduction kernel (softmax, normalisations, last-axis reduces) from scheduled TIR.

Rows are split over the cores; ``tileRows`` rows are copied in at once (each row lands 32-byte
aligned, ``ROW_STRIDE`` elements apart); then each row runs the row program: reductions into one
value (ReduceSum/ReduceMax/ReduceMin, read back on the scalar unit), full-row steps as vector
instructions with the row values as scalar operands, and the row's output. A reduction of a
value that does not vary along the row (rows of one element, a broadcast row value) needs no
vector instruction: it is printed on the scalar unit (``scalar_reduction``).

A row longer than the UB (a plan with ``chunked`` passes) is printed by
``ChunkedRowKernelPrinter``: each pass sweeps the row in chunks of ``chunkCols`` columns
(CopyIn/Compute[/CopyOut] per chunk), reductions add up chunk by chunk on the scalar unit, and
row values are computed between passes (``schedules/row_reduce.py``, ``row_passes``).
"""
from __future__ import annotations


from ...errors import CodegenError
from ...schedules.analysis.row_program import RowAccessKind, input_dtypes, row_program
from ...schedules.row_reduce import CHUNK_STREAMED
from ...schedules.analysis.tile_values import buffer_size, expr_key
from ...schedules.analysis.tir_walk import SBlock, expr_dtype, walk
from ..tiling_func import numel_expr
from ..cpp_types import cpp_type
from ..kernel_parts import TilingField, emit_resident_columns, ident
from ...schedules.symbolic_index import index_from_json
from ..kernel_printer import RowKernelPrinter
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..vector_emitters import Operand

REDUCE_API = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}


def reduced_operand(buf, printer, step, tiles, slot, count: str):
    """Print what a reduce step reduces (over ``count`` elements); returns its operand: a tile,
    or a scalar where the reduced value is the same for every column (``scalar_reduction``)."""
    temp = slot(step.plan.n_slots, step.expr) if step.plan.order else None
    return printer.emit(buf, step.plan, tiles, temp or "", slot, count)


def scalar_reduction(step, operand, count: str) -> str:
    """The reduction over ``count`` columns of a value that does not vary along the row (a row
    of one element, a slice down to one column, a broadcast row value): the value itself for
    max and min, ``count`` times it for a sum; a C++ expression in the operand's dtype."""
    ctype = cpp_type(operand.dtype)
    if step.reducer != "sum":
        return f"static_cast<{ctype}>({operand.text})"
    return (f"static_cast<{ctype}>(static_cast<float>({operand.text}) * "
            f"static_cast<float>({count}))")


def emit_reduce_call(buf, step, operand, count: str) -> str:
    """The reduction of ``operand`` into ``reducedBuf``, made visible to the scalar unit;
    returns the accumulator's C++ type (the operand's: float32 after a Cast, as the group
    says)."""
    acc = cpp_type(operand.dtype)
    buf.line(f"AscendC::{REDUCE_API[step.reducer]}(reducedBuf.Get<{acc}>(), {operand.text}, "
             f"workBuf.Get<{acc}>(), {count});")
    buf.line("AscendC::SetFlag<AscendC::HardEvent::V_S>(0);")
    buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);")
    return acc


def emit_full_step(buf, printer, step, tiles, slot, dst: str, count: str) -> None:
    """A full-row step of the row program over ``count`` elements, landing in ``dst``."""
    root = printer.emit(buf, step.plan, tiles, dst, slot, count)
    if root.text != dst:
        printer.emit_copy(buf, dst, root, count)


class RowReduceKernelPrinter(RowKernelPrinter):
    """Prints one row-reduction kernel (class + extern "C" entry)."""

    def __new__(cls, symbol: str, func, tiling):
        # a multi-pass plan (rows longer than the UB) is printed as another kernel shape
        if cls is RowReduceKernelPrinter and tiling.plan.chunked is not None:
            cls = ChunkedRowKernelPrinter
        return super().__new__(cls)

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        blocks = []
        walk(func.body, lambda s: blocks.append(s) if isinstance(s, SBlock)
             and s.name_hint != "root" else None)
        self.program = row_program(blocks, func, tiling.total, tiling.cols)
        if self.program.temp_slots != tiling.temp_buffers:
            raise CodegenError(f"{symbol}: {self.program.temp_slots} row temps needed, tiling "
                               f"planned {tiling.temp_buffers}")
        self.dtype = str(self.program.out_buffer.dtype)
        self.ctype = cpp_type(self.dtype)
        self.slot_base = len(self.program.intermediates)
        # each value keeps its own dtype (mixed-precision groups); rows of every dtype share
        # one element stride, and a row slot holds the widest value
        self.stride, self.slot_bytes = tiling.plan.row_stride, tiling.plan.slot_bytes
        self.in_dtypes = input_dtypes(self.program)
        # row offsets over symbolic dimensions (a transpose over s): printed from the plan's
        # expressions, the dimensions read from fields of the tiling struct
        runtime = getattr(tiling.plan, "runtime", None)
        self.sym_bases = {name: index_from_json(text)
                          for name, text in (runtime.bases if runtime else ())}
        self.dim_fields = {dim: dim_field(dim) for dim in (runtime.base_dims() if runtime
                                                           else [])}
        self.copied_fields = (*type(self).copied_fields, *self.dim_fields.values())

    def tiling_fields(self) -> list[TilingField]:
        fields = super().tiling_fields()
        high = self.shape_spec().high() if self.dim_fields else {}
        return fields + [TilingField("uint64_t", field, high[dim],
                                     f"symbolic dimension {dim} of this call")
                         for dim, field in self.dim_fields.items()]

    def emit_tiling_body(self, buf, dims: dict) -> None:
        """The host tiling function of a kernel over symbolic rows (tiling_func.py)."""
        emit_row_tiling_body(buf, self.tiling, dims)

    def _ctype(self, name: str) -> str:
        """C++ element type of GM input ``name``."""
        return cpp_type(self.in_dtypes[name])

    def _row_slot(self, k, dtype: str) -> str:
        """Row slot ``k`` of rowBuf viewed as ``dtype``."""
        return (f"rowBuf.GetWithOffset<{cpp_type(dtype)}>(ROW_STRIDE, {k} * ROW_STRIDE * "
                "SLOT_BYTES)")

    # ---- printing ---------------------------------------------------------------------------
    def emit_tiling_constants(self, buf):
        buf.line(f"constexpr uint32_t ROW_STRIDE = {self.stride};  // a row padded to 32 bytes")
        buf.line(f"constexpr uint32_t SLOT_BYTES = {self.slot_bytes};  // per element, row slots")
        buf.line(f"constexpr int32_t BUFFER_NUM = {self.tiling.buffer_num};")

    def _inputs(self, *kinds):
        return [name for name, k in self.program.inputs.items() if k in kinds]

    def _streamed(self):
        """Inputs copied in tile by tile through a VECIN queue."""
        return self._inputs(RowAccessKind.ROWS, RowAccessKind.ROW_SLICE)

    def _base(self, name: str) -> str:
        """C++ element offset of the current row's data in input ``name``."""
        if name in self.sym_bases:
            return ScalarPrinter({"row": "row", **self.dim_fields}).print(self.sym_bases[name])
        return ScalarPrinter({self.program.row_var.name: "row"}).print(self.program.bases[name])

    def emit_buffers(self, buf):
        for name in self._inputs(RowAccessKind.ROWS):
            n, ct = self.names[name], self._ctype(name)
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n} + rowStart * cols, "
                     "blockRows * cols);")
            buf.line(f"pipe.InitBuffer({n}Que, BUFFER_NUM, tileRows * ROW_STRIDE * "
                     f"sizeof({ct}));")
        columns = self._inputs(RowAccessKind.COLUMN)
        for ct in sorted({self._ctype(n) for n in columns}):
            emit_resident_columns(buf, [self.names[n] for n in columns
                                        if self._ctype(n) == ct],
                                  ct, "cols", f"ROW_STRIDE * sizeof({ct})")
        for name in self._inputs(RowAccessKind.ROW_SLICE):
            n, ct = self.names[name], self._ctype(name)
            size = buffer_size(next(p for p in self.params if p.name == name))
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, {size});")
            buf.line(f"pipe.InitBuffer({n}Que, BUFFER_NUM, tileRows * ROW_STRIDE * "
                     f"sizeof({ct}));")
        for name in self._inputs(RowAccessKind.ROW_SCALAR):
            n, ct = self.names[name], self._ctype(name)
            size = buffer_size(next(p for p in self.params if p.name == name))
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, {size});")
        for name in self._inputs(RowAccessKind.SCALAR):
            n, ct = self.names[name], self._ctype(name)
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, 1);")
            buf.line(f"{n}Val = {n}Gm.GetValue(0);")
        t = self.ctype
        self._emit_output_buffers(buf, f"tileRows * ROW_STRIDE * sizeof({t})",
                                  f"tileRows * sizeof({t})")
        self._emit_row_buffers(buf, "ROW_STRIDE")

    def emit_copy_in(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void CopyIn(uint32_t i, uint32_t n) {"):
            for name in self._streamed():
                n_, t = self.names[name], self._ctype(name)
                buf.line(f"AscendC::LocalTensor<{t}> {n_}Tile = {n_}Que.AllocTensor<{t}>();")
                if self.program.inputs[name] is RowAccessKind.ROWS:
                    buf.line(f"CopyRowsIn({n_}Tile, {n_}Gm[static_cast<uint64_t>(i) * "
                             "tileRows * cols], n, cols, ROW_STRIDE);")
                else:  # each row reads its own slice (a broadcast mask, ...)
                    with buf.indent("for (uint32_t r = 0; r < n; ++r) {"):
                        buf.line("uint64_t row = rowStart + static_cast<uint64_t>(i) * "
                                 "tileRows + r;")
                        buf.line(f"CopyGmToUb({n_}Tile[r * ROW_STRIDE], "
                                 f"{n_}Gm[{self._base(name)}], cols);")
                buf.line(f"{n_}Que.EnQue({n_}Tile);")

    def emit_compute(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void Compute(uint32_t i, uint32_t n) {"):
            for name in self._streamed():
                n_, ct = self.names[name], self._ctype(name)
                buf.line(f"AscendC::LocalTensor<{ct}> {n_}Tile = {n_}Que.DeQue<{ct}>();")
            buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.AllocTensor<{t}>();")
            with buf.indent("for (uint32_t r = 0; r < n; ++r) {"):
                buf.line("uint64_t row = rowStart + static_cast<uint64_t>(i) * tileRows + r;")
                self.emit_row(buf)
            buf.line("outQue.EnQue(outTile);")
            for name in self._streamed():
                n_ = self.names[name]
                buf.line(f"{n_}Que.FreeTensor({n_}Tile);")

    def _leaves(self) -> tuple[dict, dict]:
        """(tile operands by load key, scalar names by load key) visible to one step."""
        tiles, scalars = {}, {}
        for key, (kind, buffer, step) in self.program.loads.items():
            n_ = self.names.get(buffer.name, ident(buffer.name))
            dtype = str(buffer.dtype)
            if kind in CHUNK_STREAMED:
                tiles[key] = Operand(self._input_tile(n_, kind), True, dtype)
            elif kind is RowAccessKind.INTERMEDIATE:
                tiles[key] = Operand(self._row_slot(self.program.intermediate_slot(step), dtype),
                                     True, dtype, mask=dtype == "bool")
            elif kind is RowAccessKind.ROW_SCALAR:
                scalars[key] = self._row_scalar(n_, buffer.name)
            elif kind is RowAccessKind.SCALAR:
                scalars[key] = f"{n_}Val"
            else:  # a value computed by an earlier step of this row (or pass)
                scalars[key] = f"rowValue{step}"
        return tiles, scalars

    def _input_tile(self, n_: str, kind) -> str:
        """The UB tile of input ``n_`` a step reads: the current row of its tile, or the
        resident column."""
        return f"{n_}Col" if kind is RowAccessKind.COLUMN else f"{n_}Tile[r * ROW_STRIDE]"

    def _row_scalar(self, n_: str, name: str) -> str:
        """The current row's value of a per-row input, read from GM where it is used."""
        return f"{n_}Gm.GetValue({self._base(name)})"

    def _temp_slot(self, k: int, node) -> str:
        """Temp ``k`` of the row program (after the intermediates' slots), as ``node``'s dtype."""
        return self._row_slot(self.slot_base + k, expr_dtype(node))

    def _emit_full(self, buf, printer, step, tiles, out: str, count: str) -> None:
        """A full step over ``count`` elements: into ``out`` for the output, else into the
        step's row slot."""
        dst = out if step.is_output else self._row_slot(
            self.program.intermediate_slot(step.index), str(step.buffer.dtype))
        emit_full_step(buf, printer, step, tiles, self._temp_slot, dst, count)

    def _emit_row_buffers(self, buf, stride: str) -> None:
        """Init's row slots, the reduction's work space and its one value, ``stride`` apart."""
        slots = self.slot_base + self.program.temp_slots
        if slots:
            buf.line(f"pipe.InitBuffer(rowBuf, {slots} * {stride} * SLOT_BYTES);")
        buf.line(f"pipe.InitBuffer(workBuf, {stride} * SLOT_BYTES);")
        buf.line("pipe.InitBuffer(reducedBuf, 32);")

    def _emit_output_buffers(self, buf, rows_bytes: str, values_bytes: str) -> None:
        """Init's output view and VECOUT queue: whole rows, or one value a row."""
        t, out = self.ctype, self.names[self.program.out_buffer.name]
        if self.program.out_full:
            buf.line(f"outGm.SetGlobalBuffer((__gm__ {t}*){out} + rowStart * cols, "
                     "blockRows * cols);")
            buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, {rows_bytes});")
        else:
            buf.line(f"outGm.SetGlobalBuffer((__gm__ {t}*){out} + rowStart, blockRows);")
            buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, {values_bytes});")

    def _emit_row_members(self, buf) -> None:
        """The output's members and the row buffers ``_emit_row_buffers`` sets up."""
        buf.line(f"AscendC::GlobalTensor<{self.ctype}> outGm;")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        if self.slot_base + self.program.temp_slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf;")
        buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> workBuf;")
        buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> reducedBuf;")

    def emit_row(self, buf):
        for step in self.program.steps:
            tiles, scalar_names = self._leaves()
            scalars = ScalarPrinter(scalar_names, expr_key)
            printer = TileProgramPrinter(self.symbol, scalars)
            t = cpp_type(str(step.buffer.dtype))
            if step.kind == "reduce":
                operand = reduced_operand(buf, printer, step, tiles, self._temp_slot, "cols")
                if operand.is_tile:
                    acc = emit_reduce_call(buf, step, operand, "cols")
                    value = f"static_cast<{t}>(reducedBuf.Get<{acc}>().GetValue(0))"
                else:
                    value = f"static_cast<{t}>({scalar_reduction(step, operand, 'cols')})"
                if step.is_output:
                    buf.line(f"outTile.SetValue(r, {value});")
                else:
                    buf.line(f"{t} rowValue{step.index} = {value};")
            elif step.kind == "row":
                value = scalars.print(step.expr)
                if step.is_output:
                    buf.line(f"outTile.SetValue(r, static_cast<{self.ctype}>({value}));")
                else:
                    buf.line(f"{t} rowValue{step.index} = {value};")
            else:
                self._emit_full(buf, printer, step, tiles, "outTile[r * ROW_STRIDE]", "cols")

    def emit_copy_out(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void CopyOut(uint32_t i, uint32_t n) {"):
            buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.DeQue<{t}>();")
            if self.program.out_full:
                buf.line("CopyRowsOut(outGm[static_cast<uint64_t>(i) * tileRows * cols], "
                         "outTile, n, cols, ROW_STRIDE);")
            else:
                # The row values were written on the scalar unit: S before MTE3.
                buf.line("AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(0);")
                buf.line("AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(0);")
                buf.line("CopyUbToGm(outGm[static_cast<uint64_t>(i) * tileRows], outTile, n);")
            buf.line("outQue.FreeTensor(outTile);")

    def emit_members(self, buf):
        t = self.ctype
        buf.line("AscendC::TPipe pipe;")
        for name, kind in self.program.inputs.items():
            n_, t = self.names[name], self._ctype(name)
            buf.line(f"AscendC::GlobalTensor<{t}> {n_}Gm;")
            if kind in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE):
                buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> {n_}Que;")
            elif kind is RowAccessKind.COLUMN:
                buf.line(f"AscendC::TBuf<AscendC::TPosition::VECCALC> {n_}Res;")
                buf.line(f"AscendC::LocalTensor<{t}> {n_}Col;")
            elif kind is RowAccessKind.SCALAR:
                buf.line(f"{t} {n_}Val;")
        self._emit_row_members(buf)
        self.emit_share_members(buf, "tileRows", "cols")
        for field in self.dim_fields.values():
            buf.line(f"uint64_t {field} = 0;")


# accumulating one chunk's partial ``part`` into ``acc``; the first chunk starts it
ACCUMULATE = {"sum": "c0 == 0 ? part : {acc} + part",
              "max": "(c0 == 0 || part > {acc}) ? part : {acc}",
              "min": "(c0 == 0 || part < {acc}) ? part : {acc}"}


def emit_row_tiling_body(buf, tiling, dims: dict) -> None:
    """``row_reduce_tiling_at`` in C++: a call's rows split over at most ``max_cores`` cores,
    tiles of at most the rows the UB was sized for at the range's upper bound."""
    rt = tiling.plan.runtime
    total = numel_expr(rt.shapes.shapes[-1], dims)
    # rows of run-time length (cols_dim): as long as that dimension is in this call
    cols = f"static_cast<uint32_t>({dims[rt.cols_dim]})" if rt.cols_dim else str(tiling.cols)
    per_row = cols if rt.cols_dim else str(rt.out_cols)
    buf.line(f"uint64_t total = static_cast<uint64_t>({total}) / {per_row};  // rows")
    buf.line(f"uint64_t cores = total < {rt.max_cores} ? total : {rt.max_cores};")
    buf.line("if (cores < 1) cores = 1;")
    buf.line("uint64_t perCore = (total + cores - 1) / cores;")
    buf.line(f"uint64_t tile = perCore < {rt.rows_cap} ? perCore : {rt.rows_cap};")
    buf.line("uint64_t block = (perCore + tile - 1) / tile * tile;")
    buf.line("out.tiling.rows = total;")
    buf.line("out.tiling.blockRows = block;")
    buf.line("out.tiling.tileRows = static_cast<uint32_t>(tile);")
    buf.line(f"out.tiling.cols = {cols};")
    for dim in rt.base_dims():  # what the symbolic row offsets read
        buf.line(f"out.tiling.{dim_field(dim)} = static_cast<uint64_t>({dims[dim]});")
    buf.line("out.blockDim = static_cast<int64_t>((total + block - 1) / block);")


def dim_field(dim: str) -> str:
    """The tiling struct's field holding symbolic dimension ``dim`` for this call."""
    return "dim_" + "".join(ch if ch.isalnum() else "_" for ch in dim)


class ChunkedRowKernelPrinter(RowReduceKernelPrinter):
    """Prints the multi-pass kernel of rows longer than the UB: per row, ``passes`` sweeps over
    chunks of ``chunkCols`` columns; every UB slot holds one chunk (``CHUNK_STRIDE``)."""

    copied_fields = ("cols", "chunkCols")

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        chunked = tiling.plan.chunked
        self.passes, self.chunk = chunked.passes, chunked.chunk_cols
        planned = {i for i, _ in self.passes.reduce_pass + self.passes.row_after}
        steps = {s.index for s in self.program.steps if s.kind != "full"}
        if planned != steps:
            raise CodegenError(f"{symbol}: the plan's passes place reduce and row steps "
                               f"{sorted(planned)}, the scheduled function has {sorted(steps)}")
        self.out_index = self.program.steps[-1].index

    def _row_slot(self, k, dtype: str) -> str:
        return (f"rowBuf.GetWithOffset<{cpp_type(dtype)}>(CHUNK_STRIDE, {k} * CHUNK_STRIDE * "
                "SLOT_BYTES)")

    def _chunk_streamed(self, p: int) -> list:
        """Inputs pass ``p`` copies in chunk by chunk."""
        return list(self.passes.streamed[p - 1])

    def emit_tiling_constants(self, buf):
        buf.line(f"// {self.passes.count} pass(es) per row over chunks of {self.chunk} columns")
        buf.line(f"constexpr uint32_t CHUNK_STRIDE = {self.chunk};  // a chunk slot, 32-byte "
                 "aligned")
        buf.line(f"constexpr uint32_t SLOT_BYTES = {self.slot_bytes};  // per element, row slots")
        buf.line(f"constexpr int32_t BUFFER_NUM = {self.tiling.buffer_num};")

    def emit_buffers(self, buf):
        for name, kind in self.program.inputs.items():
            n, ct = self.names[name], self._ctype(name)
            size = buffer_size(next(p for p in self.params if p.name == name))
            if kind is RowAccessKind.ROWS:
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n} + rowStart * cols, "
                         "blockRows * cols);")
            elif kind is RowAccessKind.SCALAR:
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, 1);")
                buf.line(f"{n}Val = {n}Gm.GetValue(0);")
            else:
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, {size});")
            if kind in CHUNK_STREAMED:
                buf.line(f"pipe.InitBuffer({n}Que, BUFFER_NUM, CHUNK_STRIDE * "
                         f"sizeof({ct}));")
        self._emit_output_buffers(buf, f"CHUNK_STRIDE * sizeof({self.ctype})", "32")
        self._emit_row_buffers(buf, "CHUNK_STRIDE")

    def _step_names(self, indices) -> str:
        return ", ".join(f"{s.kind} {s.buffer.name}" for s in self.program.steps
                         if s.index in indices)

    def emit_process(self, buf):
        passes = self.passes
        with buf.indent("__aicore__ inline void Process() {"):
            with buf.indent("for (uint64_t k = 0; k < blockRows; ++k) {"):
                buf.line("BeginRow(k);")
                for p in range(1, passes.count + 1):
                    buf.line(f"// pass {p} of {passes.count}: "
                             f"{self._step_names(passes.computed[p - 1])}")
                    with buf.indent("for (uint32_t c0 = 0; c0 < cols; c0 += chunkCols) {"):
                        buf.line("uint32_t n = cols - c0 < chunkCols ? cols - c0 : chunkCols;")
                        if self._chunk_streamed(p):
                            buf.line(f"CopyIn{p}(k, c0, n);")
                        buf.line(f"Compute{p}(c0, n);")
                        if passes.out_pass == p:
                            buf.line("CopyOut(k, c0, n);")
                    buf.line(f"EndPass{p}();")
                if not self.program.out_full:
                    buf.line("WriteRowValue(k);")

    def emit_copy_in(self, buf):
        with buf.indent("__aicore__ inline void BeginRow(uint64_t k) {"):
            # one GM read per row of each per-row value, whatever the passes that use it
            if self._inputs(RowAccessKind.ROW_SCALAR):
                buf.line("uint64_t row = rowStart + k;")
            for name in self._inputs(RowAccessKind.ROW_SCALAR):
                n_ = self.names[name]
                buf.line(f"{n_}RowVal = {n_}Gm.GetValue({self._base(name)});")
            self._emit_row_steps(buf, 0)
        for p in range(1, self.passes.count + 1):
            if not self._chunk_streamed(p):
                continue
            with buf.indent(f"__aicore__ inline void CopyIn{p}(uint64_t k, uint32_t c0, "
                            "uint32_t n) {"):
                if any(self.program.inputs[name] is RowAccessKind.ROW_SLICE
                       for name in self._chunk_streamed(p)):
                    buf.line("uint64_t row = rowStart + k;")
                for name in self._chunk_streamed(p):
                    n_, t = self.names[name], self._ctype(name)
                    kind = self.program.inputs[name]
                    at = {RowAccessKind.ROWS: "k * cols + c0", RowAccessKind.COLUMN: "c0"}.get(
                        kind) or f"{self._base(name)} + c0"
                    buf.line(f"AscendC::LocalTensor<{t}> {n_}Tile = {n_}Que.AllocTensor<{t}>();")
                    buf.line(f"CopyGmToUb({n_}Tile, {n_}Gm[{at}], n);")
                    buf.line(f"{n_}Que.EnQue({n_}Tile);")

    def emit_compute(self, buf):
        t = self.ctype
        for p in range(1, self.passes.count + 1):
            with buf.indent(f"__aicore__ inline void Compute{p}(uint32_t c0, uint32_t n) {{"):
                for name in self._chunk_streamed(p):
                    n_, ct = self.names[name], self._ctype(name)
                    buf.line(f"AscendC::LocalTensor<{ct}> {n_}Tile = {n_}Que.DeQue<{ct}>();")
                writes = self.passes.out_pass == p
                if writes:
                    buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.AllocTensor<{t}>();")
                for step in self.program.steps:
                    if step.index in self.passes.computed[p - 1]:
                        self._emit_chunk_step(buf, step)
                if writes:
                    buf.line("outQue.EnQue(outTile);")
                for name in self._chunk_streamed(p):
                    buf.line(f"{self.names[name]}Que.FreeTensor({self.names[name]}Tile);")
            with buf.indent(f"__aicore__ inline void EndPass{p}() {{"):
                for step in self.program.steps:
                    if self.passes.reduced_in(step.index) == p:
                        buf.line(f"rowValue{step.index} = static_cast<"
                                 f"{cpp_type(str(step.buffer.dtype))}>(acc{step.index});")
                self._emit_row_steps(buf, p)

    def _input_tile(self, n_: str, kind) -> str:
        return f"{n_}Tile"  # every streamed input, the columns too, comes chunk by chunk

    def _row_scalar(self, n_: str, name: str) -> str:
        return f"{n_}RowVal"  # read once a row by BeginRow

    def _emit_row_steps(self, buf, after: int) -> None:
        """The row steps whose inputs are complete after pass ``after`` (0: the row start)."""
        _, scalar_names = self._leaves()
        scalars = ScalarPrinter(scalar_names, expr_key)
        for step in self.program.steps:
            if self.passes.computed_after(step.index) == after:
                buf.line(f"rowValue{step.index} = {scalars.print(step.expr)};")

    def _emit_chunk_step(self, buf, step) -> None:
        """One reduction or full step of the row program on the chunk ``[c0, c0 + n)``."""
        tiles, scalar_names = self._leaves()
        printer = TileProgramPrinter(self.symbol, ScalarPrinter(scalar_names, expr_key))
        if step.kind == "reduce":
            operand = reduced_operand(buf, printer, step, tiles, self._temp_slot, "n")
            with buf.indent("{", "}"):
                if operand.is_tile:
                    acc = emit_reduce_call(buf, step, operand, "n")
                    # partial results add up in float: fp16 chunk sums lose no more bits
                    buf.line(f"float part = static_cast<float>(reducedBuf.Get<{acc}>()"
                             ".GetValue(0));")
                else:
                    buf.line("float part = static_cast<float>("
                             f"{scalar_reduction(step, operand, 'n')});")
                rule = ACCUMULATE[step.reducer].format(acc=f"acc{step.index}")
                buf.line(f"acc{step.index} = {rule};")
            return
        self._emit_full(buf, printer, step, tiles, "outTile", "n")

    def emit_copy_out(self, buf):
        t = self.ctype
        if self.program.out_full:
            with buf.indent("__aicore__ inline void CopyOut(uint64_t k, uint32_t c0, "
                            "uint32_t n) {"):
                buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.DeQue<{t}>();")
                buf.line("CopyUbToGm(outGm[k * cols + c0], outTile, n);")
                buf.line("outQue.FreeTensor(outTile);")
            return
        with buf.indent("__aicore__ inline void WriteRowValue(uint64_t k) {"):
            buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.AllocTensor<{t}>();")
            buf.line(f"outTile.SetValue(0, static_cast<{t}>(rowValue{self.out_index}));")
            buf.line("outQue.EnQue(outTile);")
            buf.line(f"outTile = outQue.DeQue<{t}>();")
            # the row value was written on the scalar unit: S before MTE3
            buf.line("AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(0);")
            buf.line("CopyUbToGm(outGm[k], outTile, 1);")
            buf.line("outQue.FreeTensor(outTile);")

    def emit_members(self, buf):
        buf.line("AscendC::TPipe pipe;")
        for name, kind in self.program.inputs.items():
            n_, t = self.names[name], self._ctype(name)
            buf.line(f"AscendC::GlobalTensor<{t}> {n_}Gm;")
            if kind in CHUNK_STREAMED:
                buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> {n_}Que;")
            elif kind is RowAccessKind.SCALAR:
                buf.line(f"{t} {n_}Val;")
            else:
                buf.line(f"{t} {n_}RowVal;")
        self._emit_row_members(buf)
        for step in self.program.steps:
            if step.kind == "reduce":
                buf.line(f"float acc{step.index} = 0;  // partial {step.reducer}")
            if step.kind != "full":
                buf.line(f"{cpp_type(str(step.buffer.dtype))} rowValue{step.index};")
        self.emit_share_members(buf, "cols", "chunkCols")

    def tiling_fields(self) -> list[TilingField]:
        t = self.tiling
        return [TilingField("uint64_t", "rows", t.total, "rows of the output"),
                TilingField("uint64_t", "blockRows", t.block_len,
                            "rows per core (the last core takes the rest)"),
                TilingField("uint32_t", "cols", t.cols, "elements per row"),
                TilingField("uint32_t", "chunkCols", self.chunk,
                            "elements per chunk: each pass sweeps the row")]


__all__ = ["RowReduceKernelPrinter", "ChunkedRowKernelPrinter"]
