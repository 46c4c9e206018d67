"""BatchNorm in one place: folded into the Conv before it, or else lowered to a scale and shift.

``fold_batch_norm``: an inference BatchNormalization after a Conv (with or without the conv's
bias Add) is folded into the conv at compile time: ``W' = W * s`` per output channel and
``b' = b * s + beta - mean * s`` with ``s = gamma / sqrt(var + eps)``, so the layer becomes
``conv2d(x, W') + b'``, one kernel with its bias in the epilogue. Only constant weights and
statistics fold; anything else is left as it is.

``lower_batch_norm``: an inference BatchNorm that no Conv took in (``fold_batch_norm`` runs
first and wins) becomes ``x * scale + shift`` with per-channel constants
``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale``, computed in float64
and cast to the data's dtype, so the NPU runs it as elementwise ops that fuse with their
neighbours (DenseNet's Concat -> BN -> ReLU -> Conv). Each BatchNorm it looks at leaves a
``BatchNormLowering`` record in the report's ``prepare_rewrites``.

Both belong to the ``BatchNormFolding`` rule (ATC's ``BatchNormBnInferFusionPass``): switching
the rule off keeps each BatchNorm whole (a float16 one is still lowered: TVM 0.27 cannot
legalize it).

Example
-------
>>> mod = lower_batch_norm(fold_batch_norm(mod), enabled=True)  # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import ir_attrs
from .relax_rewrite import (NamedRewrite, bindings, call_name, const_value, replace_main,
                            rewrite_record, static_dims, use_counts, with_rewrite_records)

BATCH_NORM_LOWERING = "BatchNormLowering"


@mutator
class _BatchNormFolder(PyExprMutator, NamedRewrite):
    """Rewrites ``batch_norm(conv2d(x, W) [+ b])[0]`` with constant operands."""

    def __init__(self, mod, func):
        super().__init__(mod)
        self._setup(func, "bn_folded_conv")
        self.values = {b.var: b.value for b in bindings(func)}
        self.names = {b.value: b.var.name for b in bindings(func)}
        self.uses = use_counts(func)
        self.folded = 0
        self.folded_vars: list[str] = []  # the convs that took a BatchNorm in, for the report

    def _conv_and_bias(self, expr):
        """(conv2d call, bias as [C] numpy or None) that ``expr`` computes, or None."""
        value = self.values.get(expr, expr)
        if call_name(value) == "relax.nn.conv2d":
            return value, None
        if call_name(value) != "relax.add":
            return None
        for conv_var, bias_expr in ((value.args[0], value.args[1]),
                                    (value.args[1], value.args[0])):
            conv = self.values.get(conv_var)
            bias = const_value(bias_expr, self.values)
            if bias_expr in self.values and call_name(self.values[bias_expr]) == "relax.reshape":
                bias = const_value(self.values[bias_expr].args[0], self.values)
            if call_name(conv) == "relax.nn.conv2d" and bias is not None and \
                    self.uses.get(conv_var, 0) == 1:
                channels = int(conv.ty.shape.values[1])
                if bias.size == channels:
                    return conv, bias.reshape(-1)
        return None

    def visit_tuple_getitem_(self, op):
        bn = self.values.get(op.tuple_value, op.tuple_value)
        if op.index != 0 or call_name(bn) != "relax.nn.batch_norm" or bn.attrs.training \
                or int(bn.attrs.axis) != 1:
            return super().visit_tuple_getitem_(op)
        found = self._conv_and_bias(bn.args[0])
        stats = [const_value(a, self.values) for a in bn.args[1:5]]
        if found is None or any(s is None for s in stats):
            return super().visit_tuple_getitem_(op)
        conv, bias = found
        weight = const_value(conv.args[1], self.values)
        if weight is None or str(conv.attrs.kernel_layout) != "OIHW" or \
                str(conv.attrs.out_layout) != "NCHW":
            return super().visit_tuple_getitem_(op)
        self.folded += 1
        return self._folded(conv, weight, bias, stats, float(bn.attrs.epsilon))

    def _folded(self, conv, weight, bias, stats, eps):
        gamma, beta, mean, var = (s.astype(np.float64) for s in stats)
        dtype = weight.dtype
        scale = gamma / np.sqrt(var + eps)
        bias = np.zeros_like(scale) if bias is None else bias.astype(np.float64)
        new_w = (weight.astype(np.float64) * scale[:, None, None, None]).astype(dtype)
        new_b = ((bias - mean) * scale + beta).astype(dtype).reshape(1, -1, 1, 1)
        attrs = conv.attrs
        new_conv = self._emit(relax.op.nn.conv2d(
            self.visit_expr(conv.args[0]), relax.const(new_w), attrs.strides, attrs.padding,
            attrs.dilation, attrs.groups, attrs.data_layout, attrs.kernel_layout,
            attrs.out_layout, attrs.out_dtype), node_of=self.names.get(conv))
        self.folded_vars.append(new_conv.name)
        return relax.op.add(new_conv, relax.const(new_b))


def fold_batch_norm(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold inference BatchNorms into the Conv2Ds before them (constant operands only).

    Example
    -------
    >>> folded = fold_batch_norm(prepared_module)   # doctest: +SKIP
    """
    func = mod["main"]
    folder = _BatchNormFolder(mod, func)
    new_func = folder.visit_expr(func)
    if not folder.folded:
        return mod
    marked = list(folder.folded_vars)
    if func.attrs and ir_attrs.FOLDED_BATCH_NORM in func.attrs:
        marked += [str(v) for v in func.attrs[ir_attrs.FOLDED_BATCH_NORM]]
    new_func = folder._with_nodes(new_func).with_attr(ir_attrs.FOLDED_BATCH_NORM, marked)
    folder.builder_.update_func(mod.get_global_var("main"), new_func)
    out = folder.builder_.get()
    return relax.transform.DeadCodeElimination(["main"])(out)


@mutator
class _BatchNormLowering(PyExprMutator, NamedRewrite):
    """``batch_norm(x, gamma, beta, mean, var)[0]`` -> ``x * scale + shift`` (constants)."""

    def __init__(self, mod, func, enabled: bool):
        super().__init__(mod)
        self._setup(func, "bn_scaled")
        self.values = {b.var: b.value for b in bindings(func)}
        self.enabled = enabled
        self.records: list[str] = []
        self.lowered_vars: list[str] = []  # the Multiply of each lowered BatchNorm

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        super().visit_var_binding_(binding)

    def visit_tuple_getitem_(self, op):
        bn = self.values.get(op.tuple_value, op.tuple_value)
        if op.index != 0 or call_name(bn) != "relax.nn.batch_norm":
            return super().visit_tuple_getitem_(op)
        node = str(self.nodes.get(self.current, self.current))
        found = self._scale_and_shift(bn)
        if isinstance(found, str):
            self.records.append(rewrite_record(BATCH_NORM_LOWERING, node, False, found,
                                        "BatchNormFolding"))
            return super().visit_tuple_getitem_(op)
        scale, shift = found
        scaled = self._emit(relax.op.multiply(self.visit_expr(bn.args[0]), relax.const(scale)))
        self.lowered_vars.append(scaled.name)
        why = ("BatchNorm with no Conv before it lowered to x * scale + shift (per-channel "
               f"constants over axis {int(bn.attrs.axis)}): elementwise ops the NPU runs and "
               "fuses with their neighbours") if self.enabled else (
            "float16 BatchNorm lowered to x * scale + shift although BatchNormFolding is off: "
            "TVM 0.27 legalizes a float16 batch_norm to float32 outputs, which breaks the ops "
            "after it; the two ops are not fused with anything")
        self.records.append(rewrite_record(BATCH_NORM_LOWERING, node, True, why,
                                           "BatchNormFolding"))
        return relax.op.add(scaled, relax.const(shift))

    def _scale_and_shift(self, bn):
        """(scale, shift) shaped to broadcast against the data, or why there are none."""
        if not self.enabled and str(getattr(bn.args[0].ty, "dtype", "")) != "float16":
            return ("BatchNormFolding is switched off, so this BatchNorm stays one host op; "
                    "switch BatchNormFolding:on to run it on the NPU as a scale and shift")
        if bn.attrs.training:
            return "a training-mode BatchNorm computes batch statistics; it runs on the host"
        data = bn.args[0].ty
        if not isinstance(data, relax.TensorType) or data.ndim < 1:
            return "the BatchNorm's input has an unknown rank; it runs on the host"
        stats = [const_value(a, self.values) for a in bn.args[1:5]]
        if any(s is None for s in stats):
            return ("its scale, bias, mean or variance is not a constant (a graph input?), so "
                    "no scale and shift can be computed at compile time; make them "
                    "initializers to run it on the NPU")
        axis = int(bn.attrs.axis) % data.ndim
        gamma, beta, mean, var = (s.astype(np.float64).reshape(-1) for s in stats)
        channels = static_dims(data)[axis] if static_dims(data) else gamma.size
        if not all(s.size == channels for s in (gamma, beta, mean, var)):
            return (f"its statistics do not have one value per channel ({channels}) of axis "
                    f"{axis}; it runs on the host")
        if not bn.attrs.scale:
            gamma = np.ones_like(gamma)
        if not bn.attrs.center:
            beta = np.zeros_like(beta)
        scale = gamma / np.sqrt(var + float(bn.attrs.epsilon))
        shift = beta - mean * scale
        # full rank, C on ``axis`` (the layout of a folded conv's bias)
        shape = (1,) * axis + (channels,) + (1,) * (data.ndim - axis - 1)
        dtype = str(data.dtype)
        return scale.reshape(shape).astype(dtype), shift.reshape(shape).astype(dtype)


def lower_batch_norm(mod: tvm.IRModule, enabled: bool = True) -> tvm.IRModule:
    """Lower each inference BatchNorm left in ``main`` to a per-channel scale and shift.

    Parameters
    ----------
    mod : tvm.IRModule
        The module after ``fold_batch_norm`` (which takes the BatchNorms after Convs).
    enabled : bool
        Whether the BatchNormFolding rule is on; when off only float16 BatchNorms are lowered
        (TVM 0.27 cannot legalize them: their outputs come out float32), and each other
        BatchNorm's record says the switch keeps it on the host.

    Example
    -------
    >>> mod = lower_batch_norm(fold_batch_norm(mod))        # doctest: +SKIP
    """
    func = mod["main"]
    if not any(call_name(b.value) == "relax.nn.batch_norm" for b in bindings(func)):
        return mod
    lowering = _BatchNormLowering(mod, func, enabled)
    new = lowering._with_nodes(lowering.visit_expr(func))
    if lowering.lowered_vars:
        marked = list(lowering.lowered_vars)
        if func.attrs and ir_attrs.FOLDED_BATCH_NORM in func.attrs:
            marked += [str(v) for v in func.attrs[ir_attrs.FOLDED_BATCH_NORM]]
        # the report names the rule (BatchNormFolding) on the group that computes it
        new = new.with_attr(ir_attrs.FOLDED_BATCH_NORM, marked)
    out = replace_main(mod, with_rewrite_records(new, lowering.records))
    return relax.transform.DeadCodeElimination(["main"])(out)


__all__ = ["fold_batch_norm", "lower_batch_norm", "BATCH_NORM_LOWERING"]
