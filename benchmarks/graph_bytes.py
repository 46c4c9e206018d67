"""Reference traffic figures computed from an ONNX graph alone (no compiler involved).

- compulsory bytes: every graph input, every weight and every graph output moved once, where
  a weight that only partial reads take (a Gather's table, a Slice of a weight) counts as the
  bytes those reads return (a Gather: its indices count x the row bytes), capped at the
  whole weight: an embedding lookup reads the rows it needs, not the table (BERT-base at
  batch 1, sequence 8 reads 8 of the 30,522 rows of its 93.8 MB word table), so a plan can
  move no fewer bytes than this. Indices are taken as distinct (the bound cannot see their
  values);
- matmul-boundary bytes: every MatMul / Gemm / Conv reads its operands and writes its output
  once, everything between them is fused into their prologues and epilogues, attention scores
  (an activation x activation MatMul's output that reaches the next such MatMul) never reach
  GM; compulsory tensors no MatMul / Gemm / Conv touches (embedding tables, norm weights, the
  final outputs of a norm) are moved once on top, at their compulsory bytes (the rows a
  Gather reads).

Example
-------
>>> from benchmarks.models.bert import encoder_layer_model
>>> refs = graph_references(encoder_layer_model(batch=1, seq=8, hidden=32, heads=2))
>>> refs["compulsory_bytes"] <= refs["matmul_boundary_bytes"]
True
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, shape_inference

MATMUL_OPS = ("MatMul", "Gemm", "Conv")
# Inputs that carry shapes, axes or sizes: read by the host when the graph is compiled, never
# moved by a kernel, so they are not weights.
SHAPE_INPUTS = {"Reshape": {1}, "Expand": {1}, "Split": {1}, "Unsqueeze": {1}, "Squeeze": {1},
                "ReduceMean": {1}, "ReduceSum": {1}, "ReduceMax": {1}, "Slice": {1, 2, 3, 4},
                "Tile": {1}, "Pad": {1}, "Resize": {1, 2, 3}, "ConstantOfShape": {0}}
# Ops that read only a part of their data input (slot 0): a Gather the rows its indices name,
# a Slice its window; the bytes they read are the bytes they return.
PARTIAL_READS = {"Gather": 0, "Slice": 0}


def _tensor_shapes(model: onnx.ModelProto) -> dict[str, tuple[list[int], int]]:
    """(shape, item size) of every tensor of the graph whose shape is static and known."""
    shapes = {}
    graph = shape_inference.infer_shapes(model, strict_mode=False).graph
    for info in list(graph.input) + list(graph.output) + list(graph.value_info):
        kind = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in kind.shape.dim]
        if kind.HasField("shape") and None not in dims:
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(kind.elem_type)).itemsize
            shapes[info.name] = (dims, itemsize)
    for init in model.graph.initializer:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
        shapes[init.name] = (list(init.dims), itemsize)
    return shapes


def _weights(model: onnx.ModelProto) -> set[str]:
    """Initializers read as data by some node (not only as a shape or axes argument)."""
    used = set()
    for node in model.graph.node:
        skip = SHAPE_INPUTS.get(node.op_type, set())
        used.update(name for slot, name in enumerate(node.input) if slot not in skip)
    return {init.name for init in model.graph.initializer} & used


def _weight_reads(model: onnx.ModelProto, weights: set[str], sizes: dict[str, int]
                  ) -> dict[str, int]:
    """Bytes of each weight that its readers need: the whole weight when any node reads it
    whole, else the sum of what its partial reads (``PARTIAL_READS``) return, capped at the
    weight."""
    partial: dict[str, int] = {}
    whole = set()
    for node in model.graph.node:
        skip = SHAPE_INPUTS.get(node.op_type, set())
        for slot, name in enumerate(node.input):
            if name not in weights or slot in skip:
                continue
            if PARTIAL_READS.get(node.op_type) == slot and node.output[0] in sizes:
                partial[name] = partial.get(name, 0) + sizes[node.output[0]]
            else:
                whole.add(name)
    return {name: sizes[name] if name in whole or name not in partial
            else min(sizes[name], partial[name]) for name in weights}


def _from_weights(model: onnx.ModelProto, weights: set[str]) -> set[str]:
    """Tensors computed from weights alone (a Transpose of a tied embedding, a folded cast)."""
    constant = set(weights)
    for node in model.graph.node:
        if node.input and all(name in constant or name == "" for name in node.input):
            constant.update(node.output)
    return constant


def _attention_scores(model: onnx.ModelProto, constant: set[str]) -> set[str]:
    """Outputs of activation x activation MatMuls whose value reaches another such MatMul
    through non-MatMul nodes: the attention scores and probabilities (one name per chain)."""
    act_matmuls = [n for n in model.graph.node if n.op_type == "MatMul"
                   and not any(name in constant for name in n.input)]
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    targets = {id(n) for n in act_matmuls}
    scores = set()
    for matmul in act_matmuls:
        chain, frontier, reached = [matmul.output[0]], [matmul.output[0]], False
        while frontier and not reached:
            name = frontier.pop()
            for node in consumers.get(name, []):
                if id(node) in targets and node.input[0] == name:
                    reached = True
                elif node.op_type not in MATMUL_OPS:
                    chain.extend(node.output)
                    frontier.extend(node.output)
        if reached:
            scores.update(chain)
    return scores


def graph_references(model: onnx.ModelProto) -> dict:
    """Compulsory and matmul-boundary bytes, and the MatMul/Gemm/Conv MACs, of ``model``.

    Returns
    -------
    dict
        ``compulsory_bytes`` (a Gather's or Slice's weight: only the bytes it reads),
        ``matmul_boundary_bytes``, ``matmul_macs`` (multiply-adds of every MatMul, Gemm and
        Conv) and ``weight_bytes`` (every weight whole).

    Example
    -------
    >>> from benchmarks.models.resnet50 import resnet50_model
    >>> m = resnet50_model(batch=1, image=32, width=8, blocks=(1, 1, 1, 1), classes=10)
    >>> graph_references(m)["matmul_macs"] > 0
    True
    """
    shapes = _tensor_shapes(model)
    sizes = {name: int(np.prod(dims, dtype=np.int64)) * item
             for name, (dims, item) in shapes.items()}
    weights = _weights(model)
    io = [i.name for i in model.graph.input if i.name not in weights]
    io += [o.name for o in model.graph.output]
    compulsory_names = set(io) | weights
    missing = sorted(n for n in compulsory_names if n not in sizes)
    if missing:
        raise ValueError(f"graph_references: no static shape for {', '.join(missing[:5])}; "
                         "the benchmark models have static shapes only")
    compulsory = {name: sizes[name] for name in io}
    compulsory.update(_weight_reads(model, weights, sizes))
    constant = _from_weights(model, weights)
    scores = _attention_scores(model, constant)
    boundary, touched, macs = 0, set(), 0
    for node in model.graph.node:
        if node.op_type not in MATMUL_OPS:
            continue
        operands = [name for name in node.input if name]
        for name in operands + list(node.output):
            if name in scores:
                continue
            if name not in sizes:
                raise ValueError(f"graph_references: no static shape for {name!r} of node "
                                 f"{node.name!r}")
            boundary += sizes[name]
            touched.add(name)
        macs += _macs(node, shapes)
    boundary += sum(compulsory[name] for name in compulsory_names - touched)
    return {"compulsory_bytes": sum(compulsory.values()),
            "matmul_boundary_bytes": boundary, "matmul_macs": macs,
            "weight_bytes": sum(sizes[name] for name in weights)}


def _macs(node: onnx.NodeProto, shapes: dict[str, tuple[list[int], int]]) -> int:
    """Multiply-adds of one MatMul / Gemm / Conv from the inferred shapes."""
    out = shapes[node.output[0]][0]
    if node.op_type == "Conv":  # out elements x (c_in / group) x kernel area
        return int(np.prod(out, dtype=np.int64)) * int(np.prod(shapes[node.input[1]][0][1:]))
    a = shapes[node.input[0]][0]
    trans_a = any(attr.name == "transA" and attr.i for attr in node.attribute)
    return int(np.prod(out, dtype=np.int64)) * int(a[-2] if trans_a else a[-1])
