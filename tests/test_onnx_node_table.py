"""ONNX's backend node tests: a fixed sample agrees with the committed table (ONNX_NODE_TESTS.md);
the whole table is rebuilt under ``-m slow``."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from conftest import run_onnxruntime
from tools import onnx_node_limits as limits
from tools import onnx_node_table as table
from tools import onnx_tvm_reference as reference

# Node test -> the onnx.backend.test.case.node module that exports it: one or two per op class,
# in two opsets (two builds): elementwise on the NPU, an integer compare on the host, a
# last-axis log-softmax (NPU) and one over another axis (host), the cube (MatMul, Gemm with its
# epilogue, Conv), data movement (Gather with index fix-up on the host, Concat), LRN (its 3-D
# window pool on the host), and three not-applicable reasons (claim, frontend, string values).
SAMPLE = {
    "test_abs": "abs",
    "test_greater_uint8": "greater",
    "test_logsoftmax_default_axis": "logsoftmax",
    "test_logsoftmax_axis_1": "logsoftmax",
    "test_matmul_2d": "matmul",
    "test_gemm_all_attributes": "gemm",
    "test_gather_0": "gather",
    "test_concat_2d_axis_1": "concat",
    "test_lrn": "lrn",
    "test_conv_with_strides_padding": "conv",
    "test_argmax_default_axis_example": "argmax",
    "test_bernoulli": "bernoulli",
    "test_string_concat": "string_concat",
}


@pytest.fixture(scope="module")
def sample_cases():
    return table.load_cases(list(SAMPLE), set(SAMPLE.values()))


@pytest.fixture(scope="module")
def committed():
    return table.committed_rows()


def test_sample_agrees_with_committed_table(sample_cases, committed):
    """Each sample test, built here as the table built it, ends as the table says."""
    batches: dict = {}
    for name, case in sample_cases.items():
        batches.setdefault(table.batch_key(case), []).append(case)
    rows = [row for cases in batches.values() for row in table.run_batch(cases)]
    assert len(rows) == len(SAMPLE)
    for row in rows:
        expected = committed[row["test"]]
        assert (row["result"], row["where"]) == (expected["result"], expected["where"]), row
    by_name = {row["test"]: row for row in rows}
    # what the sample is there to show; if one changes, the committed table changes with it
    assert by_name["test_abs"]["where"] == "npu"
    assert by_name["test_greater_uint8"]["where"] == "host" and "uint8" in by_name[
        "test_greater_uint8"]["reason"]
    assert "argmax" in by_name["test_argmax_default_axis_example"]["reason"]
    assert "frontend" in by_name["test_bernoulli"]["reason"]
    assert "string" in by_name["test_string_concat"]["reason"]


def test_merged_batch_is_the_same_graphs(sample_cases):
    """A batch is the tests' graphs side by side: onnxruntime gives each its expected outputs."""
    names = ("test_abs", "test_greater_uint8", "test_gemm_all_attributes")
    cases = [sample_cases[n] for n in names]
    assert len({table.batch_key(c) for c in cases}) == 1
    model = table.merge_cases(cases)
    onnx.checker.check_model(model)
    feeds = {value.name: np.asarray(array) for value, array in
             zip(model.graph.input, [a for c in cases for a in c["inputs"]])}
    outputs = run_onnxruntime(model, feeds)
    expected = [o for c in cases for o in c["outputs"]]
    assert len(outputs) == len(expected) == 3
    for actual, want in zip(outputs, expected):
        assert table.compare(actual, want) == ""


def test_compare_is_nan_aware_and_exact_for_integers():
    nan = float("nan")
    assert table.compare(np.array([1.0, nan, np.inf], "float32"),
                         np.array([1.0 + 1e-7, nan, np.inf], "float32")) == ""
    assert "NaN" in table.compare(np.array([1.0, 2.0], "float32"), np.array([1.0, nan], "float32"))
    assert "values off" in table.compare(np.array([1.0, 2.1], "float32"),
                                         np.array([1.0, 2.0], "float32"))
    assert "values off" in table.compare(np.array([np.inf], "float32"),
                                         np.array([-np.inf], "float32"))
    assert "differ" in table.compare(np.array([3], "int64"), np.array([4], "int64"))
    assert "shape" in table.compare(np.zeros((2, 3), "float32"), np.zeros((3, 2), "float32"))
    # float16 is compared at its own tolerance, float64 tighter than float32
    assert table.compare(np.array([1.005], "float16"), np.array([1.0], "float16")) == ""
    assert table.compare(np.array([1 + 1e-6]), np.array([1.0])) != ""


def test_committed_table_is_consistent(committed):
    """Summary counts, Markdown twin and KNOWN_LIMITS agree with the rows."""
    with open(table.TABLE_JSON, encoding="utf-8") as handle:
        data = json.load(handle)
    assert data["summary"] == table.summarize(data["rows"])
    assert data["command"] == table.COMMAND and data["tvm_ascend_version"]
    markdown = table.TABLE_MD.read_text(encoding="utf-8")
    assert markdown == table.render_markdown(data)
    assert set(r["result"] for r in data["rows"]) <= set(table.RESULTS)
    for name, reason in table.KNOWN_LIMITS.items():
        assert committed[name]["result"] == "known_limit" and reason in committed[name]["reason"]
    for row in data["rows"]:
        if row["result"] == "known_limit":
            assert limits.known_limit(row["test"], limits.original_error(row)), row
        if row["result"] in ("failed", "not_applicable", "known_limit"):
            assert row["reason"], row
        if row["result"] == "passed":
            assert row["where"] in ("npu", "npu+host", "host", "none")


def _failed(test: str, error: str) -> dict:
    return {"test": test, "op": "", "dtype": "", "result": "failed", "where": "host",
            "reason": error, "seconds": 0.0}


@pytest.mark.parametrize("test, error", [
    ("test_cast_FLOAT_to_INT4", "InternalError: Check failed: dtype.bits % 8 == 0 (4 vs. 0) :"),
    ("test_castlike_UINT2_to_UINT8_expanded",
     "InternalError: Check failed: arr_size == nbytes (2 vs. 7) : TensorCopyFromBytes: size "
     "mismatch"),
    ("test_cast_FLOAT4E2M1_to_FLOAT16", "InternalError: Check failed: (from.MatchesCode("
     "DLDataTypeCode::kDLFloat) && to.MatchesCode(DLDataTypeCode::kDLFloat)) is false:"),
    ("test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ",
     "output 0: 12/15 values differ (exact dtype)"),
    ("test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded",
     "output 0: NaN at other positions than expected"),
    ("test_nonmaxsuppression_center_point_box_format", "output 0: shape (0, 3) != expected (3, 3)"),
    ("test_isinf_positive", "output 0: 1/6 values differ (exact dtype)"),  # a single entry
])
def test_limit_rules_classify_their_failures(test, error):
    row = limits.with_known_limit(_failed(test, error))
    assert row["result"] == "known_limit"
    assert row["reason"].startswith(limits.known_limit(test, error)) and "TVM" in row["reason"]
    assert limits.original_error(row) == error


@pytest.mark.parametrize("test, error", [
    # a family's test failing another way than its rule records stays a failure
    ("test_cast_FLOAT_to_INT4", "CodegenError: g++ exited with code 1"),
    ("test_cast_FLOAT_to_FLOAT8E4M3FN", "output 0: shape (15,) != expected (3, 5)"),
    ("test_layer_normalization_2d_axis1",
     "output 0: 3/12 values off (rtol 1e-05, atol 1e-06); output 1: shape () != expected (3, 1)"),
    ("test_roialign_aligned_true", "InternalError: Check failed: x"),
    # a test outside every rule
    ("test_slice", 'InternalError: There is no definition of I.GlobalVar("shape_func")'),
    ("test_cast_FLOAT_to_INT8", "InternalError: Check failed: dtype.bits % 8 == 0 (4 vs. 0) :"),
])
def test_limit_rules_leave_other_failures_alone(test, error):
    assert limits.known_limit(test, error) is None
    assert limits.with_known_limit(_failed(test, error))["result"] == "failed"


def test_known_limits_are_listed_for_the_table():
    listed = limits.limits_table()
    assert set(table.KNOWN_LIMITS) <= set(listed)  # the single entries, re-exported
    assert all(rule.label in listed for rule in limits.LIMIT_RULES)
    passed = {**_failed("test_relu", ""), "result": "passed"}
    assert limits.with_known_limit(passed) == passed


def test_compare_takes_narrow_floats_as_floats():
    """bfloat16 / float8 (ml_dtypes, numpy kind 'V') are compared NaN-aware and exactly."""
    bfloat16 = onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16)
    values = np.array([0.5, np.nan, np.inf], "float32").astype(bfloat16)
    assert table.compare(values.copy(), values) == ""
    shifted = np.array([0.5078125, np.nan, np.inf], "float32").astype(bfloat16)
    assert "values off (rtol 0, atol 0)" in table.compare(shifted, values)


@pytest.fixture(scope="module")
def limit_cases():
    names = {"test_relu": "relu", "test_cast_FLOAT_to_INT4": "cast",
             "test_layer_normalization_2d_axis1": "layernormalization",
             "test_nonmaxsuppression_center_point_box_format": "nonmaxsuppression",
             "test_slice": "slice"}
    return table.load_cases(list(names), set(names.values()))


def test_tvm_alone_fails_as_the_limit_rules_say(limit_cases):
    """The classification is reproducible: TVM's own llvm build fails each limit the way its
    rule records, and passes a plain test."""
    assert reference.tvm_reference(limit_cases["test_relu"])["result"] == "passed"
    for name in ("test_cast_FLOAT_to_INT4", "test_nonmaxsuppression_center_point_box_format"):
        row = reference.tvm_reference(limit_cases[name])
        assert row["result"] == "failed" and limits.known_limit(name, row["reason"]), row


def test_layer_normalization_statistics_pass_where_tvm_alone_gives_placeholders(limit_cases):
    """Regression (issue 16): TVM 0.27 imports LayerNormalization's Mean and InvStdDev as 0-d
    placeholders (a known limit until the frontend rewrote such nodes before import)."""
    case = limit_cases["test_layer_normalization_2d_axis1"]
    alone = reference.tvm_reference(case)
    assert alone["result"] == "failed" and "shape ()" in alone["reason"], alone
    row = table.run_case(case)
    assert row["result"] == "passed", row


def test_slice_with_inputs_as_bounds_builds(limit_cases):
    """ONNX Slice with starts/ends/axes/steps as graph inputs: TVM 0.27's FoldConstant left a
    call of an undefined shape_func (a tvm-ascend failure TVM alone does not have)."""
    case = limit_cases["test_slice"]
    assert reference.tvm_reference(case)["result"] == "passed"
    row = table.run_case(case)
    assert row["result"] == "passed", row


@pytest.mark.slow
def test_full_node_table_matches_committed(committed):
    """Every node test ends as the committed table says (about an hour on 2 busy cores)."""
    rows = table.run_node_tests(jobs=2)
    assert {r["test"] for r in rows} == set(committed)
    changed = [(r["test"], committed[r["test"]]["result"], r["result"], r["reason"])
               for r in rows
               if (r["result"], r["where"]) != (committed[r["test"]]["result"],
                                                committed[r["test"]]["where"])]
    assert not changed, changed[:20]
