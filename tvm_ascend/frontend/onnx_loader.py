"""Load an ONNX file, an ``onnx.ModelProto`` or a Relax IRModule into a Relax IRModule.

Example
-------
>>> from tvm_ascend.frontend import load_model, parse_input_shape
>>> shapes = parse_input_shape("x:1,3,224,224;y:8")
>>> shapes
{'x': (1, 3, 224, 224), 'y': (8,)}
>>> parse_input_shape("x:1~8,3,224,224;y:-1")    # ATC's ranges and dynamic dimensions
{'x': ((1, 8), 3, 224, 224), 'y': (-1,)}
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
    """Parse ATC's ``--input_shape`` ("name:d0,d1;name2:d0") into ``{name: shape}``.

    A dimension is an integer, ``-1`` (dynamic) or a range ``lo~hi`` (ATC 9.0's spelling; the
    older ``--input_shape_range`` "name:[lo~hi,d1]" is read too), given back as ``(lo, hi)``.
    """
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):
        return {str(k): tuple(_dim(str(d), str(k)) for d in v) for k, v in text.items()}
    shapes = {}
    for item in str(text).split(";"):
        item = item.strip()
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise ModelLoadError(f"--input_shape entry {item!r} is not 'name:d0,d1,...'")
        dims = dims.strip().strip("[]")
        shapes[name] = tuple(_dim(d.strip(), item) for d in dims.split(",") if d.strip() != "")
    return shapes


def _dim(text: str, item: str):
    try:
        if "~" in text:
            low, high = (int(part) for part in text.split("~"))
            if not 0 < low <= high:
                raise ValueError(text)
            return (low, high)
        value = int(text)
    except ValueError as err:
        raise ModelLoadError(f"--input_shape entry {item!r}: dimension {text!r} is not an "
                             "integer, -1 or a range lo~hi") from err
    if value == 0 or value < -1:
        raise ModelLoadError(f"--input_shape entry {item!r}: dimensions must be positive "
                             "(or -1 for dynamic)")
    return value


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


def read_model(model):
    """``model`` as ``build`` takes it, with a file path read into an ``onnx.ModelProto`` (a
    ModelProto or IRModule comes back as it is), so the file is read once per build.

    Example
    -------
    >>> read_model("model.onnx").graph.node[0].op_type           # doctest: +SKIP
    'Conv'
    """
    if isinstance(model, (str, os.PathLike)):
        return _read_onnx(os.fspath(model))
    return model


def _input_shapes(model, shape_dict: dict) -> tuple[dict, dict]:
    """(shapes for the importer, {dimension name: upper bound}) of the graph inputs.

    A dimension that stays dynamic (not given, ``-1``, or a range) becomes a symbolic size:
    the ops that depend on it run on the host, since Ascend kernels here are compiled for
    static shapes; a warning names each such dimension and how to make it static."""
    initializers = {init.name for init in model.graph.initializer}
    shapes, bounds, inputs, sizes = {}, {}, set(), {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        inputs.add(value.name)
        dims = value.type.tensor_type.shape.dim
        given = shape_dict.get(value.name)
        if given is None:
            given = [d.dim_value if d.HasField("dim_value") else -1 for d in dims]
        if given and len(dims) and len(given) != len(dims):
            raise ModelLoadError(f"--input_shape gives {value.name!r} {len(given)} dimensions; "
                                 f"the model's input has {len(dims)}")
        shape = []
        for axis, dim in enumerate(given):
            if isinstance(dim, int) and dim > 0:
                shape.append(dim)
                continue
            declared = dims[axis].dim_param if axis < len(dims) else ""
            name = declared or f"{value.name}_dim{axis}"
            # one variable per name: inputs that share a dim_param share the size
            shape.append(sizes.setdefault(name, tvm.tirx.Var(name, "int64")))
            if isinstance(dim, tuple):
                bounds[name] = dim[1]
            logger.warning("input %r dimension %d (%s) is dynamic%s: ops that depend on it run "
                           "on the host (Ascend kernels are compiled for static shapes); give a "
                           "size with --input_shape \"%s:d0,d1,...\" to fuse them", value.name,
                           axis, name, f" in {dim[0]}~{dim[1]}" if isinstance(dim, tuple) else "",
                           value.name)
        shapes[value.name] = shape
    unknown_names = set(shape_dict) - inputs
    if unknown_names:
        raise ModelLoadError(f"--input_shape names {sorted(unknown_names)}, which are not inputs "
                             f"of the model (inputs: {sorted(inputs)})")
    return shapes, bounds


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
    shapes, bounds = _input_shapes(model, parse_input_shape(input_shape))
    try:
        mod, node_names = _import_with_node_names(model, shapes)
    except Exception as err:  # noqa: BLE001 - the importer raises many kinds
        raise ModelLoadError(f"ONNX import failed: {err}") from err
    attrs = {ir_attrs.ONNX_NODES: node_names, ir_attrs.ONNX_NODE_COUNT: len(model.graph.node)}
    # TVM renames inputs that are not identifiers ("1" -> "input_1"); users feed ONNX names
    initializers = {init.name for init in model.graph.initializer}
    onnx_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    if len(onnx_inputs) == len(mod["main"].params):
        attrs[ir_attrs.ONNX_INPUTS] = onnx_inputs
    if bounds:  # lets TVM's memory planner size buffers of ranged dimensions statically
        attrs["tir_var_upper_bound"] = bounds
    main = mod["main"].with_attrs(attrs)
    mod.update_func(mod.get_global_var("main"), main)
    logger.info("imported ONNX model: %d nodes, inputs %s", len(model.graph.node), shapes)
    return mod


def _import_with_node_names(model, shapes) -> tuple[tvm.IRModule, dict]:
    """``from_onnx``, keeping which ONNX node produced each binding of ``main``.

    The importer's tensor table maps every ONNX output to the Relax expression made for it;
    helper bindings emitted while converting a node come just before its output binding, so
    they are credited to the next node output in binding order.
    """
    from .converters import AscendOnnxImporter

    importer = AscendOnnxImporter(shapes, "float32", keep_params_in_input=False)
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
