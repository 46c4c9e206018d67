"""The elementwise template: scheduled TIR is itself correct (llvm) and its tiling is valid."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import pytest
import tvm
from hypothesis import given, settings, strategies as st

import tvm_ascend
from tvm_ascend import ir_attrs
from tvm_ascend.schedules import ElementwiseKnobs, ElementwiseSchedule, select_template
from tvm_ascend.schedules.tiling import TemplatePlan
from tvm_ascend.soc import get_soc, soc_profiles
from onnx_models import ModelBuilder, add_chain


def _fused_prim_func(shape, steps, dtype="float32"):
    builder = ModelBuilder(dtype, seed=11)
    add_chain(builder, 0, shape, steps)
    result = tvm_ascend.partition_for_ascend(builder.model())
    (func,) = [f for _, f in result.mod.functions.items()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    return builder, func.attrs[ir_attrs.PRIM_FUNC]


def _run_llvm(prim_func, args):
    lib = tvm.compile(prim_func.with_attr("global_symbol", "main"), target="llvm")
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


@pytest.mark.parametrize("shape", [(5,), (3, 7, 11), (4, 300, 129)])
def test_scheduled_tir_on_llvm_equals_unscheduled(shape):
    builder, func = _fused_prim_func(shape, ["add_bias", "relu", "mul_scalar", "sub_input",
                                             "tanh", "add_rowcol"])
    scheduled, tiling = ElementwiseSchedule.schedule(func, get_soc("Ascend910B1"))
    args = []
    for param in func.params:
        args.append(np.random.default_rng(0).uniform(-1, 1, [int(d) for d in param.shape])
                    .astype(str(param.dtype)))
    args[-1] = np.zeros_like(args[-1])
    np.testing.assert_allclose(_run_llvm(scheduled, list(args)), _run_llvm(func, list(args)),
                               rtol=1e-6)
    assert tiling.cores * tiling.block_len >= tiling.total


@settings(max_examples=40, deadline=None)
@given(total=st.integers(1, 3_000_000), soc_name=st.sampled_from(sorted(soc_profiles())),
       double_buffer=st.booleans())
def test_tiling_invariants(total, soc_name, double_buffer):
    from tvm import te

    soc = get_soc(soc_name)
    x = te.placeholder((total,), "float16", "x")
    y = te.compute((total,), lambda i: te.exp(x[i]) * x[i] + x[i], name="y")
    func = te.create_prim_func([x, y])
    _, tiling = ElementwiseSchedule.schedule(func, soc, ElementwiseKnobs(
        double_buffer=double_buffer))
    assert tiling.cores <= soc.vector_blocks
    assert tiling.tile_len * 2 % 32 == 0, "tiles are whole 32-byte blocks"
    assert tiling.ub_bytes <= soc.ub_bytes - 8192 - 256
    assert (tiling.cores - 1) * tiling.block_len < total <= tiling.cores * tiling.block_len
    assert tiling.gm_read_bytes == 2 * total and tiling.gm_write_bytes == 2 * total


def test_knobs_are_validated():
    from tvm import te

    x = te.placeholder((1000,), "float32", "x")
    func = te.create_prim_func([x, te.compute((1000,), lambda i: x[i] + 1, name="y")])
    with pytest.raises(tvm_ascend.TilingError, match="multiple of 8"):
        ElementwiseSchedule.schedule(func, get_soc("Ascend910B1"), ElementwiseKnobs(tile_len=12))
    _, tiling = ElementwiseSchedule.schedule(func, get_soc("Ascend910B1"),
                                             ElementwiseKnobs(cores=2, tile_len=64))
    assert (tiling.cores, tiling.tile_len, tiling.tiles_per_core) == (2, 64, 8)


def test_unsupported_reductions_are_refused_with_a_reason():
    """A sum over two axes that are not adjacent (0 and 2) is neither rows (last axis) nor
    one contiguous block of reduced rows (axis_reduce): no template takes it, and each says
    why."""
    from tvm import te

    x = te.placeholder((8, 16, 6), "float32", "x")
    k, m = te.reduce_axis((0, 8), "k"), te.reduce_axis((0, 6), "m")
    func = te.create_prim_func([x, te.compute((16,), lambda j: te.sum(x[k, j, m], axis=[k, m]))])
    template, decision = select_template(func, get_soc("Ascend910B1"))
    assert template is None and "row_reduce" in decision.reason
    assert "axis_reduce" in decision.reason


def test_a_sum_over_the_first_axis_is_an_axis_reduce():
    from tvm import te

    x = te.placeholder((8, 16), "float32", "x")
    k = te.reduce_axis((0, 8), "k")
    func = te.create_prim_func([x, te.compute((16,), lambda j: te.sum(x[k, j], axis=k))])
    template, decision = select_template(func, get_soc("Ascend910B1"))
    assert template is not None and template.name == "axis_reduce", decision.reason


def test_row_reduce_schedule_on_llvm_equals_unscheduled():
    from tvm import te
    from tvm_ascend.schedules import RowReduceSchedule

    x = te.placeholder((37, 70), "float32", "x")
    k = te.reduce_axis((0, 70), "k")
    m = te.compute((37,), lambda i: te.max(x[i, k], axis=k), name="m")
    e = te.compute((37, 70), lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    k2 = te.reduce_axis((0, 70), "k2")
    s = te.compute((37,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    y = te.compute((37, 70), lambda i, j: e[i, j] / s[i], name="y")
    func = te.create_prim_func([x, y])
    scheduled, tiling = RowReduceSchedule.schedule(func, get_soc("Ascend310P3"))
    assert (tiling.total, tiling.cols, tiling.cores) == (37, 70, 8)
    arg = np.random.default_rng(1).standard_normal((37, 70)).astype("float32")
    np.testing.assert_allclose(_run_llvm(scheduled, [arg, np.zeros_like(arg)]),
                               _run_llvm(func, [arg, np.zeros_like(arg)]), rtol=1e-6)


def test_a_schedule_primitive_refusing_is_a_refusal_not_a_crash(monkeypatch):
    """A template whose TVM schedule primitive raises (a ScheduleError on an unexpected block)
    refuses the group with the reason; another template or the host takes it."""
    from tvm_ascend.schedules import plan_template

    _, func = _fused_prim_func((4, 33), ["add_bias", "relu"])
    soc = get_soc("Ascend910B1")

    def broken(func):  # the schedule steps a template's analysis makes (inlines, layouts)
        raise RuntimeError("ScheduleError: transform_block_layout failed")

    for template in ("ElementwiseSchedule", "RowReduceSchedule"):
        monkeypatch.setattr(getattr(__import__("tvm_ascend.schedules", fromlist=[template]),
                                    template), "analyse", staticmethod(broken))
    template, tiling, decision = plan_template(func, soc)
    assert template is None and tiling is None and not decision
    assert "while scheduling (ScheduleError: transform_block_layout failed)" in decision.reason


def test_ids_read_per_element_are_refused_not_printed_wrong():
    """``out[i] = data[ids[i]]`` (ONNX Gather of a 1-D table): no template prints a gather
    whose ids vary along the output row; it is refused with the reason (the host runs it)."""
    from tvm import te

    data = te.placeholder((10,), "float32", "data")
    ids = te.placeholder((3,), "int64", "ids")
    func = te.create_prim_func([data, ids, te.compute((3,), lambda i: data[ids[i]])])
    template, decision = select_template(func, get_soc("Ascend910B1"))
    assert template is None, template
    assert "index loaded from memory" in decision.reason


def test_no_template_fits_names_the_one_that_came_closest(monkeypatch):
    """When no template tiles a group, the decision's one-line summary is a template that
    recognised it and failed to tile it (a tiling refusal before a TVM error, whose raw text
    stays in the full reason only); none when no template recognised it."""
    import tvm_ascend.schedules as schedules
    from tvm_ascend.decision import Decision
    from tvm_ascend.errors import TilingError

    class Template:
        def __init__(self, name, applies, error=None):
            self.name, self._applies, self._error = name, applies, error

        def applies(self, func):
            return Decision.yes() if self._applies else Decision.no(f"not a {self.name} group")

        def analyse(self, func):
            raise self._error

    tvm_error = RuntimeError("ScheduleError: An error occurred\n<a whole PrimFunc>\n"
                             "Error message: The block has init statement")
    monkeypatch.setattr(schedules, "TEMPLATES", (
        Template("first", False), Template("tvm", True, tvm_error),
        Template("tight", True, TilingError("rows of 9000 floats exceed the UB\nmore"))))
    _, _, decision = schedules.plan_template(None, get_soc("Ascend910B1"))
    assert not decision.ok and "first: not a first group" in decision.reason
    assert "The block has init statement" in decision.reason
    assert decision.short == ("the tight template takes it but cannot tile it: rows of 9000 "
                              "floats exceed the UB")
    monkeypatch.setattr(schedules, "TEMPLATES", schedules.TEMPLATES[:2])
    _, _, decision = schedules.plan_template(None, get_soc("Ascend910B1"))
    assert decision.short == "the tvm template takes it but TVM could not schedule it " \
                             "(RuntimeError)"
    monkeypatch.setattr(schedules, "TEMPLATES", schedules.TEMPLATES[:1])
    _, _, decision = schedules.plan_template(None, get_soc("Ascend910B1"))
    assert decision.summary == "" and decision.short.startswith("no schedule template fits")


@dataclass(frozen=True)
class _Slab:
    lead: int
    pad: tuple


@dataclass(frozen=True)
class _Method:
    slab: _Slab | None
    sides: tuple


@dataclass(frozen=True)
class _NestedPlan(TemplatePlan):  # no template name: not registered
    method: _Method


def test_a_plan_reads_nested_dataclasses_back_by_their_types():
    """A plan's nested frozen dataclasses come back from JSON with their own tuples and
    dataclasses, not as lists and dicts (the conv plan nests its shape and its slab)."""
    plan = _NestedPlan(_Method(_Slab(16, (1, 2)), (3, 4)))
    again = _NestedPlan.from_dict(json.loads(json.dumps(asdict(plan))))
    assert again == plan and isinstance(again.method.slab, _Slab)
    assert _NestedPlan.from_dict({"method": {"slab": None, "sides": [5, 6]}}).method.sides == (5, 6)


def test_plan_names_the_resident_sources_and_round_trips_through_json():
    """A small broadcast source is kept whole in each core's UB; the plan names it and the
    temps' slot width for the printer, and reads back from its JSON form equal."""
    from tvm import te

    from tvm_ascend.schedules.elementwise import ElementwisePlan
    from tvm_ascend.schedules.tiling import Tiling

    x = te.placeholder((1000,), "float16", "x")
    b = te.placeholder((10,), "float16", "b")
    y = te.compute((1000,), lambda i: te.exp(x[i] + b[i % 10]).astype("float32"), name="y")
    _, tiling = ElementwiseSchedule.schedule(te.create_prim_func([x, b, y]),
                                             get_soc("Ascend910B1"))
    assert tiling.plan == ElementwisePlan(slot_bytes=4, resident_inputs=("b",))
    assert Tiling.from_json(tiling.to_json()) == tiling


def test_analyse_once_plan_per_knobs_apply_per_plan_is_schedule():
    """The contract: one analysis serves every plan, and apply leaves it as it found it."""
    from template_contract import check_analyse_plan_apply

    _, func = _fused_prim_func((4, 300, 129), ["add_bias", "relu", "add_rowcol"])
    check_analyse_plan_apply(ElementwiseSchedule, func, get_soc("Ascend910B1"),
                             [None, ElementwiseKnobs(cores=5, tile_len=256, double_buffer=False)])


def _softmax_func():
    from tvm import te, topi

    x = te.placeholder((8, 300), "float32", "x")
    return te.create_prim_func([x, topi.nn.softmax(x)])


def _axis_sum_func():
    from tvm import te

    x = te.placeholder((4, 9, 10), "float32", "x")
    k = te.reduce_axis((0, 9), "k")
    red = te.compute((4, 10), lambda o, i: te.sum(te.abs(x[o, k, i]), axis=k), "red")
    return te.create_prim_func([x, red])


def _gather_func():
    from tvm import te

    data = te.placeholder((10, 64), "float32", "data")
    ids = te.placeholder((3,), "int64", "ids")
    return te.create_prim_func([data, ids, te.compute((3, 64), lambda r, c: data[ids[r], c])])


@pytest.mark.parametrize("make, name, most", [(_softmax_func, "RowReduceSchedule", 2),
                                             (_axis_sum_func, "AxisReduceSchedule", 2),
                                             (_gather_func, "DataMovementSchedule", 1)])
def test_applies_and_analyse_share_their_schedules(monkeypatch, make, name, most):
    """The planner asks ``applies`` of every template on every candidate, then ``analyse`` of
    those that take it: a TIR Schedule costs milliseconds, so the blocks, inlines and programs
    both read are built once per function (a BERT-base partition built 1829 before, 1081 now)."""
    import tvm_ascend.schedules as schedules

    template, func = getattr(schedules, name), make()
    built = []
    original = tvm.s_tir.Schedule
    monkeypatch.setattr(tvm.s_tir, "Schedule", lambda *a, **k: built.append(1) or original(*a, **k))
    assert template.applies(func) and template.applies(func)
    template.analyse(func)
    assert len(built) <= most, f"{name}: {len(built)} Schedules for applies twice and analyse"
