"""Elementwise op coverage: comparisons, Where, logic on bool masks, IsNaN/IsInf, Cast, Sign,
LeakyRelu, HardSigmoid, Softplus, Elu, Reciprocal, Pow and Min/Max with broadcasting, each alone
and in chains, float32 and float16, against onnxruntime (or numpy for Relax-only ops)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_ascend
from conftest import TOLERANCES, assert_close, run_onnxruntime
from onnx_models import ModelBuilder

ODD = (3, 7, 11)  # 231 elements: no multiple of a tile, of 32 bytes or of a 256-byte repeat
ONNX_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
              "bool": TensorProto.BOOL}


class OpsBuilder(ModelBuilder):
    """ModelBuilder with bool inputs and outputs of any dtype."""

    def bool_input(self, name: str, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.BOOL, shape))
        self.feeds[name] = self.rng.random(shape) < 0.5
        return name

    def typed_output(self, name: str, shape, dtype: str) -> None:
        out = self.node("Identity", [name])
        self.outputs.append(helper.make_tensor_value_info(out, ONNX_TYPES[dtype], shape))

    def special_input(self, name: str, shape) -> str:
        """An input with NaN, +inf and -inf among ordinary values."""
        name = self.input(name, shape)
        flat = self.feeds[name].reshape(-1)
        flat[::5] = np.nan
        flat[1::7] = np.inf
        flat[2::9] = -np.inf
        flat[3::4] = -flat[3::4]
        return name

    def ties_input(self, name: str, like: str) -> str:
        """An input equal to ``like`` at every third element (so Equal/LessOrEqual see ties)."""
        name = self.input(name, self.feeds[like].shape)
        self.feeds[name].reshape(-1)[::3] = self.feeds[like].reshape(-1)[::3]
        return name


def check(builder: OpsBuilder, kernels: int | None, host: int = 0, exact_gm: bool = True,
          config=None):
    """Build, run and compare every output; plan GM bytes equal the emulator's (unless
    ``exact_gm`` is False); no emulator warnings; ``kernels`` NPU kernels unless None."""
    model = builder.model()
    lib = tvm_ascend.build(model, target="ascend", config=config)
    outs = lib.run(builder.feeds)
    refs = run_onnxruntime(model, builder.feeds)
    for out, ref in zip(outs, refs):
        assert out.shape == ref.shape and out.dtype == ref.dtype, (out.dtype, ref.dtype)
        if ref.dtype == np.bool_:
            np.testing.assert_array_equal(out, ref)
        else:
            assert_close(out, ref, str(ref.dtype))
    report = lib.fusion_report()
    if kernels is not None:
        assert report["npu_kernels"] == kernels, [g.get("reason") for g in report["groups"]]
    assert report["host_groups"] == host, [g["reason"] for g in report["groups"]
                                           if not g["on_npu"]]
    profile = lib.profile()
    launches = {p["kernel"]: p for p in profile}
    for group in report["groups"]:
        if group["on_npu"]:
            launch = launches[group["kernel"]]
            assert launch["warnings"] == [], launch["warnings"]
            if not exact_gm:
                continue
            assert launch["gm_read_bytes"] == group["tiling"]["gm_read_bytes"]
            assert launch["gm_write_bytes"] == group["tiling"]["gm_write_bytes"]
    return report, profile


def _alone(b: OpsBuilder, dtype: str) -> int:
    """One chain per new op; returns the number of chains (each is one NPU kernel)."""
    x = b.special_input("xs", ODD)
    b.typed_output(b.node("IsNaN", [x]), ODD, "bool")
    if dtype == "float32":  # onnxruntime has no float16 IsInf
        b.typed_output(b.node("IsInf", [x]), ODD, "bool")
    a = b.input("a", ODD)
    t = b.ties_input("t", "a")
    for index, op in enumerate(("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")):
        b.typed_output(b.node(op, [a, t]), ODD, "bool")
    m1, m2 = b.bool_input("m1", ODD), b.bool_input("m2", ODD)
    b.typed_output(b.node("Not", [m1]), ODD, "bool")
    b.typed_output(b.node("And", [m1, m2]), ODD, "bool")
    b.typed_output(b.node("Or", [m1, m2]), ODD, "bool")
    b.output(b.node("Where", [m1, a, t]), ODD)
    b.output(b.node("Cast", [m2], to=ONNX_TYPES[dtype]), ODD)
    s = b.input("s", ODD)
    b.feeds["s"] = (b.feeds["s"] - 1.0).astype(dtype)  # both signs
    b.feeds["s"].reshape(-1)[::6] = 0
    b.output(b.node("Sign", [s]), ODD)
    b.output(b.node("Reciprocal", [a]), ODD)
    b.output(b.node("LeakyRelu", [s], alpha=0.1), ODD)
    b.output(b.node("HardSigmoid", [s], alpha=0.3, beta=0.4), ODD)
    b.output(b.node("Softplus", [s]), ODD)
    b.output(b.node("Pow", [a, b.const(np.array(3.0), "exp")]), ODD)
    if dtype == "float32":  # TVM's importer builds fp16 Elu with a float32 constant (fails)
        b.output(b.node("Elu", [s], alpha=0.7), ODD)
        return 19
    return 17


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float16", marks=pytest.mark.slow)])
def test_each_new_op_alone_matches_onnxruntime(dtype):
    b = OpsBuilder(dtype, seed=11)
    check(b, kernels=_alone(b, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_masked_chain_is_one_kernel(dtype):
    b = OpsBuilder(dtype, seed=12)
    shape = (4, 9, 37)
    x, y = b.input("x", shape), b.input("y", (37,))
    b.feeds["x"] = (b.feeds["x"] - 1.0).astype(dtype)
    mask = b.bool_input("mask", (4, 1, 37))
    keep = b.node("And", [b.node("Not", [mask]), b.node("Less", [x, y])])
    lively = b.node("Mul", [b.node("Sign", [x]), b.node("LeakyRelu", [x], alpha=0.2)])
    picked = b.node("Where", [keep, lively, b.node("Softplus", [x])])
    finite = b.node("Where", [b.node("IsNaN", [picked]), b.const(np.array(0.0)), picked])
    b.output(b.node("Add", [finite, b.node("Cast", [keep], to=ONNX_TYPES[dtype])]), shape)
    report, _ = check(b, kernels=1)
    (group,) = report["groups"]
    assert len(group["ops"]) >= 9


BROADCASTS = {  # second operand shape against (3, 7, 11): every NumPy broadcasting kind
    "size1": (1,), "trailing": (11,), "leading": (3, 1, 1),
    "middle": (1, 7, 1), "rows": (3, 7, 1), "same": (3, 7, 11),
}


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float16", marks=pytest.mark.slow)])
def test_broadcasting_of_every_kind(dtype):
    b = OpsBuilder(dtype, seed=13)
    x = b.input("x", ODD)
    for kind, shape in BROADCASTS.items():
        y = b.input(f"y_{kind}", shape)
        b.typed_output(b.node("Greater", [x, y]), ODD, "bool")
        b.output(b.node("Where", [b.node("LessOrEqual", [y, x]), y, x]), ODD)
    # both operands broadcast: (3, 1, 11) against (1, 7, 1)
    p, q = b.input("p", (3, 1, 11)), b.input("q", (1, 7, 1))
    b.output(b.node("Where", [b.node("Less", [p, q]), p, q]), ODD)
    # GM bytes: see test_gm_bytes_of_a_gathered_operand_read_twice
    check(b, kernels=2 * len(BROADCASTS) + 1, exact_gm=False)


@pytest.mark.xfail(strict=True, reason="known limit: a gathered broadcast operand read twice in "
                   "one expression (y <= x ? y : x) is one load at schedule time but two at "
                   "print time, so the kernel reads it twice and the plan counts it once")
def test_gm_bytes_of_a_gathered_operand_read_twice():
    b = OpsBuilder("float32", seed=17)
    x, y = b.input("x", ODD), b.input("y", (3, 1, 1))
    b.output(b.node("Where", [b.node("LessOrEqual", [y, x]), y, x]), ODD)
    check(b, kernels=1)


@pytest.mark.parametrize("shape", [(5,), (2, 300, 129)])
def test_tiny_and_large_tiles_compare_every_tail(shape):
    b = OpsBuilder("float32", seed=14)
    x, y = b.input("x", shape), b.input("y", shape)
    b.output(b.node("Where", [b.node("GreaterOrEqual", [x, y]), x, b.node("Neg", [y])]), shape)
    b.typed_output(b.node("Equal", [x, y]), shape, "bool")
    _, profile = check(b, kernels=2)
    cores = max(p["block_dim"] for p in profile)
    assert cores == (1 if shape == (5,) else 48)


def test_bool_gm_tensors_are_one_byte_per_element():
    b = OpsBuilder("float32", seed=15)
    n = 1000
    x, mask = b.input("x", (n,)), b.bool_input("mask", (n,))
    b.typed_output(b.node("Or", [mask, b.node("Greater", [x, b.const(np.array(1.0))])]),
                   (n,), "bool")
    _, (launch,) = check(b, kernels=1)
    assert launch["gm_read_bytes"] == n * 4 + n * 1
    assert launch["gm_write_bytes"] == n * 1


def test_int8_and_double_stay_on_the_host_with_a_reason():
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, (4, 5))
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, (4, 5))
    nodes = [helper.make_node("Abs", ["x"], ["ax"], name="abs_double"),
             helper.make_node("Cast", ["z"], ["zi"], name="cast_int8", to=TensorProto.INT8),
             helper.make_node("Less", ["ax", "ax"], ["lt"], name="less_double")]
    outs = [helper.make_tensor_value_info("ax", TensorProto.DOUBLE, (4, 5)),
            helper.make_tensor_value_info("zi", TensorProto.INT8, (4, 5)),
            helper.make_tensor_value_info("lt", TensorProto.BOOL, (4, 5))]
    model = helper.make_model(helper.make_graph(nodes, "host", [x, z], outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    feeds = {"x": np.linspace(-2, 2, 20).reshape(4, 5),
             "z": np.linspace(-90, 90, 20, dtype=np.float32).reshape(4, 5)}
    lib = tvm_ascend.build(model)
    report = lib.fusion_report()
    for group in report["groups"]:  # the importer spells Cast(int8) with int32 steps
        if any(op["dtype"] in ("float64", "int8", "int32") for op in group["ops"]):
            assert not group["on_npu"], group
    reasons = " ".join(g["reason"] for g in report["groups"] if not g["on_npu"])
    assert "abs on float64" in reasons and "less on float64" in reasons, reasons
    assert "-> int8" in reasons, reasons
    for out, ref in zip(lib.run(feeds), run_onnxruntime(model, feeds)):
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_maximum_minimum_with_broadcasting_match_numpy(dtype):
    # ONNX Max/Min arrive as stack + reduce from TVM's importer; relax.maximum/minimum (what
    # Relax models and Clip/Relu lower to) are checked here directly against numpy.
    from tvm import relax

    rng = np.random.default_rng(16)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 7, 11), dtype))
    y = relax.Var("y", relax.TensorType((7, 1), dtype))
    z = relax.Var("z", relax.TensorType((11,), dtype))
    with bb.function("main", [x, y, z]):
        with bb.dataflow():
            hi = bb.emit(relax.op.maximum(x, y))
            out = bb.emit_output(relax.op.minimum(hi, z))
        bb.emit_func_output(out)
    feeds = {"x": rng.standard_normal((3, 7, 11)).astype(dtype),
             "y": rng.standard_normal((7, 1)).astype(dtype),
             "z": rng.standard_normal((11,)).astype(dtype)}
    lib = tvm_ascend.build(bb.get(), target="ascend")
    assert lib.fusion_report()["npu_kernels"] == 1
    (out,) = lib.run(feeds)
    expected = np.minimum(np.maximum(feeds["x"], feeds["y"]), feeds["z"])
    np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                               **TOLERANCES[dtype])


SOCS_AND_LEVELS = [(soc, level) for soc in ("Ascend910B1", "Ascend310P3")
                   for level in ("conservative", "aggressive")]


@pytest.mark.parametrize("soc,level", SOCS_AND_LEVELS)
def test_and_or_with_a_broadcast_bool_operand(soc, level):
    """And/Or of a mask and a 0-d bool or a per-row bool: the operand is one value for the
    tile (or row), so the kernel branches on it at run time. The branch was printed with a
    stray closing brace, which g++ refused."""
    b = OpsBuilder("float32", seed=30)
    for op, flag in (("And", True), ("Or", False)):
        tile = b.bool_input(f"{op}_tile", (5,))
        scalar = b.bool_input(f"{op}_scalar", ())
        b.feeds[scalar] = np.array(flag)
        b.typed_output(b.node(op, [tile, scalar]), (5,), "bool")
        rows = b.bool_input(f"{op}_rows", (2, 129))
        per_row = b.bool_input(f"{op}_per_row", (2, 1))
        b.feeds[per_row] = np.array([[True], [False]])
        b.typed_output(b.node(op, [rows, per_row]), (2, 129), "bool")
    b.inits.append(numpy_helper.from_array(np.array([True]), "const_true"))  # a [1] constant
    b.typed_output(b.node("And", [b.bool_input("const_tile", (13,)), "const_true"]), (13,),
                   "bool")
    x, y = b.input("x", (2, 129)), b.input("y", (2, 129))
    keep = b.node("And", [b.bool_input("keep_rows", (2, 129)), b.bool_input("keep", (2, 1))])
    b.output(b.node("Where", [keep, x, y]), (2, 129))
    config = tvm_ascend.CompileConfig(soc_version=soc, fusion_level=level)
    check(b, kernels=None, exact_gm=False, config=config)


@pytest.mark.parametrize("soc,level", SOCS_AND_LEVELS)
def test_where_on_one_element_condition_after_a_fused_slice(soc, level):
    """Where whose condition is one element of a sliced tensor, fused with the Slice: the
    condition is one kernel scalar, so the kernel copies one operand or the other (refused
    before: "Select on a scalar condition is printed on the scalar unit"). One condition is
    true, the other false: both branches are checked."""
    b = OpsBuilder("float32", seed=31)
    starts, ends, axes = b.int_const([1, 2]), b.int_const([2, 3]), b.int_const([0, 1])
    for name, value, shape, other in (("c_true", 1.0, (2, 129), "y"),
                                      ("c_false", -1.0, (1, 5), None)):
        c = b.input(name, (4, 3))
        b.feeds[name] = b.rng.standard_normal((4, 3)).astype(np.float32)
        b.feeds[name][1, 2] = value
        cond = b.node("Greater", [b.node("Slice", [c, starts, ends, axes]),
                                  b.const(np.array(0.0), "zero")])
        x = b.input(f"x_{name}", shape)
        false_value = b.input(f"y_{name}", shape) if other else b.const(np.array(-2.5), "fill")
        b.output(b.node("Where", [cond, x, false_value]), shape)
    config = tvm_ascend.CompileConfig(soc_version=soc, fusion_level=level)
    report, _ = check(b, kernels=None, exact_gm=False, config=config)
    assert any({"slice", "where"} <= {n.split("_")[0] for n in g["onnx_nodes"]}
               for g in report["groups"] if g["on_npu"])
