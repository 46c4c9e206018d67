"""Prints a data-movement kernel (slices, concats, pads, expands, gathers, transposes with their
elementwise consumer) from the MovementProgram of its scheduled TIR.

Per tile of ``tileRows`` output rows: CopyIn stages every operand's sources in the UB (row runs,
box copies of strided columns, per-row spans) with DataCopy/DataCopyPad; Compute fills constant
columns with Duplicate, permutes staged operands into row tiles with one vector ``Gather``
(offsets built once per core), runs the consumer's elementwise program and CopyOut writes the
rows once.
"""
from __future__ import annotations

from ...errors import CodegenError
from ...schedules.analysis.movement_program import Choice, Leaf, index_loads, movement_program
from ...schedules.analysis.tile_values import buffer_size, expr_key, flat_offset
from ...schedules.analysis.tir_walk import load_buffer
from ..cpp_types import cpp_type, float_literal
from ..kernel_printer import RowKernelPrinter
from ..scalar_printer import ScalarPrinter
from ..tile_program import TileProgramPrinter
from ..vector_emitters import Operand
from .row_reduce import emit_row_tiling_body

_COMPARE = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "EQ": "==", "NE": "!=",
            "And": "&&", "Or": "||"}


class IndexPrinter(ScalarPrinter):
    """Row bases and conditions: integer arithmetic on ``r`` and index loads read from GM."""

    def __init__(self, row: str, names: dict):
        super().__init__({"r": row})
        self.gm_names = names

    def print_TensorLoad(self, expr) -> str:
        buffer = load_buffer(expr)
        offset = self.print(flat_offset(buffer, expr.indices))
        return f"static_cast<int64_t>({self.gm_names[buffer.name]}Gm.GetValue({offset}))"

    def print_Not(self, expr) -> str:
        return f"(!{self.print(expr.a)})"

    def _compare(self, expr) -> str:
        return f"({self.print(expr.a)} {_COMPARE[type(expr).__name__]} {self.print(expr.b)})"

    print_LT = print_LE = print_GT = print_GE = print_EQ = print_NE = _compare
    print_And = print_Or = _compare


class DataMovementKernelPrinter(RowKernelPrinter):
    """Prints one data-movement kernel (class + extern "C" entry)."""

    @staticmethod
    def extra_includes(soc) -> tuple:
        """The CopyBox helper for ``soc``, printed once per translation unit."""
        return (BOX_COPY_PAD if soc.has_data_copy_pad else BOX_COPY_LOOP,)

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        self.program = movement_program(func)
        if self.program.plan.n_slots != tiling.temp_buffers:
            raise CodegenError(f"{symbol}: {self.program.plan.n_slots} temp tiles needed, "
                               f"tiling planned {tiling.temp_buffers}")
        self.dtype = self.program.dtype
        self.ctype = cpp_type(self.dtype)
        self.align = self.program.align
        self.stage_elems = [op.layout(tiling.tile_len, self.align) for op in self.program.operands]
        self.scalar_names = {key: f"sc{i}" for i, key in enumerate(self.program.scalars)}

    def emit_tiling_body(self, buf, dims: dict) -> None:
        """The host tiling function of a kernel over symbolic rows (tiling_func.py): the row
        kernels' arithmetic, ``data_movement_tiling_at`` in Python."""
        emit_row_tiling_body(buf, self.tiling, dims)

    # ---- scaffolding ------------------------------------------------------------------------
    def emit_tiling_constants(self, buf):
        buf.line(f"constexpr uint32_t ROW_STRIDE = {self.program.row_stride};  // a row padded "
                 "to 32 bytes")
        buf.line(f"constexpr uint32_t TILE_ROWS = {self.tiling.tile_len};  // staging layout")
        buf.line(f"constexpr int32_t BUFFER_NUM = {self.tiling.buffer_num};")

    def _read_buffers(self) -> list:
        """Input parameters the kernel reads (data, index tensors, scalars), in order."""
        used = {b.name for b, _ in self.program.scalars.values()}
        # a scalar read at an index another tensor holds (a Gather by a 0-d id) reads both
        used.update(load_buffer(ld).name for _, offset in self.program.scalars.values()
                    for ld in index_loads(offset))
        for seg in self.program.segments():
            for leaf in seg.leaves():
                if leaf.buffer is not None:
                    used.add(leaf.buffer.name)
                    used.update(load_buffer(ld).name for ld in leaf.index_loads)
        return [p for p in self.params if p.name in used]

    def emit_buffers(self, buf):
        t, p = self.ctype, self.program
        for param in self._read_buffers():
            n = self.names[param.name]
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {cpp_type(str(param.dtype))}*){n}, "
                     f"{buffer_size(param)});")
        for key, (buffer, offset) in p.scalars.items():
            buf.line(f"{self.scalar_names[key]} = {self.names[buffer.name]}Gm.GetValue("
                     f"{IndexPrinter('0', self.names).print(offset)});")
        built = False
        for op, elems in zip(p.operands, self.stage_elems):
            buf.line(f"pipe.InitBuffer(stage{op.index}Que, BUFFER_NUM, {elems} * sizeof({t}));")
            if not op.direct:
                buf.line(f"pipe.InitBuffer(opBuf{op.index}, TILE_ROWS * ROW_STRIDE * "
                         f"sizeof({t}));")
                buf.line(f"pipe.InitBuffer(offBuf{op.index}, TILE_ROWS * ROW_STRIDE * "
                         "sizeof(uint32_t));")
                self.emit_offsets(buf, op)
                built = True
        if built:
            # Gather reads the offsets on the vector unit: the scalar writes must land first.
            buf.line("AscendC::SetFlag<AscendC::HardEvent::S_V>(0);")
            buf.line("AscendC::WaitFlag<AscendC::HardEvent::S_V>(0);")
        out = self.names[p.out_buffer.name]
        buf.line(f"outGm.SetGlobalBuffer((__gm__ {t}*){out} + rowStart * cols, "
                 "blockRows * cols);")
        buf.line(f"pipe.InitBuffer(outQue, BUFFER_NUM, TILE_ROWS * ROW_STRIDE * sizeof({t}));")
        if p.plan.n_slots:
            buf.line(f"pipe.InitBuffer(tmpBuf, {p.plan.n_slots} * TILE_ROWS * ROW_STRIDE * "
                     f"sizeof({t}));")

    def emit_offsets(self, buf, op) -> None:
        """Byte offset in the staging buffer of every element of the operand tile."""
        i, t = op.index, self.ctype
        buf.line(f"offs{i} = offBuf{i}.Get<uint32_t>();")
        tpad = -(-self.tiling.tile_len // self.align) * self.align
        with buf.indent("for (uint32_t k = 0; k < TILE_ROWS; ++k) {"):
            if self.program.cols != self.program.row_stride:
                buf.line(f"for (uint32_t j = {self.program.cols}; j < ROW_STRIDE; ++j) "
                         f"offs{i}.SetValue(k * ROW_STRIDE + j, 0);")
            for seg in op.segments:
                width = seg.width
                if seg.layout == "box":
                    column = "jj" if seg.data_leaf().stride > 0 else f"({width - 1} - jj)"
                    where = f"{seg.offset} + {column} * {tpad} + k"
                else:
                    leaf = seg.data_leaf()
                    row_stride = -(-seg.row_len // self.align) * self.align
                    if leaf is None or leaf.kind == "run":
                        column = "jj"
                    elif leaf.kind == "scalar":
                        column = "0"
                    elif leaf.stride > 0:
                        column = f"jj * {leaf.stride}"
                    else:
                        column = f"({width - 1} - jj) * {-leaf.stride}"
                    where = f"{seg.offset} + k * {row_stride} + {column}"
                buf.line(f"for (uint32_t jj = 0; jj < {width}; ++jj) offs{i}.SetValue(k * "
                         f"ROW_STRIDE + {seg.c0} + jj, ({where}) * sizeof({t}));")

    # ---- CopyIn: stage every operand's sources ----------------------------------------------
    def emit_copy_in(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void CopyIn(uint32_t i, uint32_t n) {"):
            buf.line("int64_t r0 = static_cast<int64_t>(rowStart + static_cast<uint64_t>(i) * "
                     "tileRows);")
            for op in self.program.operands:
                stage = f"stage{op.index}"
                buf.line(f"AscendC::LocalTensor<{t}> {stage} = {stage}Que.AllocTensor<{t}>();")
                for seg in op.segments:
                    self.emit_segment_copy(buf, stage, seg)
                buf.line(f"{stage}Que.EnQue({stage});")

    def _row_stride(self, seg) -> int:
        return -(-seg.row_len // self.align) * self.align

    def _start(self, leaf: Leaf, width: int, row: str) -> str:
        """GM element where a row's copy starts (the lowest address it reads)."""
        base = IndexPrinter(row, self.names).print(leaf.base)
        low = leaf.stride * (width - 1) if leaf.stride < 0 else 0
        return f"{base} + ({low})" if low else base

    def emit_segment_copy(self, buf, stage: str, seg) -> None:
        leaf = seg.data_leaf()
        if leaf is None:
            return  # constants only: filled in Compute
        src = f"{self.names[leaf.buffer.name]}Gm"
        if seg.layout == "box":
            pitch, tpad = abs(leaf.stride), -(-self.tiling.tile_len // self.align) * self.align
            start = self._start(leaf, seg.width, "r0")
            buf.line(f"CopyBox({stage}[{seg.offset}], {src}[{start}], {seg.width}, n, {pitch}, "
                     f"{tpad});")
            return
        stride = self._row_stride(seg)
        if (isinstance(seg.tree, Leaf) and seg.pitch is not None
                and seg.pitch >= seg.row_len and seg.pitch_runs % self.tiling.tile_len == 0):
            # rows a fixed pitch apart: one multi-burst copy for the tile
            buf.line(f"CopyBox({stage}[{seg.offset}], {src}[{self._start(leaf, seg.width, 'r0')}"
                     f"], n, {seg.row_len}, {seg.pitch}, {stride});")
            return
        with buf.indent("for (uint32_t k = 0; k < n; ++k) {"):
            buf.line("int64_t r = r0 + k;")
            self._emit_tree(buf, seg.tree, lambda lf: buf.line(
                f"CopyGmToUb({stage}[{seg.offset} + k * {stride}], "
                f"{self.names[lf.buffer.name]}Gm[{self._start(lf, seg.width, 'r')}], "
                f"{seg.row_len});") if lf.kind != "const" else None)

    def _emit_tree(self, buf, tree, emit_leaf) -> None:
        if isinstance(tree, Choice):
            with buf.indent(f"if ({IndexPrinter('r', self.names).print(tree.cond)}) {{"):
                self._emit_tree(buf, tree.then, emit_leaf)
            with buf.indent("else {"):
                self._emit_tree(buf, tree.other, emit_leaf)
            return
        emit_leaf(tree)

    # ---- Compute: constants, Gather, the consumer's elementwise program ---------------------
    def emit_compute(self, buf):
        t, p = self.ctype, self.program
        with buf.indent("__aicore__ inline void Compute(uint32_t i, uint32_t n) {"):
            buf.line("int64_t r0 = static_cast<int64_t>(rowStart + static_cast<uint64_t>(i) * "
                     "tileRows);")
            buf.line("uint32_t cnt = n * ROW_STRIDE;")
            for op in p.operands:
                buf.line(f"AscendC::LocalTensor<{t}> stage{op.index} = "
                         f"stage{op.index}Que.DeQue<{t}>();")
                for seg in op.segments:
                    self.emit_constants(buf, f"stage{op.index}", seg)
            buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.AllocTensor<{t}>();")
            root_key = expr_key(p.plan.root)
            leaves = {}
            for op in p.operands:
                key = expr_key(op.placeholder)
                if op.direct:
                    leaves[key] = Operand(f"stage{op.index}", True, self.dtype)
                    continue
                dst = "outTile" if key == root_key else f"op{op.index}Tile"
                if dst != "outTile":
                    buf.line(f"AscendC::LocalTensor<{t}> {dst} = opBuf{op.index}.Get<{t}>();")
                buf.line(f"AscendC::Gather({dst}, stage{op.index}, offs{op.index}, 0, cnt);")
                leaves[key] = Operand(dst, True, self.dtype)
            gathered_to_out = root_key in leaves and leaves[root_key].text == "outTile"
            if not gathered_to_out:
                scalars = ScalarPrinter(self.scalar_names, expr_key)
                printer = TileProgramPrinter(self.symbol, scalars)
                root = printer.emit(buf, p.plan, leaves, "outTile", self._slot, "cnt")
                if root.text != "outTile":
                    printer.emit_copy(buf, "outTile", root, "cnt")
            buf.line("outQue.EnQue(outTile);")
            for op in p.operands:
                buf.line(f"stage{op.index}Que.FreeTensor(stage{op.index});")

    def _slot(self, slot: int, node) -> str:
        t = self.ctype
        return (f"tmpBuf.GetWithOffset<{t}>(TILE_ROWS * ROW_STRIDE, {slot} * TILE_ROWS * "
                f"ROW_STRIDE * sizeof({t}))")

    def emit_constants(self, buf, stage: str, seg) -> None:
        consts = [leaf for leaf in seg.leaves() if leaf.kind == "const"]
        if not consts:
            return
        stride = self._row_stride(seg)
        if isinstance(seg.tree, Leaf):
            value = float_literal(float(seg.tree.value.value), self.dtype)
            buf.line(f"AscendC::Duplicate({stage}[{seg.offset}], {value}, n * {stride});")
            return
        with buf.indent("for (uint32_t k = 0; k < n; ++k) {"):
            buf.line("int64_t r = r0 + k;")
            self._emit_tree(buf, seg.tree, lambda lf: buf.line(
                f"AscendC::Duplicate({stage}[{seg.offset} + k * {stride}], "
                f"{float_literal(float(lf.value.value), self.dtype)}, {stride});")
                if lf.kind == "const" else None)

    def emit_copy_out(self, buf):
        t = self.ctype
        with buf.indent("__aicore__ inline void CopyOut(uint32_t i, uint32_t n) {"):
            buf.line(f"AscendC::LocalTensor<{t}> outTile = outQue.DeQue<{t}>();")
            buf.line("CopyRowsOut(outGm[static_cast<uint64_t>(i) * tileRows * cols], outTile, n, "
                     "cols, ROW_STRIDE);")
            buf.line("outQue.FreeTensor(outTile);")

    def emit_members(self, buf):
        t, p = self.ctype, self.program
        buf.line("AscendC::TPipe pipe;")
        for param in self._read_buffers():
            buf.line(f"AscendC::GlobalTensor<{cpp_type(str(param.dtype))}> "
                     f"{self.names[param.name]}Gm;")
        for key, (buffer, _) in p.scalars.items():
            buf.line(f"{cpp_type(str(buffer.dtype))} {self.scalar_names[key]};")
        for op in p.operands:
            buf.line(f"AscendC::TQue<AscendC::QuePosition::VECIN, 1> stage{op.index}Que;")
            if not op.direct:
                buf.line(f"AscendC::TBuf<AscendC::TPosition::VECCALC> opBuf{op.index};")
                buf.line(f"AscendC::TBuf<AscendC::TPosition::VECCALC> offBuf{op.index};")
                buf.line(f"AscendC::LocalTensor<uint32_t> offs{op.index};")
        buf.line(f"AscendC::GlobalTensor<{t}> outGm;")
        buf.line("AscendC::TQue<AscendC::QuePosition::VECOUT, 1> outQue;")
        if p.plan.n_slots:
            buf.line("AscendC::TBuf<AscendC::TPosition::VECCALC> tmpBuf;")
        self.emit_share_members(buf, "tileRows", "cols")


# ``CopyBox``: ``bursts`` runs of ``len`` elements ``pitch`` elements apart in GM, landing
# ``stride`` elements apart in the UB (32-byte aligned): one multi-burst DataCopyPad, or (SoCs
# without DataCopyPad) one CopyGmToUb per burst.
BOX_COPY_PAD = """\
template <typename T>
__aicore__ inline void CopyBox(const AscendC::LocalTensor<T>& dst,
                               const AscendC::GlobalTensor<T>& src, uint32_t bursts,
                               uint32_t len, uint32_t pitch, uint32_t stride) {
  uint32_t landed = (len * sizeof(T) + 31) / 32 * 32;
  AscendC::DataCopyExtParams params{static_cast<uint16_t>(bursts),
                                    static_cast<uint32_t>(len * sizeof(T)),
                                    static_cast<uint32_t>((pitch - len) * sizeof(T)),
                                    static_cast<uint32_t>((stride * sizeof(T) - landed) / 32), 0};
  AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
  AscendC::DataCopyPad(dst, src, params, pad);
}
"""

BOX_COPY_LOOP = """\
template <typename T>  // defined with the other copy helpers below
__aicore__ inline void CopyGmToUb(AscendC::LocalTensor<T> dst,
                                  const AscendC::GlobalTensor<T>& src, uint32_t count);

template <typename T>
__aicore__ inline void CopyBox(const AscendC::LocalTensor<T>& dst,
                               const AscendC::GlobalTensor<T>& src, uint32_t bursts,
                               uint32_t len, uint32_t pitch, uint32_t stride) {
  for (uint32_t b = 0; b < bursts; ++b) CopyGmToUb(dst[b * stride], src[b * pitch], len);
}
"""

__all__ = ["DataMovementKernelPrinter", "IndexPrinter", "BOX_COPY_PAD", "BOX_COPY_LOOP"]
