"""The prepare stage: the graph rewrites that run before grouping, in their order.

``prepare`` binds the weights, folds constants, applies every rewrite (``prepare_graph``), then
the precision mode. Each rewrite lives with its kind; this module only orders them:

* ``canonical``: ops with no kernel of their own put on kernels that exist (Dropout removed,
  Sum as Adds, Split as slices, one-element constants as scalars, MatMul scales hoisted onto
  the product, Softmax over a non-last axis moved last);
* ``constant_gathers``: a Gather whose constant indices read its whole axis in order, as a
  Reshape (a view);
* ``gqa``: attention over repeated K and V (repeat_kv) as attention over the KV heads;
* ``flat_matmul``: a MatMul of rows flattened over a symbolic dimension (``(seq * 2, K)``) as
  one over the rows themselves, so its M is a whole dimension (run-time tiling);
* ``rotary``: a Concat of negated pieces (rotate_half) as a Concat times a constant sign;
* ``batch_norm``: a BatchNorm folded into the Conv before it, or lowered to a scale and shift;
* ``reductions``: multi-axis reductions as rows, LRN's channel window as shifted slices;
* ``precision``: ATC's precision modes, applied last;
* ``horizontal``: HorizontalFusion (parallel MatMuls, parallel elementwise ops), which
  ``pipeline.plan_fusion`` applies to the prepared module as alternatives it estimates.

``relax_rewrite`` holds what the rewrites share (names, ONNX nodes, the report's records).

Example
-------
>>> mod = prepare(imported, params, fold_batchnorm=True)         # doctest: +SKIP
>>> mod = prepare_graph(mod, fold_batchnorm=True)                # doctest: +SKIP
"""
from __future__ import annotations

import logging

import tvm
from tvm import relax

from .batch_norm import fold_batch_norm, lower_batch_norm
from .canonical import (hoist_matmul_scales, one_element_constants_as_scalars, remove_dropout,
                        softmax_axis_to_last, split_as_slices, stack_sum_to_adds)
from .constant_gathers import constant_gathers_as_reshapes
from .flat_matmul import flat_matmuls_over_rows
from .gqa import grouped_query_attention
from .precision import apply_precision_mode
from .reductions import reductions_to_rows, window_sums_to_slices
from .rotary import negated_concats_as_signs

logger = logging.getLogger("tvm_ascend")


def prepare(mod: tvm.IRModule, params=None, fold_batchnorm: bool = True,
            precision: tuple = ("must_keep_origin_dtype", ())) -> tvm.IRModule:
    """Bind weights, fold constants (and BatchNorm into Conv weights), then apply the precision
    mode ``precision`` = (mode, keep_dtype[, op_select_implmode]) before grouping.

    The precision mode comes last, as ATC applies it to the optimised graph: a BatchNorm is
    folded into its Conv's weights in float32 first, so under a float16 mode the Conv and
    what is left of the BatchNorm (an Add) are one cube kernel, not a float16 Conv, a
    float32 BatchNorm and the Casts between them."""
    if params:
        mod = relax.transform.BindParams("main", params)(mod)
    folded = relax.transform.FoldConstant()(mod)
    missing = _undefined_callees(folded)
    if missing:
        # TVM 0.27's FoldConstant leaks the legalized shape computation of a
        # dynamic_strided_slice (ONNX Slice with starts/ends as graph inputs) into main as a
        # call_tir of a PrimFunc it never adds; unfolded, the slice legalizes whole later
        logger.info("FoldConstant left calls of undefined functions %s; not folding", missing)
        folded = mod
    return apply_precision_mode(prepare_graph(folded, fold_batchnorm), *precision)


def _undefined_callees(mod: tvm.IRModule) -> list[str]:
    """Names of the functions that ``call_tir`` bindings of ``mod`` call but it does not
    define."""
    defined = {gv.name_hint for gv in mod.get_global_vars()}
    call_tir = tvm.ir.Op.get("relax.call_tir")
    missing = []
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for block in getattr(func.body, "blocks", []):
            for binding in block.bindings:
                value = binding.value
                if (isinstance(value, relax.Call) and value.op.same_as(call_tir)
                        and value.args[0].name_hint not in defined):
                    missing.append(value.args[0].name_hint)
    return missing


def prepare_graph(mod: tvm.IRModule, fold_batchnorm: bool = True) -> tvm.IRModule:
    """``mod`` with every prepare rewrite applied, in order. BatchNorm folding (into a Conv,
    or else to a scale and shift) is a fusion rule (BatchNormFolding): with it off
    (``fold_batchnorm=False``, fusion off) each BatchNorm stays its own op.

    Example
    -------
    >>> mod = prepare_graph(relax.transform.FoldConstant()(mod))  # doctest: +SKIP
    """
    mod = one_element_constants_as_scalars(mod)  # a [1]-shaped scale is a constant too
    mod = constant_gathers_as_reshapes(mod)  # LLaMA's padding mask: a view, not a gather
    mod = negated_concats_as_signs(mod)  # rotate_half: the Negate fuses after the Concat
    mod = hoist_matmul_scales(split_as_slices(stack_sum_to_adds(remove_dropout(mod))))
    mod = grouped_query_attention(mod)  # after the identity Casts: K and V not repeated
    mod = flat_matmuls_over_rows(mod)  # GPT-2's view(-1, K) @ W over seq: M a whole dim
    if fold_batchnorm:
        mod = fold_batch_norm(mod)
    # after the folding, so a Conv before a BatchNorm still takes it into its weights
    mod = softmax_axis_to_last(lower_batch_norm(mod, enabled=fold_batchnorm))
    mod = window_sums_to_slices(mod)  # LRN's channel window
    # GlobalAveragePool's spatial mean among them: rows of H * W
    return reductions_to_rows(mod)


__all__ = ["prepare", "prepare_graph"]
