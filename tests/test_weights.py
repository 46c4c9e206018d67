"""Weights ride beside the compiled code (runtime/weights.py): main's large constants become
trailing parameters, the library carries them as one checked section, and a library runs the
same whether its module was just built, exported and loaded back, or loaded in a new process."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_ascend
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.errors import ModelLoadError
from tvm_ascend.runtime.artifacts import TRAILER_BYTES, verify_library
from tvm_ascend.runtime.weights import (WEIGHT_MIN_BYTES, WEIGHTS_MAGIC, lift_weights,
                                        read_weights)


def _mlp():
    """MatMul by a 64x48 weight (12 KB: lifted), then a 48-wide bias (192 B: stays in the
    code) and a Relu: one large constant."""
    b = ModelBuilder("float32", seed=4)
    x = b.input("x", (8, 64))
    w = b.const(b.rng.standard_normal((64, 48)), "w")
    bias = b.const(b.rng.standard_normal(48), "bias")
    b.output(b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), bias])]), (8, 48))
    return b


def test_large_constants_become_trailing_parameters():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 256), "float32"))
    big = np.arange(1024, dtype="float32").reshape(4, 256)  # 4 KB: lifted
    small = np.ones((4, 256 // 64), "float32")
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(x, relax.const(big)))
            z = bb.emit(relax.op.add(y, relax.const(big)))  # an equal constant, another object
            out = bb.emit_output(relax.op.sum(z) + relax.op.sum(relax.const(small)))
        bb.emit_func_output(out)
    mod, weights = lift_weights(bb.get())
    names = [p.name for p in mod["main"].params]
    assert names == ["x", "ascend_w0", "ascend_w1"]
    assert len(weights) == 2 and all(np.array_equal(w.numpy(), big) for w in weights)
    assert big.nbytes >= WEIGHT_MIN_BYTES > small.nbytes


def test_a_model_runs_from_its_weights_section(tmp_path):
    b = _mlp()
    model = b.model()
    lib = tvm_ascend.build(model)
    expected = run_onnxruntime(model, b.feeds)[0]
    assert_close(lib.run(b.feeds)[0], expected, "float32")
    path = tmp_path / "mlp.so"
    lib.export_library(path)
    data = path.read_bytes()
    assert data[-TRAILER_BYTES - len(WEIGHTS_MAGIC):-TRAILER_BYTES] == WEIGHTS_MAGIC
    (weight,) = read_weights(path)
    assert weight.shape == (64, 48)
    again = tvm_ascend.load(path)
    assert_close(again.run(b.feeds)[0], expected, "float32")
    # a new process reads the weights from the file alone
    np.save(tmp_path / "x.npy", b.feeds["x"])
    script = textwrap.dedent(f"""
        import numpy as np, tvm_ascend
        lib = tvm_ascend.load({str(path)!r})
        np.save({str(tmp_path / "out.npy")!r}, lib.run({{"x": np.load({str(tmp_path / "x.npy")!r})}})[0])
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    assert_close(np.load(tmp_path / "out.npy"), expected, "float32")


def test_a_damaged_weights_section_is_refused_before_loading(tmp_path):
    """The trailer's sha256 covers the weights: one flipped byte in them is an error naming the
    file, never wrong outputs."""
    b = _mlp()
    path = tmp_path / "mlp.so"
    tvm_ascend.build(b.model()).export_library(path)
    data = bytearray(path.read_bytes())
    data[-TRAILER_BYTES - 64] ^= 0xFF  # inside the weights blob
    damaged = tmp_path / "damaged.so"
    damaged.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="damaged.so"):
        verify_library(damaged)
    with pytest.raises(ModelLoadError, match="damaged.so"):
        tvm_ascend.load(damaged)


def test_a_model_without_large_constants_has_no_weights_section(tmp_path):
    b = ModelBuilder("float32", seed=5)
    x = b.input("x", (4, 16))
    b.output(b.node("Relu", [b.node("Add", [x, b.const(np.ones(16), "one")])]), (4, 16))
    model = b.model()
    path = tmp_path / "small.so"
    tvm_ascend.build(model).export_library(path)
    assert WEIGHTS_MAGIC not in path.read_bytes()[-TRAILER_BYTES - 64:]
    assert read_weights(path) == []
    assert_close(tvm_ascend.load(path).run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0],
                 "float32")
