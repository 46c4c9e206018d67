"""Gather indices that may run past their table: refused at build time, or checked at run time.

The exporters build position ids from the sequence length: ``Range(0, seq, 1)`` (GPT-2), or a
``Slice`` of a constant ``0..T-1`` buffer ending at ``seq`` (BERT's ``position_ids``), and read
a table of T rows with them (``Gather(position_embeddings, positions)``). Such a model cannot
run at a length above T. TVM's host Gather does not check it (``take`` in its fast mode): it
reads past the table's last row, which is a segfault or silent garbage. A Slice of the buffer
gives fewer than ``seq`` rows, and the shapes after it are wrong.

``check_index_bounds`` works out the largest value each such index tensor can take from the
upper bound of each symbolic dimension (``--input_shape "input_ids:2,2~64"``). It refuses a
range that goes past the table, and the error names the node, the table, the input, the
dimension and the range that fits.

``index_inputs`` lists the graph inputs whose values index a table directly (an embedding's
token ids). Their values are the user's data, known only at run time, so ``lib.run`` checks
them before the VM reads with them (runtime/module.py).

Example
-------
>>> check_index_bounds(model, dims, shapes)          # doctest: +SKIP
ModelLoadError: Gather 'node_embedding_1' reads the 32-row table 'model.wpe.weight' ...
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelLoadError
from .onnx_checks import node_name
from .onnx_symbolic import SymbolicDim, shape_values

# ops whose output holds only values of their first input (so an index bound carries over)
_SAME_VALUES = ("Identity", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand",
                "Transpose", "Tile")
_GATHERS = ("Gather", "GatherElements")


@dataclass(frozen=True)
class _Bound:
    """The largest value an int tensor takes, given by the upper bound of ``dim``."""

    high: int
    dim: SymbolicDim
    origin: str  # how the values arise, for the error
    # high - dim.high where the values grow by one per step of the dimension, else None:
    # then the largest range that fits a table of T rows is T - 1 - offset
    offset: int | None


def check_index_bounds(model: onnx.ModelProto, dims: dict, input_shapes: dict) -> None:
    """Raise ModelLoadError where a symbolic dimension's range carries the indices of a
    Gather past its table, or a Slice of a constant past the constant's end.

    ``dims`` is ``{name: SymbolicDim}`` (onnx_symbolic.symbolic_dims) and ``input_shapes`` the
    importer's shapes of the graph inputs (ints and symbolic sizes), for spelling the fix."""
    ranged = {name: dim for name, dim in dims.items() if dim.high is not None}
    if not ranged or not any(n.op_type in _GATHERS + ("Slice",) for n in model.graph.node):
        return
    values, shapes = shape_values(model, ranged)
    consts, tables = _constants(model), _table_shapes(model)
    bounds: dict[str, _Bound] = {}
    for index, node in enumerate(model.graph.node):
        name = node_name(node, index)
        bound = _bound_of(node, name, values, (consts, tables), bounds, ranged, input_shapes)
        if bound is not None:
            bounds[node.output[0]] = bound
        if node.op_type in _GATHERS and node.input[1] in bounds:
            _check_gather(node, name, bounds[node.input[1]], shapes, ranged, input_shapes)


def index_inputs(model: onnx.ModelProto) -> list[dict]:
    """``[{"input", "node", "op", "table", "rows"}]``: each integer graph input whose values
    index (through ops that keep values, e.g. a Cast or an Unsqueeze) a Gather over a table
    with a static number of rows, an initializer or a Constant."""
    tables = _table_shapes(model)
    initializers = {init.name for init in model.graph.initializer}
    ints = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    source = {v.name: v.name for v in model.graph.input
              if v.name not in initializers and v.type.tensor_type.elem_type in ints}
    found = []
    for index, node in enumerate(model.graph.node):
        if node.op_type in _SAME_VALUES and node.input:
            if node.input[0] in source:
                source[node.output[0]] = source[node.input[0]]
            if node.input[0] in tables and node.op_type in ("Identity", "Cast"):
                tables[node.output[0]] = tables[node.input[0]]  # a Cast of an fp16 table
        if node.op_type in _GATHERS and len(node.input) > 1 and node.input[1] in source \
                and node.input[0] in tables:
            shape = tables[node.input[0]]
            axis = _axis(node) % max(len(shape), 1)
            if len(shape):
                found.append({"input": source[node.input[1]], "node": node_name(node, index),
                              "op": node.op_type, "table": node.input[0],
                              "rows": int(shape[axis])})
    return found


# ---- how far the values of an index tensor reach ------------------------------------------
def _bound_of(node, name: str, values: dict, constants: tuple, bounds: dict, dims: dict,
              input_shapes: dict) -> _Bound | None:
    """The bound of ``node``'s first output, where it follows from a dimension's range;
    ``constants``: (integer constants' values, every constant's shape)."""
    op = node.op_type
    consts, tables = constants
    if op == "Range":
        return _range(node, name, values, dims)
    if op == "Slice":
        return _slice(node, name, values, consts, tables, dims, input_shapes)
    if op in _SAME_VALUES and node.input and node.input[0] in bounds:
        return bounds[node.input[0]]
    if op in ("Add", "Sub") and len(node.input) == 2:
        return _shifted(node, bounds, consts)
    return None


def _range(node, name: str, values: dict, dims: dict) -> _Bound | None:
    """Range(start, s, delta) with s a ranged dimension: at most start + k * delta < s."""
    start, limit, delta = (_scalar(values.get(i)) for i in node.input[:3])
    if not isinstance(limit, str) or limit not in dims or not isinstance(start, int) \
            or not isinstance(delta, int) or delta <= 0:
        return None
    dim = dims[limit]
    steps = -(-(dim.high - start) // delta)
    if steps <= 0:
        return None
    return _Bound(start + (steps - 1) * delta, dim, f"Range({start}, {dim.name}, {delta}) "
                  f"at node {name!r}", -1 if delta == 1 else None)


def _slice(node, name: str, values: dict, consts: dict, tables: dict, dims: dict,
           input_shapes: dict) -> _Bound | None:
    """Slice of a constant up to a ranged dimension (BERT's ``position_ids``, GPT-2's causal
    buffer): refused past the constant's end, else the largest value it holds (an integer
    constant; None otherwise)."""
    shape = tables.get(node.input[0])
    starts, ends, axes, steps = (_operand(values, node, k) for k in (1, 2, 3, 4))
    if not shape or starts is None or ends is None:
        return None
    given = [k < len(node.input) and node.input[k] != "" for k in (3, 4)]
    if (given[0] and axes is None) or (given[1] and steps is None):
        return None  # axes or steps computed at run time: which axis is sliced is unknown
    axes = list(axes.flat) if axes is not None else list(range(len(ends.flat)))
    steps = list(steps.flat) if steps is not None else [1] * len(axes)
    sliced = []  # (axis, start, dim) of each axis sliced up to a ranged dimension
    for start, end, axis, step in zip(starts.flat, ends.flat, axes, steps):
        if not isinstance(end, str) or end not in dims or not isinstance(start, (int, np.integer)) \
                or not isinstance(axis, (int, np.integer)) or step != 1 or start < 0:
            continue
        dim, axis, start = dims[end], int(axis) % len(shape), int(start)
        extent = shape[axis]
        # ONNX's end is absolute: entries start..s-1, past the constant's end once s > extent
        # (Slice clamps there, so the result is shorter than the model expects)
        if dim.high > extent:
            raise ModelLoadError(
                f"Slice {name!r} takes entries {start}..{dim.name}-1 of the constant "
                f"{node.input[0]!r} ({extent} along axis {axis}): {_given(dim)}, and a "
                f"{dim.name} above {extent} runs past the constant's end (the slice would "
                f"give fewer entries than the model expects). "
                f"{_fix(dim, extent, input_shapes)}")
        sliced.append((axis, start, dim))
    data = consts.get(node.input[0])
    if data is None or len(sliced) != 1:
        return None  # values unknown here (a float buffer), or a plane: no index bound kept
    (axis, start, dim), = sliced
    rows = np.moveaxis(data, axis, 0)[start:dim.high]
    if len(rows) == 0:
        return None  # empty at every s in range up to its bound: nothing indexes with it
    line = rows.reshape(len(rows), -1).max(axis=1)
    steady = bool(np.all(np.diff(line) == 1))
    # steady: the entry at s - 1 is s + (its value at the bound - the bound)
    return _Bound(int(line.max()), dim, f"entries {start}..{dim.high - 1} of the "
                  f"constant {node.input[0]!r} sliced at node {name!r}",
                  int(line[-1]) - dim.high if steady else None)


def _shifted(node, bounds: dict, consts: dict) -> _Bound | None:
    """``bounded + c`` or ``bounded - c`` with ``c`` an int constant."""
    a, b = node.input[0], node.input[1]
    if node.op_type == "Add" and a not in bounds:
        a, b = b, a
    if a not in bounds or b not in consts or not np.issubdtype(consts[b].dtype, np.integer) \
            or consts[b].size == 0:
        return None
    bound, c = bounds[a], consts[b]
    shift = int(c.max()) if node.op_type == "Add" else -int(c.min())
    uniform = int(c.min()) == int(c.max())
    offset = bound.offset + shift if bound.offset is not None and uniform else None
    sign = "+" if node.op_type == "Add" else "-"
    return _Bound(bound.high + shift, bound.dim, f"{bound.origin} {sign} {b!r}", offset)


def _check_gather(node, name: str, bound: _Bound, shapes: dict, dims: dict,
                  input_shapes: dict) -> None:
    shape = shapes.get(node.input[0])
    if not shape:
        return
    axis = _axis(node) % len(shape)
    rows = shape[axis]
    if not isinstance(rows, int) or bound.high < rows:
        return
    dim = bound.dim
    if bound.offset is not None:
        fits = rows - 1 - bound.offset
        fix = _fix(dim, fits, input_shapes)
        above = f"a {dim.name} above {fits} reads past the table's last row"
    else:
        fix = f"Give {dim.name} a range that keeps these indices below {rows}."
        above = f"indices up to {bound.high} read past the table's last row"
    raise ModelLoadError(
        f"{node.op_type} {name!r} reads the {rows}-row table {node.input[0]!r} (axis {axis}) "
        f"at indices up to {bound.high} ({bound.origin}): {_given(dim)}, and {above} (TVM's "
        f"Gather checks no bounds: a segfault or wrong results at run time). {fix}")


# ---- small helpers ----------------------------------------------------------------------------
def _given(dim: SymbolicDim) -> str:
    return (f"input {dim.input!r} dimension {dim.axis} ({dim.name}) is given the range "
            f"{dim.low}~{dim.high}")


def _fix(dim: SymbolicDim, fits: int, input_shapes: dict) -> str:
    """The ``--input_shape`` with ``dim``'s range cut to ``fits`` (every input naming it)."""
    if fits < dim.low:
        return (f"No range of {dim.name} from {dim.low} fits: the model supports {dim.name} "
                f"up to {fits}.")
    entries = []
    for input_name, shape in input_shapes.items():
        if not any(_dim_name(d) == dim.name for d in shape):
            continue
        spelled = [f"{dim.low}~{fits}" if _dim_name(d) == dim.name else
                   str(d) if isinstance(d, int) else "-1" for d in shape]
        entries.append(f"{input_name}:{','.join(spelled)}")
    return (f"Give {dim.name} a range up to {fits} (the model's limit): --input_shape "
            f"\"{';'.join(entries)}\".")


def _dim_name(dim) -> str | None:
    return None if isinstance(dim, int) else str(getattr(dim, "name", dim))


def _axis(node) -> int:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)


def _operand(values: dict, node, k: int):
    """The shape value of ``node``'s ``k``-th input (None: absent or not known)."""
    return values.get(node.input[k]) if len(node.input) > k and node.input[k] else None


def _scalar(value):
    """An int, a dimension name, or None, of a one-element shape value."""
    if value is None or value.size != 1:
        return None
    entry = value.flat[0]
    return int(entry) if isinstance(entry, (int, np.integer)) else entry


def _constants(model: onnx.ModelProto) -> dict:
    """{name: numpy array} of the integer initializers and Constant nodes (index buffers such
    as BERT's ``position_ids``; the float weights are not read)."""
    ints = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    consts = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer
              if init.data_type in ints}
    for node in model.graph.node:
        tensor = _constant_tensor(node)
        if tensor is not None and tensor.data_type in ints:
            consts[node.output[0]] = numpy_helper.to_array(tensor)
    return consts


def _table_shapes(model: onnx.ModelProto) -> dict:
    """{name: shape} of the initializers and Constant nodes (without reading their data)."""
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    for node in model.graph.node:
        tensor = _constant_tensor(node)
        if tensor is not None:
            shapes[node.output[0]] = tuple(tensor.dims)
    return shapes


def _constant_tensor(node):
    if node.op_type != "Constant":
        return None
    return next((a.t for a in node.attribute if a.name == "value"), None)


__all__ = ["check_index_bounds", "index_inputs"]
