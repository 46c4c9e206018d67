"""Rows longer than the UB: multi-pass row kernels vs onnxruntime, plans vs emulator counters.

A row of COLS float32 elements (280 KB) is longer than the UB of Ascend910B1 (192 KB) and of
Ascend310P3 (256 KB): the row template sweeps it in column chunks, one pass per reduction level
(schedules/row_reduce.py, ``row_passes``). Each build compiles its kernels once (~10 s): the
default-run tests keep to a few builds of a few rows each.
"""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from build_checks import build_and_check_plans, chunked_tilings
from onnx_models import ModelBuilder, layernorm_chain
from tvm_ascend import CompileConfig, ir_attrs
from tvm_ascend.cost_model.database import TuningDatabase, knobs_to_json, workload_of
from tvm_ascend.schedules import knobs_from_json
from tvm_ascend.errors import TilingError
from tvm_ascend.kernel_record import record_of
from tvm_ascend.schedules import RowReduceKnobs, RowReduceSchedule
from tvm_ascend.schedules.tiling import Tiling
from tvm_ascend.soc import get_soc

COLS = 70_001  # chunks of a multiple of 128 columns leave a tail that is no multiple of 8 or 16


def _by_op(groups: dict, op: str) -> dict:
    (tiling,) = [g["tiling"] for g in groups.values()
                 if any(o["op"] == op for o in g["ops"])]
    return tiling


def test_softmax_log_softmax_and_layernorm_over_long_rows():
    b = ModelBuilder("float32", seed=40)
    x = b.input("x", (3, COLS))  # three rows: one per core
    b.feeds["x"] = b.rng.standard_normal((3, COLS)).astype(np.float32) * 3
    b.output(b.node("Softmax", [x], axis=-1), (3, COLS))
    y = b.input("y", (2, COLS))
    b.feeds["y"] = b.rng.standard_normal((2, COLS)).astype(np.float32) * 3
    b.output(b.node("LogSoftmax", [y], axis=-1), (2, COLS))
    z = b.input("z", (2, COLS))
    b.output(layernorm_chain(b, z, COLS), (2, COLS))
    lib, groups = build_and_check_plans(b)
    softmax = _by_op(groups, "relax.nn.softmax")
    # max, sum of exp, out
    assert softmax["cores"] == 3 and softmax["plan"]["chunked"]["passes"]["count"] == 3
    assert softmax["gm_read_bytes"] == 3 * (3 * COLS * 4)  # the row read in each pass
    assert softmax["gm_write_bytes"] == 3 * COLS * 4
    # the largest chunk that fits double-buffered: x and out queues and two row slots
    assert 186_000 < softmax["ub_bytes"] <= 196_608 - 8448
    assert _by_op(groups, "relax.nn.log_softmax")["plan"]["chunked"]["passes"]["count"] == 3
    # every op of the LayerNorm chain runs on the NPU, its means in multi-pass row kernels (one
    # kernel, or the timing model splits off the Pow: it sees no overlap of the chunks' pipes)
    assert len(chunked_tilings(groups)) >= 3
    source = "\n".join(lib.kernel_sources().values())
    assert "// pass 3 of 3" in source and "CHUNK_STRIDE" in source


def test_reduce_sum_max_min_mean_over_long_rows():
    b = ModelBuilder("float32", seed=41)
    # five rows over five cores, one value out per row; positive inputs (the builder's) keep
    # the sums well-conditioned: with cancelling signs onnxruntime's own fp32 sum of 70k values
    # is off by more than conftest's float32 tolerance (10x further from the float64 sum than ours)
    x = b.input("x", (5, COLS))
    b.output(b.node("ReduceSum", [x, b.int_const([-1])], keepdims=0), (5,))
    b.output(b.node("ReduceMax", [x], axes=[-1], keepdims=1), (5, 1))
    b.output(b.node("ReduceMin", [x], axes=[-1], keepdims=0), (5,))
    b.output(b.node("ReduceMean", [x], axes=[-1], keepdims=1), (5, 1))
    _, groups = build_and_check_plans(b)
    tilings = chunked_tilings(groups)
    assert len(tilings) == 4
    for t in tilings:
        assert t["plan"]["chunked"]["passes"]["count"] == 1 and t["cores"] == 5
        assert t["gm_read_bytes"] == 5 * COLS * 4 and t["gm_write_bytes"] == 5 * 4


def test_long_rows_on_310p3_without_data_copy_pad():
    """310P3 has no DataCopyPad: the chunk tails go element by element, counted exactly."""
    b = ModelBuilder("float32", seed=42)
    x = b.input("x", (2, COLS))
    b.feeds["x"] = b.rng.standard_normal((2, COLS)).astype(np.float32) * 3
    b.output(b.node("Softmax", [x], axis=-1), (2, COLS))
    w = b.input("w", (2, COLS))
    # centred inputs: TVM's LayerNormalization takes the variance as E[x^2] - E[x]^2, which
    # cancels for inputs far from 0 whatever the kernel
    b.feeds["w"] = b.rng.standard_normal((2, COLS)).astype(np.float32)
    gamma = b.const(b.rng.uniform(0.5, 1.5, COLS), "gamma")
    beta = b.const(b.rng.standard_normal(COLS), "beta")
    b.output(b.node("LayerNormalization", [w, gamma, beta], axis=-1, epsilon=1e-5), (2, COLS))
    b.output(b.node("ReduceSum", [w, b.int_const([-1])], keepdims=0), (2,))
    _, groups = build_and_check_plans(b, target="ascend/310p3")
    tilings = chunked_tilings(groups)
    assert len(tilings) == 3
    assert all(t["ub_capacity"] == 262_144 for t in tilings)


def _pinned_chunks(model, tmp_path, chunk_cols: int, soc_version="Ascend910B1"):
    """A config whose tuning database pins ``chunk_cols`` on every row-reduce kernel."""
    config = CompileConfig(soc_version=soc_version)
    db = TuningDatabase(str(tmp_path))
    partitioned = tvm_ascend.partition_for_ascend(model, config)
    for func in partitioned.mod.functions.values():
        if func.attrs and ir_attrs.KERNEL in func.attrs and \
                record_of(func).template == "row_reduce":
            prim = func.attrs[ir_attrs.PRIM_FUNC]
            db.commit(workload_of(prim, "row_reduce", config.soc),
                      RowReduceKnobs(chunk_cols=chunk_cols), 1.0, runner="pin")
    return config.replace(tuning_database=str(tmp_path))


def test_chunk_knob_on_short_rows_with_masks_columns_and_row_values(tmp_path):
    """A chunk_cols knob below C chunks a row that would fit: every input kind (rows, a mask
    slice per row, a value per row, gamma/beta columns) streams chunk by chunk; 300 columns in
    chunks of 128 leave a tail of 44."""
    b = ModelBuilder("float32", seed=43)
    shape = (2, 3, 5, 300)
    scores = b.input("scores", shape)
    b.feeds["scores"] = b.rng.standard_normal(shape).astype(np.float32) * 3
    mask = b.input("mask", (2, 1, 1, 300))
    b.feeds["mask"] = np.where(b.rng.random((2, 1, 1, 300)) < 0.2, -1e4, 0).astype(np.float32)
    bias = b.input("bias", (2, 3, 5, 1))
    scaled = b.node("Mul", [scores, b.const(np.array(0.25), "scale")])
    masked = b.node("Add", [b.node("Add", [scaled, mask]), bias])
    b.output(b.node("Softmax", [masked], axis=-1), shape)
    w = b.input("w", (7, 300))
    gamma = b.const(b.rng.uniform(0.5, 1.5, 300), "gamma")
    beta = b.const(b.rng.standard_normal(300), "beta")
    b.output(b.node("LayerNormalization", [w, gamma, beta], axis=-1, epsilon=1e-5), (7, 300))
    b.output(b.node("ReduceMin", [w], axes=[-1], keepdims=0), (7,))
    config = _pinned_chunks(b.model(), tmp_path, 128)
    lib, groups = build_and_check_plans(b, config=config, tolerance="float32")
    tilings = chunked_tilings(groups)
    assert len(tilings) == 3
    assert all(t["plan"]["chunked"]["chunk_cols"] == 128 and t["plan"]["chunked"]["chunks_per_row"] == 3
               for t in tilings)
    softmax = _by_op(groups, "relax.nn.softmax")
    # scores and the mask slice in each of 3 passes, the per-row bias once per row
    assert softmax["gm_read_bytes"] == 3 * 2 * 30 * 300 * 4 + 30 * 4
    source = "\n".join(lib.kernel_sources().values())
    assert "RowVal = " in source and "Gm[c0]" in source  # a row value and a streamed column


def _row_funcs(model, soc_version="Ascend910B1") -> list:
    config = CompileConfig(soc_version=soc_version)
    partitioned = tvm_ascend.partition_for_ascend(model, config)
    return [f.attrs[ir_attrs.PRIM_FUNC] for f in partitioned.mod.functions.values()
            if f.attrs and ir_attrs.KERNEL in f.attrs and record_of(f).template == "row_reduce"]


def test_chunk_knobs_plans_and_refusals():
    soc = get_soc("Ascend910B1")
    b = ModelBuilder("float32", seed=44)
    x = b.input("x", (4, COLS))
    b.output(b.node("Softmax", [x], axis=-1), (4, COLS))
    (func,) = _row_funcs(b.model())
    _, default = RowReduceSchedule.schedule(func, soc)
    chunk = default.plan.chunked.chunk_cols
    # the plan, the passes' step maps included, reads back from its JSON form as it was
    assert default.plan.chunked.passes.reduced_in(0) == 1
    assert Tiling.from_json(default.to_json()) == default
    assert chunk % 128 == 0 and default.ub_bytes <= soc.ub_bytes - 8448
    space = RowReduceSchedule.knob_space(func, soc)
    assert space[0] == RowReduceKnobs()
    chunks = {k.chunk_cols for k in space}
    assert {chunk // 2 // 128 * 128, chunk // 4 // 128 * 128} <= chunks
    assert {k.double_buffer for k in space} == {True, False}
    # the tuning database stores and reads the chunk knob back
    assert all(knobs_from_json("row_reduce", knobs_to_json(k)) == k for k in space)
    for knobs in space[1:8]:
        _, tiling = RowReduceSchedule.schedule(func, soc, knobs)
        assert tiling.plan.chunked.passes.count == 3
        assert tiling.gm_read_bytes == 3 * 4 * COLS * 4
        assert tiling.plan.chunked.chunk_cols == (knobs.chunk_cols or tiling.plan.chunked.chunk_cols)
    _, single = RowReduceSchedule.schedule(func, soc, RowReduceKnobs(double_buffer=False))
    assert single.plan.chunked.chunk_cols > chunk and single.buffer_num == 1
    for bad in (RowReduceKnobs(chunk_cols=100), RowReduceKnobs(chunk_cols=chunk + 128),
                RowReduceKnobs(rows_per_tile=2)):
        with pytest.raises(TilingError, match="chunk_cols|rows_per_tile"):
            RowReduceSchedule.schedule(func, soc, bad)


def test_rows_that_fit_keep_the_one_pass_plan():
    soc = get_soc("Ascend910B1")
    b = ModelBuilder("float32", seed=45)
    x = b.input("x", (3, 1000))
    b.output(b.node("Softmax", [x], axis=-1), (3, 1000))
    (func,) = _row_funcs(b.model())
    _, tiling = RowReduceSchedule.schedule(func, soc)
    assert tiling.plan.chunked is None and tiling.ub_bytes < 32_768
    assert Tiling.from_json(tiling.to_json()) == tiling
    assert all(k.chunk_cols is None for k in RowReduceSchedule.knob_space(func, soc))
    # a chunk as long as the row is the one-pass plan
    _, same = RowReduceSchedule.schedule(func, soc, RowReduceKnobs(chunk_cols=1024))
    assert same == tiling


@pytest.mark.slow
def test_fp16_long_rows():
    # 120 KB fp16 rows, longer than the UB for every kernel (each needs >= 6 B per column); a
    # fp16 ReduceMean over more than 65504 columns cannot even be legalized (1/C in fp16)
    cols = 60_001
    b = ModelBuilder("float16", seed=46)
    x = b.input("x", (2, cols))
    b.feeds["x"] = b.rng.standard_normal((2, cols)).astype(np.float16)
    b.output(b.node("Softmax", [x], axis=-1), (2, cols))
    z = b.input("z", (2, cols))
    b.output(layernorm_chain(b, z, cols), (2, cols))
    b.output(b.node("ReduceMax", [z], axes=[-1], keepdims=0), (2,))
    _, groups = build_and_check_plans(b)
    assert _by_op(groups, "relax.nn.softmax")["plan"]["chunked"]["passes"]["count"] == 3
    # here the LayerNorm chain is one kernel: mean, variance, output
    assert sorted(t["plan"]["chunked"]["passes"]["count"]
                  for t in chunked_tilings(groups)) == [1, 3, 3]


def test_analyse_once_plan_per_knobs_apply_per_plan_is_schedule():
    """The contract, on a LayerNorm chain: one analysis serves the one-pass plans and the
    multi-pass one, and apply leaves it as it found it."""
    from template_contract import check_analyse_plan_apply

    b = ModelBuilder("float32", seed=46)
    x = b.input("x", (6, 1000))
    b.output(layernorm_chain(b, x, 1000), (6, 1000))
    (func,) = _row_funcs(b.model())
    check_analyse_plan_apply(RowReduceSchedule, func, get_soc("Ascend910B1"), [
        None, RowReduceKnobs(cores=3, rows_per_tile=1, double_buffer=False),
        RowReduceKnobs(chunk_cols=256)])


def test_long_row_re_reads_are_l2_traffic_by_the_one_rule():
    # a multi-pass row reads x once per pass and the broadcast gamma/beta once per row and
    # pass; only x's first pass and one gamma/beta each come from HBM: the later reads find
    # them in L2, whose reuse distance (the working cores' rows of one pass) is a few MB
    soc = get_soc("Ascend910B1")
    rows = 6
    b = ModelBuilder("float32", seed=46)
    x = b.input("x", (rows, COLS))
    b.output(layernorm_chain(b, x, COLS), (rows, COLS))
    (func,) = [f for f in _row_funcs(b.model())]
    _, tiling = RowReduceSchedule.schedule(func, soc)
    chunks = tiling.plan.chunked
    assert chunks is not None and chunks.passes.count >= 2
    streamed = [name for names in chunks.passes.streamed for name in names]
    row_bytes = COLS * 4
    assert tiling.gm_read_bytes == len(streamed) * rows * row_bytes  # what the emulator counts
    columns = len(streamed) - sum(1 for n in streamed if n == streamed[0])  # gamma and beta reads
    first_reads = row_bytes * rows + row_bytes * len(set(streamed) - {streamed[0]})
    assert columns > 0
    assert tiling.work.l2_operand_bytes == tiling.gm_read_bytes - first_reads
    from tvm_ascend.cost_model.timing import l2_bytes
    assert l2_bytes(tiling)[0] == tiling.gm_read_bytes - first_reads
