"""The convolution a conv2d group computes, read back from TOPI's PrimFunc (``ConvShape``).

``conv_shape`` recognises the ``pad_temp`` block and the ``conv2d_nchw`` reduction after it and
returns the sizes, strides, dilations, padding and groups, or None. The template plans from the
shape, its img2col and traffic counts (``img2col.py``, ``traffic.py``) size the kernel with it,
and the printer prints from it; it needs only TIR and index arithmetic, so it lives apart from
the planning (and the modules that count with it need not import the template).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tvm.sym.analyzer import Analyzer

from ..analysis.tir_walk import (BufferLoad, Call, access_at, cached_by_identity, load_buffer,
                                 product_loads, reduce_iter_vars, root_blocks)


@dataclass(frozen=True)
class ConvShape:
    """Sizes of one NCHW convolution ``out[n, co, oh, ow]`` (OIHW weights, ``groups`` groups)."""

    n: int
    cin: int
    h: int
    w: int
    cout: int
    kh: int
    kw: int
    oh: int
    ow: int
    stride: tuple
    dilation: tuple
    pad: tuple  # (top, left); bottom/right padding only shows as output size
    groups: int
    dtype: str
    # the arguments that are the input and the weights, for the printer; groups that share
    # one kernel differ only in these names, so their shapes (and plans) still compare equal
    x_name: str = field(compare=False)
    w_name: str = field(compare=False)

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def k(self) -> int:
        return self.cin_g * self.kh * self.kw

    @property
    def pixels(self) -> int:
        return self.oh * self.ow


def conv_block_index(blocks) -> int | None:
    for index, block in enumerate(blocks):
        if len(reduce_iter_vars(block)) == 3:
            return index
    return None


def _pad_source(pad_block):
    """(x load, (top, left)) of the pad_temp block: a copy or ``if_then_else(in range, x, 0)``."""
    value = pad_block.body.value
    if isinstance(value, Call) and value.op.name.endswith("if_then_else"):
        if not (type(value.args[2]).__name__ in ("FloatImm", "IntImm")
                and float(value.args[2].value) == 0.0):
            return None
        value = value.args[1]
    if not isinstance(value, BufferLoad) or len(value.indices) != 4:
        return None
    ivs = [iv.var for iv in pad_block.iter_vars]
    if len(ivs) != 4:
        return None
    zero = {v: 0 for v in ivs}
    offsets = [access_at(idx, zero) for idx in value.indices]
    if None in offsets or offsets[0] != 0 or offsets[1] != 0:
        return None
    for axis, idx in enumerate(value.indices):  # x[i0, i1, i2 - top, i3 - left]
        if access_at(idx, {**zero, ivs[axis]: 1}) != offsets[axis] + 1:
            return None
    return value, (-offsets[2], -offsets[3])


@cached_by_identity
def conv_shape(func) -> ConvShape | None:
    """The convolution of ``func`` (pad_temp block, then conv2d_nchw), if the template takes it."""
    blocks = root_blocks(func)
    index = conv_block_index(blocks)
    if index is None or index < 1:
        return None
    pad_block, conv = blocks[index - 1], blocks[index]
    found = product_loads(conv.body)  # (acc, pad_temp and weight loads in either order)
    loads = found[1:] if found is not None else None
    source = _pad_source(pad_block) if type(pad_block.body).__name__ == "BufferStore" else None
    if loads is None or source is None:
        return None
    pad_load, w_load = loads
    if not load_buffer(pad_load).same_as(pad_block.body.buffer):
        pad_load, w_load = w_load, pad_load
    if not load_buffer(pad_load).same_as(pad_block.body.buffer):
        return None
    x_load, (top, left) = source
    x, w, out = load_buffer(x_load), load_buffer(w_load), conv.body.buffer
    if len(x.shape) != 4 or len(w.shape) != 4 or len(out.shape) != 4:
        return None
    n, cin, h, wd = (int(d) for d in x.shape)
    cout, cin_g, kh, kw = (int(d) for d in w.shape)
    _, _, oh, ow = (int(d) for d in out.shape)
    if cin_g == 0 or cin % cin_g or cout % (cin // cin_g):
        return None
    groups = cin // cin_g
    spatial = [iv.var for iv in conv.iter_vars if int(iv.iter_type) == 0]
    rc, ry, rx = (iv.var for iv in reduce_iter_vars(conv))
    nn, ff, yy, xx = spatial
    zero = {v: 0 for v in (nn, ff, yy, xx, rc, ry, rx)}
    hi, wi = pad_load.indices[2], pad_load.indices[3]
    sh, dh = access_at(hi, {**zero, yy: 1}), access_at(hi, {**zero, ry: 1})
    sw, dw = access_at(wi, {**zero, xx: 1}), access_at(wi, {**zero, rx: 1})
    if None in (sh, dh, sw, dw) or min(sh, dh, sw, dw) < 1:
        return None
    # the whole access must be the convolution's, not just its slopes at the origin
    analyzer = Analyzer()
    for iv in conv.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    cout_g = cout // groups
    expected = [nn, ff // cout_g * cin_g + rc, yy * sh + ry * dh, xx * sw + rx * dw]
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(pad_load.indices, expected)):
        return None
    if not all(analyzer.can_prove_equal(a, b) for a, b in zip(w_load.indices, [ff, rc, ry, rx])):
        return None
    dtypes = {str(x.dtype), str(w.dtype), str(out.dtype)}
    if len(dtypes) != 1:
        return None
    return ConvShape(n, cin, h, wd, cout, kh, kw, oh, ow, (sh, sw), (dh, dw), (top, left),
                     groups, str(out.dtype), x.name, w.name)


__all__ = ["ConvShape", "conv_block_index", "conv_shape"]
