"""Small TIR helpers every template and printer shares.

A statement walker (TVM 0.27 exposes no TIR post_order_visit to Python), the input and output
buffers of a PrimFunc, and the blocks under the root with their reductions: what each template's
recogniser asks of a fused PrimFunc before it decides anything of its own.
"""
from __future__ import annotations

import functools

from tvm import tirx
from tvm.ir.expr import Call, TensorLoad
from tvm.s_tir.stmt import SBlock, SBlockRealize
from tvm.sym.analyzer import Analyzer

# TVM 0.27 names: a buffer read is a TensorLoad whose ``source`` is the buffer (a Var with shape
# and dtype); ``tvm.tirx.BufferLoad`` is only a constructor function.
BufferLoad = TensorLoad


def expr_dtype(expr) -> str:
    """dtype of a PrimExpr (TVM 0.27 keeps it in ``expr.ty``)."""
    return str(expr.ty.dtype)


def load_buffer(load: TensorLoad):
    """The buffer a load reads."""
    return load.source

_CHILD_FIELDS = ("body", "block", "init", "then_case", "else_case")


def walk(stmt, visit) -> None:
    """Call ``visit`` on ``stmt`` and every statement below it, parents first."""
    if stmt is None:
        return
    visit(stmt)
    if isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            walk(child, visit)
        return
    for name in _CHILD_FIELDS:
        child = getattr(stmt, name, None)
        if isinstance(child, tirx.Stmt):
            walk(child, visit)


def written_buffers(func: tirx.PrimFunc) -> set:
    """Names of the buffers stored to anywhere in ``func``."""
    names = set()
    walk(func.body, lambda s: names.add(s.buffer.name) if isinstance(s, tirx.BufferStore)
         else None)
    return names


def param_buffers(func: tirx.PrimFunc) -> tuple[list, list]:
    """(input buffers, output buffers) of ``func`` in parameter order."""
    written = written_buffers(func)
    buffers = list(func.params)  # in TVM 0.27 a buffer parameter is the buffer itself
    return ([b for b in buffers if b.name not in written],
            [b for b in buffers if b.name in written])


def first_block_realize(stmt) -> SBlockRealize:
    """The first SBlockRealize below ``stmt`` that is not the root block."""
    found = []

    def visit(node):
        if isinstance(node, SBlockRealize) and node.block.name_hint != "root" and not found:
            found.append(node)

    walk(stmt, visit)
    if not found:
        raise ValueError("no block below this statement")
    return found[0]


def schedule_blocks(sch) -> list:
    """The root's child blocks of the TIR Schedule ``sch`` in order (SBlock statements), as the
    schedule is now: after the inlines made so far, unlike ``root_blocks`` of the original
    function.

    Examples
    --------
    >>> sch = tvm.s_tir.Schedule(exp_sum_func)   # topi.sum(topi.exp(x), -1)  # doctest: +SKIP
    >>> [b.name_hint for b in schedule_blocks(sch)]
    ['compute', 'compute_red']
    """
    return [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]


def reduce_iter_vars(block) -> list:
    """The reduction iteration variables (IterVar, CommReduce) of ``block``, in order.

    Examples
    --------
    >>> [int(iv.dom.extent) for iv in reduce_iter_vars(sum_block)]  # x: (8, 1024)  # doctest: +SKIP
    [1024]
    """
    return [iv for iv in block.iter_vars if int(iv.iter_type) == 2]


def reducer_of(store) -> tuple[str, object] | None:
    """(kind, operand) of ``acc = acc + e`` / ``max(acc, e)`` / ``min(acc, e)``: kind "sum",
    "max" or "min" and the operand ``e``; None for any other store.

    Examples
    --------
    >>> kind, operand = reducer_of(sum_block.body)                # doctest: +SKIP
    >>> kind
    'sum'
    """
    value, target = store.value, load_buffer
    kinds = {"Add": "sum", "Max": "max", "Min": "min"}
    kind = kinds.get(type(value).__name__)
    if kind is None:
        return None
    for mine, other in ((value.a, value.b), (value.b, value.a)):
        if isinstance(mine, BufferLoad) and target(mine).same_as(store.buffer):
            return kind, other
    return None


def product_loads(store):
    """(acc, A load, B load) of ``acc = acc + A * B`` or None."""
    value = store.value
    if type(value).__name__ != "Add":
        return None
    for acc, prod in ((value.a, value.b), (value.b, value.a)):
        if isinstance(acc, BufferLoad) and load_buffer(acc).same_as(store.buffer) and \
                type(prod).__name__ == "Mul" and isinstance(prod.a, BufferLoad) and \
                isinstance(prod.b, BufferLoad):
            return acc, prod.a, prod.b
    return None


def access_at(expr, values: dict) -> int | None:
    """``expr`` with the given variables fixed, if that makes it a constant."""
    analyzer = Analyzer()
    for var, value in values.items():
        analyzer.bind(var, tirx.IntImm(str(var.ty.dtype), value))
    out = analyzer.simplify(expr)
    return int(out.value) if type(out).__name__ == "IntImm" else None


def cached_by_identity(fn):
    """``fn(func)`` for the last few PrimFuncs, kept by identity (PrimFuncs are immutable):
    the planner asks every template's ``applies`` and then ``analyse`` of the same candidate,
    and both read the same blocks, inlines and programs, each a TIR Schedule (milliseconds) to
    build. A call that raises keeps nothing."""
    entries: dict = {}  # id(func) -> (func, value), newest last; func kept so ids stay unique

    @functools.wraps(fn)
    def cached(func):
        hit = entries.get(id(func))
        if hit is not None and hit[0] is func:
            return hit[1]
        value = fn(func)
        if len(entries) >= 16:
            entries.pop(next(iter(entries)))
        entries[id(func)] = (func, value)
        return value

    return cached


@cached_by_identity
def root_blocks(func: tirx.PrimFunc) -> list:
    """The root's child blocks of ``func`` in order (SBlock statements), as a TIR Schedule
    lists them (kept for the last few functions: every template's ``applies`` asks it)."""
    import tvm

    sch = tvm.s_tir.Schedule(func)
    return [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]


__all__ = ["expr_dtype", "BufferLoad", "Call", "load_buffer", "walk", "written_buffers",
           "param_buffers", "first_block_realize", "SBlock", "SBlockRealize", "root_blocks",
           "schedule_blocks", "reduce_iter_vars", "reducer_of", "product_loads",
           "access_at", "cached_by_identity"]
