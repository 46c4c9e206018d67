"""Calibration: the timing model beside figures measured on real Ascend chips by others.

Each row builds the work a published measurement timed (a GEMM of that size, a copy, an
elementwise lerp, a fused-add RMSNorm, attention at that shape, a whole model through the
ATC-style rules) with the project's own templates, estimates it on the same SoC (the sum of
its kernels where the project builds the work as several) and puts the estimate beside the
figure::

    ratio = estimated time / measured time     (1.0 exact; above 1 the model is pessimistic)

A row outside 0.8-1.25x is either a wrong constant of the model (fixed in soc_profiles.def,
with its source) or a kernel of another algorithm class than the measured one, which the row
says (``algorithm``). Whole models come with the project's other builds of them
(``other_builds_us``: fusion off and aggressive) for the "plain ATC" table of BENCHMARKS.md. The rows of one kernel class give that class's uncertainty band
(:func:`bands`), which the package ships (``tvm_ascend/cost_model/calibration_bands.json``)
and prints next to every estimate.

    python -m benchmarks.calibration                  # every row, ~4 minutes on an idle core
    python -m benchmarks.calibration --only gemm      # rows whose name contains "gemm"

Example
-------
>>> rows = run_rows(only="copy")                                   # doctest: +SKIP
>>> rows[0]["name"], 0.8 <= rows[0]["ratio"] <= 1.25               # doctest: +SKIP
('copy_1gib_a3', True)
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import helper

from .models import bert, resnet50, vit
from .results_file import git_commit
from .models.common import OnnxGraph

HERE = Path(__file__).resolve().parent
CALIBRATION_JSON = HERE / "calibration.json"
BANDS_JSON = HERE.parent / "tvm_ascend" / "cost_model" / "calibration_bands.json"
# The acceptance range of issue #18 (after PyPTO's 5.2x and Autofuse's 5x, do better).
GOOD = (0.8, 1.25)
# A band from fewer rows than this is widened to GOOD: one row says where the model is for
# that one workload, not how far it can be off for the next.
MIN_ROWS_FOR_BAND = 2
UNITS_PER_SECOND = {"TFLOPS": 1e12, "TB/s": 1e12, "GB/s": 1e9, "items/s": 1.0}


@dataclass(frozen=True)
class Estimate:
    """The project's side of a row: estimated time (us), the part of it that is kernel
    start-up (``launch_us``; a figure timed inside the kernel has none), what was built."""

    time_us: float
    built: str
    launch_us: float = 0.0
    others: tuple = ()  # (build name, estimated us) of the same work built other ways


@dataclass(frozen=True)
class Row:
    """One published measurement and how to build the same work.

    ``figure`` in ``unit``: ``"us"`` is a time; a rate (``TFLOPS``, ``TB/s``, ``GB/s``,
    ``items/s``) becomes a time through ``work`` (flops, bytes or items of one run).
    ``kernel_class``: the band it calibrates (``cube``, ``attention``, ``vector``, ``model``).
    ``algorithm``: where the project's kernel is of another algorithm class than the measured
    one (the row then calibrates nothing and says why it is off). ``timed_in_kernel``: the
    figure was timed by the kernel itself, so the estimate is compared without its start-up.
    """

    name: str
    kernel_class: str
    soc: str
    workload: str
    figure: float
    unit: str
    source: str
    estimate: Callable[[], Estimate]
    work: float = 1.0
    algorithm: str = ""
    timed_in_kernel: bool = False

    def measured_us(self) -> float:
        """The time the published figure stands for, in microseconds."""
        if self.unit == "us":
            return self.figure
        return self.work / (self.figure * UNITS_PER_SECOND[self.unit]) * 1e6

    def in_unit(self, time_us: float) -> float:
        """``time_us`` expressed in the published figure's unit."""
        if self.unit == "us":
            return time_us
        return self.work / (time_us * 1e-6) / UNITS_PER_SECOND[self.unit]


# ---- building the work -------------------------------------------------------------------

def _config(soc: str, **fields):
    from tvm_ascend import CompileConfig

    return CompileConfig(soc_version=soc, build_cache=False, **fields)


def _partition(model: onnx.ModelProto, soc: str, **fields):
    from tvm_ascend.pipeline import partition_for_ascend

    return partition_for_ascend(model, _config(soc, **fields))


def _single_kernel_us(model: onnx.ModelProto, soc: str, knobs: dict | None = None,
                      ai_cores: int | None = None, **fields) -> Estimate:
    """The estimate of the one NPU kernel ``model`` partitions into (``fields``: more
    CompileConfig fields), planned by its template with the planner's knobs, or with
    ``knobs`` (e.g. ``{"cores": 1}``) where given. ``ai_cores``: the AI cores the measured
    kernel ran on; a 1:2-mix plan (910B's flash attention, whose ``cores`` knob counts AIV
    clients) gets both AIVs of each as clients (``aiv_ratio`` per core)."""
    from tvm_ascend import ir_attrs
    from tvm_ascend.cost_model.timing import estimate_kernel
    from tvm_ascend.kernel_record import record_of
    from tvm_ascend.schedules import knobs_from_json, template_by_name

    result = _partition(model, soc, **fields)
    npu = [g for g in result.groups if g.on_npu]
    if len(npu) != 1 or len(result.groups) != 1:
        raise RuntimeError(f"{model.graph.name}: expected one NPU kernel, got "
                           f"{len(npu)} NPU and {len(result.groups) - len(npu)} host groups")
    func = next(f for _, f in result.mod.functions.items()
                if f.attrs and f.attrs.get("Codegen") == "ascend")
    record = record_of(func)
    template = template_by_name(record.template)
    chosen = dict(record.knobs or {}, **(knobs or {}))
    soc_profile = _config(soc).soc
    prim = func.attrs[ir_attrs.PRIM_FUNC]
    _, tiling = template.schedule(prim, soc_profile, knobs_from_json(template.name, chosen))
    est = estimate_kernel(prim, tiling, soc_profile)
    if ai_cores is not None:
        # on that many AI cores the template's variants (the partitioner keeps the fastest)
        # each with its clients: every AIV of the measured cores for a 1:2 mix
        best = None
        variants = [dataclasses.asdict(v) for v in template.variants(prim, soc_profile)]
        differ = {k for k in variants[0] if len({repr(v[k]) for v in variants}) > 1}
        for variant in variants:
            knobs_v = dict(chosen, **{k: variant[k] for k in differ})
            knobs_v.pop("cores", None)
            _, probe = template.schedule(prim, soc_profile,
                                         knobs_from_json(template.name, knobs_v))
            knobs_v["cores"] = ai_cores * max(1, probe.work.aiv_ratio)
            _, planned = template.schedule(prim, soc_profile,
                                           knobs_from_json(template.name, knobs_v))
            found = estimate_kernel(prim, planned, soc_profile)
            if best is None or found.time_us < best[0].time_us:
                best = (found, planned, knobs_v)
        est, tiling, chosen = best
    ratio = max(1, tiling.work.aiv_ratio)
    where = f"{tiling.cores} cores" if ratio == 1 else \
        f"{-(-tiling.cores // ratio)} AI cores ({tiling.cores} AIV clients)"
    return Estimate(est.time_us, f"{template.name} kernel on {where}, knobs "
                    f"{ {k: v for k, v in chosen.items() if v is not None} }", est.launch_us)


# Builds of a whole model put beside the vendor's ATC figure: the project's emulation of
# ATC's rules (the row's estimate), fusion off and the aggressive level.
MODEL_BUILDS = (("atc_style", {"rule_set": "atc_style"}), ("op_by_op", {"fusion_level": "off"}),
                ("aggressive", {"fusion_level": "aggressive"}))


def _model_us(model: onnx.ModelProto, soc: str) -> Estimate:
    """The whole-model estimate of ``model`` partitioned by ATC's rules, with where its time
    goes (the four kinds of kernel estimated longest), and the estimates of the other
    ``MODEL_BUILDS``."""
    times, built = [], ""
    for name, fields in MODEL_BUILDS:
        result = _partition(model, soc, **fields)
        times.append((name, round(sum(g.estimate.get("time_us", 0.0) for g in result.groups),
                                  3)))
        if built:
            continue
        npu = sum(1 for g in result.groups if g.on_npu)
        host = sum(1 for g in result.groups if not g.on_npu and not g.free)
        kinds: dict[str, list] = {}
        for group in result.groups:
            ops = "+".join(sorted({m.op.rsplit(".", 1)[-1] for m in group.members}))
            entry = kinds.setdefault(f"{group.rule} ({ops})", [0, 0.0])
            entry[0] += 1
            entry[1] += group.estimate.get("time_us", 0.0)
        top = sorted(kinds.items(), key=lambda kv: -kv[1][1])[:4]
        shares = "; ".join(f"{count} x {kind}: {us / 1e3:.2f} ms"
                           for kind, (count, us) in top)
        built = (f"{name} partition: {npu} NPU and {host} host launches; longest: {shares}")
    return Estimate(times[0][1], built, others=tuple(times[1:]))


def matmul_model(m: int, k: int, n: int, dtype: str = "float16", out_dtype: str = ""
                 ) -> onnx.ModelProto:
    """``y = a @ b`` with both operands graph inputs (no weight constant to fold or store),
    cast to ``out_dtype`` when given (a cube accumulates in fp32 and may write that)."""
    g = OnnxGraph(f"gemm_{m}x{k}x{n}", dtype)
    y = g.op("MatMul", [g.input("a", [m, k]), g.input("b", [k, n])], "mm")
    if out_dtype and out_dtype != dtype:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype))
        g.output(g.op("Cast", [y], "cast", to=elem), [m, n], elem_type=elem)
    else:
        g.output(y, [m, n])
    return g.model()


def copy_model(elements: int, dtype: str = "float16") -> onnx.ModelProto:
    """A memory-bound elementwise kernel: Relu (one vector op per element: a copy's traffic)."""
    g = OnnxGraph(f"copy_{elements}", dtype)
    g.output(g.op("Relu", [g.input("x", [elements])], "relu"), [elements])
    return g.model()


def lerp_model(rows: int, cols: int, dtype: str = "float16") -> onnx.ModelProto:
    """``torch.lerp(a, b, w)`` with a tensor weight, ``a + w * (b - a)``: three inputs and one
    output of the same shape (4 tensors of GM traffic, 3 vector ops per element)."""
    g = OnnxGraph(f"lerp_{rows}x{cols}", dtype)
    a, b, w = (g.input(name, [rows, cols]) for name in "abw")
    diff = g.op("Sub", [b, a], "sub")
    g.output(g.op("Add", [a, g.op("Mul", [w, diff], "mul")], "add"), [rows, cols])
    return g.model()


def add_rms_norm_model(rows: int, cols: int, dtype: str = "float16",
                       eps: float = 1e-6) -> onnx.ModelProto:
    """Fused-add RMSNorm as vLLM's ``fused_add_rms_norm``: ``x = x1 + x2`` and
    ``y = x / sqrt(mean(x^2) + eps) * gamma``, both ``y`` and ``x`` graph outputs."""
    g = OnnxGraph(f"add_rms_norm_{rows}x{cols}", dtype)
    x = g.op("Add", [g.input("x1", [rows, cols]), g.input("x2", [rows, cols])], "add")
    mean = g.reduce_mean(g.op("Mul", [x, x], "square"), [-1], "mean")
    rms = g.op("Sqrt", [g.op("Add", [mean, g.const(eps, "eps")], "add_eps")], "sqrt")
    y = g.op("Mul", [g.op("Div", [x, rms], "div"), g.input("gamma", [cols])], "scale")
    g.output(y, [rows, cols])
    g.output(x, [rows, cols], name="x_out")
    return g.model()


def _kernels_us(model: onnx.ModelProto, soc: str) -> Estimate:
    """The device timeline of the NPU kernels ``model`` partitions into (each kernel's
    estimate with its start-up, summed): work the project builds as several launches."""
    result = _partition(model, soc)
    host = [g for g in result.groups if not g.on_npu and not g.free]
    if host:
        raise RuntimeError(f"{model.graph.name}: {len(host)} group(s) run on the host")
    parts = [(f"{g.rule} ({'+'.join(m.op.rsplit('.', 1)[-1] for m in g.members)})",
              g.estimate.get("time_us", 0.0)) for g in result.groups if g.on_npu]
    built = f"{len(parts)} kernels: " + "; ".join(f"{name} {us:.1f} us" for name, us in parts)
    return Estimate(sum(us for _, us in parts), built)


def attention_model(batch: int, heads: int, seq_q: int, seq_kv: int, dim: int,
                    dtype: str = "float16") -> onnx.ModelProto:
    """softmax(Q K^T / sqrt(d)) V, Q [batch, heads, seq_q, dim], K and V [.., seq_kv, dim],
    no mask."""
    g = OnnxGraph(f"attention_b{batch}h{heads}q{seq_q}kv{seq_kv}d{dim}", dtype)
    q = g.input("q", [batch, heads, seq_q, dim])
    k, v = (g.input(name, [batch, heads, seq_kv, dim]) for name in "kv")
    k_t = g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])
    scores = g.op("Div", [g.op("MatMul", [q, k_t], "qk"), g.const(math.sqrt(dim), "sqrt_d")],
                  "scale")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    g.output(g.op("MatMul", [probs, v], "pv"), [batch, heads, seq_q, dim])
    return g.model()


PTO_GEMM = "cannmirror/pto-isa kernels/manual/a2a3/gemm_performance/README.md"
PTO_FA = "cannmirror/pto-isa kernels/manual/common/flash_atten/README.md"
MODELZOO = "Ascend/ModelZoo-PyTorch ACL_PyTorch/"
# The A2/A3 die the vendor figures were measured on (24 AIC, 48 AIV; the pto-isa GEMMs' cube
# busy ratios put its clock at 1.8 GHz) is the Ascend910B2 profile.
DIE = "Ascend910B2"


def _gemm_row(n: int, figure_us: float, cube_busy: str) -> Row:
    return Row(f"gemm_{n}_a3", "cube", DIE,
               f"GEMM {n}^3, fp16 in, fp32 out, hand-tuned (128x256x64 base tiles; cube busy "
               f"{cube_busy}), 24-core A3; the project's matmul writes C in fp16 (its "
               f"template keeps one GM dtype): 1-3% fewer bytes", figure_us, "us", PTO_GEMM,
               lambda: _single_kernel_us(matmul_model(n, n, n), DIE))


def _flash_row(cores: int, seq_kv: int, figure_us: float, note: str = "") -> Row:
    seq_q = 128 * cores
    return Row(f"flash_attention_q{seq_q}_kv{seq_kv}_{cores}core", "attention", DIE,
               f"FlashAttention forward, 1 head, D=128, S0={seq_q} S1={seq_kv}, not causal, "
               f"fp16 in, {cores} core(s), timed inside the kernel", figure_us, "us", PTO_FA,
               lambda: _single_kernel_us(attention_model(1, 1, seq_q, seq_kv, 128), DIE,
                                         ai_cores=cores, fusion_level="aggressive"),
               algorithm="the project's 910B attention passes every score and probability "
                         "tile (both fp16) through the GM workspace (AIC -> GM -> AIV and "
                         "back; its flash variant overlaps the AIC's score rounds with the "
                         "vector softmax but keeps that round trip); the measured kernel is "
                         "FlashAttention with the tiles on chip (issue #19 item 2)"
                         + note, timed_in_kernel=True)


TILEOPS = ("tile-ai/tilelang-mlir-ascend examples/TileOPs/tileops/kernels/elementwise/"
           "lerp_tensor/lerp_tensor_kernel/perf_opt/opt_log.md (round 0)")
FUSED_ADD_RMS_NORM = ("tile-ai/tilelang-mlir-ascend PR #140, examples/norm/fused_add_rms_norm/"
                      "README.md")


def _lerp_row(side: int, figure_us: float) -> Row:
    mega = side * side >> 20
    return Row(f"lerp_{mega}m_fp16_910b2c", "vector", DIE,
               f"torch.lerp(a, b, w) with a tensor weight, {side}x{side} fp16 (3 reads + 1 "
               f"write: {4 * side * side * 2 / 1e9:.2f} GB), a TileLang kernel on Ascend910B2C "
               "(24 AIC / 48 AIV, 1.8 GHz), msprof op Task Duration, median of 15 launches "
               "over 4 input sets; as fast as its copy-only probe", figure_us, "us", TILEOPS,
               lambda: _single_kernel_us(lerp_model(side, side), DIE))


def _add_rms_norm_row(rows: int, cols: int, dtype: str, figure_us: float) -> Row:
    short = {"float16": "fp16", "float32": "fp32"}[dtype]
    return Row(f"add_rms_norm_{rows}x{cols}_{short}_910b", "vector", DIE,
               f"fused-add RMSNorm (y and x = x1 + x2 out), {rows}x{cols} {short}, a TileLang "
               "kernel on an Ascend 910B (variant not named; its code defaults to 48 AIV), "
               "msprof op Task Duration; 4 row tensors of HBM traffic and x read back once "
               "(L2)", figure_us, "us", FUSED_ADD_RMS_NORM,
               lambda: _kernels_us(add_rms_norm_model(rows, cols, dtype), DIE),
               algorithm="the project builds this as two kernels (a multi-output kernel is "
                         "not printed, so the Add whose result is a graph output runs alone): "
                         "x goes out to HBM and is read back by the row kernel, 5 row tensors "
                         "of HBM traffic against the measured kernel's 4 (both re-read x and "
                         "gamma from L2), and one launch more")


def default_rows() -> list[Row]:
    """Every row of the calibration suite: the figures as their sources publish them
    (re-read for issue #18; the notes in calibration.json's ``workload`` say what was timed)."""
    gemm = [_gemm_row(1536, 38.8, "54.5%"), _gemm_row(3072, 206.7, "79.0%"),
            _gemm_row(6144, 1506.0, "86.7%"), _gemm_row(7680, 3168.0, "80.6%")]
    aclnn = Row("gemm_8192_aclnn_a3", "cube", DIE,
                "GEMM 8192^3 fp16 in and out through torch_npu (aclnn), core_num 24, NPU "
                "events per call after an L2 flush", 3630.0, "us",
                "tile-ai/tilelang-ascend issue #79",
                lambda: _single_kernel_us(matmul_model(8192, 8192, 8192), DIE))
    copy_bytes = 2 * (1 << 30)  # 512 Mi fp16 elements read and written
    copy = Row("copy_1gib_a3", "vector", DIE,
               "a streaming copy (torch copy_) on an A3 die (Ascend910_9382); size not given, "
               "read + write counted", 1.27, "TB/s",
               "a public benchmark note on Atlas 800T A3 (CANN 9.1 beta); hicann/catlass "
               "select_kernel_b16.h gives 30 GB/s per AIV (48 AIVs: 1.44 TB/s)",
               lambda: _single_kernel_us(copy_model(copy_bytes // 4), DIE), work=copy_bytes)
    # Round 0 of the tuning log: its fp16 kernel is the final one, timed over 4 input sets
    # (reports/report.md times one launch: 392.28 and 1729.02 us). The 2^24 sizes (134 and
    # 268 MB) run at 1.7-1.9 TB/s, above the profile's nominal 1.6: L2 serves part of them.
    lerp = [_lerp_row(8192, 388.24), _lerp_row(16384, 1710.07)]
    add_rms_norm = [_add_rms_norm_row(8192, 16384, "float16", 825.913),
                    _add_rms_norm_row(8192, 32768, "float16", 1773.331),
                    _add_rms_norm_row(12288, 32768, "float32", 5597.724)]
    flash = [_flash_row(1, 8192, 74.54), _flash_row(8, 8192, 107.342),
             _flash_row(8, 1024, 63.72,
                        "; at S1=1024 the measured kernel is dominated by fixed costs per "
                        "block (1 core: 42 us for 67 MFLOP) that the timing model does not "
                        "charge, so the estimate is optimistic there")]
    resnet = Row("resnet50_b64_310p3_atc", "model", "Ascend310P3",
                 "ResNet-50 (torchvision), batch 64, 224x224 after AIPP, fp16 (ATC's default "
                 "force_fp16), ONNX -> OM by ATC, ais_bench", 4250.0, "items/s",
                 MODELZOO + "built-in/cv/Resnet50_Pytorch_Infer/README.md",
                 lambda: _model_us(resnet50.resnet50_model(batch=64, image=224,
                                                           dtype="float16"), "Ascend310P3"),
                 work=64,
                 algorithm="the project's convolutions are single-buffered; on 310P its "
                           "3x3s take Load3D only where the estimate says it is faster (they "
                           "re-read their weights for every K step and tile and run the "
                           "epilogue one row per call), the others build img2col with vector "
                           "Gathers through a GM column block, and its 1x1 convolutions are "
                           "MTE2-bound; ATC's run img2col on the cube's own path (Load3D from "
                           "L1) with the pipes overlapped: issue #19 item 3")
    bert_rows = [Row(f"bert_base_s512_b{batch}_310p3_atc", "model", "Ascend310P3",
                     f"BERT-base uncased (SQuAD QA head), seq 512, batch {batch}, fp16, ONNX "
                     f"-> OM by ATC, ais_bench pure inference", fps, "items/s",
                     MODELZOO + "built-in/nlp/Bert_Base_Uncased_for_Pytorch/ReadMe.md",
                     lambda batch=batch: _model_us(bert.bert_model(
                         batch=batch, seq=512, dtype="float16", pooler=False), "Ascend310P3"),
                     work=batch,
                     algorithm="the project's kernels of ATC's rules, not ATC's (closed) "
                               "ones: head Reshape/Transpose pairs as copy kernels, the "
                               "score tensor through GM between MatMul and Softmax, LayerNorm "
                               "and Softmax issuing their vector ops row by row (the kinds "
                               "estimated longest are in `built`)")
                 for batch, fps in ((1, 177.81), (8, 218.12))]
    vit_rows = [Row(f"vit_base_patch{patch}_b32_310p3_atc", "model", "Ascend310P3",
                    f"vit_base_patch{patch}_224, batch 32, fp16, ONNX -> OM by ATC, ais_bench "
                    f"pure inference (the ModelZoo's current table)", fps, "items/s",
                    MODELZOO + "contrib/cv/classfication/ViT_base/README.md",
                    lambda patch=patch: _model_us(vit.vit_model(batch=32, patch=patch,
                                                                dtype="float16"),
                                                  "Ascend310P3"),
                    work=32,
                    algorithm="the project's kernels of ATC's rules, not ATC's (closed) "
                              "ones: on 310P3's 16 MB L2 its MatMuls re-read their "
                              "activations from DDR once per 128-column tile, the patch "
                              "embedding is an img2col convolution on the vector unit and "
                              "attention runs as three kernels (the kinds estimated longest "
                              "are in `built`)")
                for patch, fps in ((16, 599.02), (32, 1593.47))]
    return gemm + [aclnn, copy] + lerp + add_rms_norm + flash + [resnet] + bert_rows + vit_rows


# ---- running and the bands ---------------------------------------------------------------

def run_rows(rows: list[Row] | None = None, only: str = "", log=print) -> list[dict]:
    """Estimate every row (whose name contains ``only``); JSON-ready dicts, one per row."""
    out = []
    for row in rows if rows is not None else default_rows():
        if only and only not in row.name:
            continue
        start = time.perf_counter()
        estimate = row.estimate()
        measured = row.measured_us()
        time_us = estimate.time_us - (estimate.launch_us if row.timed_in_kernel else 0.0)
        ratio = time_us / measured
        entry = {"name": row.name, "kernel_class": row.kernel_class, "soc": row.soc,
                 "workload": row.workload, "unit": row.unit, "published": row.figure,
                 "estimate": round(row.in_unit(time_us), 4),
                 "published_us": round(measured, 3), "estimate_us": round(time_us, 3),
                 "ratio": round(ratio, 4), "within": GOOD[0] <= ratio <= GOOD[1],
                 "built": estimate.built, "algorithm": row.algorithm, "source": row.source,
                 "other_builds_us": dict(estimate.others)}
        out.append(entry)
        log(f"{row.name}: published {row.figure:g} {row.unit}, estimate "
            f"{entry['estimate']:g} {row.unit} (ratio {ratio:.3f}; "
            f"{time.perf_counter() - start:.1f} s)")
    return out


def bands(rows: list[dict]) -> dict:
    """Per kernel class, the range of estimate/measured ratios of its calibrating rows (rows of
    another algorithm class excluded), widened to ``GOOD`` when fewer than
    ``MIN_ROWS_FOR_BAND`` rows calibrate it. The true time of a kernel estimated at ``t`` is
    then taken to lie in ``[t / high, t / low]``.

    >>> bands([{"kernel_class": "cube", "ratio": 0.9, "algorithm": "", "name": "a"},
    ...        {"kernel_class": "cube", "ratio": 1.1, "algorithm": "", "name": "b"}])["cube"]
    {'low': 0.9, 'high': 1.1, 'rows': ['a', 'b']}
    """
    classes: dict[str, list[dict]] = {}
    for row in rows:
        if not row["algorithm"]:
            classes.setdefault(row["kernel_class"], []).append(row)
    out = {}
    for name, members in sorted(classes.items()):
        low = min(r["ratio"] for r in members)
        high = max(r["ratio"] for r in members)
        if len(members) < MIN_ROWS_FOR_BAND:
            low, high = min(low, GOOD[0]), max(high, GOOD[1])
        out[name] = {"low": low, "high": high, "rows": [r["name"] for r in members]}
    return out


def _fmt(value: float) -> str:
    return f"{value:,.4g}" if value < 1e5 else f"{value:,.0f}"


def markdown_lines(payload: dict) -> list[str]:
    """The calibration section of BENCHMARKS.md from ``calibration.json``'s ``payload``."""
    rows, table = payload.get("rows", []), payload.get("bands", {})
    lines = ["## Calibration against published measurements", "",
             f"Generated by `python -m benchmarks.calibration` ({payload.get('date', 'n/a')}, "
             f"`{payload.get('commit', 'n/a')}`) into `benchmarks/calibration.json`. Each row "
             "builds the work someone timed on a real chip with the project's templates and "
             "estimates it on the same SoC (an A2/A3 24-core die is the Ascend910B2 profile). "
             "**ratio** = estimated time / measured time (above 1: the model is pessimistic); "
             f"the aim is {GOOD[0]}-{GOOD[1]}x. A row whose kernel is of another algorithm "
             "class than the measured one says which and calibrates nothing; the others give "
             "their class's band.", "",
             "| row | SoC | measured | estimate | ratio | calibrates | workload; source |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "yes" if not r["algorithm"] else f"no: {r['algorithm']}"
        lines.append(f"| {r['name']} | {r['soc']} | {_fmt(r['published'])} {r['unit']} | "
                     f"{_fmt(r['estimate'])} {r['unit']} (est.) | {r['ratio']:.3f} | "
                     f"{verdict} | {r['workload']}; {r['source']} |")
    lines += ["", "**Uncertainty bands** (shipped as `tvm_ascend/cost_model/"
              "calibration_bands.json`, printed next to every estimate: a kernel estimated "
              "at t lies in [t / high, t / low]; a class calibrated by fewer than "
              f"{MIN_ROWS_FOR_BAND} rows is widened to {GOOD[0]}-{GOOD[1]}; a class without a "
              "calibrating row (attention, host ops) borrows the widest band and is marked "
              "uncalibrated):", "", "| class | low | high | rows |", "|---|---|---|---|"]
    for name, band in table.items():
        lines.append(f"| {name} | {band['low']:.3f} | {band['high']:.3f} | "
                     f"{', '.join(band['rows'])} |")
    models = [r for r in rows if r.get("other_builds_us")]
    if models:
        lines += ["", "**Plain ATC**: whole models compiled by the real ATC and timed by the "
                  "vendor, beside the project's estimates for the same model, SoC and batch "
                  "(ms per batch; items/s in brackets):", "",
                  "| model | plain ATC (measured) | atc_style (est.) | op_by_op (est.) | "
                  "aggressive (est.) |", "|---|---|---|---|---|"]
        for r in models:
            batch = r["published_us"] * r["published"] / 1e6
            cells = [f"{r['published_us'] / 1e3:.2f} ({r['published']:,.1f})",
                     f"{r['estimate_us'] / 1e3:.2f} ({r['estimate']:,.1f})"]
            for name in ("op_by_op", "aggressive"):
                us = r["other_builds_us"].get(name)
                cells.append(f"{us / 1e3:.2f} ({batch / us * 1e6:,.1f})" if us else "n/a")
            lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return lines + [""]


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` atomically (a temporary file renamed into place)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calibration",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only rows whose name contains this")
    parser.add_argument("--output", default=str(CALIBRATION_JSON),
                        help="rows and bands (default benchmarks/calibration.json)")
    parser.add_argument("--bands", default=str(BANDS_JSON),
                        help="the bands the package ships (default "
                             "tvm_ascend/cost_model/calibration_bands.json); a run with "
                             "--only leaves it alone")
    args = parser.parse_args(argv)
    rows = run_rows(only=args.only)
    stamp = {"date": datetime.date.today().isoformat(), "commit": git_commit("--always", "--dirty") or "unknown"}
    table = bands(rows)
    write_json(Path(args.output), {**stamp, "rows": rows, "bands": table})
    if not args.only:  # a partial run calibrates nothing
        write_json(Path(args.bands), {**stamp, "source": "benchmarks/calibration.py",
                                      "bands": table})
    outside = [r["name"] for r in rows if not r["within"] and not r["algorithm"]]
    for name in outside:
        print(f"OUTSIDE {GOOD[0]}-{GOOD[1]}x without an explanation: {name}", file=sys.stderr)
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
