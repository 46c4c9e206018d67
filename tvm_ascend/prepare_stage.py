"""The prepare stage: the graph rewrites that run before grouping, in their order.

Each rewrite lives with its kind (``prepare_passes``: CNN layers and parallel MatMuls;
``prepare_rewrites``: ops with no kernel of their own put on kernels that exist;
``reduction_axes``: multi-axis reductions as rows; ``window_sum``: LRN's channel window as
shifted slices); this module only orders them.

Example
-------
>>> mod = prepare_graph(mod, fold_batchnorm=True)                # doctest: +SKIP
"""
from __future__ import annotations

import tvm

from .prepare_passes import (fold_batch_norm, hoist_matmul_scales,
                             one_element_constants_as_scalars, split_as_slices,
                             stack_sum_to_adds)
from .prepare_rewrites import lower_batch_norm, remove_dropout, softmax_axis_to_last
from .reduction_axes import reductions_to_rows
from .window_sum import window_sums_to_slices


def prepare_graph(mod: tvm.IRModule, fold_batchnorm: bool = True) -> tvm.IRModule:
    """``mod`` with every prepare rewrite applied, in order. BatchNorm folding (into a Conv,
    or else to a scale and shift) is a fusion rule (BatchNormFolding): with it off
    (``fold_batchnorm=False``, fusion off) each BatchNorm stays its own op.

    Example
    -------
    >>> mod = prepare_graph(relax.transform.FoldConstant()(mod))  # doctest: +SKIP
    """
    mod = one_element_constants_as_scalars(mod)  # a [1]-shaped scale is a constant too
    mod = hoist_matmul_scales(split_as_slices(stack_sum_to_adds(remove_dropout(mod))))
    if fold_batchnorm:
        mod = fold_batch_norm(mod)
    # after the folding, so a Conv before a BatchNorm still takes it into its weights
    mod = softmax_axis_to_last(lower_batch_norm(mod, enabled=fold_batchnorm))
    mod = window_sums_to_slices(mod)  # LRN's channel window
    # GlobalAveragePool's spatial mean among them: rows of H * W
    return reductions_to_rows(mod)


