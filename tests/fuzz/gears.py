"""Fuzz cases with a dynamic dimension, built as ATC's gears (``--dynamic_dims``, ND).

``geared(case)`` draws, from the case's own seed, whether the case gets a dynamic dimension:
one axis (counted from the end, as broadcasting aligns them) of every graph input whose size
there is the first input's, written as the symbol ``N`` in the model, with three gears (the
case's own size and two others). An axis is kept only where onnxruntime runs the symbolic
model at every gear (a Reshape, Expand, Slice or initializer may fix it); the axes are tried
in a drawn order, and a case with none stays static.

Each gear's feeds are entries of the case's own feeds, drawn again along the axis: every value
keeps the interval ``generate`` proved safe for it. ``run_geared`` builds one library with all
the gears and compares each gear with onnxruntime, so a gear-only bug (kernels kept once,
renamed host functions, the gear picked at run time) fails as a case, reproducible from
``(seed, index, level, soc)``.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import numpy as np
import onnx

from .generate import MAX_ELEMENTS, Case, generate

DYNAMIC_SHARE = 0.45       # of the cases, drawn dynamic (kept where some axis may vary)
GEAR_VALUES = (1, 2, 3, 5, 8, 13)
SYMBOL = "N"


@dataclass
class GearedCase:
    """A case with dimension 0 of ``inputs`` symbolic, and the feeds of each gear."""

    case: Case
    model: onnx.ModelProto      # the case's model with dimension 0 written as N
    inputs: tuple               # names of the inputs whose dimension ``axis`` is N
    axis: int                   # counted from the end
    gears: tuple                # the values of N, the case's own first
    feeds: tuple                # one feeds dict per gear

    def input_shape(self) -> dict:
        """CompileConfig.input_shape: -1 where N is (ATC's spelling), other inputs static."""
        shapes = {}
        for v in self.model.graph.input:
            shape = list(self.case.feeds[v.name].shape)
            if v.name in self.inputs:
                shape[self.axis] = -1
            shapes[v.name] = tuple(shape)
        return shapes

    def dynamic_dims(self) -> str:
        """--dynamic_dims: one value per -1 (every dynamic input has N), gears sorted."""
        return ";".join(",".join([str(g)] * len(self.inputs)) for g in sorted(self.gears))


def geared(case: Case) -> GearedCase | None:
    """The dynamic version of ``case``, or None where it is drawn static or has no dimension
    that may vary (onnxruntime refuses the symbolic model at some gear, for every axis)."""
    rng = random.Random(f"tvm-ascend-fuzz-gears:{case.seed}:{case.index}")
    if rng.random() >= DYNAMIC_SHARE:
        return None
    graph = case.model.graph
    first = case.feeds[graph.input[0].name]
    axes = list(range(-first.ndim, 0))  # counted from the end, as broadcasting aligns them
    rng.shuffle(axes)
    for axis in axes:
        found = _on_axis(case, axis, rng)
        if found is not None:
            return found
    return None


def _on_axis(case: Case, axis: int, rng) -> GearedCase | None:
    """``case`` with ``axis`` (from the end) of the inputs of the first input's size there
    made N, or None where onnxruntime refuses it at some gear."""
    graph = case.model.graph
    own = int(case.feeds[graph.input[0].name].shape[axis])
    inputs = tuple(v.name for v in graph.input if case.feeds[v.name].ndim >= -axis
                   and case.feeds[v.name].shape[axis] == own)
    per_unit = max(case.feeds[n].size // own for n in inputs)
    others = [g for g in GEAR_VALUES if g != own and g * per_unit <= MAX_ELEMENTS]
    if len(others) < 2:
        return None
    gears = (own, *rng.sample(others, 2))
    model = _symbolic(case, inputs, axis)
    feeds = tuple(_feeds(case, inputs, axis, g, np.random.default_rng([case.seed, case.index,
                                                                       g])) for g in gears)
    found = GearedCase(case, model, inputs, axis, gears, feeds)
    try:
        for f in feeds:
            reference(found, f)
    except Exception:  # noqa: BLE001 - onnxruntime refuses: this axis is fixed by the graph
        return None
    return found


def _symbolic(case: Case, inputs: tuple, axis: int) -> onnx.ModelProto:
    """The case's model with ``axis`` of ``inputs`` as N; the outputs' dimensions unknown
    (which of them follow N is the compiler's to infer)."""
    out = onnx.ModelProto()
    out.CopyFrom(case.model)
    for value in out.graph.input:
        if value.name in inputs:
            value.type.tensor_type.shape.dim[axis].dim_param = SYMBOL
    for value in out.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            dim.Clear()
    return out


def _feeds(case: Case, inputs: tuple, axis: int, gear: int, rng) -> dict:
    """The case's feeds with ``gear`` entries along ``axis`` of ``inputs``, each an entry of
    the case's own feed (so every value stays in its proven interval)."""
    own = case.feeds[inputs[0]].shape[axis]
    if gear == own:
        return dict(case.feeds)
    picks = rng.integers(0, own, size=gear)
    return {name: (np.ascontiguousarray(np.take(value, picks, axis=axis)) if name in inputs
                   else value) for name, value in case.feeds.items()}


def reference(g: GearedCase, feeds: dict) -> list:
    """onnxruntime's outputs of the symbolic model at one gear's feeds."""
    import onnxruntime as ort

    session = ort.InferenceSession(g.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def gear_cases(seed: int, indices) -> list[int]:
    """The indices among ``indices`` whose case is dynamic."""
    return [index for index in indices if geared(generate(seed, index)) is not None]


def run_geared(seed: int, index: int, level: str, soc: str):
    """Build case ``(seed, index)`` as gears at (level, soc), run every gear, compare each with
    onnxruntime: one ``run.Outcome`` (its detail names the gear that failed)."""
    from .run import Outcome, _failed, compare, compile_config

    case = generate(seed, index)
    start = time.time()
    outcome = Outcome(seed, index, level, soc, "ok", size=case.size, ops=case.ops)
    g = geared(case)
    if g is None:
        return _failed(outcome, "discarded", ValueError("case is not dynamic"), start)
    import tvm_ascend
    from tvm_ascend.errors import ToolchainError

    config = compile_config(level, soc).replace(input_shape=g.input_shape(), input_format="ND",
                                                dynamic_dims=g.dynamic_dims())
    try:
        lib = tvm_ascend.build(g.model, target="ascend", config=config)
    except Exception as err:  # noqa: BLE001 - classifying every failure is the point
        return _failed(outcome, "build", err, start)
    for gear, feeds in zip(g.gears, g.feeds):
        try:
            outs = lib.run(feeds)
        except ToolchainError as err:
            return _failed(outcome, "compile", err, start)
        except Exception as err:  # noqa: BLE001
            return _failed(outcome, "run", RuntimeError(f"gear N={gear}: {err}"), start)
        problems = compare(case, outs, reference(g, feeds))
        if problems:
            outcome.kind = "mismatch"
            outcome.detail = f"gear N={gear}:\n{problems}"
            outcome.cause = "mismatch: " + problems.splitlines()[0].split(": ", 1)[-1][:80]
            break
    outcome.seconds = time.time() - start
    return outcome
