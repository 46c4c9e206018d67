"""Prints a row-reduction kernel (softmax, normalisations, last-axis reduces) from scheduled TIR.

Rows are split over the cores; ``tileRows`` rows are copied in at once (each row lands 32-byte
aligned, ``ROW_STRIDE`` elements apart); then each row runs the row program: reductions into one
value (ReduceSum/ReduceMax/ReduceMin, read back on the scalar unit), full-row steps as vector
instructions with the row values as scalar operands, and the row's output.
"""
from __future__ import annotations


from ..errors import CodegenError
from ..schedules.row_reduce import RowAccessKind, input_dtypes, row_layout, row_program
from ..schedules.tile_values import buffer_size, expr_key
from ..schedules.tir_walk import SBlock, expr_dtype, walk
from .code_buffer import CodeBuffer
from .kernel_parts import emit_resident_columns, emit_vector_kernel, ident
from .cpp_types import cpp_type
from .scalar_printer import ScalarPrinter
from .tile_program import TileProgramPrinter
from .vector_emitters import Operand

REDUCE_API = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}


class RowReduceKernelPrinter:
    """Prints one row-reduction kernel (class + extern "C" entry)."""

    def __init__(self, symbol: str, func, tiling):
        self.symbol, self.func, self.tiling = symbol, func, tiling
        blocks = []
        walk(func.body, lambda s: blocks.append(s) if isinstance(s, SBlock)
             and s.name_hint != "root" else None)
        self.program = row_program(blocks, func, tiling.total, tiling.cols)
        if self.program.temp_slots != tiling.temp_buffers:
            raise CodegenError(f"{symbol}: {self.program.temp_slots} row temps needed, tiling "
                               f"planned {tiling.temp_buffers}")
        self.params = list(func.params)
        self.dtype = str(self.program.out_buffer.dtype)
        self.ctype = cpp_type(self.dtype)
        self.names = {p.name: ident(p.name) for p in self.params}
        self.slot_base = len(self.program.intermediates)
        # each value keeps its own dtype (mixed-precision groups); rows of every dtype share
        # one element stride, and a row slot holds the widest value
        self.stride, self.slot_bytes = row_layout(self.program)
        self.in_dtypes = input_dtypes(self.program)

    def _ctype(self, name: str) -> str:
        """C++ element type of GM input ``name``."""
        return cpp_type(self.in_dtypes[name])

    def _row_slot(self, k, dtype: str) -> str:
        """Row slot ``k`` of rowBuf viewed as ``dtype``."""
        return (f"rowBuf.GetWithOffset<{cpp_type(dtype)}>(ROW_STRIDE, {k} * ROW_STRIDE * "
                "SLOT_BYTES)")

    def _name(self, param) -> str:
        return self.names[param.name]

    # ---- printing ---------------------------------------------------------------------------
    def print(self, buf: CodeBuffer) -> None:
        emit_vector_kernel(buf, self, [self._name(p) for p in self.params])

    def emit_tiling_struct(self, buf):
        with buf.indent("struct TilingData {", "};"):
            buf.line("uint64_t rows;       // rows of the output")
            buf.line("uint64_t blockRows;  // rows per core (the last core takes the rest)")
            buf.line("uint32_t tileRows;   // rows per UB tile")
            buf.line("uint32_t cols;       // elements per row")
        buf.line(f"constexpr uint32_t ROW_STRIDE = {self.stride};  // a row padded to 32 bytes")
        buf.line(f"constexpr uint32_t SLOT_BYTES = {self.slot_bytes};  // per element, row slots")
        buf.line(f"constexpr int32_t BUFFER_NUM = {self.tiling.buffer_num};")
        buf.line()

    def _inputs(self, *kinds):
        return [name for name, k in self.program.inputs.items() if k in kinds]

    def _streamed(self):
        """Inputs copied in tile by tile through a VECIN queue."""
        return self._inputs(RowAccessKind.ROWS, RowAccessKind.ROW_SLICE)

    def _base(self, name: str) -> str:
        """C++ element offset of the current row's data in input ``name``."""
        return ScalarPrinter({self.program.row_var.name: "row"}).print(self.program.bases[name])

    def emit_init(self, buf):
        t = self.ctype
        args = ", ".join(f"GM_ADDR {self.names[p.name]}" for p in self.params)
        with buf.indent(f"__aicore__ inline void Init({args}, const TilingData& tiling) {{"):
            buf.line("cols = tiling.cols;")
            buf.line("tileRows = tiling.tileRows;")
            buf.line("rowStart = tiling.blockRows * AscendC::GetBlockIdx();")
            buf.line("uint64_t rowEnd = rowStart + tiling.blockRows;")
            buf.line("if (rowEnd > tiling.rows) rowEnd = tiling.rows;")
            buf.line("blockRows = rowEnd > rowStart ? rowEnd - rowStart : 0;")
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
            out = self.names[self.program.out_buffer.name]
            if self.program.out_full:
                buf.line(f"outGm.SetGlobalBuffer((__gm__ {t}*){out} + rowStart * cols, "
                         "blockRows * cols);")
                buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, tileRows * ROW_STRIDE * "
                         f"sizeof({t}));")
            else:
                buf.line(f"outGm.SetGlobalBuffer((__gm__ {t}*){out} + rowStart, blockRows);")
                buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, tileRows * sizeof({t}));")
            rows = self.slot_base + self.program.temp_slots
            if rows:
                buf.line(f"pipe.InitBuffer(rowBuf, {rows} * ROW_STRIDE * SLOT_BYTES);")
            buf.line("pipe.InitBuffer(workBuf, ROW_STRIDE * SLOT_BYTES);")
            buf.line("pipe.InitBuffer(reducedBuf, 32);")

    def emit_process(self, buf):
        with buf.indent("__aicore__ inline void Process() {"):
            buf.line("uint32_t tiles = (blockRows + tileRows - 1) / tileRows;")
            with buf.indent("for (uint32_t i = 0; i < tiles; ++i) {"):
                buf.line("uint64_t rest = blockRows - static_cast<uint64_t>(i) * tileRows;")
                buf.line("uint32_t n = rest < tileRows ? static_cast<uint32_t>(rest) : tileRows;")
                buf.line("CopyIn(i, n);")
                buf.line("Compute(i, n);")
                buf.line("CopyOut(i, n);")

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
            if kind in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE):
                tiles[key] = Operand(f"{n_}Tile[r * ROW_STRIDE]", True, dtype)
            elif kind is RowAccessKind.COLUMN:
                tiles[key] = Operand(f"{n_}Col", True, dtype)
            elif kind is RowAccessKind.INTERMEDIATE:
                tiles[key] = Operand(self._row_slot(self.program.intermediate_slot(step), dtype),
                                     True, dtype, mask=dtype == "bool")
            elif kind is RowAccessKind.ROW_SCALAR:
                scalars[key] = f"{n_}Gm.GetValue({self._base(buffer.name)})"
            elif kind is RowAccessKind.SCALAR:
                scalars[key] = f"{n_}Val"
            else:  # a value computed by an earlier step of this row
                scalars[key] = f"rowValue{step}"
        return tiles, scalars

    def emit_row(self, buf):
        for step in self.program.steps:
            tiles, scalar_names = self._leaves()
            scalars = ScalarPrinter(scalar_names, expr_key)
            printer = TileProgramPrinter(self.symbol, scalars)
            t = cpp_type(str(step.buffer.dtype))

            def slot(k, node, printer=printer):
                return self._row_slot(self.slot_base + k, expr_dtype(node))

            if step.kind == "reduce":
                temp = slot(step.plan.n_slots, step.expr) if step.plan.order else None
                operand = printer.emit(buf, step.plan, tiles, temp or "", slot, "cols")
                if not operand.is_tile:
                    raise CodegenError(f"{self.symbol}: reduction of a row scalar")
                api = REDUCE_API[step.reducer]
                # accumulate in the operand's dtype (float32 after a Cast, as the group says)
                acc = cpp_type(operand.dtype)
                buf.line(f"AscendC::{api}(reducedBuf.Get<{acc}>(), {operand.text}, "
                         f"workBuf.Get<{acc}>(), cols);")
                buf.line("AscendC::SetFlag<AscendC::HardEvent::V_S>(0);")
                buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);")
                value = f"static_cast<{t}>(reducedBuf.Get<{acc}>().GetValue(0))"
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
                if step.is_output:
                    dst = "outTile[r * ROW_STRIDE]"
                else:
                    dst = self._row_slot(self.program.intermediate_slot(step.index),
                                         str(step.buffer.dtype))
                root = printer.emit(buf, step.plan, tiles, dst, slot, "cols")
                if root.text != dst:
                    printer.emit_copy(buf, dst, root, "cols")

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
        buf.line(f"AscendC::GlobalTensor<{self.ctype}> outGm;")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        if self.slot_base + self.program.temp_slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf;")
        buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> workBuf;")
        buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> reducedBuf;")
        buf.line("uint64_t rowStart = 0;")
        buf.line("uint64_t blockRows = 0;")
        buf.line("uint32_t tileRows = 0;")
        buf.line("uint32_t cols = 0;")

    def tiling_values(self) -> dict:
        return {"rows": self.tiling.total, "blockRows": self.tiling.block_len,
                "tileRows": self.tiling.tile_len, "cols": self.tiling.cols}

    def kernel_params(self) -> list:
        return [(self.names[p.name], str(p.dtype), buffer_size(p)) for p in self.params]


__all__ = ["RowReduceKernelPrinter"]
