"""How a Relax op becomes TIR: TVM's LegalizeOps, with float16 normalisations in float32.

TVM 0.27's legalization computes a float16 Softmax, LogSoftmax, ReduceSum and ReduceMean in
float16 throughout (its LayerNorm keeps the mean and variance in float32 but scales and shifts
in float16), and the kernel printer follows the TIR. Rounding after every step leaves results
ulps away from what onnxruntime gives, which computes these ops in float32 and rounds once; a
sum over a long half row (partial sums rounded to half) drifts by percents, and a LayerNorm
of a near-constant row magnifies one ulp a thousandfold. CANN's own kernels compute them
wider too: the half overload of AscendC's SoftMax keeps its row maxima and sums in float
(``SoftMaxImpl<half, float, ...>``, ``include/adv_api/activation/softmax.h``), LayerNorm's
statistics are float tensors whatever the input (``include/adv_api/normalization/
layernorm.h``) and Mean has an accumulation type of its own (``include/adv_api/reduce/
mean.h``).

So each of these ops on float16 legalizes to ONE PrimFunc that casts its inputs to float32,
computes, and casts the result back: the kernel loads half, computes in float and stores half,
so no kernel is added at any fusion level and the op's inputs and outputs keep the model's
dtype (``precision_mode`` is about those, as ATC's is). The row templates plan the float row
slots (twice the UB per slot of a half plan; a row longer than the UB streams in smaller
chunks). That is ``op_select_implmode="high_precision"``, the default;
``"high_performance"`` (ATC's other value of ``--op_select_implmode``, recorded on ``main`` by
the prepare stage) keeps TVM's float16 arithmetic: half the UB per row slot, results an ulp or
more from onnxruntime.

Example
-------
>>> lowered = relax.transform.LegalizeOps(legalize_map(impl_mode_of(mod)))(mod)  # doctest: +SKIP
"""
from __future__ import annotations

import tvm
from tvm import te, tirx, topi

from .. import ir_attrs

_WIDE = "float32"


def _widened(compute, widen: int = 1):
    """A legalization that runs ``compute(call, *inputs)`` for a float16 call inside one
    PrimFunc, its first ``widen`` inputs cast to float32 (each a block over the op's rows, which
    the row templates compute at the row loop) and its result cast back; ``compute`` reads the
    other inputs (a LayerNorm's gamma and beta: a block of their own would not iterate the
    rows) as float32 where it loads them. Other calls go to TVM's own legalization."""

    def legalize(bb, call):
        if str(call.ty.dtype) != "float16" or _empty_reduction(call):
            return _default(call)(bb, call)

        def te_func(*inputs):
            wide = [topi.cast(t, _WIDE) if i < widen else t for i, t in enumerate(inputs)]
            return topi.cast(compute(call, *wide), "float16")

        return bb.call_te(te_func, *call.args,
                          primfunc_name_hint=call.op.name.rsplit(".", 1)[-1])

    return legalize


def _default(call):
    return tvm.ir.Op.get(call.op.name).get_attr("FLegalize")


def _empty_reduction(call) -> bool:
    """A sum or mean over an axis of length 0 (TVM fills its identity; nothing to widen)."""
    if call.op.name not in ("relax.sum", "relax.mean"):
        return False
    dims = list(getattr(call.args[0].ty.shape, "values", None) or [])
    return any(isinstance(dims[a], tirx.IntImm) and int(dims[a]) == 0
               for a in _axes(call, len(dims)))


def _axes(call, ndim: int) -> list[int]:
    axes = call.attrs.axis
    return list(range(ndim)) if axes is None else [int(a) % ndim for a in axes]


def _mean(call, x):
    """TVM's mean (a sum, then a division by the element count), on float32."""
    axes = _axes(call, len(x.shape))
    count = tirx.const(1, "int32")
    for a in axes:
        count = count * x.shape[a]
    return topi.divide(topi.sum(x, axes, call.attrs.keepdims), count)


def _layer_norm(call, x, gamma, beta):
    """TOPI's LayerNorm (sum, mean, sum of squared deviations, then the affine output), with
    gamma and beta read as float32 in the output block."""
    ndim = len(x.shape)
    axes = sorted(int(a) % ndim for a in call.attrs.axes)
    kept = [a for a in range(ndim) if a not in axes]
    count = tirx.const(1, "int32")
    for a in axes:
        count = count * x.shape[a]
    count = tirx.Cast(_WIDE, count)

    def index(outer, inner):
        dims, outer, inner = [], list(outer), list(inner)
        for a in range(ndim):
            dims.append(inner.pop(0) if a in axes else outer.pop(0))
        return dims

    def row_sum(value, name):
        k = [te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes]
        return te.compute([x.shape[a] for a in kept],
                          lambda *i: te.sum(value(i, index(i, k)), axis=k), name=name)

    x_sum = row_sum(lambda i, at: x[tuple(at)], "x_sum")
    mean = te.compute(x_sum.shape, lambda *i: x_sum[i] / count, name="x_mean")

    def deviation(i, at):
        return x[tuple(at)] - mean[tuple(i)]

    var_sum = row_sum(lambda i, at: deviation(i, at) * deviation(i, at), "x_var_sum")
    eps = tirx.const(float(call.attrs.epsilon), _WIDE)

    def out(*at):
        i = tuple(at[a] for a in kept)
        j = tuple(at[a] for a in axes)
        return (x[at] - mean[i]) * tirx.rsqrt(var_sum[i] / count + eps) * \
            gamma[j].astype(_WIDE) + beta[j].astype(_WIDE)

    return te.compute(x.shape, out, name="T_layer_norm")


_COMPUTE = {
    "relax.nn.softmax": lambda call, x: topi.nn.softmax(x, call.attrs.axis),
    "relax.nn.log_softmax": lambda call, x: topi.nn.log_softmax(x, call.attrs.axis),
    "relax.nn.layer_norm": _layer_norm,
    "relax.sum": lambda call, x: topi.sum(x, call.attrs.axis, call.attrs.keepdims),
    "relax.mean": _mean,
}


def impl_mode_of(mod: tvm.IRModule) -> str:
    """The ``op_select_implmode`` the prepare stage recorded on ``main`` (default
    ``high_precision``)."""
    attrs = mod["main"].attrs
    if attrs and ir_attrs.OP_IMPL_MODE in attrs:
        return str(attrs[ir_attrs.OP_IMPL_MODE])
    return "high_precision"


def legalize_map(impl_mode: str = "high_precision") -> dict:
    """The ``customize_legalize_map`` for LegalizeOps under ``op_select_implmode``
    ``impl_mode``: ``high_precision`` widens the float16 ops of ``_COMPUTE``,
    ``high_performance`` leaves TVM's legalization as it is."""
    if impl_mode == "high_performance":
        return {}
    return {op: _widened(compute) for op, compute in _COMPUTE.items()}


__all__ = ["impl_mode_of", "legalize_map"]
