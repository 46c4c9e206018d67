"""Load an ONNX file, an ``onnx.ModelProto`` or a Relax IRModule into a Relax IRModule.

Example
-------
>>> from tvm_ascend.frontend import load_model, parse_input_shape
>>> shapes = parse_input_shape("x:1,3,224,224;y:8")
>>> shapes
{'x': (1, 3, 224, 224), 'y': (8,)}
"""
from __future__ import annotations

import logging
import os
from typing import Mapping

import tvm

from .. import ir_attrs
from ..errors import ModelLoadError

logger = logging.getLogger("tvm_ascend.frontend")


def parse_input_shape(text: str | Mapping | None) -> dict[str, tuple]:
    """Parse ATC's ``--input_shape`` ("name:d0,d1;name2:d0") into ``{name: shape}``."""
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):
        return {str(k): tuple(int(d) for d in v) for k, v in text.items()}
    shapes = {}
    for item in str(text).split(";"):
        item = item.strip()
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise ModelLoadError(f"--input_shape entry {item!r} is not 'name:d0,d1,...'")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip() != "")
        except ValueError as err:
            raise ModelLoadError(f"--input_shape entry {item!r}: dimensions must be integers "
                                 "(dynamic dimensions need --input_shape_range)") from err
        if any(d <= 0 for d in shapes[name]):
            raise ModelLoadError(f"--input_shape entry {item!r}: dimensions must be positive")
    return shapes


def _read_onnx(path: str):
    import onnx

    if not os.path.exists(path):
        raise ModelLoadError(f"model file {path!r} does not exist")
    try:
        model = onnx.load(path)
    except Exception as err:  # noqa: BLE001 - protobuf raises several kinds
        raise ModelLoadError(f"model file {path!r} is not a valid ONNX model: {err}") from err
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"model file {path!r} holds no ONNX graph (empty or corrupt file)")
    return model


def _check_static(model, shape_dict: dict) -> dict:
    """Shapes of the graph inputs; names any dimension that is not static and not given."""
    initializers = {init.name for init in model.graph.initializer}
    shapes = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if value.name in shape_dict:
            shapes[value.name] = list(shape_dict[value.name])
            continue
        dims = value.type.tensor_type.shape.dim
        unknown = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
        if unknown:
            raise ModelLoadError(
                f"input {value.name!r} has dynamic dimension(s) {unknown}; give static shapes "
                f"with --input_shape \"{value.name}:d0,d1,...\"")
        shapes[value.name] = [d.dim_value for d in dims]
    unknown_names = set(shape_dict) - set(shapes)
    if unknown_names:
        raise ModelLoadError(f"--input_shape names {sorted(unknown_names)}, which are not inputs "
                             f"of the model (inputs: {sorted(shapes)})")
    return shapes


def load_model(model, input_shape=None) -> tvm.IRModule:
    """Import ``model`` as a Relax IRModule with static shapes.

    Parameters
    ----------
    model : str, os.PathLike, onnx.ModelProto or tvm.IRModule
        An ONNX file, a loaded ONNX model, or an IRModule with a Relax ``main``.
    input_shape : str or dict, optional
        Static input shapes, ATC style ``"x:1,3,224,224"`` or ``{"x": (1, 3, 224, 224)}``.
    """
    if isinstance(model, tvm.IRModule):
        if "main" not in [gv.name_hint for gv in model.get_global_vars()]:
            raise ModelLoadError("the IRModule has no 'main' function to compile")
        return model
    if isinstance(model, (str, os.PathLike)):
        model = _read_onnx(os.fspath(model))
    try:
        import onnx
    except ImportError as err:  # pragma: no cover - onnx is a dependency
        raise ModelLoadError("the onnx package is needed to import ONNX models") from err
    if not isinstance(model, onnx.ModelProto):
        raise ModelLoadError(f"cannot compile a {type(model).__name__}: pass an ONNX file path, "
                             "an onnx.ModelProto or a Relax IRModule")
    shapes = _check_static(model, parse_input_shape(input_shape))
    try:
        mod, node_names = _import_with_node_names(model, shapes)
    except Exception as err:  # noqa: BLE001 - the importer raises many kinds
        raise ModelLoadError(f"ONNX import failed: {err}") from err
    main = mod["main"].with_attrs({ir_attrs.ONNX_NODES: node_names,
                                   ir_attrs.ONNX_NODE_COUNT: len(model.graph.node)})
    mod.update_func(mod.get_global_var("main"), main)
    logger.info("imported ONNX model: %d nodes, inputs %s", len(model.graph.node), shapes)
    return mod


def _import_with_node_names(model, shapes) -> tuple[tvm.IRModule, dict]:
    """``from_onnx``, keeping which ONNX node produced each binding of ``main``.

    The importer's tensor table maps every ONNX output to the Relax expression made for it;
    helper bindings emitted while converting a node come just before its output binding, so
    they are credited to the next node output in binding order.
    """
    from tvm.relax.frontend.onnx import onnx_frontend

    importer = onnx_frontend.ONNXGraphImporter(shapes, "float32", keep_params_in_input=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    mod = importer.from_onnx(model.graph, opset)
    producers = []
    for index, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        for output in node.output:
            expr = importer._nodes.get(output)  # noqa: SLF001 - the importer keeps no public map
            if expr is not None:
                producers.append((expr, name))
    names, pending = {}, []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            pending.append(binding.var.name)
            node = next((n for e, n in producers
                         if e.same_as(binding.var) or e.same_as(binding.value)), None)
            if node is not None:
                names.update({var: node for var in pending})
                pending = []
    return mod, names
