"""The whole-build cache (tvm_ascend/runtime/build_cache.py): a second identical build is
served from the cache; anything that changes the result changes the key."""
from __future__ import annotations

import logging
import sys
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
def cache(tmp_path, monkeypatch):
    """A fresh cache folder with the build cache on (conftest turns it off for other tests)."""
    monkeypatch.setenv("TVM_ASCEND_BUILD_CACHE", "1")
    monkeypatch.setenv("TVM_ASCEND_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


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
