"""The fusion rules: one name per kind of group, with ATC's names where they correspond.

A group's kind is decided by its anchor op (MatMul, Conv, a reduction, ...), the way ATC's UB
fusion patterns are anchored: a MatMul with its bias and activation is a ``MatMulEpilogueFusion``
group whichever elementwise ops form the epilogue. Data movement inside a compute group, several
kernels recomputing one shared producer, and merging parallel ops add their own rules. A group is
allowed only if every rule it uses is switched on, so switching a rule off (switch file, fusion
level, rule set) really keeps every group of that kind from forming.

Example
-------
>>> from tvm_ascend.partition.rules import rule_by_name, group_rules
>>> rule_by_name("SoftmaxFusionPass").name
'SoftmaxFusion'
>>> group_rules(["relax.matmul", "relax.add", "relax.nn.relu"])
['MatMulEpilogueFusion']
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable

from ..config import RULE_SETS as CONFIG_RULE_SETS
from ..errors import FusionConfigError

CONSERVATIVE, AGGRESSIVE = "conservative", "aggressive"


@dataclass(frozen=True)
class FusionRule:
    """One switchable fusion rule.

    ``level`` is the lowest fusion level that applies it (``conservative`` rules keep an
    intermediate on chip with no loss of parallelism, so their gain is certain);
    ``atc_default`` says whether ATC applies the corresponding rule by default (the ATC-style
    baseline applies exactly those); ``atc_names`` are the ATC rule names a switch file may use;
    ``section`` is the part of an ATC JSON switch file (``GraphFusion`` rewrites the graph,
    ``UBFusion`` keeps intermediates in the UB) whose ``ALL`` covers the rule.
    """

    name: str
    level: str
    atc_default: bool
    atc_names: tuple[str, ...]
    description: str

    @property
    def section(self) -> str:
        return "GraphFusion" if self.name in _GRAPH_FUSION else "UBFusion"


_GRAPH_FUSION = frozenset({"LayerNormFusion", "SoftmaxFusion", "DataMovementFusion",
                           "BatchNormFolding", "CastFusion", "HorizontalFusion"})


# Order is the precedence of group_rules: the first anchor rule that matches names the group.
RULES = (
    FusionRule("AttentionFusion", AGGRESSIVE, False, (),
               "MatMul(Q, K^T) -> scale -> mask -> Softmax (-> MatMul with V) as one group"),
    FusionRule("GatedMatMulFusion", AGGRESSIVE, False, (),
               "two MatMuls of one input (SwiGLU's gate and up) with their elementwise join "
               "as one kernel"),
    FusionRule("MatMulEpilogueFusion", CONSERVATIVE, True,
               ("MatMulBiasAddFusionPass", "BatchMatMulFusionPass", "MatmulGeneralizedUbFusion"),
               "MatMul/Gemm/BatchMatMul with its bias, activation and residual epilogue"),
    FusionRule("ConvEpilogueFusion", CONSERVATIVE, True, ("TbeConvDequantVaddReluQuantFusionPass",),
               "Conv with its bias, activation and residual Add epilogue"),
    FusionRule("PoolingFusion", CONSERVATIVE, True, ("PoolingFusionPass",),
               "pooling with its elementwise prologue/epilogue"),
    FusionRule("LayerNormFusion", CONSERVATIVE, True,
               ("LayerNormFusionPass", "AddRmsNormFusionGraphPass"),
               "LayerNorm/RMSNorm chains (mean, variance, rsqrt, scale, shift): one row kernel"),
    FusionRule("SoftmaxFusion", CONSERVATIVE, True, ("SoftmaxFusionPass",),
               "Softmax/LogSoftmax with its scale and mask prologue as one row kernel"),
    FusionRule("ReductionFusion", CONSERVATIVE, False, (),
               "a reduction with its elementwise prologue and epilogue"),
    FusionRule("ElementwiseFusion", CONSERVATIVE, True, (),
               "elementwise/broadcast chains of any length"),
    FusionRule("DataMovementFusion", CONSERVATIVE, False, ("ConvConcatFusionPass",),
               "Transpose/Reshape/Slice/Concat/Split computed inside their consumer's kernel"),
    FusionRule("BatchNormFolding", CONSERVATIVE, True, ("BatchNormBnInferFusionPass",),
               "inference BatchNorm folded into the preceding Conv's weights at compile time"),
    FusionRule("CastFusion", CONSERVATIVE, True, ("CastRemoveFusionPass",),
               "a Cast at a group boundary computed inside the neighbouring group"),
    FusionRule("RecomputeFusion", AGGRESSIVE, False, (),
               "a cheap producer read by several consumers recomputed inside each of them"),
    FusionRule("MultiOutputFusion", AGGRESSIVE, False, (),
               "a producer read by several kernels merged into one of them, which also writes "
               "its result to GM for the others (a kernel of two outputs)"),
    FusionRule("HorizontalFusion", AGGRESSIVE, False, (),
               "parallel ops of one type on the same input merged into one kernel"),
)

ANCHOR_RULES = ("AttentionFusion", "GatedMatMulFusion", "MatMulEpilogueFusion", "ConvEpilogueFusion", "PoolingFusion",
                "LayerNormFusion", "SoftmaxFusion", "ReductionFusion", "ElementwiseFusion")

_BY_NAME = {rule.name: rule for rule in RULES}
_BY_ATC_NAME = {atc: rule for rule in RULES for atc in rule.atc_names}

RULE_SETS = CONFIG_RULE_SETS  # declared once, with CompileConfig.rule_set


def rule_by_name(name: str, where: str = "") -> FusionRule:
    """The rule called ``name`` (ours or ATC's spelling).

    Raises FusionConfigError naming ``where`` (file and line) and the closest known names.
    """
    key = name.strip()
    if key in _BY_NAME:
        return _BY_NAME[key]
    if key in _BY_ATC_NAME:
        return _BY_ATC_NAME[key]
    known = sorted(_BY_NAME) + sorted(_BY_ATC_NAME)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else \
        f"; known rules: {', '.join(sorted(_BY_NAME))}"
    prefix = f"{where}: " if where else ""
    raise FusionConfigError(f"{prefix}unknown fusion rule {name!r}{hint}")


def rules_for_level(level: str, rule_set: str = "tvm_ascend") -> frozenset[str]:
    """The rules on at a fusion level within a rule set (before any switch file applies)."""
    if level == "off":
        return frozenset()
    if rule_set == "atc_style":
        return frozenset(r.name for r in RULES if r.atc_default)
    if rule_set == "tvm_fuseops":
        # TVM's FuseOps forms these kinds on its own; the Ascend merge rules stay off.
        return frozenset({"MatMulEpilogueFusion", "ConvEpilogueFusion", "PoolingFusion",
                          "ReductionFusion", "ElementwiseFusion", "SoftmaxFusion",
                          "LayerNormFusion", "CastFusion"})
    allowed = (CONSERVATIVE,) if level == CONSERVATIVE else (CONSERVATIVE, AGGRESSIVE)
    return frozenset(r.name for r in RULES if r.level in allowed)


_MATMUL = ("matmul", "linear", "dense", "batch_matmul")
_CONV = ("conv1d", "conv2d", "conv3d")
# relax names pooling ops max_pool2d / avg_pool2d / adaptive_avg_pool2d: match the suffix
_POOL = ("pool1d", "pool2d", "pool3d")
_SOFTMAX = ("softmax", "log_softmax")
_NORM = ("layer_norm", "rms_norm", "group_norm")
_REDUCE = ("sum", "mean", "max", "min", "prod", "variance", "std", "argmax", "argmin")
_MOVE = ("permute_dims", "strided_slice", "concat", "split", "take", "gather", "pad",
         "broadcast_to", "repeat", "tile", "flip")
_CAST = ("astype",)
_VIEWS = ("reshape", "squeeze", "expand_dims", "flatten")  # free: no rule of their own


def _short(op: str) -> str:
    return op.rsplit(".", 1)[-1]


def _has(ops: list[str], names: tuple) -> int:
    return sum(1 for op in ops if any(_short(op) == n or _short(op).endswith(n) for n in names)
               and not _short(op).startswith("call_"))


def anchor_rule(ops: Iterable[str]) -> str:
    """The anchor rule of a group made of the Relax ops ``ops`` (``relax.matmul``, ...)."""
    ops = [str(op) for op in ops]
    matmuls = _has(ops, _MATMUL)
    if matmuls > 1 and not _has(ops, _SOFTMAX + _REDUCE):
        # two products and only elementwise work after them: the gated template's (SwiGLU);
        # attention needs its softmax between them
        return "GatedMatMulFusion"
    if matmuls and (_has(ops, _SOFTMAX) or matmuls > 1):
        return "AttentionFusion"
    if matmuls:
        return "MatMulEpilogueFusion"
    if _has(ops, _CONV):
        return "ConvEpilogueFusion"
    if _has(ops, _POOL):
        return "PoolingFusion"
    reductions = _has(ops, ("mean", "variance"))
    if _has(ops, _NORM) or (reductions >= 2 and _has(ops, ("sqrt", "rsqrt"))) or \
            (reductions >= 1 and _has(ops, ("rsqrt",))):
        return "LayerNormFusion"
    if _has(ops, _SOFTMAX) or (_has(ops, ("exp",)) and _has(ops, ("sum",))
                               and _has(ops, ("divide",))):
        return "SoftmaxFusion"
    if _has(ops, _REDUCE):
        return "ReductionFusion"
    return "ElementwiseFusion"


def group_rules(ops: Iterable[str], recomputed: bool = False,
                exported: bool = False) -> list[str]:
    """Every rule a group of several ops uses: its anchor rule, plus DataMovementFusion when
    it moves data and computes, CastFusion when it casts and computes, RecomputeFusion when it
    recomputes a shared producer, MultiOutputFusion when it also writes a shared producer's
    result for that result's other readers. A single op uses no rule."""
    ops = [str(op) for op in ops]
    if len(ops) <= 1:
        return []
    work = [op for op in ops if not _has([op], _VIEWS)]
    moves, casts = _has(work, _MOVE), _has(work, _CAST)
    if moves == len(work):  # only data movement (and views): a copy kernel
        return ["DataMovementFusion"] + (["RecomputeFusion"] if recomputed else [])
    rules = [anchor_rule(work)]
    if rules[0] in ("MatMulEpilogueFusion", "ConvEpilogueFusion"):
        # a LayerNorm, Softmax or other reduction in a MatMul's epilogue is that rule's group
        # too (a part of a LayerNorm, mean and subtract, is a reduction until it completes)
        rest = [op for op in work if not _has([op], _MATMUL + _CONV)]
        if anchor_rule(rest) in ("LayerNormFusion", "SoftmaxFusion", "ReductionFusion"):
            rules.append(anchor_rule(rest))
    if moves:
        rules.append("DataMovementFusion")
    if casts and casts < len(ops):
        rules.append("CastFusion")
    if recomputed:
        rules.append("RecomputeFusion")
    if exported:
        rules.append("MultiOutputFusion")
    return rules


def describe_rules() -> str:
    """A table of every rule, its level, ATC names and whether ATC applies it by default."""
    lines = [f"{'rule':<22}{'level':<14}{'ATC default':<13}ATC names"]
    for rule in RULES:
        lines.append(f"{rule.name:<22}{rule.level:<14}{'yes' if rule.atc_default else 'no':<13}"
                     f"{', '.join(rule.atc_names) or '-'}")
    return "\n".join(lines)


__all__ = ["FusionRule", "RULES", "RULE_SETS", "ANCHOR_RULES", "rule_by_name", "rules_for_level",
           "anchor_rule", "group_rules", "describe_rules"]
