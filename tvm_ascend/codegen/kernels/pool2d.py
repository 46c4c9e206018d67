"""Prints a MaxPool / AveragePool kernel (method: ``schedules/pool2d.py``).

Each core takes a contiguous range of units (one plane's chunk of output rows); a tile is one
unit or several whole planes. CopyIn brings the tile's input rows into the UB (rows 32-byte
aligned); Compute reduces each output row's window vertically (Max/Add of whole input rows into
a row framed by the pad value), gathers the ``kw`` horizontal taps of every column side by side
with one vector Gather (offsets built once per core), reduces them with Max/Add, divides the
average by its window counts, runs the epilogue; a prologue runs first, in place on the copied
input rows. CopyOut writes the tile's rows in one DataCopyPad.
"""
from __future__ import annotations

import tvm

from ...errors import CodegenError
from ...schedules.pool2d import epilogue_program, prologue_program
from ...schedules.analysis.row_program import RowAccessKind
from ...schedules.analysis.tile_values import buffer_size, expr_key
from ...schedules.analysis.tir_walk import expr_dtype, schedule_blocks
from ..cpp_types import cpp_type, dtype_bytes, float_literal
from ..kernel_parts import TilingField, ident
from ..kernel_printer import VectorKernelPrinter
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..vector_emitters import Operand

# geometry the kernel is specialised for: (constant, PoolShape field, index in a pair field)
GEOMETRY = (("H", "h", None), ("W", "w", None), ("OH", "oh", None), ("OW", "ow", None),
            ("KH", "kernel", 0), ("KW", "kernel", 1), ("SH", "stride", 0), ("SW", "stride", 1),
            ("DH", "dilation", 0), ("DW", "dilation", 1), ("PAD_T", "pad", 0),
            ("PAD_L", "pad", 1))
# the UB pitches: (constant, PoolLayout field)
PITCHES = (("IN_PITCH", "in_pitch"), ("OUT_PITCH", "out_pitch"), ("V_LEFT", "v_left"),
           ("V_PITCH", "v_pitch"))
REDUCE_OPS = {"max": ("Max", "Maxs"), "avg": ("Add", "Adds")}


class PoolKernelPrinter(VectorKernelPrinter):
    """Prints one pooling (+ prologue, epilogue) kernel (class + extern "C" entry).

    Examples
    --------
    >>> printer = PoolKernelPrinter("k0", scheduled, tiling)   # doctest: +SKIP
    >>> buf = CodeBuffer(); printer.print(buf); "AscendC::Gather" in buf.text()
    True
    """

    keeps_tiling = True  # Process and the copies read the geometry from ``tiling``

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        self.plan, self.shape = tiling.plan, tiling.plan.shape
        blocks = schedule_blocks(tvm.s_tir.Schedule(func))
        self.program = epilogue_program(blocks, func, self.shape)
        self.prologue = prologue_program(blocks, func, self.shape)
        self.dtype = self.shape.dtype
        self.ctype = cpp_type(self.dtype)
        self.elem = dtype_bytes(self.dtype)
        self.x_name = self.names[self.plan.copied_input]
        self.out_name = self.names[self.params[-1].name]
        self.slots = self._slots(self.program)

    @staticmethod
    def _slots(program) -> int:
        return (len(program.intermediates) + program.temp_slots) if program else 0

    def _inputs(self, kind) -> list[str]:
        """Inputs read as ``kind`` by the epilogue (and by the prologue, for kernel scalars;
        the prologue's one streamed input is the copied tensor)."""
        programs = (self.program, self.prologue) if kind is RowAccessKind.SCALAR \
            else (self.program,)
        names = {}
        for program in programs:
            for n, k in (program.inputs.items() if program else ()):
                if k is kind:
                    names.setdefault(self.names[n], None)
        return list(names)

    def _literal(self, value: float) -> str:
        return float_literal(value, self.dtype)

    def _from_int(self, name: str) -> str:
        """An int32 count as the kernel's element type (half converts from float)."""
        if self.dtype == "float16":
            return f"static_cast<half>(static_cast<float>({name}))"
        return f"static_cast<float>({name})"

    # ---- printing ---------------------------------------------------------------------------
    def emit_tiling_constants(self, buf):
        shape, lay = self.shape, self.plan.layout
        values = [(name, getattr(shape, key) if index is None else getattr(shape, key)[index])
                  for name, key, index in GEOMETRY]
        buf.line("constexpr int32_t " + ", ".join(f"{n} = {v}" for n, v in values) + ";")
        pitches = [("IN_ROWS", self.plan.in_rows)] + [(n, getattr(lay, k)) for n, k in PITCHES]
        buf.line("constexpr uint32_t " + ", ".join(f"{n} = {v}" for n, v in pitches)
                 + ";  // rows per plane, pitches in elements")
        if self.shape.kind == "avg":
            (row_lo, row_hi), (col_lo, col_hi) = shape.count_bounds
            buf.line(f"constexpr int32_t ROW_LO = {row_lo}, ROW_HI = {row_hi}, COL_LO = {col_lo}"
                     f", COL_HI = {col_hi};  // taps the divisor counts")
        buf.line(f"constexpr int32_t BUFFER_NUM = {self.tiling.buffer_num};")

    def emit_share(self, buf):
        # units [unitStart, unitEnd): Process steps through them a tile of planes at a time
        buf.line("unitStart = tiling.unitsPerCore * AscendC::GetBlockIdx();")
        buf.line("unitEnd = unitStart + tiling.unitsPerCore;")
        buf.line("if (unitEnd > tiling.totalUnits) unitEnd = tiling.totalUnits;")

    def emit_buffers(self, buf):
        t, p, lay, elem = self.ctype, self.plan, self.plan.layout, self.elem
        group, kw = self.tiling.tile_len, self.shape.kernel[1]
        scalars = set(self._inputs(RowAccessKind.SCALAR))
        for q in self.params:
            n = self.names[q.name]
            if n in scalars:
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {t}*){n}, 1);")
                buf.line(f"{n}Val = {n}Gm.GetValue(0);")
            else:
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {t}*){n}, {buffer_size(q)});")
        out_tile = group * p.rows_per_tile * lay.out_pitch * elem
        in_tile = group * p.in_rows * lay.in_pitch * elem
        buf.line(f"pipe.InitBuffer(inQue, BUFFER_NUM, {in_tile});")
        buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, {out_tile});")
        for n in self._inputs(RowAccessKind.ROWS):
            buf.line(f"pipe.InitBuffer({n}Que, BUFFER_NUM, {out_tile});")
        buf.line(f"pipe.InitBuffer(vBuf, {lay.v_pitch * elem});")
        buf.line(f"pipe.InitBuffer(offBuf, {kw * lay.out_pitch * 4});")
        buf.line(f"pipe.InitBuffer(tapBuf, {kw * lay.out_pitch * elem});")
        if self.shape.kind == "avg":
            buf.line(f"pipe.InitBuffer(countBuf, {lay.out_pitch * elem});")
            buf.line(f"pipe.InitBuffer(divisorBuf, {lay.out_pitch * elem});")
        if self.slots:
            buf.line(f"pipe.InitBuffer(rowBuf, {self.slots * lay.out_pitch * elem});")
        if self._slots(self.prologue):
            buf.line(f"pipe.InitBuffer(preBuf, "
                     f"{self._slots(self.prologue) * lay.in_pitch * elem});")
        self.emit_resident_setup(buf)

    def emit_resident_setup(self, buf):
        """Once per core: the pad frame of the vertical row, the Gather offsets, the column
        counts of the average."""
        t = self.ctype
        buf.line(f"vRow = vBuf.Get<{t}>();")
        buf.line(f"AscendC::Duplicate(vRow, {self._literal(self.shape.pad_value)}, V_PITCH);")
        buf.line("offs = offBuf.Get<uint32_t>();")
        with buf.indent("for (uint32_t kx = 0; kx < KW; ++kx) {"):
            with buf.indent("for (uint32_t j = 0; j < OUT_PITCH; ++j) {"):
                buf.line("uint32_t col = j < OW ? V_LEFT - PAD_L + j * SW + kx * DW : 0;")
                buf.line(f"offs.SetValue(kx * OUT_PITCH + j, col * sizeof({t}));")
        if self.shape.kind == "avg":
            buf.line(f"counts = countBuf.Get<{t}>();")
            with buf.indent("for (int32_t j = 0; j < OW; ++j) {"):
                buf.line("int32_t taps = 0;")
                with buf.indent("for (int32_t kx = 0; kx < KW; ++kx) {"):
                    buf.line("int32_t iw = j * SW - PAD_L + kx * DW;")
                    buf.line("if (iw >= COL_LO && iw < COL_HI) ++taps;")
                buf.line(f"counts.SetValue(j, {self._from_int('taps')});")
        # Gather and the divisor read these on the vector unit: the scalar writes land first.
        buf.line("AscendC::SetFlag<AscendC::HardEvent::S_V>(0);")
        buf.line("AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);")

    def emit_process(self, buf):
        with buf.indent("__aicore__ inline void Process() {"):
            with buf.indent("for (uint32_t u = unitStart; u < unitEnd; "
                            "u += tiling.planesPerTile) {"):
                buf.line("uint32_t n = unitEnd - u < tiling.planesPerTile ? unitEnd - u : "
                         "tiling.planesPerTile;")
                buf.line("CopyIn(u, n);")
                buf.line("Compute(u, n);")
                buf.line("CopyOut(u, n);")

    def emit_unit(self, buf, unit: str):
        """Plane, first and end output row and the first input row copied of ``unit``."""
        buf.line(f"uint32_t plane = {unit} / tiling.chunks;")
        buf.line(f"int32_t oh0 = {unit} % tiling.chunks * tiling.rowsPerTile;")
        buf.line("int32_t oh1 = oh0 + static_cast<int32_t>(tiling.rowsPerTile) < OH ? "
                 "oh0 + static_cast<int32_t>(tiling.rowsPerTile) : OH;")
        buf.line("int32_t lo = oh0 * SH - PAD_T > 0 ? oh0 * SH - PAD_T : 0;")

    def emit_tile_rows(self, buf):
        """``firstRow``, ``rows``: the tile's output rows in GM (consecutive units are
        consecutive rows: chunks of one plane, or whole planes)."""
        buf.line("uint32_t first = u / tiling.chunks;")
        buf.line("int32_t first0 = u % tiling.chunks * tiling.rowsPerTile;")
        buf.line("int32_t first1 = first0 + static_cast<int32_t>(tiling.rowsPerTile) < OH ? "
                 "first0 + static_cast<int32_t>(tiling.rowsPerTile) : OH;")
        buf.line("uint64_t firstRow = static_cast<uint64_t>(first) * OH + first0;")
        buf.line("uint32_t rows = n * (first1 - first0);")

    def emit_copy_in(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void CopyIn(uint32_t u, uint32_t n) {"):
            buf.line(f"AscendC::LocalTensor<{t}> inTile = inQue.AllocTensor<{t}>();")
            with buf.indent("for (uint32_t g = 0; g < n; ++g) {"):
                self.emit_unit(buf, "(u + g)")
                buf.line("int32_t hi = (oh1 - 1) * SH - PAD_T + (KH - 1) * DH + 1;")
                buf.line("if (hi > H) hi = H;")
                with buf.indent("if (hi > lo) {"):
                    buf.line(f"CopyRowsIn(inTile[g * IN_ROWS * IN_PITCH], {self.x_name}Gm["
                             "(static_cast<uint64_t>(plane) * H + lo) * W], hi - lo, W, "
                             "IN_PITCH);")
            buf.line("inQue.EnQue(inTile);")
            streamed = self._inputs(RowAccessKind.ROWS)
            if streamed:
                self.emit_tile_rows(buf)
            for n in streamed:
                buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.AllocTensor<{t}>();")
                buf.line(f"CopyRowsIn({n}Tile, {n}Gm[firstRow * OW], rows, OW, OUT_PITCH);")
                buf.line(f"{n}Que.EnQue({n}Tile);")

    def emit_compute(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void Compute(uint32_t u, uint32_t n) {"):
            buf.line(f"AscendC::LocalTensor<{t}> inTile = inQue.DeQue<{t}>();")
            for n in self._inputs(RowAccessKind.ROWS):
                buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.DeQue<{t}>();")
            buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.AllocTensor<{t}>();")
            buf.line(f"AscendC::LocalTensor<{t}> taps = tapBuf.Get<{t}>();")
            with buf.indent("for (uint32_t g = 0; g < n; ++g) {"):
                self.emit_unit(buf, "(u + g)")
                if self.prologue is not None:
                    self.emit_prologue(buf)
                with buf.indent("for (int32_t oh = oh0; oh < oh1; ++oh) {"):
                    buf.line("uint32_t r = g * tiling.rowsPerTile + (oh - oh0);")
                    buf.line(f"AscendC::LocalTensor<{t}> dst = outTile[r * OUT_PITCH];")
                    self.emit_vertical(buf)
                    self.emit_horizontal(buf)
                    if self.shape.kind == "avg":
                        self.emit_divide(buf)
                    if self.program is not None:
                        self.emit_epilogue(buf)
            buf.line("outQue.EnQue(outTile);")
            buf.line("inQue.FreeTensor(inTile);")
            for n in self._inputs(RowAccessKind.ROWS):
                buf.line(f"{n}Que.FreeTensor({n}Tile);")

    def emit_vertical(self, buf):
        """``vRow[V_LEFT:]`` = the window's input rows reduced; rows in the padding skipped."""
        binary, scalar = REDUCE_OPS[self.shape.kind]
        identity = self._literal(self.shape.init if self.shape.kind == "max" else 0.0)
        row = "inTile[(g * IN_ROWS + ({}) - lo) * IN_PITCH]"
        buf.line("int32_t top = oh * SH - PAD_T, used = 0, firstIn = 0;")
        with buf.indent("for (int32_t ky = 0; ky < KH; ++ky) {"):
            buf.line("int32_t ih = top + ky * DH;")
            buf.line("if (ih < 0 || ih >= H) continue;")
            buf.line("if (used == 1) "
                     f"AscendC::{binary}(vRow[V_LEFT], {row.format('firstIn')}, "
                     f"{row.format('ih')}, W);")
            buf.line(f"else if (used > 1) AscendC::{binary}(vRow[V_LEFT], vRow[V_LEFT], "
                     f"{row.format('ih')}, W);")
            buf.line("else firstIn = ih;")
            buf.line("++used;")
        buf.line(f"if (used == 1) AscendC::{scalar}(vRow[V_LEFT], {row.format('firstIn')}, "
                 f"{identity}, W);")
        buf.line(f"if (used == 0) AscendC::Duplicate(vRow[V_LEFT], "
                 f"{self._literal(self.shape.pad_value)}, W);")

    def emit_horizontal(self, buf):
        """The ``kw`` taps of every column side by side (one Gather), reduced into ``dst``."""
        binary, scalar = REDUCE_OPS[self.shape.kind]
        kw = self.shape.kernel[1]
        buf.line("AscendC::Gather(taps, vRow, offs, 0, KW * OUT_PITCH);")
        tap = "taps[{} * OUT_PITCH]"
        if kw == 1:
            identity = self._literal(self.shape.init if self.shape.kind == "max" else 0.0)
            buf.line(f"AscendC::{scalar}(dst, taps, {identity}, OW);")
            return
        buf.line(f"AscendC::{binary}(dst, taps, {tap.format(1)}, OW);")
        for kx in range(2, kw):
            buf.line(f"AscendC::{binary}(dst, dst, {tap.format(kx)}, OW);")
        if self.shape.kind == "max":
            # TOPI starts the max from the lowest finite value: a window of -inf gives it
            buf.line(f"AscendC::Maxs(dst, dst, {self._literal(self.shape.init)}, OW);")

    def emit_divide(self, buf):
        """``dst /= count_h(oh) * count_w(ow)``: one rounding, as TOPI's division."""
        t = self.ctype
        buf.line("int32_t rowTaps = 0;")
        with buf.indent("for (int32_t ky = 0; ky < KH; ++ky) {"):
            buf.line("int32_t ih = top + ky * DH;")
            buf.line("if (ih >= ROW_LO && ih < ROW_HI) ++rowTaps;")
        buf.line(f"AscendC::LocalTensor<{t}> divisor = divisorBuf.Get<{t}>();")
        buf.line(f"AscendC::Muls(divisor, counts, {self._from_int('rowTaps')}, OW);")
        buf.line("AscendC::Div(dst, dst, divisor, OW);")

    def emit_prologue(self, buf):
        """The prologue in place on every input row copied for this unit (padding is applied
        after it, by the pad frame and the skipped rows)."""
        t = self.ctype
        buf.line("int32_t copied = (oh1 - 1) * SH - PAD_T + (KH - 1) * DH + 1;")
        buf.line("if (copied > H) copied = H;")
        with buf.indent("for (int32_t i = 0; i < copied - lo; ++i) {"):
            buf.line(f"AscendC::LocalTensor<{t}> src = inTile[(g * IN_ROWS + i) * IN_PITCH];")
            self.emit_row_program(buf, self.prologue, "src", "W", "IN_PITCH", "preBuf",
                                  "static_cast<uint64_t>(plane) * H + lo + i")

    def emit_epilogue(self, buf):
        self.emit_row_program(buf, self.program, "dst", "OW", "OUT_PITCH", "rowBuf",
                              "static_cast<uint64_t>(plane) * OH + oh")

    def emit_row_program(self, buf, program, row_tile: str, count: str, pitch: str,
                         slots: str, row: str):
        """One row of a prologue/epilogue program into ``row_tile`` (in place): streamed
        inputs are tiles, per-row inputs one GM read each, kernel scalars read at Init."""
        tiles, scalars, row_values = {}, {}, {}
        for key, (kind, buffer, step) in program.loads.items():
            n = self.names.get(buffer.name, ident(buffer.name))
            if kind is RowAccessKind.INTERMEDIATE and step == -1:
                tiles[key] = Operand(row_tile, True, self.dtype)
            elif kind is RowAccessKind.ROWS and program is self.prologue:
                tiles[key] = Operand(row_tile, True, self.dtype)  # the copied input row
            elif kind is RowAccessKind.ROWS:
                tiles[key] = Operand(f"{n}Tile[r * OUT_PITCH]", True, self.dtype)
            elif kind is RowAccessKind.ROW_SCALAR:
                if not row_values:
                    buf.line(f"uint64_t row = {row};")
                if n not in row_values:  # one GM read per row and input (the plan counts so)
                    base = ScalarPrinter({program.row_var.name: "row"}).print(
                        program.bases[buffer.name])
                    row_values[n] = f"{n}Row"
                    buf.line(f"{cpp_type(buffer.dtype)} {n}Row = {n}Gm.GetValue({base});")
                scalars[key] = row_values[n]
            elif kind is RowAccessKind.SCALAR:
                scalars[key] = f"{n}Val"
            else:
                raise CodegenError(f"{self.symbol}: pool row program load of kind "
                                   f"{kind.value}")
        (step,) = program.steps  # the template inlines each program into one block
        printer = TileProgramPrinter(self.symbol, ScalarPrinter(scalars, expr_key))

        def slot(k, node):
            ctype = cpp_type(expr_dtype(node))
            return f"{slots}.GetWithOffset<{ctype}>({pitch}, {k} * {pitch} * sizeof({ctype}))"

        root = printer.emit(buf, step.plan, tiles, row_tile, slot, count)
        if root.text != row_tile:
            printer.emit_copy(buf, row_tile, root, count)

    def emit_copy_out(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void CopyOut(uint32_t u, uint32_t n) {"):
            buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.DeQue<{t}>();")
            self.emit_tile_rows(buf)
            buf.line(f"CopyRowsOut({self.out_name}Gm[firstRow * OW], outTile, rows, OW, "
                     "OUT_PITCH);")
            buf.line("outQue.FreeTensor(outTile);")

    def emit_members(self, buf):
        t = self.ctype
        buf.line("AscendC::TPipe pipe;")
        buf.line("TilingData tiling;")
        scalars = set(self._inputs(RowAccessKind.SCALAR))
        for q in self.params:
            n = self.names[q.name]
            buf.line(f"AscendC::GlobalTensor<{t}> {n}Gm;")
            if n in scalars:
                buf.line(f"{t} {n}Val;")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECIN, 1> inQue;")
        for n in self._inputs(RowAccessKind.ROWS):
            buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> {n}Que;")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> vBuf, offBuf, tapBuf;")
        if self.shape.kind == "avg":
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> countBuf, divisorBuf;")
            buf.line(f"AscendC::LocalTensor<{t}> counts;")
        if self.slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf;")
        if self._slots(self.prologue):
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> preBuf;")
        buf.line(f"AscendC::LocalTensor<{t}> vRow;")
        buf.line("AscendC::LocalTensor<uint32_t> offs;")
        buf.line("uint32_t unitStart = 0;")
        buf.line("uint32_t unitEnd = 0;")

    # ---- what the launcher needs ------------------------------------------------------------
    def tiling_fields(self) -> list[TilingField]:
        t = self.tiling
        return [TilingField("uint32_t", "totalUnits", t.total,
                            "(plane, chunk of output rows) units"),
                TilingField("uint32_t", "unitsPerCore", t.block_len,
                            "the last core takes the rest"),
                TilingField("uint32_t", "planesPerTile", t.tile_len,
                            "units per tile (whole planes when > 1)"),
                TilingField("uint32_t", "rowsPerTile", self.plan.rows_per_tile,
                            "output rows per chunk"),
                TilingField("uint32_t", "chunks", self.plan.chunks, "chunks per plane")]


__all__ = ["PoolKernelPrinter"]
