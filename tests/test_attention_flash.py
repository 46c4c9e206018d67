"""The flash attention kernel on split chips (issue #19, item 2): the 1:2 mix, each AIV a client
with its own query blocks, the score tiles in asynchronous rounds (Iterate<false>) computed by
the AIC ahead of the softmax. onnxruntime's numbers and the staged kernel's, counters equal to
the plan, refused on coupled chips, chosen by the estimate."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ascend
from attention_runs import (check_counters, fallback_counts, fallen_back, forced,
                            partitioned_attention, run)
from conftest import TOLERANCES, run_onnxruntime
from onnx_models import attention_model
from build_checks import fused_prim_func
from onnx_models import causal_attention_model
from tvm_ascend.cost_model import estimate_kernel
from tvm_ascend.cost_model.attention_timing import FlashBlockCycles, flash_attention_cycles
from tvm_ascend.schedules import AttentionSchedule
from tvm_ascend.partition.causal import causal_fact
from tvm_ascend.schedules.attention import AttentionKnobs, key_blocks, plan_attention
from tvm_ascend.schedules.tiling import pieces
from tvm_ascend.soc import get_soc

B1, P3 = get_soc("Ascend910B1"), get_soc("Ascend310P3")


CASES = {
    # seq not a multiple of the blocks, head dims 40/64/80, fp16 and fp32, row and full masks
    "proj-row-d64-fp16-s150": (dict(proj=True, mask="row", dtype="float16", dim=64, seq=150),
                               {}),
    "full-d40-fp32-s100": (dict(proj=False, mask="full", dtype="float32", dim=40, seq=100,
                                scale_op="Mul"), {}),
    "proj-full-d80-fp16-s70": (dict(proj=True, mask="full", dtype="float16", dim=80, seq=70),
                               {}),
    # two rounds per query block (19 key blocks of 16: 13 + 6); 57 items, 2 a client: 29
    # clients on 15 AICs (the last AIC's second AIV idle)
    "rounds-odd-clients": (dict(proj=False, mask="row", dtype="float32", dim=64, seq=300),
                           dict(base_q=16, base_kv=16)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_flash_matches_onnxruntime_and_the_staged_kernel(monkeypatch, case):
    model_args, knobs = CASES[case]
    heads = 3 if knobs else 2
    mb = attention_model(batch=2 if not knobs else 1, heads=heads, **model_args)
    dtype = model_args["dtype"]
    forced(monkeypatch, method="flash", **knobs)
    out, group, launch, source = run(mb)
    plan, work = group["tiling"]["plan"], group["tiling"]["work"]
    assert plan["method"] == "flash" and work["aiv_ratio"] == 2 and launch["task_ratio"] == 2
    assert launch["block_dim"] == -(-group["tiling"]["cores"] // 2)
    assert "while (qk.template Iterate<false>()) {" in source
    # fp16: the half score tile lands in p, then goes to float (s) for the softmax
    tile = "p" if dtype == "float16" else "s"
    assert f"qk.template GetTensorC<false, true>({tile}, 0, true, curQ, curKv);" in source
    assert "qk.SetWorkspace(wsGm);" in source and "KERNEL_TYPE_MIX_AIC_1_2" in source
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + dtype])
    check_counters(group, launch)
    if knobs:
        assert plan["round_blocks"] == 13 and work["attention_blocks"] == 19
        assert (group["tiling"]["cores"], group["tiling"]["block_len"]) == (29, 2)
        assert launch["block_dim"] == 15
    # the staged kernel: the same products (its row sums reduce in another order), the
    # same bytes
    forced(monkeypatch, method="staged", **knobs)
    staged, staged_group, staged_launch, _ = run(mb)
    assert staged_group["tiling"]["plan"]["method"] == "staged"
    np.testing.assert_allclose(out.astype(np.float64), staged.astype(np.float64),
                               **TOLERANCES["cube/" + dtype])
    fill_reads = 0  # no Where's fill here: the tensors' bytes are the same
    assert staged_launch["gm_read_bytes"] + fill_reads == launch["gm_read_bytes"]
    assert staged_launch["gm_write_bytes"] == launch["gm_write_bytes"]


@pytest.mark.parametrize("where,dtype", [("gpt2", "float16"), ("inside", "float32")])
def test_flash_takes_causal_masks(monkeypatch, where, dtype):
    """GPT-2's Where(causal, S / sqrt(d), lowest) + padding mask, and the Where around the
    additive mask: a bool condition block per score tile, as the staged kernel reads it. At
    70 keys some causal rows have every key padded away (all scores the lowest float): they
    average V as the graph's softmax does (the running maxima start at the lowest float).
    The causal skip beside the padding mask (test_attention_causal_padding): fp16's one key
    block of 70 skips nothing; fp32's query block 0 skips keys 64..69 unless a row of it has
    its visible keys padded, and the counters count the fallbacks that ran."""
    mb = causal_attention_model(where=where, dtype=dtype, seq=70)
    plans = forced(monkeypatch, method="flash")
    out, group, launch, source = run(mb)
    assert group["tiling"]["plan"]["method"] == "flash"
    assert "AscendC::Select(row, keepBits, row," in source
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + dtype])
    plan = [t for t in plans if t.plan.causal is not None][-1].plan
    assert plan.causal.recheck == ("fill" if where == "inside" else "fill+mask")
    items = fallen_back(mb.feeds, plan, float(np.finfo(mb.np_dtype).min), where == "inside")
    assert bool(items) == (where == "inside")  # both batches pad key 0: row 0 sees no other
    check_counters(group, launch, fallback_counts(plan, B1, items))


def test_flash_on_a_sequence_larger_than_the_ub_and_l1_half():
    """1100 keys of fp16 K and V (275 KiB a head) exceed the UB and a client's half of L1:
    the kernel streams them per key block; the partitioner takes the flash variant by its
    estimate on 910B."""
    mb = attention_model(batch=1, heads=1, seq=1100, dim=64, proj=False, mask="row",
                         dtype="float16")
    out, group, launch, _ = run(mb)
    assert group["tiling"]["plan"]["method"] == "flash"
    assert 2 * 1100 * 64 * 2 > max(B1.ub_bytes, B1.l1_bytes // 2)
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/float16"])
    check_counters(group, launch)


def test_flash_is_refused_on_coupled_chips_and_stays_out_of_their_variants():
    func = fused_prim_func(attention_model(seq=40).model())
    analysis = AttentionSchedule.analyse(func)
    with pytest.raises(tvm_ascend.TilingError, match="coupled chip"):
        AttentionSchedule.plan(analysis, P3, AttentionKnobs(method="flash"))
    with pytest.raises(tvm_ascend.TilingError, match="'staged' or 'flash'"):
        AttentionSchedule.plan(analysis, B1, AttentionKnobs(method="fast"))
    assert all(k.method is None for k in AttentionSchedule.variants(func, P3))
    assert all(k.method is None for k in AttentionSchedule.knob_space(func, P3))
    assert AttentionKnobs(method="flash") in AttentionSchedule.variants(func, B1)


def test_flash_plan_halves_the_cube_memories_and_keeps_the_bytes():
    """Each client reserves its Matmul objects in half of the AIC's L1/L0; the plan's rounds,
    workspace and the AIC's part of the workspace bytes (score and product tiles)."""
    func = fused_prim_func(attention_model(batch=2, heads=2, seq=300, dim=64, proj=False,
                                           dtype="float16").model())
    analysis = AttentionSchedule.analyse(func)
    staged = AttentionSchedule.plan(analysis, B1)
    flash = AttentionSchedule.plan(analysis, B1, AttentionKnobs(method="flash"))
    p = flash.plan
    assert (p.method, p.base_q, p.base_kv, p.round_blocks) == ("flash", 64, 128, 3)
    # fp16 on 910B: the score tiles cross the workspace in half, the product tiles in float
    assert p.score_bytes == 2 and p.workspace_bytes == 3 * 64 * 128 * 2
    assert flash.cores == 2 * 2 * 5 and flash.work.aiv_ratio == 2  # 20 items, 20 clients
    assert (flash.gm_read_bytes, flash.gm_write_bytes) == \
        (staged.gm_read_bytes, staged.gm_write_bytes)
    score_and_product = sum(2 * q * kv + 4 * q * 64 for q in (64,) * 4 + (44,)
                            for kv in (128, 128, 44))
    assert flash.work.cube_workspace_bytes == 2 * 2 * score_and_product
    assert staged.work.cube_workspace_bytes == 0 and staged.plan.workspace_bytes == 0
    # 128 query rows and 128 keys need 64 KiB of L0C for the scores alone: half is all a
    # client has; the staged 1:1 kernel fits it
    with pytest.raises(tvm_ascend.TilingError, match="L0C"):
        AttentionSchedule.plan(analysis, B1, AttentionKnobs(128, 128, method="flash"))
    assert AttentionSchedule.plan(analysis, B1, AttentionKnobs(128, 128)).plan.base_kv == 128


def test_the_timing_runs_the_clients_on_one_aic():
    """AIC-bound: both clients' products back to back; vector-bound: the AIV's work."""
    aic = flash_attention_cycles(32, 4, 4, FlashBlockCycles(300, 300, 100))
    assert aic == pytest.approx(32 * 2 * 4 * 600)
    vec = flash_attention_cycles(32, 4, 4, FlashBlockCycles(10, 10, 1000))
    # + at most both clients' products per block of waiting
    assert 32 * 4 * 1000 <= vec <= 32 * 4 * (1000 + 2 * 10) + 40
    one = flash_attention_cycles(8, 4, 4, FlashBlockCycles(100, 100, 300), clients=1)
    two = flash_attention_cycles(8, 4, 4, FlashBlockCycles(100, 100, 300), clients=2)
    assert one < two < 2 * one  # the second client's cube work fills the first's softmax


def test_flash_is_estimated_faster_than_staged_at_bert_size():
    """BERT-base b16 s512 fp16, one layer's attention (ESTIMATE): the flash kernel beats the
    staged one and stays above its roofline; the staged kernel is the one on 310P."""
    func = fused_prim_func(attention_model(batch=16, seq=512, heads=12, dim=64, proj=True,
                                           dtype="float16").model())
    analysis = AttentionSchedule.analyse(func)
    staged = estimate_kernel(func, AttentionSchedule.plan(analysis, B1), B1)
    flash = estimate_kernel(func, AttentionSchedule.plan(analysis, B1,
                                                         AttentionKnobs(method="flash")), B1)
    # 262 vs 482 us when written; the flash kernel's vector calls are counted as printed
    assert flash.time_us < 0.6 * staged.time_us
    assert flash.time_us >= flash.roofline_us + flash.launch_us


def _numpy_attention(feeds, dim):
    """softmax(Q K^T / sqrt(d) + mask) V in float64 (``attention_model(proj=False)``)."""
    q, k, v, mask = (feeds[n].astype(np.float64) for n in ("q", "k", "v", "mask"))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(dim) + mask
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    return (probs / probs.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("seq", [77, 128, 513])
def test_flash_half_score_tiles_match_numpy(monkeypatch, seq):
    """fp16 on 910B: the score tiles cross the workspace in half (the running maxima and sums
    stay float), the rows are divided by their sums once on the whole tile; one key block,
    an exact one and a 1-key tail (513), several clients; bytes equal the emulator's."""
    mb = attention_model(batch=1, heads=3, seq=seq, dim=64, proj=False, mask="row",
                         dtype="float16")
    forced(monkeypatch, method="flash")
    out, group, launch, source = run(mb)
    plan = group["tiling"]["plan"]
    assert plan["score_bytes"] == 2 and group["tiling"]["cores"] > 2
    assert "using SHType = matmul::MatmulType<AscendC::TPosition::VECIN, " \
           "CubeFormat::ND_ALIGN, half>;" in source
    assert "AscendC::Div(acc[c], acc[c], bc, n, curQ," in source
    assert "rowSum.GetValue(r)" not in source  # no scalar unit in the normalisation
    np.testing.assert_allclose(out.astype(np.float64), _numpy_attention(mb.feeds, 64),
                               **TOLERANCES["cube/float16"])
    check_counters(group, launch)
    ws = sum(2 * q * kv + 2 * q * kv + 4 * q * 64 for q in pieces(seq, 64)
             for kv in pieces(seq, 128))
    assert group["tiling"]["work"]["workspace_read_bytes"] == 3 * ws


@pytest.mark.parametrize("where,dtype,seq", [("gpt2", "float16", 200),
                                             ("inside", "float32", 100),
                                             ("rows", "float16", 150)])
def test_flash_where_on_whole_tiles(monkeypatch, where, dtype, seq):
    """The Where's condition made a bit mask and applied on the whole score tile (one Cast,
    Compares and Select) where its rows lie as far apart as the scores' (key blocks of a
    multiple of 32 keys), row by row on the other tails (200 = 128 + 72 keys in fp16, 100 =
    64 + 36 in fp32); a condition broadcast over the queries gets its bits once. The masks'
    blocks are cast at once."""
    mb = causal_attention_model(where=where, dtype=dtype, seq=seq)
    plans = forced(monkeypatch, method="flash")
    out, group, launch, source = run(mb)
    if where == "rows":
        assert "if (keepPitch == pitch)" not in source
        assert "AscendC::Compares(keepBits, keepH, static_cast<half>(0.0f), " \
               "AscendC::CMPMODE::NE, curKv);" in source
    else:
        assert "if (keepPitch == pitch) {  // the Where on the whole tile" in source
        assert "AscendC::CMPMODE::NE, curQ * pitch);" in source
    if dtype == "float16":
        assert "AscendC::Cast(maskF, maskT, AscendC::RoundMode::CAST_NONE, curKv);" in source
    (ref,) = run_onnxruntime(mb.model(), mb.feeds)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                               **TOLERANCES["cube/" + dtype])
    # GPT-2's causal condition beside its padding mask: skipped, with the fallbacks that ran
    skipping = [t.plan for t in plans if t.plan.causal is not None]
    items = fallen_back(mb.feeds, skipping[-1], float(np.finfo(mb.np_dtype).min),
                        where == "inside") if skipping else []
    check_counters(group, launch, fallback_counts(skipping[-1], B1, items) if items else None)


def test_flash_kernels_print_only_declared_ascendc():
    """The flash kernels' whole-tile calls (the half score tile's Cast, Brcb and the chunked
    Div of the normalisation, the Where's Compares and Select on a whole tile, a broadcast
    condition's bits once) exist in asc-devkit's dav_c220 headers with that arity."""
    from ascendc_api import ARCH_OF_SOC, api_index, asc_devkit_root, check_use, uses_in
    from printed_kernels import kernels_of
    from tvm_ascend.codegen import kernel_source

    folder, tried = asc_devkit_root()
    if folder is None:
        pytest.skip("no AscendC headers in: " + ", ".join(tried))
    index = api_index(folder, ARCH_OF_SOC["Ascend910B1"])
    sources = []
    for mb in (causal_attention_model(where="gpt2", dtype="float16", seq=200),
               causal_attention_model(where="rows", dtype="float16", seq=150),
               causal_attention_model(where="causal", dtype="float16", seq=200),
               attention_model(batch=1, seq=77, heads=2, dim=40, proj=False, dtype="float16")):
        for kernel in kernels_of(mb.model(), B1, every_method=True):
            if getattr(kernel.tiling.plan, "method", "") == "flash":
                sources.append(kernel_source(kernel, B1))
    assert len(sources) == 4
    assert any("if (keepPitch == pitch)" in s for s in sources)
    assert any("if (diag) {" in s for s in sources)  # a causal constant's skip
    # beside GPT-2's padding mask: the run-time check (ReduceMax, Adds, ReduceMin)
    assert any("AscendC::ReduceMin(least, gap, work, curQ);" in s for s in sources)
    wrong = {str(u): check_use(u, index) for s in sources for u in uses_in(s)}
    wrong = {u: r for u, r in wrong.items() if r and "MatmulType" not in u}
    assert not wrong, wrong


def _numpy_causal(feeds, dim, keep):
    """softmax(where(keep, Q K^T / sqrt(d), -inf)) V in float64 (``causal_attention_model``
    without a padding mask; every row keeps a key)."""
    q, k_t, v = (feeds[n].astype(np.float64) for n in ("q", "kt", "v"))
    scores = np.where(keep, q @ k_t / np.sqrt(dim), -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (probs / probs.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("where,dtype,seq", [("causal", "float16", 77),
                                             ("causal", "float16", 200),
                                             ("additive", "float32", 200),
                                             ("causal", "float16", 513)])
def test_flash_skips_the_key_blocks_a_causal_constant_hides(monkeypatch, where, dtype, seq):
    """A Where's condition (or an additive mask) that is a lower-triangular constant, found
    by the partitioner from its values: per query block the flash kernel visits only the keys
    up to its last row's diagonal, and the blocks every row sees whole skip the mask's load
    and work (diagonal blocks keep it). Bytes and MACs equal the emulator's, fewer than with
    every block visited; the fusion report says why; odd lengths, several clients."""
    mb = causal_attention_model(where=where, dtype=dtype, seq=seq, batch=1, heads=3, dim=64)
    forced(monkeypatch, method="flash")
    out, group, launch, source = run(mb)
    tiling, plan = group["tiling"], group["tiling"]["plan"]
    role = "keep" if where == "causal" else "mask"
    assert plan["causal"] == {"role": role, "offset": 0, "recheck": ""}
    assert tiling["cores"] > 2
    assert "key j <= query i + 0" in group["reason"] and "visits only the key blocks" in \
        group["reason"]
    assert "bool diag = kvOff + curKv > qOff + 1 + CAUSAL_OFFSET;" in source
    assert "if (diag) {  // the diagonal block: its mask" in source
    keep = np.tri(seq, seq, 0, dtype=bool)
    np.testing.assert_allclose(out.astype(np.float64), _numpy_causal(mb.feeds, 64, keep),
                               **TOLERANCES["cube/" + dtype])
    check_counters(group, launch)
    # against every key block visited (the plan without the fact): fewer bytes and MACs
    analysis = AttentionSchedule.analyse(partitioned_attention(mb.model()))
    assert analysis.causal is not None
    full = plan_attention(analysis.shape, B1, AttentionKnobs(method="flash"))
    skip = plan_attention(analysis.shape, B1, AttentionKnobs(method="flash"), analysis.causal)
    assert skip.gm_read_bytes == tiling["gm_read_bytes"]
    assert skip.work.cube_macs < full.work.cube_macs and \
        skip.gm_read_bytes < full.gm_read_bytes
    # the busiest client's calls (at 77 keys its last query block sees every key)
    assert skip.work.extra_vector_calls <= full.work.extra_vector_calls
    blocks = key_blocks(analysis.shape, skip.plan.base_q, skip.plan.base_kv, analysis.causal)
    # the first query block sees its own rows' keys only; a block seen whole is unmasked
    assert sum(kv for _, kv, _ in blocks[0][2]) == min(seq, skip.plan.base_q)
    assert all(not masked for q_off, _, keys in blocks for kv_off, kv, masked in keys
               if kv_off + kv <= q_off + 1)
    # the staged kernel visits every block
    staged = plan_attention(analysis.shape, B1, AttentionKnobs(), analysis.causal)
    assert staged.plan.causal is None


def test_only_a_lower_triangle_of_constants_is_causal(monkeypatch):
    """The fact comes from the values: a random bool constant, a triangle with one element
    changed, a float mask with a kept value that is not 0 or a masked one above -1e4 are no
    facts; an offset is read off. A random constant condition builds without the skip and
    matches numpy; GPT-2's condition beside a padding mask is used with the run-time check
    (test_attention_causal_padding)."""
    rng = np.random.default_rng(0)
    tri = np.tri(40, 40, 0, dtype=bool)
    assert causal_fact("c", tri[None, None]).offset == 0
    assert causal_fact("c", np.tri(40, 48, 3, dtype=bool)).offset == 3
    changed = tri.copy()
    changed[30, 2] = False
    random = rng.random((40, 40)) < 0.5
    random[:, 0] = True  # every row keeps a key
    assert causal_fact("c", changed) is None and causal_fact("c", random) is None
    assert causal_fact("c", np.stack([tri, tri])) is None  # a leading axis of 2
    # a weight: rejected on its first row, before any whole-plane work
    assert causal_fact("w", rng.standard_normal((64, 96)).astype(np.float32)) is None
    additive = np.where(tri, 0.0, -1e9).astype(np.float32)
    assert causal_fact("c", additive).additive
    assert causal_fact("c", np.where(tri, 0.0, -5.0).astype(np.float32)) is None
    assert causal_fact("c", np.where(tri, 0.5, -1e9).astype(np.float32)) is None

    mb = causal_attention_model(where="causal", dtype="float16", seq=200, batch=1, heads=3,
                                dim=64, keep=np.tri(200, 200, 0, dtype=bool) | (
                                    rng.random((200, 200)) < 0.1))
    keep = mb.feeds and [t for t in mb.inits if t.name.startswith("keep")][0]
    forced(monkeypatch, method="flash")
    out, group, launch, source = run(mb)
    assert group["tiling"]["plan"]["causal"] is None and "bool diag" not in source
    from onnx import numpy_helper
    np.testing.assert_allclose(out.astype(np.float64),
                               _numpy_causal(mb.feeds, 64, numpy_helper.to_array(keep)[0, 0]),
                               **TOLERANCES["cube/float16"])
    check_counters(group, launch)

    gpt2 = causal_attention_model(where="gpt2", dtype="float16", seq=200)
    _, group, _, source = run(gpt2)  # beside its padding mask: skipped, checked at run time
    assert group["tiling"]["plan"]["causal"]["recheck"] == "fill+mask"
    assert "bool diag" in source and "beside the padding mask" in group["reason"]


def test_the_report_says_what_the_printed_kernel_does_with_a_causal_mask_on_each_soc():
    """310P3 prints the staged kernel (no split cores, no flash plan), which visits every key
    block: its report once said the flash kernel visits only the blocks a query block sees.
    Now the note follows the plan kept: the flash kernel's skip where it is printed, the
    staged kernel's full visit elsewhere, on both SoCs."""
    mb = causal_attention_model(where="causal", dtype="float16", seq=200, batch=1, heads=3,
                                dim=64)
    _, group, _, source = run(mb, soc=P3.name)
    fact = "causal condition p2 (constant, key j <= query i + 0): "
    assert group["tiling"]["plan"]["method"] == "staged" and group["tiling"]["plan"]["causal"] \
        is None and "bool diag" not in source and "Iterate<false>" not in source
    assert (fact + "the staged kernel (method 'staged') visits every key block and masks "
            "each; skipping them is the flash kernel's, which needs split AIC/AIV cores "
            "(Ascend310P3 has none)") in group["reason"]
    assert "flash kernel (method 'flash') visits" not in group["reason"]
    # every plan either SoC can print, worded by tiled_decision as the partitioner keeps it
    from tvm_ascend.schedules import tiled_decision
    analysis = AttentionSchedule.analyse(partitioned_attention(mb.model()))
    notes = {}
    for soc, method in ((P3, None), (B1, None), (B1, "flash")):
        tiling = AttentionSchedule.plan(analysis, soc, AttentionKnobs(method=method))
        notes[soc.name, method] = tiled_decision(AttentionSchedule, analysis, tiling, soc).reason
    assert group["reason"].startswith(notes[P3.name, None] + "; merged")  # what the build said
    assert notes[B1.name, None].endswith(
        fact + "the staged kernel (method 'staged') visits every key block and masks each; "
        "the flash kernel, which skips the hidden ones, is not the one planned")
    assert notes[B1.name, "flash"].endswith(
        fact + "the flash kernel (method 'flash') visits only the key blocks a query block "
        "sees and masks only the diagonal ones")
    skipless = plan_attention(analysis.shape, B1, AttentionKnobs(method="flash"))
    assert analysis.report_note(skipless, B1).endswith(
        "planned without the skip: every key block visited and masked")
