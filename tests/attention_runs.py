"""Helpers of the flash attention tests: forced knobs, one build's attention group, its
counters against the plan (test_attention_flash, test_attention_causal_padding)."""
from __future__ import annotations

import dataclasses

import numpy as np

import tvm_ascend
from tvm_ascend.schedules import AttentionSchedule
from tvm_ascend.schedules.attention import AttentionKnobs, plan_attention
from tvm_ascend.soc import get_soc

B1 = get_soc("Ascend910B1")


def forced(monkeypatch, skip: bool = True, **overrides) -> list:
    """Every attention plan of the next builds with ``overrides`` on its knobs (the
    partitioner would otherwise keep the faster estimate); ``skip=False`` drops the causal
    skip (every key block visited). Returns the list the plans are appended to."""
    plans = []

    def plan(analysis, soc, knobs=None):
        tiling = plan_attention(analysis.shape, soc,
                                dataclasses.replace(knobs or AttentionKnobs(), **overrides),
                                analysis.causal if skip else None)
        plans.append(tiling)
        return tiling
    monkeypatch.setattr(AttentionSchedule, "plan", staticmethod(plan))
    return plans


def run(mb, target="ascend", soc: str | None = None):
    """(output, the attention group's report entry, its launch's counters, its source)."""
    config = tvm_ascend.CompileConfig(fusion_level="aggressive")
    if soc is not None:
        config = config.replace(soc_version=soc)
    lib = tvm_ascend.build(mb.model(), target=target, config=config)
    (group,) = [g for g in lib.fusion_report()["groups"]
                if g["on_npu"] and g["tiling"]["template"] == "attention"]
    (out,) = lib.run(mb.feeds)
    (launch,) = [p for p in lib.profile() if p["kernel"] == group["kernel"]]
    return out, group, launch, lib.kernel_sources()[group["kernel"]]


def check_counters(group, launch, extra: dict | None = None) -> None:
    """The launch's GM bytes, MACs and UB peak equal the plan's, plus ``extra`` (the bytes
    and MACs of the causal fallback passes that ran: ``fallback_counts``)."""
    tiling, extra = group["tiling"], extra or {}
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"] + extra.get("read", 0)
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"] + extra.get("write", 0)
    assert launch["cube_macs"] == tiling["work"]["cube_macs"] + extra.get("macs", 0)
    assert launch["peak_ub_bytes"] == tiling["ub_bytes"] and launch["warnings"] == []


def partitioned_attention(model):
    """The attention group's PrimFunc as the partitioner hands it down (with its facts about
    the call's constants, which ``fused_prim_func`` does not see)."""
    from tvm_ascend import ir_attrs
    result = tvm_ascend.partition_for_ascend(
        model, tvm_ascend.CompileConfig(fusion_level="aggressive", soc_version=B1.name))
    (prim,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend" and
               AttentionSchedule.applies(f.attrs[ir_attrs.PRIM_FUNC])]
    return prim


def fallen_back(feeds, plan, fill: float, inside: bool) -> list[tuple[int, int]]:
    """(batch*head, query block) of every work item whose run-time check (codegen
    ``emit_recheck``) visits the skipped key blocks, decided as the kernel decides it, in
    float: ``causal_attention_model``'s scores (Q @ K^T, rounded to half for fp16 as the
    AIC's tiles are), its Where's ``fill`` and [b, 1, 1, s] padding mask, added inside the
    Where (``inside``) or after it."""
    from tvm_ascend.schedules.attention import RECHECK_GAP, key_blocks
    shape, causal = plan.shape, plan.causal
    lowest = np.float32(np.finfo(np.float32).min)
    scores = feeds["q"].astype(np.float32) @ feeds["kt"].astype(np.float32)
    if shape.dtype == "float16":
        scores = scores.astype(np.float16).astype(np.float32)
    scores = scores * np.float32(shape.scale)
    pad = feeds["mask"].astype(np.float32) * np.float32(shape.mask_coef)
    seq = shape.seq_kv
    keep = np.tri(shape.seq_q, seq, causal.offset, dtype=bool)
    fill = np.float32(fill)
    found = []
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.where(keep, scores + pad, fill) if inside else np.where(keep, scores, fill) + pad
        heads = scores.shape[1]
        for item in range(shape.batch):
            b, h = divmod(item, heads)
            for index, (q_off, q, keys) in enumerate(
                    key_blocks(shape, plan.base_q, plan.base_kv, causal)):
                end = sum(kv for _, kv, _ in keys)
                if end >= seq:
                    continue
                row_max = np.maximum(lowest, x[b, h, q_off:q_off + q, :end].max(axis=-1))
                hidden = fill if inside else fill + max(lowest, pad[b, 0, 0, end:].max())
                if not (row_max - np.float32(hidden)).min() > RECHECK_GAP:
                    found.append((item, index))
    return found


def fallback_counts(plan, soc, items: list[tuple[int, int]]) -> dict:
    """The bytes and MACs the fallback passes of ``items`` (``fallen_back``) add to the
    plan's counts (``fallback_traffic``)."""
    from tvm_ascend.schedules.attention import fallback_traffic
    per_block = fallback_traffic(plan, soc)
    extra = {"read": 0, "write": 0, "macs": 0}
    for _, index in items:
        t = per_block[index]
        extra["read"] += t["tensor_read_bytes"] + t["workspace_read_bytes"]
        extra["write"] += t["tensor_write_bytes"] + t["workspace_write_bytes"]
        extra["macs"] += t["cube_macs"]
    return extra
