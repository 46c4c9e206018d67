"""A small statement walker: TVM 0.27 exposes no TIR post_order_visit to Python."""
from __future__ import annotations

from tvm import tirx
from tvm.ir.expr import Call, TensorLoad
from tvm.s_tir.stmt import SBlock, SBlockRealize

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


__all__ = ["expr_dtype", "BufferLoad", "Call", "load_buffer", "walk", "written_buffers",
           "param_buffers", "first_block_realize", "SBlock", "SBlockRealize"]


_ROOT_BLOCKS: dict = {}  # id(func) -> (func, blocks): a few entries, newest last


def root_blocks(func: tirx.PrimFunc) -> list:
    """The root's child blocks of ``func`` in order (SBlock statements), as a TIR Schedule
    lists them. Every template's ``applies`` asks this of the same function while the planner
    tries templates on a candidate; building a Schedule costs milliseconds, so the answer for
    the last few functions is kept (by identity: PrimFuncs are immutable)."""
    hit = _ROOT_BLOCKS.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    import tvm

    sch = tvm.s_tir.Schedule(func)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    if len(_ROOT_BLOCKS) >= 16:
        _ROOT_BLOCKS.pop(next(iter(_ROOT_BLOCKS)))
    _ROOT_BLOCKS[id(func)] = (func, blocks)
    return blocks
