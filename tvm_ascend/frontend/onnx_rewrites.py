"""ONNX-level rewrites before TVM's importer, for nodes it imports wrongly.

Each rewrite replaces a node by ONNX ops that mean the same and that ``from_onnx`` imports
right; the new nodes are named ``<node>/<op>`` so the report still points at the node the
model had. Only the cases TVM 0.27 gets wrong are rewritten:

* ``LayerNormalization`` whose ``Mean`` or ``InvStdDev`` output is read: TVM gives both as
  0-d placeholders (only ``Y`` is computed). The node becomes the ops ONNX defines it by
  (ReduceMean, Sub, Mul, Sqrt, Reciprocal, ...; ONNX's own function body for it uses Shape and
  Size ops that TVM cannot import), so all three outputs have their [N, 1] shapes.
* ``Expand`` to a shape that is not a constant: TVM takes the shape as the result's shape
  without broadcasting it with the data's ((3, 1) to [2, 1, 6] gives (2, 1, 6), not
  (2, 3, 6)). The shape becomes ``Max(shape, data's shape)`` (padded to one rank), the
  broadcast shape, which TVM's Expand then takes as it is.
* ``ConstantOfShape`` of an empty shape (a 0-d result, as PyTorch's TorchScript exporter
  writes the ``True`` of an attention mask): TVM broadcasts a [1] value to the 0-d shape and
  fails. It becomes a 0-d ``Constant`` of the value.
* ``BatchNormalization`` with ``training_mode=1``: TVM normalises with the running statistics.
  It becomes the training-mode formula (batch mean and biased variance over every axis but
  the channel's; the running statistics updated with ``momentum``), as ONNX defines it.

Example
-------
>>> model = rewrite_for_import(onnx.load("model.onnx"))          # doctest: +SKIP
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto, helper

logger = logging.getLogger("tvm_ascend.frontend")


def rewrite_for_import(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the nodes TVM's importer gets wrong rewritten (a copy; ``model`` is
    left as it is). A model with none of them is returned unchanged."""
    graph = model.graph
    read = {name for node in graph.node for name in node.input} | \
        {out.name for out in graph.output}
    constants = {init.name for init in graph.initializer} | \
        {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    empty = _empty_shapes(graph)
    wanted = [i for i, node in enumerate(graph.node)
              if _needs_rewrite(node, read, constants, empty)]
    if not wanted:
        return model
    model = _copy(model)
    types = _value_types(model)
    nodes = []
    for index, node in enumerate(model.graph.node):
        if index not in wanted:
            nodes.append(node)
            continue
        name = node.name or f"{node.op_type}_{index}"
        if node.op_type == "LayerNormalization":
            nodes += _layer_norm_body(node, name, opset, types)
        elif node.op_type == "Expand":
            nodes += _expand_to_broadcast_shape(node, name, types)
        elif node.op_type == "ConstantOfShape":
            nodes.append(_scalar_constant(node, name))
        else:
            nodes += _batch_norm_training(node, name, opset, types)
        logger.info("%s (%s) rewritten before import: TVM's importer gets it wrong",
                    name, node.op_type)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _empty_shapes(graph) -> set:
    """Names of the constant int64 tensors with no element (an empty shape)."""
    empty = {init.name for init in graph.initializer if list(init.dims) == [0]}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and list(value.dims) == [0]:
                empty.update(node.output)
    return empty


def _scalar_constant(node, name: str):
    """A ConstantOfShape of an empty shape: a 0-d Constant of its value (0.0 float when the
    node gives none, as ONNX says)."""
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    array = onnx.numpy_helper.to_array(value).reshape(()) if value is not None else \
        np.zeros((), np.float32)
    return helper.make_node("Constant", [], list(node.output), name=name,
                            value=onnx.numpy_helper.from_array(array, name))


def _needs_rewrite(node, read: set, constants: set, empty: set) -> bool:
    if node.op_type == "ConstantOfShape":
        return bool(node.input) and node.input[0] in empty
    if node.op_type == "LayerNormalization":
        return any(out and out in read for out in node.output[1:])
    if node.op_type == "Expand":  # onnx_symbolic may have spelled the broadcast shape
        resolved = any(p.key == "tvm_ascend.broadcast_resolved" for p in node.metadata_props)
        return len(node.input) > 1 and node.input[1] not in constants and not resolved
    if node.op_type == "BatchNormalization":
        return any(a.name == "training_mode" and a.i == 1 for a in node.attribute)
    return False


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _value_types(model: onnx.ModelProto) -> dict:
    """name -> TypeProto of every value shape inference types (inputs, initializers too)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - the importer reports a broken model more precisely
        inferred = model
    graph = inferred.graph
    types = {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}
    for init in graph.initializer:
        types.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, init.dims))
    return types


def _renamer(prefix: str, outer: dict):
    """Names of a function body's values in the graph: its formal inputs and outputs are the
    node's, every other value gets the node's name in front (unique in the graph)."""
    def name(value: str) -> str:
        if value == "":
            return ""
        return outer.get(value, f"{prefix}/{value}")
    return name


def _reduce_mean(name: str, data: str, out: str, axes: list, opset: int) -> list:
    """ReduceMean over ``axes`` keeping them (axes an attribute before opset 18, an input
    from it on)."""
    if opset < 18:
        return [helper.make_node("ReduceMean", [data], [out], name=out, axes=axes, keepdims=1)]
    axes_name = f"{out}_axes"
    return [_int_constant(axes_name, axes),
            helper.make_node("ReduceMean", [data, axes_name], [out], name=out, keepdims=1)]


def _int_constant(name: str, values: list):
    return helper.make_node("Constant", [], [name], name=name, value=helper.make_tensor(
        name, TensorProto.INT64, [len(values)], values))


def _scalar(name: str, elem: int, value: float):
    return helper.make_node("Constant", [], [name], name=name,
                            value=helper.make_tensor(name, elem, [], [value]))


def _layer_norm_body(node, name: str, opset: int, types: dict) -> list:
    """ONNX's LayerNormalization with all three outputs: Mean and InvStdDev keep the
    normalised axes as 1s ([d0, ..., d(axis-1), 1, ..., 1]); the variance is the mean of the
    squared deviations (what onnx.reference and onnxruntime compute); inputs that are not
    float32 are computed in float32 (``stash_type`` 1, the default) and Y cast back."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = node.input[0]
    rank = len(types[x].tensor_type.shape.dim)
    elem = types[x].tensor_type.elem_type
    axis = attrs.get("axis", -1) % rank
    axes = list(range(axis, rank))
    v = lambda stem: f"{name}/{stem}"  # noqa: E731
    nodes, data = [], x
    if elem != TensorProto.FLOAT and attrs.get("stash_type", 1) == 1:
        nodes.append(helper.make_node("Cast", [x], [v("x32")], name=v("x32"),
                                      to=TensorProto.FLOAT))
        data = v("x32")
    compute = TensorProto.FLOAT if data != x else elem
    outputs = list(node.output) + [""] * (3 - len(node.output))
    mean = outputs[1] or v("mean")
    inv = outputs[2] or v("inv_std")
    nodes += _reduce_mean(name, data, mean, axes, opset)
    nodes += [helper.make_node("Sub", [data, mean], [v("dev")], name=v("dev")),
              helper.make_node("Mul", [v("dev"), v("dev")], [v("sq")], name=v("sq"))]
    nodes += _reduce_mean(name, v("sq"), v("var"), axes, opset)
    nodes += [_scalar(v("eps"), compute, attrs.get("epsilon", 1e-5)),
              helper.make_node("Add", [v("var"), v("eps")], [v("var_eps")], name=v("var_eps")),
              helper.make_node("Sqrt", [v("var_eps")], [v("std")], name=v("std")),
              helper.make_node("Reciprocal", [v("std")], [inv], name=v("inv_std")),
              helper.make_node("Mul", [v("dev"), inv], [v("norm")], name=v("norm"))]
    normed = v("norm")
    if data != x:
        nodes.append(helper.make_node("Cast", [normed], [v("norm_t")], name=v("norm_t"),
                                      to=elem))
        normed = v("norm_t")
    scaled = v("scaled") if len(node.input) > 2 and node.input[2] else outputs[0]
    nodes.append(helper.make_node("Mul", [normed, node.input[1]], [scaled], name=v("scaled")))
    if scaled != outputs[0]:
        nodes.append(helper.make_node("Add", [scaled, node.input[2]], [outputs[0]], name=name))
    return nodes


def _expand_to_broadcast_shape(node, name: str, types: dict) -> list:
    """Expand to max(shape, the data's shape), both padded to one rank with leading 1s: the
    shape ONNX's broadcasting gives (each pair of dims is equal or has a 1), which TVM's
    Expand then takes as it is."""
    data, shape = node.input[0], node.input[1]
    dims = [d.dim_value for d in types[data].tensor_type.shape.dim]
    length = types[shape].tensor_type.shape.dim[0].dim_value
    rank = max(len(dims), length)
    v = lambda stem: f"{name}/{stem}"  # noqa: E731
    nodes = [_int_constant(v("data_shape"), [1] * (rank - len(dims)) + dims)]
    if length < rank:
        nodes += [_int_constant(v("ones"), [1] * (rank - length)),
                  helper.make_node("Concat", [v("ones"), shape], [v("shape")], name=v("shape"),
                                   axis=0)]
        shape = v("shape")
    nodes += [helper.make_node("Max", [v("data_shape"), shape], [v("broadcast")],
                               name=v("broadcast")),
              helper.make_node("Expand", [data, v("broadcast")], list(node.output[:1]),
                               name=name)]
    return nodes


def _batch_norm_training(node, name: str, opset: int, types: dict) -> list:
    """ONNX's training-mode BatchNormalization: Y from the batch's statistics; running_mean
    and running_var (outputs 1 and 2, when asked) = input * momentum + batch * (1 - momentum)."""
    x, scale, bias, mean_in, var_in = node.input[:5]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    epsilon, momentum = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
    rank = len(types[x].tensor_type.shape.dim) if x in types else 4
    elem = types[x].tensor_type.elem_type if x in types else TensorProto.FLOAT
    axes = [0] + list(range(2, rank))
    shape = [1, -1] + [1] * (rank - 2)  # a per-channel vector as [1, C, 1, ...]
    v = lambda stem: f"{name}/{stem}"  # noqa: E731
    nodes = [_int_constant(v("shape"), shape), _scalar(v("eps"), elem, epsilon)]
    nodes += _reduce_mean(name, x, v("mean"), axes, opset)
    nodes += [helper.make_node("Sub", [x, v("mean")], [v("dev")], name=v("dev")),
              helper.make_node("Mul", [v("dev"), v("dev")], [v("sq")], name=v("sq"))]
    nodes += _reduce_mean(name, v("sq"), v("var"), axes, opset)
    nodes += [
        helper.make_node("Add", [v("var"), v("eps")], [v("var_eps")], name=v("var_eps")),
        helper.make_node("Sqrt", [v("var_eps")], [v("std")], name=v("std")),
        helper.make_node("Div", [v("dev"), v("std")], [v("norm")], name=v("norm")),
        helper.make_node("Reshape", [scale, v("shape")], [v("scale")], name=v("scale")),
        helper.make_node("Reshape", [bias, v("shape")], [v("bias")], name=v("bias")),
        helper.make_node("Mul", [v("norm"), v("scale")], [v("scaled")], name=v("scaled")),
        helper.make_node("Add", [v("scaled"), v("bias")], [node.output[0]], name=name),
    ]
    updates = [(index, running, batch) for index, (running, batch)
               in enumerate(((mean_in, "mean"), (var_in, "var")), start=1)
               if len(node.output) > index and node.output[index]]
    if updates:  # the running statistics are per channel: [1, C, 1, ...] -> [C]
        nodes.append(_int_constant(v("flat"), [-1]))
    for index, running, batch in updates:
        keep, take = v(f"momentum{index}"), v(f"rest{index}")
        nodes += [
            _scalar(keep, elem, momentum),
            _scalar(take, elem, 1.0 - momentum),
            helper.make_node("Reshape", [v(batch), v("flat")], [v(f"{batch}_c")],
                             name=v(f"{batch}_c")),
            helper.make_node("Mul", [running, keep], [v(f"old{index}")], name=v(f"old{index}")),
            helper.make_node("Mul", [v(f"{batch}_c"), take], [v(f"new{index}")],
                             name=v(f"new{index}")),
            helper.make_node("Add", [v(f"old{index}"), v(f"new{index}")], [node.output[index]],
                             name=v(f"running{index}")),
        ]
    return nodes


__all__ = ["rewrite_for_import"]
