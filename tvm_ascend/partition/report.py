"""The fusion report: every group, the rule that formed it, what it saves; every refusal and why."""
from __future__ import annotations

import json
import os
import tempfile

import tvm
from tvm import relax

from .. import ir_attrs
from ..cost_model.bands import band_for_template
from ..cost_model.timing import end_to_end_us, l2_bytes
from ..errors import FusionConfigError
from ..soc import get_soc
from .dim_bounds import bound_bytes, main_ranges, range_analyzer
from .rules import RULES

# Ops whose result shares its input's memory in TVM's memory plan (no copy, no new buffer).
_VIEW_OPS = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def fusion_report(result, tilings: dict, config, nodes_before: int) -> dict:
    """A JSON-ready report of one partition (``fusion_report.json`` in dumps).

    Keys scripts depend on: ``nodes_before``, ``kernels`` ({"ascend", "host"}: launches per
    inference), ``groups`` (each with ``id``, ``rule``, ``nodes``, ``kernel``,
    ``gm_bytes_saved``; a kernel that also writes a shared result for other kernels has
    ``exports``: ``node``, ``var``, ``op``, ``read_by``, the names of those kernels' groups)
    and ``unfused_edges`` (``producer``, ``consumer``, ``reason``: in
    full, every template's refusal; ``summary``: the one reason that decided, one line;
    ``hint``: what a user can do, "" when nothing).
    """
    groups, ids = [], {}
    for index, group in enumerate(result.groups):
        entry = {"id": f"G{index}", "nodes": group.to_json()["onnx_nodes"], **group.to_json()}
        ids[group.name] = entry["id"]
        tiling = tilings.get(group.symbol)
        if tiling is not None:
            entry["tiling"] = json.loads(tiling.to_json())
            entry["gm_bytes"] = tiling.gm_read_bytes + tiling.gm_write_bytes
            entry["l2_bytes"] = sum(l2_bytes(tiling))
        else:  # a host group reads its inputs and writes its output once
            entry["gm_bytes"], entry["l2_bytes"] = group.io_bytes, 0
        # of the bytes through the GM address space, those L2 serves (an estimate, as the
        # timing model charges them) and the rest, which HBM moves
        entry["hbm_bytes"] = entry["gm_bytes"] - entry["l2_bytes"]
        if "time_us" in entry["estimate"]:
            entry["estimate"] = with_band(entry["estimate"],
                                          tiling.template if tiling is not None else None)
        groups.append(entry)
    host_ops = [{"var": op.var, "op": op.op, "node": op.node, "why": op.decision.reason}
                for op in result.ops.values() if not op.decision.ok]
    npu = [g for g in groups if g["on_npu"]]
    host = [g for g in groups if not g["on_npu"] and g["launch"]]  # views launch nothing
    edges = [{"producer": ids[p], "consumer": ids[c], "reason": reason, "hint": hint,
              "summary": summary} for p, c, reason, hint, summary in result.edges]
    return {
        "soc_version": config.soc_version,
        "fusion_level": config.fusion_level if config.autofusion else "off",
        "precision_mode": config.precision_mode,
        "op_select_implmode": config.op_select_implmode,
        "nodes_before": nodes_before,
        "ops": len(result.ops),
        "kernels": {"ascend": len(npu), "host": len(host)},
        "npu_kernels": len({g["kernel"] for g in npu}),
        "host_groups": len(host),
        "free_views": len(groups) - len(npu) - len(host),
        "groups": groups,
        "unfused_edges": edges,
        "host_ops": host_ops,
        "rule_set": result.policy.rule_set,
        "rules_on": sorted(result.policy.rules),
        "rule_stats": rule_stats(result),
        "horizontal_fusion": result.horizontal,
        "prepare_rewrites": prepare_rewrites(result.mod, groups),
        "peak_memory_bytes": peak_memory_bytes(result.mod),
        "estimate": model_estimate(groups, config.soc_version),
    }


def prepare_rewrites(mod, groups: list) -> list:
    """The prepare stage's rewrites (Dropout removed, BatchNorm lowered, Softmax axis moved,
    multi-axis reductions as rows, window sums as slices),
    applied or refused, each with the ids of the groups that now compute its ONNX node and
    whether every one of them that launches runs on the NPU (a removed node has no group)."""
    attrs = mod["main"].attrs
    key = ir_attrs.PREPARE_REWRITES
    records = [json.loads(str(r)) for r in attrs[key]] if attrs and key in attrs else []
    for record in records:
        mine = [g for g in groups if record["node"] in g["nodes"]]
        launched = [g for g in mine if g["launch"]]  # free host views launch nothing
        record["groups"] = [g["id"] for g in mine]
        record["on_npu"] = bool(launched) and all(g["on_npu"] for g in launched)
    return records


def rule_stats(result) -> dict:
    """Per rule, ATC's two counts: ``match_times`` (candidate groups of that kind the planner
    considered) and ``effect_times`` (groups of that kind in the compiled model)."""
    effect: dict = {}
    for group in result.groups:
        if group.on_npu:
            for rule in group.rules:
                effect[rule] = effect.get(rule, 0) + 1
    stats = {}
    for rule in RULES:
        matched = max(result.rule_matches.get(rule.name, 0), effect.get(rule.name, 0))
        if matched:
            stats[rule.name] = {"match_times": matched, "effect_times": effect.get(rule.name, 0)}
    return stats


def with_band(estimate: dict, template: str | None) -> dict:
    """A copy of a group's ``estimate`` with its uncertainty band: ``band_us`` (fastest,
    slowest time the calibration rows of its kernel class allow) and ``band`` (the class)."""
    band = band_for_template(template)
    low, high = band.interval(estimate["time_us"])
    return {**estimate, "band_us": [round(low, 3), round(high, 3)],
            "band": band.kernel_class if band.calibrated else f"{band.kernel_class} "
                                                              "(uncalibrated)"}


def model_estimate(groups: list, soc_version: str) -> dict:
    """Estimated latency of one inference (ESTIMATE, timing model).

    ``latency_us``, the figure decisions use, is the device's timeline: the sum over launches
    of each one's time on the device, its start-up included, with the host's submissions
    hidden behind it (the host runs ahead; GE's sink mode submits a static graph as one task).
    ``latency_us_low`` / ``latency_us_high``: the same launches submitted one by one from the
    host into one stream, at the low and the high end of the measured submission time per
    launch (``host_submit_us``); where the host falls behind, the device waits
    (``cost_model.timing.end_to_end_us``). Host groups count as launches, as in the sum.
    ``latency_band_us``: the sum of the launches' uncertainty bands (cost_model.bands).
    """
    latency = sum(g["estimate"].get("time_us", 0.0) for g in groups)
    roofline = sum(g["estimate"].get("roofline_us", 0.0) for g in groups)
    band = [sum(g["estimate"].get("band_us", (0.0, 0.0))[end] for g in groups)
            for end in (0, 1)]
    launched = [g for g in groups if g["launch"]]
    times = [g["estimate"].get("time_us", 0.0) for g in launched]
    soc = get_soc(soc_version)
    return {"soc": soc_version, "latency_us": round(latency, 3), "roofline_us": round(roofline, 3),
            "latency_band_us": [round(band[0], 3), round(band[1], 3)],
            "latency_us_low": round(end_to_end_us(times, soc.submit_low_us), 3),
            "latency_us_high": round(end_to_end_us(times, soc.submit_high_us), 3),
            "host_submit_us": [soc.submit_low_us, soc.submit_high_us],
            "label": "estimate", "launches": len(launched),
            "gm_bytes": sum(g["gm_bytes"] for g in launched),
            "hbm_bytes": sum(g["hbm_bytes"] for g in launched),
            "l2_bytes": sum(g["l2_bytes"] for g in launched)}


def peak_memory_bytes(mod) -> int:
    """Peak bytes of live activations in ``main`` (inputs, intermediates, outputs; weights
    bound as constants excluded): each binding allocates its result, a view shares its
    source's buffer, and a buffer is freed after its last reader, as a static memory plan
    without in-place reuse would lay them out. Over symbolic dimensions with a range
    (``--input_shape "x:2,1~512"``) every tensor counts at the range's upper bound, for
    which the buffers are sized."""
    func = mod["main"]
    analyzer = range_analyzer([p.ty for p in func.params], main_ranges(mod))
    bindings = [b for block in func.body.blocks for b in block.bindings]
    last_use, owner = {}, {}
    for index, binding in enumerate(bindings):
        for var in relax.analysis.free_vars(binding.value):
            last_use[var] = index
    for var in relax.analysis.free_vars(func.body.body):
        last_use[var] = len(bindings)
    live = {p: bound_bytes(p.ty, analyzer) for p in func.params}
    peak = sum(live.values())
    for index, binding in enumerate(bindings):
        value = binding.value
        op = getattr(getattr(value, "op", None), "name", "")
        if op in _VIEW_OPS and isinstance(value.args[0], relax.Var):
            owner[binding.var] = owner.get(value.args[0], value.args[0])
        else:
            live[binding.var] = bound_bytes(binding.var.ty, analyzer)
        peak = max(peak, sum(live.values()))
        for var in relax.analysis.free_vars(value):
            base = owner.get(var, var)
            if last_use.get(var) == index and base in live and not _still_viewed(
                    base, owner, last_use, index):
                del live[base]
    return int(peak)


def _still_viewed(base, owner, last_use, index) -> bool:
    return any(o.same_as(base) and last_use.get(v, -1) > index for v, o in owner.items())


def report_table(report: dict) -> str:
    """The report as a plain-text table, one line per group and per unfused edge (the reason
    that decided and what to do about it; every refusal in full stays in the report); a
    geared build's report, one table per gear (``partition/gear_report.py``)."""
    if "gears" in report:
        from .gear_report import gears_table  # it prints each gear with this function

        return gears_table(report)
    lines = [f"{report['nodes_before']} ONNX nodes -> {report['kernels']['ascend']} Ascend "
             f"launches + {report['kernels']['host']} host launches ({report['soc_version']}, "
             f"fusion {report['fusion_level']})"]
    est = report.get("estimate") or {}
    if "latency_us" in est:
        band = est.get("latency_band_us")
        within = f" (band {band[0]:.1f}-{band[1]:.1f} us)" if band else ""
        split = (f"; {est['hbm_bytes'] / 1e6:.1f} MB HBM + {est['l2_bytes'] / 1e6:.1f} MB L2"
                 if "hbm_bytes" in est else "")
        lines.append(f"estimate (timing model, not measured): {est['latency_us']:.1f} us"
                     f"{within}, roofline {est['roofline_us']:.1f} us{split}")
    lines.append("")
    failures = report.get("kernel_failures", [])
    if failures:  # bugs of ours the user should see first, and can report
        lines.append(f"{len(failures)} kernel(s) failed and were planned again (a bug in "
                     "tvm-ascend: please report it with the model):")
        lines += [f"  {f['kernel']} ({', '.join(f['onnx_nodes'])}): {f['stage']} failed, "
                  f"{'split into single-op kernels' if f['action'] == 'split' else 'on the host'}"
                  f": {f['error']}" for f in failures]
        lines.append("")
    width = max([26] + [len(g["rule"]) + 2 for g in report["groups"]])
    lines.append(f"{'id':<5}{'where':<7}{'rule':<{width}}{'GM saved':>10}{'est. us':>10}"
                 f"  nodes")
    for group in report["groups"]:
        where = "npu" if group["on_npu"] else "host"
        nodes = ", ".join(group["nodes"]) or ", ".join(op["op"] for op in group["ops"])
        if group.get("exports"):  # a second output, read by other kernels (MultiOutputFusion)
            nodes += f"; exports {', '.join(e['node'] or e['var'] for e in group['exports'])}"
        time_us = (group.get("estimate") or {}).get("time_us")
        est_cell = f"{time_us:.1f}" if time_us is not None else "-"
        lines.append(f"{group['id']:<5}{where:<7}{group['rule']:<{width}}"
                     f"{group['gm_bytes_saved']:>10}{est_cell:>10}  {nodes}")
    rewrites = report.get("prepare_rewrites", [])
    if rewrites:
        lines += ["", "prepare rewrites:"]
        for rw in rewrites:
            done = "applied" if rw["applied"] else "not applied"
            lines.append(f"  {rw['rewrite']} {rw['node']} ({done}): {rw['reason']}")
    if report["unfused_edges"]:
        lines += ["", "unfused edges:"]
        for edge in report["unfused_edges"]:
            hint = f"; hint: {edge['hint']}" if edge["hint"] else ""
            lines.append(f"  {edge['producer']} -> {edge['consumer']}: {edge_summary(edge)}{hint}")
        if any(edge_summary(e) != e["reason"] for e in report["unfused_edges"]):
            lines.append("  (every refusal in full: unfused_edges in fusion_report.json, or "
                         "tvm-ascend explain --model M --node NAME)")
    return "\n".join(lines)


def edge_summary(edge: dict) -> str:
    """The one reason that decided an unfused edge, in one line (reports written before the
    summary was kept: the first line of the full reason)."""
    return edge.get("summary") or (edge["reason"].strip().splitlines() or [""])[0]


def write_json_atomic(path: str, payload) -> None:
    """Write JSON to ``path`` through a temporary file, so readers never see half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=".json")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a dump is for everyone who builds
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def node_groups(report: dict, node: str) -> list[dict]:
    """The report groups holding ops of ONNX node ``node``, the one computing its output first
    (the group of its last op: the highest ``parts`` index of its ops), the others in report
    order; empty when no group holds it.

    One node can have ops in several groups: the importer lowers a Gather to an index fix-up
    and a take, and a prepare rewrite credits each op it makes to every node it replaces
    (LLaMA's grouped-query attention: the mask Add's view sits in the mask's kernel, the rest
    in the attention kernel). The first group listing it is not where it is computed.
    Reports written without ``parts`` give the groups in report order.

    Example
    -------
    >>> [g["id"] for g in node_groups(lib.fusion_report(), "node_add_6")]  # doctest: +SKIP
    ['G10', 'G5']
    """
    holders = [g for g in report["groups"] if node in g.get("nodes", [])]
    last = {}  # group id -> the highest part index of ``node`` among its ops
    for group in holders:
        parts = [op["parts"][node] for op in group.get("ops", [])
                 if node in op.get("parts", {})]
        if parts:
            last[group["id"]] = max(parts)
    if not last:
        return holders
    top = max(last.values())
    home = next(g for g in holders if last.get(g["id"]) == top)
    return [home] + [g for g in holders if g is not home]


def _ops_of(group: dict, node: str) -> str:
    """The Relax ops of ``node`` in ``group``, by op name, in program order."""
    ops = [op["op"].removeprefix("relax.") for op in group.get("ops", [])
           if node in op.get("parts", {}) or (not op.get("parts") and op.get("node") == node)]
    return ", ".join(ops) if ops else "its ops"


def explain_node(report: dict, node: str) -> str:
    """Why ONNX node ``node`` is in its group, and why each edge of that group stayed unfused.

    A node with ops in several groups (``node_groups``) is explained in the group computing
    its output; the others are named with the ops of the node they hold.
    """
    holders = node_groups(report, node)
    group = holders[0] if holders else None
    rewrites = [r for r in report.get("prepare_rewrites", []) if r["node"] == node]
    if group is None and rewrites:  # a node the prepare stage removed
        return "\n".join(f"{node} was rewritten before grouping ({r['rewrite']}): {r['reason']}"
                         for r in rewrites)
    if group is None:
        known = sorted({n for g in report["groups"] for n in g["nodes"]})
        close = [n for n in known if node.lower() in n.lower()][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise FusionConfigError(f"no node named {node!r} in the compiled model{hint}")
    where = f"as kernel {group['kernel']} on the NPU" if group["on_npu"] else "on the host"
    others = holders[1:]
    output = " and computes its output" if others else ""
    lines = [f"{node} is in group {group['id']} ({group['rule']}), which runs {where}{output}.",
             f"  group nodes: {', '.join(group['nodes'])}",
             f"  why: {group['reason']}"]
    if others:
        lines.append(f"  its ops are split over {len(holders)} groups: {group['id']} "
                     f"({_ops_of(group, node)}); " + "; ".join(
                         f"{g['id']} ({g['rule']}, {'NPU' if g['on_npu'] else 'host'}: "
                         f"{_ops_of(g, node)})" for g in others))
    lines += [f"  prepare: {r['rewrite']} {'applied' if r['applied'] else 'not applied'}: "
              f"{r['reason']}" for r in rewrites]
    for edge in report["unfused_edges"]:
        if group["id"] in (edge["producer"], edge["consumer"]):
            lines.append(f"  edge {edge['producer']} -> {edge['consumer']} not fused: "
                         f"{edge['reason']}")
            if edge["hint"]:
                lines.append(f"      hint: {edge['hint']}")
    return "\n".join(lines)
