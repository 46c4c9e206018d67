"""Tests of the emulator's cross-core programs: AIC programs in MIX 1:2 kernels of split chips
(910B) and CrossCoreSetFlag / CrossCoreWaitFlag between an AIC and its two AIVs, with the checks
(deadlock, GM races through vector clocks, flag rules, per-core position rules).

tests/emu/cross_core.cpp holds the kernels: a producer/consumer ping-pong (AIC Mmad -> Fixpipe
into a 2-slot GM workspace per group, each AIV reading its half) with one variant per broken
rule, and a kernel that uses modes 0, 1 and 2 as barriers. README "Cross-core programs" states
the model.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from emu_build import ROOT, error_of, split_build, stats_of

SRC = ROOT / "tests" / "emu" / "cross_core.cpp"
M, N, K = 32, 32, 64

# tests/emu/cross_core.cpp's Variant
CORRECT, MISSING_WAIT, NO_BACKPRESSURE, DEADLOCK = 0, 1, 2, 3
AIC_TOUCHES_UB, BAD_FLAG_ID, BAD_MODE, AIC_MODE1, AIV_TOUCHES_L1, SATURATE, UNWAITED = range(4, 11)
CROSS_GROUP, WRITE_WRITE = 11, 12


@pytest.fixture(scope="session")
def exe(tmp_path_factory) -> Path:
    return split_build(SRC, tmp_path_factory.mktemp("emu_cross_core"), "cross_core")


def run(exe: Path, *args, env: dict | None = None, rc: int = 0) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDC_EMU_")}
    full_env.update(env or {})
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                          env=full_env, timeout=120, check=False)
    assert proc.returncode == rc, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def pingpong_inputs(tmp_path: Path, groups: int, tiles: int, seed: int = 0) -> np.ndarray:
    """Writes a.bin / b.bin and returns relu(A @ B) in float32 (fp16 products are exact in
    float; only the order of the sums differs)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((groups * tiles * M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    a.tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    return np.maximum(a.astype(np.float32) @ b.astype(np.float32), 0.0)


def pingpong(exe, tmp_path, variant, groups=2, tiles=4, race_range="all", rc=0):
    ref = pingpong_inputs(tmp_path, groups, tiles)
    out = run(exe, "pingpong", variant, groups, tiles, race_range, tmp_path, rc=rc)
    return out, ref


@pytest.mark.parametrize("groups,tiles", [(1, 1), (2, 4), (3, 5)])
def test_pingpong_matches_numpy(exe, tmp_path, groups, tiles):
    """Every group's AIC produces `tiles` tiles through two slots, both AIVs consume them with
    flags both ways; the output equals numpy and each context's counters are its own work."""
    out, ref = pingpong(exe, tmp_path, CORRECT, groups, tiles)
    got = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(-1, N)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    st = stats_of(out)
    assert st["warnings"] == []
    assert (st["block_dim"], st["task_ratio"], len(st["blocks"])) == (groups, 2, 3 * groups)
    aivs, aics = st["blocks"][:2 * groups], st["blocks"][2 * groups:]
    assert [(b["core_type"], b["block"], b["group"]) for b in aivs] == [
        ("AIV", i, i // 2) for i in range(2 * groups)]
    assert [(b["core_type"], b["block"], b["group"]) for b in aics] == [
        ("AIC", g, g) for g in range(groups)]
    for b in aics:  # A tile and B per tile in, one float tile out to the workspace
        assert b["cube_macs"] == tiles * M * N * K
        assert b["gm_read_bytes"] == tiles * (M * K + K * N) * 2
        assert b["gm_write_bytes"] == tiles * M * N * 4
        assert b["peak_ub_bytes"] == 0 and b["vector_instrs"] == 0
    for b in aivs:  # half a tile in from the workspace, its ReLU out
        assert b["cube_macs"] == 0 and b["peak_l1_bytes"] == 0
        assert b["gm_read_bytes"] == b["gm_write_bytes"] == tiles * M // 2 * N * 4
        assert b["vector_by_op"]["Relu"]["elems"] == tiles * M // 2 * N


def test_missing_wait_is_read_before_write(exe, tmp_path):
    """The AIVs read slot 0 without waiting for the AIC's flag: caught whichever comes first
    in time (the read, or the AIC's write over bytes read without a flag edge)."""
    for _ in range(3):
        out, _ = pingpong(exe, tmp_path, MISSING_WAIT, rc=3)
        err = error_of(out)
        assert "read before write" in err
        assert re.search(r"AI[CV] \d+ \(group \d+", err), err


def test_slot_reuse_without_backpressure_is_overwritten_before_read(exe, tmp_path):
    """The AIC writes tile 2 into slot 0 without waiting for the AIVs to have read tile 0."""
    for _ in range(3):
        out, _ = pingpong(exe, tmp_path, NO_BACKPRESSURE, rc=3)
        err = error_of(out)
        assert "overwritten before read" in err
        assert "back-pressure" in err


def test_race_check_range_and_switch(exe, tmp_path):
    """The race check can be limited to a named range (the workspace) or turned off."""
    out, _ = pingpong(exe, tmp_path, NO_BACKPRESSURE, race_range="ws", rc=3)
    assert "overwritten before read" in error_of(out)
    pingpong(exe, tmp_path, NO_BACKPRESSURE, race_range="out", rc=0)
    pingpong(exe, tmp_path, NO_BACKPRESSURE, race_range="off", rc=0)
    out, ref = pingpong(exe, tmp_path, CORRECT, race_range="ws")
    got = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(-1, N)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_wait_on_flag_never_set_is_deadlock(exe, tmp_path):
    """The AIVs wait on flag 5 that nobody sets; the AIC then blocks on slot back-pressure."""
    out, _ = pingpong(exe, tmp_path, DEADLOCK, rc=3)
    err = error_of(out)
    g = re.search(r"deadlock: every context of group (\d+) is blocked", err)
    assert g, err
    g = int(g.group(1))
    assert f"AIC {g} (group {g}) waits in CrossCoreWaitFlag(2)" in err
    for s in (0, 1):
        assert f"AIV {2 * g + s} (group {g}, sub {s}) waits in CrossCoreWaitFlag(5)" in err


def test_cycle_through_groups_is_deadlock(exe, tmp_path):
    """Each AIC waits on a mode-0 flag only the other AIC could complete: no single group is
    stuck (another group's AIC could still set), but once every running context is blocked the
    launch is."""
    out, _ = pingpong(exe, tmp_path, CROSS_GROUP, groups=2, rc=3)
    err = error_of(out)
    assert "deadlock: all 2 running contexts of the launch wait" in err, err
    assert "AIC 0 (group 0) waits in CrossCoreWaitFlag(4)" in err
    assert "AIC 1 (group 1) waits in CrossCoreWaitFlag(5)" in err


@pytest.mark.parametrize("variant,text", [
    (AIC_TOUCHES_UB, r"AIC \d \(group \d\): AllocTensor: an AIC has no UB"),
    (AIV_TOUCHES_L1, r"AIV \d \(group \d, sub \d\): AllocTensor: an AIV has no L1"),
    (BAD_FLAG_ID, r"CrossCoreSetFlag: flagId 11 is outside 0\.\.10"),
    (BAD_MODE, r"CrossCoreSetFlag: modeId 3 is not a cross-core mode"),
    (AIC_MODE1, r"mode 1 synchronises the two AIVs of a group; an AIC cannot set it"),
    (SATURATE, r"mode 2 flag 4: the counter of AIV \d \(group \d, sub \d\) already holds 15 sets"),
    (WRITE_WRITE, r"DataCopy\(local->GM\): bytes \[\d+, \d+\) of a \d+ B GmAlloc buffer are written by this "
                  r"context and by AIV \d \(group \d, sub \d\) with no cross-core flag ordering the two writes"),
])
def test_rule_errors(exe, tmp_path, variant, text):
    out, _ = pingpong(exe, tmp_path, variant, rc=3)
    assert re.search(text, error_of(out)), error_of(out)


def test_flag_set_never_waited_warns(exe, tmp_path):
    """An extra AIC -> AIV set at the end reaches both AIVs' counters and is never waited."""
    out, ref = pingpong(exe, tmp_path, UNWAITED, groups=2, tiles=3)
    got = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(-1, N)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    warns = stats_of(out)["warnings"]
    assert sorted(w.split(":")[0] for w in warns) == [
        f"AIV {i} (group {i // 2}, sub {i % 2})" for i in range(4)]
    assert all("cross-core flag 6: 1 set(s) reached this context and were never waited for" in w
               for w in warns)


@pytest.mark.parametrize("groups", [1, 3])
def test_modes_0_1_2(exe, tmp_path, groups):
    """Mode 0 joins every core of one type, mode 1 the two AIVs of a group, mode 2 an AIC and its
    AIVs both ways; every read below is ordered only by its flag (the race check passes), and
    the AIVs' unordered SetAtomicAdd writes are no race."""
    G = groups
    out = run(exe, "modes", G, tmp_path)
    v = np.fromfile(tmp_path / "modes.bin", dtype=np.int32)
    aic = 100 + np.arange(G)
    aiv = 1000 + np.arange(2 * G)
    pair = 2000 + np.arange(2 * G)
    np.testing.assert_array_equal(v[:G], aic)
    np.testing.assert_array_equal(v[G:3 * G], aiv)
    np.testing.assert_array_equal(v[3 * G:4 * G], np.full(G, aic.sum()))
    np.testing.assert_array_equal(v[4 * G:6 * G], np.full(2 * G, aiv.sum()))
    np.testing.assert_array_equal(v[6 * G:8 * G], pair)
    np.testing.assert_array_equal(v[8 * G:10 * G], pair[np.arange(2 * G) ^ 1])
    np.testing.assert_array_equal(v[10 * G:12 * G], np.full(2 * G, aic.sum()))
    np.testing.assert_array_equal(v[12 * G:13 * G], pair[0::2] + pair[1::2])
    np.testing.assert_array_equal(v[13 * G:], np.full(8, 2 * G))  # unordered atomic adds
    st = stats_of(out)
    assert st["warnings"] == [] and len(st["blocks"]) == 3 * G


def test_coupled_chip_has_no_cross_core_flags(exe, tmp_path):
    """310P (dav_m200) has one AI core type: its headers report NotifyEvent as not supported."""
    out = run(exe, "modes", 1, tmp_path, env={"ASCENDC_EMU_SOC": "Ascend310P3"}, rc=3)
    assert "Ascend310P3 has no cross-core flags" in error_of(out)


@pytest.mark.parametrize("aiv_only", [0, 1])
def test_context_identity_and_probe(exe, tmp_path, aiv_only):
    """With an AIC side every group runs AIC + 2 AIVs (AIC: block = group, sub 0, ratio 1, one
    sub-block); a kernel whose AIC side does nothing stays the AIV-only launch of before."""
    G = 3
    out = run(exe, "ident", G, aiv_only, tmp_path)
    v = np.fromfile(tmp_path / "ident.bin", dtype=np.int32)
    aiv = [100000 * G + 1000 * i + 100 * (i % 2) + 10 * 2 + 2 for i in range(2 * G)]
    aic = [0] * G if aiv_only else [100000 * G + 1000 * g + 10 * 1 + 1 for g in range(G)]
    np.testing.assert_array_equal(v, aiv + aic)
    st = stats_of(out)
    kinds = [(b["core_type"], b["block"], b["group"]) for b in st["blocks"]]
    expect = [("AIV", i, i // 2) for i in range(2 * G)]
    assert kinds == (expect if aiv_only else expect + [("AIC", g, g) for g in range(G)])


def test_mode0_needs_every_core_resident(exe, tmp_path):
    """A mode-0 set waits for every core of its type: more groups than 910B1's 24 AICs are not
    all resident at once (SyncAll's blockDim limit), so the set is an error."""
    out = run(exe, "modes", 25, tmp_path, rc=3)
    assert re.search(r"mode 0 waits for every AI[CV] of the launch: (25|50) of them exceed the (24|48) "
                     r"cores of Ascend910B1", error_of(out)), error_of(out)
