"""ONNX converters where TVM 0.27's importer gives a wrong result, and the importer that uses them.

``Expand`` to a shape known only at run time (a graph input, a computed tensor): TVM broadcasts
the data to the shape tensor's values as they are, so ``Expand(x[3, 1], [2, 1, 6])`` gives
``(2, 1, 6)``; ONNX broadcasts the two shapes (``(2, 3, 6)``). Each output dimension is the
data's where the data's is not 1 (the only value ONNX lets the shape's be there, besides 1),
else the shape's.

Example
-------
>>> importer = AscendOnnxImporter(shapes, "float32", keep_params_in_input=False)  # doctest: +SKIP
>>> mod = importer.from_onnx(model.graph, opset)                                 # doctest: +SKIP
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend


def _static_dims(expr) -> list | None:
    shape = getattr(expr.ty, "shape", None)
    return None if shape is None else list(shape.values)


def expand_to_runtime_shape(bb, data, shape):
    """``Expand(data, shape)`` with ``shape`` a tensor: the output broadcasts the data's shape
    with the shape's values (None where ``shape`` is a constant or a ShapeExpr: TVM's own
    converter reads those right)."""
    if isinstance(shape, (relax.ShapeExpr, tvm.ir.GenericConst)):
        return None
    data_dims = _static_dims(data)
    shape_dims = _static_dims(shape)
    if data_dims is None or shape_dims is None or len(shape_dims) != 1:
        return None
    target_rank = int(shape_dims[0])
    rank = max(target_rank, len(data_dims))
    as_shape = bb.emit(relax.Call(relax.ExternFunc("vm.builtin.tensor_to_shape"), [shape],
                                  ty_args=[relax.ShapeType(ndim=target_rank)]))
    values = [tvm.tirx.Var(f"expand_{i}", "int64") for i in range(target_rank)]
    bb.match_cast(as_shape, relax.ShapeType(values))
    one = tvm.tirx.IntImm("int64", 1)
    padded = [one] * (rank - len(data_dims)) + data_dims
    targets = [one] * (rank - target_rank) + values
    out = [t if isinstance(d, tvm.tirx.IntImm) and int(d) == 1 else d
           for d, t in zip(padded, targets)]
    if len(padded) != len(data_dims):
        data = bb.normalize(relax.op.reshape(data, relax.ShapeExpr(padded)))
    return bb.normalize(relax.op.broadcast_to(data, relax.ShapeExpr(out)))


class AscendOnnxImporter(onnx_frontend.ONNXGraphImporter):
    """TVM's ONNX importer with the converters of this module in place of TVM's."""

    def _convert_operator(self, op_name, inputs, attrs, opset):
        if op_name == "Expand" and opset >= 8:
            expanded = expand_to_runtime_shape(self.bb, inputs[0], inputs[1])
            if expanded is not None:
                return expanded
        return super()._convert_operator(op_name, inputs, attrs, opset)


__all__ = ["AscendOnnxImporter", "expand_to_runtime_shape"]
