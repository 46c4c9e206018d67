"""Prints a Conv2D kernel: img2col tiles in the UB, the cube's Matmul API, the epilogue on the
vector unit (method: ``schedules/conv2d/``), as the template's ``ConvPlan`` says.

Each core takes a contiguous range of ``baseM x baseN`` output tiles (image, group, pixel tile,
channel tile). For every K chunk the tile's img2col rows are built into ``colBuf``
(``Img2col``: one copy, a vector Gather per channel from a slab of input rows, or the scalar
fallback; the plan's ``img2col.mode``). On split chips each chunk is then copied to the
core's col block in the GM workspace, which the Matmul reads as B for every channel tile of the
pixel tile, all of K at once; on coupled chips ``colBuf`` is the Matmul's UB operand B, chunk
by chunk, the chunks' products added in the UB. The epilogue runs ``epilogue_rows`` output rows
per vector call (per-channel values as Brcb columns) before one write to GM. Streamed epilogue
operands and the output tile move with ``CopyTileIn`` / ``CopyTileInBlocks`` / ``CopyTileOut``
(``templates.py``): one multi-burst DataCopyPad where the SoC has it, else per row whole
32-byte blocks by DataCopy and the tail element by element (310P, 910A; the unit's prelude
holds the helpers for its SoC). A 1:1 MIX kernel.

Example
-------
>>> printer = ConvKernelPrinter("k0", scheduled_func, tiling)            # doctest: +SKIP
>>> buf = CodeBuffer(); printer.print(buf)                               # doctest: +SKIP
>>> "Img2col(col" in buf.text()                                          # doctest: +SKIP
True
"""
from __future__ import annotations

from contextlib import nullcontext

from ...errors import CodegenError
from ...schedules.conv2d import ConvPlan, conv_block_index, epilogue_program
from ...schedules.conv2d.epilogue import BLOCK_BYTES, row_columns
from ...schedules.analysis.row_program import RowAccessKind
from ...schedules.analysis.tile_values import buffer_size, expr_key
from ...schedules.analysis.tir_walk import expr_dtype, schedule_blocks
from ..cpp_types import cpp_type
from ..kernel_parts import emit_field_assignments, ident
from ..kernel_printer import CubeKernelPrinter
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..vector_emitters import ColumnLayout, Operand
from .conv2d_img2col import Img2colPrinter
from .matmul import CUBE_FIELDS

GEOMETRY = ("n", "cin", "h", "w", "cout", "kh", "kw", "oh", "ow", "groups", "k")


class ConvKernelPrinter(CubeKernelPrinter):
    """Prints one Conv2D (+ epilogue) kernel and describes its launch."""

    def __new__(cls, symbol: str, func, tiling):
        # the template's Load3D variant has its own printer (a subclass: this module is its
        # base, so it is imported here, not above)
        if cls is ConvKernelPrinter and getattr(tiling.plan, "variant", None) == "load3d":
            from .conv2d_load3d import Load3dConvPrinter
            cls = Load3dConvPrinter
        return super().__new__(cls)

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        if not isinstance(tiling.plan, ConvPlan):
            raise CodegenError(f"{symbol}: a conv2d tiling without the template's ConvPlan "
                               f"(plan {type(tiling.plan).__name__}); schedule it again")
        plan = tiling.plan
        self._bind_conv(func, plan)
        self.img2col = Img2colPrinter(plan, self.x_name, self.sizes, self.ctype)
        self.mode = plan.img2col.mode  # how col is built
        self.rows = plan.epilogue_rows  # output rows per epilogue call
        self.col_gm = plan.col_in_gm  # the col block goes to the GM workspace
        self.mm_chunks = plan.mm_chunks  # K pieces the Matmul takes in turn
        # the columns' expressions are the row program's (TIR); the plan sized their UB
        self.columns = row_columns(self.program, self.shape) if self.rows > 1 else []
        if len(self.columns) != plan.row_columns:
            raise CodegenError(f"{symbol}: the conv epilogue has {len(self.columns)} row "
                               f"columns, the plan sized {plan.row_columns}")

    def _bind_conv(self, func, plan):
        """Sets what every conv printer reads off its plan and function: the shape, the
        epilogue's row program, the element type and the kernel's names and buffer sizes."""
        import tvm

        self.plan = plan
        self.shape = plan.shape
        blocks = schedule_blocks(tvm.s_tir.Schedule(func))
        self.program = epilogue_program(blocks, func, self.shape, conv_block_index(blocks))
        self.ctype = cpp_type(self.shape.dtype)
        self.x_name = self.names[self.shape.x_name]
        self.w_name = self.names[self.shape.w_name]
        self.out_name = self.names[self.params[-1].name]
        self.sizes = {self.names[p.name]: buffer_size(p) for p in self.params}

    def _emit_gm_buffers(self, buf):
        """Binds every parameter's GlobalTensor; a scalar epilogue input is read once here."""
        t = self.ctype
        for p in self.params:
            n = self.names[p.name]
            if p.name in self._inputs(RowAccessKind.SCALAR):
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {t}*){n}, 1);")
                buf.line(f"{n}Val = {n}Gm.GetValue(0);")
            else:
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {t}*){n}, {buffer_size(p)});")

    def _emit_gm_members(self, buf):
        """The tiling and a GlobalTensor per parameter: the members every conv kernel has."""
        t = self.ctype
        buf.line("TilingData tiling;")
        for p in self.params:
            buf.line(f"AscendC::GlobalTensor<{t}> {self.names[p.name]}Gm;")

    def _emit_epilogue_members(self, buf):
        """The epilogue's members: a queue per streamed input, a value per scalar input and the
        row slots' buffer when the plan has slots."""
        t = self.ctype
        for name in self._inputs(RowAccessKind.ROWS):
            buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> {self.names[name]}Que;")
        for name in self._inputs(RowAccessKind.SCALAR):
            buf.line(f"{t} {self.names[name]}Val;")
        if self.plan.slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf;")

    def _inputs(self, kind):
        if self.program is None:
            return []
        return [n for n, k in self.program.inputs.items() if k is kind]

    def takes_user_workspace(self) -> bool:
        return self.col_gm

    # ---- printing ---------------------------------------------------------------------------
    def emit_types(self, buf):
        t = self.ctype
        with buf.indent("struct TilingData {", "};"):
            buf.line("TCubeTiling cube;  // N is B's row pitch: colBuf's, or the input plane's")
            fields = ", ".join(GEOMETRY + ("sh", "sw", "dh", "dw", "padT", "padL"))
            buf.line(f"int32_t {fields};")
            buf.line("uint32_t pitch;  // UB row pitch of the tiles and of col (baseN to 32 bytes)")
            buf.line("uint32_t kChunk, tilesM, tilesN, tilesPerCore, totalTiles;")
            buf.line("uint32_t slabLead, slabRowPitch, slabPitch, slabChannels;  // window mode")
        buf.line(f"using AType = matmul::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, {t}>;")
        b_pos = "GM" if self.mode == "direct" or self.col_gm else "VECOUT"
        buf.line(f"using BType = matmul::MatmulType<AscendC::TPosition::{b_pos}, CubeFormat::ND, "
                 f"{t}>;")
        buf.line(f"using CType = matmul::MatmulType<AscendC::TPosition::VECIN, "
                 f"CubeFormat::ND_ALIGN, {t}>;")
        buf.line(f"constexpr uint32_t C0 = 32 / sizeof({t});  // elements per 32-byte block")
        buf.line()

    def emit_public_members(self, buf):  # the Matmul objects
        buf.line("matmul::Matmul<AType, BType, CType, AType> mm;")

    def emit_private(self, buf):
        if self.mode != "direct":
            self.img2col.emit(buf)
        self.emit_tile(buf)

    def emit_buffers(self, buf):
        t = self.ctype
        tile = f"tiling.cube.baseM * tiling.pitch * sizeof({t})"
        self._emit_gm_buffers(buf)
        if self.col_gm:  # this core's col block: K rows of the UB's pitch
            buf.line("const uint64_t colElems = static_cast<uint64_t>(tiling.k) * "
                     "tiling.pitch;")
            buf.line(f"colGm.SetGlobalBuffer(reinterpret_cast<__gm__ {t}*>(userWorkspace) + "
                     "AscendC::GetBlockIdx() * colElems, colElems);")
        buf.line(f"pipe->InitBuffer(outQue, 1, {tile});")
        if self.mm_chunks > 1:
            buf.line(f"pipe->InitBuffer(partBuf, {tile});")
        if self.mode != "direct":
            buf.line(f"pipe->InitBuffer(colBuf, tiling.kChunk * tiling.pitch * "
                     f"sizeof({t}));")
        if self.mode == "window":
            self.img2col.emit_init(buf)
        for name in self._inputs(RowAccessKind.ROWS):
            buf.line(f"pipe->InitBuffer({self.names[name]}Que, 1, {tile});")
        if self.plan.slots:
            buf.line(f"pipe->InitBuffer(rowBuf, {self.plan.slots * self.rows} * "
                     f"tiling.pitch * sizeof({t}));")
        if self.columns:
            count = len(self.columns)
            buf.line(f"pipe->InitBuffer(valueBuf, {count} * tiling.cube.baseM * "
                     f"sizeof({t}));")
            buf.line(f"pipe->InitBuffer(blockBuf, {count} * tiling.cube.baseM * "
                     f"{BLOCK_BYTES});")

    def emit_process(self, buf):
        with buf.indent("__aicore__ inline void Process() {"):
            buf.line("uint32_t first = AscendC::GetBlockIdx() * tiling.tilesPerCore;")
            buf.line("uint32_t last = first + tiling.tilesPerCore;")
            buf.line("if (last > tiling.totalTiles) last = tiling.totalTiles;")
            with buf.indent("for (uint32_t tile = first; tile < last; ++tile) {"):
                # channel tiles fastest: a core meets each pixel tile in one run of tiles,
                # which share its img2col block (one K chunk) or its Gather offsets
                buf.line("uint32_t mTile = tile % tiling.tilesM;")
                buf.line("uint32_t nTile = tile / tiling.tilesM % tiling.tilesN;")
                buf.line("uint32_t image = tile / tiling.tilesM / tiling.tilesN;  // n*groups+g")
                buf.line("Tile(image / tiling.groups, image % tiling.groups, "
                         "mTile * tiling.cube.baseM, nTile * tiling.cube.baseN);")
            buf.line("mm.End();")

    def emit_tile(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void Tile(uint32_t n, uint32_t g, uint32_t co0, "
                        "uint32_t p0) {"):
            buf.line("const int32_t coutG = tiling.cout / tiling.groups, "
                     "P = tiling.oh * tiling.ow;")
            buf.line("uint32_t curM = coutG - co0 < tiling.cube.baseM ? coutG - co0 : "
                     "tiling.cube.baseM;")
            buf.line("uint32_t curN = P - p0 < tiling.cube.baseN ? P - p0 : tiling.cube.baseN;")
            buf.line("uint32_t stride = (curN + C0 - 1) / C0 * C0;  // UB row pitch")
            buf.line("uint64_t rowOff = static_cast<uint64_t>(n) * tiling.cout + g * coutG + co0;")
            buf.line(f"AscendC::LocalTensor<{t}> acc = outQue.AllocTensor<{t}>();")
            if self.col_gm:
                self.emit_product_from_gm_col(buf)
            else:
                self.emit_product(buf)
            if self.program is not None:
                self.emit_epilogue(buf)
            buf.line("outQue.EnQue(acc);")
            buf.line(f"acc = outQue.DeQue<{t}>();")
            buf.line(f"CopyTileOut({self.out_name}Gm[rowOff * P + p0], acc, curM, curN, stride, "
                     "P);")
            buf.line("outQue.FreeTensor(acc);")

    def emit_product_from_gm_col(self, buf):
        """Split chips: the tile's col block is built K chunk by K chunk in the UB and copied to
        this core's GM workspace, once for the run of channel tiles of its pixel tile; the
        Matmul reads B there, all of K in one go (no partial products)."""
        t = self.ctype
        buf.line(f"AscendC::LocalTensor<{t}> col = colBuf.Get<{t}>();")
        buf.line("uint64_t colKey = (static_cast<uint64_t>(n) * tiling.groups + g) * P + p0 + 1;")
        with buf.indent("if (colFor != colKey) {"):
            with buf.indent("for (uint32_t k0 = 0; k0 < static_cast<uint32_t>(tiling.k); "
                            "k0 += tiling.kChunk) {"):
                buf.line("uint32_t kc = tiling.k - k0 < tiling.kChunk ? tiling.k - k0 : "
                         "tiling.kChunk;")
                buf.line("Img2col(col, n, g, k0, kc, p0, curN);")
                # col is written by MTE2, the vector or the scalar unit (by the method)
                buf.line("AscendC::PipeBarrier<PIPE_ALL>();")
                buf.line("AscendC::DataCopy(colGm[static_cast<uint64_t>(k0) * tiling.pitch], col, "
                         "kc * tiling.pitch);")
                # the next chunk rewrites col, and the cube reads colGm, after the copy
                buf.line("AscendC::PipeBarrier<PIPE_ALL>();")
            buf.line("colFor = colKey;")
        buf.line(f"mm.SetTensorA({self.w_name}Gm[(static_cast<uint64_t>(g) * coutG + co0) * "
                 "tiling.k]);")
        buf.line("mm.SetTensorB(colGm);")
        buf.line("mm.SetTail(curM, curN, tiling.k);")
        buf.line("mm.Iterate();")
        buf.line("mm.template GetTensorC<true, true>(acc, 0, true, curM, curN);")

    def emit_product(self, buf):
        """The product into ``acc``: B from the input planes (direct) or the UB's col block,
        K chunk by K chunk (the chunks' products added on the vector unit)."""
        t = self.ctype
        direct = self.mode == "direct"
        one_chunk = self.plan.chunks == 1 and not direct
        if not direct:
            buf.line(f"AscendC::LocalTensor<{t}> col = colBuf.Get<{t}>();")
        if one_chunk:  # the block stays in the UB for the pixel tile's run of tiles
            buf.line("uint64_t colKey = (static_cast<uint64_t>(n) * tiling.groups + g) * P + "
                     "p0 + 1;")
        with buf.indent("for (uint32_t k0 = 0; k0 < static_cast<uint32_t>(tiling.k); "
                        "k0 += tiling.kChunk) {"):
            buf.line("uint32_t kc = tiling.k - k0 < tiling.kChunk ? tiling.k - k0 : "
                     "tiling.kChunk;")
            if not direct:
                with buf.indent("if (colFor != colKey) {") if one_chunk else nullcontext():
                    buf.line("Img2col(col, n, g, k0, kc, p0, curN);")
                    # col is written by MTE2, the vector or the scalar unit (by the method);
                    # the Matmul's copy of B reads it
                    buf.line("AscendC::PipeBarrier<PIPE_ALL>();")
                    if one_chunk:
                        buf.line("colFor = colKey;")
            buf.line(f"mm.SetTensorA({self.w_name}Gm[(static_cast<uint64_t>(g) * coutG + co0)"
                     " * tiling.k + k0]);")
            if direct:  # B is the group's input planes: K x P, rows P apart (cube.N)
                buf.line(f"mm.SetTensorB({self.x_name}Gm[(static_cast<uint64_t>(n) * "
                         "tiling.cin + g * (tiling.cin / tiling.groups) + k0) * P + p0]);")
            else:
                buf.line("mm.SetTensorB(col);")
            buf.line("mm.SetTail(curM, curN, kc);")
            buf.line("mm.Iterate();")
            if self.plan.chunks > 1:
                with buf.indent("if (k0 == 0) {", None):
                    buf.line("mm.template GetTensorC<true, true>(acc, 0, true, curM, curN);")
                with buf.indent("} else {", None):
                    buf.line(f"AscendC::LocalTensor<{t}> part = partBuf.Get<{t}>();")
                    buf.line("mm.template GetTensorC<true, true>(part, 0, true, curM, curN);")
                    buf.line("AscendC::Add(acc, acc, part, curM * stride);")
                    # the next chunk's product lands in part: the Add must have read it
                    buf.line("AscendC::PipeBarrier<PIPE_V>();")
                buf.line("}")
            else:
                buf.line("mm.template GetTensorC<true, true>(acc, 0, true, curM, curN);")

    def emit_epilogue(self, buf):
        t = self.ctype
        streamed = [self.names[n] for n in self._inputs(RowAccessKind.ROWS)]
        for n in streamed:
            buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.AllocTensor<{t}>();")
            buf.line(f"CopyTileInBlocks({n}Tile, {n}Gm[rowOff * P + p0], curM, curN, stride, P, "
                     f"{self.sizes[n]}ULL - (rowOff * P + p0));")
            buf.line(f"{n}Que.EnQue({n}Tile);")
            buf.line(f"{n}Tile = {n}Que.DeQue<{t}>();")
        if self.rows > 1:
            if self.columns:
                self.emit_columns(buf)
            with buf.indent(f"for (uint32_t r0 = 0; r0 < curM; r0 += {self.rows}) {{"):
                buf.line(f"uint32_t rows = curM - r0 < {self.rows} ? curM - r0 : {self.rows};")
                self.emit_epilogue_rows(buf)
        else:
            with buf.indent("for (uint32_t r = 0; r < curM; ++r) {"):
                buf.line("uint64_t row = rowOff + r;")
                self.emit_epilogue_row(buf)
        for n in streamed:
            buf.line(f"{n}Que.FreeTensor({n}Tile);")

    def emit_epilogue_row(self, buf):
        """The epilogue of row ``r``: each op one call over the row's ``curN`` pixels."""
        self.emit_epilogue_program(buf, "r", "curN", 1, self.emit_row_values(buf), {})

    def emit_epilogue_program(self, buf, first: str, count: str, rows: int, scalars: dict,
                              columns: dict):
        """The epilogue's tile program over ``rows`` rows from row ``first`` (``count``
        elements a call); ``scalars`` name the scalar loads, ``columns`` are operands by key."""
        program, dtype = self.program, self.shape.dtype
        tiles = dict(columns)
        for key, (kind, buffer, step) in program.loads.items():
            n = self.names.get(buffer.name, ident(buffer.name))
            if kind is RowAccessKind.INTERMEDIATE and step == -1:
                tiles[key] = Operand(f"acc[{first} * stride]", True, dtype)
            elif kind is RowAccessKind.ROWS:
                tiles[key] = Operand(f"{n}Tile[{first} * stride]", True, dtype)
            elif kind not in (RowAccessKind.ROW_SCALAR, RowAccessKind.SCALAR):
                raise CodegenError(f"{self.symbol}: conv epilogue load of kind {kind.value}")
        (step,) = program.steps  # the template inlines the epilogue into one block
        printer = TileProgramPrinter(self.symbol, ScalarPrinter(scalars, expr_key))

        def slot(k, node):
            ctype = cpp_type(expr_dtype(node))
            return (f"rowBuf.GetWithOffset<{ctype}>({rows} * tiling.pitch, "
                    f"{k * rows} * tiling.pitch * sizeof({ctype}))")

        dst = f"acc[{first} * stride]"
        root = printer.emit(buf, step.plan, tiles, dst, slot, count)
        if root.text != dst:
            printer.emit_copy(buf, dst, root, count)

    def emit_columns(self, buf):
        """The tile's per-row scalars (``conv_epilogue.RowColumn``) into ``valueBuf``: one copy
        for a column whose values lie contiguous in GM, the scalar unit row by row for the
        others; then ``Brcb`` spreads each value over a 32-byte block of ``blockBuf``."""
        t, program = self.ctype, self.program
        buf.line(f"AscendC::LocalTensor<{t}> values = valueBuf.Get<{t}>();")
        copied = [(j, c) for j, c in enumerate(self.columns) if c.copied]
        computed = [(j, c) for j, c in enumerate(self.columns) if not c.copied]
        if copied:
            # the last tile's Brcb has read the values this copy replaces
            buf.line("AscendC::SetFlag<AscendC::HardEvent::V_MTE2>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_MTE2>(0);")
            at_first_row = ScalarPrinter({program.row_var.name: "rowOff"})
            for j, column in copied:
                n = self.names[column.copied]
                base = at_first_row.print(program.bases[column.copied])
                buf.line(f"CopyTileIn(values[{j} * tiling.cube.baseM], {n}Gm[{base}], 1, curM, "
                         "tiling.cube.baseM, curM);")
            buf.line("AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(0);")
        if computed:
            buf.line("AscendC::SetFlag<AscendC::HardEvent::V_S>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);")
            with buf.indent("for (uint32_t r = 0; r < curM; ++r) {"):
                buf.line("uint64_t row = rowOff + r;")
                scalars = self.emit_row_values(buf, {c.copied for _, c in copied})
                printer = ScalarPrinter(scalars, expr_key)
                for j, column in computed:
                    buf.line(f"values.SetValue({j} * tiling.cube.baseM + r, "
                             f"static_cast<{t}>({printer.print(column.expr)}));")
            buf.line("AscendC::SetFlag<AscendC::HardEvent::S_V>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);")
        buf.line(f"AscendC::LocalTensor<{t}> blocks = blockBuf.Get<{t}>();")
        for j, _ in enumerate(self.columns):
            buf.line(f"AscendC::Brcb(blocks[{j} * tiling.cube.baseM * C0], "
                     f"values[{j} * tiling.cube.baseM], static_cast<uint8_t>((curM + 7) / 8), "
                     "AscendC::BrcbRepeatParams(1, 8));")

    def emit_row_values(self, buf, skip=frozenset()) -> dict:
        """Row ``row``'s values of the row-scalar inputs (one GM read per row and input: the
        plan counts so), those in ``skip`` aside, and the kernel scalars: the names the scalar
        printer gives their loads."""
        program = self.program
        scalars, row_values = {}, {}
        row_var = {program.row_var.name: "row"}
        for key, (kind, buffer, _) in program.loads.items():
            n = self.names.get(buffer.name, ident(buffer.name))
            if kind is RowAccessKind.ROW_SCALAR and buffer.name not in skip:
                if n not in row_values:
                    base = ScalarPrinter(row_var).print(program.bases[buffer.name])
                    row_values[n] = f"{n}Row"
                    buf.line(f"{cpp_type(buffer.dtype)} {n}Row = {n}Gm.GetValue({base});")
                scalars[key] = row_values[n]
            elif kind is RowAccessKind.SCALAR:
                scalars[key] = f"{n}Val"
        return scalars

    def emit_epilogue_rows(self, buf):
        """The epilogue over ``rows`` rows from ``r0``: tile ops over ``rows * stride``
        elements, ops with a column in the repeat form (``conv_epilogue``)."""
        layout = ColumnLayout("curN", "rows", "stride / C0")
        columns = {c.key: Operand(f"blocks[({j} * tiling.cube.baseM + r0) * C0]", False,
                                  self.shape.dtype, column=layout)
                   for j, c in enumerate(self.columns)}
        kernel_scalars = self.emit_row_values(buf, skip=set(self.program.inputs))
        self.emit_epilogue_program(buf, "r0", "rows * stride", self.rows, kernel_scalars,
                                   columns)

    def emit_members(self, buf):
        t = self.ctype
        self._emit_gm_members(buf)
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        if self.col_gm:
            buf.line(f"AscendC::GlobalTensor<{t}> colGm;  // B of the Matmul: this core's col")
        if self.mm_chunks > 1:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> partBuf;")
        if self.mode != "direct":
            buf.line("AscendC::TBuf<AscendC::TPosition::VECOUT> colBuf;  // B of the Matmul")
            buf.line("uint64_t colFor = 0;  // (image, pixel) + 1 of the block in colBuf; 0: none")
        if self.mode == "window":
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> slabBuf;  // input rows")
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> offsetBuf;  // Gather offsets")
            buf.line("uint32_t offsetsFor = 0;  // p0 + 1 of the offsets in offsetBuf; 0: none")
        self._emit_epilogue_members(buf)
        if self.columns:  # a tile's per-row scalars: values, then one 32-byte block a row
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> valueBuf;")
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> blockBuf;")

    # ---- what the launcher needs ------------------------------------------------------------
    def emit_tiling_init(self, buf, var: str) -> None:
        p, s, t = self.plan, self.shape, self.tiling
        b_pitch = s.pixels if self.mode == "direct" else p.align_n
        k_piece = s.k if self.mm_chunks == 1 else p.img2col.k_chunk  # K the Matmul takes at once
        values = {"usedCoreNum": t.cores, "M": s.cout, "N": b_pitch, "Ka": s.k,
                  "Kb": k_piece, "singleCoreM": p.base_m, "singleCoreN": p.base_n,
                  "singleCoreK": k_piece, "baseM": p.base_m, "baseN": p.base_n,
                  "baseK": p.base_k, "depthA1": 2, "depthB1": 2, "stepM": 1, "stepN": 1,
                  "stepKa": 1, "stepKb": 1, "isBias": 0, "iterateOrder": 0, "dbL0A": 2,
                  "dbL0B": 2, "dbL0C": 1}
        buf.line(f"{self.symbol}_impl::TilingData {var}{{}};")
        emit_field_assignments(buf, self.symbol, var, "int32_t",
                               {f"cube.{field}": values[field] for field in CUBE_FIELDS})
        emit_field_assignments(buf, self.symbol, var, "int32_t", {
            **{field: getattr(s, field) for field in GEOMETRY},
            "sh": s.stride[0], "sw": s.stride[1], "dh": s.dilation[0],
            "dw": s.dilation[1], "padT": s.pad[0], "padL": s.pad[1]})
        slab = p.img2col.layout  # the window method's; zeros for the others
        emit_field_assignments(buf, self.symbol, var, "uint32_t", {
            "pitch": p.align_n, "kChunk": p.img2col.k_chunk, "tilesM": p.tiles_m,
            "tilesN": p.tiles_n, "tilesPerCore": t.block_len, "totalTiles": t.total,
            "slabLead": slab.lead if slab else 0, "slabRowPitch": slab.row_pitch if slab else 0,
            "slabPitch": slab.pitch if slab else 0, "slabChannels": p.img2col.slab_channels})

    def user_workspace_bytes(self) -> int:
        """GM workspace of the col blocks: one per core (split chips, not the direct mode)."""
        return self.tiling.cores * self.plan.col_workspace_bytes
