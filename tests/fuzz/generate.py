"""Seeded random ONNX graphs over the op classes the NPU claims (the differential fuzzer's half
that makes cases).

``generate(seed, index)`` always returns the same case: the graph's structure comes from a
``random.Random`` seeded by ``(seed, index)`` and its input values from a numpy generator seeded
the same way, so a failure reproduces from the pair alone. Every float tensor carries an interval
that bounds its values, and an op is only drawn where that interval keeps it numerically safe
(Sqrt on non-negative values, Div by values at least 0.25 away from zero, Exp of at most 3, no
magnitude past 64), so a mismatch is the compiler's, not a rounding of an ill-posed graph.
Comparisons only read "exact" tensors (inputs and ops that round the same everywhere), so a
ulp of difference in a transcendental function cannot flip a bool.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ONNX_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
              "bool": TensorProto.BOOL, "int64": TensorProto.INT64}
FLOATS = ("float32", "float16")
BOUND = 64.0              # no float tensor's magnitude may pass this (fp16 keeps ~3 digits)
MAX_ELEMENTS = 120_000    # keeps one emulated run well under a second
LONG_ROW = 50_021         # a row of float32 longer than the 192 KB UB (48K floats)
DIMS = (1, 1, 2, 3, 4, 5, 7, 8, 13, 16, 32, 129)


@dataclass
class Tensor:
    """One value of the graph: name, dtype, shape, and bounds on its values."""
    name: str
    dtype: str
    shape: tuple
    lo: float = 0.0
    hi: float = 0.0
    exact: bool = True        # computed without any rounding that could differ between backends
    consumers: int = 0

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


@dataclass
class Case:
    """A generated graph, its feeds, and what the comparison needs to know about it."""
    seed: int
    index: int
    model: onnx.ModelProto
    feeds: dict
    ops: list = field(default_factory=list)     # op types in node order
    accumulates: bool = False                   # a MatMul or long reduction: summation order
    half: bool = False                          # some tensor is float16

    @property
    def case_id(self) -> str:
        return f"{self.seed}-{self.index}"

    @property
    def size(self) -> tuple:
        """Ordering key of "smallest case": nodes, then elements of the inputs."""
        return (len(self.model.graph.node), sum(int(np.size(v)) for v in self.feeds.values()))


def broadcast(*shapes) -> tuple:
    return tuple(np.broadcast_shapes(*shapes))


class Builder:
    """Accumulates one graph; each ``op_*`` method adds one op class or returns False where no
    tensor of the pool suits it."""

    def __init__(self, seed: int, index: int):
        self.rng = random.Random(f"tvm-ascend-fuzz:{seed}:{index}")
        self.values = np.random.default_rng([seed, index])
        self.nodes, self.inputs, self.inits = [], [], []
        self.feeds: dict = {}
        self.pool: list[Tensor] = []
        self.graph_inputs: set = set()
        self.opset = self.rng.choice((17, 18))
        self.accumulates = False
        self._count = 0

    # ---- naming, inputs, constants --------------------------------------------------------
    def _name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}{self._count}"

    def new_input(self, dtype: str, shape, lo: float = -2.0, hi: float = 2.0) -> Tensor:
        name = self._name("in")
        shape = tuple(shape)
        self.inputs.append(helper.make_tensor_value_info(name, ONNX_TYPES[dtype], shape))
        value, lo, hi = self._draw(dtype, shape, lo, hi)
        self.feeds[name] = np.asarray(value)
        self.graph_inputs.add(name)
        tensor = Tensor(name, dtype, shape, lo, hi, exact=True)
        self.pool.append(tensor)
        return tensor

    def const(self, array, stem: str = "c") -> str:
        name = self._name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def operand(self, dtype: str, shape, lo: float, hi: float) -> Tensor:
        """A new graph input or initializer of ``shape`` with values in [lo, hi]."""
        if self.rng.random() < 0.5:
            return self.new_input(dtype, shape, lo, hi)
        value, lo, hi = self._draw(dtype, shape, lo, hi)
        return Tensor(self.const(value), dtype, tuple(shape), lo, hi, exact=True)

    def _draw(self, dtype: str, shape, lo, hi) -> tuple:
        """Values of ``dtype`` in [lo, hi] (bools: either), and the bounds they keep."""
        if dtype == "bool":
            return self.values.random(shape) < 0.5, 0, 1
        if dtype == "int64":
            lo, hi = int(lo), int(hi)
            return self.values.integers(lo, hi + 1, size=shape, dtype=np.int64), lo, hi
        return self.values.uniform(lo, hi, size=shape).astype(dtype), lo, hi

    def node(self, op: str, inputs: list, dtype: str, shape, lo=0.0, hi=0.0, exact=False,
             outputs: int = 1, **attrs) -> Tensor:
        out = self._name(op.lower()[:6])
        names = [out] + [f"{out}_{k}" for k in range(1, outputs)]
        for tensor in inputs:
            if isinstance(tensor, Tensor):
                tensor.consumers += 1
        self.nodes.append(helper.make_node(
            op, [t.name if isinstance(t, Tensor) else t for t in inputs], names, name=out,
            **attrs))
        tensor = Tensor(out, dtype, tuple(shape), lo, hi, exact)
        self.pool.append(tensor)
        return tensor

    # ---- choosing ---------------------------------------------------------------------------
    def pick(self, pred=lambda t: True) -> Tensor | None:
        """A pool tensor satisfying ``pred``, the most recent ones likelier (chains), older
        ones still drawn (multi-consumer tensors)."""
        choices = [t for t in self.pool if pred(t)]
        if not choices:
            return None
        if self.rng.random() < 0.6:
            return choices[-1]
        return self.rng.choice(choices)

    def partner_shape(self, shape: tuple) -> tuple:
        """A shape that broadcasts with ``shape``: equal, with 1s, a suffix, 0-d, or one
        with a new leading dimension."""
        r = self.rng.random()
        if r < 0.35 or not shape:
            return shape
        if r < 0.6:
            return tuple(1 if self.rng.random() < 0.5 else d for d in shape)
        if r < 0.8:
            return shape[self.rng.randint(1, len(shape)):]
        if r < 0.9:
            return ()
        lead = self.rng.choice((2, 3))
        if math.prod(shape) * lead > MAX_ELEMENTS or len(shape) >= 4:
            return shape
        return (lead,) + shape

    def second(self, a: Tensor, lo: float, hi: float, exact: bool = False) -> Tensor:
        """The second operand of a binary op on ``a``: often a pool tensor (``a`` itself
        included: a node reading one tensor twice), otherwise a new input or constant."""
        if self.rng.random() < 0.4:
            other = self.pick(lambda t: t.dtype == a.dtype and lo <= t.lo and t.hi <= hi
                              and (t.exact or not exact) and _broadcasts(a.shape, t.shape)
                              and math.prod(broadcast(a.shape, t.shape)) <= MAX_ELEMENTS)
            if other is not None:
                return other
        # new operands stay small whatever the pool may hold: |values| <= 2 keeps chains exact
        return self.operand(a.dtype, self.partner_shape(a.shape), max(lo, -2.0), min(hi, 2.0))

    # ---- op classes -------------------------------------------------------------------------
    def op_unary(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS)
        if a is None:
            return False
        options = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf"]
        if a.hi <= 3:
            options.append("Exp")
        if a.lo >= 0:
            options.append("Sqrt")
        op = self.rng.choice(options)
        lo, hi = _unary_bounds(op, a.lo, a.hi)
        self.node(op, [a], a.dtype, a.shape, lo, hi, exact=a.exact and op in EXACT_UNARY)
        return True

    def op_gelu(self) -> bool:
        """x * 0.5 * (1 + Erf(x / sqrt 2)): the chain exporters write for Gelu."""
        a = self.pick(lambda t: t.dtype in FLOATS)
        if a is None:
            return False
        c = lambda v: Tensor(self.const(np.asarray(v, a.dtype)), a.dtype, ())  # noqa: E731
        scaled = self.node("Div", [a, c(math.sqrt(2.0))], a.dtype, a.shape, a.lo, a.hi)
        erf = self.node("Erf", [scaled], a.dtype, a.shape, -1.0, 1.0)
        one = self.node("Add", [erf, c(1.0)], a.dtype, a.shape, 0.0, 2.0)
        prod = self.node("Mul", [a, one], a.dtype, a.shape, -2 * a.mag, 2 * a.mag)
        self.node("Mul", [prod, c(0.5)], a.dtype, a.shape, -a.mag, a.mag)
        return True

    def op_binary(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS + ("int64",))
        if a is None:
            return False
        ops = ["Add", "Sub", "Mul", "Max", "Min"] + (["Div"] if a.dtype != "int64" else [])
        op = self.rng.choice(ops)
        if op == "Div":
            b = self.second(a, 0.25, 4.0)
        else:
            b = self.second(a, -BOUND, BOUND)
        lo, hi = _binary_bounds(op, a, b)
        if max(abs(lo), abs(hi)) > BOUND:
            return False
        shape = broadcast(a.shape, b.shape)
        exact = a.exact and b.exact and (op in ("Max", "Min") or a.dtype == "int64")
        operands = [a, b] if self.rng.random() < 0.7 else [b, a]
        if op in ("Sub", "Div"):
            operands = [a, b]
        self.node(op, operands, a.dtype, shape, lo, hi, exact=exact)
        return True

    def op_compare(self) -> bool:
        a = self.pick(lambda t: t.exact and t.dtype in FLOATS + ("int64",))
        if a is None:
            return False
        b = self.second(a, -BOUND, BOUND, exact=True)
        op = self.rng.choice(("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal"))
        self.node(op, [a, b], "bool", broadcast(a.shape, b.shape), 0, 1, exact=True)
        return True

    def op_where(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS)
        if a is None:
            return False
        cond = self.pick(lambda t: t.dtype == "bool" and _broadcasts(a.shape, t.shape))
        if cond is None or self.rng.random() < 0.3:
            cond = self.new_input("bool", self.partner_shape(a.shape))
        b = self.second(a, -BOUND, BOUND)
        if not _broadcasts(cond.shape, a.shape, b.shape):
            return False
        shape = broadcast(cond.shape, a.shape, b.shape)
        if math.prod(shape) > MAX_ELEMENTS:
            return False
        self.node("Where", [cond, a, b], a.dtype, shape, min(a.lo, b.lo), max(a.hi, b.hi),
                  exact=a.exact and b.exact)
        return True

    def op_logic(self) -> bool:
        a = self.pick(lambda t: t.dtype == "bool")
        if a is None:
            a = self.new_input("bool", self.base_shape())
        op = self.rng.choice(("And", "Or", "Not"))
        if op == "Not":
            self.node("Not", [a], "bool", a.shape, 0, 1, exact=True)
            return True
        b = self.second(a, 0, 1)
        self.node(op, [a, b], "bool", broadcast(a.shape, b.shape), 0, 1, exact=True)
        return True

    def op_cast(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS + ("bool",) or
                      (t.dtype == "int64" and t.mag <= BOUND))
        if a is None:
            return False
        to = {"float32": "float16", "float16": "float32"}.get(a.dtype)
        if to is None:
            to = self.rng.choice(FLOATS)
        self.node("Cast", [a], to, a.shape, a.lo, a.hi, exact=a.exact,
                  to=ONNX_TYPES[to])
        return True

    def op_reduce(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS and t.shape)
        if a is None:
            return False
        rank = len(a.shape)
        axes = sorted(self.rng.sample(range(rank), self.rng.randint(1, rank)))
        n = math.prod(a.shape[k] for k in axes)
        op = self.rng.choice(("ReduceSum", "ReduceMean", "ReduceMax"))
        lo, hi = (a.lo * n, a.hi * n) if op == "ReduceSum" else (a.lo, a.hi)
        if max(abs(lo), abs(hi)) > BOUND or (a.dtype == "float16" and op != "ReduceMax"
                                             and n > 16):
            return False
        keep = self.rng.randint(0, 1)
        shape = tuple(1 if k in axes else d for k, d in enumerate(a.shape) if keep or k not in axes)
        signed = [k - rank if self.rng.random() < 0.3 else k for k in axes]
        inputs, attrs = [a], {"keepdims": keep}
        if op == "ReduceSum" or self.opset >= 18:
            inputs.append(self.const(np.asarray(signed, np.int64), "axes"))
        else:
            attrs["axes"] = signed
        self.accumulates |= op != "ReduceMax" and n > 32
        self.node(op, inputs, a.dtype, shape, lo, hi, exact=a.exact and op == "ReduceMax",
                  **attrs)
        return True

    def op_softmax(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS and t.shape)
        if a is None:
            return False
        axis = self.rng.randint(-len(a.shape), len(a.shape) - 1)
        self.accumulates |= a.shape[axis] > 32
        self.node("Softmax", [a], a.dtype, a.shape, 0.0, 1.0, axis=axis)
        return True

    def op_layernorm(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS and t.shape)
        if a is None:
            return False
        rank = len(a.shape)
        axis = self.rng.randint(-rank, rank - 1)
        norm = a.shape[axis:]
        n = math.prod(norm)
        scale = self.values.uniform(0.5, 1.5, norm).astype(a.dtype)
        bias = self.values.uniform(-0.5, 0.5, norm).astype(a.dtype)
        bound = math.sqrt(n) * 1.5 + 0.5
        if bound > BOUND:
            return False
        self.accumulates |= n > 32
        stats = self.rng.random() < 0.15
        out = self.node("LayerNormalization", [a, self.const(scale, "gamma"),
                                               self.const(bias, "beta")],
                        a.dtype, a.shape, -bound, bound, outputs=3 if stats else 1,
                        axis=axis, epsilon=1e-5)
        if stats:
            stat_shape = a.shape[:axis % rank] + (1,) * len(norm)
            self.pool.append(Tensor(out.name + "_1", "float32", stat_shape, a.lo, a.hi, False))
            self.pool.append(Tensor(out.name + "_2", "float32", stat_shape, 0.0, 400.0, False))
        return True

    def op_matmul(self) -> bool:
        a = self.pick(lambda t: t.dtype in FLOATS and t.shape and t.mag <= 4)
        if a is None:
            return False
        n = self.rng.choice((1, 3, 8, 16, 33, 129))
        if self.rng.random() < 0.3 and len(a.shape) >= 2:
            # the pool tensor as the right operand [.., K, N]; a new left one [M, K]
            k = a.shape[-2]
            left = self.operand(a.dtype, (self.rng.choice((1, 5, 16)), k), -1.0, 1.0)
            shape = a.shape[:-2] + (left.shape[0], a.shape[-1])
            operands = [left, a]
        else:
            k = a.shape[-1]
            batch = a.shape[:-2] if len(a.shape) > 2 else ()
            if batch and self.rng.random() < 0.5:
                batch = tuple(1 if self.rng.random() < 0.5 else d for d in batch)
            elif self.rng.random() < 0.5:
                batch = ()
            right = self.operand(a.dtype, batch + (k, n), -1.0, 1.0)
            shape = broadcast(a.shape[:-2], batch) + a.shape[-2:-1] + (n,)
            operands = [a, right]
        bound = k * a.mag
        if bound > BOUND or math.prod(shape) > MAX_ELEMENTS or (a.dtype == "float16" and k > 32):
            return False
        self.accumulates |= k > 1
        self.node("MatMul", operands, a.dtype, shape, -bound, bound)
        return True

    def op_transpose(self) -> bool:
        a = self.pick(lambda t: len(t.shape) >= 2)
        if a is None:
            return False
        perm = list(range(len(a.shape)))
        while perm == sorted(perm):
            self.rng.shuffle(perm)
        self.node("Transpose", [a], a.dtype, tuple(a.shape[p] for p in perm), a.lo, a.hi,
                  exact=a.exact, perm=perm)
        return True

    def op_reshape(self) -> bool:
        a = self.pick(lambda t: t.size > 1)
        if a is None:
            return False
        shape = _factor(a.size, self.rng)
        spelled = list(shape)
        if len(spelled) > 1 and self.rng.random() < 0.4:
            spelled[self.rng.randrange(len(spelled))] = -1
        self.node("Reshape", [a, self.const(np.asarray(spelled, np.int64), "shape")], a.dtype,
                  shape, a.lo, a.hi, exact=a.exact)
        return True

    def op_slice(self) -> bool:
        a = self.pick(lambda t: t.shape and max(t.shape) > 1)
        if a is None:
            return False
        rank = len(a.shape)
        axes = self.rng.sample(range(rank), self.rng.randint(1, rank))
        starts, ends, steps, shape = [], [], [], list(a.shape)
        for axis in axes:
            dim = a.shape[axis]
            step = self.rng.choice((1, 1, 2, 3, -1, -2))
            start = self.rng.randint(-dim, dim - 1)
            end = self.rng.choice((self.rng.randint(-dim, dim), 2 ** 62 * (1 if step > 0 else -1)))
            extent = len(range(dim)[slice(start, end, step)])
            if extent == 0:
                start, end = (0, dim) if step > 0 else (dim - 1, -dim - 1)
                extent = len(range(dim)[slice(start, end, step)])
            starts.append(start)
            ends.append(end)
            steps.append(step)
            shape[axis] = extent
        signed = [k - rank if self.rng.random() < 0.3 else k for k in axes]
        ints = lambda v, s: self.const(np.asarray(v, np.int64), s)  # noqa: E731
        self.node("Slice", [a, ints(starts, "starts"), ints(ends, "ends"), ints(signed, "axes"),
                            ints(steps, "steps")], a.dtype, shape, a.lo, a.hi, exact=a.exact)
        return True

    def op_concat(self) -> bool:
        a = self.pick(lambda t: t.shape and t.dtype != "bool")
        if a is None:
            return False
        axis = self.rng.randrange(len(a.shape))
        parts = [a]
        for _ in range(self.rng.randint(1, 2)):
            if self.rng.random() < 0.4:
                parts.append(a)       # Concat(x, x): one tensor read twice
            else:
                shape = list(a.shape)
                shape[axis] = self.rng.choice((1, 2, 7))
                parts.append(self.operand(a.dtype, shape, a.lo, a.hi) if a.dtype != "int64"
                             else self.new_input("int64", shape, a.lo, a.hi))
        shape = list(a.shape)
        shape[axis] = sum(p.shape[axis] for p in parts)
        if math.prod(shape) > MAX_ELEMENTS:
            return False
        self.node("Concat", parts, a.dtype, shape, min(p.lo for p in parts),
                  max(p.hi for p in parts), exact=all(p.exact for p in parts),
                  axis=axis - len(shape) if self.rng.random() < 0.3 else axis)
        return True

    def op_expand(self) -> bool:
        a = self.pick(lambda t: t.size <= 4096)
        if a is None:
            return False
        target = [self.rng.choice((2, 3, 5)) if d == 1 and self.rng.random() < 0.7 else
                  (1 if self.rng.random() < 0.2 else d) for d in a.shape]
        if len(target) < 4 and self.rng.random() < 0.4:
            target = [self.rng.choice((2, 3))] + target
        shape = broadcast(a.shape, target)
        if math.prod(shape) > MAX_ELEMENTS:
            return False
        self.node("Expand", [a, self.const(np.asarray(target, np.int64), "shape")], a.dtype,
                  shape, a.lo, a.hi, exact=a.exact)
        return True

    def op_gather(self) -> bool:
        a = self.pick(lambda t: t.shape)
        if a is None:
            return False
        axis = self.rng.randrange(len(a.shape))
        dim = a.shape[axis]
        ind_shape = self.rng.choice(((), (3,), (2, 2), (1,), (5,)))
        if self.rng.random() < 0.25:
            indices = self.new_input("int64", ind_shape, -dim, dim - 1)
            self.pool.remove(indices)      # indices are not data for later ops
        else:
            indices = self.const(self.values.integers(-dim, dim, ind_shape, dtype=np.int64),
                                 "idx")
        shape = a.shape[:axis] + tuple(ind_shape) + a.shape[axis + 1:]
        if math.prod(shape) > MAX_ELEMENTS or len(shape) > 5:
            return False
        self.node("Gather", [a, indices], a.dtype, shape, a.lo, a.hi, exact=a.exact,
                  axis=axis - len(a.shape) if self.rng.random() < 0.3 else axis)
        return True

    # ---- the graph --------------------------------------------------------------------------
    def base_shape(self) -> tuple:
        """A start shape: mostly small odd ones, sometimes 0-d, rarely a row past the UB."""
        r = self.rng.random()
        if r < 0.05:
            return ()
        if r < 0.08:
            return (self.rng.choice((1, 2)), LONG_ROW)
        rank = self.rng.randint(1, 4)
        while True:
            shape = tuple(self.rng.choice(DIMS) for _ in range(rank))
            if math.prod(shape) <= 20_000:
                return shape


OPS = {  # op class -> weight
    "unary": 4, "binary": 5, "gelu": 1, "compare": 2, "where": 2, "logic": 1, "cast": 2,
    "reduce": 3, "softmax": 2, "layernorm": 2, "matmul": 3, "transpose": 2, "reshape": 2,
    "slice": 2, "concat": 2, "expand": 1, "gather": 2,
}
EXACT_UNARY = ("Relu", "Abs", "Neg")


def generate(seed: int, index: int) -> Case:
    """The case ``(seed, index)``: a checked ONNX model of 2-8 ops and its feeds."""
    b = Builder(seed, index)
    dtype = "float16" if b.rng.random() < 0.2 else "float32"
    first = b.base_shape()
    if dtype == "float16" and first and first[-1] == LONG_ROW:
        first = (3, 129)
    positive = b.rng.random() < 0.3
    b.new_input(dtype, first, 0.1 if positive else -2.0, 2.0)
    if b.rng.random() < 0.1:
        b.new_input("int64", first, -5, 5)
    target = b.rng.randint(2, 8)
    names, weights = list(OPS), list(OPS.values())
    tries = 0
    while len(b.nodes) < target and tries < 200:
        tries += 1
        before = (len(b.nodes), len(b.inputs), len(b.inits), dict(b.feeds), list(b.pool))
        op = b.rng.choices(names, weights)[0]
        if op == "gelu" and len(b.nodes) + 5 > 8:     # the chain is 5 nodes
            continue
        if not getattr(b, "op_" + op)():
            # an op that found nothing to act on leaves no new inputs behind
            n_nodes, n_inputs, n_inits, feeds, pool = before
            del b.nodes[n_nodes:], b.inputs[n_inputs:], b.inits[n_inits:]
            b.feeds, b.pool = feeds, pool
            b.graph_inputs = set(b.feeds)
    if not b.nodes:
        b.op_unary()
    return _finish(b, seed, index)


def _finish(b: Builder, seed: int, index: int) -> Case:
    produced = [t for t in b.pool if t.name not in b.graph_inputs]
    used_inputs = {name for node in b.nodes for name in node.input}
    outputs = [t for t in produced if t.consumers == 0 or b.rng.random() < 0.15]
    if not outputs:
        outputs = [produced[-1]]
    # an input no node reads would be a graph input the compiler may drop; keep none of them
    keep = [i for i in b.inputs if i.name in used_inputs]
    feeds = {k: v for k, v in b.feeds.items() if k in used_inputs}
    graph = helper.make_graph(
        b.nodes, f"fuzz_{seed}_{index}", keep,
        [helper.make_tensor_value_info(t.name, ONNX_TYPES[t.dtype], t.shape) for t in outputs],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)],
                              producer_name="tvm-ascend-fuzz")
    model.ir_version = 8 if b.opset == 17 else 9
    onnx.checker.check_model(model, full_check=True)
    half = any(t.dtype == "float16" for t in b.pool)
    return Case(seed, index, model, feeds, [n.op_type for n in b.nodes], b.accumulates, half)


def _broadcasts(*shapes) -> bool:
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        return False
    return True


def _unary_bounds(op: str, lo: float, hi: float) -> tuple:
    if op == "Relu":
        return max(lo, 0.0), max(hi, 0.0)
    if op == "Abs":
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    if op == "Neg":
        return -hi, -lo
    if op == "Exp":
        return math.exp(lo), math.exp(hi)
    if op == "Sqrt":
        return math.sqrt(lo), math.sqrt(hi)
    if op == "Sigmoid":
        return 1 / (1 + math.exp(-lo)), 1 / (1 + math.exp(-hi))
    if op == "Tanh":
        return math.tanh(lo), math.tanh(hi)
    return math.erf(lo), math.erf(hi)


def _binary_bounds(op: str, a: Tensor, b: Tensor) -> tuple:
    if op == "Add":
        return a.lo + b.lo, a.hi + b.hi
    if op == "Sub":
        return a.lo - b.hi, a.hi - b.lo
    if op == "Max":
        return max(a.lo, b.lo), max(a.hi, b.hi)
    if op == "Min":
        return min(a.lo, b.lo), min(a.hi, b.hi)
    if op == "Div":
        corners = [x / y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    else:
        corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return min(corners), max(corners)


def _factor(total: int, rng: random.Random) -> tuple:
    """A random shape of ``total`` elements (rank 1-4)."""
    primes, n, p = [], total, 2
    while p * p <= n:
        while n % p == 0:
            primes.append(p)
            n //= p
        p += 1
    if n > 1:
        primes.append(n)
    rank = rng.randint(1, 4)
    dims = [1] * rank
    for q in primes:
        dims[rng.randrange(rank)] *= q
    return tuple(dims)


def helper_code(case: Case) -> str:
    """The case as a few lines of onnx.helper (initializers as random arrays of their shape), to
    paste into a bug report or a regression test."""
    g = case.model.graph
    vi = lambda v: (f"helper.make_tensor_value_info({v.name!r}, TensorProto."  # noqa: E731
                    f"{TensorProto.DataType.Name(v.type.tensor_type.elem_type)}, "
                    f"{[d.dim_value for d in v.type.tensor_type.shape.dim]})")
    lines = [f"# case {case.case_id}, opset {case.model.opset_import[0].version}"]
    for init in g.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.int64 and array.size <= 8:
            value = f"np.array({array.tolist()}, np.int64)"
        elif array.dtype == np.bool_:
            value = f"np.random.rand(*{list(array.shape)}) < 0.5"
        else:
            value = f"np.random.rand(*{list(array.shape)}).astype({str(array.dtype)!r})"
        lines.append(f"{init.name} = numpy_helper.from_array({value}, {init.name!r})")
    for node in g.node:
        attrs = "".join(f", {a.name}={helper.get_attribute_value(a)!r}" for a in node.attribute)
        lines.append(f"helper.make_node({node.op_type!r}, {list(node.input)}, "
                     f"{list(node.output)}{attrs})")
    lines.append("inputs = [" + ", ".join(vi(v) for v in g.input) + "]")
    lines.append("outputs = [" + ", ".join(vi(v) for v in g.output) + "]")
    return "\n".join(lines)
