"""Precision modes as ATC names them, applied to the Relax module before grouping.

=======================  ==================================================================
``must_keep_origin_dtype``  every op in the model's own dtype (the default here)
``allow_fp32_to_fp16``      ATC lowers to fp16 only ops that have no fp32 kernel; every Ascend
                            kernel here takes fp32, so nothing changes
``force_fp16``              float32 compute becomes float16; reductions (mean, sum, variance,
                            softmax, normalisations) keep float32 accumulation, with a Cast on
                            each side, and the cube accumulates in float32 as it always does
``allow_mix_precision``     ATC's three lists: MatMul/Conv (the white list) compute in float16
                            (the cube accumulates in float32 and rounds its result), the ops
                            of the grey list (adds, products, max/min, ReLU, Where, layout
                            ops) follow: float16 where a non-constant input is float16, so a
                            cube op keeps its epilogue in its kernel; every other op (the
                            black list: reductions, normalisations, softmax, exp, erf, ...)
                            stays float32, with a Cast before it
``force_fp32``              float16 compute becomes float32
=======================  ==================================================================

Model inputs and outputs keep their dtype (a Cast at each end), so callers feed what the ONNX
model declares. ``keep_dtype`` names ONNX nodes computed in their original dtype whatever the
mode (ATC's ``--keep_dtype``). Casts sit at group boundaries: the planner's ``CastFusion`` rule
decides whether a Cast joins its neighbour's kernel.

Example
-------
>>> mod = apply_precision_mode(mod, "force_fp16")             # doctest: +SKIP
"""
from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import ir_attrs
from ..errors import FusionConfigError, check_known_names

logger = logging.getLogger("tvm_ascend.precision")

# Ops whose accumulation stays in float32 under force_fp16 (sums of many terms lose digits).
_ACCUMULATING = {"relax.mean", "relax.sum", "relax.variance", "relax.std", "relax.prod",
                 "relax.nn.softmax", "relax.nn.log_softmax", "relax.nn.layer_norm",
                 "relax.nn.rms_norm", "relax.nn.group_norm", "relax.nn.batch_norm"}
# Ops that carry a dtype attribute of their own, or do not compute on floats.
_KEEP = {"relax.astype", "relax.shape_of", "relax.call_tir", "relax.nn.batch_norm"}
_FLOATS = ("float16", "float32")
# allow_mix_precision lowers these to float16 (the white list of ATC's mixed precision: cube ops).
_CUBE_OPS = {"relax.matmul", "relax.nn.conv2d"}
# ... and these follow their inputs (ATC's grey list): their float16 result is as exact as
# their float16 inputs allow, so a cube op's epilogue (bias, ReLU, residual) stays in float16
# and in the cube op's kernel; what is not here keeps float32 (the black list).
_FOLLOWING = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
              "relax.minimum", "relax.negative", "relax.abs", "relax.nn.relu", "relax.clip",
              "relax.where", "relax.reshape", "relax.permute_dims", "relax.concat",
              "relax.strided_slice", "relax.broadcast_to", "relax.squeeze", "relax.expand_dims",
              "relax.flatten", "relax.take", "relax.split", "relax.nn.max_pool2d"}


def _op_name(call) -> str:
    return getattr(getattr(call, "op", None), "name", "")


def _dtype(expr) -> str:
    ty = getattr(expr, "ty", None)
    return str(getattr(ty, "dtype", "")) if isinstance(ty, relax.TensorType) else ""


@mutator
class _DtypeRewriter(PyExprMutator):
    """Recomputes float ops of dtype ``source`` in ``target`` (one Cast per tensor and dtype)."""

    def __init__(self, mod, func, source: str, target: str, keep_nodes, accumulate_high: bool,
                 only_ops=None):
        super().__init__(mod)
        attrs = func.attrs
        self.nodes = dict(attrs[ir_attrs.ONNX_NODES]) if attrs and \
            ir_attrs.ONNX_NODES in attrs else {}
        self.source, self.target = source, target
        self.keep_nodes, self.accumulate_high = set(keep_nodes), accumulate_high
        self.casts: dict = {}
        self.kept: dict = {}  # bindings computed in the source dtype -> their ONNX node
        self.only_ops = only_ops  # None: every float op; else these ops (accumulating in source)
        self.current = ""
        self.changed = 0

    def _cast(self, expr, dtype: str):
        if _dtype(expr) == dtype or _dtype(expr) not in _FLOATS:
            return expr
        if isinstance(expr, Constant):
            return relax.const(expr.value.numpy().astype(np.dtype(dtype)), dtype)
        key = (expr, dtype)
        if key not in self.casts:
            # own names: the model's bindings keep theirs, which the ONNX node map is keyed by
            self.casts[key] = self.builder_.emit(relax.op.astype(expr, dtype),
                                                 f"precision_cast{len(self.casts)}")
        return self.casts[key]

    def visit_var_binding_(self, binding):
        self.current = binding.var.name
        super().visit_var_binding_(binding)

    def _as_before(self, new, old):
        """``new`` (a visited operand) cast back to the dtype ``old`` had (tuples too)."""
        if isinstance(new, relax.Tuple) and isinstance(old, relax.Tuple):
            return relax.Tuple([self._as_before(n, o) for n, o in zip(new.fields, old.fields)])
        return self._cast(new, _dtype(old)) if _dtype(old) in _FLOATS else new

    def visit_call_(self, call):
        visited = [self.visit_expr(a) for a in call.args]
        name = _op_name(call)
        if not name or name in _KEEP or _dtype(call) != self.source:
            # not rewritten: its operands come back in the dtypes it was written for
            args = [self._as_before(n, o) for n, o in zip(visited, call.args)]
            return self.builder_.normalize(relax.Call(call.op, args, call.attrs, call.ty_args))
        original_args = call.args
        call = relax.Call(call.op, visited, call.attrs, call.ty_args)
        if self.only_ops is not None and not self._mixed_in_target(name, visited):
            args = [self._as_before(n, o) for n, o in zip(visited, original_args)]
            return self.builder_.normalize(relax.Call(call.op, args, call.attrs, call.ty_args))
        if str(self.nodes.get(self.current, "")) in self.keep_nodes:
            compute = self.source  # ATC's keep_dtype: this node as the model wrote it
        elif self.accumulate_high and name in _ACCUMULATING:
            compute = self.source
        else:
            compute = self.target
        args = [self._cast(a, compute) if isinstance(a, relax.Expr) else a for a in call.args]
        attrs = call.attrs
        if name == "relax.matmul":
            rebuilt = relax.op.matmul(args[0], args[1], None)
        elif name == "relax.nn.conv2d":
            a = call.attrs
            rebuilt = relax.op.nn.conv2d(args[0], args[1], a.strides, a.padding, a.dilation,
                                         a.groups, a.data_layout, a.kernel_layout, a.out_layout,
                                         compute)
        else:
            rebuilt = relax.Call(call.op, args, attrs, call.ty_args)
        out = self.builder_.normalize(rebuilt)
        if _dtype(out) != compute:  # an op whose dtype an attribute fixes: as it was written
            args = [self._as_before(n, o) for n, o in zip(call.args, original_args)]
            return self.builder_.normalize(relax.Call(call.op, args, call.attrs, call.ty_args))
        self.changed += compute == self.target
        if compute == self.target:
            return out
        # computed in the source dtype; the program continues in the target dtype
        name = f"precision_kept{len(self.kept)}"
        self.kept[name] = str(self.nodes.get(self.current, ""))  # the report names its node
        inner = self.builder_.emit(out, name)
        return relax.op.astype(inner, self.target)


    def _mixed_in_target(self, name: str, visited) -> bool:
        """allow_mix_precision: whether this op computes in the target dtype (a white-list op,
        or a grey-list op with a non-constant input already there), keep_dtype aside."""
        if str(self.nodes.get(self.current, "")) in self.keep_nodes:
            return False
        if name in self.only_ops:
            return True
        return name in _FOLLOWING and any(
            _dtype(v) == self.target for v in visited if not isinstance(v, Constant))


def _cast_result(expr, want, blocks: list):
    """``expr`` (a result of main) cast to the dtypes of ``want`` in a trailing block."""
    if isinstance(want, relax.TensorType) and isinstance(expr.ty, relax.TensorType):
        if str(expr.ty.dtype) == str(want.dtype):
            return expr
        var = relax.Var(f"output_{len(blocks)}", relax.TensorType(want.shape, want.dtype))
        blocks.append(relax.VarBinding(var, relax.op.astype(expr, str(want.dtype))))
        return var
    if isinstance(expr, relax.Tuple) and isinstance(want, relax.TupleType):
        return relax.Tuple([_cast_result(field, w, blocks)
                            for field, w in zip(expr.fields, want.fields)])
    return expr


def _restore_output_dtype(func: relax.Function, original: relax.Function) -> relax.Function:
    """Model outputs keep the dtypes the model declares (a Cast at the end)."""
    bindings: list = []
    result = _cast_result(func.body.body, original.body.body.ty, bindings)
    if not bindings:
        return func
    body = relax.SeqExpr(list(func.body.blocks) + [relax.BindingBlock(bindings)], result)
    return relax.Function(func.params, body, original.ret_ty, func.is_pure, func.attrs)


def apply_precision_mode(mod: tvm.IRModule, mode: str, keep_dtype=(),
                         impl_mode: str = "high_precision") -> tvm.IRModule:
    """``mod`` with ATC precision mode ``mode`` applied (see the module docstring), and ATC's
    ``op_select_implmode`` ``impl_mode`` recorded on ``main`` for the legalization
    (``high_performance`` keeps float16 normalisations in float16:
    ``tvm_ascend/partition/legalize.py``).

    Parameters
    ----------
    mod : tvm.IRModule
        The imported model (``main`` as the ONNX frontend made it).
    mode : str
        One of ATC's precision modes.
    keep_dtype : iterable of str
        ONNX node names computed in their original dtype whatever the mode.
    impl_mode : str
        ``high_precision`` or ``high_performance``.

    Raises FusionConfigError for an unknown mode, or a ``keep_dtype`` name that is not an ONNX
    node of the model.
    """
    attrs = mod["main"].attrs
    if keep_dtype and attrs and ir_attrs.ONNX_NODE_NAMES in attrs:
        check_known_names("--keep_dtype", keep_dtype,
                          [str(name) for name in attrs[ir_attrs.ONNX_NODE_NAMES]])
    if impl_mode == "high_performance":
        out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
        out[mod.get_global_var("main")] = mod["main"].with_attr(ir_attrs.OP_IMPL_MODE, impl_mode)
        mod = out
    if mode in ("must_keep_origin_dtype", "allow_fp32_to_fp16"):
        return mod
    only = None
    if mode == "allow_mix_precision":
        source, target, high, only = "float32", "float16", True, _CUBE_OPS
    elif mode == "force_fp16":
        source, target, high = "float32", "float16", True
    elif mode == "force_fp32":
        source, target, high = "float16", "float32", False
    else:
        raise FusionConfigError(f"precision_mode={mode!r} is not an ATC precision mode")
    func = mod["main"]
    rewriter = _DtypeRewriter(mod, func, source, target, keep_dtype, high, only)
    new = rewriter.visit_expr(func)
    out = mod.__class__(dict(mod.functions), attrs=mod.attrs)
    new = _restore_output_dtype(new, func)
    if rewriter.kept:
        nodes = {str(k): str(v) for k, v in rewriter.nodes.items()}
        new = new.with_attr(ir_attrs.ONNX_NODES, {**nodes, **{k: v for k, v in
                                                              rewriter.kept.items() if v}})
    out[mod.get_global_var("main")] = new
    logger.info("precision_mode=%s: %d op(s) now computed in %s", mode, rewriter.changed, target)
    return relax.transform.Normalize()(out)
