"""ATC's gears: --dynamic_batch_size / --dynamic_image_size / --dynamic_dims, one library.

Every gear is checked against onnxruntime, kernels equal across gears are counted once, the
library exports and loads as one file, the CLI takes ATC's flags, and every rule's error names
the flag and the value.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import tvm
import tvm_ffi
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend import CompileConfig, FusionConfigError
from tvm_ascend.cli import main as cli_main
from tvm_ascend.frontend.gears import gear_spec


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "gears", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv+Relu, global pool, Flatten, MatMul: N, H and W symbolic."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "fw")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fw"], ["y"], name="fc")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        ["N", 3, "H", "W"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)


def small_encoder(seed: int = 1) -> onnx.ModelProto:
    """A transformer-ish ND block on (batch, seq, 32): projection + bias, Softmax over the
    hidden axis, a second projection, a residual Add; a static side input ``s`` (4, 32)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.2).astype(np.float32),
                                     "w1"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.2).astype(np.float32),
                                     "w2")]
    nodes = [helper.make_node("MatMul", ["t", "w1"], ["m1"], name="proj"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="bias"),
             helper.make_node("Softmax", ["a1"], ["sm"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["sm", "w2"], ["m2"], name="proj2"),
             helper.make_node("Add", ["m2", "t"], ["y"], name="residual"),
             helper.make_node("Tanh", ["s"], ["st"], name="side"),
             helper.make_node("Mul", ["st", "s"], ["z"], name="side_mul")]
    return _model(nodes, [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["B", "S", 32]),
                          helper.make_tensor_value_info("s", TensorProto.FLOAT, [4, 32])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 32]),
                   helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 32])], inits)


def _feeds(shapes: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


@pytest.fixture(scope="module")
def batch_lib():
    model = small_cnn()
    config = CompileConfig(input_shape={"x": (-1, 3, 8, 8)}, dynamic_batch_size="1,2,4")
    return model, tvm_ascend.build(model, config=config)


@pytest.fixture(scope="module")
def image_lib():
    model = small_cnn()
    config = CompileConfig(input_shape={"x": (2, 3, -1, -1)},
                           dynamic_image_size=((8, 8), (12, 20)))
    return model, tvm_ascend.build(model, config=config)


@pytest.fixture(scope="module")
def dims_lib():
    model = small_encoder()
    config = CompileConfig(input_shape={"t": (-1, -1, 32), "s": (4, 32)},
                           dynamic_dims="1,16;2,8;3,33", input_format="ND")
    return model, tvm_ascend.build(model, config=config)


# ---- numerics of every gear ---------------------------------------------------------------

def test_every_batch_gear_matches_onnxruntime(batch_lib):
    model, lib = batch_lib
    assert type(lib).__name__ == "GearedModule"
    for batch in (1, 2, 4):
        feeds = _feeds({"x": (batch, 3, 8, 8)}, batch)
        assert lib.gear_of(feeds)["values"] == [batch]
        got = lib.run(feeds)[0]
        assert got.shape == (batch, 10)
        assert_close(got, run_onnxruntime(model, feeds)[0], "cube/float32")


def test_every_image_gear_matches_onnxruntime(image_lib):
    model, lib = image_lib
    for hw in ((8, 8), (12, 20)):
        feeds = _feeds({"x": (2, 3) + hw}, hw[1])
        assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "cube/float32")


def test_every_dims_gear_matches_onnxruntime_with_tails(dims_lib):
    model, lib = dims_lib
    for dims in ((1, 16), (2, 8), (3, 33)):  # 3x33 rows: a tail on every core split
        feeds = _feeds({"t": dims + (32,), "s": (4, 32)}, dims[1])
        got = lib.run(feeds)
        for actual, expected in zip(got, run_onnxruntime(model, feeds)):
            assert_close(actual, expected, "float32_model")


def test_each_gear_has_its_static_builds_kernels(batch_lib):
    """A gear is the static build of its shape: the same kernels, printed alike."""
    model, lib = batch_lib
    static = tvm_ascend.build(model, config=CompileConfig(input_shape={"x": (2, 3, 8, 8)}))
    section = lib.fusion_report()["gears"][1]
    sources = lib.kernel_sources()
    static_sources = static.kernel_sources()
    assert section["npu_kernels"] == static.fusion_report()["npu_kernels"]
    for planned, stored in section["kernel_symbols"].items():
        assert sources[stored].replace(stored, planned) == static_sources[planned]


# ---- kernels and weights stored once --------------------------------------------------------

def test_kernels_equal_across_gears_are_stored_once(image_lib, tmp_path):
    """The MatMul behind the global pool sees (2, 8) x (8, 10) at every image size: one copy;
    the conv and the pool differ per gear."""
    _, lib = image_lib
    report = lib.fusion_report()
    assert report["npu_kernels_per_gear"] == [3, 3]
    assert report["kernels_shared"] == 1
    assert report["npu_kernels"] == 5 == len(lib.kernel_sources())
    first, second = (g["kernel_symbols"] for g in report["gears"])
    shared = set(first.values()) & set(second.values())
    assert len(shared) == 1 and "matmul" in next(iter(shared))
    lib.profile(reset=True)
    lib.run(_feeds({"x": (2, 3, 8, 8)}))
    lib.run(_feeds({"x": (2, 3, 12, 20)}))
    launched = [record["kernel"] for record in lib.profile(reset=False)]
    assert len(launched) == 6 and len(set(launched)) == 5  # the MatMul ran in both gears
    assert launched[2] == launched[5] == next(iter(shared))
    lib.profile(output=tmp_path)  # msprof-style rows: every launch has its gear's estimate
    with open(tmp_path / "op_summary.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 and all(row["Task Duration(us)"] != "N/A" for row in rows)


def test_static_side_branch_is_shared_by_every_dims_gear(dims_lib):
    _, lib = dims_lib
    report = lib.fusion_report()
    maps = [g["kernel_symbols"] for g in report["gears"]]
    common = set(maps[0].values()) & set(maps[1].values()) & set(maps[2].values())
    assert len(common) == 1 and "tanh" in next(iter(common))  # on the static (4, 32) input
    # 1x16 and 2x8 are both 16 rows of 32: a kernel that sees only the rows is one kernel
    rows16 = set(maps[0].values()) & set(maps[1].values())
    assert len(rows16) == 2 and len(rows16 - common) == 1
    stored = set().union(*(m.values() for m in maps))
    assert report["npu_kernels"] == len(stored) == len(lib.kernel_sources()) == 9
    assert sum(report["npu_kernels_per_gear"]) == 12


def test_weights_are_stored_once_for_all_gears(dims_lib):
    """The two 32x32 projections (4 KiB each, lifted out of the code) are in every gear's
    arguments and once in the library."""
    _, lib = dims_lib
    gears = lib.metadata["gears"]
    assert len({tuple(g["weights"]) for g in gears}) == 1
    assert len(lib._weights) == len(gears[0]["weights"]) == 2  # noqa: SLF001


# ---- report: a section per gear with its peak memory -----------------------------------------

def test_report_has_a_section_and_peak_memory_per_gear(batch_lib):
    _, lib = batch_lib
    report = lib.fusion_report()
    assert report["gear_flag"] == "dynamic_batch_size"
    assert [g["gear"] for g in report["gears"]] == ["x:1,3,8,8", "x:2,3,8,8", "x:4,3,8,8"]
    peaks = [g["peak_memory_bytes"] for g in report["gears"]]
    assert peaks[0] < peaks[1] < peaks[2]  # buffers planned per gear, growing with the batch
    assert report["peak_memory_bytes"] == peaks[2]
    assert report["peak_memory_bytes_per_gear"] == dict(zip(report["gear_labels"], peaks))
    text = str(lib.report)
    assert text.count("== gear ") == 3 and f"peak memory {peaks[2]} B" in text
    for section in report["gears"]:
        assert {g["kernel"] for g in section["groups"] if g["on_npu"]} <= \
            set(lib.kernel_sources())


# ---- export, load, run in a fresh process ----------------------------------------------------

def test_export_and_load_round_trip_in_a_fresh_process(batch_lib, tmp_path):
    model, lib = batch_lib
    path = tmp_path / "gears.so"
    lib.export_library(path)
    feeds = _feeds({"x": (4, 3, 8, 8)}, 7)
    np.save(tmp_path / "x.npy", feeds["x"])
    script = textwrap.dedent(f"""
        import json, numpy as np, tvm_ascend
        lib = tvm_ascend.load({str(path)!r})
        out = lib.run({{"x": np.load({str(tmp_path / 'x.npy')!r})}})[0]
        np.save({str(tmp_path / 'out.npy')!r}, out)
        try:
            lib.run({{"x": np.zeros((3, 3, 8, 8), np.float32)}})
        except ValueError as err:
            error = str(err)
        print(json.dumps({{"cls": type(lib).__name__, "gears": len(lib.gears),
                          "error": error}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["cls"] == "GearedModule" and info["gears"] == 3
    assert "dimension 0 is 3" in info["error"]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), lib.run(feeds)[0])
    assert_close(np.load(tmp_path / "out.npy"), run_onnxruntime(model, feeds)[0],
                 "cube/float32")


# ---- run-time errors -----------------------------------------------------------------------

def test_a_shape_in_no_gear_names_the_input_dimension_and_the_gears(batch_lib):
    _, lib = batch_lib
    with pytest.raises(ValueError) as err:
        lib.run({"x": np.zeros((3, 3, 8, 8), np.float32)})
    text = str(err.value)
    assert "input 'x' dimension 0 is 3" in text and "1/2/4" in text
    assert "gear 0: x:1,3,8,8; gear 1: x:2,3,8,8; gear 2: x:4,3,8,8" in text
    with pytest.raises(ValueError, match=r"input 'x' dimension 2 is 9.*static dimension.* 8"):
        lib.run({"x": np.zeros((2, 3, 9, 8), np.float32)})
    with pytest.raises(ValueError, match=r"input 'x' has shape \(2, 3, 8\) \(3-D\)"):
        lib.run({"x": np.zeros((2, 3, 8), np.float32)})
    with pytest.raises(ValueError, match=r"dtype float64; the model expects float32"):
        lib.run({"x": np.zeros((2, 3, 8, 8))})


def test_sizes_of_different_gears_together_match_no_gear(dims_lib):
    _, lib = dims_lib
    feeds = {"t": np.zeros((1, 8, 32), np.float32), "s": np.zeros((4, 32), np.float32)}
    with pytest.raises(ValueError, match=r"t:1,8,32; s:4,32 match no gear together.*"
                                         r"gear 0: t:1,16,32; gear 1: t:2,8,32"):
        lib.run(feeds)


# ---- ATC's rules, each error naming the flag and the value ------------------------------------

@pytest.mark.parametrize("shape, kwargs, message", [
    ({"x": (-1, 3, 8, 8)}, dict(dynamic_batch_size="4"),
     r"--dynamic_batch_size \(CompileConfig.dynamic_batch_size\) '4' gives 1 gear\(s\); "
     r"ATC allows 2 to 100"),
    ({"x": (-1, 3, 8, 8)}, dict(dynamic_batch_size=",".join(map(str, range(1, 103)))),
     r"gives 102 gear\(s\); ATC allows 2 to 100"),
    ({"x": (-1, 3, 8, 8)}, dict(dynamic_batch_size="1,two"),
     r"--dynamic_batch_size .* '1,two': 'two' is not an integer; give batch sizes"),
    ({"x": (-1, 3, 8, 8)}, dict(dynamic_batch_size="1,0"), r"'1,0': 0 is not a positive size"),
    ({"x": (-1, 3, 8, 8)}, dict(dynamic_batch_size="2,4,2"),
     r"'2,4,2': gear 3 \(2\) repeats gear 1"),
    ({"x": (-1, 3, 8, 8)}, dict(dynamic_batch_size="1,4096"),
     r"batch size 4096 is above ATC's limit of 2048"),
    ({"x": (1, 3, -1, 8)}, dict(dynamic_batch_size="1,2"),
     r"x:1,3,-1,8 has -1 at dimension 2; only dimension 0 \(the batch, N\) may be -1"),
    ({"x": (1, 3, 8, 8)}, dict(dynamic_batch_size="1,2"),
     r"--dynamic_batch_size .* needs -1 in --input_shape .* given x:1,3,8,8"),
    ({}, dict(dynamic_image_size="8,8;16,16"), r"given no --input_shape"),
    ({"x": ((1, 4), 3, 8, 8)}, dict(dynamic_batch_size="1,2"),
     r"dimension 0 is a range \(1~4\), which cannot be combined with --dynamic_batch_size"),
    ({"x": (-1, 3, 8, 8)}, dict(dynamic_batch_size="1,2", dynamic_image_size="8,8;9,9"),
     r"--dynamic_batch_size and --dynamic_image_size are given together; .* mutually "
     r"exclusive"),
    ({"x": (1, 3, -1, 8)}, dict(dynamic_image_size="8,8;16,16"),
     r"x:1,3,-1,8 must be 4-D NCHW with -1 at exactly H and W \(dimensions 2 and 3\)"),
    ({"x": (1, -1, -1, 3)}, dict(dynamic_image_size="8,8;16,16"),
     r"x:1,-1,-1,3 must be 4-D NCHW"),
    ({"x": (1, 3, -1, -1)}, dict(dynamic_image_size="8,8;16"),
     r"'8,8;16': gear 16 has 1 value\(s\); each gear is H,W"),
    ({"x": (1, 3, -1, -1)}, dict(dynamic_image_size="8,8;9,9", input_format="ND"),
     r"--dynamic_image_size needs --input_format NCHW or NHWC"),
    ({"x": (1, 3, -1, -1)}, dict(dynamic_image_size="8,8;9,9", input_format="NC1HWC0"),
     r"--input_format \(CompileConfig.input_format\) 'NC1HWC0' is not one of NCHW, NHWC, ND"),
    ({"t": (-1, -1, 32)}, dict(dynamic_dims="1,16;2,8"),
     r"--dynamic_dims .* needs --input_format ND"),
    ({"t": (-1, -1, 32)}, dict(dynamic_dims="1,16;2,8", input_format="NCHW"),
     r"--dynamic_dims needs --input_format ND \(given NCHW\)"),
    ({"t": (-1, -1, 32)}, dict(dynamic_dims="1,16;2,8,4", input_format="ND"),
     r"gear 2,8,4 has 3 value\(s\), but --input_shape t:-1,-1,32 has 2 -1\(s\) "
     r"\(t dim 0, t dim 1\)"),
    ({"t": (-1, -1, 32)}, dict(dynamic_dims="1,16;1,16", input_format="ND"),
     r"gear 2 \(1,16\) repeats gear 1"),
])
def test_atc_rules_are_errors_naming_the_flag_and_value(shape, kwargs, message):
    with pytest.raises(FusionConfigError, match=message):
        gear_spec(shape, **kwargs)


def test_nhwc_image_gears_and_tuple_values():
    spec = gear_spec({"x": (1, -1, -1, 3)}, dynamic_image_size=[[8, 8], [16, 24]],
                     input_format="nhwc")
    assert [g.shapes["x"] for g in spec.gears] == [(1, 8, 8, 3), (1, 16, 24, 3)]
    spec = gear_spec({"a": (-1, 4), "b": (-1, -1)}, dynamic_dims=((1, 2, 3), (4, 5, 6)),
                     input_format="ND")
    assert spec.gears[1].shapes == {"a": (4, 4), "b": (5, 6)}
    assert spec.gears[1].label == "a:4,4;b:5,6"


def test_build_checks_the_gears_before_any_work():
    with pytest.raises(FusionConfigError, match="--dynamic_batch_size"):
        tvm_ascend.build(small_cnn(), config=CompileConfig(input_shape={"x": (-1, 3, 8, 8)},
                                                           dynamic_batch_size="8"))


# ---- the command line: compile and compare -------------------------------------------------

def test_cli_compile_with_atc_gear_flags(tmp_path, capsys):
    model_path, out = tmp_path / "cnn.onnx", tmp_path / "cnn.so"
    onnx.save(small_cnn(), model_path)
    code = cli_main(["compile", "--model", str(model_path), "--output", str(out),
                     "--input_shape", "x:-1,3,8,8", "--dynamic_batch_size", "1,2,4"])
    printed = capsys.readouterr().out
    assert code == 0 and "3 gears (dynamic_batch_size)" in printed
    lib = tvm_ascend.load(out)
    feeds = _feeds({"x": (2, 3, 8, 8)})
    assert_close(lib.run(feeds)[0], run_onnxruntime(small_cnn(), feeds)[0], "cube/float32")
    counts = json.loads((tmp_path / "fusion_result.json").read_text())
    assert counts  # summed over the gears
    code = cli_main(["compile", "--model", str(model_path), "--output", str(out),
                     "--input_shape", "x:-1,3,8,8", "--dynamic_batch_size", "1,2,2"])
    assert code == 2
    assert "--dynamic_batch_size (CompileConfig.dynamic_batch_size) '1,2,2': gear 3 (2) " \
        "repeats gear 2" in capsys.readouterr().err


def test_cli_compare_has_a_row_per_gear(tmp_path, capsys):
    model_path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model_path)
    code = cli_main(["compare", "--model", str(model_path), "--input_shape", "x:-1,3,8,8",
                     "--dynamic_batch_size", "1,2,4", "--variants", "conservative",
                     "--no_groups"])
    printed = capsys.readouterr().out
    assert code == 0
    rows = [line for line in printed.splitlines() if line.startswith("conservative [")]
    assert [row.split("]")[0] + "]" for row in rows] == [
        "conservative [x:1,3,8,8]", "conservative [x:2,3,8,8]", "conservative [x:4,3,8,8]"]
    errors = [float(row.rsplit("y: ", 1)[1]) for row in rows]
    assert max(errors) < 1e-4


# ---- a ResNet-50 (reduced) with ATC's --dynamic_batch_size "1,8,32" ------------------------

def _dynamic_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with dimension 0 of its input and outputs symbolic (N), as an exporter with
    a dynamic batch writes it."""
    for value in list(model.graph.input) + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    return model


@pytest.mark.slow  # 42 s of four builds; the default run keeps the other gear tests and the
# fuzzer's geared cases, and -m slow adds the whole ResNet-50 below
def test_resnet_batch_gears_each_equal_their_static_build():
    """ResNet-50's structure (v1.5 bottlenecks, BatchNorm folded, MaxPool, Gemm head), width
    8, one block per stage and 32x32 images to stay fast: each gear of "1,8,32" prints the
    static build's kernels, estimates what it does and gives its very numbers."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from benchmarks.models import resnet50

    model = _dynamic_batch(resnet50.resnet50_model(image=32, width=8, blocks=(1, 1, 1, 1),
                                                   classes=10))
    lib = tvm_ascend.build(model, config=CompileConfig(input_shape={"input": (-1, 3, 32, 32)},
                                                       dynamic_batch_size="1,8,32"))
    report = lib.fusion_report()
    sources = lib.kernel_sources()
    for section, batch in zip(report["gears"], (1, 8, 32)):
        static = tvm_ascend.build(model, config=CompileConfig(
            input_shape={"input": (batch, 3, 32, 32)}))
        static_report = static.fusion_report()
        assert section["npu_kernels"] == static_report["npu_kernels"]
        assert section["host_groups"] == static_report["host_groups"] == 0
        assert section["estimate"]["latency_us"] == static_report["estimate"]["latency_us"]
        assert section["peak_memory_bytes"] == static_report["peak_memory_bytes"]
        for planned, stored in section["kernel_symbols"].items():
            assert sources[stored].replace(stored, planned) == static.kernel_sources()[planned]
        feeds = resnet50.example_inputs(batch=batch, image=32, seed=batch)
        got = lib.run(feeds)[0]
        np.testing.assert_array_equal(got, static.run(feeds)[0])
        assert_close(got, run_onnxruntime(model, feeds)[0], "cube/float32")


# ---- fallback, build cache and dumps, as a static build has them ------------------------------

def _chain_with_dynamic_batch() -> onnx.ModelProto:
    """x + b -> Relu -> * 3 on (N, 40): one elementwise kernel of three ops per gear."""
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.full([40], -0.5, np.float32), "b"),
             numpy_helper.from_array(np.array(3.0, np.float32), "k")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 40])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 40])], inits)


def test_a_kernel_failing_to_compile_in_each_gear_is_split_in_that_gear(monkeypatch):
    from build_checks import _printer_failing

    monkeypatch.delenv("TVM_ASCEND_STRICT", raising=False)
    _printer_failing(monkeypatch, lambda ops: ops > 1, "cxx")
    model = _chain_with_dynamic_batch()
    lib = tvm_ascend.build(model, config=CompileConfig(input_shape={"x": (-1, 40)},
                                                       dynamic_batch_size="2,6"))
    report = lib.fusion_report()
    failures = report["kernel_failures"]
    assert [f["gear"] for f in failures] == ["x:2,40", "x:6,40"]
    assert all(f["stage"] == "compile" and f["action"] == "split" for f in failures)
    assert report["npu_kernels_per_gear"] == [3, 3]
    for batch in (2, 6):
        feeds = _feeds({"x": (batch, 40)}, batch)
        assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")


def test_a_geared_build_comes_back_whole_from_the_build_cache(monkeypatch):
    monkeypatch.setenv("TVM_ASCEND_BUILD_CACHE", "1")
    model = _chain_with_dynamic_batch()
    config = CompileConfig(input_shape={"x": (-1, 40)}, dynamic_batch_size="1,3")
    first = tvm_ascend.build(model, config=config)
    again = tvm_ascend.build(model, config=config)
    assert type(again).__name__ == "GearedModule" and again._executable is None  # noqa: SLF001
    feeds = _feeds({"x": (3, 40)})
    np.testing.assert_array_equal(again.run(feeds)[0], first.run(feeds)[0])
    other = tvm_ascend.build(model, config=config.replace(dynamic_batch_size="1,4"))
    assert [g["label"] for g in other.gears] == ["x:1,40", "x:4,40"]


def test_dumps_have_a_folder_per_gear(tmp_path):
    model = _chain_with_dynamic_batch()
    tvm_ascend.build(model, config=CompileConfig(
        input_shape={"x": (-1, 40)}, dynamic_batch_size="2,5", dump_graph=True,
        dump_path=str(tmp_path)))
    for index, batch in enumerate((2, 5)):
        folder = tmp_path / f"gear{index}"
        report = json.loads((folder / "fusion_report.json").read_text())
        assert report["gear"] == f"x:{batch},40"
        assert (folder / "000_imported.py").exists() and (folder / "fusion_result.json").exists()
        assert len(list((folder / "kernels").glob("*.cpp"))) == report["npu_kernels"] == 1


def _host_layernorm_with_dynamic_batch() -> onnx.ModelProto:
    """x + x -> LayerNormalization over axis -3 of (N, 7, 16, 1): the Add on the NPU, the
    LayerNormalization (not over the last axes) kept on the host as a TIR function."""
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("LayerNormalization", ["a", "g", "b"], ["y"], name="ln", axis=-3)]
    rng = np.random.default_rng(12)
    inits = [numpy_helper.from_array(rng.random([7, 16, 1], dtype=np.float32), n)
             for n in ("g", "b")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 7, 16, 1])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 7, 16, 1])], inits)
    model.opset_import[0].version = 18
    return model


def test_host_tir_functions_keep_their_type_when_renamed_per_gear():
    """Regression (fuzz gears, sample case 0-12 off): ``gear_build._prefixed`` made each
    renamed GlobalVar afresh, so a host TIR function (an op kept on the host) lost its type
    and normalising the gear's host program failed ("The ty of an Expr ... must not be
    missing ... GlobalVar("gear0_layer_norm")"). Every renamed GlobalVar keeps its type, and
    a build with an op on the host runs every gear."""
    from tvm_ascend.gear_build import _prefixed

    host = tvm.relax.transform.LegalizeOps()(tvm_ascend.frontend.load_model(
        _chain_with_dynamic_batch(), {"x": (3, 40)}, checked=True))
    renamed = _prefixed(host, "gear7_")
    before = {gv.name_hint: gv for gv in host.get_global_vars()}
    assert any(not isinstance(f, tvm.relax.Function) for f in host.functions.values())
    for gv in renamed.get_global_vars():
        assert gv.name_hint.startswith("gear7_")
        old = before[gv.name_hint[len("gear7_"):]]
        assert gv.ty is not None and tvm_ffi.structural_equal(gv.ty, old.ty), gv.name_hint
    model = _host_layernorm_with_dynamic_batch()
    lib = tvm_ascend.build(model, config=CompileConfig(
        input_shape={"x": (-1, 7, 16, 1)}, dynamic_batch_size="2,5"))
    report = lib.fusion_report()
    assert [s["host_groups"] for s in report["gears"]] == [1, 1]
    assert report["npu_kernels_per_gear"] == [1, 1]
    for batch in (2, 5):
        feeds = _feeds({"x": (batch, 7, 16, 1)}, batch)
        assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")


@pytest.mark.slow
def test_full_resnet50_batch_gears_1_8_32_each_equal_their_static_build(tmp_path):
    """Issue 20's target: the whole ResNet-50 (3, 4, 6, 3 bottlenecks, width 64, 1000
    classes) with ATC's ``--dynamic_batch_size "1,8,32"`` is one library, exported and
    loaded, whose three gears each print the static build's kernels, estimate what it does
    and give its very numbers (64x64 images: the layers and kernels of 224x224 at a twelfth
    of the emulated work; several minutes)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from benchmarks.models import resnet50

    model = _dynamic_batch(resnet50.resnet50_model(image=64))
    lib = tvm_ascend.build(model, config=CompileConfig(input_shape={"input": (-1, 3, 64, 64)},
                                                       dynamic_batch_size="1,8,32"))
    path = tmp_path / "resnet50_gears.so"
    lib.export_library(str(path))
    loaded = tvm_ascend.load(str(path))
    report = lib.fusion_report()
    assert [g["label"] for g in loaded.gears] == [f"input:{b},3,64,64" for b in (1, 8, 32)]
    sources = lib.kernel_sources()
    for section, batch in zip(report["gears"], (1, 8, 32)):
        static = tvm_ascend.build(model, config=CompileConfig(
            input_shape={"input": (batch, 3, 64, 64)}))
        static_report = static.fusion_report()
        assert section["npu_kernels"] == static_report["npu_kernels"] >= 20
        assert section["host_groups"] == static_report["host_groups"] == 0
        assert section["estimate"]["latency_us"] == static_report["estimate"]["latency_us"]
        assert section["peak_memory_bytes"] == static_report["peak_memory_bytes"]
        for planned, stored in section["kernel_symbols"].items():
            assert sources[stored].replace(stored, planned) == static.kernel_sources()[planned]
        feeds = resnet50.example_inputs(batch=batch, image=64, seed=batch)
        got = loaded.run(feeds)[0]
        assert got.shape == (batch, 1000)
        np.testing.assert_array_equal(got, static.run(feeds)[0])
        assert_close(got, run_onnxruntime(model, feeds)[0], "cube/float32")
