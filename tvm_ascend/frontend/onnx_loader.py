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

import difflib
import json
import logging
import os
from typing import Mapping

import tvm
from tvm import relax

from .. import ir_attrs
from ..errors import ModelLoadError, UnsupportedOpError
from .index_bounds import check_index_bounds, index_inputs
from .onnx_checks import check_model, node_name
from .onnx_rewrites import rewrite_for_import
from .onnx_symbolic import resolve_symbolic, symbolic_dims

logger = logging.getLogger("tvm_ascend.frontend")


def parse_input_shape(text: str | Mapping | None) -> dict[str, tuple]:
    """Parse ATC's ``--input_shape`` ("name:d0,d1;name2:d0") into ``{name: shape}``.

    A dimension is an integer, ``-1`` (dynamic) or a range ``lo~hi`` (ATC 9.0's spelling; the
    older ``--input_shape_range`` "name:[lo~hi,d1]" is read too), given back as ``(lo, hi)``.
    """
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):
        return {str(k): tuple(_dim(d, f"{k}:{v}") for d in v) for k, v in text.items()}
    shapes = {}
    for item in str(text).split(";"):
        item = item.strip()
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise ModelLoadError(f"--input_shape entry {item!r} is not 'name:d0,d1,...'")
        dims = dims.strip().strip("[]")
        shapes[name] = tuple(_dim(d, item) for d in dims.split(",") if d.strip() != "")
    return shapes


def _dim(value, item: str):
    """One dimension: an integer, -1, a range ``"lo~hi"``, or ``(lo, hi)`` as this parser gives
    ranges back (so a parsed shape parses again to itself)."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        value = f"{value[0]}~{value[1]}"
    text = str(value).strip()
    try:
        if "~" in text:
            low, high = (int(part) for part in text.split("~"))
            if not 0 < low <= high:
                raise ValueError(text)
            return (low, high)
        value = int(text)
    except ValueError as err:
        raise ModelLoadError(f"--input_shape entry {item!r}: dimension {text!r} is not an "
                             "integer, -1 or a range lo~hi (0 < lo <= hi)") from err
    if value == 0 or value < -1:
        raise ModelLoadError(f"--input_shape entry {item!r}: dimensions must be positive "
                             "(or -1 for dynamic)")
    return value


def _read_onnx(path: str):
    import onnx

    where = f"model file {path!r}"
    if not os.path.exists(path):
        raise ModelLoadError(f"{where} does not exist")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ModelLoadError(f"{where} is empty (0 bytes)")
    try:
        model = onnx.load(path)
    except Exception as err:  # noqa: BLE001 - protobuf raises several kinds
        raise ModelLoadError(f"{where} is not a valid ONNX model: {err}") from err
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{where} holds no ONNX graph (empty or corrupt file)")
    return check_model(model, where, path)


def read_model(model):
    """``model`` as ``build`` takes it, with a file path read into an ``onnx.ModelProto`` and an
    ONNX model checked (``onnx_checks.check_model``; an IRModule comes back as it is), so the
    file is read and checked once per build.

    Example
    -------
    >>> read_model("model.onnx").graph.node[0].op_type           # doctest: +SKIP
    'Conv'
    """
    if isinstance(model, (str, os.PathLike)):
        return _read_onnx(os.fspath(model))
    if _is_onnx(model):
        return check_model(model, "the ONNX model")
    return model


def _is_onnx(model) -> bool:
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a dependency
        return False
    return isinstance(model, onnx.ModelProto)


def describe_inputs(model) -> str:
    """The graph inputs of an ONNX model as a user spells them in ``--input_shape``, with their
    declared shapes: ``"x [batch, 3, 224, 224], mask [batch, 128]"``."""
    initializers = {init.name for init in model.graph.initializer}
    return ", ".join(f"{value.name} {_declared(value)}" for value in model.graph.input
                     if value.name not in initializers) or "none"


def _declared(value) -> str:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return "(no shape)"
    dims = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?"
            for d in tensor.shape.dim]
    return f"[{', '.join(dims)}]"


def _input_shapes(model, shape_dict: dict) -> tuple[dict, dict]:
    """(shapes for the importer, {dimension name: [lo, hi]} of ranges) of the graph inputs.

    A dimension that stays dynamic (not given, ``-1``, or a range) becomes a symbolic size:
    the ops that depend on it run on the host, since Ascend kernels here are compiled for
    static shapes; a warning names each such dimension and how to make it static."""
    initializers = {init.name for init in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    _check_shape_names(model, shape_dict, [value.name for value in inputs])
    shapes, bounds, sizes = {}, {}, {}
    for value in inputs:
        dims = value.type.tensor_type.shape.dim
        given = _given_shape(model, value, shape_dict.get(value.name))
        shape = []
        for axis, dim in enumerate(given):
            if isinstance(dim, int) and dim >= 0:  # 0: an empty tensor the model declares
                shape.append(dim)
                continue
            declared = dims[axis].dim_param if axis < len(dims) else ""
            name = declared or f"{value.name}_dim{axis}"
            # one variable per name: inputs that share a dim_param share the size
            shape.append(sizes.setdefault(name, tvm.tirx.Var(name, "int64")))
            if isinstance(dim, tuple):
                bounds[name] = list(dim)
            logger.warning("input %r dimension %d (%s) is dynamic%s: elementwise, row, matmul, "
                           "attention and row-copy data-movement kernels that depend on it are "
                           "tiled at run time when it has a range (a matmul's M, N or K over "
                           "static batch axes), other ops "
                           "that depend on it run on the host; give a size with --input_shape "
                           "\"%s:d0,d1,...\" to compile them statically", value.name,
                           axis, name, f" in {dim[0]}~{dim[1]}" if isinstance(dim, tuple) else "",
                           value.name)
        shapes[value.name] = shape
    return shapes, bounds


def _fixed_symbolic_axes(model, shapes: dict) -> dict:
    """``{input: {axis: size}}``: the axes the model declares symbolic (a dim_param) that this
    import is given a static size for, e.g. a dynamic export built as ATC-style gears."""
    if not any(node.op_type == "Shape" for node in model.graph.node):
        return {}  # no shape arithmetic to fold: spare the copy and the shape inference
    fixed = {}
    for value in model.graph.input:
        declared = value.type.tensor_type.shape.dim
        for axis, size in enumerate(shapes.get(value.name, ())):
            if isinstance(size, int) and axis < len(declared) and declared[axis].dim_param:
                fixed.setdefault(value.name, {})[axis] = size
    return fixed


def _check_shape_names(model, shape_dict: dict, inputs: list[str]) -> None:
    unknown = [name for name in shape_dict if name not in inputs]
    if unknown:
        close = difflib.get_close_matches(unknown[0], inputs, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ModelLoadError(f"--input_shape names {', '.join(map(repr, unknown))}, which "
                             f"{'is not an input' if len(unknown) == 1 else 'are not inputs'} "
                             f"of the model; {hint}the model's inputs: {describe_inputs(model)}")


def _given_shape(model, value, given) -> list:
    """The shape of input ``value``: as ``--input_shape`` gives it (of the rank the model
    declares), else as the model declares it (-1 for a dimension without a size)."""
    tensor = value.type.tensor_type
    dims = tensor.shape.dim
    if given is None:
        if not tensor.HasField("shape"):
            raise ModelLoadError(f"input {value.name!r} declares no shape (not even its rank); "
                                 f"give one with --input_shape \"{value.name}:d0,d1,...\"")
        return [d.dim_value if d.HasField("dim_value") else -1 for d in dims]
    if tensor.HasField("shape") and len(given) != len(dims):
        spelled = ",".join(f"{d[0]}~{d[1]}" if isinstance(d, tuple) else str(d) for d in given)
        raise ModelLoadError(f"--input_shape gives {value.name!r} {len(given)} dimension(s) "
                             f"('{value.name}:{spelled}'); the model's input {value.name!r} has "
                             f"{len(dims)}: {_declared(value)} (inputs: {describe_inputs(model)})")
    return list(given)


def load_model(model, input_shape=None, checked: bool = False) -> tvm.IRModule:
    """Import ``model`` as a Relax IRModule with static shapes.

    Parameters
    ----------
    model : str, os.PathLike, onnx.ModelProto or tvm.IRModule
        An ONNX file, a loaded ONNX model, or an IRModule with a Relax ``main``.
    input_shape : str or dict, optional
        Static input shapes, ATC style ``"x:1,3,224,224"`` or ``{"x": (1, 3, 224, 224)}``.
    checked : bool
        ``model`` came from ``read_model``, which checked it already.
    """
    if isinstance(model, tvm.IRModule):
        if "main" not in [gv.name_hint for gv in model.get_global_vars()]:
            raise ModelLoadError("the IRModule has no 'main' function to compile")
        return model
    if isinstance(model, (str, os.PathLike)) or not checked:
        model = read_model(model)
    try:
        import onnx
    except ImportError as err:  # pragma: no cover - onnx is a dependency
        raise ModelLoadError("the onnx package is needed to import ONNX models") from err
    if not isinstance(model, onnx.ModelProto):
        raise ModelLoadError(f"cannot compile a {type(model).__name__}: pass an ONNX file path, "
                             "an onnx.ModelProto or a Relax IRModule")
    shapes, bounds = _input_shapes(model, parse_input_shape(input_shape))
    # the model's node names, before a rewrite for TVM's importer adds nodes of its own
    names = [node_name(n, i) for i, n in enumerate(model.graph.node)]
    dims = symbolic_dims(model, shapes, bounds)
    # before any rewrite: a range past a position table is refused naming the model's nodes
    check_index_bounds(model, dims, shapes)
    gathered = index_inputs(model)
    # the exporters' Shape -> Gather -> Concat -> Reshape arithmetic over symbolic dimensions
    model = resolve_symbolic(model, dims, _fixed_symbolic_axes(model, shapes))
    model = rewrite_for_import(_drop_empty_axes(model))
    mod, node_names = _import_with_node_names(model, shapes)
    _check_imported_ops(mod, node_names)
    attrs = {ir_attrs.ONNX_NODES: node_names, ir_attrs.ONNX_NODE_COUNT: len(names),
             ir_attrs.ONNX_NODE_NAMES: names}
    # TVM renames inputs that are not identifiers ("1" -> "input_1"); users feed ONNX names
    initializers = {init.name for init in model.graph.initializer}
    onnx_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    if len(onnx_inputs) == len(mod["main"].params):
        attrs[ir_attrs.ONNX_INPUTS] = onnx_inputs
    if gathered:  # token ids and the like: lib.run checks their values against the tables
        attrs[ir_attrs.INDEX_INPUTS] = json.dumps(gathered)
    if bounds:  # lets TVM's memory planner size buffers of ranged dimensions statically
        attrs["tir_var_upper_bound"] = {name: high for name, (_, high) in bounds.items()}
        attrs[ir_attrs.DIM_RANGES] = json.dumps(bounds)  # lib.run checks sizes against them
    main = mod["main"].with_attrs(attrs)
    mod.update_func(mod.get_global_var("main"), main)
    logger.info("imported ONNX model: %d nodes, inputs %s", len(names), shapes)
    return mod


def _drop_empty_axes(model):
    """``model`` with the axes input left out of each reduction whose axes are a graph input
    of static length 0 (ONNX's default_axes spelling): empty at every run, they mean what no
    axes input means, and TVM's importer takes only constant axes."""
    empty = {value.name for value in model.graph.input
             if [d.dim_value if d.HasField("dim_value") else -1
                 for d in value.type.tensor_type.shape.dim] == [0]}
    empty -= {init.name for init in model.graph.initializer}
    hits = [i for i, node in enumerate(model.graph.node) if node.op_type.startswith("Reduce")
            and len(node.input) > 1 and node.input[1] in empty]
    if not hits:
        return model
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for index in hits:
        del copy.graph.node[index].input[1:]
        logger.info("node %s: axes %r are always empty; reduced as without axes",
                    node_name(copy.graph.node[index], index), model.graph.node[index].input[1])
    return copy


def _import_with_node_names(model, shapes) -> tuple[tvm.IRModule, dict]:
    """``from_onnx``, keeping which ONNX node produced each binding of ``main``.

    The importer's tensor table maps every ONNX output to the Relax expression made for it;
    helper bindings emitted while converting a node come just before its output binding, so
    they are credited to the next node output in binding order. A read out of a tuple already
    credited (a BatchNorm's mean and variance, taken after its output) belongs to that tuple's
    node, not the next one.
    """
    from tvm.relax.frontend.onnx import onnx_frontend

    importer = onnx_frontend.ONNXGraphImporter(shapes, "float32", keep_params_in_input=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    try:
        mod = importer.from_onnx(model.graph, opset)
    except Exception as err:  # noqa: BLE001 - the importer raises many kinds
        raise ModelLoadError(_import_failure(model, importer, err)) from err
    producers = []
    for index, node in enumerate(model.graph.node):
        name = node_name(node, index)
        for output in node.output:
            expr = importer._nodes.get(output)  # noqa: SLF001 - the importer keeps no public map
            if expr is not None:
                producers.append((expr, name))
    names, pending = {}, []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.TupleGetItem) and \
                    getattr(value.tuple_value, "name", None) in names:
                names[binding.var.name] = names[value.tuple_value.name]
                continue
            pending.append(binding.var.name)
            node = next((n for e, n in producers
                         if e.same_as(binding.var) or e.same_as(binding.value)), None)
            if node is not None:
                names.update({var: node for var in pending})
                pending = []
    return mod, names


# TVM importer limits, by the text of the importer's error: what to tell the user instead
_IMPORTER_LIMITS = {
    "Only constant axes currently supported":
        "a limit of TVM's ONNX importer: it needs the axes as a constant (an initializer or a "
        "Constant node), and here they are {operands}, computed at run time",
    "Binary operators must have the same datatype":
        "a limit of TVM's ONNX importer: it takes both operands of {op} in one dtype, and "
        "ONNX lets them differ here",
}


def _import_failure(model, importer, err) -> str:
    """The importer's error with the node it stopped at (the first whose outputs it has not
    made) and, for a known limit of the importer, what the limit is."""
    text = " ".join(str(err).split()) or type(err).__name__
    made = importer._nodes  # noqa: SLF001 - the importer keeps no public map
    for index, node in enumerate(model.graph.node):
        if all(not out or out in made for out in node.output):
            continue
        constants = {init.name for init in model.graph.initializer}
        operands = ", ".join(repr(i) for i in node.input[1:] if i and i not in constants)
        for key, limit in _IMPORTER_LIMITS.items():
            if key in text:
                return (f"node {node_name(node, index)!r} ({node.op_type}): "
                        f"{limit.format(operands=operands, op=node.op_type)} ({text})")
        return f"ONNX import failed at node {node_name(node, index)!r} ({node.op_type}): {text}"
    return f"ONNX import failed: {text}"


# Relax ops whose TVM lowering takes floats only: integer operands fail in constant folding
# or the host build with TVM's raw InternalError
_FLOAT_ONLY_OPS = {"relax.power": "Pow"}


def _check_imported_ops(mod: tvm.IRModule, node_names: dict) -> None:
    """Refuse ops TVM cannot compute for their dtype, naming the ONNX node."""
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            op = getattr(getattr(value, "op", None), "name", "")
            dtype = str(getattr(getattr(value, "ty", None), "dtype", ""))
            if op in _FLOAT_ONLY_OPS and dtype and not dtype.startswith(("float", "bfloat")):
                node = node_names.get(binding.var.name, binding.var.name)
                raise UnsupportedOpError(
                    f"node {node!r} ({_FLOAT_ONLY_OPS[op]} on {dtype}): TVM computes powers of "
                    "floats only, so it can run neither on the NPU nor on the host; cast its "
                    "operands to a float type in the model")
