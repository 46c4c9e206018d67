"""AttentionSchedule: scores -> scale -> mask -> softmax -> product with V as ONE kernel.

The group (after FuseTIR) is ``S = Q @ K^T`` (a matmul block), elementwise blocks that scale
``S`` by a constant, add a mask and may take a ``Where(keep, ..., fill)`` on a bool tensor (a
causal mask, as GPT-2's TorchScript export writes it), TOPI's four softmax blocks (max, exp,
sum, normalise) over the last axis, and ``O = P @ V``; copies (Reshape/Transpose) may sit
before the products and after the last one. The template reads all of that back as index
maps: every operand is an affine map of (batch..., row, column) onto its parameter buffer, so
the head transposes turn into strides and disappear into the kernel.

The kernel (codegen/kernels/attention.py) computes it FlashAttention-style: each work item is a
block of ``base_q`` query rows of one batch*head; it walks the keys in blocks of ``base_kv``:
the cube computes a ``base_q x base_kv`` score tile (Matmul API, K read in place with
isTransposeB), the vector unit scales and masks it (the Where's condition block read as bytes,
made a bit mask by Cast and Compares, and applied by Select), and exponentiates it against a
running row maximum
(online softmax), and the cube multiplies the probabilities (A from the UB) with the V block;
the vector unit rescales and accumulates the output rows, divides by the running sums once and
writes them. The seq x seq scores never go to GM as a tensor. On split 2201 chips (910B) the
cube (AIC) and vector (AIV) exchange tiles through the GM workspace (L2), as CANN's fused
attention kernels do; the plan counts those bytes apart (``workspace_*_bytes`` of its
KernelWork). For fp16 the score tiles cross it in half (``AttentionPlan.score_bytes``), the
softmax's running maxima and sums staying float. On coupled chips (310P) the tiles stay on
chip, and without DataCopyPad the mask and output rows move as whole 32-byte blocks plus
scalar tails (``AttentionPlan.data_copy_pad``).

On split chips the plan may instead be ``method="flash"`` (offered by ``variants``, kept where
the timing model estimates it faster): the 1:2 mix with both AIVs as clients, the score tiles
of up to 13 key blocks per asynchronous Matmul round, computed by the AIC while the vector
units run the softmax of the ones before, and that softmax on whole tiles (``AttentionPlan``):
the mask's blocks and the Where's condition too (row by row only on a condition tail whose
rows lie apart from the scores'), the rows divided by their sums once at the end.
Its bytes are the staged kernel's; ``cost_model.attention_timing`` times it. Where the
partitioner found the Where's condition (or the additive mask) to be a causal constant
(``CausalOperand``, partition/causal.py) and skipping is exact (``causal_skip``), the flash
kernel visits per query block only the keys its rows see and masks only the diagonal blocks
(``CausalSkip``; its bytes, MACs and calls counted block by block, ``key_blocks``). Beside a
padding mask (GPT-2's TorchScript form) a row may see only padded keys and then take the
hidden ones too: the kernel checks each query block at run time and visits the skipped blocks
where a row needs them (``CausalSkip.recheck``). The plan and its estimate count the check
and no fallback; ``fallback_traffic`` is what each fallback adds (the emulator counts both).

K and V are read once per query block (``seq_q / base_q`` times in all): the FlashAttention
I/O bound, Theta(S^2 d^2 / M) for on-chip memory M. Keeping a head's K and V resident in L1
across query blocks needs an AIC-side program that owns L1 beside the AIV's (CANN's fused
attention kernels are written that way); the Matmul API this kernel uses reloads its operands
per call, and the emulator models no cross-core programs, so that is not done here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import tvm

from tvm_ascend.decision import CAUSAL_ATTR as CAUSAL
from tvm_ascend.decision import CausalOperand, Decision, causal_facts_from_json
from tvm_ascend.errors import TilingError

from .analysis.attention_shape import AttentionShape, _NotAttention, attention_shape
from .analysis.tir_walk import cached_by_identity
from .attention_runtime import AttentionRuntime, shape_at, symbolic_attention_shape
from .symbolic import ShapeSpec, shape_spec, specialize
from .l2_reuse import l2_served, walk_distance
from .tiling import FRACTAL, ceil_div, dtype_bytes, pieces, round_up
from .tiling import ASYNC_EVENT_FETCHES, SUPPORTED_DTYPES, KernelWork, TemplatePlan, Tiling
from .tiling import UB_RESERVED_BYTES
from .template import Template, mark_core_loop

SCORE_BYTES = 4  # scores, probabilities' statistics and the output accumulator are float
# fp16 attention on a split chip: the AIC's score tiles go through the workspace in half (its
# FIXPIPE rounds them), the AIV casts them to float for the softmax (running max / sum in float)
HALF_SCORE_BYTES = 2


# a Where's fill or an additive mask's masked value at most this: exp(fill - row max) is 0 in
# float wherever the row's maximum is a score above fill + 104 (as partition/causal.py reads)
CAUSAL_FILL_AT_MOST = -1e4


# a row falls back to the skipped key blocks unless its running maximum lies more than this
# above every skipped key's score: exp(score - max) is then 0 in float (exp underflows to 0
# below -103.98), so those keys add exactly nothing to the row's sum and product
RECHECK_GAP = 128.0


@dataclass(frozen=True)
class CausalSkip:
    """The flash kernel's key blocks of a causal attention: query ``i`` sees key ``j`` iff
    ``j <= i + offset``, by the Where's condition (``role`` "keep") or the additive mask
    ("mask"), a constant the partitioner checked (``CausalOperand``). Per query block the
    kernel visits the keys up to its last row's last visible one; the blocks every row sees
    whole skip the condition's (mask's) load and its vector work, the diagonal ones keep it.

    ``recheck`` (a padding mask beside the causal condition): a row whose every visible key
    is padded scores them as low as the hidden ones, and its softmax takes the hidden keys
    too. The kernel then visits whole key blocks (the blocks of the kernel that visits every
    key, so the two compute alike) and, per query block, checks at run time whether some
    row's running maximum lies within ``RECHECK_GAP`` of what a skipped key scores: "fill"
    (the Where holds the mask: the fill) or "fill+mask" (the fill plus the padding mask's
    largest value over the skipped keys, read at run time); such a query block visits the
    skipped key blocks too (``skipped_blocks``), so every row gets what every block
    visited gives."""

    role: str
    offset: int
    recheck: str = ""  # "", "fill" or "fill+mask"

    def visible_keys(self, q_off: int, rows: int, seq_kv: int, base_kv: int = 1) -> int:
        """Keys the query block of ``rows`` rows from ``q_off`` visits (a prefix; whole
        blocks of ``base_kv`` keys where the kernel rechecks)."""
        seen = min(seq_kv, q_off + rows + self.offset)
        if self.recheck:
            seen = min(seq_kv, round_up(seen, base_kv))
        return seen

    def needs_mask(self, q_off: int, kv_off: int, kv: int) -> bool:
        """Whether the key block of ``kv`` keys from ``kv_off`` hides a key from some row of
        the query block from ``q_off`` (its first row sees the fewest)."""
        return kv_off + kv > q_off + 1 + self.offset


@dataclass(frozen=True)
class AttentionKnobs:
    """Tunable choices of the attention template."""

    base_q: int | None = None   # query rows per work item; None: 64 (at most seq_q rounded)
    base_kv: int | None = None  # keys per score tile; None: 128 (fp16) / 64 (fp32)
    cores: int | None = None    # None: every AI core (flash: every AIV client)
    # "staged" (None): every tile in step, one AIV per AIC; "flash" (split chips only): the
    # score tiles in asynchronous rounds, both AIVs of each AIC as clients (``AttentionPlan``)
    method: str | None = None


@dataclass(frozen=True)
class AttentionPlan(TemplatePlan, template="attention"):
    """What the attention template decided for one kernel; its printer reads only this.

    ``shape``: the attention as ``attention_shape`` read it from the group (sizes, every
    operand's index map, scale, mask and Where).

    Blocks: a work item is ``base_q`` query rows of one batch*head (``blocks_q`` items per
    batch*head); a score tile covers ``base_kv`` keys; the QK product steps K (the head dim)
    by ``base_k_qk``; the PV tile is ``d16`` wide (the head dim rounded up to 16).

    ``ub_buffers``: (name, bytes) of every UB buffer the kernel reserves (InitBuffer), in the
    order printed. ``tensor_read_bytes`` / ``tensor_write_bytes``: GM bytes of the tensors
    (Q, K, V, mask, condition, output), apart from the workspace's. ``data_copy_pad``: the
    mask and output rows move by DataCopyPad (the SoC has it), else by whole blocks and
    scalar tails.

    ``method``: "staged" computes each score tile in step (``Iterate`` / ``GetTensorC<true>``)
    on a 1:1 mix. "flash" (split chips: 910B) runs the 1:2 mix, each AIV a client of its
    AIC's Matmul objects with its own work items, and asks for the score tiles of
    ``round_blocks`` key blocks in one asynchronous round (``Iterate<false>``): the AIC
    computes them ahead into the client's ``workspace_bytes`` of the user workspace while the
    AIV runs the softmax of the ones before, and serves the other client's products in
    between. The bytes moved are the staged kernel's (the emulator counts an asynchronous
    round as the synchronous one).
    """

    shape: AttentionShape
    base_q: int
    base_kv: int
    base_k_qk: int
    d16: int
    blocks_q: int
    ub_buffers: tuple[tuple[str, int], ...]
    tensor_read_bytes: int
    tensor_write_bytes: int
    data_copy_pad: bool
    method: str = "staged"
    round_blocks: int = 0
    score_bytes: int = SCORE_BYTES
    causal: CausalSkip | None = None  # flash only: the key blocks a causal mask lets it skip
    # a symbolic sequence: tiled per call (attention_tiling_at)
    runtime: AttentionRuntime | None = None

    @property
    def half_scores(self) -> bool:
        """Whether the AIC's score tiles come back in half (fp16 on a split chip, where they
        cross the GM workspace): the AIV casts each to float before its softmax."""
        return self.score_bytes == HALF_SCORE_BYTES

    @property
    def flash(self) -> bool:
        """Whether the kernel is the pipelined 1:2-mix one (``method == "flash"``)."""
        return self.method == "flash"

    @property
    def workspace_bytes(self) -> int:
        """User workspace of one client: a ``base_q x base_kv`` slot (``score_bytes`` an
        element) per score tile of a round (0 for the staged kernel, which needs none)."""
        return self.round_blocks * self.base_q * self.base_kv * self.score_bytes \
            if self.flash else 0


@dataclass(frozen=True)
class AttentionAnalysis:
    """What the attention template reads from a group: its ``shape`` (every operand's index
    map, scale, mask and Where) and ``prepared``, the group as ``apply`` schedules it (the
    template inlines nothing: the printer reads the operands through the index maps)."""

    shape: AttentionShape
    prepared: tvm.tirx.PrimFunc
    causal: CausalSkip | None = None
    # the causal fact (with ``causal``), or why none is used (every kernel visits every key
    # block then): for the fusion report
    causal_note: str = ""
    causal_recheck: str = ""  # with ``causal``: the flash kernel's run-time check, for the report
    # a symbolic sequence: ``shape`` is the bound's, ``terms`` how its integers follow the
    # dimension (``attention_runtime.symbolic_attention_shape``)
    shapes: ShapeSpec = ShapeSpec()
    terms: tuple = ()

    def report_note(self, tiling, soc) -> str:
        """What the fusion report says of the kernel ``tiling`` plans on ``soc``
        (``tiled_decision``): the flash kernel skips the key blocks a causal fact hides; the
        staged one (the only kernel on a coupled chip, 310P) visits every block, so its note
        must not promise the flash kernel's skip."""
        plan = tiling.plan
        if self.causal is None:
            return self.causal_note
        if plan.causal is not None:
            return f"{self.causal_note}: {FLASH_SKIP}{self.causal_recheck}"
        if plan.flash:
            return (f"{self.causal_note}: the flash kernel (method 'flash') is planned "
                    "without the skip: every key block visited and masked")
        why = ("the flash kernel, which skips the hidden ones, is not the one planned"
               if soc.npu_arch == 2201 else
               f"skipping them is the flash kernel's, which needs split AIC/AIV cores "
               f"({soc.name} has none)")
        return (f"{self.causal_note}: the staged kernel (method 'staged') visits every key "
                f"block and masks each; {why}")


# what the report says of the flash kernel planned with a causal fact's skip
FLASH_SKIP = ("the flash kernel (method 'flash') visits only the key blocks a query block "
              "sees and masks only the diagonal ones")


def _facts_of(func) -> tuple[tuple[CausalOperand, ...], dict]:
    """The partitioner's ``CausalOperand`` facts on ``func`` (``ir_attrs.CAUSAL``) and the
    values of its call's one-element constants, by parameter."""
    attrs = getattr(func, "attrs", None)
    if not attrs or CAUSAL not in attrs:
        return (), {}
    return causal_facts_from_json(str(attrs[CAUSAL]))


def causal_skip(func, shape: AttentionShape) -> tuple[CausalSkip | None, str]:
    """(the key blocks the flash kernel may skip, why or why not): where the Where's
    condition or the additive mask is a causal constant (a partitioner's fact) read as
    ``[row, col]`` itself, and skipping is exact: the masked value underflows exp against any
    visible score, and where another mask could hide a row's every visible key, what a
    skipped key scores is bounded at run time (``_recheck``) so that such rows fall back."""
    skip, note, recheck = _causal_skip(func, shape)
    return skip, (f"{note}: {FLASH_SKIP}{recheck}" if skip is not None else note)


def _causal_skip(func, shape: AttentionShape) -> tuple[CausalSkip | None, str, str]:
    """``causal_skip``'s skip, the fact (or why none is used) and the flash kernel's run-time
    check, apart: the report words them after the kernel planned (``report_note``)."""
    causal, scalars = _facts_of(func)
    facts = {f.param: f for f in causal}
    for role, op in (("keep", shape.keep), ("mask", shape.mask)):
        fact = facts.get(op.param) if op is not None else None
        if fact is None:
            continue
        what = "condition" if role == "keep" else "additive mask"
        if fact.additive != (role == "mask"):
            return None, "", ""
        if any(op.batch_coefs) or op.base or op.col_stride != 1 or op.row_stride != fact.width:
            return None, (f"the causal {what} {op.param} is read through another index map "
                          "than its own rows: every key block visited"), ""
        recheck, why = _recheck(shape, role, what, op, fact)
        if recheck is None:
            return None, why, ""
        if role == "mask":
            masked = fact.masked_below * shape.mask_coef
        elif shape.fill_param is None:
            masked = shape.fill
        else:  # a parameter times FILL: known where the call passes a constant
            value = scalars.get(shape.fill_param)
            masked = None if value is None else value * shape.fill
        if masked is None or masked > CAUSAL_FILL_AT_MOST or \
                (role == "mask" and shape.mask_coef <= 0):
            return None, (f"the causal {what} {op.param} masks to a value not known to be "
                          f"<= {CAUSAL_FILL_AT_MOST:g}: every key block visited"), ""
        return (CausalSkip(role, fact.offset, recheck),
                f"causal {what} {op.param} (constant, key j <= query i + {fact.offset})", why)
    return None, "", ""


def _recheck(shape: AttentionShape, role: str, what: str, op, fact) -> tuple[str | None, str]:
    """(the run-time check the skip needs beside another mask, '' for none; None where the
    skip is not exact, with the reason), and what the report adds about it."""
    other = shape.mask if role == "keep" else shape.keep
    if other is None:
        return "", ""
    if role == "mask":  # Where(keep, S + causal, fill): a skipped key's score depends on S
        return None, (f"the causal {what} {op.param} (j <= i + {fact.offset}) is not the "
                      f"only mask: the condition {other.param} could hide a row's every "
                      "visible key, and what a skipped key then scores depends on its score; "
                      "every key block visited")
    if shape.mask_inside:
        recheck, bound = "fill", "the Where's fill"
    elif other.row_stride == 0:
        recheck, bound = "fill+mask", (f"the fill plus {other.param}'s largest value over "
                                       "the skipped keys")
    else:
        return None, (f"the causal {what} {op.param} (j <= i + {fact.offset}) is not the "
                      f"only mask: {other.param} (a row per query, added after the Where) "
                      "could hide a row's every visible key, and bounding what the skipped "
                      "keys score would read all of it; every key block visited")
    return recheck, (f"; beside the padding mask {other.param} in whole key blocks, and a query "
                     f"block with a row whose running maximum is within {RECHECK_GAP:g} of "
                     f"{bound} (its visible keys all padded) visits the skipped blocks too "
                     "(checked at run time): exact for every row")


@cached_by_identity
def _shape_or_reason(func) -> AttentionShape | str:
    """``attention_shape(func)``, or why the group is not attention."""
    try:
        return attention_shape(func)
    except _NotAttention as err:
        return str(err)


@cached_by_identity
def _applies(func) -> Decision:
    shape = _shape_or_reason(func)
    if isinstance(shape, str):
        return Decision.no(shape)
    if shape.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"attention in {shape.dtype}; the kernel takes float16/float32")
    for name, op in (("Q", shape.q), ("V", shape.v), ("output", shape.out)):
        if op.col_stride != 1:
            return Decision.no(f"{name} ({op.param}) is not contiguous along the head dim")
    if shape.k.col_stride != 1 and shape.k.row_stride != 1:
        return Decision.no(f"K ({shape.k.param}) is contiguous along neither keys nor dim")
    return Decision.yes(f"attention {shape.batch} x {shape.seq_q} x {shape.seq_kv} x "
                        f"{shape.head_dim}: both products on the cube, online softmax")


class AttentionSchedule(Template):
    """Template for attention groups: two cube products around an online softmax."""

    name = "attention"
    Knobs = AttentionKnobs  # plan()'s knobs; knobs_from_json reads a record into one

    @staticmethod
    def applies(func) -> Decision:
        """Decision: the group is attention the kernel takes (over a symbolic sequence: so at
        the range's upper bound)."""
        spec = shape_spec(func)
        return _applies(specialize(func, spec.high()) if spec.symbolic else func)

    @staticmethod
    def analyse(func) -> AttentionAnalysis:
        """The attention the group computes (``AttentionAnalysis``); TilingError where the
        template does not take it. Over a symbolic sequence: the bound's attention and how
        its sizes and strides follow the dimension (``symbolic_attention_shape``)."""
        spec = shape_spec(func)
        at_bound = specialize(func, spec.high()) if spec.symbolic else func
        decision = _applies(at_bound)
        if not decision:
            raise TilingError(f"attention template does not apply: {decision.reason}")
        if spec.symbolic:
            shape, terms = symbolic_attention_shape(func, spec)
            (dim,) = spec.dims
            note = (f"run-time tiled: the sequence over {dim.name} in {dim.low}~{dim.high}, "
                    f"planned at {dim.high}, each call's blocks counted by its host tiling "
                    "function")
            if _facts_of(func)[0]:
                note += "; the causal skip is not taken over a symbolic sequence"
            return AttentionAnalysis(shape, func, None, causal_note=note, shapes=spec,
                                     terms=terms)
        shape = _shape_or_reason(func)
        return AttentionAnalysis(shape, func, *_causal_skip(func, shape))

    @staticmethod
    def plan(analysis: AttentionAnalysis, soc, knobs: AttentionKnobs | None = None) -> Tiling:
        """Blocks, cores, UB and GM traffic of the analysed attention on ``soc``; ``knobs``
        (AttentionKnobs) as the search chose, None for the defaults. Over a symbolic
        sequence: the bound's Tiling, its plan telling how each call tiles."""
        knobs = knobs or AttentionKnobs()
        tiling = plan_attention(analysis.shape, soc, knobs, analysis.causal)
        if not analysis.shapes.symbolic:
            return tiling
        p = tiling.plan
        runtime = AttentionRuntime(analysis.shapes, soc.name, analysis.shapes.dims[0].name,
                                   p.base_q, p.base_kv, knobs.cores, p.method, analysis.terms)
        return dataclasses.replace(tiling, plan=dataclasses.replace(p, runtime=runtime))

    @staticmethod
    def apply(analysis: AttentionAnalysis, tiling: Tiling):
        """The group with its first loop marked as the core loop: the kernel's structure
        comes from the plan, not from loop nests."""
        return mark_core_loop(analysis.prepared)

    @staticmethod
    def variants(func, soc) -> list[AttentionKnobs]:
        """Knobs worth estimating beside the default (the partitioner keeps the fastest): on
        split chips the pipelined 1:2-mix kernel (``method="flash"``)."""
        found = [AttentionKnobs()]
        if soc.npu_arch == 2201:
            found.append(AttentionKnobs(method="flash"))
        return found

    @staticmethod
    def knob_space(func, soc) -> list[AttentionKnobs]:
        """The default first, then query/key blocks of 32..128 and half the cores, each as
        the staged kernel and, on split chips, as the flash one."""
        methods = (None, "flash") if soc.npu_arch == 2201 else (None,)
        space = [AttentionKnobs()]
        for method in methods:
            for base_q in (32, 64, 128):
                for base_kv in (32, 64, 128):
                    for cores in (None, max(1, soc.ai_cores // 2)):
                        knobs = AttentionKnobs(base_q, base_kv, cores, method)
                        if knobs not in space:
                            space.append(knobs)
        return space


def _cube_fits(shape, soc, base_q, base_kv, d16, base_k_qk, clients: int = 1) -> str:
    """Why the two Matmul objects' L1/L0 reservations do not fit together ('' when they do);
    each of ``clients`` AIVs of a 1:2 mix reserves its objects in its part of the AIC's."""
    e = dtype_bytes(shape.dtype)
    need = {
        "L1": (base_q * base_k_qk + base_k_qk * base_kv) * e + (base_q * base_kv
                                                                 + base_kv * d16) * e,
        "L0A": (base_q * base_k_qk + base_q * base_kv) * e,
        "L0B": (base_k_qk * base_kv + base_kv * d16) * e,
        "L0C": (base_q * base_kv + base_q * d16) * 4,
    }
    have = {"L1": soc.l1_bytes // clients, "L0A": soc.l0a_bytes // clients,
            "L0B": soc.l0b_bytes // clients, "L0C": soc.l0c_bytes // clients}
    over = [f"{k} {need[k]} > {have[k]}" for k in need if need[k] > have[k]]
    return ", ".join(over)


def ub_layout(shape, base_q: int, base_kv: int, flash: bool = False) -> dict:
    """Bytes of every UB buffer the kernel reserves (InitBuffer), by buffer name; the flash
    kernel adds ``bcBuf``, a row value per 32-byte block (Brcb) for its whole-tile ops."""
    e = dtype_bytes(shape.dtype)
    pitch_kv = round_up(base_kv, 8)
    pitch_d = round_up(shape.head_dim, 8)  # float rows of the product tiles (ND_ALIGN)
    layout = {"sBuf": base_q * pitch_kv * 4, "oBuf": base_q * pitch_d * 4,
              "accBuf": base_q * pitch_d * 4, "statBuf": 5 * round_up(base_q, 8) * 4,
              "workBuf": 64 * 4}
    if flash:
        layout["bcBuf"] = round_up(base_q, 8) * 8 * 4
    if e == 2:
        layout["pBuf"] = base_q * pitch_kv * 2
        layout["outBuf"] = base_q * round_up(shape.head_dim, 16) * 2
    if shape.mask is not None:
        rows = 1 if shape.mask.row_stride == 0 else base_q
        layout["maskBuf"] = rows * round_up(base_kv, 32 // e) * e
        if e == 2:
            layout["maskFBuf"] = rows * pitch_kv * 4
    if shape.keep is not None:  # bool bytes, then a row of them as half, then its bit mask
        rows = 1 if shape.keep.row_stride == 0 else base_q
        layout["keepBuf"] = rows * round_up(base_kv, 32)
        # the flash kernel makes the whole block's bit mask at once (a row where it broadcasts)
        mask_rows = rows if flash else 1
        layout["keepHBuf"] = mask_rows * round_up(base_kv, 16) * 2
        layout["keepBitsBuf"] = mask_rows * ceil_div(base_kv, 8)
    return {k: round_up(v, 32) for k, v in layout.items()}


def key_blocks(shape, base_q: int, base_kv: int, causal: CausalSkip | None = None) -> list:
    """The kernel's key blocks, per query block: (first query, rows, [(first key, keys,
    masked)]); every block of ``seq_kv`` keys, masked, without ``causal``; with it the keys the
    query block sees, ``masked`` only where some row of it has a key hidden."""
    blocks = []
    for q_off, q in zip(range(0, shape.seq_q, base_q), pieces(shape.seq_q, base_q)):
        seen = causal.visible_keys(q_off, q, shape.seq_kv, base_kv) if causal else \
            shape.seq_kv
        keys = [(kv_off, kv, causal is None or causal.needs_mask(q_off, kv_off, kv))
                for kv_off, kv in zip(range(0, seen, base_kv), pieces(seen, base_kv))]
        blocks.append((q_off, q, keys))
    return blocks


def skipped_blocks(shape, base_q: int, base_kv: int, causal: CausalSkip | None) -> list:
    """Per query block (``key_blocks``' order) the key blocks a rechecking causal kernel
    visits only where the run-time check finds a row that needs them (all masked); empty
    lists without a recheck. The plan's bytes and calls are those of no fallback."""
    found = []
    for q_off, q, keys in key_blocks(shape, base_q, base_kv, causal):
        seen = sum(kv for _, kv, _ in keys)
        rest = shape.seq_kv - seen if causal is not None and causal.recheck else 0
        found.append((q_off, q, [(seen + off, kv, True) for off, kv in
                                 zip(range(0, rest, base_kv), pieces(rest, base_kv))]))
    return found


def fallback_traffic(plan: AttentionPlan, soc) -> list[dict]:
    """Per query block (of one batch*head), the GM bytes and MACs of its fallback pass over
    the skipped key blocks (``skipped_blocks``): what a work item adds to the plan's counts
    where the run-time check finds a row that needs them."""
    shape = dataclasses.replace(plan.shape, batch_extents=(1,))
    plain = CausalSkip(plan.causal.role, plan.causal.offset) if plan.causal else None
    found = []
    for q_off, q, keys in skipped_blocks(plan.shape, plan.base_q, plan.base_kv, plan.causal):
        traffic = _traffic(shape, soc, [(q_off, q, keys)], plan.base_k_qk, plan.score_bytes,
                           plain)
        traffic["tensor_write_bytes"] = 0  # the item writes its output rows once, after
        found.append(traffic)
    return found


def plan_attention(shape: AttentionShape, soc, knobs: AttentionKnobs,
                   causal: CausalSkip | None = None) -> Tiling:
    """Blocks, cores, UB and the exact GM traffic of the kernel for ``shape`` on ``soc``;
    ``causal`` (``AttentionAnalysis.causal``): the flash kernel's key blocks skipped."""
    e = dtype_bytes(shape.dtype)
    c0 = 32 // e
    for name in ("base_q", "base_kv"):
        value = getattr(knobs, name)
        if value is not None and (value % FRACTAL or not FRACTAL <= value <= 128):
            raise TilingError(f"{name}={value} must be a multiple of {FRACTAL} in 16..128")
    if shape.head_dim > 256:
        raise TilingError(f"head dim {shape.head_dim} > 256: the PV tile would not fit L0C")
    method = knobs.method or "staged"
    if method not in ("staged", "flash"):
        raise TilingError(f"method={method!r}: the attention kernel is 'staged' or 'flash'")
    flash = method == "flash"
    if flash and soc.npu_arch != 2201:
        raise TilingError(f"method='flash' pipelines the AIC's score tiles through the GM "
                          f"workspace of a split chip (910B); {soc.name} is a coupled chip, "
                          "whose tiles stay on chip: use the staged kernel")
    clients = 2 if flash else 1  # AIVs per AIC
    causal = causal if flash else None  # the staged kernel visits every key block
    base_q = min(knobs.base_q or 64, round_up(shape.seq_q, FRACTAL))
    base_kv = min(knobs.base_kv or (128 if e == 2 else 64), round_up(shape.seq_kv, FRACTAL))
    d16 = round_up(shape.head_dim, FRACTAL)
    base_k_qk = min(64, round_up(shape.head_dim, c0))
    while True:
        over = _cube_fits(shape, soc, base_q, base_kv, d16, base_k_qk, clients)
        if not over:
            break
        if base_kv > FRACTAL and knobs.base_kv is None:
            base_kv -= FRACTAL
        else:
            raise TilingError(f"the two Matmul objects do not fit {soc.name}: {over}")
    layout = ub_layout(shape, base_q, base_kv, flash)
    ub = sum(layout.values())
    if ub > soc.ub_bytes - UB_RESERVED_BYTES:
        raise TilingError(f"attention needs {ub} UB bytes; {soc.name} has {soc.ub_bytes}")
    blocks_q = ceil_div(shape.seq_q, base_q)
    total = shape.batch * blocks_q
    most = clients * soc.ai_cores  # the clients (AIVs) the launch can run
    cores = max(1, min(knobs.cores or most, most, total))
    per_core = ceil_div(total, cores)
    used = ceil_div(total, per_core)
    # the score tiles cross the workspace in the tensors' half on split chips (fp16 in,
    # fp16 scores: CANN's fused attention does the same); the softmax itself runs in float
    score_bytes = HALF_SCORE_BYTES if e == 2 and soc.npu_arch == 2201 else SCORE_BYTES
    schedule = key_blocks(shape, base_q, base_kv, causal)
    traffic = _traffic(shape, soc, schedule, base_k_qk, score_bytes, causal)
    if shape.fill_param is not None:  # the Where's fill: read once per core
        traffic["tensor_read_bytes"] += used * e
    kv_blocks = ceil_div(shape.seq_kv, base_kv)
    # a round's fetches past ASYNC_EVENT_FETCHES - 1 would wait for the whole round
    round_blocks = min(kv_blocks, ASYNC_EVENT_FETCHES - 1) if flash else 0
    plan = AttentionPlan(shape, base_q, base_kv, base_k_qk, d16, blocks_q, tuple(layout.items()),
                         traffic["tensor_read_bytes"], traffic["tensor_write_bytes"],
                         bool(soc.has_data_copy_pad), method, round_blocks, score_bytes,
                         causal)
    # every query block reads the whole of its head's K and V (and its Q rows once per score
    # tile): the re-reads past Q + K + V (+ mask) are L2 hits when what the working cores
    # read in one pass fits in L2 (l2_reuse): a query block each, K and V of the heads in
    # flight (cores on one head share them)
    unique = _unique_tensor_bytes(shape)
    pass_bytes = traffic["tensor_read_bytes"] // max(1, shape.batch * blocks_q)
    kv_bytes = 2 * shape.seq_kv * shape.head_dim * e
    heads = min(used, shape.batch)
    distance = walk_distance([(heads, kv_bytes), (used, max(0, pass_bytes - kv_bytes))])
    l2_hits = l2_served(max(0, traffic["tensor_read_bytes"] - unique), distance, soc)
    # the flash kernel's timing tells the AIC's operand loads (Q, K, V blocks) from the AIV's
    operand = traffic["operand_bytes"] if flash else 0
    work = KernelWork(steps=per_core, vector_repeats=min(per_core, total),
                      cube_macs=traffic["cube_macs"], l2_operand_bytes=l2_hits,
                      cube_operand_bytes=operand,
                      cube_workspace_bytes=traffic["cube_workspace_bytes"] if flash else 0,
                      workspace_read_bytes=traffic["workspace_read_bytes"],
                      workspace_write_bytes=traffic["workspace_write_bytes"],
                      scalar_elems=_scalar_tails(shape, soc, base_q, base_kv),
                      extra_vector_calls=_busiest_core_calls(
                          shape, schedule, base_q, per_core, score_bytes, causal, base_kv)
                      if flash else 0,
                      aiv_ratio=clients, round_tiles=round_blocks,
                      attention_blocks=ceil_div(sum(len(keys) for _, _, keys in schedule),
                                                blocks_q) if flash else 0)
    return Tiling("attention", total, used, per_core, 1, per_core, 1, 0, ub, soc.ub_bytes,
                  traffic["tensor_read_bytes"] + traffic["workspace_read_bytes"],
                  traffic["tensor_write_bytes"] + traffic["workspace_write_bytes"],
                  shape.head_dim, work=work, plan=plan)


def _busiest_core_calls(shape, schedule, base_q: int, per_core: int, score_bytes: int,
                        causal: CausalSkip | None, base_kv: int = 0) -> int:
    """Vector calls of the core whose ``per_core`` contiguous items issue the most (items
    run batch*head by batch*head, ``schedule``'s query blocks in turn)."""
    per_item = [_flash_vector_calls(shape, base_q, keys, score_bytes, causal) +
                _recheck_calls(shape, base_kv, keys, causal) for _, _, keys in schedule]
    calls = [per_item[i % len(per_item)] for i in range(shape.batch * len(per_item))]
    return max(sum(calls[i:i + per_core]) for i in range(0, len(calls), per_core))


def _flash_vector_calls(shape, base_q: int, keys: list, score_bytes: int = SCORE_BYTES,
                        causal: CausalSkip | None = None) -> int:
    """Vector calls the flash kernel issues for one item of ``base_q`` rows, as printed
    (codegen/kernels/attention.py ``emit_tile_softmax``): per key block the whole-tile ops
    (one per 64-float chunk of a row where chunked; the half score tile's cast), the mask's
    and the Where's row-by-row calls; per item the fills, and the final normalisation of the
    whole tile (the sums' broadcast, the divide by chunks, the cast at once where the float
    and half rows have one pitch, else by rows)."""
    e = dtype_bytes(shape.dtype)
    rows = base_q
    d_chunks = ceil_div(shape.head_dim, 64)
    calls = 3 + 1 + d_chunks  # Duplicates; Brcb of the sums, the divide
    if e == 2:
        calls += 1 if round_up(shape.head_dim, 8) == round_up(shape.head_dim, 16) else rows
    for _, kv, masked in keys:
        chunks = ceil_div(kv, 64)
        block = (1 if shape.scale != 1.0 else 0) + 2 * (2 * chunks - 1) + 4 + 2 * chunks + 3
        block += 1 if score_bytes == HALF_SCORE_BYTES else 0  # the half tile to float
        block += (1 if e == 2 else 0) + 1 + d_chunks + 1  # P cast; Brcb, rescale, add
        if shape.mask is not None and (masked or causal.role != "mask"):
            # the block's cast and coefficient at once
            block += chunks + (1 if e == 2 else 0) + (1 if shape.mask_coef != 1.0 else 0)
        if shape.keep is not None and (masked or causal.role != "keep"):
            if shape.keep.row_stride == 0:  # its bits once, selected row by row
                block += 2 + rows
            else:  # the whole tile where the condition's rows are the scores' pitch
                pitch = round_up(kv, 16 if score_bytes == HALF_SCORE_BYTES else 8)
                block += 3 if round_up(kv, 32) == pitch else 3 * rows
        calls += block
    return calls


def _recheck_calls(shape, base_kv: int, keys: list, causal: CausalSkip | None) -> int:
    """Vector calls of a query block's run-time check (codegen ``emit_recheck``), where it
    skipped keys: per block of skipped keys the padding mask row's cast, coefficient and
    maximum ("fill+mask"), then each row's gap to the skipped scores and their least."""
    rest = shape.seq_kv - sum(kv for _, kv, _ in keys)
    if causal is None or not causal.recheck or rest <= 0:
        return 0
    calls = 2  # Adds (each row's gap), ReduceMin
    if causal.recheck == "fill+mask":
        per_block = 1 + (1 if dtype_bytes(shape.dtype) == 2 else 0) + \
            (1 if shape.mask_coef != 1.0 else 0)
        calls += per_block * len(pieces(rest, base_kv))
    return calls


def _unique_tensor_bytes(shape) -> int:
    """Bytes of Q, K, V and the mask / condition blocks read once each (the first reads)."""
    e = dtype_bytes(shape.dtype)
    qkv = shape.batch * (shape.seq_q + 2 * shape.seq_kv) * shape.head_dim * e
    extra = 0
    for operand, elem in ((shape.mask, e), (shape.keep, 1)):
        if operand is not None:
            rows = 1 if operand.row_stride == 0 else shape.seq_q
            extra += shape.batch * rows * shape.seq_kv * elem
    return qkv + extra


def _scalar_tails(shape, soc, base_q, base_kv) -> int:
    """Elements moved on the scalar unit where ``soc`` lacks DataCopyPad: each output row's,
    each mask and keep block row's part past its whole 32-byte blocks (0 with DataCopyPad)."""
    if soc.has_data_copy_pad:
        return 0
    c0 = 32 // dtype_bytes(shape.dtype)
    tails = shape.seq_q * (shape.head_dim % c0)
    if shape.mask is not None:
        for q in pieces(shape.seq_q, base_q):
            rows = 1 if shape.mask.row_stride == 0 else q
            tails += sum(rows * (kv % c0) for kv in pieces(shape.seq_kv, base_kv))
    if shape.keep is not None:  # bool bytes: 32 a block
        for q in pieces(shape.seq_q, base_q):
            rows = 1 if shape.keep.row_stride == 0 else q
            tails += sum(rows * (kv % 32) for kv in pieces(shape.seq_kv, base_kv))
    return shape.batch * tails


def _traffic(shape, soc, schedule, base_k_qk, score_bytes=SCORE_BYTES,
             causal: CausalSkip | None = None) -> dict:
    """GM bytes as the kernel moves them (emulator README, "Cube"): per score tile, Q's rows
    and K's block over the head dim; the mask block; V's block; the output rows once. On 2201
    the score tile (``score_bytes`` an element) and the float product tile go AIC ->
    workspace -> UB and the probabilities UB -> workspace -> L1 (A from the UB): workspace
    bytes, counted apart from the tensors'."""
    e = dtype_bytes(shape.dtype)
    c0 = 32 // e
    split = soc.npu_arch == 2201
    t_read = w_read = w_write = macs = operand = cube_ws = 0
    for _, q, keys in schedule:
        if causal is not None and causal.recheck == "fill+mask":
            # the run-time check reads the padding mask's row over the skipped keys
            t_read += (shape.seq_kv - sum(kv for _, kv, _ in keys)) * e
        for _, kv, masked in keys:
            t_read += (q + kv) * shape.head_dim * e + kv * shape.head_dim * e
            operand += (q + kv) * shape.head_dim * e + kv * shape.head_dim * e
            if shape.mask is not None and (masked or causal.role != "mask"):
                t_read += (1 if shape.mask.row_stride == 0 else q) * kv * e
            if shape.keep is not None and (masked or causal.role != "keep"):
                # the Where's bool condition, a byte an element
                t_read += (1 if shape.keep.row_stride == 0 else q) * kv
            macs += round_up(q, FRACTAL) * round_up(kv, FRACTAL) * sum(
                round_up(k, c0) for k in pieces(shape.head_dim, base_k_qk))
            macs += round_up(q, FRACTAL) * round_up(shape.head_dim, FRACTAL) * \
                round_up(kv, c0)
            if split:
                staged = q * kv * score_bytes + q * kv * e + q * shape.head_dim * SCORE_BYTES
                w_read += staged
                w_write += staged
                # the AIC writes the score and product tiles (the AIV, the probabilities)
                cube_ws += q * kv * score_bytes + q * shape.head_dim * SCORE_BYTES
    b = shape.batch
    return {"tensor_read_bytes": b * t_read,
            "tensor_write_bytes": b * shape.seq_q * shape.head_dim * e,
            "workspace_read_bytes": b * w_read, "workspace_write_bytes": b * w_write,
            "cube_macs": b * macs, "operand_bytes": b * operand,
            "cube_workspace_bytes": b * cube_ws}


def attention_tiling_at(tiling, values: dict):
    """The Tiling one call of an attention kernel over a symbolic sequence runs with at
    ``values`` ({name: size}): the static plan of the call's shape with the bound's blocks as
    the ceiling, its UB the bound's (the kernel reserves its buffers once, at the bound)."""
    from tvm_ascend.soc import get_soc

    rt = tiling.plan.runtime
    size = rt.shapes.values(**values)[rt.dim]
    knobs = AttentionKnobs(rt.base_q, rt.base_kv, rt.cores, rt.method)
    call = plan_attention(shape_at(tiling.plan.shape, rt, size), get_soc(rt.soc), knobs)
    return dataclasses.replace(call, ub_bytes=tiling.ub_bytes, plan=dataclasses.replace(
        call.plan, ub_buffers=tiling.plan.ub_buffers))
