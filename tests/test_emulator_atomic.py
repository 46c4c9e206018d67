"""Tests of the emulator's atomic adds to GM: ``SetAtomicAdd<T>()`` typed per SoC (the types each
architecture's kernel_operator_set_atomic_impl.h takes), DataCopy and Fixpipe accumulating while
it is on, and the race checks: atomic adds from several cores to one GM range commute (no race,
neither at launch end nor in a cross-core launch's shadow), a plain write or read racing with an
atomic add is flagged.

tests/emu/atomic.cpp holds the kernels (its header says what each variant does).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from emu_build import ROOT, error_of, split_build, stats_of

SRC = ROOT / "tests" / "emu" / "atomic.cpp"
BYTES = 64  # tests/emu/atomic.cpp's kBytes: what one block copies
# tests/emu/atomic.cpp's Variant and MixVariant
ATOMIC, PLAIN, MIXED, MISMATCH, LEFT_ON, THEN_PLAIN, SAME_BLOCK = range(7)
MIX_ORDERED, MIX_READ_RACE, MIX_WRITE_RACE = range(3)
DTYPES = {"half": np.float16, "float": np.float32, "int16": np.int16, "int32": np.int32,
          "int8": np.int8}


@pytest.fixture(scope="session")
def exe(tmp_path_factory) -> Path:
    return split_build(SRC, tmp_path_factory.mktemp("emu_atomic"), "atomic")


def run(exe: Path, *args, soc: str | None = None, rc: int = 0) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDC_EMU_")}
    if soc:
        env["ASCENDC_EMU_SOC"] = soc
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert proc.returncode == rc, \
        f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def copy(exe, tmp_path, dtype: str, variant: int, blocks: int, soc: str | None = None,
         rc: int = 0, start=None):
    """Runs ``atomic copy``; returns (stdout, src, dst after the launch) with dst's first
    ``BYTES`` (the range every block writes) starting at ``start`` (zeros by default)."""
    np_type = DTYPES[dtype]
    count = BYTES // np.dtype(np_type).itemsize
    src = (np.arange(count) % 7 + 1).astype(np_type)
    dst = np.zeros(count * (1 + blocks), dtype=np_type)
    if start is not None:
        dst[:count] = start
    src.tofile(tmp_path / "src.bin")
    dst.tofile(tmp_path / "dst.bin")
    out = run(exe, "copy", dtype, variant, blocks, tmp_path, soc=soc, rc=rc)
    return out, src, np.fromfile(tmp_path / "dst.bin", dtype=np_type)


@pytest.mark.parametrize("dtype", ["half", "float", "int16", "int32", "int8"])
def test_atomic_add_sums_every_block_on_910b(exe, tmp_path, dtype):
    """On 910B (dav_c220) each of these types is an atomic type: every block's copy adds."""
    out, src, dst = copy(exe, tmp_path, dtype, ATOMIC, 5)
    count = src.size
    np.testing.assert_array_equal(dst[:count], (src.astype(np.int64) * 5).astype(src.dtype))
    assert stats_of(out)["warnings"] == []


def test_atomic_add_keeps_what_gm_held(exe, tmp_path):
    """The adds go onto what GM held before the launch (what the host's aclrtMemset zeroed, or
    here a start value): atomic add is read-modify-write, not an overwrite."""
    _, src, dst = copy(exe, tmp_path, "float", ATOMIC, 3, start=10.0)
    np.testing.assert_array_equal(dst[:src.size], 10.0 + 3 * src)


@pytest.mark.parametrize("dtype", ["int32", "int8"])
def test_310p_refuses_integer_atomic_types(exe, tmp_path, dtype):
    """dav_m200 (310P) reports SetAtomicAdd<int32_t> and <int8_t> as not supported: the
    emulator refuses them, naming the types it takes."""
    out, _, _ = copy(exe, tmp_path, dtype, ATOMIC, 2, soc="Ascend310P3", rc=3)
    err = error_of(out)
    assert f"atomic add of {dtype}_t is not supported on Ascend310P3" in err
    assert "half, float, int16_t" in err


@pytest.mark.parametrize("dtype", ["half", "float", "int16"])
def test_310p_takes_half_float_int16(exe, tmp_path, dtype):
    """The three types dav_m200 does set (set_atomic_f16/f32/s16) accumulate on 310P."""
    _, src, dst = copy(exe, tmp_path, dtype, ATOMIC, 4, soc="Ascend310P3")
    np.testing.assert_array_equal(dst[:src.size], (src * 4).astype(src.dtype))


def test_910a_takes_int8_and_int32(exe, tmp_path):
    """dav_c100 (910A) sets int8_t and int32_t atomics, which dav_m200 (310P) lacks."""
    _, src, dst = copy(exe, tmp_path, "int32", ATOMIC, 2, soc="Ascend910A")
    np.testing.assert_array_equal(dst[:src.size], src * 2)
    _, src, dst = copy(exe, tmp_path, "int8", ATOMIC, 2, soc="Ascend910A")
    np.testing.assert_array_equal(dst[:src.size], src * 2)


def test_bfloat16_atomic_910b_only(exe, tmp_path):
    """bfloat16_t is an atomic type of dav_c220 (910B) but of no coupled chip's."""
    count = BYTES // 2
    src = np.zeros(count, np.uint16)  # bfloat16 bits: 1.0 is 0x3f80
    src[:] = 0x3F80
    src.tofile(tmp_path / "src.bin")
    np.zeros(count * 3, np.uint16).tofile(tmp_path / "dst.bin")
    run(exe, "copy", "bf16", ATOMIC, 2, tmp_path)
    dst = np.fromfile(tmp_path / "dst.bin", np.uint16)
    assert (dst[:count] == 0x4000).all()  # 2.0
    out = run(exe, "copy", "bf16", ATOMIC, 2, tmp_path, soc="Ascend310P3", rc=3)
    assert "atomic add of bfloat16_t is not supported" in error_of(out)


def test_atomic_type_must_match_the_copy(exe, tmp_path):
    """SetAtomicAdd<float> while half is copied: the atomic unit would add the bytes as float."""
    out, _, _ = copy(exe, tmp_path, "half", MISMATCH, 1, rc=3)
    assert "writes half while SetAtomicAdd<float> is active" in error_of(out)


def test_plain_writes_of_several_blocks_still_overlap(exe, tmp_path):
    """Regression: plain writes of one range from two blocks stay an error."""
    out, _, _ = copy(exe, tmp_path, "half", PLAIN, 3, rc=3)
    assert "overlapping GM writes from different blocks" in error_of(out)


def test_plain_write_racing_an_atomic_add_is_flagged(exe, tmp_path):
    """Block 0 writes the range plainly while the others add to it: the sum depends on the
    blocks' order (before: atomic writes were left out, so this passed)."""
    out, _, _ = copy(exe, tmp_path, "float", MIXED, 3, rc=3)
    err = error_of(out)
    assert "block 0 with a plain write, the other with an atomic add" in err


def test_set_atomic_none_restores_plain_writes(exe, tmp_path):
    """After SetAtomicNone a copy overwrites again; the blocks' own slots do not overlap."""
    out, src, dst = copy(exe, tmp_path, "half", THEN_PLAIN, 3)
    count = src.size
    np.testing.assert_array_equal(dst[:count], src * 3)
    np.testing.assert_array_equal(dst[count:].reshape(3, count), np.tile(src, (3, 1)))
    assert stats_of(out)["warnings"] == []


def test_one_block_may_write_then_add(exe, tmp_path):
    """A block's own plain write and atomic add to its range are ordered by its pipeline."""
    _, src, dst = copy(exe, tmp_path, "int16", SAME_BLOCK, 2)
    count = src.size
    np.testing.assert_array_equal(dst[count:].reshape(2, count), np.tile(src * 2, (2, 1)))


def test_atomic_left_on_warns(exe, tmp_path):
    out, _, _ = copy(exe, tmp_path, "float", LEFT_ON, 2)
    warns = stats_of(out)["warnings"]
    assert len(warns) == 2 and all("SetAtomicAdd still active" in w for w in warns)


def test_fixpipe_accumulates_under_atomic_add(exe, tmp_path):
    """Fixpipe from L0C to GM adds while SetAtomicAdd<float> is on: three AICs each write
    A x B into one tile (split-K's partial sums); plain Fixpipes of it overlap."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 32)).astype(np.float16)
    b = rng.standard_normal((32, 16)).astype(np.float16)
    a.tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    out = run(exe, "fixpipe", 1, 3, tmp_path)
    c = np.fromfile(tmp_path / "c.bin", np.float32).reshape(16, 16)
    np.testing.assert_allclose(c, 3 * (a.astype(np.float32) @ b.astype(np.float32)),
                               rtol=1e-5, atol=1e-4)
    assert stats_of(out)["warnings"] == []
    out = run(exe, "fixpipe", 0, 3, tmp_path, rc=3)
    assert "overlapping GM writes from different blocks" in error_of(out)


@pytest.mark.parametrize("groups", [1, 3])
def test_cross_core_adds_commute_and_an_ordered_read_sees_the_sum(exe, tmp_path, groups):
    """Both AIVs of a group add to one range unordered (no race); the AIC reads the sum after
    their mode-2 flag."""
    out = run(exe, "mix", MIX_ORDERED, groups, tmp_path)
    v = np.fromfile(tmp_path / "out.bin", np.float32)
    np.testing.assert_array_equal(v[:16 * groups], np.full(16 * groups, 2.0))
    np.testing.assert_array_equal(v[16 * groups:], np.full(groups, 2.0))
    assert stats_of(out)["warnings"] == []


def test_cross_core_unordered_read_of_a_sum_races(exe, tmp_path):
    """The AIC reads the range its AIVs add to without waiting for them: whichever runs first
    in the emulator's threads, the pair is a race (the read sees a partial sum or none)."""
    out = run(exe, "mix", MIX_READ_RACE, 2, tmp_path, rc=3)
    err = error_of(out)
    assert ("are atomically added to by AIV" in err and "a plain read" in err) or \
        ("read before write: AIC" in err and "before this write" in err)


def test_cross_core_plain_write_racing_atomic_adds(exe, tmp_path):
    """The AIC writes the range the AIVs add to, with no flag between them: whichever order
    the shadow sees, one side is a plain write and the other an atomic add."""
    out = run(exe, "mix", MIX_WRITE_RACE, 2, tmp_path, rc=3)
    err = error_of(out)
    assert ("a plain write, this an atomic add" in err
            or ("atomically added to by" in err and "a plain write" in err))
