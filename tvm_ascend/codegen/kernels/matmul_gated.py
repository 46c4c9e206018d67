"""Prints a gated MatMul kernel (SwiGLU): two products of one A, joined in the epilogue.

The matmul kernel (``kernels/matmul.py``) with a second Matmul object: ``mm`` multiplies A by
the first product's weights, ``mm2`` by the second's, both on the same TCubeTiling, so they
walk the same base tiles. Each core takes its contiguous range of output tiles; per tile both
objects get the tile's A and B panels and tails, and ``while (mm.Iterate()) { mm2.Iterate();
Tile(...); }`` steps them together: each base tile is fetched into the UB from both
(``GetTensorC<true>``: C of the first product in ``cTile``, of the second in ``gTile``), the
epilogue (``silu(gate) * up``) runs over their rows, and the output tile is written once.
Synchronous and single-buffered (``GatedMatmulPlan.pipeline`` says why).

Example
-------
>>> printer = GatedMatmulKernelPrinter("k0", scheduled_func, tiling)    # doctest: +SKIP
>>> buf = CodeBuffer(); printer.print(buf)                              # doctest: +SKIP
>>> "mm2.Iterate();" in buf.text()                                      # doctest: +SKIP
True
"""
from __future__ import annotations

from ...errors import CodegenError
from ...schedules.analysis.tile_values import buffer_size
from ...schedules.analysis.tir_walk import SBlock, walk
from ...schedules.matmul_gated import GatedMatmulPlan, gated_products, gated_program
from ..cpp_types import cpp_type
from ..kernel_printer import CubeKernelPrinter
from .matmul import MatmulKernelPrinter


class GatedMatmulKernelPrinter(MatmulKernelPrinter):
    """Prints one gated MatMul (two products + joint epilogue) kernel."""

    plan_type = GatedMatmulPlan
    matmuls = (("mm", "cube"), ("mm2", "cube"))  # both objects walk the same tiling

    def __init__(self, symbol: str, func, tiling):
        CubeKernelPrinter.__init__(self, symbol, func, tiling)
        if not isinstance(tiling.plan, GatedMatmulPlan):
            raise CodegenError(f"{symbol}: the {tiling.template} tiling carries no "
                               "GatedMatmulPlan; schedule the group again")
        products = gated_products(func)
        if products is None:
            raise CodegenError(f"{symbol}: the scheduled group has no two products of one A")
        self.plan = tiling.plan
        blocks = []
        walk(func.body, lambda s: blocks.append(s) if isinstance(s, SBlock)
             and s.name_hint != "root" else None)
        self.shape = self.plan.group_shape
        self.program = gated_program(blocks, func, products)
        self.ctype = cpp_type(self.shape.dtype)
        self.a_name = self.names[products.shape.a_name]
        self.b_name = self.names[products.shape.b_name]
        self.b2_name = self.names[products.second_b]
        self.out_name = self.names[self.params[-1].name]
        # the second product's C buffer (by identity: both may be named "matmul"): its loads
        # read gTile, the first's cTile
        self.second_c = blocks[1].body.buffer

    def product_tile(self, buffer) -> str:
        return "gTile" if buffer.same_as(self.second_c) else "cTile"

    def emit_public_members(self, buf):
        buf.line("matmul::Matmul<AType, AType, CType, AType, CFG_MDL> mm;   // A x first B")
        buf.line("matmul::Matmul<AType, AType, CType, AType, CFG_MDL> mm2;  // A x second B")

    def emit_buffers(self, buf):
        super().emit_buffers(buf)
        n = self.b2_name
        param = next(p for p in self.params if self.names[p.name] == n)
        buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {self.ctype}*){n}, {buffer_size(param)});")
        buf.line(f"pipe->InitBuffer(gQue, 1, {self.tile_elems} * sizeof({self.ctype}));")

    def emit_members(self, buf):
        super().emit_members(buf)
        buf.line("AscendC::TQue<AscendC::QuePosition::VECIN, 1> gQue;  // the second C tile")

    def emit_process(self, buf):
        a_batch = "tiling.cube.M * tiling.cube.Ka" if self.shape.a_batched else "0"
        with buf.indent("__aicore__ inline void Process() {"):
            buf.line("uint32_t first = AscendC::GetBlockIdx() * tiling.tilesPerCore;")
            buf.line("uint32_t last = first + tiling.tilesPerCore;")
            buf.line("if (last > tiling.totalTiles) last = tiling.totalTiles;")
            with buf.indent("for (uint32_t tile = first; tile < last; ++tile) {"):
                self.emit_single_tile(buf)
                a_at = (f"{self.a_name}Gm[static_cast<uint64_t>(b) * {a_batch} + "
                        "static_cast<uint64_t>(mOff) * tiling.cube.Ka]")
                for mm, b_name in (("mm", self.b_name), ("mm2", self.b2_name)):
                    buf.line(f"{mm}.SetTail(singleM, singleN);")
                    buf.line(f"{mm}.SetTensorA({a_at});")
                    buf.line(f"{mm}.SetTensorB({b_name}Gm[nOff]);  // weights shared by the batch")
                    buf.line(f"{mm}.DisableBias();")
                buf.line("uint32_t round = 0;")
                with buf.indent("while (mm.Iterate()) {"):
                    buf.line("mm2.Iterate();  // the same base tile of the second product")
                    buf.line("Tile(b, mOff, nOff, singleM, singleN, round++);")
            buf.line("mm.End();")
            buf.line("mm2.End();")

    def emit_tile(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void Tile(uint32_t b, uint32_t mOff, uint32_t nOff, "
                        "uint32_t singleM, uint32_t singleN, uint32_t round) {"):
            self.emit_tile_position(buf)
            buf.line(f"AscendC::LocalTensor<{t}> cTile = outQue.AllocTensor<{t}>();")
            buf.line(f"AscendC::LocalTensor<{t}> gTile = gQue.AllocTensor<{t}>();")
            buf.line("mm.template GetTensorC<true, true>(cTile, 0, true, curM, curN);")
            buf.line("mm2.template GetTensorC<true, true>(gTile, 0, true, curM, curN);")
            self.emit_epilogue(buf)
            buf.line("gQue.FreeTensor(gTile);")
            buf.line("outQue.EnQue(cTile);")
            buf.line(f"cTile = outQue.DeQue<{t}>();")
            buf.line(f"CopyTileOut({self.out_name}Gm[rowOff * tiling.cube.N + colOff], cTile, "
                     "curM, curN, stride, tiling.cube.N);")
            buf.line("outQue.FreeTensor(cTile);")


__all__ = ["GatedMatmulKernelPrinter"]
