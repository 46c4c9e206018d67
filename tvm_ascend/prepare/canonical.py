"""Prepare rewrites that put ops with no Ascend kernel of their own on kernels that exist.

``one_element_constants_as_scalars``: a ``[1]`` or ``[1, 1]`` constant operand of a broadcasting
binary op becomes 0-d where the result's shape stays, so it is an immediate in the kernel.

``remove_dropout``: Dropout at inference is the identity. The importer keeps it as
``relax.nn.dropout`` (a two-output op no kernel prints), which would run on the host and cut
its producer from its consumer; each use of its output reads the input instead. A Cast to its
input's own dtype (LLaMA's TorchScript export writes them before RMSNorm) is removed alike, as is
an Expand to its input's own shape (the same export expands the attention mask to the shape it
has, a bool copy that ran on the host).

``stack_sum_to_adds``: ONNX Sum, imported as broadcast_to + stack + sum(axis 0), becomes Adds.

``split_as_slices``: each output of a Split becomes a slice of its input, which the
data-movement rule fuses into its consumer.

``hoist_matmul_scales``: scalar scales of a MatMul's operands become one scale on its result.

``softmax_axis_to_last``: Softmax/LogSoftmax over an axis before the last becomes
Transpose (axis last) -> Softmax over the last axis -> Transpose back, which the row-reduce
template runs (a Reshape instead of the Transposes when every axis after it has extent 1).
Skipped, with the reason, where the new ops would not run on the NPU either (dynamic shapes,
unsupported dtypes).

Dropout removal and the Softmax rewrite, applied or refused, leave one JSON record per ONNX
node in ``main``'s ``ir_attrs.PREPARE_REWRITES`` (``rewrite``, ``node``, ``applied``, ``rule``,
``reason``); the fusion report lists them under ``prepare_rewrites``.

Example
-------
>>> mod = remove_dropout(mod)                                   # doctest: +SKIP
>>> mod = softmax_axis_to_last(mod)                             # doctest: +SKIP
>>> [r["rewrite"] for r in prepare_rewrites(mod)]              # doctest: +SKIP
['DropoutRemoval', 'SoftmaxAxisToLast']
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import ir_attrs
from .relax_rewrite import (CallRewrite, NamedRewrite, bindings, call_name, const_value,
                            replace_main, rewrite_record, run_rewrite, static_dims, use_counts,
                            with_rewrite_records)

DROPOUT_REMOVAL = "DropoutRemoval"
IDENTITY_CAST_REMOVAL = "IdentityCastRemoval"
IDENTITY_EXPAND_REMOVAL = "IdentityExpandRemoval"
SOFTMAX_AXIS_TO_LAST = "SoftmaxAxisToLast"
_SOFTMAX_OPS = ("relax.nn.softmax", "relax.nn.log_softmax")


# broadcasting binary ops: a one-element operand broadcasts as a 0-d one does wherever the
# other operand has at least its rank
_BROADCAST_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide",
                     "relax.power", "relax.maximum", "relax.minimum", "relax.floor_divide",
                     "relax.less", "relax.less_equal", "relax.greater", "relax.greater_equal",
                     "relax.equal", "relax.not_equal")


def _one_element_const(expr, other):
    """``expr`` as a 0-d constant where it is a one-element constant of rank >= 1 that ``other``
    (of known rank, at least as high) broadcasts to the same result; else None."""
    if not isinstance(expr, Constant) or expr.ty.ndim < 1:
        return None
    value = expr.value.numpy()
    other_rank = getattr(other.ty, "ndim", -1)
    if value.size != 1 or other_rank < expr.ty.ndim:
        return None
    return relax.const(value.reshape(()), str(value.dtype))


@mutator
class _ScalarConstants(PyExprMutator):
    """``x * c`` with ``c`` a one-element constant of shape [1], [1, 1], ... -> ``x * c[()]``.
    Exporters write scales so (the attention scale ``Mul(scores, Constant([0.125]))``); a 0-d
    constant is legalized into the kernel as an immediate, which the templates read as a
    constant (the attention template needs its scale so), a [1] one as a tensor to load."""

    def __init__(self, mod):
        super().__init__(mod)
        self.rewritten = 0

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call_name(call) not in _BROADCAST_BINARY or len(call.args) != 2:
            return call
        a, b = call.args
        new_a, new_b = _one_element_const(a, b), _one_element_const(b, a)
        if new_a is None and new_b is None:
            return call
        self.rewritten += 1
        return relax.Call(call.op, [new_a or a, new_b or b], call.attrs)


def one_element_constants_as_scalars(mod: tvm.IRModule) -> tvm.IRModule:
    """Every one-element constant operand of a broadcasting binary op in ``main`` made 0-d,
    where that leaves the op's result shape as it is (``_ScalarConstants``).

    Example
    -------
    >>> mod = one_element_constants_as_scalars(mod)         # doctest: +SKIP
    """
    rewriter = _ScalarConstants(mod)
    new = rewriter.visit_expr(mod["main"])
    if not rewriter.rewritten:
        return mod
    out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    out[mod.get_global_var("main")] = new
    return out


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
        if _identity_op(binding.value):
            removed, original = binding.var.name, binding.value.args[0]
        else:
            drop = self._dropout_item(binding.value)
            if drop is None or binding.value.index != 0:
                super().visit_var_binding_(binding)
                return
            removed, original = binding.value.tuple_value.name, drop.args[0]
        source = self.visit_expr(original)
        self.removed.append((removed, binding.var, original))
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
    if not any(call_name(b.value) == "relax.nn.dropout" or _identity_op(b.value)
               for b in bindings(func)):
        return mod
    remover = _DropoutRemover(mod, func)
    new = remover.visit_expr(func)
    nodes = {str(k): str(v) for k, v in func.attrs[ir_attrs.ONNX_NODES].items()} \
        if func.attrs and ir_attrs.ONNX_NODES in func.attrs else {}
    records = [rewrite_record(DROPOUT_REMOVAL, nodes.get(b.var.name, b.var.name), True,
                       "Dropout is the identity at inference: removed, so its producer and "
                       "consumer can share a kernel")
               for b in bindings(func) if call_name(b.value) == "relax.nn.dropout"]
    records += [rewrite_record(IDENTITY_CAST_REMOVAL, nodes.get(b.var.name, b.var.name), True,
                               f"a Cast to its input's own dtype ({b.value.attrs.dtype}) is the "
                               "identity: removed, so its producer and consumer can share a "
                               "kernel")
                for b in bindings(func) if _identity_cast(b.value)]
    records += [rewrite_record(IDENTITY_EXPAND_REMOVAL, nodes.get(b.var.name, b.var.name), True,
                               f"an Expand to its input's own shape {static_dims(b.value.ty)} "
                               "is the identity: removed, so no copy runs for it")
                for b in bindings(func) if _identity_expand(b.value)]
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


def _identity_cast(value) -> bool:
    """Whether ``value`` is an ``astype`` to the dtype its operand already has."""
    if call_name(value) != "relax.astype":
        return False
    ty = getattr(value.args[0], "ty", None)
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == str(value.attrs.dtype)


def _identity_expand(value) -> bool:
    """Whether ``value`` is a ``broadcast_to`` to the static shape its operand already has."""
    if call_name(value) != "relax.broadcast_to":
        return False
    dims = static_dims(getattr(value.args[0], "ty", None))
    return dims is not None and dims == static_dims(value.ty)


def _identity_op(value) -> bool:
    """Whether ``value`` is its operand: an identity Cast or an identity Expand."""
    return _identity_cast(value) or _identity_expand(value)


def _owners_of(func, item, source) -> list[str]:
    """Bindings that take over a removed Dropout's node: its producer, else its readers."""
    bound = {b.var.name for b in bindings(func)}
    if isinstance(source, relax.Var) and source.name in bound:
        return [source.name]
    return [b.var.name for b in bindings(func)
            if any(v.same_as(item) for v in relax.analysis.free_vars(b.value))]


@mutator
class _StackSumRewriter(PyExprMutator, NamedRewrite):
    """sum(stack([broadcast_to(a, s), broadcast_to(b, s), ...]), axis=0) -> a + b + ...

    The ONNX importer spells a variadic Sum (ResNet's residual joins) that way; as Adds the
    join becomes an elementwise epilogue that fuses into the conv before it.
    """

    def __init__(self, mod, func):
        super().__init__(mod)
        self._setup(func, "sum_add")
        self.values = {b.var: b.value for b in bindings(func)}

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        super().visit_var_binding_(binding)

    def visit_call_(self, call):
        if call_name(call) != "relax.sum" or call.attrs.axis is None or \
                [int(a) for a in call.attrs.axis] != [0] or call.attrs.keepdims:
            return super().visit_call_(call)
        stacked = self.values.get(call.args[0])
        if call_name(stacked) != "relax.stack" or int(stacked.attrs.axis) != 0:
            return super().visit_call_(call)
        fields = self.values.get(stacked.args[0], stacked.args[0])
        if not isinstance(fields, relax.Tuple) or len(fields.fields) < 2:
            return super().visit_call_(call)
        terms = []
        for field in fields.fields:
            value = self.values.get(field, field)
            terms.append(value.args[0] if call_name(value) == "relax.broadcast_to" else field)
        out = self.visit_expr(terms[0])
        for term in terms[1:-1]:
            out = self._emit(relax.op.add(out, self.visit_expr(term)))
        return relax.op.add(out, self.visit_expr(terms[-1]))


def stack_sum_to_adds(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite ONNX Sum (imported as broadcast_to + stack + sum) into Adds.

    Example
    -------
    >>> adds = stack_sum_to_adds(prepared_module)   # doctest: +SKIP
    """
    rewriter = _StackSumRewriter(mod, mod["main"])
    new_func = rewriter.visit_expr(mod["main"])
    rewriter.builder_.update_func(mod.get_global_var("main"), rewriter._with_nodes(new_func))
    return relax.transform.DeadCodeElimination(["main"])(rewriter.builder_.get())


@mutator
class _SplitAsSlices(PyExprMutator):
    """``split(x)[i]`` -> ``strided_slice(x)``: each output of a Split is a slice of its input,
    which the data-movement rule fuses into the consumer; a Split itself is a multi-output
    op, which no kernel here prints."""

    def __init__(self, mod, func):
        super().__init__(mod)
        self.values = {b.var: b.value for b in bindings(func)}
        self.rewritten = 0

    def visit_tuple_getitem_(self, op):
        split = self.values.get(op.tuple_value)
        if call_name(split) != "relax.split" or not isinstance(split.args[0], relax.Var):
            return super().visit_tuple_getitem_(op)
        source = split.args[0]
        rank = len(source.ty.shape.values)
        axis = int(split.attrs.axis) % rank
        extent = int(source.ty.shape.values[axis])
        sections = split.attrs.indices_or_sections
        if isinstance(sections, (int, tvm.tirx.IntImm)) or hasattr(sections, "value"):
            count = int(sections)
            step = -(-extent // count)
            bounds = [min(i * step, extent) for i in range(count)] + [extent]
        else:
            bounds = [0] + [int(i) for i in sections] + [extent]
        begin, end = bounds[op.index], bounds[op.index + 1]
        self.rewritten += 1
        return relax.op.strided_slice(self.visit_expr(source), [axis], [begin], [end])


def split_as_slices(mod: tvm.IRModule) -> tvm.IRModule:
    """Every ``split(x)[i]`` of ``main`` as a slice of ``x`` (the Split itself then goes).

    Example
    -------
    >>> mod = split_as_slices(mod)                          # doctest: +SKIP
    """
    func = mod["main"]
    if not any(call_name(b.value) == "relax.split" for b in bindings(func)):
        return mod
    rewriter = _SplitAsSlices(mod, func)
    new = rewriter.visit_expr(func)
    out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    out[mod.get_global_var("main")] = new
    return relax.transform.DeadCodeElimination(["main"])(out)


@mutator
class _MatmulScaleHoister(PyExprMutator, NamedRewrite):
    """``matmul(a * c1, b * c2)`` -> ``matmul(a, b) * (c1 * c2)`` for scalar constants: the
    scaled-dot-product export scales Q and K separately; one scale on the scores is what the
    attention kernel applies, and it saves two passes over Q and K."""

    def __init__(self, mod, func):
        super().__init__(mod)
        self._setup(func, "hoisted_scale")
        self.values = {b.var: b.value for b in bindings(func)}
        self.uses = use_counts(func)
        self.hoisted = 0

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        super().visit_var_binding_(binding)

    def _scaled(self, expr):
        """(unscaled operand, scale) if ``expr`` is a single-use ``x * scalar constant``."""
        value = self.values.get(expr)
        if call_name(value) != "relax.multiply" or self.uses.get(expr, 0) != 1:
            return expr, None
        for data, scale in ((value.args[0], value.args[1]), (value.args[1], value.args[0])):
            found = const_value(scale, self.values)
            if found is not None and found.size == 1 and isinstance(data, relax.Var):
                return data, float(found.reshape(-1)[0])
        return expr, None

    def visit_call_(self, call):
        if call_name(call) != "relax.matmul":
            return super().visit_call_(call)
        (a, sa), (b, sb) = self._scaled(call.args[0]), self._scaled(call.args[1])
        if sa is None and sb is None:
            return super().visit_call_(call)
        self.hoisted += 1
        # the product also computes the folded Mul nodes: the report keeps naming them
        folded = [str(self.nodes[v.name]) for v, sc in ((call.args[0], sa), (call.args[1], sb))
                  if sc is not None and isinstance(v, relax.Var) and v.name in self.nodes]
        self.nodes["__product"] = "\n".join([str(self.nodes.get(self.current, ""))] + folded)
        product = self._emit(relax.op.matmul(self.visit_expr(a), self.visit_expr(b),
                                             call.attrs.out_dtype), "__product")
        self.nodes.pop("__product")
        scale = (sa if sa is not None else 1.0) * (sb if sb is not None else 1.0)
        dtype = str(product.ty.dtype)
        return relax.op.multiply(product, relax.const(np.array(scale, dtype), dtype))


def hoist_matmul_scales(mod: tvm.IRModule) -> tvm.IRModule:
    """Scalar scales of MatMul operands moved onto its result (``_MatmulScaleHoister``).

    Example
    -------
    >>> mod = hoist_matmul_scales(mod)                      # doctest: +SKIP
    """
    func = mod["main"]
    hoister = _MatmulScaleHoister(mod, func)
    new = hoister.visit_expr(func)
    if not hoister.hoisted:
        return mod
    out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    out[mod.get_global_var("main")] = hoister._with_nodes(new)
    return relax.transform.DeadCodeElimination(["main"])(out)


def _on_npu(exprs) -> str:
    """"" when the pattern table takes every call of ``exprs``, else the first refusal."""
    from ..partition.patterns import check_call

    for expr in exprs:
        decision = check_call(expr)
        if not decision:
            return decision.reason
    return ""


@mutator
class _SoftmaxAxisRewriter(CallRewrite):
    """``softmax(x, axis=k)`` (k not last) -> permute / softmax(-1) / permute back."""

    REWRITE = SOFTMAX_AXIS_TO_LAST
    STEM = "softmax_last"

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
    return run_rewrite(mod, _SoftmaxAxisRewriter)


__all__ = ["one_element_constants_as_scalars", "remove_dropout", "stack_sum_to_adds",
           "split_as_slices", "hoist_matmul_scales", "softmax_axis_to_last",
           "DROPOUT_REMOVAL", "IDENTITY_CAST_REMOVAL", "SOFTMAX_AXIS_TO_LAST"]
