"""Prints a MatMul kernel: the cube's high-level Matmul API plus the epilogue on the vector unit.

Each core takes a contiguous range of ``singleM x singleN`` output tiles (batch outermost); the
Matmul object (CFG_MDL, with the tiling's walk order and L1 depths, so operand blocks stay in L1
across pieces) computes a tile as ``baseM x baseN`` pieces (Iterate), each fetched into the UB
with GetTensorC (rows padded to 32 bytes), where the epilogue runs over ``epilogue_rows`` rows
per vector call (broadcast columns repeated over them) before one write to GM. Tiles of GM
tensors (the epilogue's row operands, the output) move with the ``CopyTileIn`` /
``CopyTileOut`` helpers of ``templates.py``: one multi-burst DataCopyPad where
the SoC has it (910B, 310B), else per row the whole 32-byte blocks by DataCopy and the tail
element by element (310P, 910A); the unit's prelude holds the helpers for its SoC. A kernel
is a MIX kernel (cube + vector): a 1:1 mix, or on 910B the 1:2 mix when the plan's
``aiv_ratio`` is 2 (``KERNEL_TYPE_MIX_AIC_1_2``; the plan's cores count AIV clients, the launch
their AIC groups).

Where the plan is ``overlapped`` (split chips, two C tiles fit the UB) the rounds are
asynchronous: each client gives its Matmul object its part of the user workspace
(``SetWorkspace``: a ``baseM x baseN`` slot per tile of the round), ``Iterate<false>`` has the
AIC compute the round's tiles ahead into it, ``GetTensorC<false>`` fetches them in order, and
the output queue (and each streamed input's) holds two tiles, so one tile's epilogue and
copy-out overlap the next tiles' cube work; where the plan's ``stream_rows`` says so, a
residual is copied in a chunk of ``epilogue_rows`` rows per epilogue step (its queue holds
two chunks), not as a whole tile. Elsewhere each tile is computed and fetched in
step (``Iterate`` / ``GetTensorC<true>``), single-buffered.

Where the plan splits K (``k_splits`` > 1) the cores' work items are K slices of the tiles
(``kSplits`` a tile, ``kSlice`` deep): each sets the Matmul object's tail K and its A and B at
the slice's offset, and copies its tile out under ``SetAtomicAdd<T>`` into the C the launcher
zeroed (``zero_outputs``); only a tile's first slice runs the epilogue (which is affine, so
its offset is added once), the others scale their partial product by the plan's
``split_scale`` where it is not 1.

Example
-------
>>> printer = MatmulKernelPrinter("k0", scheduled_func, tiling)         # doctest: +SKIP
>>> buf = CodeBuffer(); printer.print(buf)                              # doctest: +SKIP
>>> "CopyTileOut(" in buf.text()                                        # doctest: +SKIP
True
"""
from __future__ import annotations

from ...errors import CodegenError
from ...schedules.matmul import MatmulPlan, epilogue_program, symbolic_bases
from ...schedules.symbolic import specialize
from ...schedules.analysis.row_program import RowAccessKind
from ...schedules.analysis.tile_values import buffer_size, expr_key
from ...schedules.analysis.tir_walk import SBlock, expr_dtype, walk
from ..cpp_types import cpp_type
from ..kernel_parts import emit_field_assignments, emit_resident_columns, ident
from ..kernel_printer import CubeKernelPrinter
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..vector_emitters import Operand

CUBE_FIELDS = ("usedCoreNum", "M", "N", "Ka", "Kb", "singleCoreM", "singleCoreN", "singleCoreK",
               "baseM", "baseN", "baseK", "depthA1", "depthB1", "stepM", "stepN", "stepKa",
               "stepKb", "isBias", "iterateOrder", "dbL0A", "dbL0B", "dbL0C")


def mdl_steps(plan) -> dict:
    """TCubeTiling's step fields for the planned L1 depths of ``plan`` (a MatmulPlan or
    MatmulRowsPlan), as CFG_MDL reads them (depthA1 = stepM * stepKa, or 2 for
    double-buffered blocks): a kept operand loads its whole K panel (stepKa = K steps) for
    ``depth / K steps`` tiles along its other axis."""
    k_steps = -(-plan.shape.k // plan.base_k)

    def steps(depth):
        return (k_steps, max(1, depth // k_steps)) if depth >= k_steps else (1, 1)

    step_ka, step_m = steps(plan.depth_a1)
    step_kb, step_n = steps(plan.depth_b1)
    return {"stepM": step_m, "stepN": step_n, "stepKa": step_ka, "stepKb": step_kb}


class MatmulKernelPrinter(CubeKernelPrinter):
    """Prints one MatMul (+ epilogue) kernel and describes its launch."""

    plan_type = MatmulPlan  # the plan this printer reads (the template's)

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        if not isinstance(tiling.plan, self.plan_type):
            raise CodegenError(f"{symbol}: the {tiling.template} tiling carries no "
                               f"{self.plan_type.__name__}; schedule the group again")
        self.plan = tiling.plan
        spec = self.shape_spec()
        symbolic = func
        # over a symbolic M: the epilogue at the range's upper bound, which the template
        # checked is the same program at every M (every M-derived size: the tiling struct)
        func = specialize(func, spec.high()) if spec is not None else func
        blocks = []
        walk(func.body, lambda s: blocks.append(s) if isinstance(s, SBlock)
             and s.name_hint != "root" else None)
        self.shape = self.plan.group_shape
        self.program = epilogue_program(blocks, func, self.shape)
        self.ctype = cpp_type(self.shape.dtype)
        self.a_name, self.b_name = self.names[self.shape.a_name], self.names[self.shape.b_name]
        self.out_name = self.names[self.params[-1].name]
        runtime = getattr(self.plan, "runtime", None)
        # over a symbolic N: the epilogue's row offsets (a mask's) as expressions of the size
        self.lifted = symbolic_bases(symbolic) if runtime is not None and \
            "n" in runtime.axes and self.program is not None else {}

    @property
    def kernel_mode(self) -> str:
        """CANN's CPU-debug kernel mode: MIX_MODE is the 1:2 mix (each AIV a Matmul client),
        MIX_AIC_1_1 one AIV per AIC; the plan's ``aiv_ratio`` (in its KernelWork) chose."""
        return "MIX_MODE" if self.tiling.work.aiv_ratio == 2 else "MIX_AIC_1_1"

    @property
    def overlapped(self) -> bool:
        """Whether the plan chose asynchronous rounds and two UB tiles (``MatmulPlan``; the
        matmul-rows plan iterates synchronously)."""
        return isinstance(self.plan, MatmulPlan) and self.plan.overlapped

    # C's MatmulType position and format: tiles fetched into the UB, rows padded to 32 bytes
    c_type_args = "AscendC::TPosition::VECIN, CubeFormat::ND_ALIGN"
    # elements of one UB tile of C (and of each streamed input), and of one row slot
    tile_elems = "tiling.cube.baseM * tiling.cube.baseN"
    row_elems = "tiling.cube.baseN"

    @property
    def buffer_num(self) -> int:
        """UB tiles of the output queue and of each streamed input's queue."""
        return 2 if self.overlapped else 1

    def takes_user_workspace(self) -> bool:
        return self.overlapped

    def user_workspace_bytes(self) -> int:
        """Every client's asynchronous round slots (``MatmulPlan.workspace_bytes``); tiled at
        run time, those of every client a call may use (``MatmulRuntime.max_cores``)."""
        runtime = getattr(self.plan, "runtime", None)
        clients = runtime.max_cores if runtime is not None else self.tiling.cores
        return clients * self.plan.workspace_bytes if self.overlapped else 0

    def _gm_elems(self, index: int) -> str:
        """Elements of GM parameter ``index`` as ``SetGlobalBuffer`` is told: the static size,
        or over a symbolic M (N, K) its C++ count with the dimension read from the tiling
        struct (the field of the first product axis it is)."""
        spec = self.shape_spec()
        if spec is None:
            return str(buffer_size(self.params[index]))
        rt = self.plan.runtime
        field = {"m": "M", "n": "N", "k": "Ka"}[rt.axes[0]]
        terms = [f"static_cast<uint64_t>(tiling.cube.{field})" if entry == rt.dim else entry
                 for entry in spec.shapes[index]]
        return " * ".join(terms) or "1"

    @property
    def k_splits(self) -> int:
        """K slices of every output tile (``MatmulPlan.k_splits``; 1 for other plans)."""
        return self.plan.k_splits if isinstance(self.plan, MatmulPlan) else 1

    def zero_outputs(self) -> bool:
        """Split-K adds every slice into C atomically: the launcher zeroes C first."""
        return self.k_splits > 1

    @property
    def stream_rows(self) -> bool:
        """Whether the row inputs (a residual) move in chunks of ``rows`` rows, double-
        buffered, instead of whole base tiles (``MatmulPlan.stream_rows``)."""
        return isinstance(self.plan, MatmulPlan) and self.plan.stream_rows

    def _whole_tile_inputs(self):
        """Streamed inputs copied in as whole base tiles before the epilogue."""
        if self.stream_rows:
            return self._inputs(RowAccessKind.ROW_SLICE)
        return self._inputs(RowAccessKind.ROWS, RowAccessKind.ROW_SLICE)

    def _chunked_inputs(self):
        """Row inputs copied in a chunk of rows per epilogue step (``stream_rows``)."""
        return self._inputs(RowAccessKind.ROWS) if self.stream_rows else []

    @property
    def rows(self) -> int:
        """Rows one epilogue instruction covers (the plan's ``epilogue_rows``)."""
        return self.plan.epilogue_rows

    def _repeated_columns(self) -> list:
        """Broadcast columns repeated over ``rows`` rows for multi-row instructions."""
        return self._inputs(RowAccessKind.COLUMN) if self.rows > 1 else []

    @property
    def block_dim(self) -> int:
        """Launch blocks: AIC groups, each running ``aiv_ratio`` of the plan's clients."""
        return -(-self.tiling.cores // self.tiling.work.aiv_ratio)

    def _inputs(self, *kinds):
        if self.program is None:
            return []
        return [n for n, k in self.program.inputs.items() if k in kinds]

    # ---- printing ---------------------------------------------------------------------------
    def emit_types(self, buf):
        t = self.ctype
        with buf.indent("struct TilingData {", "};"):
            buf.line("TCubeTiling cube;      // what the Matmul API reads")
            buf.line("uint32_t batch;        // independent products")
            buf.line("uint32_t tilesM;       // singleCoreM tiles along M")
            buf.line("uint32_t tilesN;       // singleCoreN tiles along N")
            buf.line("uint32_t tilesPerCore;")
            buf.line("uint32_t totalTiles;")
            if self.k_splits > 1:
                buf.line("uint32_t kSplits;       // K slices of a tile (split-K)")
                buf.line("uint32_t kSlice;        // K of a slice (the last takes the rest)")
        gm = "AscendC::TPosition::GM"
        buf.line(f"using AType = matmul::MatmulType<{gm}, CubeFormat::ND, {t}>;")
        buf.line(f"using CType = matmul::MatmulType<{self.c_type_args}, {t}>;")
        buf.line(f"constexpr uint32_t C0 = 32 / sizeof({t});  // elements per 32-byte block")
        buf.line()

    def emit_public_members(self, buf):  # the Matmul objects
        # CFG_MDL: L1 keeps the operand blocks the tiling's depths give it across tiles
        buf.line("matmul::Matmul<AType, AType, CType, AType, CFG_MDL> mm;")

    def emit_private(self, buf):
        self.emit_tile(buf)

    def emit_buffers(self, buf):
        t = self.ctype
        for index, p in enumerate(self.params):
            n = self.names[p.name]
            kind = self.program.inputs.get(p.name) if self.program else None
            if p is self.params[-1] or n in (self.a_name, self.b_name) or \
                    kind in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE,
                             RowAccessKind.ROW_SCALAR):
                buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {t}*){n}, {self._gm_elems(index)});")
        if self.overlapped:  # this client's slots: a base tile each of the round's tiles
            buf.line("uint64_t wsElems = static_cast<uint64_t>((tiling.cube.singleCoreM + "
                     "tiling.cube.baseM - 1) / tiling.cube.baseM) * ((tiling.cube.singleCoreN + "
                     "tiling.cube.baseN - 1) / tiling.cube.baseN) * tiling.cube.baseM * "
                     "tiling.cube.baseN;")
            buf.line(f"wsGm.SetGlobalBuffer(reinterpret_cast<__gm__ {t}*>(userWorkspace) + "
                     "AscendC::GetBlockIdx() * wsElems, wsElems);")
            buf.line("mm.SetWorkspace(wsGm);")
        n_buf = self.buffer_num
        buf.line(f"pipe->InitBuffer(outQue, {n_buf}, {self.tile_elems} * sizeof({t}));")
        for name in self._whole_tile_inputs():
            buf.line(f"pipe->InitBuffer({self.names[name]}Que, {n_buf}, {self.tile_elems} * "
                     f"sizeof({t}));")
        for name in self._chunked_inputs():  # a chunk of the epilogue's rows a buffer
            buf.line(f"pipe->InitBuffer({self.names[name]}Que, {n_buf}, {self.rows} * "
                     f"{self.row_elems} * sizeof({t}));")
        emit_resident_columns(buf, [self.names[n] for n in self._inputs(RowAccessKind.COLUMN)],
                              t, "tiling.cube.N", "(tiling.cube.N + C0 - 1) / C0 * 32",
                              pipe="pipe->")
        for name in self._inputs(RowAccessKind.SCALAR):
            n = self.names[name]
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {t}*){n}, 1);")
            buf.line(f"{n}Val = {n}Gm.GetValue(0);")
        if self.plan.slots:  # temporaries as wide as the widest dtype computed in
            buf.line(f"pipe->InitBuffer(rowBuf, {self.plan.slots * self.rows} * "
                     f"{self.row_elems} * {self.plan.slot_bytes});")
        for name in self._repeated_columns():
            n = self.names[name]
            buf.line(f"pipe->InitBuffer({n}RepBuf, {self.rows} * tiling.cube.baseN * "
                     f"sizeof({t}));")
            buf.line(f"{n}Rep = {n}RepBuf.Get<{t}>();")

    def emit_process(self, buf):
        a_batch = "tiling.cube.M * tiling.cube.Ka" if self.shape.a_batched else "0"
        b_batch = "tiling.cube.Kb * tiling.cube.N" if self.shape.b_batched else "0"
        with buf.indent("__aicore__ inline void Process() {"):
            buf.line("uint32_t first = AscendC::GetBlockIdx() * tiling.tilesPerCore;")
            buf.line("uint32_t last = first + tiling.tilesPerCore;")
            buf.line("if (last > tiling.totalTiles) last = tiling.totalTiles;")
            split = self.k_splits > 1
            loop = "for (uint32_t item = first; item < last; ++item) {" if split else \
                "for (uint32_t tile = first; tile < last; ++tile) {"
            with buf.indent(loop):
                if split:  # a work item: one K slice of one tile
                    buf.line("uint32_t tile = item / tiling.kSplits, kIdx = item % "
                             "tiling.kSplits;")
                    buf.line("uint32_t kOff = kIdx * tiling.kSlice;")
                    buf.line("uint32_t singleK = tiling.cube.Ka - kOff < tiling.kSlice ? "
                             "tiling.cube.Ka - kOff : tiling.kSlice;")
                self.emit_single_tile(buf)
                k_a = " + kOff" if split else ""
                k_b = " + static_cast<uint64_t>(kOff) * tiling.cube.N" if split else ""
                buf.line("mm.SetTail(singleM, singleN, singleK);" if split else
                         "mm.SetTail(singleM, singleN);")
                buf.line(f"mm.SetTensorA({self.a_name}Gm[static_cast<uint64_t>(b) * {a_batch} "
                         f"+ static_cast<uint64_t>(mOff) * tiling.cube.Ka{k_a}]);")
                buf.line(f"mm.SetTensorB({self.b_name}Gm[static_cast<uint64_t>(b) * {b_batch}"
                         f"{k_b} + nOff]);")
                buf.line("mm.DisableBias();")
                buf.line("uint32_t round = 0;")
                if self.overlapped:
                    # the first call has the AIC compute the round's tiles into the workspace;
                    # the rest count them while the AIV fetches them in order
                    loop = "while (mm.template Iterate<false>()) {"
                else:
                    loop = "while (mm.Iterate()) {"
                with buf.indent(loop):
                    buf.line("Tile(b, mOff, nOff, singleM, singleN, round++" +
                             (", kIdx);" if split else ");"))
            buf.line("mm.End();")

    def emit_single_tile(self, buf):
        """The core's single tile from its index ``tile``: its batch, its M and N offsets and
        its extents with the tails (tiles are numbered M fastest, then N, then batch)."""
        buf.line("uint32_t b = tile / (tiling.tilesM * tiling.tilesN);")
        buf.line("uint32_t rest = tile % (tiling.tilesM * tiling.tilesN);")
        buf.line("uint32_t mOff = rest % tiling.tilesM * tiling.cube.singleCoreM;")
        buf.line("uint32_t nOff = rest / tiling.tilesM * tiling.cube.singleCoreN;")
        buf.line("uint32_t singleM = tiling.cube.M - mOff < tiling.cube.singleCoreM ? "
                 "tiling.cube.M - mOff : tiling.cube.singleCoreM;")
        buf.line("uint32_t singleN = tiling.cube.N - nOff < tiling.cube.singleCoreN ? "
                 "tiling.cube.N - nOff : tiling.cube.singleCoreN;")

    def emit_tile_position(self, buf):
        """The base tile's place from its round: index in the single tile (in the Matmul
        object's iterate order), its extents with the tails, its UB row pitch and GM offsets."""
        if self.plan.iterate_order == 0:
            buf.line("uint32_t roundM = (singleM + tiling.cube.baseM - 1) / "
                     "tiling.cube.baseM;")
            buf.line("uint32_t mIdx = round % roundM, nIdx = round / roundM;  // M fastest")
        else:
            buf.line("uint32_t roundN = (singleN + tiling.cube.baseN - 1) / "
                     "tiling.cube.baseN;")
            buf.line("uint32_t mIdx = round / roundN, nIdx = round % roundN;  // N fastest")
        buf.line("uint32_t restM = singleM - mIdx * tiling.cube.baseM;")
        buf.line("uint32_t restN = singleN - nIdx * tiling.cube.baseN;")
        buf.line("uint32_t curM = restM < static_cast<uint32_t>(tiling.cube.baseM) ? restM : "
                 "tiling.cube.baseM;")
        buf.line("uint32_t curN = restN < static_cast<uint32_t>(tiling.cube.baseN) ? restN : "
                 "tiling.cube.baseN;")
        buf.line("uint32_t stride = (curN + C0 - 1) / C0 * C0;  // UB row pitch")
        buf.line("uint64_t rowOff = static_cast<uint64_t>(b) * tiling.cube.M + mOff + "
                 "mIdx * tiling.cube.baseM;")
        buf.line("uint32_t colOff = nOff + nIdx * tiling.cube.baseN;")

    def emit_tile(self, buf):
        t = self.ctype
        split = self.k_splits > 1
        k_param = ", uint32_t kIdx" if split else ""
        with buf.indent("__aicore__ inline void Tile(uint32_t b, uint32_t mOff, uint32_t nOff, "
                        f"uint32_t singleM, uint32_t singleN, uint32_t round{k_param}) {{"):
            self.emit_tile_position(buf)
            buf.line(f"AscendC::LocalTensor<{t}> cTile = outQue.AllocTensor<{t}>();")
            sync = "false" if self.overlapped else "true"
            buf.line(f"mm.template GetTensorC<{sync}, true>(cTile, 0, true, curM, curN);")
            if self.program is not None and split:
                # the epilogue is scale * C + t: its offset once (the first slice), its
                # scale on every slice
                with buf.indent("if (kIdx == 0) {", None):
                    self.emit_epilogue(buf)
                if self.plan.split_scale != 1.0:
                    with buf.indent("} else {", "}"):
                        buf.line(f"AscendC::Muls(cTile, cTile, static_cast<{t}>("
                                 f"{self.plan.split_scale!r}), curM * stride);")
                else:
                    buf.line("}")
            elif self.program is not None:
                self.emit_epilogue(buf)
            buf.line("outQue.EnQue(cTile);")
            buf.line(f"cTile = outQue.DeQue<{t}>();")
            if split:  # the slices add into the C the launcher zeroed
                buf.line(f"AscendC::SetAtomicAdd<{t}>();")
            buf.line(f"CopyTileOut({self.out_name}Gm[rowOff * tiling.cube.N + colOff], cTile, "
                     "curM, curN, stride, tiling.cube.N);")
            if split:
                buf.line("AscendC::SetAtomicNone();")
            buf.line("outQue.FreeTensor(cTile);")

    def emit_epilogue(self, buf):
        t = self.ctype
        for name in self._whole_tile_inputs():
            if self.program.inputs[name] is not RowAccessKind.ROWS:
                continue
            n = self.names[name]
            buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.AllocTensor<{t}>();")
            buf.line(f"CopyTileIn({n}Tile, {n}Gm[rowOff * tiling.cube.N + colOff], curM, curN, "
                     "stride, tiling.cube.N);")
            buf.line(f"{n}Que.EnQue({n}Tile);")
            buf.line(f"{n}Tile = {n}Que.DeQue<{t}>();")
        for name in self._inputs(RowAccessKind.ROW_SLICE):  # a broadcast mask: a slice per row
            n = self.names[name]
            base = self.row_offset(name)
            buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.AllocTensor<{t}>();")
            with buf.indent("for (uint32_t r = 0; r < curM; ++r) {"):
                buf.line("uint64_t row = rowOff + r;")
                buf.line(f"CopyGmToUb({n}Tile[r * stride], {n}Gm[{base} + colOff], curN);")
            buf.line(f"{n}Que.EnQue({n}Tile);")
            buf.line(f"{n}Tile = {n}Que.DeQue<{t}>();")
        if self.rows == 1:
            with buf.indent("for (uint32_t r = 0; r < curM; ++r) {"):
                buf.line("uint64_t row = rowOff + r;")
                self.emit_chunk_in(buf, "1")
                self.emit_epilogue_row(buf)
                self.emit_chunk_free(buf)
        else:
            self.emit_epilogue_chunks(buf)
        for name in self._whole_tile_inputs():
            buf.line(f"{self.names[name]}Que.FreeTensor({self.names[name]}Tile);")

    def row_offset(self, name: str) -> str:
        """C++ offset of row ``row``'s data in epilogue input ``name``: the template's, or
        over a symbolic N its expression of the size, read from the tiling struct."""
        row = {self.program.row_var.name: "row"}
        if name in self.lifted:
            size = "static_cast<int64_t>(tiling.cube.N)"
            return ScalarPrinter({**row, self.plan.runtime.dim: size}).print(self.lifted[name])
        return ScalarPrinter(row).print(self.program.bases[name])

    def emit_chunk_in(self, buf, rows: str):
        """Copy in ``rows`` rows from row ``r`` of each chunked row input (``stream_rows``):
        the queue holds two chunks, so the next chunk's copy overlaps this one's epilogue."""
        t = self.ctype
        for name in self._chunked_inputs():
            n = self.names[name]
            buf.line(f"AscendC::LocalTensor<{t}> {n}Tile = {n}Que.AllocTensor<{t}>();")
            buf.line(f"CopyTileIn({n}Tile, {n}Gm[(rowOff + r) * tiling.cube.N + colOff], "
                     f"{rows}, curN, stride, tiling.cube.N);")
            buf.line(f"{n}Que.EnQue({n}Tile);")
            buf.line(f"{n}Tile = {n}Que.DeQue<{t}>();")

    def emit_chunk_free(self, buf):
        for name in self._chunked_inputs():
            buf.line(f"{self.names[name]}Que.FreeTensor({self.names[name]}Tile);")

    def emit_epilogue_chunks(self, buf):
        """The epilogue over ``rows`` rows per instruction: the tiles' rows are ``stride``
        apart, so rows ``r .. r + rows`` are one run of ``rows * stride`` elements (padding
        columns computed, never written out); broadcast columns are repeated over the rows
        first, once a tile."""
        t, rows = self.ctype, self.rows
        repeated = self._repeated_columns()
        if repeated:
            buf.line(f"uint32_t repRows = curM < {rows} ? curM : {rows};")
            with buf.indent("for (uint32_t q = 0; q < repRows; ++q) {"):
                for name in repeated:
                    n = self.names[name]
                    buf.line(f"AscendC::Adds({n}Rep[q * stride], {n}Col[colOff], "
                             f"static_cast<{t}>(0), curN);")
        with buf.indent(f"for (uint32_t r = 0; r < curM; r += {rows}) {{"):
            buf.line(f"uint32_t chunk = curM - r < {rows} ? curM - r : {rows};")
            buf.line("uint32_t count = chunk * stride;")
            self.emit_chunk_in(buf, "chunk")
            self.emit_epilogue_step(buf, "count", f"{rows} * tiling.cube.baseN")
            self.emit_chunk_free(buf)

    def emit_epilogue_row(self, buf):
        self.emit_epilogue_step(buf, "curN", "tiling.cube.baseN")

    def product_tile(self, buffer) -> str:
        """The UB tile holding product ``buffer`` (a load the epilogue reads as given)."""
        return "cTile"

    def emit_epilogue_step(self, buf, count: str, slot_elems: str):
        """One epilogue step over the run of ``count`` elements at row ``r``: one row
        (``count`` = curN) or several (``count`` = their rows * stride); temporaries are
        slots of ``slot_elems`` elements."""
        program = self.program
        tiles, scalars = {}, {}
        row_var = {program.row_var.name: "row"}
        for key, (kind, buffer, step) in program.loads.items():
            n = self.names.get(buffer.name, ident(buffer.name))
            if kind is RowAccessKind.INTERMEDIATE and step == -1:
                tiles[key] = Operand(f"{self.product_tile(buffer)}[r * stride]", True,
                                     self.shape.dtype)
            elif kind is RowAccessKind.ROWS and self.stream_rows:  # this step's chunk
                tiles[key] = Operand(f"{n}Tile", True, self.shape.dtype)
            elif kind in (RowAccessKind.ROWS, RowAccessKind.ROW_SLICE):
                tiles[key] = Operand(f"{n}Tile[r * stride]", True, self.shape.dtype)
            elif kind is RowAccessKind.COLUMN:
                text = f"{n}Rep" if self.rows > 1 else f"{n}Col[colOff]"
                tiles[key] = Operand(text, True, self.shape.dtype)
            elif kind is RowAccessKind.ROW_SCALAR:
                base = self.row_offset(buffer.name)
                scalars[key] = f"{n}Gm.GetValue({base})"
            elif kind is RowAccessKind.SCALAR:
                scalars[key] = f"{n}Val"
            else:
                raise CodegenError(f"{self.symbol}: epilogue load of kind {kind.value}")
        (step,) = program.steps  # the epilogue is inlined into one block by the template
        printer = TileProgramPrinter(self.symbol, ScalarPrinter(scalars, expr_key))

        def slot(k, node):
            ctype = cpp_type(expr_dtype(node))
            return (f"rowBuf.GetWithOffset<{ctype}>({slot_elems}, "
                    f"{k} * {slot_elems} * {self.plan.slot_bytes})")

        root = printer.emit(buf, step.plan, tiles, "cTile[r * stride]", slot, count)
        if root.text != "cTile[r * stride]":
            printer.emit_copy(buf, "cTile[r * stride]", root, count)

    def emit_members(self, buf):
        t = self.ctype
        buf.line("TilingData tiling;")
        for p in self.params:
            buf.line(f"AscendC::GlobalTensor<{t}> {self.names[p.name]}Gm;")
        if self.overlapped:
            buf.line(f"AscendC::GlobalTensor<{t}> wsGm;  // the asynchronous rounds' slots")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        for name in self._inputs(RowAccessKind.ROWS, RowAccessKind.ROW_SLICE):
            buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> {self.names[name]}Que;")
        for name in self._inputs(RowAccessKind.COLUMN):
            buf.line(f"AscendC::TBuf<AscendC::TPosition::VECCALC> {self.names[name]}Res;")
            buf.line(f"AscendC::LocalTensor<{t}> {self.names[name]}Col;")
        for name in self._repeated_columns():
            buf.line(f"AscendC::TBuf<AscendC::TPosition::VECCALC> {self.names[name]}RepBuf;")
            buf.line(f"AscendC::LocalTensor<{t}> {self.names[name]}Rep;")
        for name in self._inputs(RowAccessKind.SCALAR):
            buf.line(f"{t} {self.names[name]}Val;")
        if self.plan.slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf;")

    # ---- what the launcher needs ------------------------------------------------------------
    def emit_tiling_init(self, buf, var: str) -> None:
        p, s, t = self.plan, self.plan.shape, self.tiling  # the product as the plan tiled it
        values = {"usedCoreNum": t.cores, "M": s.m, "N": s.n, "Ka": s.k, "Kb": s.k,
                  "singleCoreM": p.single_m, "singleCoreN": p.single_n,
                  "singleCoreK": s.k, "baseM": p.base_m, "baseN": p.base_n,
                  "baseK": p.base_k, "depthA1": p.depth_a1, "depthB1": p.depth_b1,
                  "isBias": 0, "iterateOrder": p.iterate_order, "dbL0A": 2, "dbL0B": 2,
                  "dbL0C": 1, **mdl_steps(p)}
        buf.line(f"{self.symbol}_impl::TilingData {var}{{}};")
        emit_field_assignments(buf, self.symbol, var, "int32_t",
                               {f"cube.{field}": values[field] for field in CUBE_FIELDS})
        emit_field_assignments(buf, self.symbol, var, "uint32_t", {
            "batch": s.batch, "tilesM": -(-s.m // p.single_m),
            "tilesN": -(-s.n // p.single_n), "tilesPerCore": t.block_len,
            "totalTiles": t.total,
            **({"kSplits": p.k_splits, "kSlice": p.k_slice} if self.k_splits > 1 else {})})



    # ---- a symbolic M (N, K): the host tiling function ------------------------------------
    def tiling_values(self) -> dict:
        """The TilingData fields a call's tiling sets from its sizes (the host tiling
        function's JSON form reports these; a static axis keeps the bound plan's)."""
        axes = self.plan.runtime.axes
        fields = ["cube.M", "cube.usedCoreNum", "cube.baseM", "cube.singleCoreM"]
        if "n" in axes or "k" in axes:
            fields += ["cube.N", "cube.baseN", "cube.singleCoreN"]
        if "k" in axes:
            fields += ["cube.Ka", "cube.Kb", "cube.singleCoreK", "cube.baseK", "cube.stepM",
                       "cube.stepN", "cube.stepKa", "cube.stepKb"]
        return dict.fromkeys(fields + ["batch", "tilesM", "tilesN", "tilesPerCore",
                                       "totalTiles"])

    def emit_tiling_body(self, buf, dims: dict) -> None:
        """``matmul_tiling_at`` in C++: the bound plan's TilingData with the call's M, N, K
        (those the dimension is), its baseM and baseN (the bound's, or the size rounded up to
        16 where less: ``matmul_call_bases``) and K step (the bound's, or K rounded up to the
        32-byte block), singleM one base block (singleN too where N or K is symbolic), the
        MDL steps of its K steps (``mdl_steps``), its tiles (the last ones the tails) of
        every batch over at most ``max_cores`` clients in contiguous ranges, blockDim their
        AIC groups. Every buffer the kernel sizes from the base tiles (UB tiles, workspace
        slots) then shrinks with them."""
        p, rt = self.plan, self.plan.runtime
        s = p.shape
        self.emit_tiling_init(buf, "bound")
        buf.line("out.tiling = bound;")
        buf.line(f"uint64_t size = static_cast<uint64_t>({dims[rt.dim]});")
        for axis in ("m", "n", "k"):
            value = "size" if axis in rt.axes else str(getattr(s, axis))
            buf.line(f"uint64_t {axis} = {value};")
        c0 = 32 // (2 if s.dtype == "float16" else 4)
        buf.line("uint64_t mTile = (m + 15) / 16 * 16;  // M rounded up to the fractal")
        buf.line(f"if (mTile > {p.base_m}) mTile = {p.base_m};  // the bound's baseM")
        buf.line("uint64_t nTile = (n + 15) / 16 * 16;  // N rounded up to the fractal")
        buf.line(f"if (nTile > {p.base_n}) nTile = {p.base_n};  // the bound's baseN")
        buf.line(f"uint64_t kTile = (k + {c0 - 1}) / {c0} * {c0};  // K in 32-byte blocks")
        buf.line(f"if (kTile > {p.base_k}) kTile = {p.base_k};  // the bound's K step")
        single_n = "nTile" if rt.single_n_at_run_time else str(p.single_n)
        buf.line(f"uint64_t singleN = {single_n};")
        buf.line("uint64_t tilesM = (m + mTile - 1) / mTile;")
        buf.line("uint64_t tilesN = (n + singleN - 1) / singleN;")
        buf.line(f"uint64_t total = static_cast<uint64_t>({s.batch}) * tilesM * tilesN;")
        buf.line(f"uint64_t cores = total < {rt.max_cores} ? total : {rt.max_cores};")
        buf.line("uint64_t perCore = (total + cores - 1) / cores;")
        buf.line("cores = (total + perCore - 1) / perCore;  // the clients that get tiles")
        fields = {"M": "m", "baseM": "mTile", "singleCoreM": "mTile", "usedCoreNum": "cores",
                  "N": "n", "baseN": "nTile", "singleCoreN": "singleN", "Ka": "k", "Kb": "k",
                  "singleCoreK": "k", "baseK": "kTile"}
        for field, value in fields.items():
            buf.line(f"out.tiling.cube.{field} = static_cast<int32_t>({value});")
        # CFG_MDL's steps of a call's K steps (mdl_steps): a kept operand's whole K panel
        buf.line("uint64_t kSteps = (k + kTile - 1) / kTile;")
        for depth, step_k, step_other in ((p.depth_a1, "stepKa", "stepM"),
                                          (p.depth_b1, "stepKb", "stepN")):
            with buf.indent(f"if ({depth} >= kSteps) {{", None):
                buf.line(f"out.tiling.cube.{step_k} = static_cast<int32_t>(kSteps);")
                buf.line(f"out.tiling.cube.{step_other} = static_cast<int32_t>({depth} / kSteps "
                         f"> 1 ? {depth} / kSteps : 1);")
            with buf.indent("} else {", "}"):
                buf.line(f"out.tiling.cube.{step_k} = 1;")
                buf.line(f"out.tiling.cube.{step_other} = 1;")
        buf.line("out.tiling.tilesM = static_cast<uint32_t>(tilesM);")
        buf.line("out.tiling.tilesN = static_cast<uint32_t>(tilesN);")
        buf.line("out.tiling.tilesPerCore = static_cast<uint32_t>(perCore);")
        buf.line("out.tiling.totalTiles = static_cast<uint32_t>(total);")
        ratio = self.tiling.work.aiv_ratio
        buf.line(f"out.blockDim = static_cast<int64_t>((cores + {ratio} - 1) / {ratio});")
