"""An index expression read at several sizes of a symbolic dimension, written over it.

A kernel tiled at run time reads its epilogue operands at offsets the template analysed at
fixed sizes: a (2, 1, 1, s) mask over (2, heads, s, s) scores is read at ``row // 28 * 7`` at
s = 7 and ``row // 400 * 100`` at s = 100. ``lift_offset`` takes one such expression per size,
checks that they are one expression whose constants alone change, fits each constant as a
polynomial of degree at most 2 in the dimension with integer coefficients (``4 * s``, ``s``,
``s * s``), and returns the expression over the dimension's variable; then it evaluates that
at every size given (and at rows across each size's range) against the expression read there,
so a fit that only matched the sizes used to fit it is refused. Where any step fails it
raises ``TilingError`` naming the offset.

Example
-------
>>> lifted = lift_offset({7: (e7, row7, 56), 100: ...}, s, row, "mask")  # doctest: +SKIP
>>> lifted                                                             # doctest: +SKIP
row // (T.int64(4) * s) * s
"""
from __future__ import annotations

from fractions import Fraction

from tvm import tirx
from tvm.sym.analyzer import Analyzer

from tvm_ascend.errors import TilingError

_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max)
ROWS_CHECKED = 64  # rows each size's lifted offset is evaluated at (spread over its range)


def fit_polynomial(sizes: list[int], values: list[int]) -> tuple[int, int, int]:
    """(c2, c1, c0) with c2 * x^2 + c1 * x + c0 = value at every size (integers), from the
    first three distinct sizes (fewer: a lower degree), checked at the rest."""
    points = list(dict.fromkeys(zip(sizes, values)))
    used = points[:3]
    coefs = [Fraction(0)] * 3
    for i, (xi, yi) in enumerate(used):  # Lagrange's basis polynomials, expanded
        basis = [Fraction(1), Fraction(0), Fraction(0)]  # c0, c1, c2
        denom = Fraction(1)
        for j, (xj, _) in enumerate(used):
            if j == i:
                continue
            basis = [-xj * basis[0], basis[0] - xj * basis[1], basis[1] - xj * basis[2]]
            denom *= xi - xj
        for d in range(3):
            coefs[d] += yi * basis[d] / denom
    if any(c.denominator != 1 for c in coefs):
        raise ValueError(f"no integer polynomial of degree <= 2 through {used}")
    c0, c1, c2 = (int(c) for c in coefs)
    for x, y in points:
        if c2 * x * x + c1 * x + c0 != y:
            raise ValueError(f"{c2} s^2 + {c1} s + {c0} misses {y} at s = {x}")
    return c2, c1, c0


def _poly(coefs: tuple[int, int, int], dim: tirx.Var, dtype: str):
    """c2 * s * s + c1 * s + c0 as an expression of ``dim``, its zero terms left out."""
    c2, c1, c0 = coefs

    def const(v):
        return tirx.IntImm(dtype, v)

    terms = []
    if c2:
        terms.append(dim * dim if c2 == 1 else const(c2) * dim * dim)
    if c1:
        terms.append(dim if c1 == 1 else const(c1) * dim)
    if c0 or not terms:
        terms.append(const(c0))
    out = terms[0]
    for term in terms[1:]:
        out = out + term
    return out


def _lift(nodes: list, sizes: list[int], dim: tirx.Var, row: tirx.Var):
    """The expression whose every constant is fitted over ``sizes`` (one node per size), its
    row variables (each size's own) made ``row``."""
    first = nodes[0]
    if any(type(n) is not type(first) for n in nodes):
        raise ValueError(f"{first} and {next(n for n in nodes if type(n) is not type(first))} "
                         "differ in form")
    if isinstance(first, tirx.IntImm):
        return _poly(fit_polynomial(sizes, [int(n.value) for n in nodes]), dim, str(first.ty.dtype))
    if isinstance(first, tirx.Var):
        if any(n.name != row.name for n in nodes):
            raise ValueError(f"{first} is not the row variable {row.name}")
        return row
    if isinstance(first, _BINARY):
        return type(first)(_lift([n.a for n in nodes], sizes, dim, row),
                           _lift([n.b for n in nodes], sizes, dim, row))
    raise ValueError(f"{type(first).__name__} ({first}) is not lifted over a dimension")


def _value(expr, bindings: dict) -> int:
    analyzer = Analyzer()
    for var, value in bindings.items():
        analyzer.bind(var, tirx.IntImm(str(var.ty.dtype), value))
    out = analyzer.simplify(expr)
    if not isinstance(out, tirx.IntImm):
        raise ValueError(f"{expr} does not evaluate to a constant at {bindings}")
    return int(out.value)


def lift_offset(by_size: dict, dim: tirx.Var, row: tirx.Var, name: str = ""):
    """The offset over ``dim`` and ``row`` of ``by_size`` ({size: (expression, its row
    variable, the rows at that size)}), checked at each size against its own expression on
    rows spread over that size's rows; the sizes of at least 2 are the ones fitted (at 1 a
    term may fold away), the others only checked. ``TilingError`` naming ``name`` (the
    operand) where it cannot be lifted."""
    fitted = sorted(size for size in by_size if size >= 2)
    try:
        if len(fitted) < 3:
            raise ValueError(f"sizes {fitted}: three of at least 2 are needed to fit")
        lifted = _lift([by_size[size][0] for size in fitted], fitted, dim, row)
        for size, (expr, own_row, rows) in sorted(by_size.items()):
            step = max(1, rows // ROWS_CHECKED)
            for r in sorted(set(range(0, max(1, rows), step)) | {max(0, rows - 1)}):
                got = _value(lifted, {row: r, dim: size})
                want = _value(expr, {own_row: r})
                if got != want:
                    raise ValueError(f"at {dim.name} = {size}, row {r}: {got}, not {want}")
    except ValueError as err:
        raise TilingError(f"the offset of {name or 'an operand'} is no expression of "
                          f"{dim.name} the kernel can compute at run time: {err}") from err
    return lifted


__all__ = ["fit_polynomial", "lift_offset"]
