"""The pooling window of a MaxPool / AveragePool group, read back from TOPI's PrimFunc.

Recognises the PrimFunc that LegalizeOps (TOPI) makes for ``max_pool2d`` / ``avg_pool2d``: an
optional ``pad_temp`` block (``if_then_else(in range, x, pad value)``), a reduction over the
window (``max`` or ``+``) and, for the average, a block dividing by the window's count; blocks
before them that compute the pooled tensor elementwise are a prologue. ``pool_shape`` turns
that into a ``PoolShape`` (kernel, stride, dilation, padding, the divisor's tap bounds) or a
reason it is not one. The template (``pool2d.py``) plans and schedules from the shape and the
printer prints from it; reading the shape needs only TIR and index arithmetic (evaluated on numpy
arrays), not the SoC, so it lives apart from the planning.

Example
-------
>>> shape = pool_shape(prim_func)                              # doctest: +SKIP
>>> shape.kind, shape.kernel, shape.stride, shape.pad
('max', (3, 3), (2, 2), (1, 1))
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from tvm.sym.analyzer import Analyzer

from .tile_values import uses_var
from .tir_walk import (BufferLoad, Call, access_at, load_buffer, param_buffers, reduce_iter_vars,
                       reducer_of, root_blocks)

_SHAPES: OrderedDict = OrderedDict()  # pool_shape's memo
_SHAPES_LOCK = threading.Lock()


@dataclass(frozen=True)
class PoolShape:
    """One NCHW pooling ``out[n, c, oh, ow] = reduce x[n, c, oh*sh - pt + ky*dh, ...]``."""

    kind: str        # "max" or "avg"
    n: int
    c: int
    h: int
    w: int
    oh: int
    ow: int
    kernel: tuple    # (kh, kw)
    stride: tuple
    dilation: tuple
    pad: tuple       # (top, left); bottom/right (and ceil mode) only show as output size
    pad_value: float  # what a tap in the padding reads (the reduction's identity or 0)
    init: float      # the reduction's initial value (max: lowest finite value)
    count_bounds: tuple  # avg: ((lo_h, hi_h), (lo_w, hi_w)) of the taps the divisor counts
    dtype: str
    x_name: str      # the pooled tensor: a GM input, or what the prologue computes
    out_index: int   # index of the pool's output block (the divide for avg)
    prologue: int = 0  # elementwise blocks before the pool (and its padding)

    @property
    def planes(self) -> int:
        return self.n * self.c

    def input_rows(self, oh0: int, oh1: int) -> tuple[int, int]:
        """[lo, hi) of the input rows that output rows [oh0, oh1) read, clipped to the image."""
        (kh, _), (sh, _), (dh, _), (pt, _) = self.kernel, self.stride, self.dilation, self.pad
        lo = max(0, oh0 * sh - pt)
        hi = min(self.h, (oh1 - 1) * sh - pt + (kh - 1) * dh + 1)
        return lo, max(lo, hi)


# ---- recognising the TOPI PrimFunc ---------------------------------------------------------
_NP_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Min": np.minimum,
              "Max": np.maximum, "FloorDiv": np.floor_divide, "FloorMod": np.mod,
              "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
              "EQ": np.equal, "NE": np.not_equal, "And": np.logical_and, "Or": np.logical_or}


def evaluate(expr, values: list) -> np.ndarray:
    """``expr`` (index arithmetic, comparisons, logic, min/max, casts) evaluated on numpy
    arrays; ``values``: ``(var, array)`` for every free variable. ValueError for another
    construct.

    Examples
    --------
    >>> y = tvm.tirx.Var("y", "int64")                            # doctest: +SKIP
    >>> evaluate(tvm.tirx.min(y * 2, 5), [(y, np.arange(4))])     # doctest: +SKIP
    array([0, 2, 4, 5])
    """
    kind = type(expr).__name__
    if kind in ("IntImm", "FloatImm"):
        return np.asarray(expr.value)
    if kind == "Var":
        for var, value in values:
            if var.same_as(expr):
                return value
        raise ValueError(f"free variable {expr}")
    if kind in _NP_BINARY:
        return _NP_BINARY[kind](evaluate(expr.a, values), evaluate(expr.b, values))
    if kind == "Cast":
        return evaluate(expr.value, values)
    if kind == "Not":
        return np.logical_not(evaluate(expr.a, values))
    raise ValueError(f"{kind} in an index expression")


def _axis_counts(extent_out, stride, dilation, pad, kernel, lo, hi) -> np.ndarray:
    """Per output coordinate, the taps at input coordinates in ``[lo, hi)``."""
    pos = np.arange(extent_out)[:, None] * stride - pad + np.arange(kernel)[None, :] * dilation
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


def _pad_block(block):
    """(x load, (top, left), pad value, condition or None) of a pad_temp block, or a reason."""
    store = block.body
    if type(store).__name__ != "BufferStore":
        return "the pad block is not one store"
    value, pad_value, cond = store.value, None, None
    if isinstance(value, Call) and value.op.name.endswith("if_then_else"):
        cond, value, other = value.args
        if type(other).__name__ not in ("FloatImm", "IntImm"):
            return "the padding is not a constant"
        pad_value = float(other.value)
    if not isinstance(value, BufferLoad) or len(value.indices) != 4:
        return "the pad block does not copy a 4-D tensor"
    ivs = [iv.var for iv in block.iter_vars]
    if len(ivs) != 4:
        return "the pad block is not 4-D"
    zero = {v: 0 for v in ivs}
    offsets = [access_at(idx, zero) for idx in value.indices]
    if None in offsets or offsets[0] != 0 or offsets[1] != 0:
        return "the pad block shifts the batch or channel axis"
    for axis, idx in enumerate(value.indices):  # x[i0, i1, i2 - top, i3 - left]
        if access_at(idx, {**zero, ivs[axis]: 1}) != offsets[axis] + 1:
            return "the pad block is not a shifted copy"
    return value, (-offsets[2], -offsets[3]), pad_value, cond


def _check_pad_condition(block, cond, pad, x) -> bool:
    """Whether ``pad_temp[h, w]`` reads x exactly where ``(h - top, w - left)`` is inside x."""
    ivs = [iv.var for iv in block.iter_vars]
    ph, pw = (int(iv.dom.extent) for iv in block.iter_vars[2:])
    h_idx, w_idx = np.arange(ph)[:, None], np.arange(pw)[None, :]
    inside = ((h_idx - pad[0] >= 0) & (h_idx - pad[0] < int(x.shape[2]))
              & (w_idx - pad[1] >= 0) & (w_idx - pad[1] < int(x.shape[3])))
    if cond is None:
        return bool(inside.all())
    try:
        mask = evaluate(cond, [(ivs[0], np.asarray(0)), (ivs[1], np.asarray(0)),
                               (ivs[2], h_idx), (ivs[3], w_idx)])
    except ValueError:
        return False
    return bool(np.array_equal(np.broadcast_to(mask, inside.shape), inside))


def _window(pool, source_load):
    """(stride, dilation) of ``source[n, c, y*sh + ry*dh, x*sw + rx*dw]`` or a reason."""
    spatial = [iv.var for iv in pool.iter_vars if int(iv.iter_type) == 0]
    reduce_vars = [iv.var for iv in reduce_iter_vars(pool)]
    if len(spatial) != 4 or len(reduce_vars) != 2:
        return "the window reduction is not over (n, c, oh, ow) x (kh, kw)"
    nn, cc, yy, xx = spatial
    ry, rx = reduce_vars
    zero = {v: 0 for v in spatial + reduce_vars}
    idx = source_load.indices
    sh, dh = access_at(idx[2], {**zero, yy: 1}), access_at(idx[2], {**zero, ry: 1})
    sw, dw = access_at(idx[3], {**zero, xx: 1}), access_at(idx[3], {**zero, rx: 1})
    if None in (sh, dh, sw, dw) or min(sh, dh, sw, dw) < 1:
        return "the window is not strided over (oh, ow) and (kh, kw)"
    analyzer = Analyzer()
    for iv in pool.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    expected = [nn, cc, yy * sh + ry * dh, xx * sw + rx * dw]
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(idx, expected)):
        return "the window reads another layout than NCHW"
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(pool.body.indices, spatial)):
        return "the window result is not stored at (n, c, oh, ow)"
    return (sh, sw), (dh, dw)


def _divisor_bounds(divide, pool, shape_args):
    """((lo_h, hi_h), (lo_w, hi_w)) whose tap counts multiply to TOPI's divisor, or a reason."""
    value = divide.body.value
    if type(value).__name__ != "Div" or not isinstance(value.a, BufferLoad) or \
            not load_buffer(value.a).same_as(pool.body.buffer):
        return "the block after the window sum is not a division of it"
    spatial = [iv.var for iv in divide.iter_vars]
    if len(spatial) != 4:
        return "the average is not 4-D"
    analyzer = Analyzer()
    for iv in divide.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(value.a.indices, spatial)):
        return "the average reads the window sum in another layout"
    if any(uses_var(value.b, v) for v in spatial[:2]):
        return "the divisor depends on the batch or channel"
    h, w, oh, ow, (kh, kw), (sh, sw), (dh, dw), (pt, pl) = shape_args
    try:
        divisor = evaluate(value.b, [(spatial[2], np.arange(oh)[:, None]),
                                     (spatial[3], np.arange(ow)[None, :])])
    except ValueError as err:
        return f"the divisor is not an index expression ({err})"
    divisor = np.broadcast_to(np.asarray(divisor, dtype=np.float64), (oh, ow))
    fits = []
    for extent, out, s, d, p, k in ((h, oh, sh, dh, pt, kh), (w, ow, sw, dw, pl, kw)):
        fits.append([(lo, hi, _axis_counts(out, s, d, p, k, lo, hi))
                     for lo in (0, -p) for hi in range(extent, extent + k * d + s + p + 1)])
    for lo_h, hi_h, ch in fits[0]:
        if ch.min() < 1:
            continue
        for lo_w, hi_w, cw in fits[1]:
            if cw.min() >= 1 and np.array_equal(np.outer(ch, cw), divisor):
                return (lo_h, hi_h), (lo_w, hi_w)
    return "the divisor is not a product of per-axis window counts"


def _prologue_reason(blocks, x) -> str:
    """Why ``blocks`` (everything before the padding and the window) is not an elementwise
    prologue computing ``x`` over its own (n, c, h, w), or "" when it is one."""
    if not blocks or not blocks[-1].body.buffer.same_as(x):
        return "the pooled tensor is computed in the group by something else than a prologue"
    for block in blocks:
        if reduce_iter_vars(block) or type(block.body).__name__ != "BufferStore":
            return f"block {block.name_hint} before the pool is not elementwise"
    extents = [int(iv.dom.extent) for iv in blocks[-1].iter_vars]
    if extents != [int(d) for d in x.shape]:
        return f"the prologue iterates {extents}, not the pooled tensor's shape"
    return ""


def pool_shape(func):
    """The pooling of ``func`` as a ``PoolShape``, or a string saying why it is not one.

    Memoised per function object: the planner, the template and the printer ask again.

    Examples
    --------
    >>> shape = pool_shape(prim_func)                  # doctest: +SKIP
    >>> shape.kind, shape.kernel, shape.stride, shape.pad
    ('max', (3, 3), (2, 2), (1, 1))
    """
    key = func.__hash__()
    with _SHAPES_LOCK:
        hit = _SHAPES.get(key)
        if hit is not None and hit[0].same_as(func):
            return hit[1]
    shape = _analyse(func)
    with _SHAPES_LOCK:
        _SHAPES[key] = (func, shape)  # the function is kept so its address is not reused
        while len(_SHAPES) > 256:
            _SHAPES.popitem(last=False)
    return shape


def _analyse(func):
    blocks = root_blocks(func)
    index = next((i for i, b in enumerate(blocks) if len(reduce_iter_vars(b)) == 2), None)
    if index is None:
        return "no reduction over a 2-D window"
    pool = blocks[index]
    if type(pool.body).__name__ != "BufferStore":
        return "the window reduction is not one store"
    found = reducer_of(pool.body)
    if found is None or found[0] not in ("max", "sum"):
        return "the window reduction is not a max or a sum"
    if not isinstance(found[1], BufferLoad):
        return ("the window reads a value computed in the group (a prologue before the pool); "
                "the kernel copies its input rows from GM")
    kind, source_load = found
    source = load_buffer(source_load)
    if len(source.shape) != 4:
        return "the pooled tensor is not 4-D (NCHW)"
    pad, pad_value, first = (0, 0), None, index
    inputs = {b.name for b in param_buffers(func)[0]}
    x = source
    if source.name not in inputs and index >= 1 and \
            blocks[index - 1].body.buffer.same_as(source):
        parsed = _pad_block(blocks[index - 1])
        if not isinstance(parsed, str):  # else the block before is a prologue, not padding
            x_load, pad, pad_value, cond = parsed
            x = load_buffer(x_load)
            if not _check_pad_condition(blocks[index - 1], cond, pad, x):
                return "the pad block is not the input padded with a constant"
            first = index - 1
    if x.name not in inputs:
        reason = _prologue_reason(blocks[:first], x)
        if reason:
            return reason
    window = _window(pool, source_load)
    if isinstance(window, str):
        return window
    stride, dilation = window
    init = pool.init.value if pool.init is not None else None
    if type(init).__name__ not in ("FloatImm", "IntImm"):
        return "the window reduction starts from a computed value"
    init = float(init.value)
    n, c, h, w = (int(d) for d in x.shape)
    _, _, oh, ow = (int(d) for d in pool.body.buffer.shape)
    kh, kw = (int(iv.dom.extent) for iv in reduce_iter_vars(pool))
    if kind == "sum" and (init != 0.0 or (pad_value or 0.0) != 0.0):
        return "a window sum that does not start from zero / pad with zero"
    pad_value = init if pad_value is None else pad_value
    bounds, out_index = (), index
    if kind == "sum":
        if index + 1 >= len(blocks):
            return "a window sum without the division of an average"
        bounds = _divisor_bounds(blocks[index + 1], pool, (h, w, oh, ow, (kh, kw), stride,
                                                           dilation, pad))
        if isinstance(bounds, str):
            return bounds
        out_index = index + 1
    dtypes = {str(x.dtype), str(pool.body.buffer.dtype), str(source.dtype),
              str(blocks[out_index].body.buffer.dtype)}
    if len(dtypes) != 1:
        return f"the pool mixes dtypes {sorted(dtypes)}"
    return PoolShape("max" if kind == "max" else "avg", n, c, h, w, oh, ow, (kh, kw), stride,
                     dilation, pad, pad_value, init, bounds, dtypes.pop(), x.name, out_index,
                     first)


__all__ = ["PoolShape", "pool_shape", "evaluate"]
