"""Row offsets over a symbolic dimension: read from the function over the symbols, checked
against the static function's at every sampled size, kept in the plan as JSON text.

A row kernel over symbolic rows serves every size of the range with one printed program; an
input whose row offset does not depend on the dimension reads as the static kernel does. A
transpose that keeps the last axis (attention's ``[B, s, H, D] -> [B, H, s, D]``) reads row
``row`` of its output at an offset that does: ``row // (s * H) * (s * H * D) + row % s *
(H * D) + row // s % H * D``. ``symbolic_row_bases`` derives that expression from the
function over ``s`` (every block inlined into the output's, its row axes unflattened from
``row`` with the symbolic extents), then evaluates it at every row of each sampled size and
requires it equal to the row offset TVM's own arithmetic gives the function specialised at
that size (``row_program``'s), so a kernel is only printed from an expression checked at the
range's lower end, midpoint and upper end. The printed kernel reads the dimension from its
tiling struct (``dim_<name>``, filled per call by the host tiling function).

Example
-------
>>> bases = symbolic_row_bases(func, ["x"], samples)            # doctest: +SKIP
>>> index_from_json(index_to_json(bases["x"]))                  # doctest: +SKIP
row // (s * 2) * (s * 64) + row % s * 64 + row // s % 2 * 32
"""
from __future__ import annotations

import json

import numpy as np
from tvm import tirx
from tvm.sym.analyzer import Analyzer

from tvm_ascend.errors import TilingError

from .analysis.movement_program import DataDependent, evaluate, index_loads, inlined_output_block
from .analysis.tile_values import flat_offset
from .analysis.tir_walk import load_buffer

# TIR node kind <-> its JSON spelling (the index arithmetic a row offset is made of)
_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%",
        "Min": "min", "Max": "max"}
_KINDS = {v: k for k, v in _OPS.items()}


def index_to_json(expr) -> str:
    """JSON text of an int64 index expression (ints, variables by name, the ``_OPS``)."""
    def tree(e):
        kind = type(e).__name__
        if kind == "IntImm":
            return int(e.value)
        if kind == "Var":
            return str(e.name)
        if kind == "Cast":
            return tree(e.value)
        if kind in _OPS:
            return [_OPS[kind], tree(e.a), tree(e.b)]
        raise TilingError(f"row offset {e} holds {kind}: not index arithmetic a plan keeps")
    return json.dumps(tree(expr))


def index_from_json(text: str):
    """The int64 TIR expression ``index_to_json`` wrote."""
    def build(node):
        if isinstance(node, int):
            return tirx.IntImm("int64", node)
        if isinstance(node, str):
            return tirx.Var(node, "int64")
        op, a, b = node
        return getattr(tirx, _KINDS[op])(build(a), build(b))
    return build(json.loads(text))


def index_names(expr) -> set:
    """Names of the variables in ``expr``."""
    kind = type(expr).__name__
    if kind == "Var":
        return {str(expr.name)}
    if kind == "Cast":
        return index_names(expr.value)
    if kind in _OPS:
        return index_names(expr.a) | index_names(expr.b)
    return set()


def _bindings(block, row):
    """The output block's row axes unflattened from ``row`` (the last axis at column 0)."""
    iter_vars = list(block.iter_vars)
    if any(int(iv.iter_type) != 0 for iv in iter_vars):
        raise TilingError("the output block reduces: a row offset over a symbolic dimension "
                          "is read for row copies only")
    bindings = {iter_vars[-1].var: tirx.IntImm("int64", 0)}
    stride = tirx.IntImm("int64", 1)
    for iv in reversed(iter_vars[:-1]):
        extent = tirx.Cast("int64", iv.dom.extent)
        bindings[iv.var] = tirx.FloorMod(tirx.FloorDiv(row, stride), extent)
        stride = stride * extent
    return bindings


def symbolic_row_bases(func, names, samples: list) -> dict:
    """{input name: row offset over ``row`` and the symbolic dimensions} of the inputs
    ``names`` of ``func`` (over symbols), each checked at every sampled size: ``samples`` is
    a list of ({dimension: size}, rows at that size, {name: the static row offset there})."""
    row = tirx.Var("row", "int64")
    sch, out_rv = inlined_output_block(func)  # a row offset is read from one block only
    block = sch.get(out_rv)
    bindings = _bindings(block, row)
    loads: dict = {}
    for load in index_loads(block.body.value):
        loads.setdefault(load_buffer(load).name, load)
    analyzer = Analyzer()
    for var, value in bindings.items():
        analyzer.bind(var, value)
    out = {}
    for name in names:
        load = loads.get(name)
        if load is None:
            raise TilingError(f"input {name} is not read by the output block; its row offset "
                              "over the symbolic dimensions is not known")
        base = analyzer.simplify(flat_offset(load_buffer(load), load.indices))
        for values, rows, static in samples:
            env = {"row": np.arange(rows, dtype=np.int64), **{k: np.int64(v)
                                                              for k, v in values.items()}}
            try:
                got = np.broadcast_to(np.asarray(evaluate(base, env)), (rows,))
                want = np.broadcast_to(np.asarray(evaluate(static[name], {"row": env["row"]})),
                                       (rows,))
            except (DataDependent, KeyError) as err:
                raise TilingError(f"input {name}'s row offset {base} cannot be checked at "
                                  f"{values} ({err}); not tiled at run time") from err
            if not np.array_equal(got, want):
                bad = int(np.nonzero(got != want)[0][0])
                raise TilingError(f"input {name}'s row offset over the symbolic dimensions "
                                  f"({base}) gives {int(got[bad])} at row {bad} of {values}, "
                                  f"the static function {int(want[bad])}; not tiled at run "
                                  "time")
        out[name] = base
    return out


__all__ = ["index_to_json", "index_from_json", "index_names", "symbolic_row_bases"]
