"""A MatMul of rows flattened over a symbolic dimension as a MatMul over the rows themselves.

GPT-2's Conv1D (and any ``x.view(-1, K) @ W``) flattens ``x[2, seq, K]`` to ``(seq * 2, K)``
before the product, so the product's M is an expression of ``seq``. Run-time tiling takes a
symbolic M only as a whole dimension (the launcher reads it off an argument's axis), so such
a product stayed on the host. Flattening the leading axes does not change the rows or their
order, so with ``X`` the tensor before the Reshape and ``W`` a static 2-D weight::

    matmul(reshape(X, [d0 * .. * s, K]), W)  ->  reshape(matmul(X', W), [d0 * .. * s, N])

where ``X'`` is ``X`` (or ``X`` viewed as ``[d0, .., s, K]`` where its trailing axes make up K)
and the product is batched over ``d0, ..`` with M = ``s``; a Reshape right after it back to
``[d0, .., s, N]`` (GPT-2's ``view(*size_out)``) then reads the product itself. Only products
whose M holds a symbolic dimension are rewritten: static ones tile as they are.

Each rewrite leaves a record (``FlatMatmulRows``) in the fusion report's ``prepare_rewrites``.

Example
-------
>>> mod = flat_matmuls_over_rows(mod)                            # doctest: +SKIP
"""
from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import mutator
from tvm.sym.analyzer import Analyzer

from .relax_rewrite import CallRewrite, bindings, call_name, run_rewrite, static_dims

FLAT_MATMUL_ROWS = "FlatMatmulRows"


def _dims(ty) -> list | None:
    values = getattr(getattr(ty, "shape", None), "values", None)
    return list(values) if values is not None else None


def _product(dims):
    out = tirx.IntImm("int64", 1)
    for dim in dims:
        out = out * dim
    return out


def _equal(analyzer, a, b) -> bool:
    return bool(analyzer.can_prove_equal(a, b))


@mutator
class _FlatMatmulRewriter(CallRewrite):
    """``matmul(reshape(X, [M, K]), W)`` with a symbolic M -> a product over X's rows."""

    REWRITE = FLAT_MATMUL_ROWS
    STEM = "rows_matmul"

    def __init__(self, mod, func):
        super().__init__(mod, func)
        self.values = {b.var: b.value for b in bindings(func)}
        self.analyzer = Analyzer()
        self.unflat = {}  # binding name of a rewritten product -> its product over the rows

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = call_name(call)
        if name == "relax.reshape":
            return self._reshape_back(call)
        if name != "relax.matmul":
            return call
        flat, weight = call.args
        source = self.values.get(flat)
        a_dims, w_dims = _dims(flat.ty), static_dims(weight.ty)
        if call_name(source) != "relax.reshape" or a_dims is None or len(a_dims) != 2 or \
                w_dims is None or len(w_dims) != 2 or isinstance(a_dims[0], tirx.IntImm):
            return call
        rows = self._rows_of(source.args[0], a_dims)
        if rows is None:
            return call
        x, lead = rows
        k, n = w_dims
        self.note(True, f"MatMul of {flat.name} flattened to ({a_dims[0]}, {k}): a product over "
                        f"its rows ({', '.join(map(str, lead))}, {k}) whose M is the whole "
                        "dimension, so it is tiled at run time on the NPU")
        if len(_dims(x.ty)) != len(lead) + 1:
            x = self._emit(relax.op.reshape(x, [*lead, k]))
        product = self._emit(relax.op.matmul(x, weight))
        self.unflat[self.current] = (product, [*lead, n])
        return relax.op.reshape(product, [a_dims[0], n])

    def _rows_of(self, x, a_dims):
        """(X, its leading dims) where X's leading dims multiply to the flat M, the last of
        them a symbolic dimension, and its other axes to K; None otherwise."""
        x_dims = _dims(x.ty)
        if x_dims is None:
            return None
        for cut in range(1, len(x_dims)):
            lead, rest = x_dims[:cut], x_dims[cut:]
            if isinstance(lead[-1], tirx.Var) and \
                    all(isinstance(d, (tirx.IntImm, tirx.Var)) for d in lead) and \
                    all(isinstance(d, tirx.IntImm) for d in rest) and \
                    _equal(self.analyzer, _product(lead), a_dims[0]) and \
                    _equal(self.analyzer, _product(rest), a_dims[1]):
                return x, lead
        return None

    def _reshape_back(self, call):
        """A Reshape of a rewritten product back to its rows' shape: the product itself."""
        source = call.args[0]
        if not isinstance(source, relax.Var) or source.name not in self.unflat:
            return call
        product, dims = self.unflat[source.name]
        target = _dims(call.ty)
        if target is None or len(target) != len(dims) or \
                not all(_equal(self.analyzer, a, b) for a, b in zip(target, dims)):
            return call
        return product


def flat_matmuls_over_rows(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every MatMul of ``main`` whose rows are flattened over a symbolic dimension
    rewritten as the product over the rows (the flat result a Reshape of it); the Reshapes
    left unread are removed."""
    func = mod["main"]
    if not any(call_name(b.value) == "relax.matmul" for b in bindings(func)):
        return mod
    out = run_rewrite(mod, _FlatMatmulRewriter)
    if out is mod:
        return mod
    return relax.transform.DeadCodeElimination(["main"])(
        relax.transform.CanonicalizeBindings()(out))


__all__ = ["FLAT_MATMUL_ROWS", "flat_matmuls_over_rows"]
