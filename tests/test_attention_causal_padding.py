"""Causal block skipping beside a padding mask (issue #19, item 2): GPT-2's Where(causal,
S / sqrt(d), lowest) + a [b, 1, 1, s] padding mask. The flash kernel visits whole key blocks
up to each query block's diagonal and checks at run time whether a row saw no key above what
a skipped key scores (its visible keys all padded); such a query block visits the skipped
blocks too. The result equals the kernel that visits every block, bit for bit, and
onnxruntime; the counters equal the plan's plus the fallback passes that ran.

What onnxruntime gives a row whose every visible key is padded depends on the padding value
(worked out here in float32; ``test_padded_rows_follow_the_mask_value``):
- finfo.min: the visible keys score S + min = min, the hidden ones the Where's min: the row
  averages V over its visible keys and the hidden unpadded ones (hidden padded keys: min +
  min = -inf, weight 0). The skipped blocks take part: the kernel falls back.
- -inf: the visible keys are -inf, the hidden unpadded ones min: the row averages V over the
  hidden unpadded keys alone; it falls back too.
- -1e4: the visible keys score S - 1e4, far above min: the row's softmax is over its visible
  keys as if unpadded, the hidden keys add exactly 0; no fallback.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attention_runs import (B1, check_counters, fallback_counts, fallen_back, forced,
                            partitioned_attention, run)
from conftest import TOLERANCES, run_onnxruntime
from onnx_models import causal_attention_model
from tvm_ascend.cost_model import estimate_kernel
from tvm_ascend.schedules import AttentionSchedule
from tvm_ascend.schedules.attention import (AttentionKnobs, causal_skip, fallback_traffic,
                                            key_blocks, plan_attention, skipped_blocks)

PAD_VALUES = {"min": None, "inf": -np.inf, "1e4": -1e4}


def _padded_model(where: str, dtype: str, seq: int, pad: str, batch: int = 2, heads: int = 2):
    """``causal_attention_model`` with a padding mask that hides batch 0's first 70 keys (its
    rows 0..69 see only padded keys) and its keys from 150, batch 1's first 3 keys and keys
    30..39, padded with ``pad`` ("min": the dtype's lowest, "inf", "1e4")."""
    mb = causal_attention_model(where=where, dtype=dtype, seq=seq, batch=batch, heads=heads,
                                dim=64)
    value = PAD_VALUES[pad]
    value = np.finfo(mb.np_dtype).min if value is None else value
    padded = np.zeros((batch, 1, 1, seq), bool)
    padded[0, ..., :70] = padded[0, ..., 150:] = True
    padded[1, ..., :3] = padded[1, ..., 30:40] = True
    mb.feeds["mask"] = np.where(padded, value, 0.0).astype(mb.np_dtype)
    return mb, padded


CASES = [("gpt2", "float32", "min", 200), ("gpt2", "float16", "min", 300),
         ("gpt2", "float32", "inf", 200), ("gpt2", "float32", "1e4", 200),
         ("inside", "float32", "min", 200)]


@pytest.mark.slow
@pytest.mark.parametrize("where,dtype,pad,seq", CASES)
def test_skip_beside_a_padding_mask_is_exact(monkeypatch, where, dtype, pad, seq):
    """Tails (200, 300 keys: not multiples of the blocks), several clients, rows whose every
    visible key is padded: bit for bit the kernel that visits every key block, onnxruntime's
    numbers, the emulator's counters equal to the plan's plus the fallbacks that ran (as the
    kernel's check decides them, replayed in numpy)."""
    mb, _ = _padded_model(where, dtype, seq, pad)
    plans = forced(monkeypatch, method="flash")
    out, group, launch, source = run(mb)
    plan = [t for t in plans if t.plan.causal is not None][-1].plan
    recheck = "fill" if where == "inside" else "fill+mask"
    assert group["tiling"]["plan"]["causal"] == {"role": "keep", "offset": 0,
                                                 "recheck": recheck}
    assert group["tiling"]["cores"] > 2 and "beside the padding mask" in group["reason"]
    assert "if (!(leastGap > 128.0f)) {" in source
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + dtype])
    lowest = float(np.finfo(mb.np_dtype).min)
    items = fallen_back(mb.feeds, plan, lowest, where == "inside")
    # finfo.min and -inf: batch 0's first two query blocks (its rows 0..69) and batch 1's
    # first (rows 0..2), every head; -1e4: the hidden keys add 0 to every row
    assert bool(items) == (pad != "1e4")
    check_counters(group, launch, fallback_counts(plan, B1, items))
    everything = forced(monkeypatch, skip=False, method="flash")
    full, full_group, full_launch, _ = run(mb)
    assert everything[-1].plan.causal is None
    assert np.array_equal(out, full, equal_nan=True)
    assert full_launch["gm_read_bytes"] >= launch["gm_read_bytes"]


@pytest.mark.slow
def test_coupled_chips_visit_every_block_beside_a_padding_mask():
    """310P3 runs the staged kernel (no flash plan): the causal fact is found, every key block
    is visited, the padded rows match onnxruntime."""
    mb, _ = _padded_model("gpt2", "float16", 300, "min")
    out, group, launch, source = run(mb, soc="Ascend310P3")
    assert group["tiling"]["plan"]["method"] == "staged"
    assert group["tiling"]["plan"]["causal"] is None and "leastGap" not in source
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/float16"])
    check_counters(group, launch)


@pytest.mark.parametrize("pad", ["min", "inf", "1e4"])
def test_padded_rows_follow_the_mask_value(pad):
    """onnxruntime's rows whose every visible key is padded (batch 0's rows 0..69), float32:
    finfo.min averages V over the visible keys and the hidden unpadded ones, -inf over the
    hidden unpadded ones alone, -1e4 takes the softmax of the visible keys unmasked."""
    mb, padded = _padded_model("gpt2", "float32", 200, pad, batch=2, heads=1)
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    q, k_t, v = (mb.feeds[n].astype(np.float64) for n in ("q", "kt", "v"))
    unpadded = ~padded[0, 0, 0]
    for row in (0, 35, 69):
        visible = np.arange(200) <= row
        if pad == "min":
            keys = visible | unpadded
            expected = v[0, 0, keys].mean(axis=0)
        elif pad == "inf":
            expected = v[0, 0, ~visible & unpadded].mean(axis=0)
        else:
            scores = q[0, 0, row] @ k_t[0, 0][:, visible] / 8.0
            probs = np.exp(scores - scores.max())
            expected = probs / probs.sum() @ v[0, 0, visible]
        # S - 1e4 is rounded to float32's 2^-10 steps near 1e4: the probabilities to ~1e-3
        tol = 2e-3 if pad == "1e4" else 1e-5
        np.testing.assert_allclose(ref[0, 0, row], expected, rtol=tol, atol=tol)


def test_the_plan_counts_the_fast_path_and_each_fallback():
    """GPT-2's form at 300 keys, fp16: the visited keys are whole blocks of the kernel that
    visits every key (so the two compute alike); the skipped blocks of each query block are
    the rest; the skipping plan plus every fallback moves what every block visited moves,
    plus the padding mask's row over the skipped keys that the check reads. Estimated
    faster than visiting every block."""
    mb, _ = _padded_model("gpt2", "float16", 300, "min")
    func = partitioned_attention(mb.model())
    analysis = AttentionSchedule.analyse(func)
    assert analysis.causal.recheck == "fill+mask"
    knobs = AttentionKnobs(method="flash")
    skip = plan_attention(analysis.shape, B1, knobs, analysis.causal)
    full = plan_attention(analysis.shape, B1, knobs)
    p = skip.plan
    blocks = key_blocks(analysis.shape, p.base_q, p.base_kv, analysis.causal)
    everything = key_blocks(analysis.shape, p.base_q, p.base_kv)
    for (_, _, keys), (_, _, all_keys) in zip(blocks, everything):
        assert [(o, kv) for o, kv, _ in keys] == [(o, kv) for o, kv, _ in all_keys[:len(keys)]]
    assert [sum(kv for _, kv, _ in keys) for _, _, keys in blocks] == [128, 128, 256, 256, 300]
    rest = skipped_blocks(analysis.shape, p.base_q, p.base_kv, analysis.causal)
    assert [[(o, kv) for o, kv, _ in keys] for _, _, keys in rest] == \
        [[(128, 128), (256, 44)], [(128, 128), (256, 44)], [(256, 44)], [(256, 44)], []]
    fallbacks = fallback_traffic(p, B1)
    heads = analysis.shape.batch
    mask_row = heads * sum(300 - sum(kv for _, kv, _ in keys) for _, _, keys in blocks) * 2
    # the blocks every row sees whole skip the condition's bytes (a byte a key per row)
    unmasked = heads * sum(q * kv for _, q, keys in blocks for _, kv, masked in keys
                           if not masked)
    assert unmasked > 0
    assert skip.gm_read_bytes + heads * sum(
        f["tensor_read_bytes"] + f["workspace_read_bytes"] for f in fallbacks) == \
        full.gm_read_bytes + mask_row - unmasked
    assert skip.gm_write_bytes + heads * sum(f["workspace_write_bytes"] for f in fallbacks) \
        == full.gm_write_bytes
    assert skip.work.cube_macs + heads * sum(f["cube_macs"] for f in fallbacks) == \
        full.work.cube_macs
    assert estimate_kernel(func, skip, B1).time_us < estimate_kernel(func, full, B1).time_us
    # without a padding mask nothing is rechecked: no skipped blocks to fall back to
    plain = dataclasses.replace(analysis.causal, recheck="")
    assert all(not keys for _, _, keys in skipped_blocks(analysis.shape, p.base_q, p.base_kv,
                                                         plain))


def test_the_skip_is_refused_where_a_skipped_score_is_unknown():
    """A padding mask with a row per query added after the Where would have to be read whole
    to bound what the skipped keys score; a causal additive mask inside a Where of another
    condition leaves the skipped scores to the scores themselves: every block visited, the
    report says why."""
    mb, _ = _padded_model("gpt2", "float16", 300, "min")
    func = partitioned_attention(mb.model())
    shape = AttentionSchedule.analyse(func).shape
    full_rows = dataclasses.replace(shape, mask=dataclasses.replace(shape.mask, row_stride=300))
    skip, why = causal_skip(func, full_rows)
    assert skip is None and "a row per query" in why and "every key block visited" in why
    inside = dataclasses.replace(full_rows, mask_inside=True)
    skip, why = causal_skip(func, inside)  # inside the Where: the fill bounds them
    assert skip is not None and skip.recheck == "fill" and "the Where's fill" in why
