"""Tests of the emulator's asynchronous IterateAll panels (IterateAll<false> + WaitIterateAll).

tests/emu/matmul_panels.cpp posts each block's panels of C = A x B into two workspace slots,
panel p + 1 before it waits for panel p, as the matmul-rows tall kernel does, and streams them
through the UB to C; its modes break one rule each, which the emulator must report
(ascendc_emu/matmul_async.h).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from emu_build import ROOT, split_build

SRC = ROOT / "tests" / "emu" / "matmul_panels.cpp"


@pytest.fixture(scope="session")
def exe(tmp_path_factory) -> Path:
    return split_build(SRC, tmp_path_factory.mktemp("emu_panels"), "matmul_panels")


def _run(exe: Path, tmp_path: Path, mode: str, m: int, n: int, k: int, panel: int,
         blocks: int, env: dict | None = None):
    """(stdout, rc, A, B) of one launch on random fp16 inputs."""
    rng = np.random.default_rng(m * 7 + n)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    a.tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    full_env = {key: v for key, v in os.environ.items() if not key.startswith("ASCENDC_EMU_")}
    full_env.update(env or {})
    proc = subprocess.run([str(exe), mode, *map(str, (m, n, k, panel, blocks)), str(tmp_path)],
                          capture_output=True, text=True, env=full_env, timeout=120, check=False)
    return proc.stdout + proc.stderr, proc.returncode, a, b


def _error(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("DEVICE_RULE_ERROR "))[18:]


@pytest.mark.parametrize("m,n,k,panel,blocks", [
    (100, 48, 40, 32, 2),   # row tails in each block's last panel, a K tail
    (200, 136, 64, 48, 3),  # N over one 128-column base tile, three blocks
])
def test_panels_in_two_slots_match_numpy(exe, tmp_path, m, n, k, panel, blocks):
    """The protocol used right: numpy's product, no warnings, and each panel counted once as
    the AIC's write and once as the AIV's read back (the synchronous IterateAll's bytes)."""
    out, rc, a, b = _run(exe, tmp_path, "ok", m, n, k, panel, blocks)
    assert rc == 0, out[-3000:]
    c = np.fromfile(tmp_path / "c.bin", dtype=np.float32).reshape(m, n)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32),
                               rtol=1e-2, atol=1e-2)
    st = json.loads(next(ln for ln in out.splitlines() if ln.startswith("STATS "))[6:])
    assert st["warnings"] == []
    # every element of C: written to its panel slot, read back, written to C
    assert sum(blk["gm_write_bytes"] for blk in st["blocks"]) == 2 * m * n * 4


RULES = {
    "read_early": "reads GM bytes [0, 6144) of panel 0 of an asynchronous IterateAll<false> "
                  "(6144 B) before its WaitIterateAll",
    "wait_none": "Matmul::WaitIterateAll: no IterateAll<false> is pending: the AIV would wait "
                 "forever",
    "no_event": "Matmul::WaitIterateAll: panel 0 was posted by IterateAll<false> with "
                "waitIterateAll = false",
    "end_unwaited": "Matmul::End: 1 IterateAll<false> call(s) (panel 1 first) were never waited",
    "same_slot": "Matmul::IterateAll<false>: its block overlaps bytes [0, 6144) of panel 0",
    "after_sync": "Matmul::WaitIterateAll: the last IterateAll was synchronous",
}


@pytest.mark.parametrize("mode", sorted(RULES))
def test_broken_panel_protocol_is_reported(exe, tmp_path, mode):
    """Each break of the protocol fails with its rule (reading a panel before its wait, a wait
    nothing answers, an unwaited End, two panels in one slot)."""
    out, rc, _, _ = _run(exe, tmp_path, mode, 64, 48, 40, 32, 1)
    assert rc == 3, out[-3000:]
    assert RULES[mode] in _error(out)


def test_panels_are_refused_on_a_coupled_chip(exe, tmp_path):
    out, rc, _, _ = _run(exe, tmp_path, "ok", 64, 48, 40, 32, 1,
                         env={"ASCENDC_EMU_SOC": "Ascend310P3"})
    assert rc == 3 and "asynchronous IterateAll is for the MIX kernels of split chips" in \
        _error(out)
