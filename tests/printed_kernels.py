"""Scheduled kernels of every template, on either SoC, for checks that read what the printers
emit (a support module, not a test file): the ACL launchers compiled against the real AscendCL
headers, the AscendC calls checked against the real AscendC headers."""
from __future__ import annotations

import functools

import numpy as np

import tvm_ascend
from tvm_ascend import ir_attrs
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel
from tvm_ascend.kernel_record import record_of
from tvm_ascend.schedules import TEMPLATES, template_by_name
from tvm_ascend.soc import get_soc
from onnx_models import ModelBuilder, attention_model, conv_bn

SOCS = ("Ascend910B1", "Ascend310P3")


def _vector_and_cube_model(dtype: str):
    """One graph with a part for each template but attention: elementwise, data movement,
    row and axis reductions, MatMul + epilogue, MatMul + LayerNorm (matmul_rows), SwiGLU's
    gate and up MatMuls with their join (matmul_gated), Conv + BN, MaxPool; tails everywhere
    (odd rows and columns)."""
    b = ModelBuilder(dtype, seed=4)
    x = b.input("x", (5, 72))
    w = b.const(b.rng.standard_normal((72, 40)) * 0.1, "w")
    mm = b.node("Add", [b.node("MatMul", [x, w]), b.const(np.ones(40), "bias")])
    b.output(b.node("Relu", [mm]), (5, 40))
    b.output(b.node("Softmax", [x], axis=-1), (5, 72))
    b.output(b.node("Tanh", [b.node("Mul", [x, b.const(np.array(0.5), "half")])]), (5, 72))
    b.output(b.node("Transpose", [x], perm=[1, 0]), (72, 5))
    b.output(b.node("ReduceSum", [x, b.int_const([0])], keepdims=1), (1, 72))
    r = b.input("r", (3, 24, 48))
    w1 = b.const(b.rng.standard_normal((48, 48)) * 0.1, "w1")
    h = b.node("Add", [b.node("MatMul", [r, w1]), b.const(np.zeros(48), "b1")])
    b.output(b.node("LayerNormalization", [h, b.const(np.ones(48), "gamma"),
                                           b.const(np.zeros(48), "beta")], axis=-1,
                    epsilon=1e-5), (3, 24, 48))
    s = b.input("s", (7, 40))
    gate = b.node("MatMul", [s, b.const(b.rng.standard_normal((40, 24)) * 0.1, "wg")])
    up = b.node("MatMul", [s, b.const(b.rng.standard_normal((40, 24)) * 0.1, "wu")])
    b.output(b.node("Mul", [b.node("Mul", [gate, b.node("Sigmoid", [gate])]), up]), (7, 24))
    img = b.input("img", (1, 8, 10, 10))
    b.output(conv_bn(b, img, 8, 16), (1, 16, 10, 10))
    b.output(b.node("MaxPool", [img], kernel_shape=[2, 2], strides=[2, 2]), (1, 8, 5, 5))
    return b.model()


def kernels_of(model, soc, every_method: bool = False,
               input_shape: dict | None = None) -> list[ScheduledKernel]:
    """Every NPU group of ``model``, partitioned as a build would (aggressive fusion, the
    ``input_shape`` given) and scheduled with its template's first knobs; with
    ``every_method``, also with the first knobs of each other kernel method the template
    offers (the conv's Load3D variant)."""
    result = tvm_ascend.partition_for_ascend(model, tvm_ascend.CompileConfig(
        fusion_level="aggressive", soc_version=soc.name, input_shape=input_shape or {}))
    kernels = []
    for gv, func in result.mod.functions.items():
        if not (func.attrs and func.attrs.get("Codegen") == "ascend"):
            continue
        template = template_by_name(record_of(func).template)
        prim = func.attrs[ir_attrs.PRIM_FUNC]
        space = template.knob_space(prim, soc)
        chosen = [space[0]]
        if every_method:
            methods = {getattr(space[0], "method", None)}
            for knobs in space:
                if getattr(knobs, "method", None) not in methods:
                    methods.add(knobs.method)
                    chosen.append(knobs)
        for knobs in chosen:
            scheduled, tiling = template.schedule(prim, soc, knobs)
            kernels.append(ScheduledKernel(gv.name_hint, scheduled, tiling,
                                           {"name": gv.name_hint, "rule": "test", "ops": []}))
    return kernels


@functools.lru_cache(maxsize=None)
def kernels_of_every_template(soc_name: str) -> tuple[ScheduledKernel, ...]:
    """Scheduled kernels for ``soc_name`` covering every template of ``TEMPLATES`` (in float16,
    and an attention in float32), checked to cover them all."""
    soc = get_soc(soc_name)
    kernels = kernels_of(_vector_and_cube_model("float16"), soc)
    kernels += kernels_of(attention_model(batch=1, seq=20, heads=2, dim=32, proj=False,
                                           dtype="float16").model(), soc)
    missing = {t.name for t in TEMPLATES} - {k.tiling.template for k in kernels}
    assert not missing, f"{soc_name}: no kernel of template(s) {sorted(missing)}"
    return tuple(kernels)


def _ranged_model():
    """A MatMul + bias + ReLU (symbolic M), a LayerNorm over symbolic rows and a Softmax over
    a symbolic row length, all over one dimension s given as a range."""
    from onnx import TensorProto, helper
    w = helper.make_tensor("w", TensorProto.FLOAT, (40, 24),
                           (np.arange(960) % 7 * 0.01).astype(np.float32).tolist())
    bias = helper.make_tensor("b", TensorProto.FLOAT, (24,), [0.5] * 24)
    gamma = helper.make_tensor("g", TensorProto.FLOAT, (40,), [1.0] * 40)
    beta = helper.make_tensor("z", TensorProto.FLOAT, (40,), [0.0] * 40)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["y"], name="relu"),
             helper.make_node("LayerNormalization", ["x", "g", "z"], ["n"], name="ln", axis=-1),
             helper.make_node("Softmax", ["k"], ["p"], name="sm", axis=-1)]
    graph = helper.make_graph(
        nodes, "ranged",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s", 40]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 3, "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "s", 24]),
         helper.make_tensor_value_info("n", TensorProto.FLOAT, [2, "s", 40]),
         helper.make_tensor_value_info("p", TensorProto.FLOAT, [2, 3, "s"])], [w, bias, gamma, beta])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@functools.lru_cache(maxsize=None)
def runtime_tiled_kernels(soc_name: str) -> tuple[ScheduledKernel, ...]:
    """The kernels of a model over a ranged dimension s (1~300), as the build schedules them:
    elementwise/matmul and row kernels whose tiling is computed at run time."""
    kernels = kernels_of(_ranged_model(), get_soc(soc_name),
                         input_shape={"x": (2, "1~300", 40), "k": (2, 3, "1~300")})
    assert all(k.tiling.plan.runtime is not None for k in kernels), soc_name
    assert {k.tiling.template for k in kernels} >= {"matmul", "row_reduce"}, soc_name
    return tuple(kernels)
