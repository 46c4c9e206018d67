"""The fused attention kernel over a symbolic sequence: planned at the bound, tiled per call.

A group the attention template takes (``attention.py``) whose shapes hold one symbolic
dimension ``s`` (the sequence: query rows, keys, or both) is read at every size the template
checks (``symbolic.checked_sizes``: the range's ends, midpoint, quarter points and 2) with
``attention_shape``; every integer of the shape (the sequence lengths, each operand's batch
coefficients, row and column strides and base) must be one integer polynomial of degree at
most 2 in ``s`` at all of them (``fit_polynomial``: ``s``, ``64``, ``s * 64``, ``s * s``),
everything else (head dim, batch extents, dtype, scale, mask and Where) the same. The kernel
is planned at the upper bound (its UB buffers, the Matmul objects' L1/L0 reservations and
the workspace slots sized there); a call is the static plan of its own shape with the bound's
blocks as the ceiling (``attention.attention_tiling_at``: baseQ, baseKv the bound's, or the call's
lengths rounded up to 16 where less; its query blocks, items and cores), which the host
tiling function computes in C++ and the printed kernel reads from its tiling struct. The
causal skip is not taken over a symbolic sequence (its facts are the partitioner's about one
length): every key block is visited.

Example
-------
>>> shape, terms = symbolic_attention_shape(func, shape_spec(func))    # doctest: +SKIP
>>> dict(terms)["seq_kv"], dict(terms)["q.row_stride"]                  # doctest: +SKIP
((0, 1, 0), (0, 0, 192))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tvm_ascend.errors import TilingError

from .analysis.attention_shape import AttentionShape, OperandMap, _NotAttention, attention_shape
from .analysis.symbolic_offsets import fit_polynomial
from .symbolic import ShapeSpec, checked_sizes, specialize

ROLES = ("q", "k", "v", "out", "mask", "keep")  # the shape's operand maps, in print order


@dataclass(frozen=True)
class AttentionRuntime:
    """How an attention kernel over a symbolic sequence is tiled per call: the dimension
    ``dim`` of ``shapes``, the SoC planned for, the knobs every call is planned with (the
    bound's blocks, cores and method: ``attention.attention_tiling_at``), and ``terms``: each integer
    of the shape that changes with the dimension as (path, (c2, c1, c0)), the value at size
    ``s`` being ``c2 s^2 + c1 s + c0`` (paths ``seq_q``, ``q.row_stride``, ``mask.base``,
    ``k.batch_coefs.1``, ...)."""

    shapes: ShapeSpec
    soc: str
    dim: str
    base_q: int
    base_kv: int
    cores: int | None
    method: str
    terms: tuple[tuple[str, tuple[int, int, int]], ...]

    def value(self, path: str, size: int, bound: AttentionShape) -> int:
        """The integer at ``path`` of the shape at ``size``."""
        for name, (c2, c1, c0) in self.terms:
            if name == path:
                return c2 * size * size + c1 * size + c0
        return shape_value(bound, path)


def _paths(shape: AttentionShape) -> dict:
    """{path: integer} of every integer of ``shape`` that may depend on the sequence."""
    found = {"seq_q": shape.seq_q, "seq_kv": shape.seq_kv}
    for role in ROLES:
        op = getattr(shape, role)
        if op is None:
            continue
        found[f"{role}.row_stride"] = op.row_stride
        found[f"{role}.col_stride"] = op.col_stride
        found[f"{role}.base"] = op.base
        for k, coef in enumerate(op.batch_coefs):
            found[f"{role}.batch_coefs.{k}"] = coef
    return found


def shape_value(shape: AttentionShape, path: str) -> int:
    """The integer at ``path`` (``_paths``' names) of ``shape``."""
    return _paths(shape)[path]


def _skeleton(shape: AttentionShape) -> AttentionShape:
    """``shape`` with every integer of ``_paths`` zeroed: what must not change with s."""
    ops = {}
    for role in ROLES:
        op = getattr(shape, role)
        ops[role] = None if op is None else dataclasses.replace(
            op, batch_coefs=tuple(0 for _ in op.batch_coefs), row_stride=0, col_stride=0,
            base=0)
    return dataclasses.replace(shape, seq_q=0, seq_kv=0, **ops)


def symbolic_attention_shape(func, spec: ShapeSpec) -> tuple[AttentionShape, tuple]:
    """(the attention at the range's upper bound, its terms over the dimension) of ``func``,
    read at every checked size; ``TilingError`` naming what changes otherwise."""
    if len(spec.dims) != 1:
        raise TilingError(f"attention over {len(spec.dims)} symbolic dimensions "
                          f"({', '.join(d.name for d in spec.dims)}): run-time tiling takes one")
    dim = spec.dims[0]
    sizes, _ = checked_sizes(spec)
    if len([size for size in sizes if size >= 2]) < 3:
        raise TilingError(f"{dim.name} in {dim.low}~{dim.high}: fitting the attention's strides "
                          "needs three sizes of at least 2 in the range")
    shapes = {}
    for size in sizes:
        try:
            shapes[size] = attention_shape(specialize(func, {dim.name: size}))
        except _NotAttention as err:
            # at 1 an axis of one element reads as a broadcast (a mask's keys: "not
            # contiguous"); the maps' polynomials still hold there, as the buffers' row-major
            # strides do, and the kernel's outputs at 1 are tested, not this reading
            if size >= 2:
                raise TilingError(f"at {dim.name} = {size} the group is not attention: {err}") \
                    from err
    bound = shapes[dim.high]
    for size, shape in shapes.items():
        if _skeleton(shape) != _skeleton(bound):
            raise TilingError(f"the attention at {dim.name} = {size} differs from the one at "
                              f"{dim.high} in more than its sizes and strides")
    paths = _paths(bound)
    # fitted on the sizes >= 2 (at 1 a stride may read as a broadcast's), checked at all
    order = [size for size in shapes if size >= 2] + [size for size in shapes if size < 2]
    terms = []
    for path in paths:
        values = [shape_value(shapes[size], path) for size in order]
        if len(set(values)) == 1:
            continue
        try:
            coefs = fit_polynomial(order, values)
        except ValueError as err:
            raise TilingError(f"the attention's {path} is no integer polynomial of "
                              f"{dim.name} of degree <= 2 ({err}): not tiled at run time") \
                from err
        terms.append((path, coefs))
    if not any(path in ("seq_q", "seq_kv") for path, _ in terms):
        raise TilingError(f"neither sequence length of the attention is {dim.name}")
    return bound, tuple(terms)


def shape_at(bound: AttentionShape, runtime: AttentionRuntime, size: int) -> AttentionShape:
    """The attention of one call, at ``size``."""
    ops = {}
    for role in ROLES:
        op: OperandMap | None = getattr(bound, role)
        if op is None:
            continue
        at = lambda attr: runtime.value(f"{role}.{attr}", size, bound)  # noqa: E731
        ops[role] = dataclasses.replace(
            op, row_stride=at("row_stride"), col_stride=at("col_stride"), base=at("base"),
            batch_coefs=tuple(runtime.value(f"{role}.batch_coefs.{k}", size, bound)
                              for k in range(len(op.batch_coefs))))
    return dataclasses.replace(bound, seq_q=runtime.value("seq_q", size, bound),
                               seq_kv=runtime.value("seq_kv", size, bound), **ops)


__all__ = ["AttentionRuntime", "shape_at", "shape_value", "symbolic_attention_shape"]
