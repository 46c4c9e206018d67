"""Prints an elementwise kernel from its scheduled TIR: CopyIn / Compute / CopyOut over TQue.

The loop nest ``[core (ascend.block_idx), tile, element]`` and the block's expression come from
the scheduled PrimFunc; sizes come from the Tiling; the UB slots of intermediate values come from
the same ``plan_tile_values`` the template sized the UB with.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from ...errors import CodegenError
from ...schedules.analysis.tile_values import (AccessKind, buffer_size, classify_load, expr_key,
                                     make_analyzer, plan_tile_values)
from ...schedules.analysis.tir_walk import expr_dtype, first_block_realize, param_buffers
from ...schedules.symbolic import specialize
from ..cpp_types import cpp_type
from ..kernel_parts import TilingField, ident
from ..kernel_printer import ELEMENT_SHARE, TileLoop, VectorKernelPrinter
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..tiling_func import numel_expr
from ..vector_emitters import Operand



@dataclass
class InputSpec:
    """One kernel input and how it reaches the UB."""

    name: str        # C++ identifier stem
    buffer: object   # TIR buffer
    kind: AccessKind
    offset: object   # flat offset expression (in ``flat``)
    resident: bool = False

    @property
    def ctype(self) -> str:
        return cpp_type(str(self.buffer.dtype))

    @property
    def size(self) -> int:
        return buffer_size(self.buffer)


class ElementwiseKernelPrinter(VectorKernelPrinter):
    """Prints one elementwise kernel (class + extern "C" entry) into a CodeBuffer."""

    share = ELEMENT_SHARE
    copied_fields = ("tileLength",)
    loop = TileLoop("tileLength", "len", "len")

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        self._analyse()

    # ---- analysis of the scheduled TIR -------------------------------------------------------
    def _analyse(self) -> None:
        spec = self.shape_spec()
        # over symbolic dimensions: the program at the range's upper bound, which the
        # template checked reads every input as at the other sizes (sizes: tiling struct)
        func = specialize(self.func, spec.high()) if spec is not None else self.func
        core_loop = self._core_loop(func.body)
        realize = first_block_realize(core_loop)
        store = realize.block.body
        self.flat = tirx.Var("f", "int64")
        inputs, outputs = param_buffers(func)
        self.out_buffer = outputs[0]
        bindings = {iv.var: value for iv, value in zip(realize.block.iter_vars,
                                                        realize.iter_values)}
        loops = self._loop_vars(core_loop)
        total = self.tiling.total
        bindings.update({loops[0]: tirx.IntImm("int64", 0), loops[1]: tirx.IntImm("int64", 0),
                         loops[2]: self.flat})
        analyzer = make_analyzer(self.flat, total, bindings)
        self.plan = plan_tile_values(store.value,
                                     lambda ld: classify_load(ld, analyzer, self.flat, total))
        if self.plan.n_slots != self.tiling.temp_buffers:
            raise CodegenError(f"{self.symbol}: {self.plan.n_slots} UB slots needed but the "
                               f"tiling planned {self.tiling.temp_buffers}")
        resident = self.tiling.plan.resident_inputs
        self.inputs: dict[str, InputSpec] = {}
        for index, (key, access) in enumerate(self.plan.accesses.items()):
            name = f"in{index}_{ident(access.buffer.name)}"[:40]
            self.inputs[key] = InputSpec(name, access.buffer, access.kind, access.offset,
                                         access.kind is AccessKind.GATHER
                                         and access.buffer.name in resident)
        self.out_dtype = str(self.out_buffer.dtype)
        self.slot_bytes = self.tiling.plan.slot_bytes
        self.scalars = ScalarPrinter({k: f"{s.name}Val" for k, s in self.inputs.items()
                                      if s.kind is AccessKind.SCALAR}, expr_key)

    @staticmethod
    def _core_loop(stmt):
        while not (isinstance(stmt, tirx.For) and "ascend.block_idx" in stmt.annotations):
            stmt = getattr(stmt, "body", None) or getattr(stmt, "block", None)
            if stmt is None:
                raise CodegenError("scheduled function has no ascend.block_idx loop; it was not "
                                   "tiled by a tvm-ascend template")
        return stmt

    @staticmethod
    def _loop_vars(core_loop) -> list:
        loops, stmt = [], core_loop
        while isinstance(stmt, tirx.For):
            loops.append(stmt.loop_var)
            stmt = stmt.body
        if len(loops) != 3:
            raise CodegenError(f"expected loops [core, tile, element], found {len(loops)}")
        return loops

    # ---- printing ---------------------------------------------------------------------------
    def emit_tiling_constants(self, buf):
        buf.line(f"constexpr int32_t BUFFER_NUM = {self.tiling.buffer_num};")
        buf.line(f"constexpr uint32_t SLOT_BYTES = {self.slot_bytes};  // per element, temps")

    def emit_buffers(self, buf):
        for spec in self.inputs.values():
            self.emit_input_init(buf, spec)
        out_type = cpp_type(self.out_dtype)
        buf.line(f"outGm.SetGlobalBuffer((__gm__ {out_type}*){ident(self.out_buffer.name)}"
                 " + blockStart, blockLen);")
        buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, tileLength * sizeof({out_type}));")
        if self.tiling.temp_buffers:
            buf.line(f"pipe.InitBuffer(tmpBuf, {self.tiling.temp_buffers} * tileLength * "
                     "SLOT_BYTES);")

    def emit_input_init(self, buf, spec: InputSpec):
        gm = f"(__gm__ {spec.ctype}*){ident(spec.buffer.name)}"
        if spec.kind is AccessKind.FULL:
            buf.line(f"{spec.name}Gm.SetGlobalBuffer({gm} + blockStart, blockLen);")
            buf.line(f"pipe.InitBuffer({spec.name}Que, BUFFER_NUM, tileLength * "
                     f"sizeof({spec.ctype}));")
        elif spec.kind is AccessKind.SCALAR:
            buf.line(f"{spec.name}Gm.SetGlobalBuffer({gm}, {spec.size});")
            offset = ScalarPrinter({}).print(spec.offset)
            buf.line(f"{spec.name}Val = {spec.name}Gm.GetValue({offset});")
        else:
            buf.line(f"{spec.name}Gm.SetGlobalBuffer({gm}, {spec.size});")
            buf.line(f"pipe.InitBuffer({spec.name}Que, BUFFER_NUM, tileLength * "
                     f"sizeof({spec.ctype}));")
            if spec.resident:
                buf.line(f"pipe.InitBuffer({spec.name}Res, {spec.size} * sizeof({spec.ctype}));")
                buf.line(f"{spec.name}Local = {spec.name}Res.Get<{spec.ctype}>();")
                buf.line(f"CopyGmToUb({spec.name}Local, {spec.name}Gm, {spec.size});")
                # The gather loop reads it on the scalar pipe: wait for MTE2 to land it.
                buf.line("AscendC::SetFlag<AscendC::HardEvent::MTE2_S>(0);")
                buf.line("AscendC::WaitFlag<AscendC::HardEvent::MTE2_S>(0);")

    def emit_copy_in(self, buf):
        with buf.indent("__aicore__ inline void CopyIn(uint32_t i, uint32_t len) {"):
            for spec in self.inputs.values():
                if spec.kind is AccessKind.SCALAR:
                    continue
                local = f"{spec.name}Tile"
                buf.line(f"AscendC::LocalTensor<{spec.ctype}> {local} = "
                         f"{spec.name}Que.AllocTensor<{spec.ctype}>();")
                if spec.kind is AccessKind.FULL:
                    buf.line(f"CopyGmToUb({local}, {spec.name}Gm[static_cast<uint64_t>(i) * "
                             "tileLength], len);")
                else:
                    self.emit_gather(buf, spec, local)
                buf.line(f"{spec.name}Que.EnQue({local});")

    def emit_gather(self, buf, spec: InputSpec, local: str):
        """Broadcast of a general kind: element k of the tile reads source[offset(f)]."""
        index = ScalarPrinter({"f": "f"}).print(spec.offset)
        source = f"{spec.name}Local" if spec.resident else f"{spec.name}Gm"
        with buf.indent("for (uint32_t k = 0; k < len; ++k) {"):
            buf.line("int64_t f = static_cast<int64_t>(blockStart + "
                     "static_cast<uint64_t>(i) * tileLength + k);")
            buf.line(f"{local}.SetValue(k, {source}.GetValue({index}));")

    def emit_compute(self, buf):
        with buf.indent("__aicore__ inline void Compute(uint32_t len) {"):
            operands = {}
            for key, spec in self.inputs.items():
                if spec.kind is AccessKind.SCALAR:
                    operands[key] = Operand(f"{spec.name}Val", False, str(spec.buffer.dtype))
                else:
                    buf.line(f"AscendC::LocalTensor<{spec.ctype}> {spec.name}Tile = "
                             f"{spec.name}Que.DeQue<{spec.ctype}>();")
                    operands[key] = Operand(f"{spec.name}Tile", True, str(spec.buffer.dtype))
            out_type = cpp_type(self.out_dtype)
            buf.line(f"AscendC::LocalTensor<{out_type}> outTile = "
                     f"outQue.AllocTensor<{out_type}>();")
            self._declared_slots = set()
            program = TileProgramPrinter(self.symbol, self.scalars)
            root = program.emit(buf, self.plan, operands, "outTile",
                                lambda slot, node: self.emit_slot(buf, slot, node), "len")
            if root.text != "outTile":
                program.emit_copy(buf, "outTile", root, "len")
            buf.line("outQue.EnQue(outTile);")
            for spec in self.inputs.values():
                if spec.kind is not AccessKind.SCALAR:
                    buf.line(f"{spec.name}Que.FreeTensor({spec.name}Tile);")

    def emit_slot(self, buf, slot, node) -> str:
        """The temp tile of ``node``: slot ``k`` of tmpBuf, viewed as the node's dtype."""
        ctype = cpp_type(expr_dtype(node))
        name = f"t{slot}" if ctype == cpp_type(self.out_dtype) else f"t{slot}_{ctype}"
        if name not in self._declared_slots:
            self._declared_slots.add(name)
            buf.line(f"AscendC::LocalTensor<{ctype}> {name} = tmpBuf.GetWithOffset<{ctype}>("
                     f"tileLength, {slot} * tileLength * SLOT_BYTES);")
        return name

    def emit_copy_out(self, buf):
        out_type = cpp_type(self.out_dtype)
        with buf.indent("__aicore__ inline void CopyOut(uint32_t i, uint32_t len) {"):
            buf.line(f"AscendC::LocalTensor<{out_type}> outTile = outQue.DeQue<{out_type}>();")
            buf.line("CopyUbToGm(outGm[static_cast<uint64_t>(i) * tileLength], outTile, len);")
            buf.line("outQue.FreeTensor(outTile);")

    def emit_members(self, buf):
        buf.line("AscendC::TPipe pipe;")
        for spec in self.inputs.values():
            buf.line(f"AscendC::GlobalTensor<{spec.ctype}> {spec.name}Gm;")
            if spec.kind is AccessKind.SCALAR:
                buf.line(f"{spec.ctype} {spec.name}Val;")
            else:
                buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> {spec.name}Que;")
            if spec.resident:
                buf.line(f"AscendC::TBuf<AscendC::TPosition::VECCALC> {spec.name}Res;")
                buf.line(f"AscendC::LocalTensor<{spec.ctype}> {spec.name}Local;")
        buf.line(f"AscendC::GlobalTensor<{cpp_type(self.out_dtype)}> outGm;")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        if self.tiling.temp_buffers:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> tmpBuf;")
        self.emit_share_members(buf, "tileLength")

    def emit_tiling_body(self, buf, dims: dict) -> None:
        """``ElementwiseSchedule``'s ``_tiles`` in C++ (``elementwise_tiling_at`` in Python):
        cores of at least ``align`` elements, tiles of at most the ones the UB was sized for."""
        rt = self.tiling.plan.runtime
        out_shape = rt.shapes.shapes[-1]
        buf.line(f"uint64_t total = static_cast<uint64_t>({numel_expr(out_shape, dims)});")
        buf.line(f"const uint64_t align = {rt.align};  // elements of one 32-byte block")
        buf.line(f"const uint64_t tileCap = {rt.tile_cap};  // the UB tiles' size at the bound")
        buf.line("uint64_t cores = (total + align - 1) / align;")
        buf.line(f"if (cores > {rt.max_cores}) cores = {rt.max_cores};")
        buf.line("if (cores < 1) cores = 1;")
        buf.line("uint64_t perCore = ((total + cores - 1) / cores + align - 1) / align * align;")
        buf.line("uint64_t tile = perCore < tileCap ? perCore : tileCap;")
        buf.line("uint64_t block = (perCore + tile - 1) / tile * tile;")
        buf.line("out.tiling.totalLength = total;")
        buf.line("out.tiling.blockLength = block;")
        buf.line("out.tiling.tileLength = static_cast<uint32_t>(tile);")
        buf.line("out.blockDim = static_cast<int64_t>((total + block - 1) / block);")

    def tiling_fields(self) -> list[TilingField]:
        t = self.tiling
        return [TilingField("uint64_t", "totalLength", t.total, "elements of the output"),
                TilingField("uint64_t", "blockLength", t.block_len,
                            "elements per core (the last core takes the rest)"),
                TilingField("uint32_t", "tileLength", t.tile_len, "elements per UB tile")]


__all__ = ["ElementwiseKernelPrinter"]
