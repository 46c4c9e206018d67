"""Helpers shared by the prepare stage's Relax rewrites (canonical, batch_norm, horizontal,
reductions): what a call is, constant values, the bindings of a function, bindings that keep
the ONNX node names of what they replace, and the per-node records
(``ir_attrs.PREPARE_REWRITES``) the fusion report lists under ``prepare_rewrites``.

Example
-------
>>> call_name(relax.op.add(x, y))                                # doctest: +SKIP
'relax.add'
"""
from __future__ import annotations

import json

import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from .. import ir_attrs


def call_name(expr) -> str | None:
    op = getattr(expr, "op", None) if isinstance(expr, relax.Call) else None
    return getattr(op, "name", None)


def const_value(expr, values: dict):
    """The numpy value of ``expr`` (a constant, or a var bound to one), else None."""
    if isinstance(expr, relax.Var) and expr in values:
        expr = values[expr]
    return expr.value.numpy() if isinstance(expr, Constant) else None


def bindings(func):
    for block in func.body.blocks:
        yield from block.bindings


def use_counts(func) -> dict:
    counts: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1

    relax.analysis.post_order_visit(func.body, visit)
    return counts


class NamedRewrite:
    """New bindings get unique names and inherit the ONNX node of the binding they replace, so
    the fusion report still names the model's nodes."""

    def _setup(self, func, stem: str):
        self.stem, self.count, self.current, self.new_nodes = stem, 0, None, {}
        attrs = func.attrs
        self.nodes = dict(attrs[ir_attrs.ONNX_NODES]) if attrs and \
            ir_attrs.ONNX_NODES in attrs else {}
        self.taken = {b.var.name for b in bindings(func)}

    def _emit(self, expr, node_of=None):
        self.count += 1
        name = f"{self.stem}{self.count}"
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        node = self.nodes.get(node_of or self.current)
        if node is not None:
            self.new_nodes[name] = str(node)
        return self.builder_.emit(expr, name)

    def _with_nodes(self, func):
        if not self.new_nodes:
            return func
        return func.with_attr(ir_attrs.ONNX_NODES, {**{str(k): str(v) for k, v in
                                                      self.nodes.items()}, **self.new_nodes})


def rewrite_record(rewrite: str, node: str, applied: bool, reason: str, rule: str = "") -> str:
    """One ``prepare_rewrites`` record (JSON text, as ``main``'s attribute keeps it)."""
    return json.dumps({"rewrite": rewrite, "node": node, "applied": applied, "rule": rule,
                       "reason": reason}, sort_keys=True)


def with_rewrite_records(func, records: list[str]):
    """``func`` with ``records`` appended to its ``PREPARE_REWRITES`` attribute."""
    if not records:
        return func
    old = [str(r) for r in func.attrs[ir_attrs.PREPARE_REWRITES]] \
        if func.attrs and ir_attrs.PREPARE_REWRITES in func.attrs else []
    return func.with_attr(ir_attrs.PREPARE_REWRITES, old + records)


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


def replace_main(mod: tvm.IRModule, func) -> tvm.IRModule:
    """A copy of ``mod`` whose ``main`` is ``func``."""
    out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    out[mod.get_global_var("main")] = func
    return out


def static_dims(ty) -> list[int] | None:
    """The extents of a tensor type, or None when its rank or an extent is not a constant."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None or ty.ndim < 0:
        return None
    try:
        return [int(d) for d in ty.shape.values]
    except (TypeError, AttributeError):
        return None


class RecordedRewrite(NamedRewrite):
    """A NamedRewrite that says, per ONNX node it looked at, whether it rewrote it and why
    (``REWRITE`` names the rewrite in the report). A subclass tracks ``self.current`` in its
    ``visit_var_binding_`` (``CallRewrite`` does) and calls ``note``; ``finish`` puts the
    records on ``main``."""

    REWRITE = ""

    def _setup(self, func, stem: str):
        super()._setup(func, stem)
        self.records: list[str] = []

    def note(self, applied: bool, reason: str, rule: str = "", node: str | None = None) -> None:
        """Record the decision on the node of the binding being visited (or ``node``)."""
        node = node or str(self.nodes.get(self.current, self.current))
        self.records.append(rewrite_record(self.REWRITE, node, applied, reason, rule))

    def finish(self, mod: tvm.IRModule, new_main) -> tvm.IRModule:
        """``mod`` with the rewritten ``main`` and its records (``mod`` itself if nothing was
        looked at)."""
        if not self.records:
            return mod
        return replace_main(mod, with_rewrite_records(self._with_nodes(new_main), self.records))


class CallRewrite(PyExprMutator, RecordedRewrite):
    """A RecordedRewrite of the calls of ``main``: ``self.current`` follows the binding being
    visited, so ``note`` and the new bindings (``STEM`` and a count) take its ONNX node. A
    subclass sets ``REWRITE`` and ``STEM``, overrides ``visit_call_`` and is decorated with
    ``@mutator`` (TVM's ``derived_object`` takes the methods of undecorated bases too);
    ``run_rewrite`` applies it."""

    STEM = ""

    def __init__(self, mod, func):
        super().__init__(mod)
        self._setup(func, self.STEM)

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        super().visit_var_binding_(binding)


def run_rewrite(mod: tvm.IRModule, rewriter) -> tvm.IRModule:
    """``mod`` with ``main`` rewritten by ``rewriter`` (a ``CallRewrite`` class), with its
    records (``mod`` itself when it looked at nothing)."""
    func = mod["main"]
    instance = rewriter(mod, func)
    return instance.finish(mod, instance.visit_expr(func))
