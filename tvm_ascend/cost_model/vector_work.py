"""Vector work of a group, counted from its TIR: element operations by cost class.

The timing model needs how much the vector unit computes per kernel. Every block's stored value
is walked once; each construct is weighted by what the AscendC printer emits for it (one basic
instruction, a Reciprocal + Muls pair, or an advanced API built from several instructions).

Example
-------
>>> from tvm import te
>>> x = te.placeholder((1024,), "float32", "x")
>>> func = te.create_prim_func([x, te.compute((1024,), lambda i: te.exp(x[i]) + x[i])])
>>> work = count_vector_work(func, per_output_element=True)
>>> work.by_class["transcendental"], work.by_class["basic"]
(1024, 1024)
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from tvm import tirx
from tvm.runtime import DataType

from ..schedules.analysis.tir_walk import BufferLoad, Call, walk
from ..schedules.analysis.tile_values import child_exprs

# Cost of one element of each class relative to one basic op (Add, Mul, ...), in vector passes.
# basic: one hardware instruction at the full 256 B/cycle rate (ascendc.md 6.2).
# divide: printed as Reciprocal + Muls or a Div with lower throughput: 2 passes (ESTIMATE).
# transcendental: Exp/Ln/Sqrt/Rsqrt are approximations that run below the full rate: 2 passes
#   (ESTIMATE; ascendc.md 3 says they are approximate on hardware).
# composite: Sigmoid/Tanh/Erf/Sin/Cos/Power are advanced APIs made of several basic and
#   transcendental instructions plus scratch traffic: 8 passes (ESTIMATE).
OP_CLASS_COST = {"basic": 1.0, "divide": 2.0, "transcendental": 2.0, "composite": 8.0}
OP_CLASSES = tuple(OP_CLASS_COST)

_BINARY = {"Add": "basic", "Sub": "basic", "Mul": "basic", "Max": "basic", "Min": "basic",
           "Div": "divide", "FloorDiv": "divide", "FloorMod": "divide", "Cast": "basic"}
_CALLS = {"tirx.exp": "transcendental", "tirx.log": "transcendental",
          "tirx.sqrt": "transcendental", "tirx.rsqrt": "transcendental",
          "tirx.fabs": "basic", "tirx.floor": "basic", "tirx.ceil": "basic",
          "tirx.sigmoid": "composite", "tirx.tanh": "composite", "tirx.erf": "composite",
          "tirx.sin": "composite", "tirx.cos": "composite", "tirx.pow": "composite"}


@dataclass(frozen=True)
class VectorWork:
    """Element operations of one group by class, and vector instructions per output unit.

    ``by_class[c]`` counts element operations of class ``c`` over the whole kernel;
    ``ops_per_unit`` is how many instructions the printer issues per tile (elementwise) or per
    row (row and matmul templates); ``elem_bytes`` is the output's element size.
    """

    by_class: dict = field(default_factory=dict)
    ops_per_unit: int = 0
    elem_bytes: int = 4

    @property
    def weighted_ops(self) -> float:
        """Element operations in units of one basic op."""
        return sum(OP_CLASS_COST[c] * n for c, n in self.by_class.items())

    @property
    def total_ops(self) -> int:
        return int(sum(self.by_class.values()))


def _count_ops(expr, counts: dict) -> int:
    """Add the operations of ``expr`` into ``counts``; return how many there were."""
    if isinstance(expr, BufferLoad):
        return 0
    kind = type(expr).__name__
    if isinstance(expr, Call):
        cls = _CALLS.get(expr.op.name)
    elif kind == "Cast":
        cls = "basic"
    else:
        cls = _BINARY.get(kind)
    found = 0
    if cls is not None:
        counts[cls] = counts.get(cls, 0) + 1
        found = 1
    for child in child_exprs(expr):
        found += _count_ops(child, counts)
    return found


def _blocks(func):
    found = []

    def visit(stmt):
        if type(stmt).__name__ == "SBlockRealize" and stmt.block.name_hint != "root":
            found.append(stmt.block)

    walk(func.body, visit)
    return found


def _domain(block) -> int:
    size = 1
    for iv in block.iter_vars:
        size *= int(iv.dom.extent)
    return size


def _is_product(block, store) -> bool:
    """C[...] = C[...] + A * B over reduction axes (what a cube template runs on the cube)."""
    if not any(int(iv.iter_type) == 2 for iv in block.iter_vars):
        return False
    value = store.value
    if type(value).__name__ != "Add":
        return False
    for acc, term in ((value.a, value.b), (value.b, value.a)):
        if type(acc).__name__ == "TensorLoad" and acc.source.same_as(store.buffer) and \
                type(term).__name__ == "Mul":
            return True
    return False


def _count_uncached(func, per_output_element: bool, img2col_prologue: bool) -> VectorWork:
    blocks = _blocks(func)
    if not blocks:
        return VectorWork({c: 0 for c in OP_CLASSES}, 0, 4)
    domains = [_domain(b) for b in blocks]
    # the elementwise template inlines every block into the output block: all run per output
    # element; the row and matmul templates compute each block over its own domain
    out_domain = max(domains)
    totals = {c: 0 for c in OP_CLASSES}
    per_unit = 0
    products = {i for i, b in enumerate(blocks)
                if isinstance(b.body, tirx.BufferStore) and _is_product(b, b.body)}
    # the conv kernel's img2col reads the input with its padding (the template's plan counts
    # that work): the pad_temp block before the product is no vector op
    first = min(products) + 1 if img2col_prologue and products else 0
    for index, (block, domain) in enumerate(zip(blocks, domains)):
        store = block.body
        if index < first or index in products or not isinstance(store, tirx.BufferStore):
            continue  # a MatMul/Conv/attention product is the cube's work
        counts: dict = {}
        n_ops = _count_ops(store.value, counts)
        per_unit += n_ops
        scale = out_domain if per_output_element else domain
        for cls, n in counts.items():
            totals[cls] += n * scale
    out_store = blocks[-1].body
    elem_bytes = DataType(str(out_store.buffer.dtype)).bits // 8 \
        if isinstance(out_store, tirx.BufferStore) else 4
    return VectorWork(totals, per_unit, max(1, int(elem_bytes)))


_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 512


def count_vector_work(func: tirx.PrimFunc, per_output_element: bool = False,
                      img2col_prologue: bool = False) -> VectorWork:
    """The ``VectorWork`` of ``func`` (memoised per function object, as the fusion planner
    asks again for the same group with other tilings), counted as the template's plan says
    (``KernelWork.per_output_element``: every block inlined into the output's, as the
    elementwise template does; ``KernelWork.img2col_prologue``: the blocks before the product
    are the template's img2col, whose work its plan counts)."""
    key = (func.__hash__(), per_output_element, img2col_prologue)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0].same_as(func):
            _CACHE.move_to_end(key)
            return hit[1]
    work = _count_uncached(func, per_output_element, img2col_prologue)
    with _CACHE_LOCK:
        _CACHE[key] = (func, work)  # the function is kept so its address is not reused
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return work
