"""Shared fixtures: a private compile cache, tolerances, reference runners."""
from __future__ import annotations

import os

import numpy as np
import pytest

# One tolerance table for every numerical test (per dtype), as the house style asks.
# float16: each op rounds to fp16 (ulp 2**-10 relative), and chains of up to 8 ops with
# cancellation (x**2 + negative bias) lose a few ulps of their largest intermediate (|v| <= 4,
# ulp ~ 4e-3), hence the absolute term; onnxruntime itself computes some fp16 ops in fp32.
# "float32_model": whole models (several MatMul/Conv layers): each output sums hundreds of
# products, accumulated tile by tile on the cube in another order than onnxruntime's, and
# layers compound it, hence ten times the single-kernel tolerance.
TOLERANCES = {
    "float32": {"rtol": 1e-5, "atol": 1e-6},
    "float16": {"rtol": 1e-2, "atol": 1e-2},
    "float32_model": {"rtol": 1e-4, "atol": 1e-5},
    # cube kernels (conv, attention): the product's K axis is summed in L0C blocks and, in
    # attention, through the online softmax's rescaling, an order no reference shares
    "cube/float32": {"rtol": 1e-4, "atol": 1e-4},
    "cube/float16": {"rtol": 2e-2, "atol": 2e-2},
    # the C++ emulator's own samples against numpy (tests/test_emulator.py): one op each
    "emulator/float32": {"rtol": 1e-5, "atol": 1e-7},
    "emulator/float16": {"rtol": 1e-2, "atol": 1e-3},
    # host (llvm) float64 results of ONNX's node tests: only a reduction's order differs
    "float64": {"rtol": 1e-7, "atol": 1e-12},
}


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Builds in tests use a cache of their own, never the user's ~/.cache; whole builds are
    not reused (tests patch the planner and compare builds of one model under different
    patches, which the build cache's key cannot see); test_build_cache.py turns it on; and
    every build is strict."""
    os.environ["TVM_ASCEND_CACHE_DIR"] = str(tmp_path_factory.mktemp("compile_cache"))
    os.environ["TVM_ASCEND_BUILD_CACHE"] = "0"
    # A kernel that fails to schedule, print or compile falls back to the host in a user's
    # build; in a test it is a bug to see, never a fallback that still gives right numbers
    # (test_fallback.py tests the fallback itself, without this).
    os.environ["TVM_ASCEND_STRICT"] = "1"
    yield


def assert_close(actual, expected, dtype):
    tol = TOLERANCES[str(dtype)]
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), **tol)


def run_onnxruntime(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)
