"""Bad input gets a clear error naming what is at fault."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder, add_chain


def test_missing_file():
    with pytest.raises(tvm_ascend.ModelLoadError, match="does not exist"):
        tvm_ascend.build("/no/such/model.onnx")


def test_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf\xff\xfe")
    with pytest.raises(tvm_ascend.ModelLoadError, match="corrupt.onnx"):
        tvm_ascend.build(str(path))


def test_unknown_target():
    builder = ModelBuilder()
    add_chain(builder, 0, (4,), ["relu"])
    with pytest.raises(tvm_ascend.TargetError, match="unknown target 'cuda'"):
        tvm_ascend.build(builder.model(), target="cuda")
    with pytest.raises(tvm_ascend.TargetError, match="ascend/910b1"):
        tvm_ascend.build(builder.model(), target="ascend/999x")


def test_bad_config_values():
    with pytest.raises(tvm_ascend.FusionConfigError, match="fusion_level"):
        tvm_ascend.CompileConfig(fusion_level="max")
    with pytest.raises(tvm_ascend.TargetError, match="Ascend910B1"):
        tvm_ascend.CompileConfig(soc_version="Ascend999")
    with pytest.raises(tvm_ascend.FusionConfigError, match="AUTOFUSION_ENABLE"):
        tvm_ascend.CompileConfig().with_env({"AUTOFUSION_ENABLE": "maybe"})
    with pytest.raises(tvm_ascend.FusionConfigError, match="precision_mode='fp16' is not one"):
        tvm_ascend.CompileConfig(precision_mode="fp16")
    with pytest.raises(tvm_ascend.FusionConfigError, match="rule_set='atc'"):
        tvm_ascend.CompileConfig(rule_set="atc")


def test_dynamic_dimension_runs_on_the_host_with_a_warning(caplog):
    """A dynamic dimension is not an error: without a range, ops depending on it stay on the
    host (any size runs) with a reason naming the dimension, a warning names it too; a range
    puts the group on the NPU, tiled at run time, and so does a static --input_shape."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "y"], ["z"])]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with caplog.at_level("WARNING", logger="tvm_ascend.frontend"):
        lib = tvm_ascend.build(model)
    assert "'x' dimension 0 (n) is dynamic" in caplog.text and "--input_shape" in caplog.text
    report = lib.fusion_report()
    assert report["kernels"]["ascend"] == 0
    assert all("symbolic dimension n (parameter" in g["reason"] and "has no range" in
               g["reason"] for g in report["groups"])
    rng = np.random.default_rng(0)
    for rows in (3, 7):
        x, y = (rng.standard_normal((rows, 4)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(lib.run({"x": x, "y": y})[0], np.maximum(x, 0) + y,
                                   rtol=1e-6)
    ranged = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        input_shape={"x": ("1~8", 4), "y": ("1~8", 4)}))
    assert ranged.fusion_report()["kernels"]["ascend"] == 1
    for rows in (1, 8):
        x, y = (rng.standard_normal((rows, 4)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(ranged.run({"x": x, "y": y})[0], np.maximum(x, 0) + y,
                                   rtol=1e-6)
    cfg = tvm_ascend.CompileConfig(input_shape={"x": (3, 4), "y": (3, 4)})
    lib = tvm_ascend.build(model, config=cfg)
    assert lib.fusion_report()["npu_kernels"] == 1


def test_input_shape_parsing():
    from tvm_ascend.frontend import parse_input_shape

    assert parse_input_shape("x:1,3,224,224;y:8") == {"x": (1, 3, 224, 224), "y": (8,)}
    assert parse_input_shape("x:[1~8,3];y:-1,2") == {"x": ((1, 8), 3), "y": (-1, 2)}
    with pytest.raises(tvm_ascend.ModelLoadError, match="'x:a,b'"):
        parse_input_shape("x:a,b")
    with pytest.raises(tvm_ascend.ModelLoadError, match="'8~1'"):
        parse_input_shape("x:8~1,3")


def test_env_overrides_config():
    cfg = tvm_ascend.CompileConfig().with_env({"AUTOFUSION_ENABLE": "0", "DUMP_GRAPH": "1"})
    assert cfg.autofusion is False and cfg.dump_graph is True and not cfg.fusion_enabled


def _relu_model(shape, dtype=None, name="x"):
    from onnx import TensorProto, helper

    elem = dtype or TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("Relu", [name], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info(name, elem, shape)],
                              [helper.make_tensor_value_info("y", elem, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_run_with_a_wrong_shape_or_dtype_names_the_input_and_what_was_expected(tmp_path):
    """lib.run checks every input against the compiled signature before TVM's VM sees it (which
    raised its own 'Check failed: ... match_cast error')."""
    lib = tvm_ascend.build(_relu_model([4, 8]))
    good = np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(lib.run({"x": good})[0], good)
    with pytest.raises(ValueError, match=r"input 'x' has shape \(4, 9\); the model expects "
                                         r"\(4, 8\) float32"):
        lib.run({"x": np.ones((4, 9), np.float32)})
    with pytest.raises(ValueError, match=r"input 'x' has shape \(8,\); the model expects "
                                         r"\(4, 8\)"):
        lib.run([np.ones(8, np.float32)])
    with pytest.raises(ValueError, match=r"input 'x' has dtype float64; the model expects "
                                         r"\(4, 8\) float32"):
        lib.run({"x": np.ones((4, 8), np.float64)})
    again = tvm_ascend.load(lib.export_library(tmp_path / "m.so"))  # metadata from the .so
    with pytest.raises(ValueError, match=r"input 'x' has dtype int64"):
        again.run({"x": np.ones((4, 8), np.int64)})


def test_run_outside_an_input_range_names_the_dimension_and_its_range():
    """A ranged dimension (``lo~hi``) is checked at run time: outside it TVM's memory planner,
    which sized the buffers for ``hi``, died with 'storage allocation failure'."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "y"], ["z"], name="add")]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        input_shape={"x": ("2~8", 4), "y": ((2, 8), 4)}))
    x = np.ones((8, 4), np.float32)
    np.testing.assert_array_equal(lib.run({"x": x, "y": x})[0], 2 * x)
    with pytest.raises(ValueError, match=r"input 'x' dimension 0 \(n\) is 9; the model was "
                                         r"compiled for 2~8"):
        lib.run({"x": np.ones((9, 4), np.float32), "y": np.ones((9, 4), np.float32)})
    with pytest.raises(ValueError, match=r"dimension 0 \(n\) is 1; the model was compiled for "
                                         r"2~8"):
        lib.run({"x": np.ones((1, 4), np.float32), "y": np.ones((1, 4), np.float32)})
    # inputs that share a dimension name share its size
    with pytest.raises(ValueError, match=r"input 'y' dimension 0 \(n\) is 3, but input 'x' "
                                         r"gave n = 4"):
        lib.run({"x": np.ones((4, 4), np.float32), "y": np.ones((3, 4), np.float32)})


def test_an_input_without_a_shape_is_an_error_naming_it():
    """An input with no shape at all (not even a rank) was imported as a 0-d tensor, and
    lib.run then refused the real input; it is an error naming the input, unless
    --input_shape gives the shape."""
    model = _relu_model(None)
    with pytest.raises(tvm_ascend.ModelLoadError, match=r"input 'x' declares no shape .*"
                                                        r"--input_shape \"x:d0,d1,...\""):
        tvm_ascend.build(model)
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(input_shape={"x": (2, 8)}))
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(lib.run({"x": x})[0], np.maximum(x, 0))


def test_a_zero_size_dimension_builds_and_matches_onnxruntime(caplog):
    """A dimension of 0 the model declares is a static empty tensor (it was taken for a
    dynamic one, with a warning saying so): the model builds and runs as onnxruntime does."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ReduceSum", ["r", "axes"], ["s"], name="sum", keepdims=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 8])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [0, 8]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with caplog.at_level("WARNING", logger="tvm_ascend.frontend"):
        lib = tvm_ascend.build(model)
    assert "dynamic" not in caplog.text
    for group in lib.fusion_report()["groups"]:  # said as such, not as a template's crash
        assert not group["on_npu"] and "ZeroDivisionError" not in group["reason"]
        assert "zero-size dimension" in group["reason"], group["reason"]
    feeds = {"x": np.ones((0, 8), np.float32)}
    for got, want in zip(lib.run(feeds), run_onnxruntime(model, feeds)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def _save(tmp_path, model, name="m.onnx"):
    import onnx

    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def test_model_files_that_are_empty_truncated_or_not_onnx_name_the_file(tmp_path):
    """Every cut of a valid file, an empty file and a text file: a ModelLoadError naming the
    file, never another exception (a cut at a field boundary parses as a smaller model)."""
    data = open(_save(tmp_path, _relu_model([4, 8])), "rb").read()
    bad = {"empty.onnx": b"", "notes.onnx": b"hello, this is a README\nnot a model\n"}
    bad.update({f"cut{n}.onnx": data[:n] for n in range(1, len(data), 7)})
    for name, content in bad.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(tvm_ascend.ModelLoadError, match=name):
            tvm_ascend.build(str(path))
    with pytest.raises(tvm_ascend.ModelLoadError, match=r"'.*empty.onnx' is empty \(0 bytes\)"):
        tvm_ascend.build(str(tmp_path / "empty.onnx"))


def test_a_model_failing_the_onnx_checker_names_the_file_and_the_fault(tmp_path):
    model = _relu_model([4, 8])
    model.graph.node[0].input.append("x")  # Relu takes one input
    with pytest.raises(tvm_ascend.ModelLoadError, match=r"'.*m.onnx' fails the ONNX checker: "
                                                        r".*input size 2"):
        tvm_ascend.build(_save(tmp_path, model))


def test_a_model_not_in_ssa_form_is_refused_naming_the_tensor_and_nodes():
    """A tensor produced twice was imported silently (the later producer won)."""
    from onnx import helper

    model = _relu_model([4, 8])
    model.graph.node.append(helper.make_node("Neg", ["x"], ["y"], name="neg"))
    with pytest.raises(tvm_ascend.ModelLoadError, match=r"tensor 'y' is produced by node "
                                                        r"'relu' and again by node 'neg'.*SSA"):
        tvm_ascend.build(model)


def test_an_opset_outside_the_supported_range_is_refused():
    import onnx

    model = _relu_model([4, 8])
    model.opset_import[0].version = 99
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(tvm_ascend.ModelLoadError,
                       match=rf"ai.onnx opset 99.*supported: opsets 1 to {newest}"):
        tvm_ascend.build(model)


def test_unknown_ops_and_custom_domains_are_refused_naming_the_node_and_op():
    """An op ONNX does not define, one TVM's importer cannot convert, and a node of a custom
    domain (TVM's importer ignored the domain and took com.acme's Relu for ONNX's)."""
    from onnx import helper

    for op, domain, message in (
            ("Frobnicate", "", r"node 'relu' has op type 'Frobnicate', which ONNX does not "
                               r"define"),
            ("Celu", "", r"node 'relu' \(Celu\): TVM's ONNX importer cannot convert it"),
            ("Relu", "com.acme", r"node 'relu' is op 'Relu' of the custom domain 'com.acme'")):
        model = _relu_model([4, 8])
        model.graph.node[0].op_type, model.graph.node[0].domain = op, domain
        if domain:
            model.opset_import.append(helper.make_opsetid(domain, 1))
        with pytest.raises(tvm_ascend.ModelLoadError, match=message):
            tvm_ascend.build(model)


def test_a_custom_domain_op_the_model_defines_as_a_function_is_inlined():
    """A custom op whose body the model carries (a local function) is expanded and built."""
    from onnx import TensorProto, helper

    body = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Neg", ["r"], ["b"])]
    function = helper.make_function("com.acme", "NegRelu", ["a"], ["b"], body,
                                    [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("NegRelu", ["x"], ["y"], name="negrelu", domain="com.acme")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 1)])
    feeds = {"x": np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)}
    np.testing.assert_array_equal(tvm_ascend.build(model).run(feeds)[0],
                                  run_onnxruntime(model, feeds)[0])


def test_unknown_names_in_no_fuse_nodes_or_keep_dtype_are_errors_with_the_closest_names():
    """Typos were accepted silently: the fence, or the kept dtype, applied to nothing."""
    model = _relu_model([4, 8])
    with pytest.raises(tvm_ascend.FusionConfigError,
                       match=r"--no_fuse_nodes names 'relU' \(did you mean relu\?\), which is "
                             r"not a node of the model \(its nodes: relu\)"):
        tvm_ascend.build(model, config=tvm_ascend.CompileConfig(no_fuse_nodes="relu,relU"))
    with pytest.raises(tvm_ascend.FusionConfigError,
                       match=r"--keep_dtype names 'rel' \(did you mean relu\?\), 'nope', which "
                             r"are not nodes"):
        tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
            precision_mode="force_fp16", keep_dtype="rel,nope"))
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(no_fuse_nodes="relu",
                                                                  keep_dtype="relu"))
    assert lib.fusion_report()["groups"][0]["onnx_nodes"] == ["relu"]


def test_an_import_failure_names_the_node_and_a_tvm_importer_limit_says_so():
    """ReduceSum/ReduceMean with axes fed at run time hit TVM's importer ("Only constant axes
    currently supported") with no word of which node, or that it is the importer's limit."""
    from onnx import TensorProto, helper

    for op, opset in (("ReduceSum", 13), ("ReduceMean", 18)):
        graph = helper.make_graph(
            [helper.make_node(op, ["x", "axes"], ["y"], name="reduce", keepdims=1)], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
             helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        with pytest.raises(tvm_ascend.ModelLoadError,
                           match=rf"node 'reduce' \({op}\): a limit of TVM's ONNX importer: "
                                 r"it needs the axes as a constant .* here they are 'axes', "
                                 r"computed at run time"):
            tvm_ascend.build(model)


def test_pow_on_integers_is_a_clear_refusal_naming_the_node():
    """Pow on int64 died in constant folding with TVM's raw InternalError ('power only applies
    to float')."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"], name="pow")], "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64, [3]) for n in ("x", "e")],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tvm_ascend.UnsupportedOpError,
                       match=r"node 'pow' \(Pow on int64\): TVM computes powers of floats "
                             r"only"):
        tvm_ascend.build(model)
    model.graph.input[1].type.tensor_type.elem_type = TensorProto.FLOAT  # int64 ** float32
    with pytest.raises(tvm_ascend.ModelLoadError,
                       match=r"node 'pow' \(Pow\): a limit of TVM's ONNX importer: it takes "
                             r"both operands of Pow in one dtype"):
        tvm_ascend.build(model)


def test_a_reduction_with_an_axes_input_of_static_length_0_builds_as_onnxruntime_runs_it():
    """ONNX's default_axes node tests feed the axes as a graph input of shape [0]: empty at
    every run, so known at compile time (reduce all, or nothing with noop_with_empty_axes);
    TVM's importer refused them as non-constant axes."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 2, 2)).astype(np.float32),
             "axes": np.zeros((0,), np.int64)}
    for op, opset, noop in (("ReduceSum", 13, 0), ("ReduceSum", 13, 1), ("ReduceMean", 18, 0)):
        graph = helper.make_graph(
            [helper.make_node(op, ["x", "axes"], ["y"], name="reduce", keepdims=1,
                              noop_with_empty_axes=noop)], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2, 2]),
             helper.make_tensor_value_info("axes", TensorProto.INT64, [0])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        (got,), (want,) = tvm_ascend.build(model).run(feeds), run_onnxruntime(model, feeds)
        assert got.shape == want.shape, (op, noop)
        assert_close(got, want, "float32")


def test_a_contrib_op_tvm_converts_still_builds_and_matches_onnxruntime():
    """The custom-domain refusal leaves com.microsoft ops TVM's importer converts alone."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("FastGelu", ["x"], ["y"], name="gelu", domain="com.microsoft")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    feeds = {"x": np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)}
    assert_close(tvm_ascend.build(model).run(feeds)[0], run_onnxruntime(model, feeds)[0],
                 "float32")
