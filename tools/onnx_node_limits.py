"""Known limits of the ONNX node-test table: failures understood to lie outside tvm-ascend.

Two kinds of entry, each quoted in ``tests/ONNX_NODE_TESTS.md``:

* ``KNOWN_LIMITS``: one test name -> why it fails;
* ``LIMIT_RULES``: a regular expression over test names *and* one the failure text must match,
  so that a test of the family failing another way (a new crash, a different mismatch) stays
  ``failed`` instead of being hidden.

Every entry was checked by building the test with TVM alone
(``python -m tools.onnx_tvm_reference TEST``: ``from_onnx`` + ``tvm.compile(target="llvm")``)
and seeing it fail the same way; a failure TVM alone does not have is a tvm-ascend bug and does
not belong here.

Example
-------
>>> from tools.onnx_node_limits import known_limit, with_known_limit
>>> known_limit("test_cast_FLOAT_to_INT4", "Check failed: dtype.bits % 8 == 0")[:40]
'TVM 0.27 has no sub-byte integer tensors'
>>> known_limit("test_cast_FLOAT_to_INT4", "RuntimeError: g++ exited with code 1") is None
True
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# The sentence every entry ends with: what was checked.
_SAME_IN_TVM = "TVM's own llvm build of from_onnx fails the same way"

# test name -> why it fails and is not a bug of tvm-ascend (quoted in the table).
KNOWN_LIMITS: dict[str, str] = {
    "test_isinf_negative": (
        "TVM 0.27's ONNX importer ignores IsInf's detect_positive=0 (it flags +inf too); TVM's "
        "own llvm build of from_onnx gives the same result"),
    "test_isinf_positive": (
        "TVM 0.27's ONNX importer ignores IsInf's detect_negative=0 (it flags -inf too); TVM's "
        "own llvm build of from_onnx gives the same result"),
}


@dataclass(frozen=True)
class LimitRule:
    """A family of tests that fail the same known way.

    Parameters
    ----------
    tests : str
        Regular expression a test name must match in full.
    error : str
        Regular expression the failure text (the row's reason) must contain.
    reason : str
        Why, and what would lift the limit (quoted in the table).

    Example
    -------
    >>> rule = LimitRule(r"test_x_\\w+", r"^shape", "why")
    >>> rule.matches("test_x_a", "shape () != expected (2,)"), rule.matches("test_x_a", "crash")
    (True, False)
    """

    tests: str
    error: str
    reason: str

    def matches(self, test: str, error: str) -> bool:
        """Whether a failure of ``test`` with text ``error`` is this limit."""
        return bool(re.fullmatch(self.tests, test) and re.search(self.error, error))

    @property
    def label(self) -> str:
        """How the table names the rule (in place of a test name)."""
        return f"/{self.tests}/ when the error matches /{self.error}/"


# a numeric mismatch of some output (not a crash, not a shape)
_VALUES_WRONG = r"^output \d+: (NaN at other positions than expected|\d+/\d+ values (differ|off))"
# tests casting to or from the named ONNX type (Cast, CastLike and CastLike's expansion)
_CAST = r"test_cast(like)?_(\w+_)?{}(_\w+)?"

LIMIT_RULES: tuple[LimitRule, ...] = (
    LimitRule(
        _CAST.format(r"U?INT[24]"),
        r"dtype\.bits % 8 == 0|TensorCopyFromBytes: size mismatch",
        "TVM 0.27 has no sub-byte integer tensors: compiling a 2- or 4-bit int/uint buffer "
        "fails its check `dtype.bits % 8 == 0`, and a numpy int4/uint4/int2/uint2 input (one "
        "byte a value) does not fit TVM's packed buffer (TensorCopyFromBytes: size mismatch); "
        f"{_SAME_IN_TVM}. Lifting it needs sub-byte dtypes in TVM (or the frontend widening "
        "them to int8/uint8)"),
    LimitRule(
        _CAST.format("FLOAT4E2M1"),
        r"MatchesCode\(DLDataTypeCode::kDLFloat\)",
        "TVM 0.27 cannot cast to or from float4_e2m1fn: its cast lowering requires both dtypes "
        "to have DLPack's kDLFloat code (`from.MatchesCode(kDLFloat) && to.MatchesCode(kDLFloat)`"
        f" fails; float4_e2m1fn has a type code of its own); {_SAME_IN_TVM}"),
    LimitRule(
        _CAST.format(r"FLOAT8E(4M3FN|4M3FNUZ|5M2|5M2FNUZ|8M0)"),
        _VALUES_WRONG,
        "TVM 0.27's llvm casts between float32/float16 and the float8 types are right only "
        "for in-range normal values: out-of-range values, inf and NaN are neither saturated "
        "nor mapped (1e6 to float8_e4m3fn gives -15, not 448; inf gives 1), the *fnuz types "
        "come out scaled by 2 or 1/2 (a wrong exponent bias), float8 zero decodes to the "
        "smallest normal (2**-7 for e4m3fn) and NaN to 480, and Cast's round_mode='up' to "
        f"float8_e8m0fnu is ignored; {_SAME_IN_TVM}, value for value"),
    LimitRule(
        r"test_(roialign_aligned_(false|true)|gridsample_bicubic"
        r"|averagepool_2d_ceil_last_window_starts_on_pad)",
        r"^output 0: \d+/\d+ values off \(rtol 1e-05, atol 1e-06\)",
        "ONNX's expected outputs for this test are written by hand to 4 significant digits "
        "(0.4664, 0.1511, -0.1406, ...): onnx.reference (and onnxruntime where it has the op) "
        "differ from them by up to ~3e-4 relative, within ONNX's own runner tolerance (rtol "
        "1e-3) but not this table's float32 rtol 1e-5; TVM's own llvm build of from_onnx "
        "differs from them the same way"),
    LimitRule(
        r"test_roialign_mode_max",
        r"^output 0: \d+/\d+ values off",
        "TVM 0.27's RoiAlign mode='max' takes the max of the bilinearly interpolated samples "
        "(topi.vision.roi_align), while ONNX's reference takes the max over each sample's "
        "weighted corner values (what onnxruntime implements): 0.567 vs 0.345 at [0, 0, 0, 0]; "
        f"{_SAME_IN_TVM}, value for value"),
    LimitRule(
        r"test_nllloss_NCd1d2d3d4d5_mean_weight_expanded",
        r"^output 0: 1/1 values off",
        "TVM 0.27's llvm ReduceSum adds the 6480 float32 terms one after another in float32 "
        "(relative error 2e-5: -0.4950118 vs -0.4950012); numpy's pairwise sum, onnxruntime "
        f"and onnx.reference give the expected value; {_SAME_IN_TVM} (-0.4950118)"),
    LimitRule(
        r"test_spacetodepth_crd_mode_example",
        r"^output 0: \d+/\d+ values off",
        "TVM 0.27's ONNX importer ignores SpaceToDepth's mode attribute (mode='CRD', opset "
        "28) and always uses the DCR order; the _expanded test, which spells CRD out in "
        f"Reshape/Transpose, passes; {_SAME_IN_TVM}"),
    LimitRule(
        r"test_nonmaxsuppression_\w+",
        r"^output 0: shape \(0, 3\) != expected",
        "TVM 0.27's ONNX importer reads NonMaxSuppression's max_output_boxes_per_class as 0 "
        "when it is a graph input rather than a constant ('max_output_boxes_per_class = 0  # "
        f"Default value'), so no box is selected; {_SAME_IN_TVM} (an empty (0, 3) result). "
        "Give it as an initializer to get boxes"),
)


def known_limit(test: str, error: str) -> str | None:
    """Why a failure of ``test`` with text ``error`` is a known limit, or None if it is not.

    Example
    -------
    >>> known_limit("test_slice", "InternalError: ...") is None
    True
    """
    if test in KNOWN_LIMITS:
        return KNOWN_LIMITS[test]
    for rule in LIMIT_RULES:
        if rule.matches(test, error):
            return rule.reason
    return None


def with_known_limit(row: dict) -> dict:
    """``row``, a failure that is a known limit turned into ``known_limit`` with the recorded
    reason quoted before the error.

    Example
    -------
    >>> with_known_limit({"test": "test_cast_FLOAT_to_INT2", "result": "failed",
    ...                   "reason": "Check failed: dtype.bits % 8 == 0"})["result"]
    'known_limit'
    """
    if row["result"] != "failed":
        return row
    reason = known_limit(row["test"], row["reason"])
    if reason is None:
        return row
    return {**row, "result": "known_limit", "reason": f"{reason} (error: {row['reason']})"}


def original_error(row: dict) -> str:
    """The failure text a ``known_limit`` row was classified from (its reason's tail)."""
    marker = " (error: "
    reason = row["reason"]
    return reason[reason.index(marker) + len(marker):-1] if marker in reason else reason


def limits_table() -> dict[str, str]:
    """Every known limit for the table's header: ``{test or rule label: reason}``."""
    return {**KNOWN_LIMITS, **{rule.label: rule.reason for rule in LIMIT_RULES}}
