"""The fusion report: every group, the rule that formed it, what it saves; every refusal and why."""
from __future__ import annotations

import json
import os
import tempfile


def fusion_report(result, tilings: dict, config) -> dict:
    """A JSON-ready report of one partition (``fusion_report.json`` in dumps)."""
    groups = []
    for group in result.groups:
        entry = group.to_json()
        tiling = tilings.get(group.symbol)
        if tiling is not None:
            entry["tiling"] = json.loads(tiling.to_json())
            entry["gm_bytes"] = tiling.gm_read_bytes + tiling.gm_write_bytes
        groups.append(entry)
    host_ops = [{"var": op.var, "op": op.op, "node": op.node, "why": op.decision.reason}
                for op in result.ops.values() if not op.decision.ok]
    npu = [g for g in groups if g["on_npu"]]
    return {
        "soc_version": config.soc_version,
        "fusion_level": config.fusion_level if config.autofusion else "off",
        "ops": len(result.ops),
        "npu_kernels": len(npu),
        "npu_launches": sum(g["call_sites"] for g in npu),
        "host_groups": len(groups) - len(npu),
        "groups": groups,
        "host_ops": host_ops,
    }


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
