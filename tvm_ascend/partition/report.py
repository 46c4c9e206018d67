"""The fusion report: every group, the rule that formed it, what it saves; every refusal and why."""
from __future__ import annotations

import json
import os
import tempfile

from ..errors import FusionConfigError


def fusion_report(result, tilings: dict, config, nodes_before: int) -> dict:
    """A JSON-ready report of one partition (``fusion_report.json`` in dumps).

    Keys scripts depend on: ``nodes_before``, ``kernels`` ({"ascend", "host"}: launches per
    inference), ``groups`` (each with ``id``, ``rule``, ``nodes``, ``kernel``,
    ``gm_bytes_saved``) and ``unfused_edges`` (``producer``, ``consumer``, ``reason``, ``hint``).
    """
    groups, ids = [], {}
    for index, group in enumerate(result.groups):
        entry = {"id": f"G{index}", "nodes": group.to_json()["onnx_nodes"], **group.to_json()}
        ids[group.name] = entry["id"]
        tiling = tilings.get(group.symbol)
        if tiling is not None:
            entry["tiling"] = json.loads(tiling.to_json())
            entry["gm_bytes"] = tiling.gm_read_bytes + tiling.gm_write_bytes
        groups.append(entry)
    host_ops = [{"var": op.var, "op": op.op, "node": op.node, "why": op.decision.reason}
                for op in result.ops.values() if not op.decision.ok]
    npu = [g for g in groups if g["on_npu"]]
    edges = [{"producer": ids[p], "consumer": ids[c], "reason": reason, "hint": hint}
             for p, c, reason, hint in result.edges]
    return {
        "soc_version": config.soc_version,
        "fusion_level": config.fusion_level if config.autofusion else "off",
        "nodes_before": nodes_before,
        "ops": len(result.ops),
        "kernels": {"ascend": len(npu), "host": len(groups) - len(npu)},
        "npu_kernels": len({g["kernel"] for g in npu}),
        "host_groups": len(groups) - len(npu),
        "groups": groups,
        "unfused_edges": edges,
        "host_ops": host_ops,
    }


def report_table(report: dict) -> str:
    """The report as a plain-text table, one line per group and per unfused edge."""
    lines = [f"{report['nodes_before']} ONNX nodes -> {report['kernels']['ascend']} Ascend "
             f"launches + {report['kernels']['host']} host launches ({report['soc_version']}, "
             f"fusion {report['fusion_level']})", ""]
    lines.append(f"{'id':<5}{'where':<7}{'rule':<26}{'GM saved':>10}  nodes")
    for group in report["groups"]:
        where = "npu" if group["on_npu"] else "host"
        nodes = ", ".join(group["nodes"]) or ", ".join(op["op"] for op in group["ops"])
        lines.append(f"{group['id']:<5}{where:<7}{group['rule']:<26}"
                     f"{group['gm_bytes_saved']:>10}  {nodes}")
    if report["unfused_edges"]:
        lines += ["", "unfused edges:"]
        for edge in report["unfused_edges"]:
            lines.append(f"  {edge['producer']} -> {edge['consumer']}: {edge['reason']}")
            if edge["hint"]:
                lines.append(f"      hint: {edge['hint']}")
    return "\n".join(lines)


def write_json_atomic(path: str, payload) -> None:
    """Write JSON to ``path`` through a temporary file, so readers never see half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=".json")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def explain_node(report: dict, node: str) -> str:
    """Why ONNX node ``node`` is in its group, and why each edge of that group stayed unfused."""
    group = next((g for g in report["groups"] if node in g["nodes"]), None)
    if group is None:
        known = sorted({n for g in report["groups"] for n in g["nodes"]})
        close = [n for n in known if node.lower() in n.lower()][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise FusionConfigError(f"no node named {node!r} in the compiled model{hint}")
    where = f"as kernel {group['kernel']} on the NPU" if group["on_npu"] else "on the host"
    lines = [f"{node} is in group {group['id']} ({group['rule']}), which runs {where}.",
             f"  group nodes: {', '.join(group['nodes'])}",
             f"  why: {group['reason']}"]
    for edge in report["unfused_edges"]:
        if group["id"] in (edge["producer"], edge["consumer"]):
            lines.append(f"  edge {edge['producer']} -> {edge['consumer']} not fused: "
                         f"{edge['reason']}")
            if edge["hint"]:
                lines.append(f"      hint: {edge['hint']}")
    return "\n".join(lines)
