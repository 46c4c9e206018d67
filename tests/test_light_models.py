"""ONNX's light CNN models (onnx/backend/test/data/light): compiled, run on the emulator and
compared with their stored output and with onnxruntime; the fusion report says what ran where.

The input is what ONNX's backend runner feeds them (``arange(n).reshape(shape) / n``). Their
weights are ConstantOfShape fills, so every output element is the same number: the comparison
checks the whole network's arithmetic, not its discrimination. Each model takes minutes (graph
partition, g++ of up to a hundred kernels, the emulated run), so all are ``slow``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tvm_ascend
from conftest import TOLERANCES, run_onnxruntime

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# Pooling may run on either side: its Ascend kernels are being written (not asserted here).
POOLING = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d",
                     "relax.nn.adaptive_avg_pool2d"})


@dataclass(frozen=True)
class LightModel:
    """What one light model must show in its fusion report.

    ``host_ok`` are the Relax ops allowed to run on the host, each for a reason given where
    the model is listed; every other op (pooling aside) must be in an Ascend kernel.
    """

    name: str
    cube_ops: dict  # Relax op -> how many of them the model has (all on the cube)
    host_ok: frozenset = frozenset()


# LRN lowers to x / (bias + alpha/size * avg_pool3d(x^2))^beta; the prepare stage turns the
# channel window into shifted slices added up (tvm_ascend/prepare/reductions.py): all on the NPU.
# Dropout (an identity at inference) is removed and a BatchNormalization with no Conv before
# it (DenseNet's BN-ReLU-Conv after a Concat) lowered to a scale and shift by the prepare stage
# (tvm_ascend/prepare/canonical.py, batch_norm.py): neither may reach the host.
# A reshape between host ops is a free view on the host.
VIEW_HOST = frozenset({"relax.reshape"})

MODELS = [
    LightModel("bvlc_alexnet", {"relax.nn.conv2d": 5, "relax.matmul": 3},
               VIEW_HOST),
    LightModel("densenet121", {"relax.nn.conv2d": 121}),
    LightModel("inception_v1", {"relax.nn.conv2d": 57, "relax.matmul": 1},
               VIEW_HOST),
    LightModel("inception_v2", {"relax.nn.conv2d": 69, "relax.matmul": 1},
               VIEW_HOST),
    LightModel("resnet50", {"relax.nn.conv2d": 53, "relax.matmul": 1}, VIEW_HOST),
    LightModel("shufflenet", {"relax.nn.conv2d": 49, "relax.matmul": 1}, VIEW_HOST),
    LightModel("squeezenet", {"relax.nn.conv2d": 26}, VIEW_HOST),
    LightModel("vgg19", {"relax.nn.conv2d": 16, "relax.matmul": 3}, VIEW_HOST),
    LightModel("zfnet512", {"relax.nn.conv2d": 5, "relax.matmul": 3}, VIEW_HOST),
]


def runner_input(model) -> tuple[str, np.ndarray]:
    """(name, value) of the one graph input, as ONNX's backend runner makes it."""
    initializers = {init.name for init in model.graph.initializer}
    (data,) = [v for v in model.graph.input if v.name not in initializers]
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    n = int(np.prod(shape))
    return data.name, (np.arange(n).reshape(shape) / n).astype(np.float32)


def where_ops_ran(report: dict) -> tuple[dict, dict]:
    """({op: count on the NPU}, {op: [why, ...] on the host}) over launched groups."""
    npu: dict = {}
    host: dict = {}
    for group in report["groups"]:
        for op in group["ops"]:
            if group["on_npu"]:
                npu[op["op"]] = npu.get(op["op"], 0) + 1
            else:
                host.setdefault(op["op"], []).append(op["why"] or group.get("reason", ""))
    return npu, host


@pytest.mark.slow
@pytest.mark.parametrize("spec", MODELS, ids=[m.name for m in MODELS])
def test_light_model(spec):
    model = onnx.load(os.path.join(LIGHT, f"light_{spec.name}.onnx"))
    expected = numpy_helper.to_array(
        onnx.load_tensor(os.path.join(LIGHT, f"light_{spec.name}_output_0.pb")))
    name, feed = runner_input(model)
    start = time.time()
    lib = tvm_ascend.build(model)
    (out,) = lib.run({name: feed})
    print(f"{spec.name}: built and ran in {time.time() - start:.0f} s")
    tol = TOLERANCES["float32_model"]  # 1e-4 / 1e-5: layers of cube accumulations
    np.testing.assert_allclose(out, expected, **tol)
    np.testing.assert_allclose(out, run_onnxruntime(model, {name: feed})[0], **tol)

    report = lib.report.to_json()
    npu, host = where_ops_ran(report)
    for op, count in spec.cube_ops.items():  # every Conv / Gemm in a cube kernel
        assert npu.get(op, 0) == count and op not in host, (op, npu.get(op), host.get(op))
    assert npu.get("relax.nn.softmax", 0) == sum(
        1 for n in model.graph.node if n.op_type == "Softmax")
    unexpected = set(host) - spec.host_ok - POOLING
    assert not unexpected, {op: host[op][:1] for op in unexpected}
    # the report says why each host op is there (pooling included, wherever it runs)
    assert all(all(why for why in reasons) for reasons in host.values()), host
    named = {entry["op"] for entry in report["host_ops"]}
    assert set(host) - VIEW_HOST <= named
    assert report["kernels"]["ascend"] > 0
