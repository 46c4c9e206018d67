"""HorizontalFusion: parallel ops with no path between them computed by one kernel.

``merge_parallel_matmuls``: MatMuls of the same input by constant weights (the Q, K and V
projections) become one MatMul by the concatenated weights, with their bias Adds, and a
last-axis slice per original result, which the planner fuses into the consumers. MatMuls whose
results meet in an elementwise op (SwiGLU's gate and up) are left apart: the second one takes
the join into its epilogue.

``merge_parallel_elementwise``: ops of the same type (Relu, Sigmoid, Cast, Add of a
constant, ...), dtype and trailing shape that neither reaches the other (Relu(a) and Relu(b)
of unrelated inputs; x * c1 and x * c2) become ONE op over the concatenation of their inputs
along the first axis, followed by one first-axis piece per original result::

    r_a = relu(a); r_b = relu(b)
      ->  m = relu(concat([a, b], axis=0)); r_a = m[0:n_a]; r_b = m[n_a:n_a + n_b]

FuseOps fuses the concatenation into the op (one kernel reading every input and writing one
buffer). The rows of one member are contiguous in that buffer, so each piece is a view
(``R.memory.view`` at the member's byte offset): no kernel and no copy, whether it feeds a
kernel or is a model output. The VM hands such a view on without copying when its offset
keeps the allocator's 64-byte alignment; where a member starts off that alignment the pieces
are first-axis slices instead, which fuse into an elementwise consumer but are a copy kernel
before anything else. ``pipeline.plan_fusion`` keeps the rewrite only when the whole-model
estimate is lower.
Constants of a binary op are concatenated the same way (each broadcast to its member's rows).
A merge whose inputs are exactly the slices of an earlier merge reads the earlier merged
result itself, so parallel chains stay one kernel.

Example
-------
>>> mod, merged = merge_parallel_matmuls(mod)           # doctest: +SKIP
>>> mod, merged = merge_parallel_elementwise(mod)       # doctest: +SKIP
>>> merged                                              # doctest: +SKIP
1
"""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import ir_attrs
from ..partition.patterns.elementwise import ELEMENTWISE_OPS, check_elementwise_call
from .relax_rewrite import NamedRewrite, bindings, call_name, const_value, use_counts


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
        gated = _gated_results(func, {(m[1] or m[0]).var for ms in by_input.values()
                                      for m in ms})
        for members in by_input.values():
            # a model output cannot become a slice inside the dataflow block
            members = [m for m in members
                       if isinstance((m[1] or m[0]).var, relax.DataflowVar)
                       and (m[1] or m[0]).var not in gated]
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


def _gated_results(func, results: set) -> set:
    """The MatMul results of ``results`` that meet another one in an elementwise op (SwiGLU's
    ``silu(gate) * up``): unmerged, the second MatMul takes the join into its epilogue (two
    kernels); merged, the join reads two slices of the merged result and is a kernel of its
    own after it (two kernels, one more round trip through GM), so such pairs stay apart."""
    root: dict = {var: var for var in results}
    gated: set = set()
    for binding in bindings(func):
        value = binding.value
        if getattr(getattr(value, "op", None), "name", None) not in ELEMENTWISE_OPS:
            continue
        roots = {root[a] for a in value.args if isinstance(a, relax.Var) and a in root}
        if len(roots) == 1:  # x * sigmoid(x) of one result is still that result's epilogue
            root[binding.var] = roots.pop()
        elif len(roots) > 1:
            gated |= roots
    return gated


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
    from ..partition.patterns import check_call

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


# ops of one tensor operand, or of two with one constant; where (3 operands) is left out
_UNARY = frozenset(name for name, arity in ELEMENTWISE_OPS.items() if arity == 1)
_BINARY = frozenset(name for name, arity in ELEMENTWISE_OPS.items() if arity == 2)


def _bindings_of(block):
    return list(block.bindings)


def _static_shape(ty) -> tuple | None:
    try:
        return tuple(int(d) for d in ty.shape.values)
    except (TypeError, AttributeError):
        return None


class _Member:
    """One candidate op: ``op(var)`` or ``op(var, constant)`` / ``op(constant, var)``."""

    def __init__(self, binding, position: int, operand, const, const_side):
        self.binding, self.position = binding, position
        self.var = binding.var
        self.operand = operand          # the tensor operand (a Var)
        self.const = const              # numpy value of the constant operand, or None
        self.const_side = const_side    # index of the constant among the args, or None
        self.rows = int(_static_shape(binding.var.ty)[0])


def _member_of(binding, position: int, values: dict):
    """(key, _Member) when ``binding`` may join a horizontal merge, else None."""
    value = binding.value
    name = getattr(getattr(value, "op", None), "name", None) if isinstance(
        value, relax.Call) else None
    if name not in _UNARY and name not in _BINARY:
        return None
    # a model output (non-dataflow var) cannot become a slice inside the dataflow block
    if not isinstance(binding.var, relax.DataflowVar) or not check_elementwise_call(value).ok:
        return None
    out_shape = _static_shape(binding.var.ty)
    if not out_shape:  # rank 0 has no first axis to concatenate along
        return None
    arity = ELEMENTWISE_OPS[name]
    tensors, extra = list(value.args[:arity]), list(value.args[arity:])
    const, side, operand = None, None, tensors[0]
    if arity == 2:
        found = [_const_value(arg, values) for arg in tensors]
        if sum(f is not None for f in found) != 1:
            return None
        side = 0 if found[0] is not None else 1
        const, operand = found[side], tensors[1 - side]
        if const.ndim > len(out_shape):
            return None
    if not isinstance(operand, relax.Var) or _static_shape(operand.ty) != out_shape:
        return None
    key = (name, _hash(value.attrs), tuple(_hash(e) for e in extra), str(operand.ty.dtype),
           str(binding.var.ty.dtype), out_shape[1:], side,
           None if const is None else str(const.dtype))
    return key, _Member(binding, position, operand, const, side)


def _hash(node) -> int:
    return 0 if node is None else int(tvm_ffi.structural_hash(node))


def _const_value(expr, values: dict):
    if isinstance(expr, relax.Var) and expr in values:
        expr = values[expr]
    return expr.value.numpy() if isinstance(expr, Constant) else None


def _duplicate(a: _Member, b: _Member) -> bool:
    """The same op on the same input with the same constant: CSE's job, not a merge."""
    if not a.operand.same_as(b.operand):
        return False
    return a.const is None or (a.const.shape == b.const.shape and
                               np.array_equal(a.const, b.const))


def _ancestor_masks(bindings, deps) -> dict:
    """Binding var -> bit mask of the bindings (by position) it depends on, transitively."""
    position = {b.var: i for i, b in enumerate(bindings)}
    masks: dict = {}
    for binding in bindings:
        mask = 0
        for var in deps[binding.var]:
            if var in position:
                mask |= (1 << position[var]) | masks[var]
        masks[binding.var] = mask
    return masks


def _acyclic(bindings, deps, groups) -> bool:
    """Whether contracting every group into one node keeps the block's graph acyclic."""
    node = {b.var: i for i, b in enumerate(bindings)}
    for gid, group in enumerate(groups):
        for m in group:
            node[m.var] = len(bindings) + gid
    edges: dict = {}
    indegree = {n: 0 for n in set(node.values())}
    for binding in bindings:
        dst = node[binding.var]
        for var in deps[binding.var]:
            src = node.get(var)
            if src is None:
                continue
            if src == dst:
                if dst >= len(bindings):
                    return False  # one member reads another directly
                continue
            if dst not in edges.setdefault(src, set()):
                edges[src].add(dst)
                indegree[dst] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for m in edges.get(n, ()):
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    return seen == len(indegree)


def _merged_const(group):
    """The constant operand of the merged op: the members' own when they share one that does
    not vary along the first axis, else each broadcast to its member's rows, concatenated."""
    rank = len(group[0].var.ty.shape.values)
    padded = [m.const.reshape((1,) * (rank - m.const.ndim) + m.const.shape) for m in group]
    first = padded[0]
    if first.shape[0] == 1 and all(p.shape == first.shape and np.array_equal(p, first)
                                   for p in padded):
        return group[0].binding.value.args[group[0].const_side]
    trailing = np.broadcast_shapes(*(p.shape[1:] for p in padded))
    rows = [np.broadcast_to(p, (m.rows,) + tuple(trailing)) for p, m in zip(padded, group)]
    merged = np.ascontiguousarray(np.concatenate(rows, axis=0))
    return relax.const(merged, str(first.dtype))


def _merged_call(group, data):
    """The members' op applied to ``data`` (their inputs concatenated along the first axis)."""
    call = group[0].binding.value
    args = list(call.args)
    if group[0].const_side is None:
        args[0] = data
    else:
        args[1 - group[0].const_side] = data
        args[group[0].const_side] = _merged_const(group)
    return relax.Call(call.op, args, call.attrs)


def _merged_supported(group) -> bool:
    """Whether the merged op still has a vector kernel (a power by per-member exponents, say,
    becomes a tensor exponent, which has none)."""
    ty = group[0].operand.ty
    rows = sum(m.rows for m in group)
    shape = (rows,) + tuple(int(d) for d in ty.shape.values[1:])
    probe = relax.Var("probe", relax.TensorType(shape, ty.dtype))
    call = relax.BlockBuilder().normalize(_merged_call(group, probe))
    return bool(check_elementwise_call(call))


def parallel_groups(block, values: dict) -> list[list[_Member]]:
    """Groups of mutually independent same-type elementwise ops of one dataflow block.

    Parameters
    ----------
    block : relax.DataflowBlock
        A block of ``main``.
    values : dict
        Var -> bound value over ``main`` (to see constants bound to vars).

    Returns
    -------
    list of list
        Groups (two members or more, in program order of their first member); a member has
        ``.var``, ``.operand``, ``.const`` and ``.rows``. Merging them all keeps the graph
        acyclic: no member reaches another of its group, and no two groups reach each other
        both ways.

    Example
    -------
    >>> groups = parallel_groups(mod["main"].body.blocks[0], {})   # doctest: +SKIP
    >>> [m.var.name for m in groups[0]]                            # doctest: +SKIP
    ['lv', 'lv1']
    """
    bindings = _bindings_of(block)
    deps = {b.var: list(relax.analysis.free_vars(b.value)) for b in bindings}
    masks = _ancestor_masks(bindings, deps)
    bit = {b.var: 1 << i for i, b in enumerate(bindings)}
    buckets: dict = {}
    for i, binding in enumerate(bindings):
        found = _member_of(binding, i, values)
        if found is not None:
            buckets.setdefault(found[0], []).append(found[1])
    candidates = []
    for members in buckets.values():
        open_groups: list[list[_Member]] = []
        for m in members:
            for group in open_groups:
                # no path either way between m and any member, and not a duplicate
                if all(not (masks[m.var] & bit[o.var]) and not (masks[o.var] & bit[m.var])
                       and not _duplicate(m, o) for o in group):
                    group.append(m)
                    break
            else:
                open_groups.append([m])
        candidates += [g for g in open_groups if len(g) >= 2 and _merged_supported(g)]
    candidates.sort(key=lambda g: g[0].position)
    accepted: list[list[_Member]] = []
    for group in candidates:
        if _acyclic(bindings, deps, accepted + [group]):
            accepted.append(group)
    return accepted


@mutator
class _ElementwiseMerger(PyExprMutator):
    """Emits each group's merged op where all its inputs exist; bindings that read a member
    wait (in order) until the group is emitted, which acyclicity guarantees happens."""

    def __init__(self, mod, func, groups):
        super().__init__(mod)
        attrs = func.attrs
        self.nodes = {str(k): str(v) for k, v in attrs[ir_attrs.ONNX_NODES].items()} \
            if attrs and ir_attrs.ONNX_NODES in attrs else {}
        self.taken = {b.var.name for block in func.body.blocks for b in block.bindings}
        self.group_of = {m.var: g for g in groups for m in g}
        self.last = {max(g, key=lambda m: m.position).var: g for g in groups}
        self.waiting: list = []       # bindings and groups not emitted yet, in program order
        self.pending: set = set()     # vars of those bindings (and of unmerged members)
        self.slices: dict = {}        # slice var -> (merged var, index, group size)
        self.merged_vars: list[str] = []
        self.needs: dict = {}         # id of a waiting item -> the vars it reads
        self.count = 0

    def visit_var_binding_(self, binding):
        if binding.var in self.group_of:
            self.pending.add(binding.var)
            group = self.last.get(binding.var)
            if group is not None:
                self.waiting.append(group)
            self._flush()
            return
        self.waiting.append(binding)
        self.pending.add(binding.var)
        self._flush()

    def _needs(self, item) -> set:
        key = id(item)
        if key not in self.needs:
            self.needs[key] = self._free_vars(item)
        return self.needs[key]

    @staticmethod
    def _free_vars(item) -> set:
        if isinstance(item, list):
            members = {m.var for m in item}
            return {v for m in item for v in relax.analysis.free_vars(m.binding.value)
                    if v not in members}
        return set(relax.analysis.free_vars(item.value))

    def _flush(self):
        progress = True
        while progress:
            progress = False
            for item in list(self.waiting):
                if self._needs(item) & self.pending:
                    continue
                self.waiting.remove(item)
                self.needs.pop(id(item))  # the id may be reused once the item is gone
                if isinstance(item, list):
                    self._emit_group(item)
                else:
                    super().visit_var_binding_(item)
                    self.pending.discard(item.var)
                progress = True
                break

    def _name(self, stem: str) -> str:
        self.count += 1
        name = f"{stem}{self.count}"
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def _emit_named(self, expr, stem: str, nodes: str | None):
        name = self._name(stem)
        if nodes:
            self.nodes[name] = nodes
        return self.builder_.emit(expr, name)

    def _merged_input(self, group, nodes):
        operands = [self.visit_expr(m.operand) for m in group]
        source = [self.slices.get(op) for op in operands]
        if all(s is not None and s[0].same_as(source[0][0]) for s in source) and \
                [s[1] for s in source] == list(range(source[0][2])):
            return source[0][0]  # the earlier merge's result, already concatenated
        cat = self._emit_named(relax.op.concat(operands, axis=0), "horizontal_cat", nodes)
        self.merged_vars.append(cat.name)
        return cat

    def _emit_group(self, group):
        nodes = "\n".join(n for n in (self.nodes.get(m.var.name, "") for m in group) if n)
        call = _merged_call(group, self._merged_input(group, nodes))
        arity = ELEMENTWISE_OPS[call.op.name]
        args = list(call.args[:arity]) + [self.visit_expr(e) for e in call.args[arity:]]
        merged = self._emit_named(relax.Call(call.op, args, call.attrs), "horizontal", nodes)
        self.merged_vars.append(merged.name)
        row_bytes = _row_bytes(merged)
        as_views = all(start * row_bytes % VIEW_ALIGN_BYTES == 0
                       for start in _starts(group))
        offset = 0
        for index, m in enumerate(group):
            if as_views:
                # each binding named here: an auto-named one ("lv2") could take the name of a
                # model op, and the partitioner knows ops by their binding's name
                view = self.builder_.emit(_first_axis_view(merged, offset, m.rows, row_bytes),
                                          self._name("horizontal_at"))
                piece = self.builder_.emit(relax.op.memory.ensure_zero_offset(view),
                                           self._name("horizontal_view"))
            else:
                piece = self.builder_.emit(
                    relax.op.strided_slice(merged, [0], [offset], [offset + m.rows]),
                    self._name("horizontal_slice"))
            offset += m.rows
            self.slices[piece] = (merged, index, len(group))
            self.set_var_remap(m.var, piece)
            self.pending.discard(m.var)

    def finished(self, func) -> relax.Function:
        assert not self.waiting, "a merge group was never emitted (cycle check missed one)"
        return func.with_attr(ir_attrs.ONNX_NODES, self.nodes)


# The VM hands a view on without a copy when its start keeps the allocator's alignment
# (vm.builtin.ensure_zero_offset moves the data pointer; otherwise it copies).
VIEW_ALIGN_BYTES = 64


def _row_bytes(var) -> int:
    shape = _static_shape(var.ty)
    return int(np.prod(shape[1:], dtype=np.int64)) * tvm.runtime.DataType(var.ty.dtype).bits // 8


def _starts(group) -> list[int]:
    return list(np.cumsum([0] + [m.rows for m in group[:-1]]))


def _first_axis_view(merged, start: int, rows: int, row_bytes: int):
    """Rows ``[start, start + rows)`` of ``merged`` as a view (the caller emits it, then
    ``ensure_zero_offset`` of it): no kernel, no copy. A first-axis
    slice of a contiguous tensor is contiguous, so a member's result is the merged buffer
    from the member's first row on (the kernels read a tensor from its data pointer)."""
    shape = [rows] + list(_static_shape(merged.ty)[1:])
    return relax.op.memory.view(merged, shape, str(merged.ty.dtype), int(start * row_bytes))


def merge_parallel_elementwise(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """HorizontalFusion of elementwise ops: returns (module, groups merged).

    Parameters
    ----------
    mod : tvm.IRModule
        A prepared module; only ``main``'s dataflow blocks are rewritten.

    Returns
    -------
    (tvm.IRModule, int)
        The rewritten module (``mod`` itself when nothing merged) and the number of groups;
        the merged bindings are listed in ``main``'s ``ir_attrs.HORIZONTAL`` so the report's
        rule says HorizontalFusion, and they carry every member's ONNX node name.

    Example
    -------
    >>> mod, merged = merge_parallel_elementwise(mod)   # doctest: +SKIP
    """
    func = mod["main"]
    values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    groups = [g for block in func.body.blocks if isinstance(block, relax.DataflowBlock)
              for g in parallel_groups(block, values)]
    if not groups:
        return mod, 0
    merger = _ElementwiseMerger(mod, func, groups)
    new = merger.finished(merger.visit_expr(func))
    marked = list(merger.merged_vars)
    if func.attrs and ir_attrs.HORIZONTAL in func.attrs:
        marked += [str(v) for v in func.attrs[ir_attrs.HORIZONTAL]]
    out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    out[mod.get_global_var("main")] = new.with_attr(ir_attrs.HORIZONTAL, marked)
    out = relax.transform.DeadCodeElimination(["main"])(out)
    return relax.transform.Normalize()(out), len(groups)


__all__ = ["merge_parallel_matmuls", "merge_parallel_elementwise", "parallel_groups"]
