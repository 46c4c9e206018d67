"""Prints an axis-reduction kernel (ReduceSum/Mean/Max/Min over non-last axes) from scheduled TIR.

The work is ``out[o, i] = g(reduce_r f(x[o, r, i]))`` in units of one ``(o, chunk of I)``
pair, split over the cores. For each unit, ``tileRows`` input rows of the chunk are copied in at
once (each row is contiguous in GM and lands 32-byte aligned in the UB, ``CHUNK`` elements
apart), the prologue ``f`` runs on the whole tile, the tile's rows are folded pairwise into its
first row, and that row is added (max'ed, min'ed) into the accumulator. After the last tile the
epilogue ``g`` runs on the accumulator and the chunk is copied out once. Every construct has
its own ``emit_*`` method; the program comes from ``axis_program`` (schedules/axis_reduce.py),
the same analysis the template sized the UB with.

Example
-------
>>> printer = AxisReduceKernelPrinter("k0", scheduled_func, tiling)   # doctest: +SKIP
>>> buf = CodeBuffer(); printer.print(buf); "AscendC::Add(" in buf.text()  # doctest: +SKIP
True
"""
from __future__ import annotations

from ...errors import CodegenError
from ...schedules.axis_reduce import AxisInput, axis_program
from ...schedules.analysis.tile_values import buffer_size, expr_key
from ...schedules.analysis.tir_walk import SBlock, expr_dtype, walk
from ..cpp_types import cpp_type
from ..kernel_parts import TilingField
from ..kernel_printer import UNIT_SHARE, VectorKernelPrinter
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..vector_emitters import Operand

COMBINE_API = {"sum": "Add", "max": "Max", "min": "Min"}
class AxisReduceKernelPrinter(VectorKernelPrinter):
    """Prints one axis-reduction kernel (class + extern "C" entry)."""

    share = UNIT_SHARE
    copied_fields = ("outer", "reduce", "inner", "tileRows")

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        blocks = []
        walk(func.body, lambda s: blocks.append(s) if isinstance(s, SBlock)
             and s.name_hint != "root" else None)
        self.program = axis_program(blocks, func)
        p, plan = self.program, tiling.plan
        if p.prologue_slots != tiling.temp_buffers or \
                p.epilogue_slots != plan.epilogue_temp_buffers:
            raise CodegenError(f"{symbol}: {p.prologue_slots}/{p.epilogue_slots} temps needed, "
                               f"tiling planned {tiling.temp_buffers}/"
                               f"{plan.epilogue_temp_buffers}")
        if (p.outer, p.reduce, p.inner) != (plan.outer, plan.reduce, plan.inner):
            raise CodegenError(f"{symbol}: the scheduled function reduces "
                               f"{(p.outer, p.reduce, p.inner)}, its tiling another shape")
        self.acc_type = cpp_type(str(p.acc_buffer.dtype))
        self.out_type = cpp_type(str(p.out_buffer.dtype))
        self.scalar_names = {key: f"scalar{k}" for k, key in enumerate(p.scalars)}
        self.value_names = {key: f"value{k}" for k, key in enumerate(p.values)}

    def _ctype(self, name: str) -> str:
        return cpp_type(str(self.program.buffers[name].dtype))

    def _streamed(self) -> list[str]:
        return self.program.names(AxisInput.STREAMED)

    def _epilogue_inputs(self) -> list[str]:
        return self.program.names(AxisInput.OUTER_INNER, AxisInput.INNER)

    # ---- printing ---------------------------------------------------------------------------
    def emit_tiling_constants(self, buf):
        buf.line(f"constexpr uint32_t CHUNK = {self.tiling.cols};  // inner elements per unit, "
                 "UB row stride (32-byte aligned)")
        buf.line(f"constexpr uint32_t SLOT_BYTES = {self.program.slot_bytes};  // per element, "
                 "temps")
        buf.line(f"constexpr int32_t BUFFER_NUM = {self.tiling.buffer_num};")

    def emit_share(self, buf):
        buf.line("chunks = (inner + CHUNK - 1) / CHUNK;")  # a unit is an (outer, chunk) pair
        super().emit_share(buf)

    def emit_buffers(self, buf):
        self.emit_input_buffers(buf)
        self.emit_scalar_reads(buf)
        out = self.names[self.program.out_buffer.name]
        buf.line(f"outGm.SetGlobalBuffer((__gm__ {self.out_type}*){out}, outer * inner);")
        buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, CHUNK * sizeof({self.out_type}));")
        buf.line(f"pipe.InitBuffer(accBuf, CHUNK * sizeof({self.acc_type}));")
        buf.line(f"accLocal = accBuf.Get<{self.acc_type}>();")
        if self.program.prologue_slots:
            buf.line(f"pipe.InitBuffer(rowBuf, {self.program.prologue_slots} * tileRows * "
                     "CHUNK * SLOT_BYTES);")
        if self.program.epilogue_slots:
            buf.line(f"pipe.InitBuffer(epiBuf, {self.program.epilogue_slots} * CHUNK * "
                     "SLOT_BYTES);")

    def emit_input_buffers(self, buf):
        """GM views and VECIN queues of the streamed row tiles and the epilogue's chunks."""
        for name in self._streamed():
            n, ct = self.names[name], self._ctype(name)
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, outer * reduce * inner);")
            buf.line(f"pipe.InitBuffer({n}Que, BUFFER_NUM, tileRows * CHUNK * sizeof({ct}));")
        for name in self._epilogue_inputs():
            n, ct = self.names[name], self._ctype(name)
            size = "inner" if self.program.inputs[name] is AxisInput.INNER else "outer * inner"
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, {size});")
            buf.line(f"pipe.InitBuffer({n}Que, BUFFER_NUM, CHUNK * sizeof({ct}));")

    def emit_scalar_reads(self, buf):
        """GM views of the values read on the scalar unit; kernel scalars (size-1 tensors) are
        read here, once per core."""
        for name in self.program.names(AxisInput.SCALAR, AxisInput.ROW_VALUE,
                                       AxisInput.OUTER_VALUE):
            n, ct = self.names[name], self._ctype(name)
            size = buffer_size(self.program.buffers[name])
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ct}*){n}, {size});")
        for key, (buffer, offset) in self.program.scalars.items():
            n = self.names[buffer.name]
            buf.line(f"{self.scalar_names[key]} = {n}Gm.GetValue("
                     f"{ScalarPrinter({}).print(offset)});")

    def emit_process(self, buf):
        with buf.indent("__aicore__ inline void Process() {"):
            buf.line("uint32_t rowTiles = static_cast<uint32_t>((reduce + tileRows - 1) / "
                     "tileRows);")
            with buf.indent("for (uint64_t u = 0; u < blockUnits; ++u) {"):
                buf.line("uint64_t unit = unitStart + u;")
                buf.line("uint64_t o = unit / chunks;")
                buf.line("uint64_t i0 = (unit % chunks) * CHUNK;")
                buf.line("uint32_t len = inner - i0 < CHUNK ? static_cast<uint32_t>(inner - i0)"
                         " : CHUNK;")
                with buf.indent("for (uint32_t t = 0; t < rowTiles; ++t) {"):
                    buf.line("uint64_t r0 = static_cast<uint64_t>(t) * tileRows;")
                    buf.line("uint32_t n = reduce - r0 < tileRows ? "
                             "static_cast<uint32_t>(reduce - r0) : tileRows;")
                    buf.line("CopyIn(o, r0, i0, n, len);")
                    buf.line("Compute(o, r0, t, n);")
                if self._epilogue_inputs():
                    buf.line("CopyInEpilogue(o, i0, len);")
                buf.line("ComputeEpilogue(o);")
                buf.line("CopyOut(o, i0, len);")

    def emit_copy_in(self, buf):
        self.emit_copy_rows(buf)
        with buf.indent("__aicore__ inline void CopyIn(uint64_t o, uint64_t r0, uint64_t i0, "
                        "uint32_t n, uint32_t len) {"):
            for name in self._streamed():
                n_, ct = self.names[name], self._ctype(name)
                buf.line(f"AscendC::LocalTensor<{ct}> {n_}Tile = {n_}Que.AllocTensor<{ct}>();")
                buf.line(f"CopyRows({n_}Tile, {n_}Gm[(o * reduce + r0) * inner + i0], n, len);")
                buf.line(f"{n_}Que.EnQue({n_}Tile);")
        if self._epilogue_inputs():
            self.emit_copy_in_epilogue(buf)

    def emit_copy_rows(self, buf):
        """``n`` rows of ``len`` elements, ``inner`` apart in GM, to rows ``CHUNK`` apart in the
        UB: one multi-burst DataCopyPad where the SoC has it; else one DataCopy when the rows
        are whole aligned chunks back to back, else row by row."""
        buf.line("template <typename T>")
        with buf.indent("__aicore__ inline void CopyRows(const AscendC::LocalTensor<T>& dst, "
                        "const AscendC::GlobalTensor<T>& src, uint32_t n, uint32_t len) {"):
            if self.tiling.plan.data_copy_pad:
                buf.line("uint32_t burst = (len * sizeof(T) + 31) / 32 * 32;")
                buf.line("AscendC::DataCopyExtParams params{static_cast<uint16_t>(n), "
                         "static_cast<uint32_t>(len * sizeof(T)), "
                         "static_cast<uint32_t>((inner - len) * sizeof(T)), "
                         "static_cast<uint32_t>((CHUNK * sizeof(T) - burst) / 32), 0};")
                buf.line("AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};")
                buf.line("AscendC::DataCopyPad(dst, src, params, pad);")
                return
            with buf.indent("if (len == CHUNK && inner == CHUNK) {"):
                buf.line("AscendC::DataCopy(dst, src, n * CHUNK);")
                buf.line("return;")
            buf.line("for (uint32_t j = 0; j < n; ++j) "
                     "CopyGmToUb(dst[j * CHUNK], src[static_cast<uint64_t>(j) * inner], len);")

    def emit_copy_in_epilogue(self, buf):
        with buf.indent("__aicore__ inline void CopyInEpilogue(uint64_t o, uint64_t i0, "
                        "uint32_t len) {"):
            for name in self._epilogue_inputs():
                n_, ct = self.names[name], self._ctype(name)
                base = "i0" if self.program.inputs[name] is AxisInput.INNER else "o * inner + i0"
                buf.line(f"AscendC::LocalTensor<{ct}> {n_}Epi = {n_}Que.AllocTensor<{ct}>();")
                buf.line(f"CopyGmToUb({n_}Epi, {n_}Gm[{base}], len);")
                buf.line(f"{n_}Que.EnQue({n_}Epi);")

    def _scalars(self) -> ScalarPrinter:
        return ScalarPrinter({**self.scalar_names, **self.value_names}, expr_key)

    def emit_value_reads(self, buf, kind) -> None:
        """Per-row (``r`` in scope) or per-unit (``o``) values, read on the scalar unit."""
        for key, (buffer, offset) in self.program.values.items():
            if self.program.loads[key] is kind:
                offset_text = ScalarPrinter({}).print(offset)
                buf.line(f"{cpp_type(str(buffer.dtype))} {self.value_names[key]} = "
                         f"{self.names[buffer.name]}Gm.GetValue({offset_text});")

    def emit_compute(self, buf):
        p = self.program
        with buf.indent("__aicore__ inline void Compute(uint64_t o, uint64_t r0, uint32_t t, "
                        "uint32_t n) {"):
            leaves = {}
            for name in self._streamed():
                n_, ct = self.names[name], self._ctype(name)
                buf.line(f"AscendC::LocalTensor<{ct}> {n_}Tile = {n_}Que.DeQue<{ct}>();")
            row = "[j * CHUNK]" if p.row_by_row else ""
            for key, buffer in self._load_buffers(p.prologue):
                if p.loads[key] is AxisInput.STREAMED:
                    leaves[key] = Operand(f"{self.names[buffer.name]}Tile{row}", True,
                                          str(buffer.dtype))
            if p.row_by_row:
                folded = self.emit_prologue_rows(buf, leaves)
            else:
                folded = self.emit_prologue(buf, leaves)
            buf.line(f"AscendC::LocalTensor<{self.acc_type}> folded = {folded};")
            self.emit_fold(buf)
            self.emit_combine(buf)
            for name in self._streamed():
                n_ = self.names[name]
                buf.line(f"{n_}Que.FreeTensor({n_}Tile);")
        self.emit_compute_epilogue(buf)

    @staticmethod
    def _load_buffers(plan) -> list:
        return [(key, access.buffer) for key, access in plan.accesses.items()]

    def _row_slot(self, k: int, dtype: str) -> str:
        ct = cpp_type(dtype)
        return (f"rowBuf.GetWithOffset<{ct}>(tileRows * CHUNK, {k} * tileRows * CHUNK * "
                "SLOT_BYTES)")

    def emit_prologue(self, buf, leaves: dict) -> str:
        """The prologue over the whole tile; returns the tile that holds its rows."""
        plan = self.program.prologue
        printer = TileProgramPrinter(self.symbol, self._scalars())
        if not plan.order:  # the operand is the input itself: fold it in place
            return leaves[expr_key(plan.root)].text
        root = self._row_slot(plan.n_slots, expr_dtype(plan.root))
        printer.emit(buf, plan, leaves, root,
                     lambda k, node: self._row_slot(k, expr_dtype(node)), "n * CHUNK")
        return root

    def _row_of_slot(self, k: int, dtype: str) -> str:
        """Row ``j`` of row-tile slot ``k``, viewed as ``dtype``."""
        ct = cpp_type(dtype)
        return (f"rowBuf.GetWithOffset<{ct}>(CHUNK, {k} * tileRows * CHUNK * SLOT_BYTES + "
                f"j * CHUNK * sizeof({ct}))")

    def emit_prologue_rows(self, buf, leaves: dict) -> str:
        """The prologue row by row, where it reads one value per row; returns the whole tile
        that holds its rows (the rows land where the whole-tile prologue puts them)."""
        plan = self.program.prologue
        printer = TileProgramPrinter(self.symbol, self._scalars())
        with buf.indent("for (uint32_t j = 0; j < n; ++j) {"):
            buf.line("uint64_t r = r0 + j;")
            self.emit_value_reads(buf, AxisInput.ROW_VALUE)
            printer.emit(buf, plan, leaves, self._row_of_slot(plan.n_slots, expr_dtype(plan.root)),
                         lambda k, node: self._row_of_slot(k, expr_dtype(node)), "CHUNK")
        return self._row_slot(plan.n_slots, expr_dtype(plan.root))

    def emit_fold(self, buf):
        """Pairwise fold of the tile's rows into its first row: the last ``h`` rows are
        combined into the first ``h`` (the middle row of an odd count waits a round)."""
        api = COMBINE_API[self.program.reducer]
        with buf.indent("for (uint32_t m = n; m > 1;) {"):
            buf.line("uint32_t h = m / 2;")
            buf.line(f"AscendC::{api}(folded, folded, folded[(m - h) * CHUNK], h * CHUNK);")
            buf.line("m -= h;")

    def emit_combine(self, buf):
        """The first tile starts the accumulator; later ones are combined into it."""
        api = COMBINE_API[self.program.reducer]
        with buf.indent("if (t == 0) {", None):
            buf.line(f"AscendC::Adds(accLocal, folded, static_cast<{self.acc_type}>(0), CHUNK);")
        with buf.indent("} else {", "}"):
            buf.line(f"AscendC::{api}(accLocal, accLocal, folded, CHUNK);")

    def _epi_slot(self, k: int, dtype: str) -> str:
        return f"epiBuf.GetWithOffset<{cpp_type(dtype)}>(CHUNK, {k} * CHUNK * SLOT_BYTES)"

    def emit_compute_epilogue(self, buf):
        p = self.program
        with buf.indent("__aicore__ inline void ComputeEpilogue(uint64_t o) {"):
            leaves = {}
            self.emit_value_reads(buf, AxisInput.OUTER_VALUE)
            for name in self._epilogue_inputs():
                n_, ct = self.names[name], self._ctype(name)
                buf.line(f"AscendC::LocalTensor<{ct}> {n_}Epi = {n_}Que.DeQue<{ct}>();")
            buf.line(f"AscendC::LocalTensor<{self.out_type}> outTile = "
                     f"outQue.AllocTensor<{self.out_type}>();")
            if p.epilogue is None:
                buf.line(f"AscendC::Adds(outTile, accLocal, static_cast<{self.acc_type}>(0), "
                         "CHUNK);")
            else:
                for key, buffer in self._load_buffers(p.epilogue):
                    kind = p.loads[key]
                    if kind is AxisInput.REDUCED:
                        leaves[key] = Operand("accLocal", True, str(buffer.dtype))
                    elif kind in (AxisInput.OUTER_INNER, AxisInput.INNER):
                        leaves[key] = Operand(f"{self.names[buffer.name]}Epi", True,
                                              str(buffer.dtype))
                printer = TileProgramPrinter(self.symbol, self._scalars())
                root = printer.emit(buf, p.epilogue, leaves, "outTile",
                                    lambda k, node: self._epi_slot(k, expr_dtype(node)), "CHUNK")
                if root.text != "outTile":
                    printer.emit_copy(buf, "outTile", root, "CHUNK")
            buf.line("outQue.EnQue(outTile);")
            for name in self._epilogue_inputs():
                n_ = self.names[name]
                buf.line(f"{n_}Que.FreeTensor({n_}Epi);")

    def emit_copy_out(self, buf):
        with buf.indent("__aicore__ inline void CopyOut(uint64_t o, uint64_t i0, uint32_t len) {"):
            buf.line(f"AscendC::LocalTensor<{self.out_type}> outTile = "
                     f"outQue.DeQue<{self.out_type}>();")
            buf.line("CopyUbToGm(outGm[o * inner + i0], outTile, len);")
            buf.line("outQue.FreeTensor(outTile);")

    def emit_members(self, buf):
        p = self.program
        buf.line("AscendC::TPipe pipe;")
        for name, kind in p.inputs.items():
            n_, ct = self.names[name], self._ctype(name)
            buf.line(f"AscendC::GlobalTensor<{ct}> {n_}Gm;")
            if kind in (AxisInput.STREAMED, AxisInput.OUTER_INNER, AxisInput.INNER):
                buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> {n_}Que;")
        for key, (buffer, _) in p.scalars.items():
            buf.line(f"{cpp_type(str(buffer.dtype))} {self.scalar_names[key]};")
        buf.line(f"AscendC::GlobalTensor<{self.out_type}> outGm;")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> accBuf;")
        buf.line(f"AscendC::LocalTensor<{self.acc_type}> accLocal;")
        if p.prologue_slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf;")
        if p.epilogue_slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> epiBuf;")
        for name in ("outer", "reduce", "inner", "chunks", "unitStart", "blockUnits"):
            buf.line(f"uint64_t {name} = 0;")
        buf.line("uint32_t tileRows = 0;")

    def tiling_fields(self) -> list[TilingField]:
        t, plan = self.tiling, self.tiling.plan
        return [TilingField("uint64_t", "units", t.total,
                            "(outer index, chunk of the inner axes) pairs"),
                TilingField("uint64_t", "blockUnits", t.block_len,
                            "units per core (the last core takes the rest)"),
                TilingField("uint64_t", "outer", plan.outer,
                            "product of the axes before the reduced ones"),
                TilingField("uint64_t", "reduce", plan.reduce,
                            "product of the reduced axes"),
                TilingField("uint64_t", "inner", plan.inner,
                            "product of the axes after them"),
                TilingField("uint32_t", "tileRows", plan.tile_rows,
                            "reduced rows per UB tile")]


__all__ = ["AxisReduceKernelPrinter"]
