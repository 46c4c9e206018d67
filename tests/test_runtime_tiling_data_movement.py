"""Run-time tiling of data movement over a symbolic dimension (issue 20, item 2).

Attention's heads transposes ``[B, s, H, D] <-> [B, H, s, D]`` keep the last axis: each output
row is one run of D elements copied from an offset that depends on ``s``. They are row
kernels (the row template takes them in static builds too); over a ranged ``s`` the kernel is
planned at the upper bound and its row offsets are expressions over ``row`` and ``s``, read
from the function over the symbols and checked against TVM's arithmetic at every row of the
range's ends and midpoint (``schedules/symbolic_index.py``), printed with ``s`` read from the
tiling struct (``dim_s``, filled per call by the host tiling function). Checked here on both
SoCs at the lower end (1), odd lengths (7, 17) and the upper bound: outputs against
onnxruntime, each launch's emulator counters against the Python plan of that call, and the
C++ tiling function against that plan over a sweep. A float slice over ``s`` (GPT-2's qkv
Split) tiles the same way with static offsets, and the embeddings' Gather of table rows by
ids of ``[2, s]`` with its consumer is a data-movement kernel whose rows come from the
tiling struct (``schedules/data_movement.py``: its copies and the ids' flat offsets checked
the same at the range's ends and midpoint), as is a concat of the last axis with its Relu. A
transpose that moves the last axis over
``s`` (K's ``[B, s, H, D] -> [B, H, D, s]``) and a concat over ``s`` (``2 * s`` long) stay
on the host, and the report says why.
"""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import tirx

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend.errors import TilingError
from tvm_ascend.schedules import Tiling, tiling_at
from tvm_ascend.schedules.symbolic_index import (index_from_json, index_to_json,
                                                 symbolic_row_bases)

SOCS = ("Ascend910B1", "Ascend310P3")
HIGH = 300
LENGTHS = (1, 7, 17, HIGH)  # lower end, odd lengths, upper bound
HEADS, DIM = 2, 32


def _model(nodes, x_dims, y_dims, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "moves", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_dims)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _split_heads():
    """[2, s, H, D] -> [2, H, s, D]: q's and v's transpose."""
    return _model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3],
                                    name="split_heads")],
                  [2, "s", HEADS, DIM], [2, HEADS, "s", DIM])


def _merge_heads():
    """[2, H, s, D] -> [2, s, H, D] -> Reshape [2, s, H * D] -> * 0.5: the context's merge."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3], name="merge_heads"),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="merge_view"),
             helper.make_node("Mul", ["r", "k"], ["y"], name="scale")]
    inits = [numpy_helper.from_array(np.array([2, -1, HEADS * DIM], np.int64), "shape"),
             numpy_helper.from_array(np.array(0.5, np.float32), "k")]
    return _model(nodes, [2, HEADS, "s", DIM], [2, "s", HEADS * DIM], inits)


def _qkv_slice():
    """x[:, :, 64:128] of [2, s, 192]: GPT-2's Split of its fused qkv projection."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("start", [64]), ("end", [128]), ("axes", [2]))]
    return _model([helper.make_node("Slice", ["x", "start", "end", "axes"], ["y"],
                                    name="qkv_k")], [2, "s", 192], [2, "s", 64], inits)


VOCAB = 96


def _embedding():
    """table[x] * 0.5 with token ids x of [2, s]: the embeddings' Gather and its consumer."""
    table = np.random.default_rng(0).standard_normal((VOCAB, 64)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "x"], ["e"], axis=0, name="embed"),
             helper.make_node("Mul", ["e", "k"], ["y"], name="embed_scale")]
    graph = helper.make_graph(
        nodes, "moves", [helper.make_tensor_value_info("x", TensorProto.INT64, [2, "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s", 64])],
        [numpy_helper.from_array(table, "table"),
         numpy_helper.from_array(np.array(0.5, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# kind -> (model, x's shape at s, output rows per unit of s, template)
KINDS = {"split": (_split_heads, lambda s: (2, s, HEADS, DIM), 2 * HEADS, "row_reduce"),
         "merge": (_merge_heads, lambda s: (2, HEADS, s, DIM), 2 * HEADS, "row_reduce"),
         "slice": (_qkv_slice, lambda s: (2, s, 192), 2, "row_reduce"),
         "embed": (_embedding, lambda s: (2, s), 2, "data_movement")}


def _ranged(shape_of) -> tuple:
    return tuple(f"1~{HIGH}" if d == "S" else d for d in shape_of("S"))


@pytest.fixture(scope="module", params=[(soc, kind) for kind in KINDS for soc in SOCS],
                ids=lambda p: f"{p[1]}-{p[0]}")
def built(request):
    soc, kind = request.param
    make, shape_of = KINDS[kind][:2]
    model = make()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version=soc, input_shape={"x": _ranged(shape_of)}))
    return kind, model, lib


def _moving(lib) -> tuple[str, Tiling, dict]:
    """(kernel, Tiling, group) of the build's data movement: its transpose or slice."""
    (group,) = [g for g in lib.fusion_report()["groups"] if any(
        o["op"] in ("relax.permute_dims", "relax.strided_slice", "relax.take")
        for o in g["ops"])]
    assert group["on_npu"], group
    return group["kernel"], Tiling.from_dict(group["tiling"]), group


def _struct(call: Tiling, length: int, kind: str) -> dict:
    """What the host tiling function fills in for ``call``, from the Python plan."""
    out = {"rows": call.total, "blockRows": call.block_len, "tileRows": call.tile_len,
           "cols": call.cols}
    if kind in ("split", "merge"):  # the others' offsets do not depend on s: no such field
        out["dim_s"] = length
    return {**out, "blockDim": call.cores}


def _feeds(kind: str, length: int) -> dict:
    shape, rng = KINDS[kind][1](length), np.random.default_rng(length)
    if kind == "embed":
        return {"x": rng.integers(0, VOCAB, shape).astype(np.int64)}
    return {"x": rng.standard_normal(shape).astype(np.float32)}


def test_nothing_stays_on_the_host(built):
    kind, _, lib = built
    report = lib.fusion_report()
    host = report["dynamic"]["host_ops"]
    if kind == "embed":
        # ONNX Gather's negative-id wrap (ids < 0 ? ids + 96 : ids) is int64 arithmetic,
        # which no vector kernel takes: on the host, saying so; the Gather itself is not
        assert sorted(o["op"] for o in host) == ["relax.add", "relax.less", "relax.where"]
        assert all("on int64" in o["why"] for o in host)
    else:
        assert report["host_groups"] == 0 and host == []
    name, tiling, group = _moving(lib)
    _, _, rows_per_s, template = KINDS[kind]
    assert tiling.template == template and tiling.plan.runtime is not None
    kernels = {k["kernel"]: k for k in report["dynamic"]["runtime_tiling"]["kernels"]}
    assert kernels[name]["dims"] == ["s"]
    # planned at the upper bound: every output row of s = 300, the UB sized for it
    assert tiling.total == rows_per_s * HIGH
    assert tiling.ub_bytes <= tiling.ub_capacity
    if kind == "embed":  # one run of the table per row, at ids' flat element r at every s
        assert report["npu_kernels"] == 1 and "relax.multiply" in {o["op"] for o in group["ops"]}
        assert tiling.gm_read_bytes == tiling.total * (64 * 4 + 8)  # a row and its id
        return
    bases = dict(tiling.plan.runtime.bases)
    if kind == "slice":
        assert bases == {}  # x[r, 64:128] starts at r * 192 + 64 at every s
    else:
        assert "s" in str(index_from_json(next(iter(bases.values()))))


def test_the_printed_kernel_reads_s_from_its_tiling_struct(built):
    kind, _, lib = built
    name, tiling, _ = _moving(lib)
    source = lib.kernel_sources()[name]
    body = source.split("class Kernel", 1)[1]
    for field in ("rows", "blockRows", "tileRows", "cols"):
        assert f"tiling.{field}" in body, field
    if kind in ("split", "merge"):
        assert "dim_s = tiling.dim_s;" in body
        assert re.search(r"Gm\[[^\]]*dim_s[^\]]*\]", body)  # the row offset reads it
    # no size that depends on s is a constant of the kernel, but the GM views' lengths: they
    # are the bound's, what a call may read at most
    code = "\n".join(line for line in body.splitlines() if "SetGlobalBuffer" not in line)
    constants = [tiling.total, tiling.block_len, HIGH, HIGH * DIM * HEADS]
    if kind == "embed":
        # ids[r // 300, r % 300] is flat element r of ids at every s (the template checks
        # it over each sampled size's rows); printed as the bound's arithmetic on r
        assert re.search(r"GetValue\(\(\(static_cast<int64_t>\(\(r / 300LL\)\) \* "
                         r"static_cast<int64_t>\(300LL\)\) \+ static_cast<int64_t>\(\(r % "
                         r"300LL\)\)\)\)", code)
        constants.remove(HIGH)
    for constant in constants:
        assert not re.search(rf"\b{constant}(LL)?\b", code), constant


@pytest.mark.parametrize("length", LENGTHS)
def test_each_length_matches_onnxruntime_and_its_plan(built, length):
    kind, model, lib = built
    name, tiling, _ = _moving(lib)
    feeds = _feeds(kind, length)
    lib.profile()  # reset the counters
    (out,) = lib.run(feeds)
    want = run_onnxruntime(model, feeds)[0]
    assert out.shape == want.shape
    assert_close(out, want, "float32")
    launches = {launch["kernel"]: launch for launch in lib.profile()}
    launch = launches[name]
    call = tiling_at(tiling, {"s": length})
    assert call.total == KINDS[kind][2] * length
    assert call.tile_len <= tiling.tile_len
    assert launch["block_dim"] == call.cores
    assert launch["gm_read_bytes"] == call.gm_read_bytes
    assert launch["gm_write_bytes"] == call.gm_write_bytes
    assert launch["peak_ub_bytes"] == call.ub_bytes <= tiling.ub_bytes
    assert launch["warnings"] == []
    assert lib.kernel_tiling(name, length) == _struct(call, length, kind)


def test_the_host_tiling_function_equals_the_plan_over_the_range(built):
    kind, _, lib = built
    name, tiling, _ = _moving(lib)
    for length in [*range(1, 70), 127, 128, 129, 255, 256, HIGH - 1, HIGH]:
        call = tiling_at(tiling, {"s": length})
        assert lib.kernel_tiling(name, length) == _struct(call, length, kind), length


def test_a_length_outside_the_range_is_an_error_naming_it(built):
    kind, _, lib = built
    name, _, _ = _moving(lib)
    with pytest.raises(Exception, match=rf"symbolic dimension s = {HIGH + 1} .* outside its "
                                        rf"range 1~{HIGH}"):
        lib.kernel_tiling(name, HIGH + 1)
    with pytest.raises(Exception, match="x"):
        lib.run({"x": np.zeros(KINDS[kind][1](HIGH + 1),
                               np.int64 if kind == "embed" else np.float32)})


def test_a_transpose_that_moves_the_last_axis_over_s_stays_on_the_host_saying_why():
    """K's transpose for the scores: its columns are s long (box copies, static only)."""
    model = _model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1],
                                     name="key_t")], [2, "s", HEADS, DIM], [2, HEADS, DIM, "s"])
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        input_shape={"x": (2, "2~32", HEADS, DIM)}))
    (op,) = lib.fusion_report()["dynamic"]["host_ops"]
    assert op["node"] == "key_t" and op["dims"] == ["s"]
    assert "moves the last axis over a symbolic dimension" in op["why"]
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 9, HEADS, DIM))
             .astype(np.float32)}
    assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")


# ---- the row offsets over s alone --------------------------------------------------------------
def test_a_row_offset_round_trips_through_its_json_form():
    row, s = tirx.Var("row", "int64"), tirx.Var("s", "int64")
    two = tirx.IntImm("int64", 2)
    expr = tirx.FloorDiv(row, s * two) * (s * tirx.IntImm("int64", 64)) + tirx.FloorMod(row, s)
    back = index_from_json(index_to_json(expr))
    env = {"row": np.arange(50), "s": np.int64(7)}
    from tvm_ascend.schedules.analysis.movement_program import evaluate

    np.testing.assert_array_equal(evaluate(back, env), evaluate(expr, env))
    with pytest.raises(TilingError, match="not index arithmetic"):
        index_to_json(tirx.Select(row < s, row, s))


def test_an_offset_the_static_function_does_not_give_is_refused_naming_the_row():
    """The check that guards every symbolic offset: a wrong static offset at one size (here
    the bound's, shifted by one element) is a TilingError naming the input, row and size."""
    from tvm import relax

    from tvm_ascend.partition.legalize import legalize_map

    bb = relax.BlockBuilder()
    s = tirx.Var("s", "int64")
    x = relax.Var("x", relax.TensorType((2, s, HEADS, DIM), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.permute_dims(x, [0, 2, 1, 3]))
        bb.emit_func_output(out)
    low = relax.transform.LegalizeOps(legalize_map())(bb.get())
    (prim,) = [f for f in low.functions.values() if isinstance(f, tirx.PrimFunc)]
    name = prim.params[0].name
    row = tirx.Var("row", "int64")
    at = lambda n: (  # noqa: E731 - the offset of [2, n, H, D] -> [2, H, n, D]'s row
        tirx.FloorDiv(row, tirx.IntImm("int64", n * HEADS)) * (n * HEADS * DIM)
        + tirx.FloorMod(row, tirx.IntImm("int64", n)) * (HEADS * DIM)
        + tirx.FloorMod(tirx.FloorDiv(row, tirx.IntImm("int64", n)), tirx.IntImm("int64", HEADS))
        * DIM)
    good = [({"s": n}, 2 * HEADS * n, {name: at(n)}) for n in (1, 16, 32)]
    (base,) = symbolic_row_bases(prim, [name], good).values()
    assert "s" in str(base)
    bad = good[:2] + [({"s": 32}, 2 * HEADS * 32, {name: at(32) + 1})]
    with pytest.raises(TilingError, match=rf"input {name}'s row offset .* gives 0 at row 0 "
                                          r"of \{'s': 32\}, the static function 1"):
        symbolic_row_bases(prim, [name], bad)


def test_an_exported_library_loads_back_with_its_tiling_functions(built, tmp_path):
    kind, model, lib = built
    name, tiling, _ = _moving(lib)
    again = tvm_ascend.load(lib.export_library(tmp_path / "model.so"))
    for length in (7, HIGH):
        feeds = _feeds(kind, length)
        assert_close(again.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
        assert again.kernel_tiling(name, length) == _struct(tiling_at(tiling, {"s": length}),
                                                            length, kind)


# ---- a concat over the last axis --------------------------------------------------------------
def _concat(axis: int):
    """Relu(Concat(x, z, axis)) of x, z [2, s, 32]."""
    out = [2, "s", 64] if axis == 2 else [2, "t", DIM]
    return _model_of([helper.make_node("Concat", ["x", "z"], ["c"], axis=axis, name="cat"),
                      helper.make_node("Relu", ["c"], ["y"], name="cat_relu")],
                     ["x", "z"], [2, "s", DIM], out)


def _model_of(nodes, inputs, in_dims, out_dims) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "moves", [helper.make_tensor_value_info(n, TensorProto.FLOAT, in_dims)
                         for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("soc", SOCS)
def test_a_concat_of_the_last_axis_is_one_kernel_tiled_per_call(soc):
    """Two segments of columns, each a run of its input at row r * 32: the same copies at
    every s, so one data-movement kernel (with its Relu) serves the range."""
    model = _concat(axis=2)
    ranged = (2, f"1~{HIGH}", DIM)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        soc_version=soc, input_shape={"x": ranged, "z": ranged}))
    report = lib.fusion_report()
    assert report["host_groups"] == 0 and report["dynamic"]["host_ops"] == []
    (group,) = report["groups"]
    assert {o["op"] for o in group["ops"]} == {"relax.concat", "relax.nn.relu"}
    name, tiling = group["kernel"], Tiling.from_dict(group["tiling"])
    assert tiling.template == "data_movement" and tiling.total == 2 * HIGH
    for length in LENGTHS:
        rng = np.random.default_rng(length)
        feeds = {n: rng.standard_normal((2, length, DIM)).astype(np.float32) for n in "xz"}
        lib.profile()
        (out,) = lib.run(feeds)
        assert_close(out, run_onnxruntime(model, feeds)[0], "float32")
        (launch,) = lib.profile()
        call = tiling_at(tiling, {"s": length})
        assert (launch["block_dim"], launch["gm_read_bytes"], launch["gm_write_bytes"],
                launch["peak_ub_bytes"]) == (call.cores, call.gm_read_bytes,
                                             call.gm_write_bytes, call.ub_bytes)
        assert call.gm_read_bytes == call.gm_write_bytes == 2 * length * 64 * 4
        assert lib.kernel_tiling(name, length) == _struct(call, length, "concat")


def test_a_concat_over_s_stays_on_the_host_saying_why():
    """Concat(x, z) over s is 2 * s long: a shape entry that is an expression of s."""
    model = _concat(axis=1)
    ranged = (2, "2~32", DIM)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        input_shape={"x": ranged, "z": ranged}))
    host = {o["node"]: o["why"] for o in lib.fusion_report()["dynamic"]["host_ops"]}
    assert host["cat"] == "concat with a dynamic shape runs on the host"
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal((2, 9, DIM)).astype(np.float32) for n in "xz"}
    assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
