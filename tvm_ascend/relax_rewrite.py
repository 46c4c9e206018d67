"""Helpers shared by the prepare stage's Relax rewrites (prepare_passes, prepare_rewrites,
reduction_axes): what a call is, constant values, the bindings of a function, and bindings
that keep the ONNX node names of what they replace.

Example
-------
>>> call_name(relax.op.add(x, y))                                # doctest: +SKIP
'relax.add'
"""
from __future__ import annotations

from tvm import relax
from tvm.ir.expr import Constant

from . import ir_attrs


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
