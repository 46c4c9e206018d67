"""Symbolic dimensions through the ONNX import: the exporters' shape arithmetic resolved.

PyTorch's dynamo exporter with ``dynamic_shapes`` writes a dynamic sequence length as a
symbol (``seq``) and computes every size that depends on it at run time:
``Shape -> Gather/Slice/Squeeze -> Concat/Unsqueeze -> Reshape/Expand/Range``. TVM's importer
keeps a ``Shape`` of a symbolic tensor as a symbolic ``ShapeExpr``, but not every consumer:
``Range(0, seq, 1)`` gets a fresh length variable (``range_len_0``) that no later op can
prove equal to ``seq``, so the attention scores (seq x seq) and the mask (range_len x
range_len) add to a tensor of unknown shape and the next ``Reshape`` fails ("Reshape expects
the input tensor to have known shape"); the project's own ``Expand`` rewrite
(``onnx_rewrites``) takes the shape through a ``Max`` that cannot read a ``ShapeExpr``.

``resolve_symbolic(model, dims)`` evaluates the shape-valued int64 tensors of the graph as
symbolic shape arithmetic (each entry an int or a dimension symbol; shapes of intermediate
tensors from ONNX's own symbolic shape inference) and rewrites what TVM would lose:

* a shape value with no symbol left is a ``Constant`` (TVM folds it);
* ``Range(0, s, 1)`` with ``s`` a dimension symbol becomes a ``Slice`` of a constant
  ``0, 1, ..., hi - 1`` (``hi``: the range's upper bound) ending at ``Shape(input)[axis]``:
  TVM gives it the length ``s`` itself;
* ``Expand`` to a symbolic shape: the broadcast shape is computed here (ONNX's rules, each
  pair equal or one of them 1) and spelled as ``Concat`` of constants and ``Shape`` slices of
  the inputs; the node is marked (``tvm_ascend.broadcast_resolved``) so that
  ``onnx_rewrites`` leaves it alone;
* ``Reshape`` to a symbolic shape with one symbolic entry gets a constant with ``-1`` there.

What it cannot resolve (a shape value computed from data, a symbol times a symbol) it leaves
as it is, for TVM's importer to take or refuse as before.

Example
-------
>>> dims = {"seq": SymbolicDim("seq", "input_ids", 1, 2, 32)}           # doctest: +SKIP
>>> model = resolve_symbolic(onnx.load("bert_dynseq.onnx"), dims)        # doctest: +SKIP
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

logger = logging.getLogger("tvm_ascend.frontend")

RESOLVED = "tvm_ascend.broadcast_resolved"  # metadata on an Expand whose shape is resolved


@dataclass(frozen=True)
class SymbolicDim:
    """One symbolic dimension: its name, the first input and axis that has it, its range."""

    name: str
    input: str
    axis: int
    low: int
    high: int


def symbolic_dims(model: onnx.ModelProto, shapes: dict, bounds: dict) -> dict:
    """``{name: SymbolicDim}`` of the symbolic sizes in the importer's ``shapes`` (tirx Vars),
    with their ranges from ``bounds`` (``{name: [lo, hi]}``; an unbounded one has hi None)."""
    dims = {}
    for value in model.graph.input:
        for axis, dim in enumerate(shapes.get(value.name, ())):
            if isinstance(dim, int):
                continue
            name = str(dim.name)
            low, high = bounds.get(name, (1, None))
            dims.setdefault(name, SymbolicDim(name, value.name, axis, low, high))
    return dims


def resolve_symbolic(model: onnx.ModelProto, dims: dict, fixed: dict | None = None,
                     again: bool = True) -> onnx.ModelProto:
    """``model`` with its shape arithmetic over ``dims`` resolved (a copy; ``model`` is left
    as it is). ``fixed`` (``{input: {axis: size}}``) names the axes the model declares
    symbolic but the import is given a size for (a gear, a static ``input_shape``): their
    shape arithmetic folds to constants, which TVM's importer needs where an ``Expand`` reads
    it. A model with nothing to resolve is returned as is."""
    if not dims and not fixed:
        return model
    graph = model.graph
    shapes = _inferred_shapes(model, dims, fixed or {})
    values = _Values(graph, shapes)
    out_nodes, changed = [], 0
    for index, node in enumerate(graph.node):
        values.visit(node)
        name = node.name or f"{node.op_type}_{index}"
        new = _rewrite(node, name, values, shapes, dims)
        if new is None:
            out_nodes.append(node)
            continue
        changed += 1
        out_nodes += new
    # shape values with no symbol left: constants, for TVM to fold (only those still read)
    read = {i for n in out_nodes for i in n.input}
    consts = []
    for node in out_nodes:
        if node.op_type == "Constant":
            continue
        for out in node.output:
            value = values.known(out)
            if out in read and value is not None and node.op_type in _SHAPE_OPS:
                consts.append((out, value))
    if not changed and not consts:
        return model
    folded = {out for out, _ in consts}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [n for n in out_nodes if not (n.output and all(o in folded for o in n.output))]
    constant_nodes = [helper.make_node("Constant", [], [out], name=f"{out}/resolved",
                                       value=numpy_helper.from_array(value, out))
                      for out, value in consts]
    del result.graph.node[:]
    result.graph.node.extend(constant_nodes + kept)
    if fixed and again and any(n.op_type == "Range" for n in model.graph.node):
        # a Range made constant gives the tensors after it static shapes that ONNX's
        # inference could not see before: once more, to fold the Shape ops that read them
        result = resolve_symbolic(result, dims, fixed, again=False)
    logger.info("symbolic dims %s: %d node(s) rewritten, %d shape value(s) made constant",
                ", ".join(f"{d.name} in {d.low}~{d.high}" for d in dims.values()), changed,
                len(consts))
    return result


def shape_values(model: onnx.ModelProto, dims: dict) -> tuple[dict, dict]:
    """(``{tensor: numpy object array}`` of the shape-valued int64 tensors, each entry an int
    or a dimension symbol; ``{tensor: shape}`` from ONNX's inference) of ``model`` with
    ``dims`` named: what ``resolve_symbolic`` rewrites by, for checks that read the same
    arithmetic (frontend/index_bounds.py)."""
    shapes = _inferred_shapes(model, dims, {})
    values = _Values(model.graph, shapes)
    for node in model.graph.node:
        values.visit(node)
    return values.values, shapes


# ---- shapes of intermediate tensors ------------------------------------------------------------
def _inferred_shapes(model: onnx.ModelProto, dims: dict, fixed: dict) -> dict:
    """name -> tuple of int / symbol name / None, from ONNX's shape inference with the
    graph inputs' symbolic dimensions named as ``dims`` names them and sized as ``fixed``."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for dim in dims.values():
        for value in probe.graph.input:
            if value.name == dim.input:
                value.type.tensor_type.shape.dim[dim.axis].dim_param = dim.name
    for value in probe.graph.input:
        for axis, size in fixed.get(value.name, {}).items():
            value.type.tensor_type.shape.dim[axis].dim_value = size  # clears the dim_param
    if fixed:  # the exporter's value_info spells the symbol: inference keeps what it finds
        del probe.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    except Exception:  # noqa: BLE001 - without shapes, only graph inputs are known
        inferred = probe
    graph = inferred.graph
    shapes = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            shapes[value.name] = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tensor.shape.dim)
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


# ---- symbolic values of int64 shape tensors -------------------------------------------------
_SHAPE_OPS = ("Shape", "Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Cast", "Identity",
              "Add", "Sub", "Mul")


class _Values:
    """The value of each small int tensor, as a numpy array of objects (int or symbol name),
    where shape arithmetic gives it; None elsewhere."""

    def __init__(self, graph, shapes: dict):
        self.shapes = shapes
        self.values: dict = {}
        for init in graph.initializer:
            # int64 only: every value followed is int64, so a folded one keeps its dtype
            if init.data_type == onnx.TensorProto.INT64 and int(np.prod(init.dims)) <= 16:
                self.values[init.name] = numpy_helper.to_array(init).astype(object)

    def get(self, name: str):
        return self.values.get(name)

    def known(self, name: str):
        """The value of ``name`` as an int64 array where no entry is a symbol."""
        value = self.values.get(name)
        if value is None or any(isinstance(v, str) for v in value.flat):
            return None
        return np.asarray(value.tolist(), dtype=np.int64).reshape(value.shape)

    def visit(self, node) -> None:
        try:
            value = self._evaluate(node)
        except (ValueError, IndexError, TypeError):  # not shape arithmetic we can follow
            value = None
        if value is not None:
            self.values[node.output[0]] = value

    def _evaluate(self, node):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ins = [self.values.get(i) if i else None for i in node.input]
        op = node.op_type
        if op == "Constant":
            tensor = attrs.get("value")
            if tensor is not None and tensor.data_type == onnx.TensorProto.INT64:
                return numpy_helper.to_array(tensor).astype(object)
            return None
        if op == "Shape":
            shape = self.shapes.get(node.input[0])
            if shape is None or any(d is None for d in shape):
                return None
            start, end = attrs.get("start", 0), attrs.get("end", len(shape))
            return np.array(list(shape)[start:end], dtype=object)
        if ins[0] is None:
            return None
        data = ins[0]
        if op == "Identity" or (op == "Cast" and attrs.get("to") == onnx.TensorProto.INT64):
            return data
        if op == "Squeeze":
            axes = attrs.get("axes") or (list(ins[1]) if len(ins) > 1 and ins[1] is not None
                                         else None)
            return np.squeeze(data, axis=tuple(int(a) for a in axes) if axes else None)
        if op == "Unsqueeze":
            axes = attrs.get("axes") or [int(a) for a in ins[1]]
            out = data
            for axis in sorted(int(a) % (data.ndim + len(axes)) for a in axes):
                out = np.expand_dims(out, axis)
            return out
        if op == "Gather":
            if ins[1] is None or any(isinstance(v, str) for v in ins[1].flat):
                return None
            return np.take(data, ins[1].astype(np.int64), axis=attrs.get("axis", 0))
        if op == "Concat":
            if any(v is None for v in ins):
                return None
            return np.concatenate(ins, axis=attrs.get("axis", 0))
        if op == "Slice":
            if data.ndim != 1 or any(v is None for v in ins[1:3]):
                return None
            if any(isinstance(v, str) for v in (*ins[1].flat, *ins[2].flat)):
                return None
            step = int(ins[4][0]) if len(ins) > 4 and ins[4] is not None else 1
            return data[int(ins[1][0]):int(ins[2][0]):step]
        if op in ("Add", "Sub", "Mul") and len(ins) == 2 and ins[1] is not None:
            a, b = np.broadcast_arrays(data, ins[1])
            out = np.empty(a.shape, dtype=object)
            for i, (x, y) in enumerate(zip(a.flat, b.flat)):
                out.flat[i] = _arith(op, x, y)
            return out
        return None


def _arith(op: str, x, y):
    """``x op y`` on ints and symbols; a symbol only with the identity of ``op``."""
    if not isinstance(x, str) and not isinstance(y, str):
        return {"Add": x + y, "Sub": x - y, "Mul": x * y}[op]
    if op == "Add" and (x == 0 or y == 0):
        return y if x == 0 else x
    if op == "Sub" and y == 0:
        return x
    if op == "Mul" and (x == 1 or y == 1):
        return y if x == 1 else x
    raise ValueError("not a symbol or an int")


# ---- the rewrites ------------------------------------------------------------------------------
def _rewrite(node, name: str, values: _Values, shapes: dict, dims: dict):
    """The nodes replacing ``node``, or None to keep it."""
    if node.op_type == "Range":
        return _range(node, name, values, dims)
    if node.op_type == "Expand" and len(node.input) > 1:
        return _expand(node, name, values, shapes, dims)
    if node.op_type == "Reshape" and len(node.input) > 1:
        return _reshape(node, name, values)
    return None


def _dim_tensor(name: str, dim: SymbolicDim):
    """A node giving ``[size of dim]`` from the input that has it: TVM keeps it symbolic."""
    return helper.make_node("Shape", [dim.input], [name], name=name, start=dim.axis,
                            end=dim.axis + 1)


def _const(name: str, values: list):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.asarray(values, np.int64), name))


def _scalar_of(values: _Values, name: str):
    value = values.get(name)
    if value is None or value.size != 1:
        return None
    return value.flat[0]


def _range(node, name: str, values: _Values, dims: dict):
    """Range(0, s, 1), s a bounded dimension symbol: a Slice of 0..hi-1 ending at s."""
    start, limit, delta = (_scalar_of(values, i) for i in node.input[:3])
    if all(isinstance(v, (int, np.integer)) for v in (start, limit, delta)) and delta:
        # every bound known (a symbolic axis given a size): the range is a constant
        table = numpy_helper.from_array(np.arange(start, limit, delta, dtype=np.int64),
                                        node.output[0])
        return [helper.make_node("Constant", [], list(node.output), name=f"{name}/resolved",
                                 value=table)]
    if start != 0 or delta != 1 or not isinstance(limit, str) or limit not in dims:
        return None
    dim = dims[limit]
    if dim.high is None:
        return None
    v = lambda stem: f"{name}/{stem}"  # noqa: E731
    dtype = np.int64
    table = numpy_helper.from_array(np.arange(dim.high, dtype=dtype), v("table"))
    return [helper.make_node("Constant", [], [v("table")], name=v("table"), value=table),
            _const(v("zero"), [0]), _dim_tensor(v("limit"), dim),
            helper.make_node("Slice", [v("table"), v("zero"), v("limit")], list(node.output),
                             name=name)]


def _spelled(name: str, entries: list, dims: dict):
    """Nodes giving the 1-D int64 tensor ``entries`` (ints and dimension symbols), and the
    name of that tensor; None where a symbol is not one of ``dims``."""
    if any(isinstance(e, str) and e not in dims for e in entries):
        return None
    if not any(isinstance(e, str) for e in entries):
        return [_const(name, entries)], name
    nodes, parts = [], []
    for k, entry in enumerate(entries):
        part = f"{name}/{k}"
        nodes.append(_dim_tensor(part, dims[entry]) if isinstance(entry, str)
                     else _const(part, [entry]))
        parts.append(part)
    nodes.append(helper.make_node("Concat", parts, [name], name=name, axis=0))
    return nodes, name


def _expand(node, name: str, values: _Values, shapes: dict, dims: dict):
    """Expand to a symbolic shape: the broadcast shape, spelled for TVM, node marked."""
    target = values.get(node.input[1])
    data = shapes.get(node.input[0])
    if target is None or data is None or target.ndim != 1 or any(d is None for d in data):
        return None
    target = list(target.flat)
    if not any(isinstance(e, str) for e in target):
        return None  # a constant: onnx_rewrites handles it as before
    rank = max(len(target), len(data))
    target = [1] * (rank - len(target)) + target
    data = [1] * (rank - len(data)) + list(data)
    broadcast = []
    for t, d in zip(target, data):
        if t == 1:
            broadcast.append(d)
        elif d == 1 or d == t:
            broadcast.append(t)
        else:
            return None  # not provably broadcastable here: leave it to the importer
    spelled = _spelled(f"{name}/shape", broadcast, dims)
    if spelled is None:
        return None
    nodes, shape = spelled
    expand = helper.make_node("Expand", [node.input[0], shape], list(node.output), name=name)
    expand.metadata_props.add(key=RESOLVED, value="1")
    return nodes + [expand]


def _reshape(node, name: str, values: _Values):
    """Reshape to a shape with one symbolic entry: a constant with -1 there."""
    target = values.get(node.input[1])
    if target is None or target.ndim != 1:
        return None
    symbolic = [k for k, e in enumerate(target.flat) if isinstance(e, str)]
    if len(symbolic) != 1 or any(e == -1 for e in target.flat if not isinstance(e, str)):
        return None
    entries = [-1 if isinstance(e, str) else int(e) for e in target.flat]
    allowzero = [a for a in node.attribute if a.name == "allowzero"]
    if 0 in entries and not (allowzero and allowzero[0].i):
        return None  # 0 copies the input's dim there: keep what the model says
    shape = f"{name}/shape"
    reshape = helper.make_node("Reshape", [node.input[0], shape], list(node.output), name=name)
    reshape.attribute.extend(allowzero)
    return [_const(shape, entries), reshape]
