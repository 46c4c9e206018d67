"""Tests of the emulator's Load3D (img2col on the cube) and Fixpipe / L0C -> UB output paths.

tests/emu/conv_load3d.cpp holds a convolution written with the basic cube API (Load3D v2 into
L0A, weights as L0B fractals, Mmad over K chunks, Fixpipe on 910B or the UB on 310P) and one
device-rule case each; it is built once per session against the emulator. The numbers are
compared with numpy, the counters with the plan of ``schedules/conv2d/load3d.py`` (the GM bytes
and cube MACs of every block), and each rule's error text is checked.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from emu_build import ROOT, error_of, split_build, stats_of
from tvm_ascend.schedules.conv2d.load3d import load3d_plan
from tvm_ascend.schedules.conv2d.shape import ConvShape
from tvm_ascend.soc import get_soc

SRC = ROOT / "tests" / "emu" / "conv_load3d.cpp"


@pytest.fixture(scope="session")
def exe(tmp_path_factory) -> Path:
    return split_build(SRC, tmp_path_factory.mktemp("emu_load3d"), "conv")


def run(exe: Path, *args, soc: str = "Ascend910B1", rc: int = 0) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDC_EMU_")}
    env["ASCENDC_EMU_SOC"] = soc
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == rc, \
        f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def counts_of(st: dict) -> list[dict]:
    """Per block, the counters the Load3D plan predicts."""
    return [{"gm_read_bytes": b["gm_read_bytes"], "gm_write_bytes": b["gm_write_bytes"],
             "cube_macs": b["cube_macs"],
             "trans5hd_instrs": b["vector_by_op"].get("TransDataTo5HD", {}).get("instrs", 0),
             "gather_elems": b["vector_by_op"].get("Gather", {}).get("elems", 0)}
            for b in st["blocks"]]


def planned(plan, blocks: int, io: str) -> list[dict]:
    """The plan's per-block counts the emulator also counts (it has no per-call count)."""
    keys = ("gm_read_bytes", "gm_write_bytes", "cube_macs", "trans5hd_instrs", "gather_elems")
    return [{key: b[key] for key in keys} for b in plan.block_counts(blocks, io)]


class Conv:
    """One convolution: NCHW input, OIHW weights; writes them as the kernel takes them (5HD,
    L0B fractals) and computes the reference."""

    def __init__(self, dtype, n, c, h, w, cout, k, stride=(1, 1), dilation=(1, 1),
                 pads=(0, 0, 0, 0), seed=0):
        self.dtype, self.n, self.c, self.h, self.w, self.cout = dtype, n, c, h, w, cout
        self.kh, self.kw = k if isinstance(k, tuple) else (k, k)
        self.stride, self.dilation, self.pads = stride, dilation, pads  # pads: T, B, L, R
        self.np_dtype = np.float16 if dtype == "f16" else np.float32
        self.c0 = 16 if dtype == "f16" else 8
        self.c1 = -(-c // self.c0)
        self.n16 = -(-cout // 16) * 16
        (sh, sw), (dh, dw), (pt, pb, pl, pr) = stride, dilation, pads
        self.oh = (h + pt + pb - dh * (self.kh - 1) - 1) // sh + 1
        self.ow = (w + pl + pr - dw * (self.kw - 1) - 1) // sw + 1
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal((n, c, h, w)).astype(self.np_dtype)
        self.wt = (rng.standard_normal((cout, c, self.kh, self.kw)) * 0.2).astype(self.np_dtype)

    def shape(self) -> ConvShape:
        return ConvShape(self.n, self.c, self.h, self.w, self.cout, self.kh, self.kw, self.oh,
                         self.ow, self.stride, self.dilation, (self.pads[0], self.pads[2]), 1,
                         "float16" if self.dtype == "f16" else "float32", "x", "w")

    def write(self, folder: Path, nchw: bool = False) -> None:
        c0, c1 = self.c0, self.c1
        if nchw:  # as the model holds them, with slack (rows read in whole blocks, weights by
            # whole channel groups)
            np.concatenate([self.x.ravel(), np.zeros(16, self.np_dtype)]).tofile(folder / "x.bin")
            slack = np.zeros(16 * self.kh * self.kw, self.np_dtype)
            np.concatenate([self.wt.ravel(), slack]).tofile(folder / "w.bin")
            return
        else:
            x = np.zeros((self.n, c1 * c0, self.h, self.w), self.np_dtype)
            x[:, :self.c] = self.x
            x = x.reshape(self.n, c1, c0, self.h, self.w).transpose(0, 1, 3, 4, 2)
            x.tofile(folder / "x.bin")
        w = np.zeros((self.n16, c1 * c0, self.kh, self.kw), self.np_dtype)
        w[:self.cout, :self.c] = self.wt
        # B[k, n], k = ((c1 * kh + ky) * kw + kx) * C0 + c0, as L0B fractals [K/C0][N/16][16][C0]
        b = w.reshape(self.n16, c1, c0, self.kh, self.kw).transpose(1, 3, 4, 2, 0)
        b = b.reshape(-1, c0, self.n16 // 16, 16).transpose(0, 2, 3, 1)
        b.tofile(folder / "w.bin")

    def reference(self, relu: bool) -> np.ndarray:
        (sh, sw), (dh, dw), (pt, pb, pl, pr) = self.stride, self.dilation, self.pads
        xp = np.pad(self.x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        out = np.zeros((self.n, self.cout, self.oh, self.ow))
        for ky in range(self.kh):
            for kx in range(self.kw):
                win = xp[:, :, ky * dh: ky * dh + (self.oh - 1) * sh + 1: sh,
                         kx * dw: kx * dw + (self.ow - 1) * sw + 1: sw]
                out += np.einsum("nchw,oc->nohw", win, self.wt[:, :, ky, kx].astype(np.float64))
        return np.maximum(out, 0) if relu else out

    def plan(self, soc, rows, c1_step, n_tile=None, k_taps=None):
        """The Load3D plan of these sizes (``n_tile`` None: all channels in one tile;
        ``k_taps`` None: all taps a K step)."""
        return load3d_plan(self.shape(), get_soc(soc), rows, c1_step, n_tile or self.n16,
                           k_taps or self.kh * self.kw)

    def launch(self, exe, folder, rows, c1_step, blocks, relu=False, nz=False, nchw=False,
               soc="Ascend910B1", n_tile=None, k_taps=None):
        self.write(folder, nchw)
        (sh, sw), (dh, dw), (pt, pb, pl, pr) = self.stride, self.dilation, self.pads
        out = run(exe, "conv", self.dtype, self.n, self.c, self.h, self.w, self.cout, self.kh,
                  self.kw, sh, sw, dh, dw, pt, pb, pl, pr, rows, c1_step, n_tile or self.n16,
                  k_taps or 0, blocks, int(relu), int(nz), int(nchw), folder, soc=soc)
        y = np.fromfile(folder / "y.bin", dtype=self.np_dtype)
        pixels = self.oh * self.ow
        if nchw:
            y = y[:self.n * self.cout * pixels].reshape(self.n, self.cout, self.oh, self.ow)
        elif nz:  # [N][Cout/16][Ho*Wo][16]
            y = y.reshape(self.n, self.n16 // 16, pixels, 16).transpose(0, 1, 3, 2)
            y = y.reshape(self.n, self.n16, self.oh, self.ow)[:, :self.cout]
        else:  # NHWC rows
            y = y[:self.n * pixels * self.cout].reshape(self.n, self.oh, self.ow, self.cout)
            y = y.transpose(0, 3, 1, 2)
        return y.astype(np.float64), stats_of(out)


TOL = {"f16": {"rtol": 2e-2, "atol": 2e-2}, "f32": {"rtol": 1e-4, "atol": 1e-4}}

CASES = {
    # name: (dtype, n, c, h, w, cout, k, stride, dilation, pads (T, B, L, R), rows, c1Step, blocks
    #        [, nTile, kTaps])
    "1x1_f16": ("f16", 1, 32, 8, 8, 48, 1, (1, 1), (1, 1), (0, 0, 0, 0), 2, 2, 1),
    "3x3_s1_pad1_odd": ("f16", 2, 20, 9, 11, 24, 3, (1, 1), (1, 1), (1, 1, 1, 1), 3, 1, 3),
    "3x3_s2_pad1": ("f16", 1, 16, 13, 13, 32, 3, (2, 2), (1, 1), (1, 1, 1, 1), 2, 1, 2),
    "7x7_s2_pad3": ("f16", 1, 3, 23, 23, 16, 7, (2, 2), (1, 1), (3, 3, 3, 3), 2, 1, 2),
    "3x3_dilation2": ("f16", 1, 16, 12, 12, 16, 3, (1, 1), (2, 2), (2, 2, 2, 2), 4, 1, 1),
    "asymmetric_pads_1x3": ("f16", 1, 16, 7, 10, 20, (1, 3), (1, 2), (1, 1), (0, 0, 2, 1), 3, 1, 2),
    "3x3_f32_kchunks": ("f32", 1, 20, 10, 10, 24, 3, (1, 1), (1, 1), (1, 1, 1, 1), 2, 1, 4),
    "3x3_channel_tiles_tail": ("f16", 2, 16, 8, 8, 40, 3, (1, 1), (1, 1), (1, 1, 1, 1), 2, 1, 5,
                               16, None),
    "7x7_split_taps": ("f16", 1, 20, 15, 15, 32, 7, (2, 2), (1, 1), (3, 3, 3, 3), 2, 1, 3, 16, 10),
    "3x3_f32_split_taps_channel_tiles": ("f32", 1, 12, 9, 9, 48, 3, (1, 1), (1, 1), (1, 1, 1, 1),
                                         3, 1, 2, 32, 4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_load3d_conv_matches_numpy_and_plan(exe, tmp_path, name):
    dtype, n, c, h, w, cout, k, stride, dil, pads, rows, step, blocks, *tiles = CASES[name]
    n_tile, k_taps = tiles or (None, None)
    conv = Conv(dtype, n, c, h, w, cout, k, stride, dil, pads)
    y, st = conv.launch(exe, tmp_path, rows, step, blocks, relu=name.endswith("odd"),
                        n_tile=n_tile, k_taps=k_taps)
    np.testing.assert_allclose(y, conv.reference(relu=name.endswith("odd")), **TOL[dtype])
    assert st["warnings"] == [] and st["peak_ub_bytes"] == 0
    plan = conv.plan("Ascend910B1", rows, step, n_tile, k_taps)
    assert st["peak_l1_bytes"] == plan.l1_bytes
    assert st["peak_l0a_bytes"] == plan.l0a_bytes and st["peak_l0c_bytes"] == plan.l0c_bytes
    got = counts_of(st)
    assert got == planned(plan, blocks, "nhwc")


def test_only_the_tiles_rows_reach_l1(exe, tmp_path):
    """A feature map larger than L1 (64 channels x 200 x 200 half = 5 MB): each tile loads the
    rows under its taps, a few KB, and the whole image is read about once."""
    conv = Conv("f16", 1, 64, 200, 200, 16, 3, (1, 1), (1, 1), (1, 1, 1, 1), seed=2)
    y, st = conv.launch(exe, tmp_path, rows=1, c1_step=1, blocks=8)
    np.testing.assert_allclose(y, conv.reference(False), **TOL["f16"])
    plan = conv.plan("Ascend910B1", 1, 1)
    assert plan.l1_bytes < 524288 < 64 * 200 * 200 * 2
    got = counts_of(st)
    assert got == planned(plan, 8, "nhwc")
    fmap = 64 * 200 * 200 * 2
    weights = 200 * 9 * 64 * 16 * 2  # once per tile
    assert sum(b["gm_read_bytes"] for b in got) == pytest.approx(3 * fmap + weights, rel=0.02)


def test_fixpipe_nz_writes_nc1hwc0_with_relu(exe, tmp_path):
    conv = Conv("f16", 2, 16, 9, 9, 32, 3, (1, 1), (1, 1), (1, 1, 1, 1), seed=4)
    y, st = conv.launch(exe, tmp_path, rows=4, c1_step=1, blocks=2, relu=True, nz=True)
    np.testing.assert_allclose(y, conv.reference(True), **TOL["f16"])
    plan = conv.plan("Ascend910B1", 4, 1)
    got = counts_of(st)
    assert got == planned(plan, 2, "5hd")


def test_coupled_chip_moves_the_product_through_the_ub(exe, tmp_path):
    """310P has Load3D v2 (half) but no Fixpipe: L0C -> UB (float -> half, ReLU) -> GM."""
    conv = Conv("f16", 1, 16, 10, 10, 24, 3, (2, 2), (1, 1), (1, 1, 1, 1), seed=5)
    y, st = conv.launch(exe, tmp_path, rows=3, c1_step=1, blocks=2, relu=True, nz=True,
                        soc="Ascend310P3")
    assert st["soc"] == "Ascend310P3"
    np.testing.assert_allclose(y, conv.reference(True), **TOL["f16"])
    plan = conv.plan("Ascend310P3", 3, 1)
    got = counts_of(st)
    assert got == planned(plan, 2, "5hd")


@pytest.mark.parametrize("c,k,stride,pads", [(20, 3, (1, 1), (1, 1, 1, 1)),
                                             (3, 7, (2, 2), (3, 3, 3, 3))])
def test_coupled_chip_takes_and_gives_nchw_through_the_ub(exe, tmp_path, c, k, stride, pads):
    """310P from the model's own tensors: NCHW rows -> UB -> TransDataTo5HD -> L1 -> Load3D, and
    the product L0C -> UB -> TransDataTo5HD back -> NCHW rows (the vector epilogue's place),
    the OIHW weights into L0B fractals by Gathers; two channel tiles, the 7x7 in K steps of 20
    taps."""
    conv = Conv("f16", 2, c, 16, 16, 24, k, stride, (1, 1), pads, seed=6)
    rows = 2  # 32 or 16 positions a tile: whole blocks out
    k_taps = 20 if k == 7 else None
    y, st = conv.launch(exe, tmp_path, rows=rows, c1_step=1, blocks=3, relu=True, nchw=True,
                        soc="Ascend310P3", n_tile=16, k_taps=k_taps)
    np.testing.assert_allclose(y, conv.reference(True), **TOL["f16"])
    plan = conv.plan("Ascend310P3", rows, 1, 16, k_taps)
    assert counts_of(st) == planned(plan, 3, "nchw")
    assert set(st["vector_by_op"]) <= {"TransDataTo5HD", "Duplicate", "Gather"}


def test_float_load3d_is_refused_on_310p(exe, tmp_path):
    conv = Conv("f32", 1, 8, 6, 6, 16, 3, (1, 1), (1, 1), (1, 1, 1, 1))
    conv.write(tmp_path)
    out = run(exe, "conv", "f32", 1, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 16, 0, 1, 0,
              1, 0, tmp_path, soc="Ascend310P3", rc=3)
    assert "float is not supported on Ascend310P3 (dav_m200 Load3D v2 takes half" in error_of(out)


RULES = {
    "channel_small": ("channelSize 8 packs a part of a C0 group (the device's small-channel "
                      "mode), not emulated"),
    "channel_odd": "channelSize 18 must be a positive multiple of 16 for half",
    "m_align": "mExtension 40, mStartPt 0: for half each must be a multiple of 16",
    "k_align": "kExtension 144, kStartPt 8: each must be a multiple of 16",
    "k_range": "K columns [16, 160) pass the image matrix's K = 1 x 3 x 3 x 16 = 144",
    "stride": "strideW = 64 is outside [1, 63]",
    "filter_span": "the 3x9 filter (dilation 1x3) spans more than the padded 16x16 feature map",
    "src_align": "src starts at byte 16 of L1, not 32-byte aligned",
    "dst_align": "dst starts at byte 32 of L0A, not 512-byte aligned",
    "src_bounds": "src accesses bytes [0, 8704) of a 8256 B A1 buffer",
    "transpose": ("enTranspose / enSmallK / filterSizeW / filterSizeH / fMatrixCtrl are not "
                  "emulated"),
    "no_fmatrix": "isSetFMatrix = false but this block never called SetFmatrix",
    "fixpipe_quant": "quantPre 0 for a float L0C written as half: the device needs 1 (F322F16)",
    "fixpipe_nz": "NZ output: nSize 24 must be a multiple of 16",
    "l0c_to_ub_910b": "L0C cannot reach the UB on Ascend910B1 (the AIC has no UB)",
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_device_rule_error(exe, case):
    msg = error_of(run(exe, "rule", case, rc=3))
    assert msg.startswith("ascendc_emu: kernel load3d_rules, block 0/1: "), msg
    assert RULES[case] in msg, msg


def test_fixpipe_is_refused_on_310p(exe):
    msg = error_of(run(exe, "rule", "fixpipe_310p", soc="Ascend310P3", rc=3))
    assert "Fixpipe from L0C (CO1) to GM is not supported on Ascend310P3" in msg
    assert "copy L0C to the UB (DataCopy CO1 -> CO2)" in msg


def test_valid_rule_baseline_passes(exe):
    """The rule kernel's own parameters (no case) are valid: every error above is the case's."""
    assert stats_of(run(exe, "rule", "none"))["warnings"] == []
