"""Mixed models (host + NPU), export to one .so, loading in a fresh process, the Relay spelling."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm

import tvm_ascend
from conftest import assert_close, run_onnxruntime

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "examples"))
from make_demo import make_demo_model  # noqa: E402


@pytest.fixture(scope="module")
def demo():
    model = make_demo_model()
    x = np.random.default_rng(0).standard_normal((2, 64, 100)).astype(np.float32)
    return model, {"x": x}, tvm_ascend.build(model, target="ascend")


def test_demo_groups(demo):
    model, feeds, lib = demo
    assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
    report = lib.fusion_report()
    assert report["npu_kernels"] == 2 and report["host_groups"] == 0
    npu_nodes = [g["onnx_nodes"] for g in report["groups"] if g["on_npu"]]
    assert npu_nodes == [["add_bias", "relu", "scale", "transpose"],
                         ["matmul", "sigmoid", "double", "shift"]]
    sources = list(lib.kernel_sources().values())
    assert "// ONNX nodes: add_bias, relu, scale, transpose" in sources[0]


def test_unsupported_ops_run_on_the_host():
    """An op no template takes (CumSum) runs on the host, named by its ONNX node, between NPU
    kernels, and the whole model still matches onnxruntime."""
    from onnx_models import ModelBuilder

    b = ModelBuilder("float32", seed=9)
    x = b.input("x", (6, 50))
    y = b.node("Relu", [b.node("Add", [x, b.const(np.ones(50), "bias")])])
    summed = b.node("CumSum", [y, b.int_const(1, "axis")])
    b.output(b.node("Mul", [summed, b.const(np.array(0.5), "half")]), (6, 50))
    model = b.model()
    lib = tvm_ascend.build(model)
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "float32")
    report = lib.fusion_report()
    assert report["npu_kernels"] == 2 and report["host_groups"] == 1
    (host,) = report["host_ops"]
    assert host["node"] == summed and "host" in host["why"]
    edges = [e["reason"] for e in report["unfused_edges"]]
    assert any("runs on the host" in reason for reason in edges)


def test_export_and_load_in_a_fresh_process(demo, tmp_path):
    model, feeds, lib = demo
    path = tmp_path / "demo.so"
    lib.export_library(path)
    np.save(tmp_path / "x.npy", feeds["x"])
    script = textwrap.dedent(f"""
        import json, numpy as np, tvm_ascend
        lib = tvm_ascend.load({str(path)!r})
        out = lib.run({{"x": np.load({str(tmp_path / 'x.npy')!r})}})[0]
        np.save({str(tmp_path / 'out.npy')!r}, out)
        print(json.dumps({{"kernels": sorted(lib.kernel_sources()),
                          "launches": len(lib.profile())}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["kernels"] == sorted(lib.kernel_sources())
    assert info["launches"] == 2
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), lib.run(feeds)[0])


def test_export_leaves_no_partial_file_on_failure(demo, tmp_path, monkeypatch):
    _, _, lib = demo
    fresh = tvm_ascend.build(make_demo_model(seed=7), target="ascend")
    # build() compiled it already and export copies that library: forget it, so that export
    # compiles (with the broken flags below) as for a module made from an executable alone
    fresh._library_path = None
    monkeypatch.setattr("tvm_ascend.runtime.module.emulator_compile_options",
                        lambda soc, cache: ["-DTHIS_FLAG_BREAKS=(", "--no-such-flag"])
    with pytest.raises(tvm_ascend.ToolchainError, match="compiling the kernels"):
        fresh.export_library(tmp_path / "broken.so")
    assert list(tmp_path.iterdir()) == []


def test_relay_spelling_and_target_tags(demo):
    model, feeds, lib = demo
    assert str(tvm.target.Target("ascend").attrs["model"]) == "Ascend910B1"
    assert str(tvm.target.Target("ascend/310p3").attrs["model"]) == "Ascend310P3"
    mod = tvm_ascend.frontend.load_model(model)
    again = tvm_ascend.relay.build(mod, target="ascend", params=None)
    np.testing.assert_array_equal(again.run(feeds)[0], lib.run(feeds)[0])
    assert again.kernel_sources() == lib.kernel_sources()


def test_other_soc_without_datacopypad(demo):
    model, feeds, _ = demo
    lib = tvm_ascend.build(model, target="ascend/310p3")
    assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
    assert all("DataCopyPad" not in s for s in lib.kernel_sources().values())
    assert max(p["block_dim"] for p in lib.profile()) <= 8


def _load_in_a_subprocess(path):
    """tvm_ascend.load(path) in a fresh process: (return code, the error line it printed)."""
    script = textwrap.dedent(f"""
        import sys, tvm_ascend
        try:
            tvm_ascend.load({str(path)!r})
        except tvm_ascend.ModelLoadError as err:
            print(err)
            sys.exit(3)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stdout.strip() + done.stderr.strip()


def test_loading_a_truncated_library_is_an_error_not_a_crash(demo, tmp_path):
    """tvm_ascend.load of a truncated .so died with SIGBUS inside dlopen; the library's ELF
    headers and its tvm-ascend trailer are checked before it is loaded."""
    _, _, lib = demo
    good = tmp_path / "demo.so"
    lib.export_library(good)
    for size in (len(good.read_bytes()) // 2, len(good.read_bytes()) - 20):
        cut = tmp_path / f"cut{size}.so"
        cut.write_bytes(good.read_bytes()[:size])
        code, text = _load_in_a_subprocess(cut)
        assert code == 3, text
        assert str(cut) in text and "truncated" in text
    flipped = bytearray(good.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF
    (tmp_path / "flipped.so").write_bytes(bytes(flipped))
    with pytest.raises(tvm_ascend.ModelLoadError, match="does not match the sha256"):
        tvm_ascend.load(tmp_path / "flipped.so")


def test_loading_a_foreign_library_or_a_text_file_is_an_error(tmp_path):
    source = tmp_path / "foreign.cc"
    source.write_text('extern "C" int answer() { return 42; }\n')
    foreign = tmp_path / "foreign.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(foreign)], check=True)
    with pytest.raises(tvm_ascend.ModelLoadError, match="not written by tvm-ascend") as err:
        tvm_ascend.load(foreign)
    assert str(foreign) in str(err.value)
    text = tmp_path / "notes.so"
    text.write_text("hello\n")
    with pytest.raises(tvm_ascend.ModelLoadError, match="not a shared library") as err:
        tvm_ascend.load(text)
    assert str(text) in str(err.value)
