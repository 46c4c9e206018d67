"""The fusion report of a geared build: one full section per gear, and what they share.

Each gear is a static build with its own groups, tilings, estimates and peak memory (buffers
are planned per gear: only one gear runs at a time, so the library needs the largest of them);
the top level says which gear flag made them, how many kernels are stored once for all gears
and the counts scripts read (``npu_kernels``: kernels in the library; ``rule_stats`` summed
over the gears for ``fusion_result.json``).

Example
-------
>>> report = lib.fusion_report()                                   # doctest: +SKIP
>>> [(g["gear"], g["peak_memory_bytes"]) for g in report["gears"]]  # doctest: +SKIP
[('x:1,3,224,224', 9633792), ('x:8,3,224,224', 77070336)]
"""
from __future__ import annotations

from .report import report_table

# keys equal in every gear's report (they come from the configuration and the model)
_COMMON = ("soc_version", "fusion_level", "precision_mode", "op_select_implmode",
           "nodes_before", "rule_set", "rules_on")


def gears_report(spec, reports: list[dict], symbols: tuple, stored: int, shared: int) -> dict:
    """The report of a geared build.

    ``spec``: the ``GearSpec``; ``reports[i]``: gear i's ``fusion_report`` with its kernels'
    stored symbols; ``symbols[i]``: gear i's {planned symbol: stored symbol}; ``stored``:
    kernels in the library; ``shared``: kernels used by more than one gear.
    """
    sections = []
    for gear, report, mapping in zip(spec.gears, reports, symbols):
        sections.append({"gear": gear.label, "index": gear.index, "values": list(gear.values),
                         "input_shape": {n: list(s) for n, s in gear.shapes.items()},
                         "kernel_symbols": dict(mapping), **report})
    top = {key: reports[0][key] for key in _COMMON if key in reports[0]}
    stats: dict = {}
    for report in reports:
        for rule, counts in report.get("rule_stats", {}).items():
            into = stats.setdefault(rule, {"match_times": 0, "effect_times": 0})
            for key in into:
                into[key] += counts.get(key, 0)
    top.update({
        "gear_flag": spec.flag, "input_format": spec.input_format,
        "gear_labels": [g.label for g in spec.gears],
        "npu_kernels": stored, "kernels_shared": shared,
        "npu_kernels_per_gear": [r["npu_kernels"] for r in reports],
        "ops": max(r["ops"] for r in reports),
        "host_groups": max(r["host_groups"] for r in reports),
        "host_ops": _union_host_ops(reports),
        "peak_memory_bytes": max(r["peak_memory_bytes"] for r in reports),
        "peak_memory_bytes_per_gear": {g.label: r["peak_memory_bytes"]
                                       for g, r in zip(spec.gears, reports)},
        "kernel_failures": [dict(f, gear=g.label) for g, r in zip(spec.gears, reports)
                            for f in r.get("kernel_failures", [])],
        "rule_stats": stats,
        "gears": sections,
    })
    return top


def _union_host_ops(reports: list[dict]) -> list[dict]:
    seen, ops = set(), []
    for report in reports:
        for op in report.get("host_ops", []):
            key = (op["var"], op["op"], op["node"])
            if key not in seen:
                seen.add(key)
                ops.append(op)
    return ops


def stored_symbols(report: dict, mapping: dict) -> dict:
    """``report`` (one gear's) with every group's kernel named as the library stores it."""
    groups = []
    for group in report["groups"]:
        group = dict(group)
        for key in ("kernel", "symbol"):
            if group.get(key) in mapping:
                group[key] = mapping[group[key]]
        groups.append(group)
    return {**report, "groups": groups}


def gears_table(report: dict) -> str:
    """The plain-text report: a head line on the gears, then each gear's table."""
    per_gear = ", ".join(f"{g['gear']}: {g['npu_kernels']} kernel(s), peak "
                         f"{g['peak_memory_bytes']} B" for g in report["gears"])
    lines = [f"{len(report['gears'])} gears ({report['gear_flag']}): {report['npu_kernels']} "
             f"NPU kernel(s) stored, {report['kernels_shared']} shared by several gears; "
             f"{per_gear}"]
    for section in report["gears"]:
        lines += ["", f"== gear {section['index']}: {section['gear']} "
                  f"(peak memory {section['peak_memory_bytes']} B) =="]
        lines.append(report_table(section))
    return "\n".join(lines)
