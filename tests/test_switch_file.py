"""ATC fusion switch files: both formats, apply() over the levels, and every error's message."""
from __future__ import annotations

import json
import os

import pytest

import tvm_ascend
from tvm_ascend.errors import FusionConfigError
from tvm_ascend.partition.policy import enabled_rules
from tvm_ascend.partition.rules import RULES, rules_for_level
from tvm_ascend.partition.switch_file import FusionSwitches, load_switch_file

EVERY_RULE = frozenset(rule.name for rule in RULES)
GRAPH = frozenset(rule.name for rule in RULES if rule.section == "GraphFusion")
UB = EVERY_RULE - GRAPH


def _write(tmp_path, text: str, name: str = "fusion_switch.cfg") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _error(path: str) -> str:
    with pytest.raises(FusionConfigError) as info:
        load_switch_file(path)
    return str(info.value)


def test_text_format_with_comments_both_spellings_and_case(tmp_path):
    path = _write(tmp_path, "# fence softmax off\n\n  SoftmaxFusionPass : OFF  # ATC name\n"
                            "HorizontalFusion:on\n")
    switches = load_switch_file(path)
    assert switches.rules == (("HorizontalFusion", True), ("SoftmaxFusion", False))
    assert switches.section_all == ()
    conservative = rules_for_level("conservative")
    assert switches.apply(conservative) == (conservative - {"SoftmaxFusion"}) | {
        "HorizontalFusion"}
    assert switches.to_json() == {"source": path, "ALL": {},
                                  "rules": {"HorizontalFusion": "on", "SoftmaxFusion": "off"}}


def test_text_all_off_really_turns_everything_off_and_rule_on_wins_wherever_it_stands(tmp_path):
    before = load_switch_file(_write(tmp_path, "LayerNormFusionPass:on\nALL:off\n", "a.cfg"))
    after = load_switch_file(_write(tmp_path, "ALL:off\nLayerNormFusionPass:on\n", "b.cfg"))
    for switches in (before, after):
        for level in ("conservative", "aggressive"):
            assert switches.apply(rules_for_level(level)) == {"LayerNormFusion"}
    only_off = load_switch_file(_write(tmp_path, "all:off\n", "c.cfg"))
    assert only_off.apply(rules_for_level("aggressive")) == frozenset()


def test_text_all_on_turns_on_rules_the_level_left_off(tmp_path):
    switches = load_switch_file(_write(tmp_path, "ALL:on\nRecomputeFusion:off\n"))
    conservative = rules_for_level("conservative")
    assert "HorizontalFusion" not in conservative
    assert switches.apply(conservative) == EVERY_RULE - {"RecomputeFusion"}
    assert switches.apply(frozenset()) == EVERY_RULE - {"RecomputeFusion"}


def test_json_format_all_per_section_and_explicit_rules_win(tmp_path):
    doc = {"Switch": {"GraphFusion": {"SoftmaxFusionPass": "on", "ALL": "off"},
                      "UBFusion": {"ALL": "on", "MatMulBiasAddFusionPass": "off"}}}
    switches = load_switch_file(_write(tmp_path, json.dumps(doc, indent=2), "s.json"))
    assert dict(switches.section_all) == {"GraphFusion": False, "UBFusion": True}
    for level in ("conservative", "aggressive"):
        assert switches.apply(rules_for_level(level)) == \
            (UB - {"MatMulEpilogueFusion"}) | {"SoftmaxFusion"}
    assert switches.to_json()["ALL"] == {"GraphFusion": "off", "UBFusion": "on"}


def test_json_rule_may_sit_in_either_section(tmp_path):
    # ATC lists MatMulBiasAddFusionPass under GraphFusion; ours is a UB rule: both are accepted
    doc = '{"Switch": {"GraphFusion": {"MatMulBiasAddFusionPass": "off"}}}'
    switches = load_switch_file(_write(tmp_path, doc))
    assert switches.apply(rules_for_level("conservative")) == \
        rules_for_level("conservative") - {"MatMulEpilogueFusion"}


def test_apply_over_levels_and_rule_sets(tmp_path):
    switches = FusionSwitches("f", (("UBFusion", False),), (("CastFusion", False),))
    for rule_set in ("tvm_ascend", "atc_style", "tvm_fuseops"):
        for level in ("off", "conservative", "aggressive"):
            start = rules_for_level(level, rule_set)
            assert switches.apply(start) == (start & GRAPH) - {"CastFusion"}


def test_compile_config_uses_the_switch_file(tmp_path):
    path = _write(tmp_path, "ElementwiseFusion:off\n")
    config = tvm_ascend.CompileConfig(fusion_switch_file=path)
    assert enabled_rules(config) == rules_for_level("conservative") - {"ElementwiseFusion"}
    bad = tvm_ascend.CompileConfig(fusion_switch_file=_write(tmp_path, "ElementwiseFusoin:off\n",
                                                               "bad.cfg"))
    with pytest.raises(FusionConfigError, match="ElementwiseFusion"):
        enabled_rules(bad)
    # before any work starts: the model, a file that is not there, is never read
    with pytest.raises(FusionConfigError, match="ElementwiseFusion"):
        tvm_ascend.build(str(tmp_path / "missing.onnx"), config=bad)


@pytest.mark.parametrize("text, line, words", [
    ("SoftmaxFusionPass:off\nLayerNormFusionPass\n", 2, ["LayerNormFusionPass", "no colon"]),
    ("SoftmaxFusionPass:maybe\n", 1, ["'maybe'", "SoftmaxFusionPass", "'on' or 'off'"]),
    ("# c\n:off\n", 2, ["no rule name"]),
    ("ALL:off\n\nSoftmaxFusionPas:on\n", 3, ["'SoftmaxFusionPas'", "did you mean",
                                             "SoftmaxFusionPass"]),
    ("SoftmaxFusion:off\nSoftmaxFusionPass:on\n", 2, ["'SoftmaxFusionPass'", "rule SoftmaxFusion",
                                                      ":1", "keep one"]),
    ("ALL:on\nALL:off\n", 2, ["ALL of GraphFusion", ":1"]),
    ("MatMulBiasAddFusionPass:off\nBatchMatMulFusionPass:on\n", 2,
     ["BatchMatMulFusionPass", "MatMulEpilogueFusion"]),
])
def test_text_errors_name_file_line_and_word(tmp_path, text, line, words):
    path = _write(tmp_path, text)
    message = _error(path)
    assert f"{path}:{line}:" in message, message
    for word in words:
        assert word in message, message


def test_same_rule_twice_with_the_same_value_is_accepted(tmp_path):
    switches = load_switch_file(_write(tmp_path, "SoftmaxFusion:off\nSoftmaxFusionPass:off\n"))
    assert switches.rules == (("SoftmaxFusion", False),)


@pytest.mark.parametrize("text, line, words", [
    ('{"Switch": {\n  "GraphFusion": {"ALL": "off",}\n}}', 2, [":2:", "not valid JSON"]),
    ('{"Switch": {\n  "GraphFusoin": {"ALL": "off"}\n}}', 2, ["'GraphFusoin'", "unknown section",
                                                            "UBFusion"]),
    ('{"Switch": {"UBFusion": {\n "ALL": "on",\n "LayerNormFusionPas": "off"}}}', 3,
     ["'LayerNormFusionPas'", "LayerNormFusionPass"]),
    ('{"Switch": {"UBFusion": {\n "ALL": true}}}', 2, ["'ALL'", "a boolean"]),
    ('{"Switch": {"UBFusion": {\n "ALL": "of"}}}', 2, ["'of'", "'on' or 'off'"]),
    ('{"Switch": {\n "UBFusion": ["ALL"]}}', 2, ["'UBFusion'", "an array"]),
    ('{"Switch": "off"}', 1, ["\"Switch\" must be an object", "a string"]),
    ('{"Switch": {"UBFusion": {"ALL": "on"}},\n "Extra": 1}', 2, ["'Extra'"]),
    ('{"Switch": {"UBFusion": {\n"SoftmaxFusionPass": "on",\n"SoftmaxFusionPass": "off"}}}', 3,
     ["'SoftmaxFusionPass'", ":2", "rule SoftmaxFusion"]),
    ('{"Switch": {"UBFusion": {"ALL": "on"},\n"UBFusion": {"ALL": "off"}}}', 2,
     ["ALL of UBFusion"]),
])
def test_json_errors_name_file_line_and_word(tmp_path, text, line, words):
    path = _write(tmp_path, text, "switch.json")
    message = _error(path)
    assert f"{path}:{line}:" in message, message
    for word in words:
        assert word in message, message


def test_json_syntax_error_names_the_column(tmp_path):
    path = _write(tmp_path, '{"Switch": {"UBFusion": {"ALL" "on"}}}')
    assert f"{path}:1:32:" in _error(path)  # column of the "on" missing its colon


@pytest.mark.parametrize("text", ["", "# everything commented out\n", '{"Switch": {}}', "{}"])
def test_a_file_that_names_no_rule_is_an_error(tmp_path, text):
    path = _write(tmp_path, text)
    message = _error(path)
    assert path in message and ("names no rule" in message or "must be an object" in message)


def test_missing_unreadable_and_binary_files(tmp_path):
    missing = str(tmp_path / "nope.cfg")
    assert "nope.cfg" in _error(missing) and "does not exist" in _error(missing)
    assert "is a directory" in _error(str(tmp_path))
    binary = tmp_path / "bin.cfg"
    binary.write_bytes(b"\xff\xfe\x00Softmax")
    assert "not UTF-8" in _error(str(binary))
    if os.geteuid() != 0:  # root reads files whatever their mode
        locked = _write(tmp_path, "ALL:off\n", "locked.cfg")
        os.chmod(locked, 0)
        assert "cannot be read" in _error(locked)


def test_a_byte_order_mark_and_windows_line_ends_are_accepted(tmp_path):
    path = tmp_path / "bom.cfg"
    path.write_bytes(b"\xef\xbb\xbfSoftmaxFusionPass:off\r\nCastFusion:off\r\n")
    assert load_switch_file(str(path)).rules == (("CastFusion", False), ("SoftmaxFusion", False))


def test_json_key_written_with_escapes_still_gets_a_line(tmp_path):
    path = _write(tmp_path, '{"Switch": {"UBFusion": {\n"Soft\\u006daxFusionPas": "on"}}}')
    message = _error(path)
    assert f"{path}:1:" in message and "'SoftmaxFusionPas'" in message
