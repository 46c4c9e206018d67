"""Tests of the AscendC CPU emulator (contrib/ascendc_emu).

The C++ programs in tests/emu are AscendC kernels plus host mains. They are built once per session
with g++ against the emulator header; each test runs one and compares with numpy, checks a device
rule's error text, or checks the launch counters (JSON on stdout).
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import TOLERANCES

ROOT = Path(__file__).resolve().parents[1]
EMU_DIR = ROOT / "contrib" / "ascendc_emu"
SRC_DIR = ROOT / "tests" / "emu"
CXX = os.environ.get("CXX", "g++")
BASE_FLAGS = ["-std=c++17", "-DASCENDC_CPU_DEBUG", f"-I{EMU_DIR}", "-pthread"]
# The header must stay warning-free; -Wno-comment only as soc_profiles.def's comment holds "/*".
WARN_FLAGS = ["-Wall", "-Wextra", "-Wno-comment"]


# name -> (source, extra flags, mode). Mode "header": the plain header-only build every kernel
# gets by default; mode "split": -DASCENDC_EMU_SEPARATE_RUNTIME, linked with one runtime object
# (the same code, compiled once: keeps this suite fast). Samples build at -O2; the op and rule
# checks, whose results do not depend on the optimisation level, at -O0/-O1 to save build time.
PROGRAMS = {
    "ops": ("ops.cpp", ["-O0"], "split"),
    "vec_add": ("vec_add.cpp", ["-O2"], "header"),
    "device_rules": ("device_rules.cpp", ["-O1"], "split"),
    "softmax": ("softmax.cpp", ["-O2"], "split"),
    "layernorm": ("layernorm.cpp", ["-O2"], "split"),
}
SPLIT = ["-DASCENDC_EMU_SEPARATE_RUNTIME"]


def _cxx(args: list[str]) -> str:
    cmd = [CXX, *BASE_FLAGS, *WARN_FLAGS, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compile failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return proc.stderr


def _compile(job: tuple[str, Path]) -> tuple[str, str]:
    name, out_dir = job
    if name == "runtime":
        return name, _cxx(
            [
                "-O0",
                *SPLIT,
                "-DASCENDC_EMU_RUNTIME_IMPL",
                "-x",
                "c++",
                "-c",
                str(EMU_DIR / "kernel_operator.h"),
                "-o",
                str(out_dir / "runtime.o"),
            ]
        )
    src, extra, mode = PROGRAMS[name]
    if mode == "header":
        return name, _cxx([*extra, str(SRC_DIR / src), "-o", str(out_dir / name)])
    return name, _cxx([*extra, *SPLIT, "-c", str(SRC_DIR / src), "-o", str(out_dir / f"{name}.o")])


@pytest.fixture(scope="session")
def bins(tmp_path_factory) -> dict[str, Path]:
    if shutil.which(CXX) is None:
        pytest.skip(f"{CXX} not found")
    out_dir = tmp_path_factory.mktemp("emu_bin")
    jobs = [("runtime", out_dir)] + [(name, out_dir) for name in PROGRAMS]  # longest first
    warnings = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for name, err in pool.map(_compile, jobs):
            if err.strip():
                warnings[name] = err
    assert not warnings, f"compiler warnings: {warnings}"
    for name, (_, _, mode) in PROGRAMS.items():
        if mode == "split":
            _cxx(
                [str(out_dir / f"{name}.o"), str(out_dir / "runtime.o"), "-o", str(out_dir / name)]
            )
    return {name: out_dir / name for name in PROGRAMS}


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
        f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout


def stats_of(out: str) -> dict:
    line = next(ln for ln in out.splitlines() if ln.startswith("STATS "))
    return json.loads(line[len("STATS ") :])


def floats_of(out: str, tag: str) -> np.ndarray:
    line = next(ln for ln in out.splitlines() if ln.startswith(tag + " "))
    return np.array(line.split()[1:], dtype=np.float32)


def error_of(out: str) -> str:
    line = next(ln for ln in out.splitlines() if ln.startswith("DEVICE_RULE_ERROR "))
    return line[len("DEVICE_RULE_ERROR ") :]


# ----------------------------------------------------------------------------- sample kernels


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("buffer_num", [1, 2])
def test_vec_add_with_unaligned_tail(bins, tmp_path, dtype, buffer_num):
    rng = np.random.default_rng(0)
    n = 8 * 1000 + 3  # the last block's last tile is not a 32-byte multiple
    x = (rng.standard_normal(n) * 4).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    x.tofile(tmp_path / "x.bin")
    y.tofile(tmp_path / "y.bin")
    tag = "f32" if dtype == "float32" else "f16"
    out = run(bins["vec_add"], tag, buffer_num, n, 8, 512, tmp_path)
    z = np.fromfile(tmp_path / "z.bin", dtype=dtype)
    np.testing.assert_allclose(z.astype(np.float32), (x + y).astype(np.float32),
                               **TOLERANCES["emulator/" + dtype])
    st = stats_of(out)
    elem = np.dtype(dtype).itemsize
    assert st["gm_read_bytes"] == 2 * n * elem and st["gm_write_bytes"] == n * elem
    assert st["warnings"] == []
    assert st["vector_by_op"]["Add"]["elems"] == n


def test_vec_add_f16_rounds_like_numpy(bins, tmp_path):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(4096) * 100).astype(np.float16)
    y = rng.standard_normal(4096).astype(np.float16)
    x.tofile(tmp_path / "x.bin")
    y.tofile(tmp_path / "y.bin")
    run(bins["vec_add"], "f16", 2, 4096, 4, 1024, tmp_path)
    z = np.fromfile(tmp_path / "z.bin", dtype=np.float16)
    assert np.array_equal(z, x + y)  # fp16 add rounds to nearest even, like numpy


def test_threads_give_same_result_and_stats(bins, tmp_path):
    rng = np.random.default_rng(2)
    n = 100_003
    rng.standard_normal(n).astype(np.float32).tofile(tmp_path / "x.bin")
    rng.standard_normal(n).astype(np.float32).tofile(tmp_path / "y.bin")
    seq = stats_of(run(bins["vec_add"], "f32", 2, n, 8, 2048, tmp_path))
    z_seq = np.fromfile(tmp_path / "z.bin", dtype=np.float32)
    thr = stats_of(
        run(bins["vec_add"], "f32", 2, n, 8, 2048, tmp_path, env={"ASCENDC_EMU_THREADS": "1"})
    )
    z_thr = np.fromfile(tmp_path / "z.bin", dtype=np.float32)
    assert np.array_equal(z_seq, z_thr)
    assert seq == thr


@pytest.mark.parametrize("mode", ["reduce", "whole"])
def test_softmax_rows(bins, tmp_path, mode):
    rng = np.random.default_rng(3)
    rows, cols = 37, 50
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    out = run(bins["softmax"], mode, rows, cols, 4, 4, tmp_path)
    y = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(rows, cols)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), **TOLERANCES["emulator/float32"])
    st = stats_of(out)
    assert st["gm_read_bytes"] == x.nbytes and st["gm_write_bytes"] == x.nbytes
    ops = st["vector_by_op"]
    assert ("ReduceMax" in ops) if mode == "reduce" else ("WholeReduceMax" in ops and "Brcb" in ops)


def test_layernorm_rows(bins, tmp_path):
    rng = np.random.default_rng(4)
    rows, hidden = 29, 96
    x = rng.standard_normal((rows, hidden)).astype(np.float32)
    gamma = rng.random(hidden).astype(np.float32)
    beta = rng.random(hidden).astype(np.float32)
    for name, arr in (("x", x), ("gamma", gamma), ("beta", beta)):
        arr.tofile(tmp_path / f"{name}.bin")
    out = run(bins["layernorm"], rows, hidden, 3, 4, tmp_path)
    y = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(rows, hidden)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    ref = (x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    st = stats_of(out)
    # x once, gamma and beta once per block (3 blocks), y once
    assert st["gm_read_bytes"] == x.nbytes + 3 * 2 * gamma.nbytes
    assert st["gm_write_bytes"] == x.nbytes


# ----------------------------------------------------------------------------- single ops


def _ops_inputs(op: str, rng) -> tuple[np.ndarray, np.ndarray]:
    x = (rng.standard_normal(256) * 2).astype(np.float32)
    y = rng.standard_normal(256).astype(np.float32)
    if op in ("Ln", "Sqrt", "Rsqrt", "Power", "Power_notmp"):
        x = np.abs(x) + np.float32(0.1)
    if op == "Div":
        y = (np.sign(y) * (np.abs(y) + 0.5)).astype(np.float32)
    if op.startswith("cast_"):
        x = (np.round(rng.standard_normal(256) * 200) / 2).astype(np.float32)  # many .5 ties
        x[:4] = [2.5, -2.5, 3.5, -0.5]
        if op == "cast_i16_sat":
            x[4:8] = [40000.0, -40000.0, 32767.4, -32768.6]
    return x, y


def _bits(z: np.ndarray, n: int) -> np.ndarray:
    return z.view(np.uint8)[:n]


def _round_half_away(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _erf(v: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(t)) for t in v])


def _masked(values: np.ndarray, lanes_on) -> np.ndarray:
    out = np.zeros(1024, dtype=np.float64)
    for idx in lanes_on:
        out[idx] = values[idx]
    return out


# op -> reference(x, y) returning (expected array for z[:len], kind); kind "f" float compare,
# "exact" equality on float32, "i32"/"i16"/"u8" reinterpretation of z's bytes.
OPS_REF = {
    "Add": lambda x, y: (x + y, "f"),
    "Sub": lambda x, y: (x - y, "f"),
    "Mul": lambda x, y: (x * y, "f"),
    "Div": lambda x, y: (x / y, "f"),
    "Max": lambda x, y: (np.maximum(x, y), "exact"),
    "Min": lambda x, y: (np.minimum(x, y), "exact"),
    "AddRelu": lambda x, y: (np.maximum(x + y, 0), "f"),
    "Adds": lambda x, y: (x + np.float32(2.5), "f"),
    "Muls": lambda x, y: (x * np.float32(-1.5), "f"),
    "Maxs": lambda x, y: (np.maximum(x, np.float32(0.1)), "exact"),
    "Mins": lambda x, y: (np.minimum(x, np.float32(0.1)), "exact"),
    "LeakyRelu": lambda x, y: (np.where(x >= 0, x, x * np.float32(0.2)), "f"),
    "Exp": lambda x, y: (np.exp(x.astype(np.float64)), "f"),
    "Ln": lambda x, y: (np.log(x.astype(np.float64)), "f"),
    "Abs": lambda x, y: (np.abs(x), "exact"),
    "Reciprocal": lambda x, y: (1.0 / x.astype(np.float64), "f"),
    "Sqrt": lambda x, y: (np.sqrt(x.astype(np.float64)), "f"),
    "Rsqrt": lambda x, y: (1.0 / np.sqrt(x.astype(np.float64)), "f"),
    "Relu": lambda x, y: (np.maximum(x, 0), "exact"),
    "Sigmoid": lambda x, y: (1 / (1 + np.exp(-x.astype(np.float64))), "f"),
    "Sigmoid_notmp": lambda x, y: (1 / (1 + np.exp(-x.astype(np.float64))), "f"),
    "Tanh": lambda x, y: (np.tanh(x.astype(np.float64)), "f"),
    "Erf": lambda x, y: (_erf(x), "f"),
    "Power": lambda x, y: (x.astype(np.float64) ** 2.5, "f"),
    "Power_notmp": lambda x, y: (x.astype(np.float64) ** 2.5, "f"),
    "Sin": lambda x, y: (np.sin(x.astype(np.float64)), "f"),
    "Cos": lambda x, y: (np.cos(x.astype(np.float64)), "f"),
    "Floor": lambda x, y: (np.floor(x), "exact"),
    "Ceil": lambda x, y: (np.ceil(x), "exact"),
    "Gelu": lambda x, y: (
        x / (1 + np.exp(-1.5957691 * (x + 0.044715 * x.astype(np.float64) ** 3))),
        "f",
    ),
    "Silu": lambda x, y: (x / (1 + np.exp(-x.astype(np.float64))), "f"),
    "Duplicate": lambda x, y: (np.where(np.arange(1024) < 100, 3.25, 0.0), "exact"),
    "CreateVecIndex": lambda x, y: (
        np.where(np.arange(1024) < 100, 5.0 + np.arange(1024), 0.0),
        "exact",
    ),
    "cast_f16": lambda x, y: (x.astype(np.float16).astype(np.float32), "exact"),
    "half_add": lambda x, y: (
        (x.astype(np.float16) + y.astype(np.float16)).astype(np.float32),
        "exact",
    ),
    "half_mul": lambda x, y: (
        (x.astype(np.float16) * y.astype(np.float16)).astype(np.float32),
        "exact",
    ),
    "half_muls": lambda x, y: (
        (x.astype(np.float16) * np.float16(0.1)).astype(np.float32),
        "exact",
    ),
    "half_exp": lambda x, y: (np.exp(x.astype(np.float16)).astype(np.float32), "f16"),
    "cast_i32_rint": lambda x, y: (np.rint(x), "i32"),
    "cast_i32_floor": lambda x, y: (np.floor(x), "i32"),
    "cast_i32_ceil": lambda x, y: (np.ceil(x), "i32"),
    "cast_i32_round": lambda x, y: (_round_half_away(x), "i32"),
    "cast_i32_trunc": lambda x, y: (np.trunc(x), "i32"),
    "cast_i16_sat": lambda x, y: (np.clip(np.rint(x), -32768, 32767), "i16"),
    "cast_f32_round": lambda x, y: (_round_half_away(x), "exact"),
    "cast_i32_f32": lambda x, y: (np.trunc(x), "exact"),
    "compare_lt": lambda x, y: (np.packbits(x < y, bitorder="little"), "u8"),
    "compares_ge": lambda x, y: (np.packbits(x >= np.float32(0.25), bitorder="little"), "u8"),
    "select": lambda x, y: (np.where(x < y, x, y), "exact"),
    "select_scalar": lambda x, y: (np.where(x < y, x, np.float32(0.5)), "exact"),
    "ReduceSum": lambda x, y: (np.array([x.astype(np.float64).sum()]), "sum"),
    "ReduceSum_tail": lambda x, y: (np.array([x[:200].astype(np.float64).sum()]), "sum"),
    "ReduceMax": lambda x, y: (np.array([x.max(), np.argmax(x)]), "value_index"),
    "ReduceMin": lambda x, y: (np.array([x.min(), np.argmin(x)]), "value_index"),
    "WholeReduceSum": lambda x, y: (x.reshape(4, 64).astype(np.float64).sum(1), "sum"),
    "WholeReduceSum_mask20": lambda x, y: (
        x.reshape(4, 64)[:, :20].astype(np.float64).sum(1),
        "sum",
    ),
    "WholeReduceMax": lambda x, y: (
        np.stack([x.reshape(4, 64).max(1), x.reshape(4, 64).argmax(1)], 1).ravel(),
        "value_index",
    ),
    "WholeReduceMin_value": lambda x, y: (x.reshape(4, 64).min(1), "exact"),
    "Brcb": lambda x, y: (np.repeat(x[:16], 8), "exact"),
    "add_mask": lambda x, y: (
        _masked(x.astype(np.float64) + y, [r * 64 + e for r in range(4) for e in range(32)]),
        "f",
    ),
    "add_bitmask": lambda x, y: (_masked(x.astype(np.float64) + y, range(0, 256, 2)), "f"),
    "mul_mask_strided": lambda x, y: (
        np.array([x[i] * y[(i // 64) * 8 + i % 8] for i in range(128)], dtype=np.float64),
        "f",
    ),
    "adds_mask": lambda x, y: (
        _masked(x.astype(np.float64) + 1, [r * 64 + e for r in range(2) for e in range(16)]),
        "f",
    ),
    "dup_mask": lambda x, y: (
        _masked(np.full(1024, 2.0), [r * 128 + e for r in range(3) for e in range(8)]),
        "exact",
    ),
}


@pytest.mark.parametrize("op", sorted(OPS_REF))
def test_single_op_matches_numpy(bins, tmp_path, op):
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    x, y = _ops_inputs(op, rng)
    x.tofile(tmp_path / "x.bin")
    y.tofile(tmp_path / "y.bin")
    out = run(bins["ops"], op, tmp_path)
    z = np.fromfile(tmp_path / "z.bin", dtype=np.float32)
    ref, kind = OPS_REF[op](x, y)
    n = len(ref)
    if kind == "f":
        np.testing.assert_allclose(z[:n], ref, rtol=1e-5, atol=1e-6)
    elif kind == "f16":
        np.testing.assert_allclose(z[:n], ref, **TOLERANCES["emulator/float16"])
    elif kind == "exact":
        np.testing.assert_array_equal(z[:n], ref.astype(np.float32))
    elif kind == "i32":
        np.testing.assert_array_equal(z.view(np.int32)[:n], ref.astype(np.int32))
    elif kind == "i16":
        np.testing.assert_array_equal(z.view(np.int16)[:n], ref.astype(np.int16))
    elif kind == "u8":
        np.testing.assert_array_equal(_bits(z, n), ref)
    elif kind == "sum":
        scale = np.abs(x).sum()
        np.testing.assert_allclose(z[:n], ref, rtol=1e-5, atol=1e-6 * scale)
    elif kind == "value_index":
        np.testing.assert_array_equal(z[0:n:2], ref[0::2].astype(np.float32))
        np.testing.assert_array_equal(z.view(np.uint32)[1:n:2], ref[1::2].astype(np.uint32))
    else:  # pragma: no cover
        raise AssertionError(kind)
    if n < 1024 and kind in ("f", "exact") and op not in ("add_mask", "add_bitmask", "adds_mask"):
        assert not np.any(z[n:]), "op wrote past its output"
    assert json.loads(out.split("STATS ", 1)[1])["warnings"] == []


def test_api_surface_instantiates_and_runs(bins):
    st = stats_of(run(bins["ops"], "--smoke", "."))
    expected = {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "Adds",
        "Muls",
        "Maxs",
        "Mins",
        "LeakyRelu",
        "Exp",
        "Ln",
        "Abs",
        "Reciprocal",
        "Sqrt",
        "Rsqrt",
        "Relu",
        "Duplicate",
        "Cast",
        "Compare",
        "Compares",
        "Select",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "WholeReduceSum",
        "WholeReduceMax",
        "WholeReduceMin",
        "Brcb",
        "Sigmoid",
        "Tanh",
        "Erf",
        "Power",
        "Sin",
        "Cos",
        "Floor",
        "Ceil",
        "Gelu",
        "FasterGelu",
        "Silu",
        "CreateVecIndex",
        "And",
        "Not",
    }
    assert expected <= set(st["vector_by_op"]), expected - set(st["vector_by_op"])
    assert st["warnings"] == []


# ----------------------------------------------------------------------------- device rules

# case -> (block_dim, env, substrings the DeviceRuleError message must contain)
RULES = {
    "ub_capacity": (
        1,
        {},
        [
            "kernel rules_kernel",
            "block 0/1",
            "InitBuffer: UB would hold 204800 B > 196608 B of Ascend910B1 UB",
        ],
    ),
    "buffer_count": (1, {}, ["InitBuffer: 65 buffers in total > 64 allowed per kernel"]),
    "max_live": (
        1,
        {},
        [
            "AllocTensor: 9 buffers allocated at once in position VECIN > 8 allowed on Ascend910B1",
            "max buffer number in same queue position is 8",
        ],
    ),
    "max_live_910a": (
        1,
        {},
        ["AllocTensor: 5 buffers allocated at once in position VECIN > 4 allowed on Ascend910A"],
    ),
    "datacopy_unaligned": (
        1,
        {"ASCENDC_EMU_STRICT": "1"},
        [
            "DataCopy(GM->local): 40 B (10 x float) is not a multiple of 32 B",
            "the device moves only 32 B",
            "[strict mode]",
        ],
    ),
    "misaligned": (1, {}, ["Duplicate: dst starts at byte 4 of UB, not 32-byte aligned"]),
    "oob_vector": (
        1,
        {},
        ["Add: src0 accesses bytes [0, 512) of a 256 B VECCALC buffer", "out of bounds"],
    ),
    "oob_getvalue": (
        1,
        {},
        ["LocalTensor::GetValue: tensor accesses bytes [256, 260) of a 256 B VECCALC buffer"],
    ),
    "oob_datacopy": (
        1,
        {},
        ["DataCopy(GM->local): dst accesses bytes [0, 128) of a 64 B VECIN buffer"],
    ),
    "oob_datacopypad": (
        1,
        {},
        ["DataCopyPad(GM->local): dst accesses bytes [0, 128) of a 64 B VECIN buffer"],
    ),
    "gm_setglobal": (
        1,
        {},
        [
            "DataCopy(GM->local): src access to elements [0, 32)",
            "is outside the SetGlobalBuffer range of 16 elements",
        ],
    ),
    "gm_alloc": (
        1,
        {},
        ["src access to bytes [992, 1056) is outside the GmAlloc'd allocation of 1024 B"],
    ),
    "deque_empty": (1, {}, ["DeQue: DeQue on an empty VECIN queue"]),
    "enque_depth": (1, {}, ["EnQue: queue of depth 1 already holds 1 tensor(s); EnQue past depth"]),
    "vecin_no_sync": (
        1,
        {},
        [
            "Adds: src reads a VECIN tensor filled by DataCopy (MTE2)",
            "that was not EnQue'd/DeQue'd",
        ],
    ),
    "vecout_no_sync": (
        1,
        {},
        [
            "DataCopy(local->GM): src copies out a VECOUT tensor",
            "written by a vector op before EnQue/DeQue",
        ],
    ),
    "use_after_free": (1, {}, ["Adds: src uses a VECIN tensor after FreeTensor"]),
    "double_free": (1, {}, ["FreeTensor: double free of a VECIN tensor"]),
    "free_other_queue": (1, {}, ["FreeTensor: tensor belongs to another TQue"]),
    "gm_overlap": (
        2,
        {},
        [
            "kernel rules_kernel, launch end: blocks 0/2 and 1/2",
            "both write bytes [0, 32) of a 1024 B GmAlloc buffer",
        ],
    ),
    "flag_unset": (1, {}, ["WaitFlag<HardEvent::MTE2_V>(0): event ID 0 was never set"]),
    "flag_range": (1, {}, ["SetFlag<HardEvent::V_S>(8): event ID 8 is outside 0..7"]),
    "flag_twice": (1, {}, ["SetFlag<HardEvent::V_MTE3>(1): event ID 1 set twice"]),
    "barrier_s": (1, {}, ["PipeBarrier<PIPE_S> is illegal"]),
    "vector_on_l1": (1, {}, ["Muls: src is a A1 tensor in L1; vector instructions take UB"]),
    "compare_256": (1, {}, ["Compare: count * sizeof(T) = 40 B is not a multiple of 256 B"]),
    "getwithoffset": (1, {}, ["TBuf::GetWithOffset: byte offset 16 is not 32-byte aligned"]),
    "burst_params": (
        1,
        {},
        ["DataCopy(GM->local, DataCopyParams): blockCount 0 is outside [1, 4095]"],
    ),
    "tmp_overlap": (1, {}, ["Sigmoid: sharedTmpBuffer overlaps src or dst"]),
    "thread_error": (8, {"ASCENDC_EMU_THREADS": "1"}, ["kernel rules_kernel, block 3/8: DeQue"]),
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_device_rule_error(bins, case):
    block_dim, env, expected = RULES[case]
    msg = error_of(run(bins["device_rules"], case, block_dim, env=env, rc=3))
    assert msg.startswith("ascendc_emu: kernel rules_kernel")
    for text in expected:
        assert text in msg, f"{text!r} not in {msg!r}"


def test_unaligned_datacopy_truncates_and_warns(bins):
    out = run(bins["device_rules"], "datacopy_unaligned")
    z = floats_of(out, "Z")
    np.testing.assert_array_equal(z[:8], np.arange(8, dtype=np.float32))  # 32 B moved
    assert np.all(np.isnan(z[8:16]))  # never copied in: the poisoned UB went out
    st = stats_of(out)
    assert st["gm_read_bytes"] == 32 and st["gm_write_bytes"] == 64
    assert any("not a multiple of 32 B" in w for w in st["warnings"])
    assert st["blocks"][0]["warnings"] == st["warnings"]


def test_fresh_ub_is_poisoned(bins):
    out = run(bins["device_rules"], "poison")
    assert "POISON ffffffff ffff 1" in out


def test_flags_clear_pending_sync(bins):
    out = run(bins["device_rules"], "flag_ok")
    z = floats_of(out, "Z")
    np.testing.assert_array_equal(z, np.arange(16, dtype=np.float32) + 1)


def test_datacopypad_semantics(bins):
    out = run(bins["device_rules"], "dcpad_semantics")
    ub = floats_of(out, "UB")
    nan = np.nan
    expected = [
        7,
        0,
        1,
        2,
        3,
        4,
        7,
        7,  # left/right pad and dummy = paddingValue
        7,
        6,
        7,
        8,
        9,
        10,
        7,
        7,  # second burst starts 20 + 4 bytes further in GM
        100,
        101,
        102,
        103,
        104,
        100,
        100,
        100,  # no padding: dummy repeats element 0
        nan,
        200,
        201,
        202,
        203,
        204,
        nan,
        nan,
    ]  # padding without isPad: poison
    np.testing.assert_array_equal(ub, np.array(expected, dtype=np.float32))
    z = floats_of(out, "Z")
    np.testing.assert_array_equal(
        z[:8], [7, 0, 1, 0, 0, 7, 6, 7]
    )  # UB->GM: 12 B bursts, 8 B GM gap
    st = stats_of(out)
    assert st["gm_read_bytes"] == 2 * 20 + 20 + 20 and st["gm_write_bytes"] == 24


@pytest.mark.parametrize(
    "case,text",
    [
        ("ub_reserve", "UB plan of 190016 B exceeds 188160 B usable on Ascend910B1"),
        ("leak", "VECIN buffer #0 of its TQue still ALLOCATED when its TPipe was destroyed"),
    ],
)
def test_warnings_recorded(bins, case, text):
    st = stats_of(run(bins["device_rules"], case))
    assert any(text in w for w in st["warnings"]), st["warnings"]


def test_unknown_soc_lists_known_names(bins):
    out = run(bins["device_rules"], "unknown_soc", rc=4)
    assert "unknown SoC 'Ascend999'; known: Ascend910B1, " in out and "Ascend310P3" in out


def _soc_probe(*defines: str) -> subprocess.CompletedProcess:
    cmd = [
        CXX,
        "-std=c++17",
        "-fsyntax-only",
        f"-I{EMU_DIR}",
        *defines,
        str(SRC_DIR / "soc_probe.cpp"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def test_soc_selection(bins):
    # compile time: -DASCENDC_EMU_SOC picks the soc_profiles.def row; unknown names do not build
    ok = _soc_probe(
        "-DASCENDC_EMU_SOC=Ascend910A", "-DEXPECT_UB_BYTES=262144", "-DEXPECT_MAX_LIVE=4"
    )
    assert ok.returncode == 0, ok.stderr
    default = _soc_probe("-DEXPECT_UB_BYTES=196608", "-DEXPECT_MAX_LIVE=8")  # Ascend910B1
    assert default.returncode == 0, default.stderr
    bad = _soc_probe("-DASCENDC_EMU_SOC=Ascend999")
    assert bad.returncode != 0 and "ASCENDC_EMU_SOC names no row of soc_profiles.def" in bad.stderr
    # run time: env ASCENDC_EMU_SOC (SetSoc is covered by max_live_910a); 204800 B fits 310P3's UB
    st = stats_of(run(bins["device_rules"], "ub_capacity", env={"ASCENDC_EMU_SOC": "Ascend310P3"}))
    assert st["soc"] == "Ascend310P3" and st["peak_ub_bytes"] == 204800


# ----------------------------------------------------------------------------- counters


def test_counters_exact_traffic(bins):
    st = stats_of(run(bins["device_rules"], "count_copy", 4096, 1024, 4))
    assert st["kernel"] == "copy_kernel" and st["block_dim"] == 4 and st["soc"] == "Ascend910B1"
    assert st["gm_read_bytes"] == 4 * 4096 and st["gm_write_bytes"] == 4 * 1024
    assert st["datacopy_calls"] == 8 and st["cube_macs"] == 0
    assert st["vector_by_op"] == {"Duplicate": {"instrs": 4 * 4, "elems": 4 * 256}}
    assert st["vector_instrs"] == 16 and st["vector_elems"] == 1024
    assert st["peak_ub_bytes"] == 4096 + 1024
    assert len(st["blocks"]) == 4
    for blk in st["blocks"]:
        assert (
            blk["gm_read_bytes"] == 4096
            and blk["gm_write_bytes"] == 1024
            and blk["datacopy_calls"] == 2
        )


def test_counters_count_bytes_actually_moved(bins):
    st = stats_of(run(bins["device_rules"], "count_copy", 100, 64, 1))
    assert st["gm_read_bytes"] == 96 and st["gm_write_bytes"] == 64  # 100 B truncated to 96 B


def test_counters_scalar_and_pad(bins):
    st = stats_of(run(bins["device_rules"], "count_scalar"))
    assert st["gm_read_bytes"] == 2 * 3 * 4 and st["gm_write_bytes"] == 2 * 2 * 4
    st = stats_of(run(bins["device_rules"], "count_pad"))
    assert (
        st["gm_read_bytes"] == 3 * 40
        and st["gm_write_bytes"] == 3 * 40
        and st["datacopy_calls"] == 2
    )


def test_stats_file_gets_one_json_line_per_launch(bins, tmp_path):
    path = tmp_path / "stats.jsonl"
    for case in ("count_scalar", "count_pad"):
        run(bins["device_rules"], case, env={"ASCENDC_EMU_STATS_FILE": str(path)})
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [ln["kernel"] for ln in lines] == ["scalar_kernel", "pad_kernel"]


def test_single_and_double_buffer_same_traffic(bins, tmp_path):
    rng = np.random.default_rng(5)
    n = 50_000
    rng.standard_normal(n).astype(np.float32).tofile(tmp_path / "x.bin")
    rng.standard_normal(n).astype(np.float32).tofile(tmp_path / "y.bin")
    single = stats_of(run(bins["vec_add"], "f32", 1, n, 4, 1024, tmp_path))
    double = stats_of(run(bins["vec_add"], "f32", 2, n, 4, 1024, tmp_path))
    for key in (
        "gm_read_bytes",
        "gm_write_bytes",
        "datacopy_calls",
        "vector_by_op",
        "vector_instrs",
    ):
        assert single[key] == double[key], key
    assert double["peak_ub_bytes"] == 2 * single["peak_ub_bytes"]


# ----------------------------------------------------------------------------- speed


def test_speed_1m_float_add(bins, tmp_path):
    n = 1 << 20
    rng = np.random.default_rng(6)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    y.tofile(tmp_path / "y.bin")
    out = run(bins["vec_add"], "f32", 2, n, 8, 8192, tmp_path)
    ms = float(next(ln for ln in out.splitlines() if ln.startswith("ELAPSED_MS")).split()[1])
    assert ms < 1000.0, f"1M-element add took {ms} ms"
    np.testing.assert_array_equal(np.fromfile(tmp_path / "z.bin", dtype=np.float32), x + y)
