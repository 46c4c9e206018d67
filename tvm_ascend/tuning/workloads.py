"""Generated workloads for training and evaluating the cost model (nothing downloaded).

Each workload is one group PrimFunc of an op class the templates take: elementwise chains,
last-axis row reductions (softmax, normalisations) and matmuls with epilogues, with random
shapes, dtypes and ops drawn from a seeded generator. ``dataset`` turns workloads into
(features, times) groups with a runner's labels. The planner's model ranks the tiling variants
of the matmul and conv2d templates: ``planner_dataset`` turns workloads of those two classes
(``PLANNER_OP_CLASSES``, convolutions with epilogues included) into (plan features, times)
groups over each one's variants and knob space, labelled by the timing model.

Example
-------
>>> items = generate_workloads(4, seed=0)
>>> sorted({w.op_class for w in items}) <= ["elementwise", "matmul", "row_reduce"]
True
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import te, topi

from ..cost_model.features import extract_features, plan_feature_matrix
from ..cost_model.timing import estimate_kernel
from ..errors import TilingError
from ..schedules import template_by_name
from .runner import LocalRunner
from .search import planned_candidates

OP_CLASSES = ("elementwise", "row_reduce", "matmul")
PLANNER_OP_CLASSES = ("matmul", "conv2d")  # the templates with tiling variants
_UNARY = ("exp", "tanh", "sigmoid", "sqrt_abs", "relu", "neg", "log_abs")
_BINARY = ("add", "mul", "sub", "max")


@dataclass(frozen=True)
class Workload:
    """One generated group: its name, op class (template) and PrimFunc."""

    name: str
    op_class: str
    prim_func: object


def _unary(kind: str, v, dtype: str):
    if kind == "exp":
        return te.exp(v)
    if kind == "tanh":
        return te.tanh(v)
    if kind == "sigmoid":
        return te.sigmoid(v)
    if kind == "sqrt_abs":
        return te.sqrt(te.abs(v) + te.const(1, dtype))
    if kind == "log_abs":
        return te.log(te.abs(v) + te.const(1, dtype))
    if kind == "relu":
        return te.max(v, te.const(0, dtype))
    return -v


def _binary(kind: str, a, b):
    return {"add": a + b, "mul": a * b, "sub": a - b, "max": te.max(a, b)}[kind]


def _elementwise(rng, index: int) -> Workload:
    dtype = str(rng.choice(["float16", "float32"]))
    n = int(rng.choice([1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 3 << 20, 1 << 22]))
    n += int(rng.integers(0, 1000)) * int(rng.integers(0, 2))
    inputs = [te.placeholder((n,), dtype, f"x{i}") for i in range(int(rng.integers(1, 4)))]
    steps = [(str(rng.choice(_UNARY)), str(rng.choice(_BINARY)), int(rng.integers(0, 3)))
             for _ in range(int(rng.integers(1, 6)))]

    def body(i):
        v = inputs[0][i]
        for unary, binary, which in steps:
            v = _binary(binary, _unary(unary, v, dtype), inputs[which % len(inputs)][i])
        return v

    out = te.compute((n,), body, name="y")
    return Workload(f"ew{index}_{dtype}_{n}", "elementwise",
                    te.create_prim_func([*inputs, out]))


def _row_reduce(rng, index: int) -> Workload:
    dtype = str(rng.choice(["float16", "float32"]))
    rows = int(rng.choice([8, 64, 100, 512, 1000, 4096, 16384]))
    cols = int(rng.choice([32, 100, 128, 256, 768, 1024, 2048]))
    x = te.placeholder((rows, cols), dtype, "x")
    kind = str(rng.choice(["softmax", "sum", "rmsnorm"]))
    if kind == "softmax":
        out = topi.nn.softmax(x, axis=-1)
    elif kind == "sum":
        out = topi.sum(x, axis=-1, keepdims=True)
    else:
        sq = topi.sum(topi.multiply(x, x), axis=-1, keepdims=True)
        scale = te.const(1.0 / cols, dtype)
        out = topi.divide(x, topi.sqrt(topi.add(topi.multiply(sq, scale),
                                                te.const(1e-5, dtype))))
    return Workload(f"row{index}_{kind}_{dtype}_{rows}x{cols}", "row_reduce",
                    te.create_prim_func([x, out]))


def _matmul(rng, index: int) -> Workload:
    dtype = str(rng.choice(["float16", "float32"]))
    m, n, k = (int(rng.choice([16, 64, 100, 128, 256, 512, 1024, 2048])) for _ in range(3))
    a = te.placeholder((m, k), dtype, "a")
    b = te.placeholder((k, n), dtype, "b")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    tensors = [a, b]
    if rng.integers(0, 2):
        bias = te.placeholder((n,), dtype, "bias")
        tensors.append(bias)
        c = te.compute((m, n), lambda i, j: te.max(c[i, j] + bias[j], te.const(0, dtype)),
                       name="epilogue")
    return Workload(f"mm{index}_{dtype}_{m}x{n}x{k}", "matmul",
                    te.create_prim_func([*tensors, c]))


def _conv2d(rng, index: int) -> Workload:
    """A ResNet-like convolution (NCHW), with a bias + ReLU (+ residual) epilogue or none."""
    dtype = str(rng.choice(["float16", "float32"]))
    kernel = int(rng.choice([1, 1, 3, 3, 7]))
    stride = int(rng.choice([1, 1, 2]))
    cin = int(rng.choice([3, 16, 32, 64, 128, 256, 512])) if kernel == 7 else \
        int(rng.choice([16, 32, 64, 128, 256, 512, 1024]))
    cout = int(rng.choice([16, 32, 64, 128, 256, 512, 1024, 2048]))
    size = int(rng.choice([7, 14, 28, 56, 112]))
    batch = int(rng.choice([1, 1, 2, 4]))
    x = te.placeholder((batch, cin, size, size), dtype, "x")
    w = te.placeholder((cout, cin, kernel, kernel), dtype, "w")
    out = topi.nn.conv2d_nchw(x, w, (stride, stride), (kernel // 2,) * 2, (1, 1),
                              out_dtype=dtype)
    tensors = [x, w]
    epilogue = int(rng.integers(0, 3))
    if epilogue:
        bias = te.placeholder((cout, 1, 1), dtype, "bias")
        tensors.append(bias)
        out = topi.add(out, bias)
        if epilogue == 2:
            residual = te.placeholder(tuple(int(d) for d in out.shape), dtype, "residual")
            tensors.append(residual)
            out = topi.add(out, residual)
        out = topi.nn.relu(out)
    return Workload(f"conv{index}_{dtype}_{batch}x{cin}x{size}_{cout}k{kernel}s{stride}",
                    "conv2d", te.create_prim_func([*tensors, out]))


_MAKERS = {"elementwise": _elementwise, "row_reduce": _row_reduce, "matmul": _matmul,
           "conv2d": _conv2d}


def generate_workloads(count: int, seed: int = 0, op_classes=OP_CLASSES) -> list[Workload]:
    """``count`` workloads, op classes in turn, deterministic for ``seed``; ones no template
    takes are drawn again."""
    rng = np.random.default_rng(seed)
    found: list[Workload] = []
    attempts = 0
    while len(found) < count and attempts < 20 * count:
        op_class = op_classes[len(found) % len(op_classes)]
        attempts += 1
        workload = _MAKERS[op_class](rng, len(found))
        if template_by_name(op_class).applies(workload.prim_func):
            found.append(workload)
    return found


def dataset(workloads, socs, runner=None) -> list[dict]:
    """Per (workload, SoC): candidates' features and runner times.

    Returns dicts ``{"workload", "op_class", "soc", "features" [n, d], "times" [n],
    "knobs" [n]}``; the default candidate is row 0.
    """
    runner = runner or LocalRunner()
    groups = []
    for workload in workloads:
        template = template_by_name(workload.op_class)
        for soc in socs:
            try:
                cands, tilings = planned_candidates(workload.name, template,
                                                    workload.prim_func, soc)
            except TilingError:
                continue
            results = runner.measure(cands)
            keep = [i for i, r in enumerate(results) if r.ok]
            if len(keep) < 2:
                continue
            feats = np.stack([extract_features(cands[i].prim_func, tilings[i], soc)
                              for i in keep])
            groups.append({"workload": workload.name, "op_class": workload.op_class,
                           "soc": soc.name, "features": feats,
                           "times": np.asarray([results[i].time_us for i in keep]),
                           "knobs": [cands[i].knobs for i in keep]})
    return groups


def planner_candidates(template, prim_func, soc, knob_space: bool = True) -> tuple[list, list]:
    """(knobs, tilings) of the tilings that plan among ``template``'s variants (the planner's
    candidates, the defaults first) and, with ``knob_space``, its knob space, each distinct
    tiling once (the first knobs that plan to it); raises TilingError when the template does
    not take ``prim_func`` at all."""
    analysis = template.analyse(prim_func)
    knobs_seen, tilings = [], []
    space = template.knob_space(prim_func, soc) if knob_space else []
    for knobs in [*template.variants(prim_func, soc), *space]:
        if knobs in knobs_seen:
            continue
        try:
            tiling = template.plan(analysis, soc, knobs)
        except TilingError:
            continue
        if tiling in tilings:
            continue
        knobs_seen.append(knobs)
        tilings.append(tiling)
    return knobs_seen, tilings


def planner_group(workload: str, op_class: str, prim, tilings, soc, knobs=None) -> dict:
    """One training group of the planner's model: the candidates' ``plan_feature_matrix``
    and their timing-model times (``dataset``'s dict layout)."""
    return {"workload": workload, "op_class": op_class, "soc": soc.name,
            "features": plan_feature_matrix(prim, tilings, soc),
            "times": np.asarray([estimate_kernel(prim, t, soc).time_us for t in tilings]),
            "knobs": knobs}


def planner_dataset(workloads, socs, knob_space: bool = True) -> list[dict]:
    """Per (workload, SoC): the plan features (``PLAN_FEATURE_NAMES``) and timing-model times
    of ``planner_candidates`` (the variants the planner ranks, and with ``knob_space`` the
    template's knob space too); the defaults are row 0. Same dict layout as ``dataset``."""
    groups = []
    for workload in workloads:
        template = template_by_name(workload.op_class)
        for soc in socs:
            try:
                knobs, tilings = planner_candidates(template, workload.prim_func, soc,
                                                    knob_space)
            except TilingError:
                continue
            if len(tilings) < 2:
                continue
            groups.append(planner_group(workload.name, workload.op_class,
                                        workload.prim_func, tilings, soc, knobs))
    return groups
