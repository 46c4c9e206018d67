"""The tvm-ascend command with ATC-style flags."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx

from onnx_models import ModelBuilder, add_chain

REPO = Path(__file__).resolve().parents[1]


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tvm_ascend.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def test_compile_demo_model(tmp_path):
    out = tmp_path / "demo"
    done = _cli("compile", "--model", str(REPO / "examples" / "demo.onnx"), "--output", str(out),
                "--soc_version", "Ascend910B1", "--framework", "5", "--dump_graph",
                "--dump_path", str(tmp_path / "dump"), "--report", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "demo.so").exists()
    assert "2 NPU kernel(s)" in done.stdout and "0 group(s) on the host" in done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["npu_kernels"] == 2
    dump = tmp_path / "dump"
    for name in ("000_imported.py", "010_partitioned.py", "020_scheduled.py",
                 "fusion_report.json", "fusion_report.txt"):
        assert (dump / name).stat().st_size > 0, name
    assert json.loads((dump / "fusion_report.json").read_text()) == report
    assert "ascend_k0" in (dump / "010_partitioned.py").read_text()
    assert len(list((dump / "kernels").glob("*.cpp"))) == 2


def test_input_shape_flag_and_errors(tmp_path):
    builder = ModelBuilder()
    add_chain(builder, 0, (4, 4), ["relu"])
    model = builder.model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    done = _cli("compile", "--model", str(path), "--output", str(tmp_path / "dyn.so"))
    assert done.returncode == 0, done.stderr  # runs on the host, and says which dimension
    assert "'x0' dimension 0 (batch) is dynamic" in done.stderr
    assert "0 NPU kernel(s)" in done.stdout
    done = _cli("compile", "--model", str(path), "--output", str(tmp_path / "a.so"),
                "--input_shape", "x0:2,4")
    assert done.returncode == 0, done.stderr
    done = _cli("compile", "--model", str(path), "--output", str(tmp_path / "b.so"),
                "--soc_version", "Ascend123")
    assert done.returncode == 2 and "unknown --soc_version" in done.stderr
    assert not (tmp_path / "b.so").exists()


def test_explain_names_the_group_and_the_blocked_edges():
    done = _cli("explain", "--model", str(REPO / "examples" / "demo.onnx"), "--node", "relu")
    assert done.returncode == 0, done.stderr
    assert "relu is in group G0" in done.stdout and "add_bias, relu, scale" in done.stdout
    assert "G0 -> G1 not fused" in done.stdout and "would not tile" in done.stdout
    done = _cli("explain", "--model", str(REPO / "examples" / "demo.onnx"), "--node", "rel")
    assert done.returncode == 2 and "did you mean relu" in done.stderr


def test_fusion_flags_switch_file_and_fusion_result(tmp_path):
    switch = tmp_path / "switch.cfg"
    switch.write_text("ElementwiseFusion:off\n")
    out = tmp_path / "demo.so"
    done = _cli("compile", "--model", str(REPO / "examples" / "demo.onnx"), "--output", str(out),
                "--fusion_switch_file", str(switch), "--report", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert "ElementwiseFusion" not in report["rules_on"]
    assert any("ElementwiseFusion is switched off" in e["reason"]
               for e in report["unfused_edges"])
    result = json.loads((tmp_path / "fusion_result.json").read_text())
    assert "session_and_graph_id_0_0" in result
    # a misspelt rule is an error naming the file, the line and the closest rule
    switch.write_text("# ok\nSoftmaxFusionPas:off\n")
    done = _cli("compile", "--model", str(REPO / "examples" / "demo.onnx"), "--output",
                str(tmp_path / "b.so"), "--fusion_switch_file", str(switch))
    assert done.returncode == 2
    assert "switch.cfg:2" in done.stderr and "SoftmaxFusionPass" in done.stderr
    assert not (tmp_path / "b.so").exists()


def test_explain_lists_the_rules():
    done = _cli("explain", "--rules")
    assert done.returncode == 0, done.stderr
    assert "MatMulEpilogueFusion" in done.stdout and "MatMulBiasAddFusionPass" in done.stdout


def _dynamic_batch_model(tmp_path):
    builder = ModelBuilder()
    add_chain(builder, 0, (4, 4), ["relu"])
    model = builder.model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    return path


def test_input_shape_ranges_are_accepted_by_the_cli(tmp_path):
    """README: 'x:1~4,4' and --input_shape_range 'x:[1~4,4]' are accepted; both failed with
    "dimension '(1, 4)' is not an integer" (the parsed range was parsed again as text)."""
    path = _dynamic_batch_model(tmp_path)
    for flag, text in (("--input_shape", "x0:1~4,4"), ("--input_shape_range", "x0:[1~4,4]")):
        done = _cli("compile", "--model", str(path), "--output", str(tmp_path / "r.so"), flag,
                    text)
        assert done.returncode == 0, done.stderr
        assert "'x0' dimension 0 (batch) is dynamic in 1~4" in done.stderr
        assert (tmp_path / "r.so").exists()
        (tmp_path / "r.so").unlink()


def test_malformed_or_unknown_input_shape_names_the_input_and_lists_the_inputs(tmp_path):
    """'x0:' gave an unrelated Transpose import error (a 0-d input); every malformed or unknown
    entry is an error naming it and listing the model's inputs, and no library is written."""
    path = _dynamic_batch_model(tmp_path)
    cases = {"x0:": "gives 'x0' 0 dimension(s)",
             "x0:1,a": "'x0:1,a': dimension 'a' is not an integer",
             "x01,2": "'x01,2' is not 'name:d0,d1,...'",
             ":3": "':3' is not 'name:d0,d1,...'",
             "nope:1,2": "names 'nope', which is not an input of the model",
             "x1:4,4": "did you mean x0?"}
    for text, message in cases.items():
        done = _cli("compile", "--model", str(path), "--output", str(tmp_path / "bad.so"),
                    "--input_shape", text)
        assert done.returncode == 2, (text, done.stderr)
        assert message in done.stderr, (text, done.stderr)
        assert "the model's inputs: x0 [batch, 4]" in done.stderr or \
            "inputs: x0 [batch, 4]" in done.stderr, (text, done.stderr)
        assert "Traceback" not in done.stderr and not (tmp_path / "bad.so").exists()


def test_typos_in_node_flags_and_a_text_tuning_database_are_errors_naming_the_flag(tmp_path):
    demo = str(REPO / "examples" / "demo.onnx")
    notes = tmp_path / "notes.txt"
    notes.write_text("tuned on Monday\n")
    for flags, message in ((("--no_fuse_nodes", "rellu"), "--no_fuse_nodes names 'rellu' "
                            "(did you mean relu?)"),
                           (("--keep_dtype", "scale,add_bais"), "--keep_dtype names 'add_bais' "
                            "(did you mean add_bias?)"),
                           (("--tuning_database", str(notes)), f"tuning database {notes} "
                            "holds no tuning records")):
        done = _cli("compile", "--model", demo, "--output", str(tmp_path / "bad.so"), *flags)
        assert done.returncode == 2 and message in done.stderr, (flags, done.stderr)
        assert "Traceback" not in done.stderr and not (tmp_path / "bad.so").exists()


def test_a_bad_soc_version_lists_the_valid_ones(tmp_path):
    from tvm_ascend.soc import soc_profiles

    done = _cli("compile", "--model", str(REPO / "examples" / "demo.onnx"), "--output",
                str(tmp_path / "b.so"), "--soc_version", "Ascend910Z")
    assert done.returncode == 2 and "unknown --soc_version 'Ascend910Z'; known: " in done.stderr
    assert all(name in done.stderr for name in soc_profiles())
