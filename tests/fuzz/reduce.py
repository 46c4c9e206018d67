"""Shrinking a failing case: drop nodes while the failure keeps its cause.

A node whose result another kept node reads is replaced by a graph input of the same type and
shape (values in [0.5, 1.5]: safe for Sqrt, Div and Log; int64 zeros: valid indices), so each
step is a valid graph; one greedy pass after another until no node can go.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, shape_inference

from .generate import Case
from .run import run_built


def _types(model: onnx.ModelProto) -> dict:
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    return {v.name: v for v in list(g.input) + list(g.value_info) + list(g.output)}


def subgraph(case: Case, keep: list[int]) -> Case | None:
    """The case with only nodes ``keep`` (indices into the graph's nodes)."""
    g = case.model.graph
    types = _types(case.model)
    nodes = [g.node[k] for k in keep]
    produced = {o for n in nodes for o in n.output}
    consumed = {i for n in nodes for i in n.input if i}
    inits = [t for t in g.initializer if t.name in consumed]
    init_names = {t.name for t in inits}
    feeds, inputs = {}, []
    rng = np.random.default_rng(0)
    for name in sorted(consumed - produced - init_names,
                       key=lambda n: [i for n2 in nodes for i in n2.input].index(n)):
        if name in case.feeds:
            feeds[name] = case.feeds[name]
            inputs.append(next(v for v in g.input if v.name == name))
            continue
        info = types[name]
        elem = info.type.tensor_type.elem_type
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        if dtype == np.bool_:
            value = rng.random(shape) < 0.5
        elif dtype.kind == "i":
            value = np.zeros(shape, dtype)
        else:
            value = rng.uniform(0.5, 1.5, shape).astype(dtype)
        feeds[name] = value
        inputs.append(helper.make_tensor_value_info(name, elem, shape))
    used = consumed
    outputs = [types[o] for n in nodes for o in n.output
               if o and (o not in used or o in {v.name for v in g.output})]
    if not outputs:
        return None
    graph = helper.make_graph(nodes, g.name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=list(case.model.opset_import),
                              producer_name="tvm-ascend-fuzz")
    model.ir_version = case.model.ir_version
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:  # noqa: BLE001 - a removal that breaks the graph is just not taken
        return None
    return Case(case.seed, case.index, model, feeds, [n.op_type for n in nodes],
                case.accumulates, case.half)


def shrink(case: Case, level: str, soc: str, cause: str, log=None) -> Case:
    """The smallest subgraph found whose run at (level, soc) still fails with ``cause``."""
    keep = list(range(len(case.model.graph.node)))
    best = case
    changed = True
    while changed and len(keep) > 1:
        changed = False
        for k in list(keep):
            trial_keep = [j for j in keep if j != k]
            trial = subgraph(case, trial_keep)
            if trial is None:
                continue
            outcome = run_built(trial, level, soc)
            if log is not None:
                log(f"  without node {k} ({case.model.graph.node[k].op_type}): "
                    f"{outcome.kind} {outcome.cause}")
            if outcome.cause == cause:
                keep, best, changed = trial_keep, trial, True
    return best
