"""Conv2D on the cube (img2col + Matmul API; the conv2d template) and pooling.

Only ``relax.nn.conv2d`` is claimed here: its bias, folded BatchNorm, activation and residual
Add join it through FuseOps as the elementwise epilogue. MaxPool / AveragePool (NCHW, static
shapes, float16/float32) run on the vector pooling kernel (the pool2d template); adaptive
average pooling other than global has no kernel and is answered here so the report says so;
GlobalAveragePool is rewritten into a last-axis mean by ``tvm_ascend.prepare.reductions`` and
runs on the row-reduce kernel.
"""
from __future__ import annotations

from tvm.relax.dpl.pattern import is_op, wildcard

from ...decision import Decision
from .elementwise import SUPPORTED_DTYPES, static_shape, tensor_type_of

POOL_OPS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d")
WINDOW_POOL_OPS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")


def make_conv2d_pattern():
    """(pattern, annotations) for ``relax.nn.conv2d``."""
    root = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    return root, {"root": root}


def _check_conv2d(call) -> Decision:
    data, weight, out = (tensor_type_of(e) for e in (call.args[0], call.args[1], call))
    if None in (data, weight, out) or not all(static_shape(t) for t in (data, weight, out)):
        return Decision.no("conv2d with a dynamic shape runs on the host")
    if {data.dtype, weight.dtype, out.dtype} != {out.dtype} or out.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"conv2d of {data.dtype} x {weight.dtype} -> {out.dtype}: the cube "
                           "kernel takes float16 or float32 throughout; it runs on the host")
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts != ("NCHW", "OIHW", "NCHW"):
        return Decision.no(f"conv2d in layouts {layouts}: the kernel takes NCHW/OIHW; it runs "
                           "on the host")
    if len(data.shape.values) != 4:
        return Decision.no("conv2d of a tensor that is not 4-D runs on the host")
    return Decision.yes(f"conv2d (groups {int(attrs.groups)}): img2col + cube, epilogue on the "
                        "vector unit")


def _check_pool2d(call) -> Decision:
    op = call.op.name.split(".")[-1]
    if call.op.name not in WINDOW_POOL_OPS:
        return Decision.no(f"{op} has no Ascend kernel (only global average pooling and "
                           "max/avg pooling over fixed windows have one); it runs on the host")
    data, out = tensor_type_of(call.args[0]), tensor_type_of(call)
    if None in (data, out) or not all(static_shape(t) for t in (data, out)):
        return Decision.no(f"{op} with a dynamic shape runs on the host")
    if data.dtype != out.dtype or out.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"{op} of {data.dtype} -> {out.dtype}: the vector pooling kernel "
                           "takes float16 or float32; it runs on the host")
    layouts = (str(call.attrs.layout), str(call.attrs.out_layout))
    if layouts != ("NCHW", "NCHW"):
        return Decision.no(f"{op} in layouts {layouts}: the kernel takes NCHW; it runs on the "
                           "host")
    if len(data.shape.values) != 4:
        return Decision.no(f"{op} of a tensor that is not 4-D runs on the host")
    kh, kw = (int(k) for k in call.attrs.pool_size)
    return Decision.yes(f"{op} {kh}x{kw}: vector kernel (rows reduced, then a Gather of the "
                        "window columns)")


def check_conv_call(call) -> Decision | None:
    """Decision for a conv2d or pooling op, or None when ``call`` is neither."""
    name = getattr(getattr(call, "op", None), "name", None)
    if name == "relax.nn.conv2d":
        return _check_conv2d(call)
    if name in POOL_OPS:
        return _check_pool2d(call)
    return None


def _registry_check(context) -> bool:
    return bool(check_conv_call(context.annotated_expr["root"]))


def conv_patterns() -> list:
    """Entries ``("ascend.<op>", pattern, annotations, check)`` of this family."""
    return [("ascend.conv2d", *make_conv2d_pattern(), _registry_check)]


__all__ = ["conv_patterns", "check_conv_call"]
