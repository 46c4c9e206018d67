"""``tvm-ascend compare``: variants side by side, errors per output and per fused group."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from conftest import TOLERANCES
from tvm_ascend.compare import compare_model, format_comparison

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo.onnx"


def test_compare_fusion_off_and_on_with_group_errors():
    results, source = compare_model(DEMO, variants=["off", "conservative"])
    assert source == "onnxruntime"
    off, fused = results
    assert fused.launches < off.launches and fused.gm_bytes < off.gm_bytes
    assert fused.est_latency_us < off.est_latency_us
    for result in results:
        assert all(rel < 1e-5 for _, rel in result.output_errors.values())
    # every fused group is checked at its own output tensor
    assert {row[0] for row in fused.group_errors} == {"G0", "G1"}
    assert all(row[4] < 1e-5 for row in fused.group_errors)
    table = format_comparison(results, source)
    assert "ESTIMATE" in table and "G1" in table
    for result in results:  # HBM and L2 apart, the band and the host's range around the figure
        assert result.hbm_bytes + result.l2_bytes == result.gm_bytes
        assert 0 < result.est_band_us[0] <= result.est_band_us[1]
        assert result.est_latency_us <= result.est_end_to_end_us[0] <= result.est_end_to_end_us[1]
        assert f"{result.est_band_us[0]:.1f}-{result.est_band_us[1]:.1f}" in table
    assert "HBM bytes" in table and "end to end us" in table
    assert "GM bytes" not in table.splitlines()[0]  # no column mixes HBM and L2 bytes


def test_compare_shows_the_precision_cost_of_fp16():
    config = tvm_ascend.CompileConfig(precision_mode="force_fp16")
    (fp16,), _ = compare_model(DEMO, config, variants=["conservative"])
    (fp32,), _ = compare_model(DEMO, variants=["conservative"], groups=False)
    worst16 = max(rel for _, rel in fp16.output_errors.values())
    worst32 = max(rel for _, rel in fp32.output_errors.values())
    assert worst32 < 1e-5 < worst16 < 2e-2
    assert max(row[4] for row in fp16.group_errors) > 1e-5


def test_compare_command_rejects_an_unknown_variant():
    done = subprocess.run([sys.executable, "-m", "tvm_ascend.cli", "compare", "--model",
                           str(DEMO), "--variants", "off,fastest"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and "fastest" in done.stderr


def _rmsnorm(hidden=64):
    """The 6-node RMSNorm exporters write: x * x -> ReduceMean -> + eps -> Sqrt -> x / rms ->
    * weight; its first node reads x twice."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]),
             helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Div", ["x", "rms"], ["normed"]),
             helper.make_node("Mul", ["normed", "weight"], ["y"])]
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, hidden).astype("float32"), "weight"),
             numpy_helper.from_array(np.array(1e-6, "float32"), "eps")]
    graph = helper.make_graph(nodes, "rmsnorm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, hidden])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_compare_an_rmsnorm_whose_first_node_reads_x_twice():
    """With fusion off, Mul(x, x) is a kernel of its own, and it did not compile (its two
    parameters were both named x)."""
    results, source = compare_model(_rmsnorm(), variants=["off", "aggressive"])
    assert source == "onnxruntime"
    off, fused = results
    assert (off.launches, fused.launches) == (6, 1)
    for result in results:
        assert all(rel < TOLERANCES["float32"]["rtol"] for _, rel in result.output_errors.values())
    assert [row[:3] for row in fused.group_errors] == [("G0", "ReductionFusion", "y")]


def _ranged_two_inputs():
    """x, m: (2, seq, 24), both over the ONNX dimension "seq"; y = relu(x + m) * x."""
    nodes = [helper.make_node("Add", ["x", "m"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Mul", ["r", "x"], ["y"])]
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, "seq", 24]) for n in "xm"]
    graph = helper.make_graph(nodes, "ranged", spec, [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "seq", 24])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_compare_over_a_range_runs_one_build_at_the_ends_and_the_midpoint():
    """compare refused a ranged --input_shape ("has a dynamic shape; give --input_shape"): it
    now builds each variant once for the range and runs it at the range's ends and midpoint,
    one length for both inputs over seq, with the estimate at that length."""
    config = tvm_ascend.CompileConfig(input_shape={"x": (2, "3~1500", 24),
                                                   "m": (2, "3~1500", 24)})
    results, source = compare_model(_ranged_two_inputs(), config, variants=["aggressive"])
    assert source == "onnxruntime"
    assert [r.name for r in results] == ["aggressive [seq=3]", "aggressive [seq=751]",
                                         "aggressive [seq=1500]"]
    assert all(rel < 1e-5 for r in results for _, rel in r.output_errors.values())
    assert all(row[4] < 1e-5 for r in results for row in r.group_errors)
    assert {row[0] for row in results[0].group_errors} == {"G0"}
    times = [r.est_latency_us for r in results]
    assert times[0] < times[1] < times[2]  # the run-time-tiled kernel at each length
    assert all(r.est_band_us[0] <= r.est_latency_us <= r.est_band_us[1] for r in results)
