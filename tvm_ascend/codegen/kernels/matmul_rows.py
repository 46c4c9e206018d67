"""Prints a MatMul kernel whose epilogue reduces over whole rows (LayerNorm, RMSNorm, Softmax).

The cube side, the tile loop and the copies are the matmul kernel's (``kernels/matmul.py``): each
base tile of C is ``baseM`` rows by all N columns, fetched into the UB with GetTensorC; where the
plan is ``overlapped`` (910B) in the matmul kernel's asynchronous rounds (``Iterate<false>`` into
the GM workspace, ``GetTensorC<false>``, two tiles in every queue). Only the
epilogue differs: instead of one elementwise step per row it runs the row program of
``schedules/row_reduce.py`` on each row of the tile: reductions (ReduceSum/Max/Min, read back
on the scalar unit), row values as scalars, full-row steps as vector instructions, the last
written over C's row in place before the tile's single write to GM (``CopyTileOut``: one
DataCopyPad, or on SoCs without it whole blocks per row and the tails element by element).
A kernel that exports an intermediate row result (MultiOutputFusion: the residual sum a
pre-LN LayerNorm reads, which a later kernel reads too) computes that step into a tile of its
own queue instead of a row slot, and writes the tile to its GM output before C's.

Example
-------
>>> printer = MatmulRowsKernelPrinter("k0", scheduled_func, tiling)      # doctest: +SKIP
>>> buf = CodeBuffer(); printer.print(buf)                               # doctest: +SKIP
>>> "ReduceSum" in buf.text()                                           # doctest: +SKIP
True
"""
from __future__ import annotations

from ...errors import CodegenError
from ...schedules.matmul_rows import TALL_SLOTS, MatmulRowsPlan, row_slots
from ...schedules.analysis.row_program import RowAccessKind
from ...schedules.analysis.tile_values import buffer_size, expr_key
from ...schedules.analysis.tir_walk import expr_dtype
from ..cpp_types import cpp_type
from ..kernel_parts import ident
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..vector_emitters import Operand
from .matmul import MatmulKernelPrinter
from .row_reduce import REDUCE_API

C_ROW = "cTile[r * stride]"  # the current row of the product in the UB (kernels/matmul.py)


class MatmulRowsKernelPrinter(MatmulKernelPrinter):
    """Prints one MatMul + row-epilogue kernel and describes its launch."""

    plan_type = MatmulRowsPlan

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        program = self.program
        if program is None or not any(s.kind == "reduce" for s in program.steps):
            raise CodegenError(f"{symbol}: no row reduction after the matmul; the matmul "
                               "printer prints it")
        if program.temp_slots != tiling.temp_buffers or row_slots(program) != self.plan.slots:
            raise CodegenError(f"{symbol}: the row program needs {program.temp_slots} temps and "
                               f"{row_slots(program)} slots, the tiling planned "
                               f"{tiling.temp_buffers} and {self.plan.slots}")
        if not program.out_full:
            raise CodegenError(f"{symbol}: the row epilogue must end in whole rows")
        self.slot_base = len(program.intermediates)
        extra = row_slots(program) - 2  # slots after the program's: work, then reduced value
        self.work_slot, self.reduced_slot = extra, extra + 1
        # step index -> C++ name of the output it exports (the outputs before the last)
        outputs = [p for p in self.params if p.name in
                   {program.steps[i].buffer.name for i in program.exports}]
        if len(outputs) != len(program.exports) or any(
                p is self.params[-1] for p in outputs):
            raise CodegenError(f"{symbol}: the exported results {program.exports} are not the "
                               "outputs before the last")
        self.exported = {i: self.names[program.steps[i].buffer.name] for i in program.exports}

    @property
    def overlapped(self) -> bool:
        """Whether the plan chose asynchronous rounds and two UB tiles (``MatmulRowsPlan``):
        the matmul printer's loop, workspace and queues then print the overlapped form."""
        return self.plan.overlapped

    @property
    def buffer_num(self) -> int:
        """UB tiles of every queue, as planned (two where asynchronous or tall and fitting)."""
        return self.tiling.buffer_num

    # ---- the tall form: IterateAll panels into the workspace, the epilogue over chunks ------
    @property
    def tall(self) -> bool:
        return self.plan.tall

    @property
    def c_type_args(self) -> str:
        """C's MatmulType: the tall form's IterateAll writes the panel to GM (rows N apart)."""
        return "AscendC::TPosition::GM, CubeFormat::ND" if self.tall else \
            MatmulKernelPrinter.c_type_args

    @property
    def tile_elems(self) -> str:
        return "CHUNK_M * ROW_N" if self.tall else MatmulKernelPrinter.tile_elems

    @property
    def row_elems(self) -> str:
        return "ROW_N" if self.tall else MatmulKernelPrinter.row_elems

    def takes_user_workspace(self) -> bool:
        return self.tall or super().takes_user_workspace()

    def user_workspace_bytes(self) -> int:
        """Every core's two panel slots (tall) or asynchronous round slots."""
        if self.tall:
            return self.tiling.cores * TALL_SLOTS * self.plan.panel_bytes
        return super().user_workspace_bytes()

    def emit_types(self, buf):
        super().emit_types(buf)
        if self.tall:
            buf.line(f"constexpr uint32_t CHUNK_M = {self.plan.chunk_m};  // rows of a UB chunk")
            buf.line(f"constexpr uint32_t ROW_N = {self.plan.align_n};  // a UB row's elements")
            buf.line()

    def emit_process(self, buf):
        if not self.tall:
            super().emit_process(buf)
            return
        with buf.indent("__aicore__ inline void Process() {"):
            buf.line("uint32_t first = AscendC::GetBlockIdx() * tiling.tilesPerCore;")
            buf.line("uint32_t last = first + tiling.tilesPerCore;")
            buf.line("if (last > tiling.totalTiles) last = tiling.totalTiles;")
            buf.line("if (first < last) Post(first, 0);")
            with buf.indent("for (uint32_t tile = first; tile < last; ++tile) {"):
                buf.line("uint32_t slot = (tile - first) % 2;")
                # the next panel into the other slot before this one is waited: the AIC
                # computes it while the AIV runs this panel's epilogue (that slot's last
                # panel is all read by now: its chunks' copies were waited for)
                buf.line("if (tile + 1 < last) Post(tile + 1, 1 - slot);")
                buf.line("mm.WaitIterateAll();  // this panel is in its slot")
                buf.line("uint64_t mOff = static_cast<uint64_t>(tile) * "
                         "tiling.cube.singleCoreM;")
                buf.line("uint32_t singleM = tiling.cube.M - mOff < tiling.cube.singleCoreM ? "
                         "tiling.cube.M - mOff : tiling.cube.singleCoreM;")
                buf.line("uint32_t chunks = (singleM + CHUNK_M - 1) / CHUNK_M;")
                buf.line("Load(slot, mOff, 0, singleM < CHUNK_M ? singleM : CHUNK_M, 0);")
                with buf.indent("for (uint32_t c = 0; c < chunks; ++c) {"):
                    buf.line("uint32_t r0 = c * CHUNK_M;")
                    buf.line("uint32_t curM = singleM - r0 < CHUNK_M ? singleM - r0 : CHUNK_M;")
                    if self.prefetch:
                        # the next chunk's copies before this chunk's epilogue (two UB
                        # buffers): MTE2 runs under the vector work
                        with buf.indent("if (c + 1 < chunks) {"):
                            buf.line("uint32_t next = r0 + CHUNK_M;")
                            buf.line("Load(slot, mOff, next, singleM - next < CHUNK_M ? "
                                     "singleM - next : CHUNK_M, (c + 1) % 2);")
                        buf.line("Finish(mOff + r0, curM, c % 2);")
                    else:
                        buf.line("Finish(mOff + r0, curM, 0);")
                        with buf.indent("if (c + 1 < chunks) {"):
                            buf.line("uint32_t next = r0 + CHUNK_M;")
                            buf.line("Load(slot, mOff, next, singleM - next < CHUNK_M ? "
                                     "singleM - next : CHUNK_M, 0);")
            buf.line("mm.End();")

    @property
    def prefetch(self) -> bool:
        """The tall form with two UB buffers a queue: chunk i + 1 is copied in during chunk
        i's epilogue."""
        return self.tall and self.buffer_num >= 2

    def _tall_inputs(self):
        """(name, kind) of the streamed row inputs the tall form's Load copies in."""
        return [(self.names[n], k) for n, k in self.program.inputs.items()
                if k in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE)]

    def emit_tile(self, buf):
        if not self.tall:
            super().emit_tile(buf)
            return
        t = self.ctype
        with buf.indent("__aicore__ inline void Post(uint32_t tile, uint32_t slot) {"):
            buf.line("uint64_t mOff = static_cast<uint64_t>(tile) * tiling.cube.singleCoreM;")
            buf.line("uint32_t singleM = tiling.cube.M - mOff < tiling.cube.singleCoreM ? "
                     "tiling.cube.M - mOff : tiling.cube.singleCoreM;")
            buf.line("mm.SetTail(singleM, tiling.cube.N);")
            buf.line(f"mm.SetTensorA({self.a_name}Gm[mOff * tiling.cube.Ka]);")
            buf.line(f"mm.SetTensorB({self.b_name}Gm[0]);")
            buf.line("mm.DisableBias();")
            # asynchronous: returns at once; the AIC writes the panel (rows N apart) into the
            # slot and signals the WaitIterateAll that answers this call
            buf.line("mm.template IterateAll<false>(wsGm[static_cast<uint64_t>(slot) * "
                     "panelElems], 0, false, true);")
        with buf.indent("__aicore__ inline void Load(uint32_t slot, uint64_t mOff, uint32_t r0, "
                        "uint32_t curM, uint32_t b) {"):
            buf.line("uint32_t curN = tiling.cube.N, colOff = 0;")
            buf.line("uint32_t stride = (curN + C0 - 1) / C0 * C0;  // UB row pitch")
            buf.line("uint64_t rowOff = mOff + r0;")
            buf.line(f"cIn[b] = outQue.AllocTensor<{t}>();")
            buf.line("CopyTileIn(cIn[b], wsGm[static_cast<uint64_t>(slot) * panelElems + "
                     "static_cast<uint64_t>(r0) * tiling.cube.N], curM, curN, stride, "
                     "tiling.cube.N);")
            for n, kind in self._tall_inputs():
                buf.line(f"{n}In[b] = {n}Que.AllocTensor<{t}>();")
                if kind is RowAccessKind.ROWS:
                    buf.line(f"CopyTileIn({n}In[b], {n}Gm[rowOff * tiling.cube.N + colOff], "
                             "curM, curN, stride, tiling.cube.N);")
                else:  # a broadcast mask: a slice per row
                    name = next(p for p, q in self.names.items() if q == n)
                    base = ScalarPrinter({self.program.row_var.name: "row"}).print(
                        self.program.bases[name])
                    with buf.indent("for (uint32_t r = 0; r < curM; ++r) {"):
                        buf.line("uint64_t row = rowOff + r;")
                        buf.line(f"CopyGmToUb({n}In[b][r * stride], {n}Gm[{base} + colOff], "
                                 "curN);")
            # Finish's vector work waits for these copies on this buffer's event
            buf.line("AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(b);")
        with buf.indent("__aicore__ inline void Finish(uint64_t rowOff, uint32_t curM, "
                        "uint32_t b) {"):
            buf.line("uint32_t curN = tiling.cube.N, colOff = 0;")
            buf.line("uint32_t stride = (curN + C0 - 1) / C0 * C0;  // UB row pitch")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(b);")
            buf.line(f"AscendC::LocalTensor<{t}> cTile = cIn[b];")
            for n, _ in self._tall_inputs():
                buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}In[b];")
            for n in self.exported.values():
                buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.AllocTensor<{t}>();")
            with buf.indent("for (uint32_t r = 0; r < curM; ++r) {"):
                buf.line("uint64_t row = rowOff + r;")
                self.emit_epilogue_row(buf)
            for n, _ in self._tall_inputs():
                buf.line(f"{n}Que.FreeTensor({n}Tile);")
            self._emit_exported_out(buf)
            buf.line("outQue.EnQue(cTile);")
            buf.line(f"cTile = outQue.DeQue<{t}>();")
            buf.line(f"CopyTileOut({self.out_name}Gm[rowOff * tiling.cube.N + colOff], cTile, "
                     "curM, curN, stride, tiling.cube.N);")
            buf.line("outQue.FreeTensor(cTile);")

    @property
    def n_outputs(self) -> int:
        """GM outputs, the last parameters: each exported result, then the kernel's own."""
        return 1 + len(self.exported)

    def emit_members(self, buf):
        super().emit_members(buf)
        if self.tall:
            t = self.ctype
            buf.line(f"AscendC::GlobalTensor<{t}> wsGm;  // this core's two panel slots")
            buf.line("uint64_t panelElems = 0;  // a slot's elements")
            n_buf = self.buffer_num
            buf.line(f"AscendC::LocalTensor<{t}> cIn[{n_buf}];  // chunks copied in, by buffer")
            for n, _ in self._tall_inputs():
                buf.line(f"AscendC::LocalTensor<{t}> {n}In[{n_buf}];")
        for n in self.exported.values():
            buf.line(f"AscendC::TQue<AscendC::QuePosition::VECOUT, 1> {n}Que;")

    def emit_buffers(self, buf):
        super().emit_buffers(buf)
        by_name = {self.names[p.name]: p for p in self.params}
        for n in self.exported.values():
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {self.ctype}*){n}, "
                     f"{buffer_size(by_name[n])});")
            buf.line(f"pipe->InitBuffer({n}Que, {self.buffer_num}, {self.tile_elems} * "
                     f"sizeof({self.ctype}));")
        if self.tall:
            buf.line("panelElems = static_cast<uint64_t>(tiling.cube.singleCoreM) * "
                     "tiling.cube.N;")
            buf.line(f"wsGm.SetGlobalBuffer(reinterpret_cast<__gm__ {self.ctype}*>(userWorkspace)"
                     f" + AscendC::GetBlockIdx() * {TALL_SLOTS} * panelElems, {TALL_SLOTS} * "
                     "panelElems);")

    def emit_epilogue(self, buf):
        t = self.ctype
        for n in self.exported.values():
            buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.AllocTensor<{t}>();")
        super().emit_epilogue(buf)
        self._emit_exported_out(buf)

    def _emit_exported_out(self, buf):
        """The exported rows' tiles to GM (before C's) and freed."""
        t = self.ctype
        for n in self.exported.values():  # the exported rows go out first, C's after
            buf.line(f"{n}Que.EnQue({n}Tile);")
            buf.line(f"{n}Tile = {n}Que.DeQue<{t}>();")
            buf.line(f"CopyTileOut({n}Gm[rowOff * tiling.cube.N + colOff], {n}Tile, curM, "
                     "curN, stride, tiling.cube.N);")
            buf.line(f"{n}Que.FreeTensor({n}Tile);")

    @property
    def rows(self) -> int:
        """The row program runs a row a step (its reductions give one value a row)."""
        return 1

    def _slot(self, k: int, dtype: str) -> str:
        """Row slot ``k`` of rowBuf viewed as ``dtype`` (``baseN`` elements)."""
        return (f"rowBuf.GetWithOffset<{cpp_type(dtype)}>({self.row_elems}, "
                f"{k} * {self.row_elems} * {self.plan.slot_bytes})")

    def _leaves(self) -> tuple[dict, dict]:
        """(tile operands by load key, scalar texts by load key) for the row ``r``."""
        program, dtype = self.program, self.shape.dtype
        tiles, scalars = {}, {}
        for key, (kind, buffer, step) in program.loads.items():
            n = self.names.get(buffer.name, ident(buffer.name))
            if kind is RowAccessKind.INTERMEDIATE and step == -1:
                tiles[key] = Operand(C_ROW, True, dtype)
            elif kind is RowAccessKind.INTERMEDIATE and step in self.exported:
                tiles[key] = Operand(f"{self.exported[step]}Tile[r * stride]", True, dtype)
            elif kind is RowAccessKind.INTERMEDIATE:
                buf_dtype = str(buffer.dtype)
                tiles[key] = Operand(self._slot(program.intermediate_slot(step), buf_dtype),
                                     True, buf_dtype, mask=buf_dtype == "bool")
            elif kind in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE):
                tiles[key] = Operand(f"{n}Tile[r * stride]", True, dtype)
            elif kind is RowAccessKind.COLUMN:
                tiles[key] = Operand(f"{n}Col", True, dtype)  # one tile spans every column
            elif kind is RowAccessKind.ROW_SCALAR:
                base = ScalarPrinter({program.row_var.name: "row"}).print(
                    program.bases[buffer.name])
                scalars[key] = f"{n}Gm.GetValue({base})"
            elif kind is RowAccessKind.SCALAR:
                scalars[key] = f"{n}Val"
            elif kind is RowAccessKind.REDUCED:
                scalars[key] = f"rowValue{step}"
            else:
                raise CodegenError(f"{self.symbol}: epilogue load of kind {kind.value}")
        return tiles, scalars

    def emit_epilogue_row(self, buf):
        tiles, scalar_names = self._leaves()
        scalars = ScalarPrinter(scalar_names, expr_key)
        printer = TileProgramPrinter(self.symbol, scalars)

        def slot(k, node):
            return self._slot(self.slot_base + k, expr_dtype(node))

        for step in self.program.steps:
            ctype = cpp_type(str(step.buffer.dtype))
            if step.kind == "reduce":
                self._emit_reduce(buf, printer, step, tiles, slot, ctype)
            elif step.kind == "row":
                buf.line(f"{ctype} rowValue{step.index} = {scalars.print(step.expr)};")
            else:
                dst = C_ROW if step.is_output else \
                    f"{self.exported[step.index]}Tile[r * stride]" \
                    if step.index in self.exported else self._slot(
                        self.program.intermediate_slot(step.index), str(step.buffer.dtype))
                root = printer.emit(buf, step.plan, tiles, dst, slot, "curN")
                if root.text != dst:
                    printer.emit_copy(buf, dst, root, "curN")

    def _emit_reduce(self, buf, printer, step, tiles, slot, ctype):
        """A row reduction into the scalar ``rowValue<index>``, accumulated in its operand's
        dtype (float32 after a Cast, as the group says)."""
        temp = slot(step.plan.n_slots, step.expr) if step.plan.order else ""
        operand = printer.emit(buf, step.plan, tiles, temp, slot, "curN")
        if not operand.is_tile:
            raise CodegenError(f"{self.symbol}: reduction of a row scalar")
        acc = operand.dtype
        reduced = self._slot(self.reduced_slot, acc)
        buf.line(f"AscendC::{REDUCE_API[step.reducer]}({reduced}, {operand.text}, "
                 f"{self._slot(self.work_slot, acc)}, curN);")
        # the scalar unit reads the reduced value: wait for the vector unit
        buf.line("AscendC::SetFlag<AscendC::HardEvent::V_S>(0);")
        buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);")
        buf.line(f"{ctype} rowValue{step.index} = static_cast<{ctype}>({reduced}.GetValue(0));")


__all__ = ["MatmulRowsKernelPrinter"]
