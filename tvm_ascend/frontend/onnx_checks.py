"""Checks of an ONNX model before TVM's importer sees it, each failure a ModelLoadError naming
the file, node, tensor or opset at fault.

TVM's importer takes much on trust: a tensor produced twice silently keeps its last producer,
any opset is read with the newest converters, and a node's domain is ignored (a custom
domain's ``Relu`` became ONNX's). ``check_model`` refuses those, expands the model's local
functions (custom ops the model defines) and runs ``onnx.checker``.

Example
-------
>>> model = check_model(onnx.load("m.onnx"), "model file 'm.onnx'")    # doctest: +SKIP
"""
from __future__ import annotations

import logging

from ..errors import ModelLoadError

logger = logging.getLogger("tvm_ascend.frontend")

STANDARD_DOMAINS = ("", "ai.onnx")
# TVM's importer converts some contrib ops of onnxruntime's domain (FastGelu, ...)
CONTRIB_DOMAIN = "com.microsoft"


def supported_opsets() -> tuple[int, int]:
    """The ai.onnx opsets accepted: 1 to the newest the installed onnx package defines."""
    import onnx

    return 1, onnx.defs.onnx_opset_version()


def check_model(model, where: str, path: str | None = None):
    """``model`` checked, with its local functions inlined; ``where`` names it in errors
    ("model file 'm.onnx'"), ``path`` is its file (the checker reads models over 2 GB there)."""
    _check_opsets(model, where)
    if model.functions:
        model = _inline_functions(model, where)
    _check_single_assignment(model, where)
    _check_ops(model, where)
    _run_checker(model, where, path)
    return model


def _check_opsets(model, where: str) -> None:
    low, high = supported_opsets()
    for opset in model.opset_import:
        if opset.domain in STANDARD_DOMAINS and not low <= opset.version <= high:
            raise ModelLoadError(f"{where} imports ai.onnx opset {opset.version}; supported: "
                                 f"opsets {low} to {high} (the newest the installed onnx "
                                 "package defines)")


def _inline_functions(model, where: str):
    import onnx.inliner

    try:
        return onnx.inliner.inline_local_functions(model)
    except Exception as err:  # noqa: BLE001 - the inliner raises several kinds
        raise ModelLoadError(f"{where}: its local functions cannot be inlined: {err}") from err


def node_name(node, index: int) -> str:
    """The name a node goes by in errors and reports (``Op_index`` when it has none)."""
    return node.name or f"{node.op_type}_{index}"


def _check_single_assignment(model, where: str) -> None:
    graph = model.graph
    producers = {name: "the graph inputs" for name in
                 [value.name for value in graph.input] + [init.name for init in graph.initializer]}
    for index, node in enumerate(graph.node):
        name = node_name(node, index)
        for output in node.output:
            if not output:
                continue  # an optional output left out
            if output in producers:
                first = producers[output]
                first = first if first == "the graph inputs" else f"node {first!r}"
                raise ModelLoadError(f"{where}: tensor {output!r} is produced by {first} and "
                                     f"again by node {name!r}; an ONNX graph is in SSA form "
                                     "(each tensor produced once)")
            producers[output] = name


def _check_ops(model, where: str) -> None:
    import onnx
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map  # noqa: PLC2701

    convertible = set(_get_convert_map()) | {"Constant", "If"}  # If, Constant: importer's own
    for index, node in enumerate(model.graph.node):
        name, op, domain = node_name(node, index), node.op_type, node.domain
        if domain not in STANDARD_DOMAINS + (CONTRIB_DOMAIN,):
            kind = "ONNX's domain" if domain.startswith("ai.onnx.") else "the custom domain"
            raise ModelLoadError(f"{where}: node {name!r} is op {op!r} of {kind} {domain!r}, "
                                 "which TVM's ONNX importer does not read (it reads ai.onnx and "
                                 "some com.microsoft ops) and the model defines no function "
                                 "for; it can run neither on the NPU nor on the host")
        if domain in STANDARD_DOMAINS and not onnx.defs.has(op):
            raise ModelLoadError(f"{where}: node {name!r} has op type {op!r}, which ONNX does "
                                 "not define; it can run neither on the NPU nor on the host")
        if op not in convertible:
            raise ModelLoadError(f"{where}: node {name!r} ({op}): TVM's ONNX importer cannot "
                                 "convert it, so it can run neither on the NPU nor on the host")


def _with_shape_fields(model):
    """``model``, or a copy whose graph inputs and outputs without a shape have an empty one.

    The checker wants a shape on every graph input and output and says so without naming the
    tensor; the importer needs none on an output, and one on an input comes from
    ``--input_shape`` or is an error naming it (``onnx_loader._given_shape``)."""
    values = list(model.graph.input) + list(model.graph.output)
    if all(v.type.tensor_type.HasField("shape") for v in values
           if v.type.HasField("tensor_type")):
        return model
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in list(copy.graph.input) + list(copy.graph.output):
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.shape.SetInParent()
    return copy


def _run_checker(model, where: str, path: str | None) -> None:
    import onnx

    target = _with_shape_fields(model)
    if path is not None and target is model:
        # the checker reads the file (and its external data) itself: no copy of the model
        # through Python, and no 2 GB protobuf limit
        target = path
    try:
        onnx.checker.check_model(target)
    except onnx.checker.ValidationError as err:
        text = " ".join(str(err).split())
        raise ModelLoadError(f"{where} fails the ONNX checker: {text}") from err
    except ValueError as err:  # a ModelProto over 2 GB cannot be serialized for the checker
        logger.warning("%s: onnx.checker skipped (%s)", where, err)
