"""Symbolic dimensions through the ONNX import (issue 20; tvm_ascend/frontend/onnx_symbolic.py).

A BERT and a GPT-2 exported by ``torch.onnx.export(..., dynamo=True, dynamic_shapes=...)``
with a dynamic sequence dimension (tests/corpus/dynamic, written by its export_dynamic.py) import
with a range given (``input_shape={"input_ids": (2, "2~32")}``), build, and match onnxruntime
at several lengths; a length outside the range is an error naming the input, the dimension and
the range. Before onnx_symbolic these imports failed ("Node ... cannot handle ShapeExpr
inputs" where the Expand rewrite met a Shape; "Reshape expects the input tensor to have known
shape" once past it: ``Range(0, seq, 1)`` got a length of its own that no op could prove equal
to ``seq``). Small hand-made graphs check each rewrite alone.

Elementwise groups over ``seq`` are tiled at run time (tests/test_runtime_tiling.py), and so
are the heads' transposes, the float slices and the embeddings' Gathers
(tests/test_runtime_tiling_data_movement.py);
the other ops that depend on it run on the host (see the README's "Symbolic dimensions and run-time
tiling"), and the report says so (test_fusion_report).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend import CompileConfig, ModelLoadError
from tvm_ascend.frontend import load_model, onnx_loader
from tvm_ascend.partition.dynamic_report import RUNTIME_TILED_TEMPLATES
from tvm_ascend.frontend.onnx_symbolic import (RESOLVED, SymbolicDim, resolve_symbolic,
                                               symbolic_dims)

DYNAMIC = Path(__file__).resolve().parent / "corpus" / "dynamic"
MANIFEST = json.loads((DYNAMIC / "MANIFEST.json").read_text())
ROWS = {row["model"]: row for row in MANIFEST["files"]}
LENGTHS = (2, 7, 17, 32)


def _shape_with_range(row: dict) -> dict:
    """input_shape with the symbolic dimension given as its range ("2~32")."""
    low, high = row["range"]
    return {spec["name"]: tuple(d if isinstance(d, int) else f"{low}~{high}"
                                for d in spec["shape"]) for spec in row["inputs"]}


def _text_feeds(length: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((2, length), np.int64)
    mask[-1, length - 1:] = 0  # the last row padded: the mask matters
    return {"input_ids": rng.integers(0, 96, (2, length)).astype(np.int64),
            "attention_mask": mask}


@pytest.fixture(scope="module")
def libs():
    """One build of each dynamic export with its range (shared: each takes about a minute)."""
    return {name: tvm_ascend.build(str(DYNAMIC / row["file"]), config=CompileConfig(
        input_shape=_shape_with_range(row))) for name, row in ROWS.items()}


# ---- the corpus of dynamic exports ----------------------------------------------------------
def test_manifest_names_the_committed_dynamic_exports():
    assert sorted(row["file"] for row in ROWS.values()) == sorted(
        p.name for p in DYNAMIC.glob("*.onnx"))
    assert set(ROWS) == {"bert", "gpt2"}
    for row in ROWS.values():
        data = (DYNAMIC / row["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == row["sha256"]
        assert len(data) == row["bytes"] < 1_000_000  # tiny configs: the folder stays small
        model = onnx.load_from_string(data)
        declared = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
                    for v in model.graph.input}
        assert declared == {spec["name"]: spec["shape"] for spec in row["inputs"]}
        assert all(spec["shape"][1] == "seq" for spec in row["inputs"]), row["file"]
        ops = {n.op_type for n in model.graph.node}
        assert {"Shape", "Range", "Expand"} <= ops  # the exporter's run-time shape arithmetic
        assert row["range"] == [2, 32]


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_dynamic_export_imports_with_seq_symbolic_end_to_end(name):
    row = ROWS[name]
    mod = load_model(str(DYNAMIC / row["file"]), _shape_with_range(row))
    main = mod["main"]
    dims = lambda ty: [str(d).replace("T.int64(", "").rstrip(")") for d in ty.shape]  # noqa
    assert dims(main.params[0].ty) == ["2", "seq"]
    outs = main.ret_ty.fields if hasattr(main.ret_ty, "fields") else [main.ret_ty]
    assert dims(outs[0]) == ["2", "seq", "64"]  # the length carried through every layer
    assert json.loads(main.attrs["ascend.dim_ranges"]) == {"seq": [2, 32]}


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_without_the_symbolic_pass_the_import_fails_as_issue_20_saw(name, monkeypatch):
    """The regression: with onnx_symbolic bypassed, both exports fail to import again."""
    monkeypatch.setattr(onnx_loader, "resolve_symbolic", lambda model, dims, fixed=None: model)
    row = ROWS[name]
    with pytest.raises(ModelLoadError, match="ShapeExpr|known shape|no attribute 'value'"):
        load_model(str(DYNAMIC / row["file"]), _shape_with_range(row))


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_dynamic_build_matches_onnxruntime_at_each_length(libs, name, length):
    model = onnx.load(str(DYNAMIC / ROWS[name]["file"]))
    feeds = _text_feeds(length, seed=length)
    got, want = libs[name].run(feeds), run_onnxruntime(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).shape == w.shape
        assert_close(g, w, "float32_model")


@pytest.mark.parametrize("length", [1, 33, 40])
def test_a_length_outside_the_range_names_input_dimension_and_range(libs, length):
    with pytest.raises(ValueError) as err:
        libs["bert"].run(_text_feeds(length, seed=0))
    text = str(err.value)
    assert "'input_ids'" in text and "dimension 1" in text and "(seq)" in text
    assert "2~32" in text and str(length) in text


# ---- each rewrite on a hand-made graph -------------------------------------------------------
def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "symbolic", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def _int(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _range_model() -> onnx.ModelProto:
    """y = x + float(Range(0, Shape(x)[1], 1)): the exporter's position ids over (2, s)."""
    nodes = [helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
             helper.make_node("Squeeze", ["s1"], ["s"]),
             helper.make_node("Range", ["zero", "s", "one"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "posf"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s"])],
                  [_int("zero", 0), _int("one", 1)])


def _expand_model() -> onnx.ModelProto:
    """y = x * Expand(b (1, 1), Concat([2], Shape(x)[1])): a mask broadcast to (2, s)."""
    nodes = [helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
             helper.make_node("Concat", ["two", "s1"], ["shape"], axis=0),
             helper.make_node("Expand", ["b", "shape"], ["bb"]),
             helper.make_node("Mul", ["x", "bb"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s"])],
                  [_int("two", [2]), numpy_helper.from_array(np.full((1, 1), 1.5, np.float32),
                                                             "b")])


def _reshape_model() -> onnx.ModelProto:
    """y = Reshape(x (2, s, 8), Concat(Shape(x)[0:2], [2, 4])): a split of the last axis."""
    nodes = [helper.make_node("Shape", ["x"], ["s01"], start=0, end=2),
             helper.make_node("Concat", ["s01", "heads"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s", 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s", 2, 4])],
                  [_int("heads", [2, 4])])


SEQ = {"s": SymbolicDim("s", "x", 1, 2, 16)}


def test_symbolic_dims_names_input_axis_and_range():
    model = _range_model()
    shapes, bounds = onnx_loader._input_shapes(model, {"x": (2, (2, 16))})  # noqa: SLF001
    assert symbolic_dims(model, shapes, bounds) == SEQ


def test_range_over_a_symbol_becomes_a_slice_of_a_table_to_the_bound():
    out = resolve_symbolic(_range_model(), SEQ)
    (node,) = [n for n in out.graph.node if "pos" in n.output]
    assert node.op_type == "Slice"
    table = next(n for n in out.graph.node if n.output[0] == node.input[0])
    np.testing.assert_array_equal(numpy_helper.to_array(table.attribute[0].t), np.arange(16))
    assert not any(n.op_type == "Range" for n in out.graph.node)


def test_expand_to_a_symbolic_shape_is_spelled_and_marked():
    out = resolve_symbolic(_expand_model(), SEQ)
    (expand,) = [n for n in out.graph.node if n.op_type == "Expand"]
    assert [(p.key, p.value) for p in expand.metadata_props] == [(RESOLVED, "1")]
    parts = [n for n in out.graph.node if n.output[0].startswith(f"{expand.input[1]}/")]
    assert [n.op_type for n in parts] == ["Constant", "Shape"]


def test_reshape_with_one_symbolic_entry_gets_a_constant_with_minus_one():
    out = resolve_symbolic(_reshape_model(), SEQ)
    (reshape,) = [n for n in out.graph.node if n.op_type == "Reshape"]
    shape = next(n for n in out.graph.node if n.output[0] == reshape.input[1])
    assert shape.op_type == "Constant"
    np.testing.assert_array_equal(numpy_helper.to_array(shape.attribute[0].t), [2, -1, 2, 4])


def test_a_shape_value_with_no_symbol_left_becomes_a_constant():
    """Shape(x)[0:1] of (2, s) is [2]: folded, the Shape node gone."""
    nodes = [helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
             helper.make_node("Concat", ["b", "minus"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s"])],
                   [_int("minus", [-1])])
    out = resolve_symbolic(model, SEQ)
    assert not any(n.op_type == "Shape" for n in out.graph.node)
    folded = next(n for n in out.graph.node if n.output[0] == "shape")
    np.testing.assert_array_equal(numpy_helper.to_array(folded.attribute[0].t), [2, -1])


def test_what_cannot_be_resolved_is_left_as_the_model_has_it():
    """A symbol times 2 (not shape arithmetic this pass follows), an unbounded symbol's
    Range, and a model with no symbolic dimension: nothing changes."""
    nodes = [helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
             helper.make_node("Mul", ["s1", "two"], ["s2"]),
             helper.make_node("Squeeze", ["s2"], ["s"]),
             helper.make_node("Range", ["zero", "s", "one"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s"])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"])],
                   [_int("two", [2]), _int("zero", 0), _int("one", 1)])
    assert resolve_symbolic(model, SEQ) is model
    ranged = _range_model()
    assert resolve_symbolic(ranged, {"s": SymbolicDim("s", "x", 1, 1, None)}) is ranged
    assert resolve_symbolic(ranged, {}) is ranged


def test_a_symbolic_axis_given_a_size_folds_its_shape_arithmetic_to_constants():
    """x declared (2, s) but imported at (2, 8), as a gear is: Range(0, 8, 1) is a constant."""
    out = resolve_symbolic(_range_model(), {}, {"x": {1: 8}})
    assert not any(n.op_type in ("Range", "Shape") for n in out.graph.node)
    (pos,) = [n for n in out.graph.node if "pos" in n.output]
    assert pos.op_type == "Constant"
    np.testing.assert_array_equal(numpy_helper.to_array(pos.attribute[0].t), np.arange(8))


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_dynamic_export_imports_at_a_static_length_as_a_gear_does(name, monkeypatch):
    """The regression (found by tutorials/04): a dynamo export with seq declared symbolic,
    imported at a static length (one gear of --dynamic_dims, or input_shape (2, 8)), failed
    at its Expand ("cannot handle ShapeExpr inputs"): its shape arithmetic was only resolved
    for symbolic imports. Now the length folds it to constants."""
    path = str(DYNAMIC / ROWS[name]["file"])
    static = {"input_ids": (2, 8), "attention_mask": (2, 8)}
    main = load_model(path, static)["main"]
    dims = lambda ty: [int(d) for d in ty.shape]  # noqa: E731
    assert dims(main.params[0].ty) == [2, 8]
    outs = main.ret_ty.fields if hasattr(main.ret_ty, "fields") else [main.ret_ty]
    assert dims(outs[0]) == [2, 8, 64]
    monkeypatch.setattr(onnx_loader, "_fixed_symbolic_axes", lambda model, shapes: {})
    with pytest.raises(ModelLoadError, match="ShapeExpr"):
        load_model(path, static)


@pytest.mark.parametrize("make", [_range_model, _expand_model, _reshape_model],
                         ids=["range", "expand", "reshape"])
def test_each_rewritten_graph_builds_and_matches_onnxruntime_at_several_lengths(make):
    model = make()
    x_shape = [d.dim_value or d.dim_param for d in model.graph.input[0].type.tensor_type
               .shape.dim]
    given = tuple("2~16" if d == "s" else d for d in x_shape)
    lib = tvm_ascend.build(model, config=CompileConfig(input_shape={"x": given}))
    for length in (2, 5, 16):
        shape = [length if d == "s" else d for d in x_shape]
        feeds = {"x": np.random.default_rng(length).standard_normal(shape).astype(np.float32)}
        got = lib.run(feeds)[0]
        assert_close(got, run_onnxruntime(model, feeds)[0], "float32")


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_the_report_lists_every_op_seq_keeps_on_the_host(libs, name):
    """Nothing falls back silently: the report's dynamic section names each op kept on the
    host because of seq (K's transposes, the int64 position and mask arithmetic) and which
    kernels are tiled at run time instead (elementwise, row ones with the Softmax over seq
    keys among them, the projections' and MLP's matmuls over a symbolic M, and attention's
    two batched products: Q @ K^T over M = N = seq, P @ V over M = K = seq)."""
    report = libs[name].fusion_report()
    section = report["dynamic"]
    assert section["symbolic_dims"]["seq"]["range"] == [2, 32]
    assert section["runtime_tiling"]["templates"] == ["elementwise", "row_reduce", "matmul",
                                                      "attention", "data_movement"]
    kernels = section["runtime_tiling"]["kernels"]
    assert all(k["template"] in RUNTIME_TILED_TEMPLATES and k["dims"] == ["seq"]
               for k in kernels)
    # x (2, seq, 64) @ W, GPT-2's Conv1D once prepare unflattens its rows: M is seq
    assert any(k["template"] == "matmul" for k in kernels)
    assert "--dynamic_dims" in section["hint"]
    listed = {o["var"] for o in section["host_ops"]}
    assert all(o["dims"] == ["seq"] for o in section["host_ops"])
    assert len(listed) > 20  # K's transposes, the int64 position and mask arithmetic
    # attention's products leave the host: batched matmuls tiled at run time over seq
    assert "relax.matmul" not in {o["op"] for o in section["host_ops"]}
    products = [g for g in report["groups"] if g["on_npu"] and g["ops"][0]["op"] ==
                "relax.matmul" and g["tiling"]["plan"].get("runtime")]
    axes = sorted(tuple(g["tiling"]["plan"]["runtime"]["axes"]) for g in products)
    assert axes.count(("m", "k")) == 2 and axes.count(("m", "n")) == 2  # two layers
    assert axes.count(("m",)) == len(axes) - 4  # the projections and the MLP
    # as in a static build, the mask's add joins the score product (its row offset an
    # expression of seq computed per call)
    scores = [g for g in products if g["tiling"]["plan"]["runtime"]["axes"] == ["m", "n"]]
    assert all("relax.add" in {o["op"] for o in g["ops"]} for g in scores)
    # the heads' transposes that keep the last axis and the float slices (GPT-2's qkv Split)
    # are row kernels over seq (tests/test_runtime_tiling_data_movement.py); what stays is
    # K's transpose, which moves the last axis, and slices of int64 tensors
    for op in section["host_ops"]:
        if op["op"] == "relax.permute_dims":
            assert "moves the last axis over a symbolic dimension" in op["why"], op
        if op["op"] in ("relax.strided_slice", "relax.reshape"):
            assert "of a non-float tensor" in op["why"], op
    # the embeddings' float Gathers by ids over seq: data-movement kernels tiled per call
    assert "relax.take" not in {o["op"] for o in section["host_ops"]}
    assert any(k["template"] == "data_movement" for k in kernels)
    moved = [g for g in report["groups"] if g["on_npu"] and any(
        o["op"] == "relax.permute_dims" for o in g["ops"])]
    assert len(moved) >= 4  # q, v, the context's merge, in both layers
    assert all(g["tiling"]["plan"]["runtime"]["bases"] for g in moved)
    # the attention Softmax's rows are seq long: a row kernel whose cols is read per call
    assert "relax.nn.softmax" not in {o["op"] for o in section["host_ops"]}
    softmax = [g for g in report["groups"] if any(o["op"] == "relax.nn.softmax"
                                                  for o in g["ops"])]
    assert len(softmax) == 2 and all(g["on_npu"] for g in softmax)
    assert all(g["tiling"]["plan"]["runtime"]["cols_dim"] == "seq" for g in softmax)
    assert listed <= {o["var"] for o in report["host_ops"]}


def test_a_shape_value_cast_to_float_keeps_its_dtype():
    """Only int64 values are followed: Cast(Shape(x)[0:1], float) of (2, s) stays a Cast (a
    folded int64 Constant would change its dtype), its int64 input is folded."""
    nodes = [helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "bf"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s"])])
    out = resolve_symbolic(model, SEQ)
    assert [n.op_type for n in out.graph.node] == ["Constant", "Cast", "Mul"]
    onnx.checker.check_model(out, full_check=True)
    feeds = {"x": np.ones((2, 3), np.float32)}
    np.testing.assert_array_equal(run_onnxruntime(out, feeds)[0], run_onnxruntime(model,
                                                                                   feeds)[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_with_aggressive_fusion_each_layer_s_attention_is_one_kernel_tiled_at_run_time(name):
    """As the static aggressive build fuses each layer's scores, mask, Softmax and product
    with V into one attention kernel, so does the symbolic one, the sequence read per call
    (schedules/attention_runtime.py); it matches onnxruntime at every length."""
    row = ROWS[name]
    lib = tvm_ascend.build(str(DYNAMIC / row["file"]), config=CompileConfig(
        fusion_level="aggressive", input_shape=_shape_with_range(row)))
    groups = lib.fusion_report()["groups"]
    attention = [g for g in groups if g["on_npu"] and g["tiling"]["template"] == "attention"]
    assert len(attention) == 2  # two layers
    assert all(g["tiling"]["plan"]["runtime"]["dim"] == "seq" for g in attention)
    model = onnx.load(str(DYNAMIC / row["file"]))
    for length in LENGTHS:
        feeds = _text_feeds(length, seed=length)
        for got, want in zip(lib.run(feeds), run_onnxruntime(model, feeds)):
            assert_close(got, want, "float32_model")


def test_host_groups_no_template_tiles_over_seq_are_listed(libs):
    """An op that passes the op check but whose group no template tiles (BERT's mask
    logical_and over (1, 1, seq, 1)) ran on the host unlisted: host_ops named only the ops
    the op check keeps there. Such groups are now the section's host_groups, each with its
    ops, nodes, dimensions and the templates' reason, and none is also a host op."""
    section = libs["bert"].fusion_report()["dynamic"]
    groups = section["host_groups"]
    assert groups and all(g["dims"] == ["seq"] and g["ops"] and g["nodes"] for g in groups)
    assert all(g["why"].startswith("no schedule template fits") for g in groups)
    assert any(g["ops"] == ["relax.logical_and"] and "symbolic dimension" in g["why"]
               for g in groups)
    listed = {o["var"] for o in section["host_ops"]}
    assert not any(set(g["vars"]) & listed for g in groups)
