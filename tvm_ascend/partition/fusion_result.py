"""ATC's ``fusion_result.json``: per fusion rule, how often it matched and how often it fused.

The layout is the one CANN's FusionStatisticWriter writes, so scripts written for ATC's file
read ours::

    {"session_and_graph_id_0_0": {
        "graph_fusion": {"SoftmaxFusionPass": {"match_times": "2", "effect_times": "1"}},
        "ub_fusion": {"MatMulBiasAddFusionPass": {"match_times": "3",
                                                  "repository_hit_times": "0",
                                                  "effect_times": "3"}}}}

Counts are strings, as ATC writes them. A rule is listed under ATC's name where an ATC pass
fuses the same groups (the first of ``FusionRule.atc_names`` that is not in
``_NARROWER_ATC_PASSES``), under ours otherwise, in the section of ``FusionRule.section``.
``repository_hit_times`` counts hits in ATC's UB fusion knowledge repository; tvm-ascend has
no such repository, so it is always "0". As in ATC, rules that never matched are left out, and
a section with no rule is absent. The counts come from ``report["rule_stats"]``, filled by the
grouping planner: ``{rule: {"match_times": int, "effect_times": int}}``.

Example
-------
>>> from tvm_ascend.partition.fusion_result import fusion_result
>>> stats = {"SoftmaxFusion": {"match_times": 2, "effect_times": 1}}
>>> fusion_result({"rule_stats": stats})["session_and_graph_id_0_0"]["graph_fusion"]
{'SoftmaxFusionPass': {'match_times': '2', 'effect_times': '1'}}
"""
from __future__ import annotations

import json
import os
import tempfile

from ..errors import AscendError
from .rules import rule_by_name

_SECTION_KEYS = {"GraphFusion": "graph_fusion", "UBFusion": "ub_fusion"}
# ATC passes a switch file may name to turn one of our rules off, but that fuse only some of
# its groups: counting the rule under them would report fusions the model does not have.
_NARROWER_ATC_PASSES = frozenset({
    "ConvConcatFusionPass",  # a Conv's output into a Concat; DataMovementFusion is any move
})
NARROWER_ATC_PASSES = _NARROWER_ATC_PASSES  # the side-by-side with a real ATC says so too


def result_name(rule) -> str:
    """The name ``fusion_result.json`` lists ``rule`` (a FusionRule) under: ATC's pass where
    one fuses the same groups, ours otherwise.

    Example
    -------
    >>> from tvm_ascend.partition.rules import rule_by_name
    >>> result_name(rule_by_name("DataMovementFusion"))
    'DataMovementFusion'
    """
    return next((n for n in rule.atc_names if n not in _NARROWER_ATC_PASSES), rule.name)


def fusion_result(report: dict, session_and_graph_id: str = "0_0") -> dict:
    """The ``fusion_result.json`` document of a fusion report.

    Parameters
    ----------
    report : dict
        A fusion report (``lib.fusion_report()``) with its ``rule_stats``.
    session_and_graph_id : str
        ATC's ``<session>_<graph>`` id; one build here is one graph of one session.

    Returns
    -------
    dict

    Raises
    ------
    AscendError
        When the report has no ``rule_stats`` or a count is not a non-negative integer;
        FusionConfigError when a rule name is unknown.

    Example
    -------
    >>> fusion_result(lib.fusion_report())["session_and_graph_id_0_0"]  # doctest: +SKIP
    {'ub_fusion': {...}}
    """
    if "rule_stats" not in report:
        raise AscendError("fusion report has no \"rule_stats\" (per-rule match_times and "
                          "effect_times): it was made by a planner that does not count them")
    sections: dict[str, dict] = {}
    for name, stats in sorted(report["rule_stats"].items()):
        rule = rule_by_name(name, "fusion report rule_stats")
        counts = {key: _count(stats, key, name) for key in ("match_times", "effect_times")}
        if counts["match_times"] == 0 and counts["effect_times"] == 0:
            continue  # ATC records a rule only once it matched
        key = _SECTION_KEYS[rule.section]
        entry = {"match_times": str(counts["match_times"])}
        if key == "ub_fusion":
            entry["repository_hit_times"] = "0"
        entry["effect_times"] = str(counts["effect_times"])
        sections.setdefault(key, {})[result_name(rule)] = entry
    ordered = {key: sections[key] for key in ("graph_fusion", "ub_fusion") if key in sections}
    return {f"session_and_graph_id_{session_and_graph_id}": ordered} if ordered else {}


def _count(stats, key: str, rule: str) -> int:
    value = stats.get(key) if isinstance(stats, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AscendError(f"fusion report rule_stats[{rule!r}][{key!r}] is {value!r}, not a "
                          "count (a non-negative integer)")
    return value


def write_fusion_result(report: dict, path: str, session_and_graph_id: str = "0_0") -> None:
    """Write ``fusion_result(report)`` to ``path`` atomically, indented by 4 as ATC does.

    Example
    -------
    >>> write_fusion_result(lib.fusion_report(), "dump/fusion_result.json")  # doctest: +SKIP
    """
    text = json.dumps(fusion_result(report, session_and_graph_id), indent=4)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=".json")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


__all__ = ["fusion_result", "result_name", "write_fusion_result"]
