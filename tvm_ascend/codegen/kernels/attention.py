"""Prints the attention kernel: two Matmul objects (cube) around an online softmax (vector).

One work item is ``base_q`` query rows of one batch*head; a core takes a contiguous range of
items. Per key block: ``qk`` computes the score tile into the UB (K read in place, transposed
by the API), the vector unit scales, masks and exponentiates it against the running row maxima
(and keeps the running sums), ``pv`` multiplies the probabilities (A from the UB) with V's
block, and the vector unit rescales the accumulated output rows and adds the product tile. The
rows are divided by their sums once and written with one DataCopyPad. MIX mode: the cube and
vector halves of the group run as one kernel (on 910B, an AIC with its AIVs).

Where the plan is ``flash`` (910B) the kernel is the 1:2 mix: each AIV is a client of its AIC
with its own work items, and asks ``qk`` for the score tiles of ``round_blocks`` key blocks in
one asynchronous round (``Iterate<false>`` into its slots of the user workspace,
``SetWorkspace``); it fetches tile j (``GetTensorC<false>``) while the AIC computes the tiles
after it and serves the other client's ``pv`` products, so the cube's QK^T of the next key
blocks runs under the vector unit's softmax of the current. ``pv`` stays synchronous: its A
(the probabilities) is what the AIV just computed. Elsewhere (staged) each score tile is
computed and fetched in step on a 1:1 mix.

A causal plan (``AttentionPlan.causal``) ends each query block's key loop at its last row's
diagonal; beside a padding mask it ends on a whole key block and then checks, on the vector
unit, each row's running maximum against what a skipped key scores (``emit_recheck``): if a
row is within RECHECK_GAP of it (its visible keys all padded), the query block visits the
skipped blocks too, so every row gets what visiting every block gives.
"""
from __future__ import annotations

import contextlib

from ...errors import CodegenError
from ...schedules.attention import RECHECK_GAP, AttentionPlan
from ...schedules.analysis.tile_values import buffer_size
from ...schedules.attention_runtime import shape_value
from ..tiling_func import numel_expr
from ..code_buffer import CodeBuffer
from ..cpp_types import cpp_type
from ..kernel_parts import emit_field_assignments
from ..kernel_printer import CubeKernelPrinter
from .matmul import CUBE_FIELDS

SYNC = ("AscendC::SetFlag<AscendC::HardEvent::{0}>(0); "
        "AscendC::WaitFlag<AscendC::HardEvent::{0}>(0);")


def _sync(buf: CodeBuffer, event: str, why: str) -> None:
    buf.line(SYNC.format(event) + f"  // {why}")


# a kernel over a symbolic sequence reads these from its tiling struct (constants elsewhere)
RUNTIME_CONSTS = {"SEQ_Q": "seqQ", "SEQ_KV": "seqKv", "BASE_Q": "baseQ", "BASE_KV": "baseKv",
                  "BLOCKS_Q": "blocksQ", "ROUND_KV": "roundKv"}


def term_field(path: str) -> str:
    """The tiling field of the shape's integer at ``path``: ``q.row_stride`` -> qRowStride,
    ``k.batch_coefs.1`` -> kBatch1, ``seq_kv`` -> seqKv."""
    special = {"seq_q": "seqQ", "seq_kv": "seqKv"}
    if path in special:
        return special[path]
    role, attr, *rest = path.split(".")
    name = {"row_stride": "RowStride", "col_stride": "ColStride", "base": "Base",
            "batch_coefs": "Batch"}[attr]
    return f"{role}{name}{rest[0] if rest else ''}"


class AttentionKernelPrinter(CubeKernelPrinter):
    """Prints one attention kernel and describes its launch."""

    matmuls = (("qk", "qk"), ("pv", "pv"))

    def __init__(self, symbol: str, func, tiling):
        super().__init__(symbol, func, tiling)
        if not isinstance(tiling.plan, AttentionPlan):
            raise CodegenError(f"{symbol}: the {tiling.template} tiling carries no "
                               "AttentionPlan; schedule the group again")
        self.plan = tiling.plan
        self.shape = self.plan.shape
        self.ctype = cpp_type(self.shape.dtype)
        self.elem = 2 if self.shape.dtype == "float16" else 4
        self.layout = dict(self.plan.ub_buffers)  # UB buffer name -> bytes, in print order
        # a symbolic sequence: the sizes and strides that follow it are tiling fields
        self.rt = getattr(self.plan, "runtime", None)
        self.terms = dict(self.rt.terms) if self.rt is not None else {}

    def _int(self, path: str) -> str:
        """C++ of the shape's integer at ``path`` (``attention_runtime`` paths): a constant,
        or over a symbolic sequence the tiling field the host tiling function fills."""
        if path in self.terms:
            return f"tiling.{term_field(path)}"
        return str(shape_value(self.shape, path))

    def _n(self, operand) -> str:
        return self.names[operand.param]

    @property
    def _score_type(self) -> str:
        """C++ type of the score tiles the AIC writes (half on split chips for fp16)."""
        return "half" if self.plan.half_scores else "float"

    @property
    def kernel_mode(self) -> str:
        """MIX_MODE (the 1:2 mix, each AIV a client) for the flash plan, else one AIV per AIC."""
        return "MIX_MODE" if self.plan.flash else "MIX_AIC_1_1"

    @property
    def block_dim(self) -> int:
        """Launch blocks: AIC groups, each running ``aiv_ratio`` of the plan's clients."""
        return -(-self.tiling.cores // self.tiling.work.aiv_ratio)

    def takes_user_workspace(self) -> bool:
        return self.plan.flash

    def user_workspace_bytes(self) -> int:
        """Every client's score-tile slots (``AttentionPlan.workspace_bytes``)."""
        return self.tiling.cores * self.plan.workspace_bytes

    # ---- printing ---------------------------------------------------------------------------
    def emit_types(self, buf):
        s, p, t = self.shape, self.plan, self.ctype
        with buf.indent("struct TilingData {", "};"):
            buf.line("TCubeTiling qk;         // scores = Q @ K^T, one base_q x base_kv tile")
            buf.line("TCubeTiling pv;         // product = P @ V, one base_q x head_dim tile")
            buf.line("uint32_t itemsPerCore;  // query blocks of one batch*head")
            buf.line("uint32_t totalItems;")
            if self.rt is not None:  # a symbolic sequence: its sizes and strides per call
                buf.line("uint64_t dimSize;        // the symbolic dimension's size")
                for name in RUNTIME_CONSTS.values():
                    buf.line(f"uint32_t {name};")
                for path in self.terms:
                    if path not in ("seq_q", "seq_kv"):
                        buf.line(f"uint64_t {term_field(path)};  // {path}")
        gm, vec = "AscendC::TPosition::GM", "AscendC::TPosition::VECOUT"
        trans = ", true" if s.k_transposed else ""
        buf.line(f"using QType = matmul::MatmulType<{gm}, CubeFormat::ND, {t}>;")
        buf.line(f"using KType = matmul::MatmulType<{gm}, CubeFormat::ND, {t}{trans}>;")
        buf.line("using SType = matmul::MatmulType<AscendC::TPosition::VECIN, "
                 "CubeFormat::ND_ALIGN, float>;")
        buf.line(f"using PType = matmul::MatmulType<{vec}, CubeFormat::ND, {t}>;")
        if p.half_scores:  # the score tiles cross the workspace in half (FIXPIPE rounds them)
            buf.line("using SHType = matmul::MatmulType<AscendC::TPosition::VECIN, "
                     "CubeFormat::ND_ALIGN, half>;")
        consts = {"SEQ_Q": s.seq_q, "SEQ_KV": s.seq_kv, "HEAD_DIM": s.head_dim,
                  "BASE_Q": p.base_q, "BASE_KV": p.base_kv, "BLOCKS_Q": p.blocks_q,
                  "PITCH_D": -(-s.head_dim // 8) * 8, "STAT": -(-p.base_q // 8) * 8,
                  "C0": 32 // self.elem}
        if p.flash:  # keys whose score tiles one asynchronous round computes
            consts["ROUND_KV"] = p.round_blocks * p.base_kv
        if self.rt is not None:  # members read from the tiling struct in Init instead
            consts = {k: v for k, v in consts.items() if k not in RUNTIME_CONSTS}
        if p.causal is not None:  # query i sees key j iff j <= i + CAUSAL_OFFSET
            consts["CAUSAL_OFFSET"] = p.causal.offset
        for name, value in consts.items():
            buf.line(f"constexpr uint32_t {name} = {value};")
        buf.line(f"constexpr float SCALE = {s.scale!r}f;")
        buf.line(f"constexpr float MASK_COEF = {s.mask_coef!r}f;")
        if s.keep is not None:  # the Where's fill: a constant, or a parameter times this
            buf.line(f"constexpr float FILL = {s.fill!r}f;")
        buf.line()

    def emit_process(self, buf):
        with buf.indent("__aicore__ inline void Process() {"):
            buf.line("uint32_t first = AscendC::GetBlockIdx() * tiling.itemsPerCore;")
            buf.line("uint32_t last = first + tiling.itemsPerCore;")
            buf.line("if (last > tiling.totalItems) last = tiling.totalItems;")
            buf.line("for (uint32_t item = first; item < last; ++item) Item(item);")

    def emit_public_members(self, buf):  # the Matmul objects
        scores = "SHType" if self.plan.half_scores else "SType"
        buf.line(f"matmul::Matmul<QType, KType, {scores}, SType> qk;")
        buf.line("matmul::Matmul<PType, QType, SType, SType> pv;")

    def emit_private(self, buf):
        self.emit_item(buf)
        self.emit_key_block(buf)

    def emit_buffers(self, buf):
        s = self.shape
        if self.rt is not None:  # this call's sizes
            for const, name in RUNTIME_CONSTS.items():
                if const != "ROUND_KV" or self.plan.flash:
                    buf.line(f"{const} = tiling.{name};")
        spec = self.shape_spec()
        for index, p in enumerate(self.params):
            n, pt = self.names[p.name], cpp_type(p.dtype)
            size = buffer_size(p) if spec is None else numel_expr(
                spec.shapes[index], {self.rt.dim: "tiling.dimSize"})
            buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {pt}*){n}, {size});")
        if s.fill_param is not None:
            n = self.names[s.fill_param]
            buf.line(f"fillValue = static_cast<float>({n}Gm.GetValue(0)) * FILL;")
        if self.plan.flash:  # this client's slots: a score tile each of a round's
            elems = self.plan.workspace_bytes // self.plan.score_bytes
            st = self._score_type
            buf.line(f"wsGm.SetGlobalBuffer(reinterpret_cast<__gm__ {st}*>(userWorkspace) + "
                     f"static_cast<uint64_t>(AscendC::GetBlockIdx()) * {elems}, {elems});")
            buf.line("qk.SetWorkspace(wsGm);")
        for name, size in self.layout.items():
            buf.line(f"pipe->InitBuffer({name}, {size});")

    def _batch_offsets(self, buf):
        """Decode the batch*head index into its batch variables, then each operand's base."""
        s = self.shape
        buf.line("uint64_t rest = item / BLOCKS_Q;")
        for k in reversed(range(len(s.batch_extents))):
            buf.line(f"uint64_t b{k} = rest % {s.batch_extents[k]}; rest /= "
                     f"{s.batch_extents[k]};")
        operands = {"q": s.q, "k": s.k, "v": s.v, "out": s.out}
        if s.mask is not None:
            operands["mask"] = s.mask
        if s.keep is not None:
            operands["keep"] = s.keep
        for role, op in operands.items():
            terms = [f"b{k} * {self._int(f'{role}.batch_coefs.{k}')}"
                     for k, c in enumerate(op.batch_coefs)
                     if c or f"{role}.batch_coefs.{k}" in self.terms]
            terms.append(self._int(f"{role}.base"))
            buf.line(f"uint64_t {role}Base = {' + '.join(terms)};")

    def emit_item(self, buf):
        s, t = self.shape, self.ctype
        with buf.indent("__aicore__ inline void Item(uint32_t item) {"):
            buf.line("uint32_t qOff = item % BLOCKS_Q * BASE_Q;")
            buf.line("uint32_t curQ = SEQ_Q - qOff < BASE_Q ? SEQ_Q - qOff : BASE_Q;")
            self._batch_offsets(buf)
            buf.line("AscendC::LocalTensor<float> acc = accBuf.Get<float>();")
            buf.line("AscendC::LocalTensor<float> stat = statBuf.Get<float>();")
            buf.line("AscendC::LocalTensor<float> rowMax = stat, rowSum = stat[STAT];")
            # running maxima from the lowest float: a row whose every key is filled with it
            # (a causal row with its keys padded away) takes them all alike, as the graph's
            # softmax does, instead of exp(-inf) sums of 0
            buf.line("AscendC::Duplicate(rowMax, -3.40282347e+38f, curQ);  // running maxima")
            buf.line("AscendC::Duplicate(rowSum, 0.0f, curQ);      // running sums")
            buf.line("AscendC::Duplicate(acc, 0.0f, curQ * PITCH_D);")
            mask = "maskBase, " if s.mask is not None else ""
            keep = "keepBase, " if s.keep is not None else ""
            call = (f"KeyBlock(qBase + static_cast<uint64_t>(qOff) * {self._int('q.row_stride')}, "
                    f"kBase, vBase, {mask}{keep}qOff, curQ, kvOff, curKv);")
            if self.plan.flash:
                end = "SEQ_KV"
                if self.plan.causal is not None:  # the keys this query block's last row sees
                    buf.line("uint32_t kvEnd = qOff + curQ + CAUSAL_OFFSET < SEQ_KV ? "
                             "qOff + curQ + CAUSAL_OFFSET : SEQ_KV;  // the later ones hidden")
                    end = "kvEnd"
                    if self.plan.causal.recheck:  # the blocks of the kernel visiting all keys
                        buf.line("kvEnd = (kvEnd + BASE_KV - 1) / BASE_KV * BASE_KV;  "
                                 "// whole key blocks")
                        buf.line("if (kvEnd > SEQ_KV) kvEnd = SEQ_KV;")
                self.emit_rounds(buf, call, end)
                if self.plan.causal is not None and self.plan.causal.recheck:
                    self.emit_recheck(buf, call)
            else:
                with buf.indent("for (uint32_t kvOff = 0; kvOff < SEQ_KV; kvOff += BASE_KV) {"):
                    buf.line("uint32_t curKv = SEQ_KV - kvOff < BASE_KV ? SEQ_KV - kvOff : "
                             "BASE_KV;")
                    buf.line(call)
            out_pitch = -(-s.head_dim // 16) * 16
            if self.plan.flash:
                self.emit_tile_normalise(buf, out_pitch)
            else:
                _sync(buf, "V_S", "the running sums are read on the scalar unit")
                with buf.indent("for (uint32_t r = 0; r < curQ; ++r) {"):
                    buf.line("AscendC::Muls(acc[r * PITCH_D], acc[r * PITCH_D], "
                             "1.0f / rowSum.GetValue(r), HEAD_DIM);")
            src, src_pitch = "acc", "PITCH_D"
            if self.elem == 2:
                src_pitch = str(out_pitch)
                buf.line(f"AscendC::LocalTensor<{t}> outT = outBuf.Get<{t}>();")
                if -(-s.head_dim // 8) * 8 == out_pitch:  # one pitch: the tile at once
                    buf.line("AscendC::Cast(outT, acc, AscendC::RoundMode::CAST_ROUND, "
                             "curQ * PITCH_D);")
                else:
                    with buf.indent("for (uint32_t r = 0; r < curQ; ++r) {"):
                        buf.line(f"AscendC::Cast(outT[r * {out_pitch}], acc[r * PITCH_D], "
                                 "AscendC::RoundMode::CAST_ROUND, HEAD_DIM);")
                src = "outT"
            _sync(buf, "V_MTE3", "output rows complete before they leave")
            buf.line(f"CopyTileOut({self._n(s.out)}Gm[outBase + static_cast<uint64_t>(qOff) * "
                     f"{self._int('out.row_stride')}], {src}, curQ, HEAD_DIM, {src_pitch}, "
                     f"{self._int('out.row_stride')});")
            _sync(buf, "MTE3_V", "the next item overwrites the rows")

    def emit_tile_normalise(self, buf, out_pitch: int) -> None:
        """The flash kernel's rows divided by their running sums once, at the item's end, on
        the whole tile: the sums broadcast as 32-byte blocks (Brcb), one Div per 64-float
        chunk of the rows (the rows as its repeats); no scalar unit on the way."""
        buf.line("AscendC::LocalTensor<float> bc = bcBuf.Get<float>();")
        buf.line("AscendC::Brcb(bc, rowSum, (curQ + 7) / 8, {1, 8});  // every row's sum")
        with buf.indent("for (uint32_t c = 0; c < HEAD_DIM; c += 64) {"):
            buf.line("uint64_t n = HEAD_DIM - c < 64 ? HEAD_DIM - c : 64;")
            buf.line("AscendC::Div(acc[c], acc[c], bc, n, curQ, "
                     "AscendC::BinaryRepeatParams(1, 1, 0, PITCH_D / 8, PITCH_D / 8, 1));")

    def _qk_operands(self, buf, q_at: str, kv_at: str, n: str) -> None:
        """The score product's shapes and operands: Q's rows at ``q_at``, ``n`` keys of K from
        key ``kv_at`` (K read in place, transposed by the API when the group transposes it)."""
        s, k = self.shape, self.shape.k
        org_n, org_kb = ("SEQ_KV", self._int("k.row_stride")) if s.k_transposed else \
            (self._int("k.col_stride"), 1)
        buf.line(f"qk.SetOrgShape(SEQ_Q, {org_n}, {self._int('q.row_stride')}, {org_kb});")
        buf.line(f"qk.SetTail(curQ, {n}, HEAD_DIM);")
        buf.line(f"qk.SetTensorA({self._n(s.q)}Gm[{q_at}]);")
        buf.line(f"qk.SetTensorB({self._n(k)}Gm[kBase + static_cast<uint64_t>({kv_at}) * "
                 f"{self._int('k.row_stride')}]{', true' if s.k_transposed else ''});")

    def emit_rounds(self, buf, call: str, end: str = "SEQ_KV", start: str = "0") -> None:
        """The flash plan's key loop over the keys from ``start`` before ``end``: per round,
        one asynchronous ``qk`` round of the score tiles of ROUND_KV keys (the AIC runs ahead
        into the workspace), then each key block in turn (its tile fetched by ``KeyBlock``)."""
        s = self.shape
        with buf.indent(f"for (uint32_t roundOff = {start}; roundOff < {end}; "
                        "roundOff += ROUND_KV) {"):
            buf.line(f"uint32_t curRound = {end} - roundOff < ROUND_KV ? {end} - roundOff : "
                     "ROUND_KV;")
            self._qk_operands(buf, "qBase + static_cast<uint64_t>(qOff) * "
                                   f"{self._int('q.row_stride')}",
                              "roundOff", "curRound")
            buf.line("uint32_t kvOff = roundOff;")
            with buf.indent("while (qk.template Iterate<false>()) {  // the AIC computes the "
                            "round ahead"):
                buf.line("uint32_t curKv = roundOff + curRound - kvOff < BASE_KV ? "
                         "roundOff + curRound - kvOff : BASE_KV;")
                buf.line(call)
                buf.line("kvOff += BASE_KV;")
            buf.line("qk.End();  // every slot of the round fetched")

    def emit_recheck(self, buf, call: str) -> None:
        """The run-time check of a causal skip beside a padding mask (``CausalSkip.recheck``):
        where keys were skipped, what a skipped key scores at most (the Where's fill, plus the
        padding mask's largest value over those keys when it is added after the Where) and
        each row's gap to it; if some row's running maximum is within RECHECK_GAP of it (its
        visible keys all padded), the query block visits the skipped key blocks too. Every
        other row's exp of a skipped key is then 0 in float: it gets what they would add."""
        s, t = self.shape, self.ctype
        with buf.indent("if (kvEnd < SEQ_KV) {  // keys hidden from every row were skipped"):
            buf.line("AscendC::LocalTensor<float> gap = stat[2 * STAT], least = stat[4 * STAT];")
            buf.line("AscendC::LocalTensor<float> work = workBuf.Get<float>();")
            fill = "fillValue" if s.fill_param is not None else "FILL"
            if self.plan.causal.recheck == "fill+mask":
                buf.line(f"AscendC::LocalTensor<{t}> maskT = maskBuf.Get<{t}>();")
                source = "maskT"
                if self.elem == 2:
                    buf.line("AscendC::LocalTensor<float> maskF = maskFBuf.Get<float>();")
                    source = "maskF"
                buf.line("float padMost = -3.40282347e+38f;  // the padding mask's largest "
                         "value over the skipped keys")
                with buf.indent("for (uint32_t kvOff = kvEnd; kvOff < SEQ_KV; "
                                "kvOff += BASE_KV) {"):
                    buf.line("uint32_t curKv = SEQ_KV - kvOff < BASE_KV ? SEQ_KV - kvOff : "
                             "BASE_KV;")
                    _sync(buf, "V_MTE2", "the vector unit is done with the mask block")
                    buf.line(f"CopyTileIn(maskT, {self._n(s.mask)}Gm[maskBase + kvOff], 1, "
                             "curKv, (curKv + C0 - 1) / C0 * C0, curKv);")
                    _sync(buf, "MTE2_V", "the mask row is in the UB")
                    if self.elem == 2:
                        buf.line("AscendC::Cast(maskF, maskT, AscendC::RoundMode::CAST_NONE, "
                                 "curKv);")
                    if s.mask_coef != 1.0:
                        buf.line(f"AscendC::Muls({source}, {source}, MASK_COEF, curKv);")
                    buf.line(f"AscendC::ReduceMax(least, {source}, work, curKv);")
                    _sync(buf, "V_S", "the block's maximum goes to the scalar unit")
                    buf.line("float most = least.GetValue(0);")
                    buf.line("if (most > padMost) padMost = most;")
                    _sync(buf, "S_V", "least is rewritten by the vector unit")
                buf.line(f"float hidden = {fill} + padMost;  // a skipped key's score at most "
                         "(the kernel adds them alike)")
            else:
                buf.line(f"float hidden = {fill};  // a skipped key's score: the Where's fill")
            buf.line("AscendC::Adds(gap, rowMax, -hidden, curQ);  // each row's maximum above it")
            buf.line("AscendC::ReduceMin(least, gap, work, curQ);")
            _sync(buf, "V_S", "the least gap goes to the scalar unit")
            buf.line("float leastGap = least.GetValue(0);")
            _sync(buf, "S_V", "least is rewritten by the vector unit")
            with buf.indent(f"if (!(leastGap > {RECHECK_GAP!r}f)) {{  // a row whose visible keys "
                            "are all masked: the skipped ones take part in its softmax"):
                self.emit_rounds(buf, call, "SEQ_KV", "kvEnd")

    def emit_key_block(self, buf):
        s, t = self.shape, self.ctype
        mask = "uint64_t maskBase, " if s.mask is not None else ""
        mask += "uint64_t keepBase, " if s.keep is not None else ""
        with buf.indent(f"__aicore__ inline void KeyBlock(uint64_t qAt, uint64_t kBase, "
                        f"uint64_t vBase, {mask}uint32_t qOff, uint32_t curQ, uint32_t kvOff, "
                        "uint32_t curKv) {"):
            if self.plan.half_scores:  # the half tile's rows (ND_ALIGN), the float's alike
                buf.line("uint32_t pitch = (curKv + 15) / 16 * 16;  // half score rows "
                         "(ND_ALIGN), float ones alike")
            else:
                buf.line("uint32_t pitch = (curKv + 7) / 8 * 8;  // float score rows (ND_ALIGN)")
            buf.line("AscendC::LocalTensor<float> s = sBuf.Get<float>();")
            buf.line("AscendC::LocalTensor<float> o = oBuf.Get<float>();")
            buf.line("AscendC::LocalTensor<float> acc = accBuf.Get<float>();")
            buf.line("AscendC::LocalTensor<float> stat = statBuf.Get<float>();")
            buf.line("AscendC::LocalTensor<float> rowMax = stat, rowSum = stat[STAT], "
                     "shift = stat[2 * STAT], blockSum = stat[3 * STAT], red = stat[4 * STAT];")
            buf.line("AscendC::LocalTensor<float> work = workBuf.Get<float>();")
            if self.plan.causal is not None:  # a key hidden from some row of the block
                buf.line("bool diag = kvOff + curKv > qOff + 1 + CAUSAL_OFFSET;  // else every "
                         "row sees the whole block: no mask work")
            mask_row = self.emit_mask_in(buf) if s.mask is not None else None
            keep_row = self.emit_keep_in(buf) if s.keep is not None else None
            # the half score tile lands in pBuf (free until the probabilities), then to float
            dst = "p" if self.plan.half_scores else "s"
            if self.plan.half_scores:
                buf.line(f"AscendC::LocalTensor<{t}> p = pBuf.Get<{t}>();")
            if self.plan.flash:  # the round's next tile, computed ahead by the AIC
                buf.line(f"qk.template GetTensorC<false, true>({dst}, 0, true, curQ, curKv);")
            else:
                self._qk_operands(buf, "qAt", "kvOff", "curKv")
                buf.line("qk.Iterate();")
                buf.line(f"qk.template GetTensorC<true, true>({dst}, 0, true, curQ, curKv);")
                buf.line("qk.End();")
            if self.plan.half_scores:
                buf.line("AscendC::Cast(s, p, AscendC::RoundMode::CAST_NONE, curQ * pitch);"
                         "  // the softmax in float")
            if self.plan.flash:
                self.emit_tile_softmax(buf, mask_row, keep_row)
            else:
                self.emit_row_softmax(buf, mask_row, keep_row)
            buf.line("AscendC::Exp(shift, shift, curQ);  // exp(old max - new max) per row")
            buf.line("AscendC::Mul(rowSum, rowSum, shift, curQ);")
            buf.line("AscendC::Add(rowSum, rowSum, blockSum, curQ);")
            probs = "s"
            if self.elem == 2:
                if not self.plan.half_scores:
                    buf.line(f"AscendC::LocalTensor<{t}> p = pBuf.Get<{t}>();")
                buf.line("AscendC::Cast(p, s, AscendC::RoundMode::CAST_ROUND, curQ * pitch);")
                probs = "p"
            _sync(buf, "V_MTE3", "the probabilities leave the UB for the cube")
            buf.line(f"pv.SetOrgShape(BASE_Q, {self._int('v.row_stride')}, pitch, SEQ_KV);")
            buf.line("pv.SetTail(curQ, HEAD_DIM, curKv);")
            buf.line(f"pv.SetTensorA({probs});")
            buf.line(f"pv.SetTensorB({self._n(s.v)}Gm[vBase + static_cast<uint64_t>(kvOff) * "
                     f"{self._int('v.row_stride')}]);")
            buf.line("pv.Iterate();")
            buf.line("pv.template GetTensorC<true, true>(o, 0, true, curQ, HEAD_DIM);")
            buf.line("pv.End();")
            if self.plan.flash:  # every row's factor as a 32-byte block, then by rows
                buf.line("AscendC::Brcb(bc, shift, (curQ + 7) / 8, {1, 8});")
                with buf.indent("for (uint32_t c = 0; c < HEAD_DIM; c += 64) {"):
                    buf.line("uint64_t n = HEAD_DIM - c < 64 ? HEAD_DIM - c : 64;")
                    buf.line("AscendC::Mul(acc[c], acc[c], bc, n, curQ, "
                             "AscendC::BinaryRepeatParams(1, 1, 0, PITCH_D / 8, PITCH_D / 8, 1));")
            else:
                _sync(buf, "V_S", "the rescale factors go to the scalar unit")
                with buf.indent("for (uint32_t r = 0; r < curQ; ++r) {"):
                    buf.line("AscendC::Muls(acc[r * PITCH_D], acc[r * PITCH_D], "
                             "shift.GetValue(r), HEAD_DIM);")
            buf.line("AscendC::Add(acc, acc, o, curQ * PITCH_D);")

    def _where_row(self, buf, keep_row: str) -> None:
        """Row r of the scores (``row``) takes the Where's fill outside its condition."""
        s = self.shape
        buf.line("AscendC::LocalTensor<half> keepH = keepHBuf.Get<half>();")
        buf.line("AscendC::LocalTensor<uint8_t> keepBits = keepBitsBuf.Get<uint8_t>();")
        buf.line(f"AscendC::Cast(keepH, {keep_row}, AscendC::RoundMode::CAST_NONE, curKv);")
        buf.line("AscendC::Compares(keepBits, keepH, static_cast<half>(0.0f), "
                 "AscendC::CMPMODE::NE, curKv);")
        fill = "fillValue" if s.fill_param is not None else "FILL"
        buf.line(f"AscendC::Select(row, keepBits, row, {fill}, "
                 "AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, curKv);")

    def _where_tile(self, buf, keep_row: str) -> None:
        """The flash kernel's Where on the score tile: a condition block of one row per query
        whose rows are as far apart as the scores' (every key block but a tail not a multiple
        of 32 keys) is made a bit mask and applied on the whole tile at once (three calls);
        a block that broadcasts over the rows makes its bit mask once, applied row by row."""
        s = self.shape
        fill = "fillValue" if s.fill_param is not None else "FILL"
        buf.line("AscendC::LocalTensor<half> keepH = keepHBuf.Get<half>();")
        buf.line("AscendC::LocalTensor<uint8_t> keepBits = keepBitsBuf.Get<uint8_t>();")
        select = ("AscendC::Select({0}, keepBits, {0}, " + fill +
                  ", AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, {1});")
        if s.keep.row_stride == 0:  # one row for every query: its bits once
            buf.line("AscendC::Cast(keepH, keepT, AscendC::RoundMode::CAST_NONE, curKv);")
            buf.line("AscendC::Compares(keepBits, keepH, static_cast<half>(0.0f), "
                     "AscendC::CMPMODE::NE, curKv);")
            with buf.indent("for (uint32_t r = 0; r < curQ; ++r) {  // the Where, row r"):
                buf.line(select.format("s[r * pitch]", "curKv"))
            return
        with buf.indent("if (keepPitch == pitch) {  // the Where on the whole tile", None):
            buf.line("AscendC::Cast(keepH, keepT, AscendC::RoundMode::CAST_NONE, curQ * pitch);")
            buf.line("AscendC::Compares(keepBits, keepH, static_cast<half>(0.0f), "
                     "AscendC::CMPMODE::NE, curQ * pitch);")
            buf.line(select.format("s", "curQ * pitch"))
        with buf.indent("} else {  // a tail block: row by row"):
            with buf.indent("for (uint32_t r = 0; r < curQ; ++r) {"):
                buf.line("AscendC::LocalTensor<float> row = s[r * pitch];")
                self._where_row(buf, keep_row)

    def _by_chunks(self, buf, call: str) -> None:
        """``call`` (with ``c`` the first key and ``n`` the keys of a 64-float chunk) over the
        tile's rows at once, one chunk at a time: ``rb`` is the row pitch in 32-byte blocks."""
        with buf.indent("for (uint32_t c = 0; c < curKv; c += 64) {"):
            buf.line("uint64_t n = curKv - c < 64 ? curKv - c : 64;")
            buf.line(call)

    def emit_tile_softmax(self, buf, mask_row, keep_row) -> None:
        """The flash kernel's online softmax of the score tile, every row at once: each op
        takes the tile's rows as its repeats (a 64-float chunk of a row each, rows ``pitch``
        apart), row values are broadcast with Brcb; only the Where's bool condition goes row
        by row. No scalar unit on the way: shift and blockSum are left for the caller."""
        s = self.shape
        rep = "AscendC::BinaryRepeatParams(1, 1, {0}, rb, rb, {1})"
        buf.line("uint8_t rb = pitch / 8;  // a score row in 32-byte blocks")
        buf.line("AscendC::LocalTensor<float> bc = bcBuf.Get<float>();")
        if s.scale != 1.0:
            buf.line("AscendC::Muls(s, s, SCALE, curQ * pitch);")
        mask_src = None
        if mask_row is not None:  # the mask's rows are pitch apart, or one row for all
            full = s.mask.row_stride != 0
            mask_src = (mask_row.split("[")[0], "1, rb" if full else "1, 0")
        inside = mask_src is not None and (keep_row is None or s.mask_inside)

        def add_mask():
            name, strides = mask_src
            blk, rstride = strides.split(", ")
            self._by_chunks(buf, f"AscendC::Add(s[c], s[c], {name}[c], n, curQ, "
                                 f"{rep.format(blk, rstride)});")
        if inside:
            with self._guard(buf, "mask"):
                add_mask()
        if keep_row is not None:
            with self._guard(buf, "keep"):
                self._where_tile(buf, keep_row)
        if mask_src is not None and not inside:
            with self._guard(buf, "mask"):
                add_mask()
        only = "AscendC::ReduceOrder::ORDER_ONLY_VALUE"
        buf.line("uint64_t n0 = curKv < 64 ? curKv : 64;")
        buf.line(f"AscendC::WholeReduceMax(red, s, n0, curQ, 1, 1, rb, {only});")
        with buf.indent("for (uint32_t c = 64; c < curKv; c += 64) {"):
            buf.line("uint64_t n = curKv - c < 64 ? curKv - c : 64;")
            buf.line(f"AscendC::WholeReduceMax(blockSum, s[c], n, curQ, 1, 1, rb, {only});")
            buf.line("AscendC::Max(red, red, blockSum, curQ);")
        buf.line("AscendC::Max(red, red, rowMax, curQ);  // the new running maxima")
        buf.line("AscendC::Sub(shift, rowMax, red, curQ);")
        buf.line("AscendC::Adds(rowMax, red, 0.0f, curQ);")
        buf.line("AscendC::Brcb(bc, red, (curQ + 7) / 8, {1, 8});")
        self._by_chunks(buf, f"AscendC::Sub(s[c], s[c], bc, n, curQ, {rep.format(0, 1)});")
        self._by_chunks(buf, "AscendC::Exp(s[c], s[c], n, curQ, "
                             "AscendC::UnaryRepeatParams(1, 1, rb, rb));")
        buf.line("AscendC::WholeReduceSum(blockSum, s, n0, curQ, 1, 1, rb);")
        with buf.indent("for (uint32_t c = 64; c < curKv; c += 64) {"):
            buf.line("uint64_t n = curKv - c < 64 ? curKv - c : 64;")
            buf.line("AscendC::WholeReduceSum(red, s[c], n, curQ, 1, 1, rb);")
            buf.line("AscendC::Add(blockSum, blockSum, red, curQ);")

    def emit_row_softmax(self, buf, mask_row, keep_row) -> None:
        """The staged kernel's online softmax of the score tile, row by row, the row maxima
        and sums on the scalar unit."""
        s = self.shape
        with buf.indent("for (uint32_t r = 0; r < curQ; ++r) {  // online softmax, row r"):
            buf.line("AscendC::LocalTensor<float> row = s[r * pitch];")
            if s.scale != 1.0:
                buf.line("AscendC::Muls(row, row, SCALE, curKv);")
            inside = mask_row is not None and (keep_row is None or s.mask_inside)
            if inside:
                buf.line(f"AscendC::Add(row, row, {mask_row}, curKv);")
            if keep_row is not None:  # Where(keep, row, fill): bytes -> half -> bits
                self._where_row(buf, keep_row)
            if mask_row is not None and not inside:
                buf.line(f"AscendC::Add(row, row, {mask_row}, curKv);")
            buf.line("AscendC::ReduceMax(red, row, work, curKv);")
            _sync(buf, "V_S", "the block maximum goes to the scalar unit")
            buf.line("float before = rowMax.GetValue(r), seen = red.GetValue(0);")
            buf.line("float now = seen > before ? seen : before;")
            buf.line("rowMax.SetValue(r, now);")
            buf.line("shift.SetValue(r, before - now);")
            _sync(buf, "S_V", "red and shift are rewritten by the vector unit")
            buf.line("AscendC::Adds(row, row, -now, curKv);")
            buf.line("AscendC::Exp(row, row, curKv);")
            buf.line("AscendC::ReduceSum(red, row, work, curKv);")
            _sync(buf, "V_S", "the block sum goes to the scalar unit")
            buf.line("blockSum.SetValue(r, red.GetValue(0));")
            _sync(buf, "S_V", "")

    def emit_mask_in(self, buf) -> str:
        """Load this key block of the mask (one row when it broadcasts over rows); returns the
        expression of row r's float mask inside the loop."""
        s, t = self.shape, self.ctype
        self._block_decls(buf, "mask", t, "C0")
        if self.elem == 2:
            buf.line("AscendC::LocalTensor<float> maskF = maskFBuf.Get<float>();")
        with self._guard(buf, "mask"):
            return self._mask_block(buf)

    def _mask_block(self, buf) -> str:
        """``emit_mask_in``'s copy of the block and its cast and coefficient."""
        s, t = self.shape, self.ctype
        full, rows = self._block_in(buf, s.mask, "mask", t, "C0", "the mask block")
        source = "maskT"
        # the mask's rows (32-byte blocks of the tensors' type) lie as far apart as the float
        # scores' (fp32; fp16 with half score tiles): the block at once, else row by row
        at_once = self.plan.half_scores or self.elem == 4
        count = f"{rows} * pitch" if full else "curKv"
        if self.elem == 2:
            if at_once:
                buf.line(f"AscendC::Cast(maskF, maskT, AscendC::RoundMode::CAST_NONE, "
                         f"{count});  // the block at once")
            else:
                with buf.indent(f"for (uint32_t r = 0; r < {rows}; ++r) {{"):
                    buf.line("AscendC::Cast(maskF[r * pitch], maskT[r * maskPitch], "
                             "AscendC::RoundMode::CAST_NONE, curKv);")
            source, pitch = "maskF", "pitch"
        else:
            pitch = "maskPitch"
        if s.mask_coef != 1.0:
            if at_once:
                buf.line(f"AscendC::Muls({source}, {source}, MASK_COEF, {count});")
            else:
                with buf.indent(f"for (uint32_t r = 0; r < {rows}; ++r) {{"):
                    buf.line(f"AscendC::Muls({source}[r * {pitch}], {source}[r * {pitch}], "
                             "MASK_COEF, curKv);")
        return f"{source}[r * {pitch}]" if full else source

    def emit_keep_in(self, buf) -> str:
        """Load this key block of the Where's bool condition (a byte an element; one row when
        it broadcasts over rows); returns the expression of row r's bytes inside the loop."""
        self._block_decls(buf, "keep", "uint8_t", "32")
        with self._guard(buf, "keep"):
            full, _ = self._block_in(buf, self.shape.keep, "keep", "uint8_t", "32",
                                     "the condition block")
        return "keepT[r * keepPitch]" if full else "keepT"

    @staticmethod
    def _block_decls(buf, role: str, ctype: str, per_block: str) -> None:
        """``<role>T`` and its row pitch ``<role>Pitch``, declared ahead of a causal guard
        (``_guard``) so that the guarded load and the guarded use both see them."""
        buf.line(f"AscendC::LocalTensor<{ctype}> {role}T = {role}Buf.Get<{ctype}>();")
        buf.line(f"uint32_t {role}Pitch = (curKv + {per_block} - 1) / {per_block} * "
                 f"{per_block};")

    def _block_in(self, buf, op, role: str, ctype: str, per_block: str, what: str):
        """Copy this key block of ``op`` (rows of queries, or one row when it broadcasts) into
        ``<role>T``, rows ``<role>Pitch`` apart (``per_block`` elements a 32-byte block);
        returns (one row per query, the rows expression)."""
        full = op.row_stride != 0
        rows = "curQ" if full else "1"
        stride = self._int(f"{role}.row_stride")
        at = f"{role}Base + kvOff" + (f" + static_cast<uint64_t>(qOff) * {stride}"
                                      if full else "")
        buf.line(f"CopyTileIn({role}T, {self._n(op)}Gm[{at}], {rows}, curKv, {role}Pitch, "
                 f"{stride if full else 'curKv'});")
        _sync(buf, "MTE2_V", f"{what} is in the UB")
        return full, rows

    def _guard(self, buf, role: str):
        """``if (diag) {`` around the ``role`` operand's work where the causal plan lets the
        blocks every row sees whole skip it (``AttentionPlan.causal``); else nothing."""
        if self.plan.causal is None or self.plan.causal.role != role:
            return contextlib.nullcontext()
        return buf.indent("if (diag) {  // the diagonal block: its mask")

    def emit_members(self, buf):
        buf.line("TilingData tiling;")
        if self.rt is not None:  # a symbolic sequence: this call's sizes (Init)
            for const in RUNTIME_CONSTS:
                if const != "ROUND_KV" or self.plan.flash:
                    buf.line(f"uint32_t {const} = 0;")
        for p in self.params:
            buf.line(f"AscendC::GlobalTensor<{cpp_type(p.dtype)}> {self.names[p.name]}Gm;")
        if self.shape.fill_param is not None:
            buf.line("float fillValue;  // the Where's fill, read once")
        if self.plan.flash:
            buf.line(f"AscendC::GlobalTensor<{self._score_type}> wsGm;  "
                     "// this client's score-tile slots")
        for name in self.layout:
            buf.line(f"AscendC::TBuf<AscendC::TPosition::VECCALC> {name};")

    # ---- what the launcher needs ------------------------------------------------------------
    def emit_tiling_init(self, buf, var: str) -> None:
        s, p, t = self.shape, self.plan, self.tiling
        common = {"usedCoreNum": t.cores, "depthA1": 1, "depthB1": 1, "stepM": 1, "stepN": 1,
                  "stepKa": 1, "stepKb": 1, "isBias": 0, "iterateOrder": 0, "dbL0A": 1,
                  "dbL0B": 1, "dbL0C": 1}
        org_n, org_kb = (s.seq_kv, s.k.row_stride) if s.k_transposed else (s.k.col_stride, 1)
        qk = {**common, "M": s.seq_q, "N": org_n, "Ka": s.q.row_stride, "Kb": org_kb,
              "singleCoreM": p.base_q,
              "singleCoreN": p.round_blocks * p.base_kv if p.flash else p.base_kv,
              "singleCoreK": s.head_dim, "baseM": p.base_q, "baseN": p.base_kv,
              "baseK": p.base_k_qk}
        pv = {**common, "M": p.base_q, "N": s.v.row_stride, "Ka": p.base_kv,
              "Kb": s.seq_kv, "singleCoreM": p.base_q, "singleCoreN": s.head_dim,
              "singleCoreK": p.base_kv, "baseM": p.base_q, "baseN": p.d16,
              "baseK": p.base_kv}
        buf.line(f"{self.symbol}_impl::TilingData {var}{{}};")
        for name, values in (("qk", qk), ("pv", pv)):
            emit_field_assignments(buf, self.symbol, var, "int32_t",
                                   {f"{name}.{field}": values[field] for field in CUBE_FIELDS})
        emit_field_assignments(buf, self.symbol, var, "uint32_t",
                               {"itemsPerCore": t.block_len, "totalItems": t.total})

    # ---- a symbolic sequence: the host tiling function ------------------------------------
    def tiling_values(self) -> dict:
        """The TilingData fields a call's tiling sets from its size (the host tiling
        function's JSON form reports these)."""
        cube = ("M", "N", "Ka", "Kb", "singleCoreM", "singleCoreN", "singleCoreK", "baseM",
                "baseN", "baseK", "usedCoreNum")
        fields = [f"{name}.{f}" for name in ("qk", "pv") for f in cube]
        fields += ["itemsPerCore", "totalItems", "dimSize", *RUNTIME_CONSTS.values()]
        fields += [term_field(p) for p in self.terms if p not in ("seq_q", "seq_kv")]
        return dict.fromkeys(fields)

    def emit_tiling_body(self, buf, dims: dict) -> None:
        """``attention_tiling_at`` in C++: the call's sizes and strides (each term
        ``c2 s^2 + c1 s + c0`` of the size), its blocks (the bound's, or the lengths rounded
        up to 16 where less), query blocks, items over at most the bound's clients (the
        static plan's arithmetic, ``plan_attention``), a flash round's keys, and the two
        Matmul objects' TCubeTiling as ``emit_tiling_init`` fills a static one's."""
        from ...soc import get_soc
        from ...schedules.tiling import ASYNC_EVENT_FETCHES

        s, p, rt = self.shape, self.plan, self.rt
        self.emit_tiling_init(buf, "bound")
        buf.line("out.tiling = bound;")
        buf.line(f"uint64_t size = static_cast<uint64_t>({dims[rt.dim]});")
        buf.line("out.tiling.dimSize = size;")
        values = {}
        for path, (c2, c1, c0) in rt.terms:
            field = term_field(path)
            buf.line(f"uint64_t {field} = {c2}ULL * size * size + {c1}ULL * size + {c0}ULL;")
            values[path] = field
            if path not in ("seq_q", "seq_kv"):
                buf.line(f"out.tiling.{field} = {field};")

        def at(path):
            return values.get(path, str(shape_value(s, path)))

        for path, name in (("seq_q", "seqQ"), ("seq_kv", "seqKv")):
            if path not in values:  # a static length (the keys of a cross attention)
                buf.line(f"uint64_t {name} = {at(path)};")
        buf.line("uint64_t baseQ = (seqQ + 15) / 16 * 16;  // the length rounded up to 16")
        buf.line(f"if (baseQ > {rt.base_q}) baseQ = {rt.base_q};  // the bound's block")
        buf.line("uint64_t baseKv = (seqKv + 15) / 16 * 16;")
        buf.line(f"if (baseKv > {rt.base_kv}) baseKv = {rt.base_kv};")
        buf.line("uint64_t blocksQ = (seqQ + baseQ - 1) / baseQ;")
        buf.line(f"uint64_t total = static_cast<uint64_t>({s.batch}) * blocksQ;")
        most = self.tiling.work.aiv_ratio * get_soc(rt.soc).ai_cores
        cap = min(rt.cores or most, most)
        buf.line(f"uint64_t cores = total < {cap} ? total : {cap};")
        buf.line("if (cores < 1) cores = 1;")
        buf.line("uint64_t perCore = (total + cores - 1) / cores;")
        buf.line("cores = (total + perCore - 1) / perCore;  // the clients that get items")
        if p.flash:
            buf.line("uint64_t kvBlocks = (seqKv + baseKv - 1) / baseKv;")
            buf.line(f"uint64_t roundKv = (kvBlocks < {ASYNC_EVENT_FETCHES - 1} ? kvBlocks : "
                     f"{ASYNC_EVENT_FETCHES - 1}) * baseKv;")
        else:
            buf.line("uint64_t roundKv = 0;")
        for name, value in (("seqQ", "seqQ"), ("seqKv", "seqKv"), ("baseQ", "baseQ"),
                            ("baseKv", "baseKv"), ("blocksQ", "blocksQ"),
                            ("roundKv", "roundKv"), ("itemsPerCore", "perCore"),
                            ("totalItems", "total")):
            buf.line(f"out.tiling.{name} = static_cast<uint32_t>({value});")
        k_row = at("k.row_stride")
        org_n, org_kb = ("seqKv", k_row) if s.k_transposed else (at("k.col_stride"), "1")
        qk = {"M": "seqQ", "N": org_n, "Ka": at("q.row_stride"), "Kb": org_kb,
              "singleCoreM": "baseQ", "singleCoreN": "roundKv" if p.flash else "baseKv",
              "baseM": "baseQ", "baseN": "baseKv", "usedCoreNum": "cores"}
        pv = {"M": "baseQ", "N": at("v.row_stride"), "Ka": "baseKv", "Kb": "seqKv",
              "singleCoreM": "baseQ", "singleCoreK": "baseKv", "baseM": "baseQ",
              "baseK": "baseKv", "usedCoreNum": "cores"}
        for name, fields in (("qk", qk), ("pv", pv)):
            for field, value in fields.items():
                buf.line(f"out.tiling.{name}.{field} = static_cast<int32_t>({value});")
        ratio = self.tiling.work.aiv_ratio
        buf.line(f"out.blockDim = static_cast<int64_t>((cores + {ratio} - 1) / {ratio});")
