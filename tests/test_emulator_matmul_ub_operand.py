"""The emulator's Matmul API with B in the UB (``MatmulType<TPosition::VECOUT, ...>`` and
``SetTensorB(LocalTensor)``): values, and GM bytes as the README's "Cube" section models them
(staged through GM on 910B, on chip on 310P)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX = os.environ.get("CXX", "g++")
M, N, K, PITCH = 20, 24, 40, 24  # B's UB rows are PITCH elements apart (32-byte multiple)

KERNEL = r"""
#include "kernel_operator.h"
#include "lib/matmul_intf.h"
#include "tikicpulib.h"
#include <cstdio>
#include <cstring>
using AT = matmul::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, float>;
using BT = matmul::MatmulType<AscendC::TPosition::VECOUT, CubeFormat::ND, float>;
using CT = matmul::MatmulType<AscendC::TPosition::VECIN, CubeFormat::ND_ALIGN, float>;
constexpr int M = %(M)d, N = %(N)d, K = %(K)d, PITCH = %(PITCH)d;

extern "C" __global__ __aicore__ void ub_b(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR ws,
                                           GM_ADDR tiling) {
  AscendC::SetSysWorkspace(ws);
  TCubeTiling t = *reinterpret_cast<TCubeTiling*>(tiling);
  AscendC::TPipe pipe;
  matmul::Matmul<AT, BT, CT, AT> mm;
  REGIST_MATMUL_OBJ(&pipe, AscendC::GetSysWorkSpacePtr(), mm, &t);
  AscendC::GlobalTensor<float> aGm, bGm, cGm;
  aGm.SetGlobalBuffer((__gm__ float*)a, M * K);
  bGm.SetGlobalBuffer((__gm__ float*)b, K * N);
  cGm.SetGlobalBuffer((__gm__ float*)c, M * N);
  AscendC::TBuf<AscendC::TPosition::VECOUT> bBuf;
  AscendC::TQue<AscendC::QuePosition::VECOUT, 1> cQue;
  pipe.InitBuffer(bBuf, K * PITCH * sizeof(float));
  pipe.InitBuffer(cQue, 1, 32 * PITCH * sizeof(float));
  AscendC::LocalTensor<float> bLocal = bBuf.Get<float>();
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) bLocal.SetValue(k * PITCH + j, bGm.GetValue(k * N + j));
  mm.SetTensorA(aGm);
  mm.SetTensorB(bLocal);
  mm.SetTail(M, N, K);
  AscendC::LocalTensor<float> cLocal = cQue.AllocTensor<float>();
  mm.Iterate();
  mm.template GetTensorC<true, true>(cLocal, 0, true, M, N);
  cQue.EnQue(cLocal);
  cLocal = cQue.DeQue<float>();
  AscendC::DataCopyExtParams rows{M, N * sizeof(float), 0, 0, 0};
  AscendC::DataCopyPad(cGm, cLocal, rows);
  cQue.FreeTensor(cLocal);
  mm.End();
}

int main(int argc, char** argv) {
  float *a = (float*)AscendC::GmAlloc(M * K * 4), *b = (float*)AscendC::GmAlloc(K * N * 4);
  float* c = (float*)AscendC::GmAlloc(M * N * 4);
  for (int i = 0; i < M * K; ++i) a[i] = float((i * 7) %% 11) - 5.0f;
  for (int i = 0; i < K * N; ++i) b[i] = float((i * 5) %% 13) - 6.0f;
  TCubeTiling t{};
  t.usedCoreNum = 1; t.M = M; t.N = PITCH; t.Ka = K; t.Kb = K;
  t.singleCoreM = 32; t.singleCoreN = 32; t.singleCoreK = K;
  t.baseM = 32; t.baseN = 32; t.baseK = 16; t.depthA1 = 1; t.depthB1 = 1;
  uint8_t* tl = (uint8_t*)AscendC::GmAlloc(sizeof(t));
  std::memcpy(tl, &t, sizeof(t));
  uint8_t* ws = (uint8_t*)AscendC::GmAlloc(1024);
  AscendC::SetKernelMode(KernelMode::MIX_AIC_1_1);
  ICPU_RUN_KF(ub_b, 1, (uint8_t*)a, (uint8_t*)b, (uint8_t*)c, ws, tl);
  printf("%%s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
  for (int i = 0; i < M * N; ++i) printf("%%g ", c[i]);
  printf("\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    if shutil.which(CXX) is None:
        pytest.skip(f"{CXX} not found")
    out = tmp_path_factory.mktemp("emu_ub_b")
    src = out / "ub_b.cpp"
    src.write_text(KERNEL % {"M": M, "N": N, "K": K, "PITCH": PITCH})
    cmd = [CXX, "-std=c++17", "-O1", "-DASCENDC_CPU_DEBUG",
           f"-I{ROOT / 'contrib' / 'ascendc_emu'}", str(src), "-o", str(out / "ub_b"),
           "-pthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "ub_b"


def _run(exe: Path, soc: str):
    env = {**os.environ, "ASCENDC_EMU_SOC": soc}
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    stats_line, values = proc.stdout.strip().splitlines()
    return json.loads(stats_line), np.array(values.split(), dtype=np.float64).reshape(M, N)


def _inputs():
    a = (np.arange(M * K) * 7 % 11 - 5.0).reshape(M, K)
    b = (np.arange(K * N) * 5 % 13 - 6.0).reshape(K, N)
    return a, b


@pytest.mark.parametrize("soc,staged", [("Ascend910B1", True), ("Ascend310P3", False)])
def test_matmul_with_b_in_the_ub(exe, soc, staged):
    stats, c = _run(exe, soc)
    a, b = _inputs()
    np.testing.assert_allclose(c, a @ b, rtol=1e-6, atol=1e-6)
    assert stats["warnings"] == []
    b_bytes = K * N * 4          # the UB operand, over the K steps of the one tile
    tile = M * N * 4             # GetTensorC into the UB
    gathered = K * N * 4         # the kernel's own GetValue loop that filled the UB operand
    read = M * K * 4 + gathered + (b_bytes + tile if staged else 0)
    write = M * N * 4 + (b_bytes + tile if staged else 0)
    assert stats["gm_read_bytes"] == read and stats["gm_write_bytes"] == write
    assert stats["cube_macs"] == 32 * 32 * 40
