"""Prepare-stage rewrites that put ops with no Ascend kernel of their own on kernels that exist.

``remove_dropout``: Dropout at inference is the identity. The importer keeps it as
``relax.nn.dropout`` (a two-output op no kernel prints), which would run on the host and cut
its producer from its consumer; each use of its output reads the input instead.

``lower_batch_norm``: an inference BatchNorm that no Conv took in (``fold_batch_norm`` runs
first and wins) becomes ``x * scale + shift`` with per-channel constants
``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale``, computed in float64
and cast to the data's dtype, so the NPU runs it as elementwise ops that fuse with their
neighbours (DenseNet's Concat -> BN -> ReLU -> Conv). It belongs to the ``BatchNormFolding``
rule (ATC's ``BatchNormBnInferFusionPass``): switching the rule off keeps the BatchNorm whole.

``softmax_axis_to_last``: Softmax/LogSoftmax over an axis before the last becomes
Transpose (axis last) -> Softmax over the last axis -> Transpose back, which the row-reduce
template runs (a Reshape instead of the Transposes when every axis after it has extent 1).
Skipped, with the reason, where the new ops would not run on the NPU either (dynamic shapes,
unsupported dtypes).

Every rewrite, applied or refused, leaves one JSON record per ONNX node in ``main``'s
``ir_attrs.PREPARE_REWRITES`` (``rewrite``, ``node``, ``applied``, ``rule``, ``reason``);
the fusion report lists them under ``prepare_rewrites``.

Example
-------
>>> mod = remove_dropout(mod)                                   # doctest: +SKIP
>>> mod = lower_batch_norm(mod, enabled=True)                   # doctest: +SKIP
>>> mod = softmax_axis_to_last(mod)                             # doctest: +SKIP
>>> [json.loads(r)["rewrite"] for r in mod["main"].attrs[ir_attrs.PREPARE_REWRITES]]
['DropoutRemoval', 'BatchNormLowering', 'SoftmaxAxisToLast']    # doctest: +SKIP
"""
from __future__ import annotations

import json

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from . import ir_attrs
from .relax_rewrite import (NamedRewrite, RecordedRewrite, bindings, call_name, const_value,
                            replace_main, rewrite_record, static_dims, with_rewrite_records)

DROPOUT_REMOVAL = "DropoutRemoval"
BATCH_NORM_LOWERING = "BatchNormLowering"
SOFTMAX_AXIS_TO_LAST = "SoftmaxAxisToLast"
_SOFTMAX_OPS = ("relax.nn.softmax", "relax.nn.log_softmax")


def prepare_rewrites(mod: tvm.IRModule) -> list[dict]:
    """The prepare-rewrite records of ``mod``'s ``main`` (empty when none ran).

    Example
    -------
    >>> prepare_rewrites(remove_dropout(mod))[0]["rewrite"]   # doctest: +SKIP
    'DropoutRemoval'
    """
    attrs = mod["main"].attrs
    if not attrs or ir_attrs.PREPARE_REWRITES not in attrs:
        return []
    return [json.loads(str(r)) for r in attrs[ir_attrs.PREPARE_REWRITES]]


@mutator
class _DropoutRemover(PyExprMutator):
    """``dropout(x)[0]`` -> ``x``; ``dropout(x)[1]`` (the mask) -> ones."""

    def __init__(self, mod, func):
        super().__init__(mod)
        self.values = {b.var: b.value for b in bindings(func)}
        self.aliases: dict[str, str] = {}  # output var -> the var it now repeats
        self.removed: list = []  # (Dropout's var name, its output's var, its input) each

    def _dropout_item(self, value):
        if not isinstance(value, relax.TupleGetItem):
            return None
        drop = self.values.get(value.tuple_value, value.tuple_value)
        return drop if call_name(drop) == "relax.nn.dropout" else None

    def visit_var_binding_(self, binding):
        drop = self._dropout_item(binding.value)
        if drop is None or binding.value.index != 0:
            super().visit_var_binding_(binding)
            return
        source = self.visit_expr(drop.args[0])
        self.removed.append((binding.value.tuple_value.name, binding.var, drop.args[0]))
        if isinstance(binding.var, relax.DataflowVar) and isinstance(source, relax.Var):
            self.set_var_remap(binding.var, source)
            return
        if isinstance(source, relax.Var):
            # a model output keeps its name: ``out = x`` here, folded into x's binding later
            self.aliases[binding.var.name] = source.name
        self.builder_.emit_normalized(relax.VarBinding(binding.var, source))

    def visit_tuple_getitem_(self, op):
        drop = self._dropout_item(op)
        if drop is None or op.index != 1:
            return super().visit_tuple_getitem_(op)
        # the mask of an inference Dropout keeps every element: a constant where the shape is
        dims, dtype = static_dims(op.ty), str(op.ty.dtype)
        if dims is not None:
            return relax.const(np.ones(dims, dtype), dtype)
        return relax.op.ones_like(self.visit_expr(drop.args[0]), dtype)


def remove_dropout(mod: tvm.IRModule) -> tvm.IRModule:
    """Drop every inference Dropout of ``main`` (its result is its input).

    The Dropout's ONNX node is then computed by its producer (or, reading a graph input, by
    its consumers): the report lists it in that group, as a plan file or graph dump expects.

    Example
    -------
    >>> mod = remove_dropout(mod)                            # doctest: +SKIP
    """
    func = mod["main"]
    if not any(call_name(b.value) == "relax.nn.dropout" for b in bindings(func)):
        return mod
    remover = _DropoutRemover(mod, func)
    new = remover.visit_expr(func)
    nodes = {str(k): str(v) for k, v in func.attrs[ir_attrs.ONNX_NODES].items()} \
        if func.attrs and ir_attrs.ONNX_NODES in func.attrs else {}
    records = [rewrite_record(DROPOUT_REMOVAL, nodes.get(b.var.name, b.var.name), True,
                       "Dropout is the identity at inference: removed, so its producer and "
                       "consumer can share a kernel")
               for b in bindings(func) if call_name(b.value) == "relax.nn.dropout"]
    for drop_var, item, source in remover.removed:
        node = nodes.get(drop_var, drop_var)
        for owner in _owners_of(func, item, source):
            if owner in nodes and node not in nodes[owner].split("\n"):
                nodes[owner] += "\n" + node
    out = relax.transform.DeadCodeElimination(["main"])(replace_main(mod, new))
    if remover.aliases:
        out = relax.transform.CanonicalizeBindings()(out)
        # the output var now names its source's computation: it is that ONNX node's result
        nodes.update({out_var: nodes[src] for out_var, src in remover.aliases.items()
                      if src in nodes})
    if nodes:
        out = replace_main(out, out["main"].with_attr(ir_attrs.ONNX_NODES, nodes))
    return replace_main(out, with_rewrite_records(out["main"], records))


def _owners_of(func, item, source) -> list[str]:
    """Bindings that take over a removed Dropout's node: its producer, else its readers."""
    bound = {b.var.name for b in bindings(func)}
    if isinstance(source, relax.Var) and source.name in bound:
        return [source.name]
    return [b.var.name for b in bindings(func)
            if any(v.same_as(item) for v in relax.analysis.free_vars(b.value))]


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


def _on_npu(exprs) -> str:
    """"" when the pattern table takes every call of ``exprs``, else the first refusal."""
    from .partition.patterns import check_call

    for expr in exprs:
        decision = check_call(expr)
        if not decision:
            return decision.reason
    return ""


@mutator
class _SoftmaxAxisRewriter(PyExprMutator, RecordedRewrite):
    """``softmax(x, axis=k)`` (k not last) -> permute / softmax(-1) / permute back."""

    REWRITE = SOFTMAX_AXIS_TO_LAST

    def __init__(self, mod, func):
        super().__init__(mod)
        self._setup(func, "softmax_last")

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        super().visit_var_binding_(binding)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = call_name(call)
        if name not in _SOFTMAX_OPS:
            return call
        ty = call.args[0].ty
        rank = ty.ndim if isinstance(ty, relax.TensorType) else -1
        if rank >= 0 and int(call.attrs.axis) % rank == rank - 1:
            return call
        kind = "Softmax" if name == "relax.nn.softmax" else "LogSoftmax"
        dims = static_dims(ty)
        if dims is None:
            self.note(False, f"{kind} over a non-last axis of a tensor with a dynamic shape: the "
                             "transposes and the row-reduce kernel need static shapes, so it stays "
                             "on the host; give static dimensions (--input_shape) to run it on "
                             "the NPU")
            return call
        axis = int(call.attrs.axis) % rank
        plan, how = self._plan(call, dims, axis)
        refusal = _on_npu(self._probe(call, dims, plan))
        if refusal:
            self.note(False, f"{kind} over axis {axis} of {tuple(dims)} not rewritten: {refusal}")
            return call
        self.note(True, f"{kind} over axis {axis} of {tuple(dims)} rewritten as {how} so the "
                        "row-reduce kernel takes it; see this node's groups for whether the "
                        "planner fused them")
        return self._rewrite(call, plan)

    @staticmethod
    def _plan(call, dims, axis):
        """(("reshape", inner shape) or ("permute", perm, inverse), description)."""
        if all(d == 1 for d in dims[axis + 1:]):
            inner = tuple(dims[:axis + 1])
            return ("reshape", inner), f"Reshape to {inner} -> softmax over the last axis -> " \
                "Reshape back (views, no copies)"
        perm = [i for i in range(len(dims)) if i != axis] + [axis]
        inverse = [int(i) for i in np.argsort(perm)]
        return ("permute", perm, inverse), f"Transpose {perm} -> softmax over the last axis " \
            f"-> Transpose {inverse}"

    @staticmethod
    def _steps(call, data, plan):
        """The calls of the rewrite of ``call`` on ``data``, unnormalized, in order."""
        op = relax.op.nn.softmax if call_name(call) == "relax.nn.softmax" else \
            relax.op.nn.log_softmax
        if plan[0] == "reshape":
            return (lambda: relax.op.reshape(data, plan[1]),
                    lambda last: op(last, axis=-1),
                    lambda inner: relax.op.reshape(inner, call.args[0].ty.shape))
        return (lambda: relax.op.permute_dims(data, plan[1]),
                lambda last: op(last, axis=-1),
                lambda inner: relax.op.permute_dims(inner, plan[2]))

    def _probe(self, call, dims, plan) -> list:
        """The rewrite on a stand-in input, normalized, for the pattern table to judge."""
        probe = relax.Var("probe", relax.TensorType(dims, str(call.args[0].ty.dtype)))
        builder = relax.BlockBuilder()
        first, middle, last = self._steps(call, probe, plan)
        exprs = [builder.normalize(first())]
        exprs.append(builder.normalize(middle(relax.Var("probe1", exprs[0].ty))))
        exprs.append(builder.normalize(last(relax.Var("probe2", exprs[1].ty))))
        return exprs

    def _rewrite(self, call, plan):
        first, middle, last = self._steps(call, call.args[0], plan)
        moved = self._emit(first())
        return last(self._emit(middle(moved)))


def softmax_axis_to_last(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite Softmax/LogSoftmax over a non-last axis of ``main`` to reduce the last axis.

    Example
    -------
    >>> mod = softmax_axis_to_last(mod)                     # doctest: +SKIP
    """
    func = mod["main"]
    rewriter = _SoftmaxAxisRewriter(mod, func)
    return rewriter.finish(mod, rewriter.visit_expr(func))


__all__ = ["remove_dropout", "lower_batch_norm", "softmax_axis_to_last", "prepare_rewrites",
           "DROPOUT_REMOVAL", "BATCH_NORM_LOWERING", "SOFTMAX_AXIS_TO_LAST"]
