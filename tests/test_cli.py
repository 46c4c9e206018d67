"""The tvm-ascend command with ATC-style flags."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from onnx_models import ModelBuilder, add_chain
from tvm_ascend.cli import main

REPO = Path(__file__).resolve().parents[1]


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tvm_ascend.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def _cli_here(*args):
    """``main(args)`` in this process, as ``_cli`` gives it: for the error paths, which print
    their message and return 2 before any build, so a new interpreter (~4 s of imports each)
    buys nothing; an exception escaping ``main`` (a traceback) fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


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
    path = _dynamic_batch_model(tmp_path)
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


DEMO = REPO / "examples" / "demo.onnx"


def _env(cache):
    """The environment of a CLI run with its own compile cache, whole builds cached."""
    return {**os.environ, "TVM_ASCEND_CACHE_DIR": str(cache), "TVM_ASCEND_BUILD_CACHE": "1"}


def _compile(output, cache, *flags):
    return subprocess.Popen([sys.executable, "-m", "tvm_ascend.cli", "compile", "--model",
                             str(DEMO), "--output", str(output), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(cache), start_new_session=True)


def _wait_for_gxx(cache, process, timeout=300):
    """Block until the build has started g++ in its staging folder."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        staged = list((cache / "tmp").glob("*/lib0.cc")) if (cache / "tmp").is_dir() else []
        if staged:
            return
        time.sleep(0.05)
    raise AssertionError("the build never reached g++")


def _runs_like_onnxruntime(library):
    import numpy as np

    import tvm_ascend
    from conftest import assert_close, run_onnxruntime

    x = np.random.default_rng(0).standard_normal((2, 64, 100)).astype(np.float32)
    assert_close(tvm_ascend.load(library).run({"x": x})[0],
                 run_onnxruntime(onnx.load(str(DEMO)), {"x": x})[0], "float32")


@pytest.mark.parametrize("how", [
    pytest.param("SIGINT", marks=pytest.mark.slow),  # the handler SIGTERM runs too (default)
    "SIGTERM", "SIGKILL"])
def test_a_compile_stopped_during_gxx_leaves_nothing_in_the_output_folder(tmp_path, how):
    """A build killed during g++ left a 0-byte hidden '.m.so.<random>.so' beside --output, and
    Ctrl-C printed a traceback; now g++ writes into a staging folder under the cache, Ctrl-C
    and SIGTERM print one line and exit 130 / 143, and a later build sweeps what SIGKILL left."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    cache = tmp_path / "cache"
    process = _compile(out_dir / "m.so", cache)
    _wait_for_gxx(cache, process)
    if how == "SIGTERM":  # `kill PID`: the compiler alone, its g++ runs on
        process.send_signal(signal.SIGTERM)
    else:  # Ctrl-C in a terminal, or a job killed: the whole process group
        os.killpg(process.pid, getattr(signal, how))
    _, stderr = process.communicate(timeout=120)
    assert list(out_dir.iterdir()) == []
    if how == "SIGKILL":
        assert process.returncode == -signal.SIGKILL
        done = _verbose_compile(out_dir / "m.so", cache)
        assert done.returncode == 0, done.stderr
        assert list((cache / "tmp").iterdir()) == []  # the killed build's folder is swept
        assert sorted(p.name for p in out_dir.iterdir()) == ["fusion_result.json", "m.so"]
        return
    word, code = {"SIGINT": ("interrupted", 130), "SIGTERM": ("terminated", 143)}[how]
    assert process.returncode == code, stderr
    assert stderr == f"tvm-ascend: {word}; nothing written\n"


def test_two_compiles_of_one_model_at_once_share_the_cache_and_the_output(tmp_path):
    """Two processes building the same model into one cache and one --output both succeed, and
    what is left is one sound library, one sound cache entry and no temporaries."""
    cache = tmp_path / "cache"
    out = tmp_path / "out" / "m.so"
    processes = [_compile(out, cache) for _ in range(2)]
    for process in processes:
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["fusion_result.json", "m.so"]
    assert list((cache / "tmp").iterdir()) == []
    assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp")]
    _runs_like_onnxruntime(out)
    (entry,) = (cache / "builds").glob("*.json")
    library = Path(json.loads(entry.read_text())["library"])
    _runs_like_onnxruntime(library)


@contextlib.contextmanager
def _read_only(folder):
    """``folder`` made unwritable for the block, as root too (root ignores the mode bits, so
    the folder is made immutable instead)."""
    folder.chmod(0o555)
    immutable = False
    if os.access(folder, os.W_OK):
        immutable = subprocess.run(["chattr", "+i", str(folder)],
                                   capture_output=True).returncode == 0
        if not immutable:
            folder.chmod(0o755)
            pytest.skip("this user cannot make a folder read-only on this file system")
    try:
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_an_output_that_cannot_be_written_is_an_error_naming_it(tmp_path):
    """A read-only folder gave a raw PermissionError, a directory a raw IsADirectoryError; now
    each is one error line naming the path, exit code 2, before anything is built."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "a.so").mkdir()
    (tmp_path / "afile").write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()
    cases = [(tmp_path / "adir", "is a directory"), (tmp_path / "a.so", "is a directory"),
             (tmp_path / "afile" / "m.so", "cannot be created"),
             (locked / "m.so", "is not writable")]
    with _read_only(locked):
        for output, words in cases:
            done = _cli("compile", "--model", str(DEMO), "--output", str(output))
            assert done.returncode == 2, done.stderr
            assert "Traceback" not in done.stderr
            assert words in done.stderr and str(output) in done.stderr, done.stderr
        assert list(locked.iterdir()) == []


def _verbose_compile(output, cache, *flags):
    """``tvm-ascend -v compile`` of the demo; ``cache`` None: no TVM_ASCEND_CACHE_DIR."""
    env = _env(cache)
    if cache is None:
        del env["TVM_ASCEND_CACHE_DIR"]
    return subprocess.run([sys.executable, "-m", "tvm_ascend.cli", "-v", "compile", "--model",
                           str(DEMO), "--output", str(output), *flags], capture_output=True,
                          text=True, timeout=600, env=env)


def test_op_compiler_cache_mode_and_dir_as_atc_spells_them(tmp_path):
    """enable reads and writes the cache; force compiles again and overwrites its entries;
    disable neither reads nor writes; --op_compiler_cache_dir names the folder. The fresh
    build and the cache hit write into missing folders: --output into one gave a raw traceback
    when the build cache hit (a fresh build created the folder); both create it now."""
    cache = tmp_path / "cache"
    done = _verbose_compile(tmp_path / "a" / "a.so", None, "--op_compiler_cache_dir",
                            str(cache))
    assert done.returncode == 0, done.stderr
    (library,) = cache.glob("*.so")
    stamp = library.stat().st_mtime_ns
    done = _verbose_compile(tmp_path / "b.so", cache, "--op_compiler_cache_mode", "force")
    assert done.returncode == 0, done.stderr
    assert "build cache hit" not in done.stderr
    assert library.stat().st_mtime_ns != stamp  # overwritten
    stamp = library.stat().st_mtime_ns
    done = _verbose_compile(tmp_path / "b" / "c" / "c.so", cache)
    assert done.returncode == 0 and "build cache hit" in done.stderr, done.stderr
    _runs_like_onnxruntime(tmp_path / "b" / "c" / "c.so")
    # disable, on a cache that holds this very build: no hit (not read), nothing added or
    # rewritten (not written), and the library it builds instead runs
    def entries():  # every file with its stamp, and every folder (an empty new one too)
        return {p: p.stat().st_mtime_ns if p.is_file() else None for p in cache.rglob("*")}

    before = entries()
    done = _verbose_compile(tmp_path / "e.so", cache, "--op_compiler_cache_mode", "disable")
    assert done.returncode == 0 and "build cache hit" not in done.stderr, done.stderr
    assert library.stat().st_mtime_ns == stamp
    assert entries() == before
    _runs_like_onnxruntime(tmp_path / "e.so")


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
        done = _cli_here("compile", "--model", str(path), "--output", str(tmp_path / "bad.so"),
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
        done = _cli_here("compile", "--model", demo, "--output", str(tmp_path / "bad.so"), *flags)
        assert done.returncode == 2 and message in done.stderr, (flags, done.stderr)
        assert "Traceback" not in done.stderr and not (tmp_path / "bad.so").exists()


def test_a_bad_soc_version_lists_the_valid_ones(tmp_path):
    from tvm_ascend.soc import soc_profiles

    done = _cli_here("compile", "--model", str(REPO / "examples" / "demo.onnx"), "--output",
                str(tmp_path / "b.so"), "--soc_version", "Ascend910Z")
    assert done.returncode == 2 and "unknown --soc_version 'Ascend910Z'; known: " in done.stderr
    assert all(name in done.stderr for name in soc_profiles())
