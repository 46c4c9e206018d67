"""A real ATC run beside a tvm-ascend build: per rule and per ONNX op, who fused what, and why.

Per rule: each pass in ATC's ``fusion_result.json`` with its counts, beside the tvm-ascend rule
that carries that ATC name (``FusionRule.atc_names``) and our counts (``report["rule_stats"]``);
then our rules that matched but that ATC's result does not list. Per ONNX op: the ATC op that
holds it (from the graph dump's original op names) and the tvm-ascend group that holds it
(``report["groups"]``); where the two hold different sets of ONNX ops, our reason: the group's
own reason where we fuse what ATC keeps apart, the refusal on the edge between our groups
(``report["unfused_edges"]``) where ATC fuses what we keep apart. ATC gives no reasons
(``fusion_result.json`` has counts only), so the reasons are ours and the rule names ATC's.

ONNX ops are matched by node name: ATC's ONNX parser names each GE op after its ONNX node, and
the fusion report names an unnamed node ``<op type>_<index>``, which ATC may not; such ops are
shown as missing from ATC's graph rather than matched by guess.

Example
-------
>>> from tvm_ascend.atc_compare import side_by_side, format_side_by_side
>>> table = side_by_side(run, lib.fusion_report(), onnx_model)          # doctest: +SKIP
>>> print(format_side_by_side(table))                                  # doctest: +SKIP
"""
from __future__ import annotations

from .errors import FusionConfigError
from .partition.atc_result import AtcRun
from .partition.fusion_result import NARROWER_ATC_PASSES
from .partition.rules import rule_by_name


def _our_rule(atc_name: str):
    """The tvm-ascend rule that names ``atc_name`` among its ATC names, else None."""
    try:
        rule = rule_by_name(atc_name)
    except FusionConfigError:
        return None
    return rule if atc_name in rule.atc_names else None


def _counts(stats) -> dict | None:
    if not stats:
        return None
    return {"match_times": int(stats.get("match_times", 0)),
            "effect_times": int(stats.get("effect_times", 0))}


def rule_rows(run: AtcRun, report: dict) -> list:
    """Per rule: ATC's passes with their counts beside our rule and counts, then our rules that
    matched and are absent from ATC's result."""
    stats = report.get("rule_stats", {})
    rows, shown = [], set()
    for section, passes in run.rules.items():
        for name, counts in sorted(passes.items()):
            rule = _our_rule(name)
            if rule is not None:
                shown.add(rule.name)
            rows.append({"atc_name": name, "section": section,
                         "atc": {k: counts[k] for k in ("match_times", "effect_times")},
                         "rule": rule.name if rule else None,
                         "ours": _counts(stats.get(rule.name)) if rule else None,
                         # ATC's pass fuses only some of our rule's groups: counts differ
                         "narrower": name in NARROWER_ATC_PASSES})
    for name, counts in sorted(stats.items()):
        if name in shown or not counts.get("match_times"):
            continue
        rule = rule_by_name(name, "fusion report rule_stats")
        rows.append({"atc_name": None, "section": None, "atc": None, "rule": name,
                     "ours": _counts(counts), "atc_names": list(rule.atc_names)})
    return rows


def _model_ops(model) -> list:
    """(name, op type) of every ONNX node, named as the fusion report names them."""
    return [(n.name or f"{n.op_type}_{i}", n.op_type) for i, n in enumerate(model.graph.node)]


def op_rows(run: AtcRun, report: dict, model) -> list:
    """Per ONNX op: the ATC op and the tvm-ascend group holding it, whether they hold the same
    ONNX ops, and our reasons where they do not."""
    ops = _model_ops(model)
    known = {name for name, _ in ops}
    atc_of = run.op_of()
    ours = {name: group for group in report["groups"] for name in group["nodes"]}
    rows = []
    for name, op_type in ops:
        atc = atc_of.get(name)
        group = ours.get(name)
        atc_members = [n for n in atc.original_names if n in known] if atc else []
        members = [n for n in group["nodes"] if n in known] if group else []
        row = {"op": name, "type": op_type,
               "atc_op": atc.name if atc else None, "atc_type": atc.type if atc else None,
               "atc_members": atc_members, "atc_passes": list(atc.passes) if atc else [],
               "group": group["id"] if group else None, "rule": group["rule"] if group else None,
               "members": members, "same": set(atc_members) == set(members), "why": []}
        if not row["same"]:
            row["why"] = _reasons(name, group, set(members), set(atc_members), ours, report)
        rows.append(row)
    return rows


def _reasons(name: str, group, members: set, atc_members: set, ours: dict, report) -> list:
    if group is None:
        return ["no tvm-ascend kernel holds it (removed or folded before partitioning: see the "
                "report's prepare_rewrites)"]
    why = []
    extra = [n for n in group["nodes"] if n in members - atc_members]
    if extra:
        saved = group.get("gm_bytes_saved")
        why.append(f"tvm-ascend fuses it with {', '.join(extra)} in {group['id']} "
                   f"({group['rule']}, formed by {group.get('formed_by', 'the planner')}): "
                   f"{group.get('reason', '')}"
                   + (f"; {saved} GM bytes saved" if saved else ""))
    apart: dict = {}
    for other in sorted(atc_members - members):
        target = ours.get(other)
        apart.setdefault(target["id"] if target else None, []).append(other)
    for target, names in apart.items():
        if target is None:
            why.append(f"ATC fuses it with {', '.join(names)}, which no tvm-ascend kernel holds")
            continue
        edge = _edge(report, group["id"], target)
        text = f"{edge['summary']}" + (f" (hint: {edge['hint']})" if edge.get("hint") else "") \
            if edge else f"{group['id']} and {target} are not adjacent (what joins them is in " \
                         "other kernels)"
        why.append(f"ATC fuses it with {', '.join(names)} ({target} here): {text}")
    return why


def _edge(report, a: str, b: str):
    for edge in report.get("unfused_edges", []):
        if {edge["producer"], edge["consumer"]} == {a, b}:
            return edge
    return None


def side_by_side(run: AtcRun, report: dict, model) -> dict:
    """The JSON-ready side-by-side of ATC's run and a tvm-ascend fusion report of ``model``."""
    ops = op_rows(run, report, model)
    return {"atc": {"fusion_result": run.fusion_result_path, "graph_dump": run.graph_path,
                    "ops": len(run.ops)},
            "tvm_ascend": {"kernels": len(report["groups"]),
                           "fusion_level": report.get("fusion_level"),
                           "rule_set": report.get("rule_set")},
            "rules": rule_rows(run, report), "ops": ops,
            "ops_alike": sum(row["same"] for row in ops)}


def _pair(counts) -> str:
    return f"{counts['match_times']}/{counts['effect_times']}" if counts else "-"


def format_side_by_side(table: dict) -> str:
    """The side-by-side as plain text: the rules table, then each ONNX op grouped differently."""
    from pathlib import Path

    atc, ours = table["atc"], table["tvm_ascend"]
    lines = [f"side by side with real ATC ({Path(atc['fusion_result']).name}, "
             f"{Path(atc['graph_dump']).name}; rule names are ATC's, reasons tvm-ascend's): "
             f"ATC {atc['ops']} op(s), tvm-ascend {ours['kernels']} kernel(s) (fusion level "
             f"{ours['fusion_level']}, rule set {ours['rule_set']})",
             f"  {'ATC pass':<34}{'section':<14}{'ATC m/e':>9}  {'tvm-ascend rule':<34}"
             f"{'m/e':>7}"]
    for row in table["rules"]:
        rule = row["rule"] or "(no tvm-ascend rule of this name)"
        note = "  (ATC's pass is one case of this rule)" if row.get("narrower") else ""
        if row["atc_name"] is None:
            names = ", ".join(row["atc_names"])
            note = f"  (ATC's name for it, {names}, is not in its result)" if names else \
                "  (no ATC counterpart)"
        lines.append(f"  {row['atc_name'] or '-':<34}{row['section'] or '-':<14}"
                     f"{_pair(row['atc']):>9}  {rule:<34}{_pair(row['ours']):>7}{note}")
    ops = table["ops"]
    lines.append("  (m/e: match_times/effect_times; - where the rule did not match)")
    lines.append(f"per op: {table['ops_alike']} of {len(ops)} ONNX op(s) grouped alike"
                 + ("; where they differ:" if table["ops_alike"] < len(ops) else ""))
    for row in ops:
        if row["same"]:
            continue
        passes = "".join(f", {p}" for p in row["atc_passes"])
        held = f"{row['atc_op']} ({row['atc_type']}{passes}) = [{', '.join(row['atc_members'])}]" \
            if row["atc_op"] else "not in ATC's graph"
        group = f"{row['group']} {row['rule']} = [{', '.join(row['members'])}]" \
            if row["group"] else "in no kernel"
        lines += [f"  {row['op']} ({row['type']})", f"    ATC:        {held}",
                  f"    tvm-ascend: {group}"]
        lines += [f"    why: {why}" for why in row["why"]]
    return "\n".join(lines)


__all__ = ["format_side_by_side", "op_rows", "rule_rows", "side_by_side"]
