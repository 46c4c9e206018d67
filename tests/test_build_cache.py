"""The whole-build cache (tvm_ascend/runtime/build_cache.py): a second identical build is
served from the cache; anything that changes the result changes the key."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from tvm_ascend.runtime.build_cache import build_key, lookup

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from make_demo import make_demo_model  # noqa: E402


@pytest.fixture
def cold_cache(tmp_path, monkeypatch):
    """An empty cache folder with the build cache on (conftest turns it off for other tests):
    the emulator runtime and the precompiled unit headers are built in it on first use."""
    monkeypatch.setenv("TVM_ASCEND_BUILD_CACHE", "1")
    monkeypatch.setenv("TVM_ASCEND_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder with no builds in it but the session's toolchain artifacts (runtime
    object, unit headers and their records) copied in: these tests are about cached builds,
    and building the artifacts again per test cost ~15 s each on 2 cores. Tests of the
    artifacts themselves take ``cold_cache``."""
    from tvm_ascend.runtime.toolchain import emulator_runtime_object, unit_header

    warm = Path(os.environ["TVM_ASCEND_CACHE_DIR"])  # conftest's private session cache
    emulator_runtime_object("Ascend910B1", warm)
    unit_header("Ascend910B1", warm)
    folder = tmp_path / "cache"
    folder.mkdir()
    for artifact in warm.glob("ascendc_*"):
        shutil.copy2(artifact, folder / artifact.name)
    monkeypatch.setenv("TVM_ASCEND_BUILD_CACHE", "1")
    monkeypatch.setenv("TVM_ASCEND_CACHE_DIR", str(folder))
    return folder


def _feeds(model):
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _hits(caplog) -> int:
    return sum("build cache hit" in r.getMessage() for r in caplog.records)


def test_an_identical_build_comes_from_the_cache(cache, tmp_path, caplog):
    model = make_demo_model()
    feeds = _feeds(model)
    reference = run_onnxruntime(model, feeds)
    caplog.set_level(logging.INFO, logger="tvm_ascend")
    first = tvm_ascend.build(model)
    assert lookup(build_key(model, None, tvm_ascend.CompileConfig()), cache) is None
    first_out = first.run(feeds)  # compiling the library records the build
    assert _hits(caplog) == 0
    path = tmp_path / "demo.onnx"
    onnx.save(model, str(path))
    again = tvm_ascend.build(str(path))  # the same model read from a file: the same key
    assert _hits(caplog) == 1
    assert again.fusion_report() == first.fusion_report()
    assert again.kernel_sources() == first.kernel_sources()
    for a, b, ref in zip(again.run(feeds), first_out, reference):
        np.testing.assert_array_equal(a, b)
        assert_close(a, ref, "float32")
    exported = again.export_library(str(tmp_path / "demo.so"))
    loaded = tvm_ascend.load(exported)
    np.testing.assert_array_equal(loaded.run(feeds)[0], first_out[0])


def _key(model, **config):
    return build_key(model, None, tvm_ascend.CompileConfig(**config).with_env())


def test_what_changes_the_key(cache, tmp_path):
    model = make_demo_model()
    base = _key(model)
    assert base is not None and base == _key(make_demo_model())
    assert _key(model, fusion_level="aggressive") != base
    assert _key(model, soc_version="Ascend310P3") != base
    assert _key(model, cache_dir=str(tmp_path / "other")) == base  # where, not what
    changed = make_demo_model()
    weight = changed.graph.initializer[0]
    array = numpy_helper.to_array(weight).copy()
    array.flat[0] += 1.0
    weight.CopyFrom(numpy_helper.from_array(array, weight.name))
    assert _key(changed) != base
    switch = tmp_path / "switch.cfg"
    switch.write_text("ElementwiseFusion:off\n")
    with_switch = _key(model, fusion_switch_file=str(switch))
    switch.write_text("ElementwiseFusion:on\n")
    assert _key(model, fusion_switch_file=str(switch)) != with_switch
    params = {"w": np.ones((2, 2), np.float32)}
    config = tvm_ascend.CompileConfig().with_env()
    assert build_key(model, params, config) != build_key(model, {"w": np.zeros((2, 2),
                                                                  np.float32)}, config)


def test_builds_that_are_not_cached(cache, monkeypatch):
    model = make_demo_model()
    assert _key(model, dump_graph=True) is None
    assert build_key(model, None, tvm_ascend.CompileConfig(build_cache=False)) is None
    monkeypatch.setenv("TVM_ASCEND_BUILD_CACHE", "0")
    assert _key(model) is None
    monkeypatch.setenv("TVM_ASCEND_BUILD_CACHE", "1")
    mod = tvm_ascend.frontend.load_model(model)
    assert build_key(mod, None, tvm_ascend.CompileConfig()) is None  # a Relax module


def test_a_removed_library_is_a_miss(cache, caplog):
    model = make_demo_model()
    feeds = _feeds(model)
    tvm_ascend.build(model).run(feeds)
    key = _key(model)
    library, _ = lookup(key, cache)
    library.unlink()
    assert lookup(key, cache) is None
    caplog.set_level(logging.INFO, logger="tvm_ascend")
    rebuilt = tvm_ascend.build(model)
    assert _hits(caplog) == 0
    assert_close(rebuilt.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
    assert lookup(key, cache) is not None


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # overwritten in place: same size, other bytes
        path.write_bytes(data[:4096] + bytes(len(data) - 8192) + data[-4096:])


def _build_export_load(model_path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """build, export, run and load the model in a fresh process (a process that has a library
    loaded dies of SIGBUS when the file is damaged under it, so the test's own must not)."""
    x, out = tmp_path / "x.npy", tmp_path / "out.so"
    script = textwrap.dedent(f"""
        import logging, numpy as np, tvm_ascend
        logging.basicConfig()
        lib = tvm_ascend.build({str(model_path)!r})
        lib.export_library({str(out)!r})
        feeds = {{"x": np.load({str(x)!r})}}
        np.save({str(tmp_path / 'built.npy')!r}, lib.run(feeds)[0])
        np.save({str(tmp_path / 'loaded.npy')!r}, tvm_ascend.load({str(out)!r}).run(feeds)[0])
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_a_corrupt_cached_library_is_rebuilt_not_loaded(cache, tmp_path, how):
    """A damaged cached .so was copied to the output and loading it killed the process with
    SIGBUS; now the library is checked against the sha256 its entry recorded, with a warning,
    and the model is built again."""
    model = make_demo_model()
    path = tmp_path / "demo.onnx"
    onnx.save(model, str(path))
    feeds = _feeds(model)
    np.save(tmp_path / "x.npy", feeds["x"])
    first = _build_export_load(path, tmp_path)
    assert first.returncode == 0, first.stderr
    library, _ = lookup(_key(model), cache)
    _damage(library, how)
    done = _build_export_load(path, tmp_path)
    assert done.returncode == 0, done.stderr
    expected = {"truncated": "is truncated", "overwritten": "does not match the sha256"}[how]
    assert expected in done.stderr and str(library) in done.stderr, done.stderr
    reference = run_onnxruntime(model, feeds)[0]
    assert_close(np.load(tmp_path / "built.npy"), reference, "float32")
    assert_close(np.load(tmp_path / "loaded.npy"), reference, "float32")
    assert lookup(_key(model), cache) is not None  # the entry was written again, sound


def test_a_corrupt_emulator_runtime_is_rebuilt(cache, tmp_path, caplog):
    """A damaged emulator runtime object in the cache made every later build fail with a linker
    error and was never rebuilt: its recorded sha256 is checked before it is linked."""
    from tvm_ascend.runtime.toolchain import emulator_runtime_object

    runtime = emulator_runtime_object("Ascend910B1", cache)
    runtime.write_bytes(runtime.read_bytes()[:1000])
    model = make_demo_model(seed=3)
    feeds = _feeds(model)
    caplog.set_level(logging.WARNING, logger="tvm_ascend")
    lib = tvm_ascend.build(model)
    assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], "float32")
    assert any("emulator runtime" in r.getMessage() and "sha256" in r.getMessage()
               for r in caplog.records)
    assert runtime.stat().st_size > 1000


def test_a_runtime_the_linker_rejects_is_rebuilt(cache, tmp_path, caplog):
    """A runtime object whose record matches but that the linker refuses (written wrongly, then
    recorded) is discarded and built again once, on the link failure that names it."""
    from tvm_ascend.runtime.artifacts import write_digest
    from tvm_ascend.runtime.toolchain import emulator_runtime_object

    runtime = emulator_runtime_object("Ascend910B1", cache)
    runtime.write_bytes(b"not an object file")
    write_digest(runtime)
    model = make_demo_model(seed=4)
    feeds = _feeds(model)
    caplog.set_level(logging.WARNING, logger="tvm_ascend")
    lib = tvm_ascend.build(model)
    lib.export_library(tmp_path / "m.so")
    assert_close(tvm_ascend.load(tmp_path / "m.so").run(feeds)[0],
                 run_onnxruntime(model, feeds)[0], "float32")
    assert any("linker rejected" in r.getMessage() for r in caplog.records)


def test_the_units_headers_are_precompiled_once_and_checked(cold_cache, caplog, monkeypatch):
    """The headers every unit includes are precompiled once per SoC into the cache and named
    by ``-include``; a damaged precompiled form is built again (with a warning), and a build
    meanwhile still matches onnxruntime."""
    from tvm_ascend.runtime import toolchain

    header = toolchain.unit_header("Ascend910B1", cold_cache)
    compiled = header.with_name(header.name + ".gch")
    assert header.read_text().startswith('#include "kernel_operator.h"') and compiled.exists()
    options = toolchain.emulator_compile_options("Ascend910B1", cold_cache)
    assert options[options.index("-include") + 1] == str(header)
    stamp = compiled.stat().st_mtime_ns
    assert toolchain.unit_header("Ascend910B1", cold_cache) == header
    assert compiled.stat().st_mtime_ns == stamp  # reused, not built again
    compiled.write_bytes(compiled.read_bytes()[:4096])
    monkeypatch.setattr(toolchain, "_SOUND", set())  # as a new process finds it
    caplog.set_level(logging.WARNING, logger="tvm_ascend")
    model = make_demo_model(seed=6)
    feeds = _feeds(model)
    assert_close(tvm_ascend.build(model).run(feeds)[0], run_onnxruntime(model, feeds)[0],
                 "float32")
    assert any("precompiled unit headers" in r.getMessage() and "sha256" in r.getMessage()
               for r in caplog.records)
    assert compiled.stat().st_size > 4096


def test_a_unit_builds_without_its_precompiled_headers(cold_cache, caplog, monkeypatch):
    """Precompiling the headers is a speed-up, never a requirement: where it fails, the
    warning says so and the unit parses the headers itself."""
    from tvm_ascend.errors import ToolchainError
    from tvm_ascend.runtime import toolchain

    def broken(flags, header, compiled):
        raise ToolchainError("precompiling the AscendC unit's headers failed", ["g++"],
                             "cc1plus: fatal error: out of memory")

    monkeypatch.setattr(toolchain, "_compile_header", broken)
    caplog.set_level(logging.WARNING, logger="tvm_ascend")
    assert "-include" not in toolchain.emulator_compile_options("Ascend910B1", cold_cache)
    assert any("out of memory" in r.getMessage() for r in caplog.records)
    model = make_demo_model(seed=7)
    feeds = _feeds(model)
    assert_close(tvm_ascend.build(model).run(feeds)[0], run_onnxruntime(model, feeds)[0],
                 "float32")


def test_an_unknown_cache_mode_is_an_error_naming_the_modes():
    with pytest.raises(tvm_ascend.FusionConfigError, match="op_compiler_cache_mode='on'.*force"):
        tvm_ascend.CompileConfig(op_compiler_cache_mode="on")


def test_force_rebuilds_and_disable_leaves_the_cache_alone(cache, caplog):
    model = make_demo_model(seed=5)
    feeds = _feeds(model)
    reference = run_onnxruntime(model, feeds)[0]
    tvm_ascend.build(model).run(feeds)
    (entry,) = (cache / "builds").glob("*.json")
    stamp = entry.stat().st_mtime_ns
    caplog.set_level(logging.INFO, logger="tvm_ascend")
    forced = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        op_compiler_cache_mode="force"))
    assert _hits(caplog) == 0
    assert_close(forced.run(feeds)[0], reference, "float32")
    assert entry.stat().st_mtime_ns != stamp  # written again
    stamp = entry.stat().st_mtime_ns
    off = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        op_compiler_cache_mode="disable"))
    assert _hits(caplog) == 0
    assert_close(off.run(feeds)[0], reference, "float32")
    assert entry.stat().st_mtime_ns == stamp and len(list(cache.glob("*.so"))) == 1
