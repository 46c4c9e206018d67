"""Tests of the emulator's cube unit: the high-level Matmul API and the basic cube API.

tests/emu/matmul.cpp holds the kernels (written like CANN's Matmul samples) and a host main. It is
built once per session against the emulator (split build: one runtime object, the samples at -O1)
and each test runs it and compares with numpy, checks the counters against the documented model
(README "Cube"), or checks a device rule's error text.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from emu_build import ROOT, error_of, split_build, stats_of

SRC = ROOT / "tests" / "emu" / "matmul.cpp"

# dtype tag -> (A/B numpy dtype, C and bias numpy dtype, tolerance)
DTYPES = {
    "f16": ("float16", "float32", {"rtol": 1e-2, "atol": 1e-2}),
    "f16h": ("float16", "float16", {"rtol": 1e-2, "atol": 1e-2}),
    "bf16": ("bfloat16", "float32", {"rtol": 1e-2, "atol": 1e-2}),
    "f32": ("float32", "float32", {"rtol": 1e-5, "atol": 1e-5}),
}


@pytest.fixture(scope="session")
def exe(tmp_path_factory) -> Path:
    return split_build(SRC, tmp_path_factory.mktemp("emu_cube"), "matmul")


def run(exe: Path, *args, env: dict | None = None, rc: int = 0) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDC_EMU_")}
    full_env.update(env or {})
    proc = subprocess.run(
        [str(exe), *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == rc, (
        f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def _to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def ceil_to(v: int, a: int) -> int:
    return (v + a - 1) // a * a


class Case:
    """One matmul launch: shapes, tiling, flags; writes the inputs and computes the reference."""

    def __init__(
        self,
        dtype,
        m,
        n,
        k,
        base=(32, 32, 32),
        single=None,
        trans_a=0,
        trans_b=0,
        bias=1,
        order=0,
        seed=0,
    ):
        self.dtype, self.m, self.n, self.k = dtype, m, n, k
        self.base = base
        self.single = single or (m, n)
        self.trans_a, self.trans_b, self.bias, self.order = trans_a, trans_b, bias, order
        self.depths = ()  # (depthA1, depthB1) for the "mdl" kernel; the host main's 2, 2 if empty
        self.rng = np.random.default_rng(seed)
        in_dt, out_dt, self.tol = DTYPES[dtype]
        self.out_dt = np.dtype(out_dt)
        self.in_bytes = 2 if in_dt != "float32" else 4

    def write_inputs(self, folder: Path) -> None:
        in_dt = DTYPES[self.dtype][0]
        a = self.rng.standard_normal((self.m, self.k))
        b = self.rng.standard_normal((self.k, self.n))
        if in_dt == "bfloat16":
            a_bits, b_bits = _to_bf16_bits(a), _to_bf16_bits(b)
            self.a, self.b = _from_bf16_bits(a_bits), _from_bf16_bits(b_bits)
            store_a, store_b = a_bits, b_bits
        else:
            self.a, self.b = a.astype(in_dt), b.astype(in_dt)
            store_a, store_b = self.a, self.b
        self.bias_v = self.rng.standard_normal(self.n).astype(self.out_dt)
        (store_a.T if self.trans_a else store_a).copy().tofile(folder / "a.bin")
        (store_b.T if self.trans_b else store_b).copy().tofile(folder / "b.bin")
        self.bias_v.tofile(folder / "bias.bin")

    def args(self, kernel: str, folder: Path) -> list:
        return [
            kernel,
            self.dtype,
            self.m,
            self.n,
            self.k,
            *self.base,
            *self.single,
            self.trans_a,
            self.trans_b,
            self.bias,
            self.order,
            folder,
            *self.depths,
        ]

    def reference(self, relu: bool) -> np.ndarray:
        ref = self.a.astype(np.float64) @ self.b.astype(np.float64)
        if self.bias:
            ref = ref + self.bias_v.astype(np.float64)
        return np.maximum(ref, 0) if relu else ref

    def cores(self):
        """(rows, cols) of each block's singleCore tile, blocks ordered as CalcOffset does."""
        sm, sn = self.single
        mb, nb = -(-self.m // sm), -(-self.n // sn)
        for blk in range(mb * nb):
            mi, ni = blk % mb, blk // mb
            yield min(sm, self.m - mi * sm), min(sn, self.n - ni * sn)

    def expected_counts(self, epilogue: bool, soc_arch: int = 2201) -> list[dict]:
        """The documented model, per block: every K step reads its A and B tiles and issues
        ceil16(m) * ceil16(n) * ceil(k / C0) * C0 MACs; bias is read once per output tile; C is
        written once (plus, for tiles fetched into UB on 2201, the GM workspace round trip)."""
        bm, bn, bk = self.base
        c0 = 32 // self.in_bytes
        ob = self.out_dt.itemsize
        out = []
        for rows, cols in self.cores():
            macs = rd = wr = 0
            tiles_m = [min(bm, rows - i) for i in range(0, rows, bm)]
            tiles_n = [min(bn, cols - j) for j in range(0, cols, bn)]
            steps_k = [min(bk, self.k - s) for s in range(0, self.k, bk)]
            for tm in tiles_m:
                for tn in tiles_n:
                    for tk in steps_k:
                        macs += ceil_to(tm, 16) * ceil_to(tn, 16) * ceil_to(tk, c0)
                        rd += (tm * tk + tk * tn) * self.in_bytes
                    rd += tn * ob if self.bias else 0
                    wr += tm * tn * ob  # by the API, or by the epilogue's DataCopyPad
                    if epilogue and soc_arch == 2201:  # the tile's GM workspace round trip
                        wr += tm * tn * ob
                        rd += tm * tn * ob
            out.append({"cube_macs": macs, "gm_read_bytes": rd, "gm_write_bytes": wr})
        return out


def _launch(exe, tmp_path, case: Case, kernel: str, env=None):
    case.write_inputs(tmp_path)
    out = run(exe, *case.args(kernel, tmp_path), env=env)
    c = np.fromfile(tmp_path / "c.bin", dtype=case.out_dt).reshape(case.m, case.n)
    return c, stats_of(out)


# ----------------------------------------------------------------------------- numerics

EPILOGUE_CASES = {
    # name: (dtype, m, n, k, base, single, transA, transB, bias, order)
    "f16_unaligned_1core": ("f16", 37, 50, 70, (32, 32, 32), None, 0, 0, 1, 0),
    "f32_unaligned_transB": ("f32", 37, 50, 70, (32, 32, 32), None, 0, 1, 1, 0),
    "f16_9cores_tails_transB": ("f16", 300, 200, 100, (64, 32, 32), (128, 96), 0, 1, 1, 0),
    "f16h_9cores_transAB_orderN": ("f16h", 300, 200, 100, (64, 32, 32), (128, 96), 1, 1, 1, 1),
    "f32_6cores_tails_orderN": ("f32", 130, 75, 90, (32, 16, 24), (48, 40), 0, 0, 1, 1),
    "bf16_2cores_nobias": ("bf16", 64, 48, 40, (32, 16, 32), (32, 48), 0, 0, 0, 0),
}


@pytest.mark.parametrize("name", sorted(EPILOGUE_CASES))
def test_matmul_bias_relu_epilogue(exe, tmp_path, name):
    dtype, m, n, k, base, single, ta, tb, bias, order = EPILOGUE_CASES[name]
    case = Case(dtype, m, n, k, base, single, ta, tb, bias, order)
    c, st = _launch(exe, tmp_path, case, "relu")
    np.testing.assert_allclose(c.astype(np.float64), case.reference(relu=True), **case.tol)
    assert st["warnings"] == []
    assert st["block_dim"] == len(list(case.cores()))
    assert "Relu" in st["vector_by_op"]
    expected = case.expected_counts(epilogue=True)
    for blk, exp in zip(st["blocks"], expected):
        assert {key: blk[key] for key in exp} == exp


@pytest.mark.parametrize("kernel", ["all", "gm"])
@pytest.mark.parametrize(
    "dtype,shape,base,single,ta,tb,bias",
    [
        ("f32", (37, 50, 70), (32, 32, 32), None, 0, 0, 1),
        ("f32", (300, 200, 100), (64, 32, 32), (128, 96), 1, 1, 0),
        ("f16", (96, 64, 48), (32, 32, 16), (48, 64), 1, 0, 1),
    ],
)
def test_matmul_straight_to_gm(exe, tmp_path, kernel, dtype, shape, base, single, ta, tb, bias):
    case = Case(dtype, *shape, base, single, ta, tb, bias)
    c, st = _launch(exe, tmp_path, case, kernel)
    np.testing.assert_allclose(c.astype(np.float64), case.reference(relu=False), **case.tol)
    assert st["warnings"] == [] and st["peak_ub_bytes"] == 0
    expected = case.expected_counts(epilogue=False)
    for blk, exp in zip(st["blocks"], expected):
        assert {key: blk[key] for key in exp} == exp


def test_fp16_accumulates_in_fp32_and_rounds_once(exe, tmp_path):
    # 256 products of 1.0 * (1 + 2**-10): an fp16 accumulator would stall at 256 + rounding; the
    # fp32 accumulator gives 256.25 exactly, rounded once to fp16 (256.25 -> 256.25 is exact).
    case = Case("f16h", 16, 16, 256, (16, 16, 64), bias=0)
    case.write_inputs(tmp_path)
    case.a[:] = 1.0
    case.b[:] = np.float16(1 + 2**-10)
    case.a.tofile(tmp_path / "a.bin")
    case.b.tofile(tmp_path / "b.bin")
    run(exe, *case.args("relu", tmp_path))
    c = np.fromfile(tmp_path / "c.bin", dtype=np.float16)
    assert np.all(c == np.float16(256.25))


def test_threads_give_same_result_and_stats(exe, tmp_path):
    case = Case("f16", 300, 200, 100, (64, 32, 32), (128, 96), 0, 1, 1, 0, seed=3)
    c_seq, st_seq = _launch(exe, tmp_path, case, "relu")
    case = Case("f16", 300, 200, 100, (64, 32, 32), (128, 96), 0, 1, 1, 0, seed=3)
    c_thr, st_thr = _launch(exe, tmp_path, case, "relu", env={"ASCENDC_EMU_THREADS": "1"})
    assert np.array_equal(c_seq, c_thr) and st_seq == st_thr


ASYNC_CASES = ["f16_9cores_tails_transB", "f16h_9cores_transAB_orderN", "f32_6cores_tails_orderN",
               "f16_unaligned_1core"]


@pytest.mark.parametrize("name", ASYNC_CASES)
def test_async_round_matches_the_synchronous_one(exe, tmp_path, name):
    """An asynchronous round (SetWorkspace, Iterate<false>, GetTensorC<false> per tile, two
    output buffers) gives the synchronous kernel's numbers bit for bit and the same counters:
    each tile still goes AIC -> GM workspace -> UB once (written when produced, read when
    fetched)."""
    dtype, m, n, k, base, single, ta, tb, bias, order = EPILOGUE_CASES[name]
    c_sync, st_sync = _launch(exe, tmp_path, Case(dtype, m, n, k, base, single, ta, tb, bias, order),
                              "relu")
    case = Case(dtype, m, n, k, base, single, ta, tb, bias, order)
    c, st = _launch(exe, tmp_path, case, "relu_async")
    np.testing.assert_allclose(c.astype(np.float64), case.reference(relu=True), **case.tol)
    assert np.array_equal(c, c_sync) and st["warnings"] == []
    expected = case.expected_counts(epilogue=True)
    assert [{key: b[key] for key in e} for b, e in zip(st["blocks"], expected)] == expected
    keys = ("gm_read_bytes", "gm_write_bytes", "cube_macs")
    assert [{key: b[key] for key in keys} for b in st["blocks"]] == \
        [{key: b[key] for key in keys} for b in st_sync["blocks"]]


def test_async_round_in_a_one_to_two_mix(exe, tmp_path):
    case = Case("f16", 300, 200, 100, (64, 32, 32), (128, 96), 0, 1, 1, 0)
    c, st = _launch(exe, tmp_path, case, "relu_async", env={"EMU_MIX": "1_2"})
    np.testing.assert_allclose(c.astype(np.float64), case.reference(relu=True), **case.tol)
    expected = case.expected_counts(epilogue=True)
    assert [{key: b[key] for key in e} for b, e in zip(st["blocks"], expected)] == expected


def test_async_round_is_refused_on_a_coupled_chip(exe):
    msg = error_of(run(exe, "rule", "async_ok", env={"ASCENDC_EMU_SOC": "Ascend310P3"}, rc=3))
    assert "Matmul::Iterate<false>: asynchronous iteration is for the MIX kernels of split chips" in msg
    assert "Ascend310P3 has no SetWorkspace" in msg


def test_async_round_used_correctly_passes(exe):
    st = stats_of(run(exe, "rule", "async_ok"))
    assert st["warnings"] == []
    # 4 tiles of 32 x 32 floats: written to the workspace once and read back once
    assert st["gm_write_bytes"] == st["gm_read_bytes"] - 2 * 2 * 64 * 64 * 2 == 4 * 32 * 32 * 4


# ----------------------------------------------------------------------------- counters


def test_cube_macs_pad_to_fractals(exe, tmp_path):
    m, n, k = 37, 50, 70
    _, st = _launch(exe, tmp_path, Case("f16", m, n, k, (32, 32, 32), bias=0), "all")
    assert st["cube_macs"] == ceil_to(m, 16) * ceil_to(n, 16) * ceil_to(k, 16) == 48 * 64 * 80
    _, st = _launch(exe, tmp_path, Case("f32", m, n, k, (32, 32, 32), bias=0), "all")
    assert st["cube_macs"] == ceil_to(m, 16) * ceil_to(n, 16) * ceil_to(k, 8) == 48 * 64 * 72


def test_gm_bytes_follow_the_k_loop_model(exe, tmp_path):
    # one core, 2 x 2 output tiles: A is read once per N tile, B once per M tile, bias once per
    # output tile, C written once.
    m, n, k = 37, 50, 70
    _, st = _launch(exe, tmp_path, Case("f16", m, n, k, (32, 32, 32), bias=1), "all")
    m_iter, n_iter = 2, 2
    assert st["gm_read_bytes"] == 2 * (m * k * n_iter + k * n * m_iter) + 4 * n * m_iter
    assert st["gm_write_bytes"] == 4 * m * n
    # the UB epilogue adds the GM workspace round trip of every tile on 910B, and the copy-out
    _, st = _launch(exe, tmp_path, Case("f16", m, n, k, (32, 32, 32), bias=1), "relu")
    assert st["gm_read_bytes"] == 2 * (m * k * n_iter + k * n * m_iter) + 4 * n * m_iter + 4 * m * n
    assert st["gm_write_bytes"] == 4 * m * n * 2


@pytest.mark.parametrize(
    "order,depths,a_passes,b_passes",
    [
        (0, (9, 3), 1, 1),  # M fastest: all 3 x 3 A blocks and a column's 3 B blocks stay
        (0, (8, 3), 2, 1),  # one A block short: A is read again for the second N tile
        (0, (9, 2), 1, 3),  # B's K panel does not fit: B read once per M tile
        (0, (2, 2), 2, 3),  # CFG_NORM's traffic
        (1, (3, 6), 1, 1),  # N fastest: a row's A panel and all 2 x 3 B blocks stay
        (1, (3, 5), 1, 3),
        (1, (2, 6), 2, 1),
    ],
)
def test_mdl_keeps_blocks_in_l1(exe, tmp_path, order, depths, a_passes, b_passes):
    """CFG_MDL: an operand block still among the last depthA1 / depthB1 loaded is not read
    again (README "Cube"). One core, 3 x 2 output tiles of 32 x 32, K = 70 in 3 steps."""
    m, n, k = 96, 64, 70
    case = Case("f16", m, n, k, (32, 32, 32), bias=1, order=order)
    case.depths = depths
    c, st = _launch(exe, tmp_path, case, "mdl")
    np.testing.assert_allclose(c.astype(np.float64), case.reference(relu=False), **case.tol)
    m_iter = 3
    assert st["warnings"] == []
    assert st["gm_read_bytes"] == 2 * (a_passes * m * k + b_passes * k * n) + 4 * n * m_iter
    assert st["gm_write_bytes"] == 4 * m * n
    bm, bn, bk = case.base
    assert st["peak_l1_bytes"] == depths[0] * bm * bk * 2 + depths[1] * bk * bn * 2 + bn * 4


def test_one_to_two_mix_runs_the_kernel_once_per_aiv(exe, tmp_path):
    """MIX_MODE on 910B is CANN's 1:2 mix: blockDim AIC groups, the kernel body once per AIV
    (GetBlockIdx 0 .. 2 * blockDim - 1), so 9 blocks of the tiling launch as 5 groups whose
    tenth AIV has nothing to do; each AIV's counters are those of its block."""
    case = Case("f16", 300, 200, 100, (64, 32, 32), (128, 96), 0, 1, 1, 0)
    c, st = _launch(exe, tmp_path, case, "relu", env={"EMU_MIX": "1_2"})
    np.testing.assert_allclose(c.astype(np.float64), case.reference(relu=True), **case.tol)
    assert (st["block_dim"], st["task_ratio"], len(st["blocks"])) == (5, 2, 10)
    expected = case.expected_counts(epilogue=True)
    assert len(expected) == 9 and st["warnings"] == []
    assert [{key: b[key] for key in e} for b, e in zip(st["blocks"], expected)] == expected
    assert st["blocks"][9]["gm_read_bytes"] == st["blocks"][9]["cube_macs"] == 0


def test_one_to_two_mix_halves_the_cube_memories_per_aiv(exe, tmp_path):
    """The two AIVs' Matmul objects share their AIC: each may reserve half of L1 (256 KB on
    910B1). 100 + 40 blocks of 2 KB fit a 1:1 mix's whole L1, not a 1:2 client's half."""
    case = Case("f16", 96, 64, 70, (32, 32, 32), bias=0)
    case.depths = (100, 40)
    _launch(exe, tmp_path, case, "mdl")
    case.write_inputs(tmp_path)
    out = run(exe, *case.args("mdl", tmp_path), env={"EMU_MIX": "1_2"}, rc=3)
    assert "L1" in error_of(out) and "(half: a 1:2 mix)" in error_of(out)


def test_coupled_chip_moves_tiles_on_chip(exe, tmp_path):
    case = Case("f16", 37, 50, 70, (32, 32, 32), bias=1)
    c, st = _launch(exe, tmp_path, case, "relu", env={"ASCENDC_EMU_SOC": "Ascend310P3"})
    np.testing.assert_allclose(c.astype(np.float64), case.reference(relu=True), **case.tol)
    assert st["soc"] == "Ascend310P3"
    expected = case.expected_counts(epilogue=True, soc_arch=2002)  # no workspace round trip
    assert [{key: b[key] for key in e} for b, e in zip(st["blocks"], expected)] == expected


def test_l1_l0_bytes_reported(exe, tmp_path):
    # tiling of the host main: depthA1 = depthB1 = 2, dbL0A = dbL0B = 2, dbL0C = 1, isBias
    bm, bn, bk = 64, 32, 32
    _, st = _launch(exe, tmp_path, Case("f16", 96, 64, 48, (bm, bn, bk), bias=1), "all")
    assert st["peak_l1_bytes"] == 2 * bm * bk * 2 + 2 * bk * bn * 2 + bn * 4
    assert st["peak_l0a_bytes"] == bm * bk * 2 * 2
    assert st["peak_l0b_bytes"] == bk * bn * 2 * 2
    assert st["peak_l0c_bytes"] == bm * bn * 4


# ----------------------------------------------------------------------------- basic API


@pytest.mark.parametrize("m,n,k", [(32, 32, 32), (20, 24, 40)])
def test_basic_api_mmad(exe, tmp_path, m, n, k):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    a.tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    st = stats_of(run(exe, "mmad", m, n, k, tmp_path))
    c = np.fromfile(tmp_path / "c.bin", dtype=np.float32).reshape(m, n)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
    assert st["cube_macs"] == ceil_to(m, 16) * ceil_to(n, 16) * ceil_to(k, 16)
    assert st["gm_read_bytes"] == 2 * (m * k + k * n) and st["gm_write_bytes"] == 4 * m * n
    assert st["warnings"] == []


# ----------------------------------------------------------------------------- device rules

RULES = {
    "l0a_overflow": [
        "Matmul::Init: the tiling does not fit L0A",
        "baseM 128 x baseK 256 x 2 B x dbL0A 2 = 131072 B > 65536 B of Ascend910B1 L0A",
    ],
    "l0c_overflow": [
        "the tiling does not fit L0C",
        "baseM 256 x baseN 256 x 4 B x dbL0C 1 = 262144 B > 131072 B of Ascend910B1 L0C",
    ],
    "l1_overflow": [
        "the tiling does not fit L1",
        (
            "depthA1 8 x baseM 256 x baseK 128 x 2 B + depthB1 1 x baseK 128 x baseN 16 x 2 B"
            " = 528384 B > 524288 B of Ascend910B1 L1"
        ),
    ],
    "two_objects": [
        "the tiling does not fit L0C",
        "= 131072 B (+ 131072 B already planned) > 131072 B",
    ],
    "base_align": ["TCubeTiling.baseM = 40 must be a positive multiple of 16"],
    "aiv_mode": [
        "Matmul::Init: the cube unit is not reachable from an AIV_MODE kernel on Ascend910B1"
    ],
    "trans_undeclared": [
        (
            "Matmul::SetTensorB: isTransposeB = true but B's MatmulType was "
            "declared with ISTRANS = false"
        )
    ],
    "get_before_iterate": ["Matmul::GetTensorC(GlobalTensor): no current tile"],
    "aic_ub": ["Matmul::GetTensorC(LocalTensor): an AIC_MODE kernel has no UB"],
    "async_no_workspace": ["Matmul::Iterate<false>: no workspace: call SetWorkspace first"],
    "async_small_workspace": [
        "Matmul::Iterate<false>: a round of 2 x 2 tiles needs 4 x baseM 32 x baseN 32 x 4 B = 16384 B "
        "of workspace; SetWorkspace gave 12288 B"
    ],
    "async_fetch_past_round": [
        "Matmul::GetTensorC<false>(LocalTensor): fetch 4 of an asynchronous round of 4 tiles: "
        "workspace slot 4 holds no tile of this round (not yet produced"
    ],
    "async_new_round_unfetched": [
        "Matmul::Iterate<false>: tiles 2..3 of the last asynchronous round (4 tiles) were never "
        "fetched with GetTensorC<false>: a new round would overwrite their workspace slots"
    ],
    "async_end_unfetched": ["Matmul::End: tiles 3..3 of the last asynchronous round (4 tiles)"],
    "async_overwritten": [
        "Matmul::GetTensorC<false>(LocalTensor): workspace slot 1 (bytes [4096, 8192) of the "
        "workspace) was overwritten before it was fetched"
    ],
    "async_gm_fetch": [
        "Matmul::GetTensorC(GlobalTensor): an asynchronous round (Iterate<false>) fetches into a "
        "LocalTensor (UB) only"
    ],
    "async_fetch_after_sync": [
        "Matmul::GetTensorC<false>(LocalTensor): the round was started by a synchronous Iterate"
    ],
    "missing_tail": [
        "Matmul::IterateAll: A access to elements",
        "is outside the SetGlobalBuffer range of 6400 elements",
    ],
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_device_rule_error(exe, case):
    msg = error_of(run(exe, "rule", case, rc=3))
    assert msg.startswith("ascendc_emu: kernel cube_rules, block 0/1: ")
    for text in RULES[case]:
        assert text in msg, f"{text!r} not in {msg!r}"


def test_missing_end_warns(exe):
    st = stats_of(run(exe, "rule", "no_end"))
    assert any("without End()" in w for w in st["warnings"]), st["warnings"]
    msg = error_of(run(exe, "rule", "no_end", env={"ASCENDC_EMU_STRICT": "1"}, rc=3))
    assert "without End() [strict mode]" in msg
