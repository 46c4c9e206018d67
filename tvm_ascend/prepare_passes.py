"""Relax rewrites of the prepare stage that make CNN layers fit the Ascend kernels.

``fold_batch_norm``: an inference BatchNormalization after a Conv (with or without the conv's
bias Add) is folded into the conv at compile time: ``W' = W * s`` per output channel and
``b' = b * s + beta - mean * s`` with ``s = gamma / sqrt(var + eps)``, so the layer becomes
``conv2d(x, W') + b'``, one kernel with its bias in the epilogue. Only constant weights and
statistics fold; anything else is left as it is.

``stack_sum_to_adds``: ONNX Sum, imported as broadcast_to + stack + sum(axis 0), becomes Adds.

``one_element_constants_as_scalars``: a ``[1]`` or ``[1, 1]`` constant operand of a broadcasting
binary op becomes 0-d where the result's shape stays, so it is an immediate in the kernel.

Example
-------
>>> mod = fold_batch_norm(mod)            # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from . import ir_attrs
from .relax_rewrite import NamedRewrite, bindings, call_name, const_value, use_counts


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


__all__ = ["fold_batch_norm", "stack_sum_to_adds",
           "merge_parallel_matmuls", "split_as_slices", "hoist_matmul_scales"]


class _ParallelMatmuls:
    """MatMuls of one input by constant weights (and their constant bias Adds), as found."""

    def __init__(self, func):
        self.values = {b.var: b.value for b in bindings(func)}
        self.uses = use_counts(func)
        users: dict = {}
        for binding in bindings(func):
            for arg in getattr(binding.value, "args", []):
                if isinstance(arg, relax.Var):
                    users.setdefault(arg, []).append(binding)
        self.groups = []
        by_input: dict = {}
        for binding in bindings(func):
            member = self._member(binding, users)
            if member is not None:
                by_input.setdefault(member[0], []).append(member[1:])
        for members in by_input.values():
            # a model output cannot become a slice inside the dataflow block
            members = [m for m in members
                       if isinstance((m[1] or m[0]).var, relax.DataflowVar)]
            if len(members) >= 2:
                with_bias = all(m[3] is not None for m in members)  # m: (mm, add, w, bias)
                self.groups.append([(mm, add if with_bias else None, w, b if with_bias else None)
                                    for mm, add, w, b in members])

    def _member(self, binding, users):
        value = binding.value
        if call_name(value) != "relax.matmul" or not isinstance(value.args[0], relax.Var):
            return None
        weight = const_value(value.args[1], self.values)
        if weight is None or weight.ndim != 2:
            return None
        add, bias = None, None
        readers = users.get(binding.var, [])
        if len(readers) == 1 and self.uses.get(binding.var) == 1 and \
                call_name(readers[0].value) == "relax.add":
            other = [a for a in readers[0].value.args if not a.same_as(binding.var)]
            found = const_value(other[0], self.values) if len(other) == 1 else None
            if found is not None and found.size == weight.shape[1]:
                add, bias = readers[0], found.reshape(-1)
        key = (value.args[0], weight.shape[0], str(weight.dtype), str(value.attrs.out_dtype))
        return (key, binding, add, weight, bias)


@mutator
class _HorizontalMerger(PyExprMutator, NamedRewrite):
    """Rewrites each group of parallel MatMuls as one MatMul by the concatenated weights (plus
    one bias Add) and a last-axis slice per original result."""

    def __init__(self, mod, func, groups):
        super().__init__(mod)
        self._setup(func, "horizontal")
        self.first = {group[0][0].var: group for group in groups}
        self.skip = {m[i].var for group in groups for m in group for i in (0, 1)
                     if m[i] is not None}
        self.merged_vars = []

    def visit_var_binding_(self, binding):
        group = self.first.get(binding.var)
        if group is not None:
            self._emit_group(group)
        if binding.var in self.skip:
            return
        super().visit_var_binding_(binding)

    def _emit_group(self, group):
        matmul = group[0][0].value
        x = self.visit_expr(matmul.args[0])
        weight = np.concatenate([m[2] for m in group], axis=1)
        # the merged op computes every member's ONNX node (newline-joined, as OpInfo reads it)
        self.nodes["__mm"] = "\n".join(str(self.nodes.get(m[0].var.name, "")) for m in group)
        out = self._emit(relax.op.matmul(x, relax.const(weight), matmul.attrs.out_dtype), "__mm")
        self.merged_vars.append(out.name)
        if group[0][1] is not None:
            bias = np.concatenate([m[3] for m in group]).astype(group[0][3].dtype)
            self.nodes["__add"] = "\n".join(str(self.nodes.get(m[1].var.name, ""))
                                            for m in group)
            out = self._emit(relax.op.add(out, relax.const(bias)), "__add")
            self.merged_vars.append(out.name)
        self.nodes.pop("__mm")
        self.nodes.pop("__add", None)
        axis = len(out.ty.shape.values) - 1
        offset = 0
        for mm, add, weight_part, _ in group:
            width = weight_part.shape[1]
            piece = self._emit(relax.op.strided_slice(out, [axis], [offset], [offset + width]),
                               "__none")
            offset += width
            self.set_var_remap((add or mm).var, piece)


def _slices_run_on_npu(group) -> bool:
    """Whether the last-axis slices the merge needs have an Ascend kernel: if they would run on
    the host, one merged MatMul plus host slices is slower than the MatMuls it replaces."""
    from .partition.patterns import check_call

    out_ty = group[0][0].var.ty
    probe = relax.Var("probe", relax.TensorType(out_ty.shape, out_ty.dtype))
    axis = len(out_ty.shape.values) - 1
    call = relax.BlockBuilder().normalize(relax.op.strided_slice(probe, [axis], [0], [1]))
    return bool(check_call(call))


def merge_parallel_matmuls(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """HorizontalFusion: MatMuls of the same input by constant weights (Q, K and V projections)
    become one MatMul by the concatenated weights, with their bias Adds, and a last-axis slice
    per original result; returns (module, groups merged). The slices are data movement that
    the planner fuses into their consumers.

    Example
    -------
    >>> mod, merged = merge_parallel_matmuls(mod)         # doctest: +SKIP
    >>> merged                                            # doctest: +SKIP
    1
    """
    func = mod["main"]
    groups = _ParallelMatmuls(func).groups
    if not groups or not _slices_run_on_npu(groups[0]):
        return mod, 0
    merger = _HorizontalMerger(mod, func, groups)
    new = merger.visit_expr(func)
    attrs = merger._with_nodes(new)
    marked = list(merger.merged_vars)
    if func.attrs and ir_attrs.HORIZONTAL in func.attrs:
        marked += [str(v) for v in func.attrs[ir_attrs.HORIZONTAL]]
    out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    out[mod.get_global_var("main")] = attrs.with_attr(ir_attrs.HORIZONTAL, marked)
    return relax.transform.Normalize()(out), len(groups)


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
