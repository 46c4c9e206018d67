"""The prepare-stage rewrites that move host ops onto the NPU (prepare/canonical.py,
prepare/batch_norm.py): Dropout removed, a BatchNorm with no Conv before it lowered to a scale
and shift, Softmax over a non-last axis turned to the last. Each model matches onnxruntime (or
numpy), runs where the report says, and the report names the rewrite (or why it was not made)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm_ffi
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_ascend
from conftest import TOLERANCES, assert_close, run_onnxruntime
from onnx_models import ModelBuilder
from tvm_ascend.partition.report import explain_node
from tvm_ascend.prepare import prepare
from tvm_ascend.prepare.relax_rewrite import prepare_rewrites


def _build(builder, tol=None, **config):
    """Build, run and compare every output with onnxruntime; (lib, report)."""
    model = builder.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(**config))
    outs = lib.run(builder.feeds)
    refs = run_onnxruntime(model, builder.feeds)
    for out, ref in zip(outs, refs):
        if ref.dtype == np.bool_:
            continue  # compared by the test itself (the importer's mask is not bool)
        if tol is None:
            assert_close(out, ref, builder.dtype)
        else:
            np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), **tol)
    return lib, lib.fusion_report()


def _records(report, rewrite: str) -> dict:
    return {r["node"]: r for r in report["prepare_rewrites"] if r["rewrite"] == rewrite}


def _groups_of(report, node: str) -> list[dict]:
    return [g for g in report["groups"] if node in g["nodes"]]


def _ops(report) -> set:
    return {op["op"] for g in report["groups"] for op in g["ops"]}


def _stats(b, channels: int) -> list[str]:
    """BatchNorm scale, bias, mean and variance initializers."""
    return [b.const(b.rng.uniform(0.5, 1.5, channels), "gamma"),
            b.const(b.rng.standard_normal(channels) * 0.5, "beta"),
            b.const(b.rng.standard_normal(channels) * 0.5, "mean"),
            b.const(b.rng.uniform(0.5, 2.0, channels), "var")]


# ---- Dropout ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_dropout_is_removed_and_its_neighbours_share_a_kernel(dtype, tmp_path):
    b = ModelBuilder(dtype, seed=40)
    x = b.input("x", (2, 7, 13))
    relu = b.node("Relu", [x])
    b.nodes.append(helper.make_node("Dropout", [relu, b.const(np.array(0.3), "ratio")],
                                    ["dropped"], name="drop"))
    exp = b.node("Exp", ["dropped"])
    b.output(exp, (2, 7, 13))
    lib, report = _build(b, dump_graph=True, dump_path=str(tmp_path))
    assert report["kernels"] == {"ascend": 1, "host": 0}
    (group,) = [g for g in report["groups"] if g["launch"]]
    # the removed node is computed by its producer: its group lists it
    assert group["on_npu"] and group["nodes"] == [relu, "drop", exp]
    assert "relax.nn.dropout" not in _ops(report)
    record = _records(report, "DropoutRemoval")["drop"]
    assert record["applied"] and record["groups"] == [group["id"]] and record["on_npu"]
    assert "identity" in record["reason"]
    assert (tmp_path / "graphs").is_dir()  # the fused-graph dump places the removed node
    assert "DropoutRemoval" in explain_node(report, "drop")
    assert "DropoutRemoval drop (applied)" in str(lib.report)


def test_dropout_as_model_output_and_on_a_graph_input(tmp_path):
    """Tanh -> Dropout (output and mask are model outputs); graph input -> Dropout -> Sqrt."""
    b = ModelBuilder("float32", seed=41)
    x = b.input("x", (3, 5, 7))
    tanh = b.node("Tanh", [x])
    b.nodes.append(helper.make_node("Dropout", [tanh], ["out", "mask"], name="drop"))
    b.outputs += [helper.make_tensor_value_info("out", TensorProto.FLOAT, (3, 5, 7)),
                  helper.make_tensor_value_info("mask", TensorProto.BOOL, (3, 5, 7))]
    b.nodes.append(helper.make_node("Dropout", [b.input("y", (4, 9))], ["y_kept"],
                                    name="drop_in"))
    root = b.node("Sqrt", ["y_kept"])
    b.output(root, (4, 9))
    lib, report = _build(b, dump_graph=True, dump_path=str(tmp_path))
    out, mask, _ = lib.run(b.feeds)
    assert_close(out, np.tanh(b.feeds["x"].astype(np.float64)), "float32")
    # an inference mask keeps everything (the importer types it like the data, not bool)
    assert np.array_equal(mask.astype(bool), run_onnxruntime(b.model(), b.feeds)[1])
    assert mask.all()
    assert report["kernels"] == {"ascend": 2, "host": 0}
    # the output var now holds Tanh's result; a Dropout of a graph input goes to its reader
    assert sorted(g["nodes"] for g in report["groups"] if g["launch"]) == [
        [root, "drop_in"], [tanh, "drop"]]
    assert all(r["applied"] and r["on_npu"] for r in _records(report, "DropoutRemoval").values())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_cast_to_its_own_dtype_is_removed_not_run_on_the_host(dtype, tmp_path):
    """LLaMA's TorchScript export casts the residual sum to its own dtype before RMSNorm; the
    identity Cast ran on the host and cut the residual add from the norm."""
    b = ModelBuilder(dtype, seed=42)
    x, r = b.input("x", (4, 70)), b.input("r", (4, 70))
    total = b.node("Add", [x, r])
    to = TensorProto.FLOAT if dtype == "float32" else TensorProto.FLOAT16
    b.nodes.append(helper.make_node("Cast", [total], ["same"], name="same_cast", to=to))
    b.output(b.node("Exp", ["same"]), (4, 70))
    # a Cast that is the model's output: the output keeps its name
    b.nodes.append(helper.make_node("Cast", [b.node("Tanh", [x])], ["out_cast"],
                                    name="out_cast", to=to))
    b.outputs.append(helper.make_tensor_value_info("out_cast", to, (4, 70)))
    lib, report = _build(b, dump_graph=True, dump_path=str(tmp_path))
    assert report["kernels"] == {"ascend": 2, "host": 0}
    assert "relax.astype" not in _ops(report)
    records = _records(report, "IdentityCastRemoval")
    assert set(records) == {"same_cast", "out_cast"}
    assert all(rec["applied"] and rec["on_npu"] for rec in records.values())
    (group,) = _groups_of(report, "same_cast")
    assert group["on_npu"] and total in group["nodes"]


def _padding_mask(b, batch: int, seq: int, feature: str, int_mask: bool):
    """LLaMA TorchScript's padding mask: the mask flattened to [B*S, 1], gathered with the
    constant indices b*S + s laid out [B, 1, 1, S], reshaped back and Expanded to the shape it
    has, then a Where of 0 / -1e4 added to ``feature`` ([B, 1, S, S])."""
    if int_mask:
        name = "mask"
        b.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, (batch, seq)))
        values = np.ones((batch, seq), np.int64)
        values[-1, -3:] = 0
        b.feeds[name] = values
        mask = b.node("Cast", [name], to=TensorProto.BOOL)
    else:
        mask = b.node("Greater", [b.input("mask", (batch, seq)), b.const(np.asarray(1.0))])
    flat = b.node("Reshape", [mask, b.int_const([batch * seq, 1], "flat")])
    ids = np.arange(batch * seq, dtype=np.int64).reshape(batch, 1, 1, seq)
    rows = b.node("Gather", [flat, b.int_const(ids, "ids")], axis=0)
    shaped = b.node("Reshape", [rows, b.int_const([batch, 1, 1, seq], "shape")])
    same = b.node("Expand", [shaped, b.int_const([batch, 1, 1, seq], "same")])
    bias = b.node("Where", [same, b.const(np.asarray(0.0)), b.const(np.asarray(-1e4))])
    out = b.node("Add", [feature, bias])
    return out, (rows, same)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_gather_of_a_whole_axis_in_order_is_a_view_and_an_identity_expand_is_removed(dtype):
    """The padding mask's Gather with constant indices 0..B*S-1 becomes a Reshape and its Expand
    to its own shape is removed: with a float mask, nothing runs on the host."""
    b = ModelBuilder(dtype, seed=7)
    x = b.input("x", (3, 1, 13, 13))
    out, (gather, expand) = _padding_mask(b, 3, 13, x, int_mask=False)
    b.output(out, (3, 1, 13, 13))
    lib, report = _build(b, fusion_level="aggressive", soc_version="Ascend910B1")
    assert report["kernels"]["host"] == 0, report["host_ops"]
    assert {op["op"] for op in report["host_ops"]} == {"relax.reshape"}  # bool views: free
    assert "relax.take" not in _ops(report) and "relax.broadcast_to" not in _ops(report)
    (gathered,) = _records(report, "ConstantGatherAsReshape").values()
    assert gathered["applied"] and "a reshape to (3, 1, 1, 13, 1)" in gathered["reason"]
    (expanded,) = _records(report, "IdentityExpandRemoval").values()
    assert expanded["applied"] and expanded["node"] == expand


def test_a_gather_that_reorders_or_repeats_rows_stays_a_gather():
    """Indices that are not the whole axis in order (reversed; repeated) are a real gather."""
    b = ModelBuilder("float32", seed=7)
    x = b.input("x", (6, 5))
    rev = b.node("Gather", [x, b.int_const(np.arange(6)[::-1].copy(), "rev")], axis=0)
    rep = b.node("Gather", [rev, b.int_const([0, 1, 2, 3, 4, 4], "rep")], axis=1)
    b.output(b.node("Exp", [rep]), (6, 6))
    _, report = _build(b, fusion_level="aggressive", soc_version="Ascend910B1")
    assert [op for op in _ops(report) if op == "relax.take"] == ["relax.take"]
    assert not _records(report, "ConstantGatherAsReshape")


def test_dynamo_padding_mask_gather_nd_of_every_index_in_order_is_a_view():
    """The dynamo export gathers the [B, S] mask with GatherND index tuples (b, s) laid out
    [B, 1, 1, S, 2] (it had no kernel and ran on the host): a reshape, nothing on the host."""
    b = ModelBuilder("float32", seed=7)
    x = b.input("x", (2, 1, 16, 16))
    mask = b.node("Greater", [b.input("mask", (2, 16)), b.const(np.asarray(1.0))])
    grid = np.stack(np.meshgrid(np.arange(2), np.arange(16), indexing="ij"), -1)
    ids = b.int_const(grid.reshape(2, 1, 1, 16, 2), "ids")
    rows = b.node("GatherND", [mask, ids])
    bias = b.node("Where", [rows, b.const(np.asarray(0.0)), b.const(np.asarray(-1e4))])
    b.output(b.node("Add", [x, bias]), (2, 1, 16, 16))
    _, report = _build(b, fusion_level="aggressive", soc_version="Ascend910B1")
    assert report["kernels"]["host"] == 0, report["host_ops"]
    assert "relax.gather_nd" not in _ops(report)
    (record,) = _records(report, "ConstantGatherAsReshape").values()
    assert record["applied"] and record["node"] == rows


def test_llama_padding_mask_views_of_bool_launch_nothing_on_the_host():
    """With LLaMA's int64 mask, only its Cast to bool runs on the host (the vector Cast takes
    no int64, and the report says so); the bool Reshapes around the gather are free views, not
    host launches, and the Where + Add run on the NPU."""
    b = ModelBuilder("float32", seed=7)
    x = b.input("x", (2, 1, 16, 16))
    out, _ = _padding_mask(b, 2, 16, x, int_mask=True)
    b.output(out, (2, 1, 16, 16))
    _, report = _build(b, fusion_level="aggressive", soc_version="Ascend910B1")
    assert report["kernels"] == {"ascend": 1, "host": 1}
    (host,) = [g for g in report["groups"] if g["launch"] and not g["on_npu"]]
    assert [op["op"] for op in host["ops"]] == ["relax.astype"]
    assert "int64 -> bool" in host["reason"]
    views = [g for g in report["groups"] if not g["launch"]]
    assert views and all("free (no copy)" in g["reason"] for g in views)


def _rotary(b, x, seq: int, dim: int):
    """LLaMA's rotary embedding: x * cos + rotate_half(x) * sin, rotate_half(x) =
    concat(-x2, x1) over the last axis; cos and sin are constant tables [1, 1, seq, dim]."""
    half = dim // 2
    x1 = b.node("Slice", [x, b.int_const([0]), b.int_const([half]), b.int_const([-1])])
    x2 = b.node("Slice", [x, b.int_const([half]), b.int_const([dim]), b.int_const([-1])])
    neg = b.node("Neg", [x2])
    rot = b.node("Concat", [neg, x1], axis=-1)
    angles = np.arange(seq)[:, None] * (0.5 ** np.arange(dim))[None, :]
    cos = b.const(np.cos(angles)[None, None], "cos")
    sin = b.const(np.sin(angles)[None, None], "sin")
    out = b.node("Add", [b.node("Mul", [x, cos]), b.node("Mul", [rot, sin])])
    return out, neg


@pytest.mark.parametrize("soc,dtype", [("Ascend910B1", "float32"), ("Ascend310P3", "float16")])
def test_rotary_embedding_is_one_kernel_with_the_negation_as_a_sign(soc, dtype):
    """Regression (issue 19, corpus LLaMA): rotate_half's Neg before the Concat was a kernel of
    its own (the data-movement template computes nothing before a Concat), two per rotary.
    The Concat of the pieces times a constant -1/+1 sign fuses with * sin and + x * cos: one
    kernel, 19 rows (a tail) of 40 on several cores."""
    b = ModelBuilder(dtype, seed=3)
    x = b.input("x", (2, 3, 19, 40))
    out, neg = _rotary(b, x, 19, 40)
    b.output(out, (2, 3, 19, 40))
    lib, report = _build(b, fusion_level="aggressive", soc_version=soc)
    assert report["kernels"] == {"ascend": 1, "host": 0}, report["unfused_edges"]
    assert "relax.negative" not in _ops(report)
    (record,) = _records(report, "NegatedConcatAsSign").values()
    assert record["applied"]
    (group,) = _groups_of(report, neg)  # the Neg's node is the kernel's, as the plan needs
    assert group["on_npu"] and group["tiling"]["cores"] > 1


def test_a_concat_without_negated_pieces_is_left_alone():
    b = ModelBuilder("float32", seed=3)
    x = b.input("x", (4, 16))
    halves = [b.node("Slice", [x, b.int_const([lo]), b.int_const([lo + 8]), b.int_const([1])])
              for lo in (0, 8)]
    b.output(b.node("Concat", [b.node("Exp", [halves[1]]), halves[0]], axis=1), (4, 16))
    _, report = _build(b, fusion_level="aggressive", soc_version="Ascend910B1")
    assert not _records(report, "NegatedConcatAsSign")


def _gqa_attention(b, heads: int, kv_heads: int, seq: int, depth: int, mask_heads: int = 1,
                   casts: tuple = ()):
    """LLaMA's attention with grouped KV heads: K and V repeated (Unsqueeze, Expand, Reshape:
    repeat_kv), scores scaled, a mask [2, mask_heads, S, S] added, Softmax, the probabilities
    cast to each ONNX dtype of ``casts`` in turn, times V."""
    g = heads // kv_heads
    q = b.input("q", (2, heads, seq, depth))

    def repeat(name):
        x = b.input(name, (2, kv_heads, seq, depth))
        wide = b.node("Expand", [b.node("Unsqueeze", [x, b.int_const([2])]),
                                 b.int_const([2, kv_heads, g, seq, depth], "wide")])
        return b.node("Reshape", [wide, b.int_const([2, heads, seq, depth], "rep")])

    k, v = repeat("k"), repeat("v")
    scores = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                            b.const(np.asarray(depth ** -0.5))])
    mask = b.input("mask", (2, mask_heads, seq, seq))
    probs = b.node("Softmax", [b.node("Add", [scores, mask])], axis=-1)
    for to in casts:
        probs = b.node("Cast", [probs], to=to)
    out = b.node("MatMul", [probs, v])
    b.output(out, (2, heads, seq, depth))
    return out


def _broadcasts(report) -> dict:
    """group id -> shapes of its broadcast_to ops, for the groups that have one."""
    found = {g["id"]: [o["shape"] for o in g["ops"] if o["op"] == "relax.broadcast_to"]
             for g in report["groups"]}
    return {gid: shapes for gid, shapes in found.items() if shapes}


@pytest.mark.parametrize("soc,dtype", [("Ascend910B1", "float32"), ("Ascend310P3", "float16")])
def test_grouped_query_attention_reads_k_and_v_without_repeating_them(soc, dtype):
    """Regression (issue 19, corpus LLaMA): repeat_kv was a copy kernel per layer for V (and
    kept K's transpose out of its rotary kernel). The query heads of each KV head now share its
    K and V along a group axis that the attention kernel reads with stride 0; the mask gains
    the group axis as a view. 4 query heads over 2 KV heads, 19 positions (tails)."""
    b = ModelBuilder(dtype, seed=5)
    _gqa_attention(b, 4, 2, 19, 16)
    lib, report = _build(b, fusion_level="aggressive", soc_version=soc)
    (record,) = _records(report, "GroupedQueryAttention").values()
    assert record["applied"] and "repeated 2x" in record["reason"]
    attention = [g for g in report["groups"] if "AttentionFusion" in g["rules"]]
    assert len(attention) == 1 and attention[0]["on_npu"]
    # K and V are read as they are: their broadcasts along the group axis are strides of the
    # attention kernel, and no kernel repeats them (nor the mask)
    assert _broadcasts(report) == {attention[0]["id"]: [[2, 2, 2, 19, 16]] * 2}
    assert report["kernels"]["host"] == 0


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend310P3"])
def test_grouped_query_attention_matches_through_the_casts_after_the_softmax(soc):
    """Regression (issue 19, corpus LLaMA TorchScript op18 float16: 10 kernels per layer on
    910B1, 9 now): the export casts the probabilities to float32 and back before P @ V, and
    the match stopped at the Casts, so K and V were repeated. The Casts are re-emitted on the
    grouped rows; K and V are read as they are."""
    b = ModelBuilder("float16", seed=5)
    _gqa_attention(b, 4, 2, 19, 16, casts=(TensorProto.FLOAT, TensorProto.FLOAT16))
    _, report = _build(b, fusion_level="aggressive", soc_version=soc)
    (record,) = _records(report, "GroupedQueryAttention").values()
    assert record["applied"] and "repeated 2x" in record["reason"]
    attention = [g for g in report["groups"] if "AttentionFusion" in g["rules"]]
    assert len(attention) == 1 and attention[0]["on_npu"]
    assert sum(o["op"] == "relax.astype" for o in attention[0]["ops"]) == 2
    assert _broadcasts(report) == {attention[0]["id"]: [[2, 2, 2, 19, 16]] * 2}


def test_grouped_query_attention_with_a_mask_per_query_head_is_left_with_the_reason():
    b = ModelBuilder("float32", seed=5)
    _gqa_attention(b, 4, 2, 8, 16, mask_heads=4)
    _, report = _build(b, fusion_level="aggressive", soc_version="Ascend910B1")
    (record,) = _records(report, "GroupedQueryAttention").values()
    assert not record["applied"] and "differs per query head" in record["reason"]


# ---- BatchNorm --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_standalone_batchnorm_runs_on_the_npu_with_its_relu(dtype):
    """BN -> ReLU -> Conv (DenseNet's pre-activation), 7 channels: BN and ReLU are one kernel."""
    b = ModelBuilder(dtype, seed=42)
    x = b.input("x", (1, 7, 5, 6))
    bn = b.node("BatchNormalization", [x, *_stats(b, 7)], epsilon=1e-3)
    relu = b.node("Relu", [bn])
    w = b.const(b.rng.standard_normal((5, 7, 3, 3)) * 0.2, "w")
    b.output(b.node("Conv", [relu, w], pads=[1, 1, 1, 1]), (1, 5, 5, 6))
    _, report = _build(b, TOLERANCES["cube/" + dtype])
    assert report["kernels"] == {"ascend": 2, "host": 0}
    (group,) = _groups_of(report, bn)
    assert group["on_npu"] and relu in group["nodes"]
    assert "BatchNormFolding" in group["rules"] and "ElementwiseFusion" in group["rules"]
    assert "relax.nn.batch_norm" not in _ops(report)
    record = _records(report, "BatchNormLowering")[bn]
    assert record["applied"] and record["on_npu"] and record["rule"] == "BatchNormFolding"
    assert report["rule_stats"]["BatchNormFolding"]["effect_times"] == 1


def test_conv_batchnorm_folding_still_wins():
    """Conv -> BN folds into the weights; the BN after the ReLU has no Conv and is lowered."""
    b = ModelBuilder("float32", seed=43)
    x = b.input("x", (1, 6, 7, 7))
    w = b.const(b.rng.standard_normal((7, 6, 3, 3)) * 0.2, "w")
    conv = b.node("Conv", [x, w], pads=[1, 1, 1, 1])
    folded = b.node("BatchNormalization", [conv, *_stats(b, 7)])
    relu = b.node("Relu", [folded])
    lowered = b.node("BatchNormalization", [relu, *_stats(b, 7)])
    b.output(lowered, (1, 7, 7, 7))
    _, report = _build(b, TOLERANCES["cube/float32"])
    assert report["kernels"]["host"] == 0
    (conv_group,) = _groups_of(report, conv)
    assert folded in conv_group["nodes"]
    assert {"ConvEpilogueFusion", "BatchNormFolding"} <= set(conv_group["rules"])
    assert list(_records(report, "BatchNormLowering")) == [lowered]  # not the folded one
    assert all(g["on_npu"] for g in _groups_of(report, lowered))
    assert "relax.nn.batch_norm" not in _ops(report)


def test_batchnorm_of_float16_data_with_float32_statistics():
    """The importer casts to float32 around the BN; the scale and shift are float32 too."""
    b = ModelBuilder("float16", seed=44)
    x = b.input("x", (2, 9, 3, 5))
    stats = [b.rng.uniform(0.5, 1.5, 9), b.rng.standard_normal(9), b.rng.standard_normal(9),
             b.rng.uniform(0.5, 2.0, 9)]
    names = []
    for index, value in enumerate(stats):
        names.append(f"stat{index}")
        b.inits.append(numpy_helper.from_array(value.astype(np.float32), names[-1]))
    bn = b.node("BatchNormalization", [x, *names], epsilon=1e-4)
    b.output(bn, (2, 9, 3, 5))
    lib, report = _build(b)
    gamma, beta, mean, var = (s.astype(np.float32).astype(np.float64).reshape(1, 9, 1, 1)
                              for s in stats)
    ref = (b.feeds["x"].astype(np.float64) - mean) / np.sqrt(var + 1e-4) * gamma + beta
    (out,) = lib.run(b.feeds)
    assert_close(out, ref, "float16")
    assert report["kernels"]["host"] == 0
    assert _records(report, "BatchNormLowering")[bn]["on_npu"]


def test_batchnorm_over_any_relax_axis():
    """relax.nn.batch_norm over axis 2 and over the last axis (ONNX imports axis 1 only)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3, 5, 4), "float32"))
    rng = np.random.default_rng(45)
    refs = []

    def bn(data, axis, channels):
        stats = [rng.uniform(0.5, 1.5, channels), rng.standard_normal(channels),
                 rng.standard_normal(channels), rng.uniform(0.5, 2.0, channels)]
        refs.append((axis, [s.astype(np.float32).astype(np.float64) for s in stats]))
        call = relax.op.nn.batch_norm(data, *[relax.const(s.astype(np.float32)) for s in stats],
                                      axis=axis, epsilon=1e-5, training=False)
        return bb.emit(relax.TupleGetItem(bb.emit(call), 0))

    with bb.function("main", [x]):
        with bb.dataflow():
            y = bn(bn(x, 2, 5), 3, 4)
            out = bb.emit_output(relax.op.exp(y))
        bb.emit_func_output(out)
    mod = bb.get()
    records = prepare_rewrites(prepare(mod))
    assert [r["applied"] for r in records] == [True, True]
    lib = tvm_ascend.build(mod)
    feed = rng.uniform(0.1, 2.0, (2, 3, 5, 4)).astype(np.float32)
    ref = feed.astype(np.float64)
    for axis, stats in refs:
        gamma, beta, mean, var = (s.reshape((-1,) + (1,) * (3 - axis)) for s in stats)
        ref = (ref - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(lib.run({"x": feed})[0], np.exp(ref),
                               **TOLERANCES["float32_model"])
    report = lib.fusion_report()
    assert report["kernels"] == {"ascend": 1, "host": 0}


def test_batchnorm_stays_whole_when_its_rule_is_off(tmp_path):
    b = ModelBuilder("float32", seed=46)
    x = b.input("x", (1, 7, 4, 3))
    bn = b.node("BatchNormalization", [x, *_stats(b, 7)])
    b.output(b.node("Relu", [bn]), (1, 7, 4, 3))
    switch = tmp_path / "fusion_switch.cfg"
    switch.write_text("BatchNormBnInferFusionPass:off\n")
    lib, report = _build(b, fusion_switch_file=str(switch))
    record = _records(report, "BatchNormLowering")[bn]
    assert not record["applied"] and not record["on_npu"]
    assert "BatchNormFolding:on" in record["reason"]
    assert "relax.nn.batch_norm" in _ops(report) and report["kernels"]["host"] == 1
    assert "BatchNormFolding:on" in explain_node(report, bn)


def test_float16_conv_batchnorm_with_fusion_off_is_lowered_and_unfused():
    """TVM 0.27 legalizes a float16 batch_norm to float32 outputs (the next Conv then fails
    its type check), so with fusion off a float16 BatchNorm is still lowered: two unfused
    elementwise kernels, said in the record."""
    b = ModelBuilder("float16", seed=48)
    x = b.input("x", (1, 3, 6, 5))
    conv = b.node("Conv", [x, b.const(b.rng.standard_normal((7, 3, 1, 1)) * 0.3, "w")])
    bn = b.node("BatchNormalization", [conv, *_stats(b, 7)])
    w2 = b.const(b.rng.standard_normal((4, 7, 1, 1)) * 0.3, "w2")
    b.output(b.node("Conv", [bn, w2]), (1, 4, 6, 5))
    _, report = _build(b, TOLERANCES["cube/float16"], fusion_level="off")
    record = _records(report, "BatchNormLowering")[bn]
    assert record["applied"] and "float16" in record["reason"]
    assert "relax.nn.batch_norm" not in _ops(report)
    assert report["kernels"] == {"ascend": 4, "host": 0}  # conv, multiply, add, conv


def test_batchnorm_with_statistics_from_graph_inputs_is_not_lowered():
    b = ModelBuilder("float32", seed=47)
    x = b.input("x", (1, 5, 3, 3))
    mean = b.input("mean", (5,))
    gamma, beta, _, var = _stats(b, 5)
    bn = b.node("BatchNormalization", [x, gamma, beta, mean, var])
    b.output(bn, (1, 5, 3, 3))
    mod = prepare(tvm_ascend.frontend.load_model(b.model()))
    (record,) = prepare_rewrites(mod)
    assert record["node"] == bn and not record["applied"]
    assert "not a constant" in record["reason"]


def test_training_mode_batchnorm_is_not_lowered():
    """relax's batch_norm defaults to training=True: batch statistics, nothing to fold."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3, 4), "float32"))
    stats = [relax.const(np.full(3, v, "float32")) for v in (1.0, 0.0, 0.0, 1.0)]
    with bb.function("main", [x]):
        with bb.dataflow():
            tup = bb.emit(relax.op.nn.batch_norm(x, *stats, axis=1))
            out = bb.emit_output(relax.op.exp(bb.emit(relax.TupleGetItem(tup, 0))))
        bb.emit_func_output(out)
    (record,) = prepare_rewrites(prepare(bb.get()))
    assert not record["applied"] and "training-mode" in record["reason"]


# ---- Softmax over a non-last axis -------------------------------------------------------------

@pytest.mark.parametrize("op,dtype,shape,axis", [
    ("Softmax", "float32", (2, 7, 5, 6), 1),
    ("Softmax", "float16", (2, 7, 5, 6), 1),
    ("LogSoftmax", "float32", (3, 5, 7, 6), -2),
])
def test_softmax_over_a_non_last_axis_runs_on_the_npu(op, dtype, shape, axis):
    b = ModelBuilder(dtype, seed=48)
    x = b.input("x", shape)
    node = b.node(op, [x], axis=axis)
    b.output(node, shape)
    lib, report = _build(b)
    record = _records(report, "SoftmaxAxisToLast")[node]
    assert record["applied"] and record["on_npu"] and "Transpose" in record["reason"]
    mine = _groups_of(report, node)
    assert [g["id"] for g in mine] == record["groups"]
    # the planner fused the transposes with the softmax or left them apart: every kernel of
    # the model is one of this node's, all on the NPU
    assert report["kernels"] == {"ascend": len({g["kernel"] for g in mine}), "host": 0}
    reducing = [g for g in mine if any("softmax" in o["op"] for o in g["ops"])]
    assert len(reducing) == 1 and "row_reduce" in reducing[0]["reason"]
    assert f"SoftmaxAxisToLast {node} (applied)" in str(lib.report)


def test_softmax_with_unit_trailing_axes_is_reshaped():
    b = ModelBuilder("float32", seed=49)
    x = b.input("x", (3, 7, 1, 1))
    node = b.node("LogSoftmax", [x], axis=1)
    b.output(node, (3, 7, 1, 1))
    _, report = _build(b)
    record = _records(report, "SoftmaxAxisToLast")[node]
    assert record["applied"] and "Reshape" in record["reason"]
    assert report["kernels"] == {"ascend": 1, "host": 1}
    assert "relax.permute_dims" not in _ops(report)
    # the reshape back to (3, 7, 1, 1) is the model's output, which TVM's host build copies
    # (no template takes it in the softmax's kernel): a host group, not a free view
    (kernel,) = [g for g in _groups_of(report, node) if g["on_npu"]]
    assert "relax.nn.log_softmax" in [op["op"] for op in kernel["ops"]]
    (copy,) = [g for g in _groups_of(report, node) if g["launch"] and not g["on_npu"]]
    assert [op["op"] for op in copy["ops"]] == ["relax.reshape"]
    assert "a model output" in copy["reason"] and not record["on_npu"]


def test_softmax_with_a_dynamic_shape_stays_on_the_host_and_says_why():
    b = ModelBuilder("float32", seed=50)
    x = b.input("x", (2, 7, 5, 6))
    node = b.node("Softmax", [x], axis=1)
    b.output(node, (2, 7, 5, 6))
    _, report = _build(b, input_shape="x:-1,7,5,6")
    record = _records(report, "SoftmaxAxisToLast")[node]
    assert not record["applied"] and not record["on_npu"]
    assert "dynamic shape" in record["reason"] and "--input_shape" in record["reason"]
    assert report["kernels"] == {"ascend": 0, "host": 1}


def test_rewrites_leave_a_model_without_those_ops_alone():
    mod = tvm_ascend.frontend.load_model(_relu_model())
    assert prepare_rewrites(prepare(mod)) == []
    assert tvm_ffi.structural_equal(prepare(mod)["main"].body, mod["main"].body)


def _relu_model():
    b = ModelBuilder("float32", seed=51)
    b.output(b.node("Relu", [b.input("x", (4, 6))]), (4, 6))
    return b.model()


# ---- one-element constants (canonical.one_element_constants_as_scalars) ------------------

def test_one_element_constants_become_scalars_only_where_the_shape_stays():
    """Mul(x, c[1, 1]) reads c as a 0-d constant (an immediate in the kernel, as the attention
    template needs its scale); Add(y[3], c[1, 1]) broadcasts y up to [1, 3] and keeps c."""
    b = ModelBuilder("float32", seed=51)
    x, y = b.input("x", (4, 6)), b.input("y", (3,))
    scaled = b.node("Mul", [x, b.const(np.full((1, 1), 0.75), "scale")])
    b.output(scaled, (4, 6))
    b.output(b.node("Add", [y, b.const(np.full((1, 1), 0.5), "shift")]), (1, 3))
    from tvm.ir.expr import Constant

    mod = prepare(tvm_ascend.frontend.load_model(b.model()))
    consts = {str(call.op.name): [a.ty.ndim for a in call.args if isinstance(a, Constant)]
              for call in (bnd.value for blk in mod["main"].body.blocks for bnd in blk.bindings)
              if isinstance(call, relax.Call) and hasattr(call.op, "name")}
    assert consts["relax.multiply"] == [0] and consts["relax.add"] == [2]
    lib, report = _build(b)
    assert [o.shape for o in lib.run(b.feeds)] == [(4, 6), (1, 3)]
