"""Gather indices past their table: refused at build or at run time (frontend/index_bounds.py).

The regression: the dynamic exports of tests/corpus/dynamic have 32 position rows. Built with
``input_shape={"input_ids": (2, "2~64")}`` and run at a length above 32, BERT segfaulted in
TVM's host Gather (its Slice of the 32-entry ``position_ids`` buffer gave fewer rows than
seq), and GPT-2 read past ``wpe`` without a word (its ``Range(0, seq)`` positions). Now the
build refuses the range, naming the node, the table, the input, the dimension and the range that
fits, and ``lib.run`` refuses token ids outside their embedding table. The bad cases run in a
subprocess: a segfault there fails a test and does not kill the pytest worker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend import CompileConfig, ModelLoadError
from tvm_ascend.frontend import load_model
from tvm_ascend.runtime.module import load

REPO = Path(__file__).resolve().parents[1]
DYNAMIC = REPO / "tests" / "corpus" / "dynamic"
POSITIONS = 16  # rows of the hand-made model's position table


def _int(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _embedding_model(shift: int = 0) -> onnx.ModelProto:
    """y = wte[ids] + wpe[Range(0, Shape(ids)[1]) + shift]: GPT-2's embeddings over (2, s)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["tok"], name="embed_tokens"),
             helper.make_node("Shape", ["ids"], ["s1"], start=1, end=2),
             helper.make_node("Squeeze", ["s1"], ["s"]),
             helper.make_node("Range", ["zero", "s", "one"], ["pos0"], name="positions"),
             helper.make_node("Add", ["pos0", "shift"], ["pos"]),
             helper.make_node("Unsqueeze", ["pos", "axis0"], ["pos2"]),
             helper.make_node("Gather", ["wpe", "pos2"], ["posv"], name="embed_positions"),
             helper.make_node("Add", ["tok", "posv"], ["y"])]
    inits = [numpy_helper.from_array(rng.standard_normal((96, 8)).astype(np.float32), "wte"),
             numpy_helper.from_array(rng.standard_normal((POSITIONS, 8)).astype(np.float32),
                                     "wpe"),
             _int("zero", 0), _int("one", 1), _int("shift", shift), _int("axis0", [0])]
    graph = helper.make_graph(nodes, "embeddings",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, "s"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [2, "s", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def _slice_model(start: int = 0) -> onnx.ModelProto:
    """BERT's spelling: positions = position_ids[:, start:s] of a constant (1, 16) buffer
    (start 0: added to x; otherwise the s - start embedded positions are the output)."""
    nodes = [helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
             helper.make_node("Slice", ["position_ids", "start1", "s1", "one1"], ["pos"],
                              name="slice_positions"),
             helper.make_node("Gather", ["wpe", "pos"], ["posv" if start == 0 else "y"],
                              name="embed_positions")]
    if start == 0:
        nodes.append(helper.make_node("Add", ["x", "posv"], ["y"]))
    inits = [_int("position_ids", np.arange(POSITIONS)[None]), _int("start1", [start]),
             _int("one1", [1]),
             numpy_helper.from_array(np.ones((64, 8), np.float32), "wpe")]
    out = [1, "s", 8] if start == 0 else [1, "t", 8]
    graph = helper.make_graph(nodes, "positions",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


# ---- build time, in this process: the import refuses before any planning ---------------------
def test_a_range_past_the_position_table_names_node_table_input_range_and_fix():
    with pytest.raises(ModelLoadError) as err:
        load_model(_embedding_model(), {"ids": (2, (2, 20))})
    text = str(err.value)
    assert "Gather 'embed_positions'" in text and f"{POSITIONS}-row table 'wpe'" in text
    assert "Range(0, s, 1) at node 'positions'" in text and "indices up to 19" in text
    assert "input 'ids' dimension 1 (s)" in text and "2~20" in text
    assert f'--input_shape "ids:2,2~{POSITIONS}"' in text


def test_a_range_up_to_the_table_imports():
    mod = load_model(_embedding_model(), {"ids": (2, (2, POSITIONS))})
    assert json.loads(mod["main"].attrs["ascend.dim_ranges"]) == {"s": [2, POSITIONS]}
    # the token ids index wte: lib.run checks them (positions are covered by the range)
    assert json.loads(mod["main"].attrs["ascend.index_inputs"]) == [
        {"input": "ids", "node": "embed_tokens", "op": "Gather", "table": "wte", "rows": 96}]


def test_an_offset_position_cuts_the_range_that_fits_by_the_offset():
    """positions + 2 (a past length): s up to 14 keeps the largest index at 15."""
    with pytest.raises(ModelLoadError, match=r'up to 14 .*"ids:2,2~14"'):
        load_model(_embedding_model(shift=2), {"ids": (2, (2, 15))})
    load_model(_embedding_model(shift=2), {"ids": (2, (2, 14))})


def test_a_float_buffer_sliced_on_two_axes_past_its_end_is_refused():
    """GPT-2's causal buffer bias[:, :, :s, :s] (a float constant of 16 x 16 here)."""
    nodes = [helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
             helper.make_node("Concat", ["s1", "s1"], ["ends"], axis=0),
             helper.make_node("Slice", ["bias", "zeros", "ends", "axes"], ["b"], name="causal"),
             helper.make_node("Add", ["x", "b"], ["y"])]
    inits = [numpy_helper.from_array(np.tril(np.ones((1, POSITIONS, POSITIONS), np.float32)),
                                     "bias"), _int("zeros", [0, 0]), _int("axes", [1, 2])]
    square = [1, "s", "s"]
    graph = helper.make_graph(nodes, "causal",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, square)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, square)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    with pytest.raises(ModelLoadError, match=r"Slice 'causal' takes entries 0..s-1 of the "
                                             r"constant 'bias' \(16 along axis 1\)"):
        load_model(model, {"x": (1, (1, 20), (1, 20))})


def test_a_slice_of_a_constant_past_its_end_names_the_slice_and_the_constant():
    with pytest.raises(ModelLoadError) as err:
        load_model(_slice_model(), {"x": (1, (1, 24), 8)})
    text = str(err.value)
    assert "Slice 'slice_positions'" in text and "'position_ids' (16 along axis 1)" in text
    assert "1~24" in text and '"x:1,1~16,8"' in text
    load_model(_slice_model(), {"x": (1, (1, 16), 8)})


def test_a_slice_from_a_later_start_ends_at_s_not_past_it():
    """ONNX's Slice end is absolute: position_ids[:, 1:s] reads entries 1..s-1, so s up to
    the 16 entries fits; the check took it as s entries from 1 and refused s = 16."""
    load_model(_slice_model(start=1), {"x": (1, (2, POSITIONS), 8)})
    with pytest.raises(ModelLoadError, match=r"takes entries 1..s-1 of the constant "
                                             r"'position_ids' \(16 along axis 1\)"):
        load_model(_slice_model(start=1), {"x": (1, (2, POSITIONS + 1), 8)})


# ---- the corpus's dynamic exports and the run-time check, in a subprocess --------------------
_SCRIPT = r"""
import json, sys
import numpy as np
import onnx
import tvm_ascend
from tvm_ascend import CompileConfig

dynamic, model_path, out_path = sys.argv[1:4]
results = {}

def shapes(spec):
    return {"input_ids": (2, spec), "attention_mask": (2, spec)}

def attempt(key, make):
    try:
        make()
        results[key] = {"error": None}
    except Exception as err:  # the test reads the type and message
        results[key] = {"error": type(err).__name__, "message": str(err)}

def build_and_run_past_the_table(name):
    # before the check this built, and the run at 40 segfaulted (BERT) or read past wpe
    lib = tvm_ascend.build(f"{dynamic}/{name}_dynamo_op18_fp32_dynseq.onnx",
                           config=CompileConfig(input_shape=shapes("2~64")))
    lib.run({"input_ids": np.ones((2, 40), np.int64),
             "attention_mask": np.ones((2, 40), np.int64)})

for name in ("bert", "gpt2"):
    attempt(name, lambda: build_and_run_past_the_table(name))
model = onnx.load(model_path)
lib = tvm_ascend.build(model, config=CompileConfig(input_shape={"ids": (2, "2~16")}))
arrays = {}
for length in (5, 16):
    ids = np.random.default_rng(length).integers(-96, 96, (2, length)).astype(np.int64)
    arrays[f"ids{length}"], arrays[f"y{length}"] = ids, lib.run({"ids": ids})[0]
for bad in (96, -97):
    ids = np.zeros((2, 5), np.int64)
    ids[1, 3] = bad
    attempt(f"ids{bad}", lambda: lib.run({"ids": ids}))
np.savez(out_path, **arrays)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def bad_cases(tmp_path_factory):
    """The subprocess's results: {case: {"error", "message"}} and its arrays."""
    folder = tmp_path_factory.mktemp("index_bounds")
    model_path, out_path = folder / "embeddings.onnx", folder / "runs.npz"
    onnx.save(_embedding_model(), str(model_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(DYNAMIC), str(model_path),
                           str(out_path)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, (f"the subprocess died (rc {done.returncode}; -11 is a "
                                  f"segfault): {done.stderr[-3000:]}")
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return results, dict(np.load(out_path))


def test_bert_with_a_range_past_its_32_positions_is_a_clear_build_error(bad_cases):
    result = bad_cases[0]["bert"]
    assert result["error"] == "ModelLoadError", result
    text = result["message"]
    assert "Slice 'node_slice_1'" in text and "'model.embeddings.position_ids'" in text
    assert "(32 along axis 1)" in text and "input 'input_ids' dimension 1 (seq)" in text
    assert "2~64" in text and '"input_ids:2,2~32;attention_mask:2,2~32"' in text


def test_gpt2_with_a_range_past_its_32_positions_is_a_clear_build_error(bad_cases):
    result = bad_cases[0]["gpt2"]
    assert result["error"] == "ModelLoadError", result
    text = result["message"]
    assert "Gather 'node_embedding_1'" in text and "32-row table 'model.wpe.weight'" in text
    assert "Range(0, seq, 1) at node 'node_arange'" in text and "indices up to 63" in text
    assert "2~64" in text and '"input_ids:2,2~32;attention_mask:2,2~32"' in text


@pytest.mark.parametrize("bad", [96, -97])
def test_a_token_id_outside_the_table_is_a_clear_run_error(bad_cases, bad):
    result = bad_cases[0][f"ids{bad}"]
    assert result["error"] == "ValueError", result
    assert result["message"] == (f"input 'ids' holds {bad} at (1, 3); it indexes the 96-row "
                                 "table 'wte' (Gather 'embed_tokens'), so its values must lie "
                                 "in -96..95")


@pytest.mark.parametrize("length", [5, 16])
def test_ids_inside_the_table_match_onnxruntime(bad_cases, length):
    """Negative ids count from the table's end (ONNX), up to the range's end."""
    arrays = bad_cases[1]
    want = run_onnxruntime(_embedding_model(), {"ids": arrays[f"ids{length}"]})[0]
    assert_close(arrays[f"y{length}"], want, "float32")


def test_geared_and_reloaded_libraries_check_token_ids_too(tmp_path):
    """The record travels in the library's metadata: a gear build (one static build per
    batch) and an exported library loaded again refuse an id past the table as well. (The
    Gather runs in an NPU kernel here, whose emulator stops at the bad read: no segfault to
    guard this process against.)"""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("Relu", ["e"], ["y"])]
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    graph = helper.make_graph(nodes, "ids", [helper.make_tensor_value_info(
        "ids", TensorProto.INT64, ["b", 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["b", 3, 4])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    lib = tvm_ascend.build(model, config=CompileConfig(input_shape={"ids": (-1, 3)},
                                                       dynamic_batch_size="1,2"))
    assert type(lib).__name__ == "GearedModule"
    path = str(tmp_path / "ids.so")
    lib.export_library(path)
    for module in (lib, load(path)):
        with pytest.raises(ValueError, match=r"holds -11 at \(1, 2\); it indexes the 10-row "
                                             r"table 'table' \(Gather 'embed'\)"):
            module.run({"ids": np.array([[0, 1, 2], [3, 4, -11]], np.int64)})
        ids = np.array([[0, 9, -10], [3, 4, -1]], np.int64)
        assert_close(module.run({"ids": ids})[0], run_onnxruntime(model, {"ids": ids})[0],
                     "float32")
