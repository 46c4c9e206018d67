"""``BENCHMARKS.md``: the tables of ``benchmarks/results.json``, generated, never hand-edited.

Example
-------
>>> text = render_markdown({"header": {"date": "2026-01-01", "commit": "abc",
...                                    "machine": {"cpus": 2}}, "records": []})
>>> text.splitlines()[0]
'# Benchmarks'
"""
from __future__ import annotations

import json
import os

from tvm_ascend.soc import get_soc

from .calibration import markdown_lines
from .charts import ORDER, write_text_atomic
from .kernel_classes import CLASS_LABELS, CLASSES, LARGE_MATMUL, efficiency_cell
from .results_file import provenance

NA = "n/a"
# Notes on how to read the figures, printed under the header of every BENCHMARKS.md. Why: the
# investigation of issue #7 found these effects; readers of the tables need them beside the
# numbers, and results.json records measurements, not explanations.
NOTES = (
    "`atc_style` can move more GM bytes than `op_by_op` on transformers: with no cost model "
    "it fuses each LayerNorm chain into the MatMul before it (rules MatMulEpilogueFusion + "
    "LayerNormFusion in one group). Such a kernel must hold whole hidden-size rows, so the UB "
    "fits only 16 rows per tile: the weight is re-read once per 16 rows (8 times at seq 128, "
    "against twice with 64x64 tiles) and only M/16 cores work. The cost-checked levels "
    "refuse that merge. ATC's own LayerNormFusionPass keeps LayerNorm a kernel of its own, so "
    "the emulation is pessimistic here (reported to the partitioner, issue #7).",
    "ResNet-50: from commit 0302953 on, the conv kernel builds its img2col block with copies "
    "and vector Gathers from a UB window of input rows, and a 1x1 conv's Matmul reads the "
    "input planes directly; records from 8356fac up to then were dominated by an element-by-"
    "element img2col on the scalar unit (about 500 ms at b32 fp32 for every baseline), and "
    "earlier ones did not count that work. From 70cba70 on: on 910B the gathered block goes "
    "to the core's GM workspace once per pixel tile and serves all its channel tiles (before: "
    "staged through GM again for every tile and K chunk), the conv epilogue covers many "
    "output rows per vector call, 310P copies rows into the UB as whole 32-byte blocks, and "
    "workspace bytes (conv, matmul) are charged at L2 speed as attention's were; from "
    "db7d0e3 on 310P may take the GM route too where the estimate says so. The device's "
    "Load3D path (img2col from L1) is printed from 536119e on for half convs on 310P, where "
    "the estimate prefers it to the img2col kernel (schedules/conv2d/load3d_kernel.py); "
    "910B and float32 convs keep the img2col kernel.",
    "GPT-2: from 6696d5c on, the attention template takes the causal Where of GPT-2's "
    "TorchScript export (before, it refused the chain and the scores went to GM between "
    "three kernels); whether the fused kernel wins is the estimate's call per configuration.",
    "Records carry the commit they were measured at (see `benchmarks/results.json`); "
    "estimates from different commits come from different timing models, so compare "
    "baselines within one configuration, not configurations across runs.",
)


def _mb(value) -> str:
    return NA if value is None else f"{value / 1e6:.3f}"


def _x(value, reference) -> str:
    return NA if value is None or not reference else f"{value / reference:.2f}x"


def _num(value, digits: int = 1) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def _err(value, record: dict | None = None) -> str:
    if value is None:
        return NA
    bad = (record or {}).get("nonfinite_outputs")
    return f"{value:.2e} ({bad} NaN/inf values)" if bad else f"{value:.2e}"


def _per_soc(values: dict | None, soc: str, digits: int = 1) -> str:
    return _num((values or {}).get(soc), digits)


def _band(record: dict, soc: str) -> str:
    """`` [lo-hi]``: the estimate's uncertainty band, where the record has one."""
    band = (record.get("est_band_us") or {}).get(soc)
    return f" [{band[0]:.1f}-{band[1]:.1f}]" if band else ""


def _launch_prose() -> str:
    """What the estimate and its bracket are, with the launch figures of the SoC profiles."""
    b2 = get_soc("Ascend910B2")  # where host submission was measured (soc_profiles.def)
    return ("The first figure is the device's timeline: every launch's time on the device, its "
            f"start-up included ({b2.startup_base_us:g} + {b2.startup_all_cores_us:g} x the "
            "share of the cores it uses, in us, on 910B: catlass' head cost of a kernel), with "
            "the host's submissions hidden behind it. In brackets, the same launches submitted "
            "one by one from the host into one stream, end to end, at the low and the high end "
            "of the host submission time measured per kernel on 910B2 "
            f"({b2.submit_low_us:.1f} and {b2.submit_high_us:.1f} us, triton-ascend issue "
            "#1675): where the host falls behind, the device waits, so a model of many short "
            "launches is host-bound at the high end. A conclusion that holds for the first "
            "figure but not across the bracket depends on how the host launches kernels. "
            "Records made before submission was modelled show the estimate alone (their "
            "launches cost a flat 3 us on 910B, 5 us on 310P3).")


def _estimate(record: dict, soc: str) -> str:
    """The latency estimate on ``soc`` with its uncertainty band in square brackets and, in
    round ones, the same launches end to end at the low and the high end of host submission:
    "14.9 [12.7-17.0] (23.5-52.3)"; a record made before the band or submission were
    modelled shows what it has."""
    low = (record.get("est_latency_us_low") or {}).get(soc)
    high = (record.get("est_latency_us_high") or {}).get(soc)
    figure = _per_soc(record.get("est_latency_us"), soc)
    if figure == NA:
        return figure
    figure += _band(record, soc)
    if low is None or high is None:
        return figure
    return f"{figure} ({low:.1f}-{high:.1f})"


def _config_table(records: list[dict], socs: list[str]) -> list[str]:
    first = records[0]
    macs = NA if first["matmul_macs"] is None else f"{first['matmul_macs']:.3g}"
    lines = [f"MatMul/Gemm/Conv MACs {macs}; compulsory bytes "
             f"{_mb(first['compulsory_bytes'])} MB; matmul-boundary bytes "
             f"{_mb(first['matmul_boundary_bytes'])} MB; {first['onnx_nodes']} ONNX nodes.", ""]
    soc_heads = [f"est. {soc} us (ESTIMATE) / roofline us" for soc in socs]
    head = (["baseline", "kernels (npu+host)", "GM MB", "HBM MB", "L2 MB (est.)",
             "x compulsory (HBM)", "x matmul-boundary (HBM)"]
            + soc_heads + ["peak mem MB", "compile cold s", "compile warm s (build cache)",
                           "compile warm s (replan)", "max abs err", "max rel err"])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_baseline = {r["baseline"]: r for r in records}
    for baseline in [b for b in ORDER if b in by_baseline]:
        r = by_baseline[baseline]
        if r["status"] != "ok":
            reason = (r.get("error") or r["status"]).splitlines()[0][:160]
            lines.append(f"| {baseline} | {r['status']}: {reason} |" + " |" * (len(head) - 2))
            continue
        kernels = (NA if r["kernels"] is None else
                   f"{r['kernels']} ({r['kernels_ascend']}+{r['kernels_host']})")
        estimates = [f"{_estimate(r, soc)} / {_per_soc(r['roofline_us'], soc)}"
                     for soc in socs]
        hbm = r.get("hbm_bytes")
        cells = ([baseline, kernels, _mb(r["gm_bytes"]), _mb(hbm), _mb(r.get("l2_bytes")),
                  _x(hbm, r["compulsory_bytes"]),
                  _x(hbm, r["matmul_boundary_bytes"])] + estimates
                 + [_mb(r["peak_memory_bytes"]), _num(r["compile_s_cold"]),
                    _num(r["compile_s_warm"]), _num(r.get("compile_s_warm_replan")),
                    _err(r["max_abs_err"], r),
                    _err(r["max_rel_err"], r)])
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _stage_table(records: list[dict]) -> list[str]:
    """Where compile time goes: the stages of every finished record."""
    lines = ["| configuration | baseline | ONNX model s | build (cold) s | export / g++ (cold) s "
             "| build (warm) s | export (warm) s | build (warm, replan) s | run s | load (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r["status"] != "ok":
            continue
        s = r.get("stage_s") or {}
        cells = [f"{r['model']} {r['config']} {r['dtype']}", r["baseline"]] + [
            _num(s.get(key)) for key in ("onnx_model", "build_cold", "export_cold",
                                         "build_warm", "export_warm", "build_warm_replan",
                                         "run")] + [_num(r.get("load_avg_1m"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def efficiency_lines(records: list[dict], socs: list[str]) -> list[str]:
    """The per-kernel efficiency section: per SoC, one row per finished record, per kernel
    class its estimates over their own bounds (``benchmarks/kernel_classes.py``); ``n/a``
    for a record made before the harness computed them."""
    lines = ["## Per-kernel efficiency (ESTIMATE: est. time over the kernel's own bound)", "",
             f"Per kernel class (large matmul: M, N, K >= {LARGE_MATMUL}; other matmul; fused "
             "attention; 3x3 conv; other conv; vector: every other NPU kernel), the launches' "
             "estimated times (start-up included) summed over their own bounds summed: the "
             "cube time at the calibrated peak for the cube classes, the roofline (HBM/L2 "
             "bytes, vector peak) for vector kernels; `(n)` launches, `[worst]` the highest "
             "single launch where it differs. Issue #19's targets: large matmuls within 1.25x, "
             "fused attention at s512 within 2x, 3x3 convs within 1.5x. `-`: no kernel of the "
             "class; `n/a`: a record made before the harness computed the figure.", ""]
    head = ["configuration", "baseline"] + [CLASS_LABELS[c] for c in CLASSES]
    finished = [r for r in records if r["status"] == "ok"]
    for soc in socs:
        if not any((r.get("kernel_efficiency") or {}).get(soc) for r in finished):
            lines += [f"{soc}: {NA} (no record carries the figure yet)", ""]
            continue
        lines += [f"{soc}:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in finished:
            per_soc = (r.get("kernel_efficiency") or {}).get(soc)
            cells = [NA] * len(CLASSES) if per_soc is None else \
                [efficiency_cell(per_soc.get(c)) for c in CLASSES]
            lines.append("| " + " | ".join([f"{r['model']} {r['config']} {r['dtype']}",
                                            r["baseline"]] + cells) + " |")
        lines.append("")
    return lines


def _provenance_lines(results: dict) -> list[str]:
    """Which commit and date produced which records (a file merged from partial reruns)."""
    runs = provenance(results)
    if not runs:
        return []
    lines = [f"- records by commit ({len(runs)} run{'s' if len(runs) > 1 else ''}):"]
    for run in runs:
        configs: dict = {}
        for name in run["records"]:
            model, config, dtype, baseline = name.split(" ")
            configs.setdefault(f"{model} {config} {dtype}", []).append(baseline)
        listed = "; ".join(f"{key} ({', '.join(bases)})" for key, bases in configs.items())
        lines.append(f"  - `{run['commit'] or NA}` {run['date'] or NA}: {listed}")
    return lines


# The seed articles' headline figures (shared/seeds/004: Ascend 910B, batch 32, ATC with an
# aggressive fusion switch file against the same model unfused): (model, unfused ms, fused ms,
# the speedup as the article prints it)
SEED_SPEEDUPS = (("resnet50", 12.4, 8.7, "1.42x"), ("bert_base", 56.8, 39.2, "1.45x"),
                 ("gpt2_medium", 182.5, 126.4, "1.44x"))


def _seed_lines(records: list[dict]) -> list[str]:
    """The seed articles' speedups beside the project's own against the same baseline: fusion
    off (``op_by_op``), not the ATC-style emulation, which already fuses."""
    lines = ["## The seed articles' speedups, against fusion off", "",
             "The articles the project grew from quote 1.42-1.45x at batch 32 on 910B: fused "
             "against **unfused** (no fusion at all), not against ATC's default rules. The "
             "project's figures against the same baseline are `op_by_op` / `aggressive` "
             "(estimates, 910B1, the largest configuration of each model in this file; the "
             "seeds do not give sequence lengths):", "",
             "| model | seeds: unfused -> fused ms (speedup) | ours: configuration | op_by_op "
             "-> aggressive est. ms (speedup) | atc_style -> aggressive (speedup) |",
             "|---|---|---|---|---|"]
    for model, unfused, fused, printed in SEED_SPEEDUPS:
        est = {}
        for r in records:
            if r["model"] == model and r["dtype"] == "float16" and r["status"] == "ok":
                us = (r.get("est_latency_us") or {}).get("Ascend910B1")
                if us:
                    est.setdefault(r["config"], {})[r["baseline"]] = us
        full = [c for c, b in est.items() if {"op_by_op", "aggressive", "atc_style"} <= set(b)]
        if not full:
            continue
        config = max(full, key=lambda c: est[c]["op_by_op"])
        b = est[config]
        lines.append(f"| {model} | {unfused} -> {fused} ({printed}) | {config} "
                     f"float16 | {b['op_by_op'] / 1e3:.2f} -> {b['aggressive'] / 1e3:.2f} "
                     f"({b['op_by_op'] / b['aggressive']:.2f}x) | {b['atc_style'] / 1e3:.2f} -> "
                     f"{b['aggressive'] / 1e3:.2f} ({b['atc_style'] / b['aggressive']:.2f}x) |")
    return lines + [""]


def _mode_name(mode: dict) -> str:
    if mode["planner_model"] == "timing":
        return "timing model alone"
    return f"xgboost, top {mode['planner_top_k']}"


def planner_section(data: dict) -> list[str]:
    """The section of ``benchmarks/planner_model.json`` (``python -m benchmarks.planner_model``):
    the partitions of the timing model alone against the XGBoost-ranked planner."""
    cases = data.get("cases", [])
    if not cases:
        return []
    default = data.get("default", {})
    lines = [
        "## The learned model in the planner", "",
        "`CompileConfig(planner_model=\"xgboost\", planner_top_k=k)`: the planner's XGBoost "
        "model (`tvm_ascend/cost_model/planner_model.ubj`, features read from the tiling "
        "plans only, never from the timing estimate: the blocks the launch starts, the "
        "busiest core's bytes and work, and those over the group's smallest) ranks each "
        "group's distinct tiling variants and the timing model estimates the k best-ranked; "
        "`timing` estimates every variant. "
        "Same partition = every kernel's ops, template and knobs and every host group equal "
        "to the timing model's. Timing-model calls are exact (`estimate_kernel` calls of the "
        "partition stage); the partition stage (prepare + partition, `plan_fusion`) is wall "
        f"time, the median of {data.get('repeats', NA)} runs on a shared 2-core machine: "
        f"differences of a few tenths of a second are noise. Default: "
        f"`planner_model={default.get('planner_model', NA)!r}`, "
        f"`planner_top_k={default.get('planner_top_k', NA)}`. Measured at commit "
        f"`{data.get('commit') or NA}` on {data.get('date', NA)} (build only, conservative).",
        *([f"The model learned from generated matmul and conv2d workloads and the planner's "
           f"groups of {', '.join(data['trained_on'])} (both SoCs, float16; "
           "`benchmarks/train_cost_model.py --planner`): no configuration below."]
          if data.get("trained_on") else []),
        "",
        "| configuration | SoC | distinct kernels | planner | same partition | est. us (ESTIMATE) "
        "| timing-model calls | groups ranked | partition stage s |",
        "|---|---|---|---|---|---|---|---|---|"]
    for case in cases:
        for mode in case["modes"]:
            ranked = sum(v for k, v in mode.get("decided_by", {}).items()
                         if k.startswith("ranked"))
            lines.append("| " + " | ".join([
                f"{case['model']} {case['config']} {case['dtype']}", case["soc"],
                str(case["kernels"]), _mode_name(mode),
                "yes" if mode["same_partition"] else "**no**", _num(mode["est_us"]),
                str(mode["estimate_calls"]), str(ranked),
                _num(mode["partition_s_median"], 2)]) + " |")
    differing = [(case, mode) for case in cases for mode in case["modes"]
                 if not mode["same_partition"]]
    if differing:
        lines += ["", "Where the partition differs (kernels of one side the other lacks):"]
        for case, mode in differing:
            first = "; ".join(mode.get("differs", [])[:2])
            lines.append(f"- {case['model']} {case['config']} {case['soc']}, "
                         f"{_mode_name(mode)}: est. {mode['est_us']:.1f} us; {first}")
    if data.get("conclusion"):
        lines += ["", data["conclusion"]]
    return lines + [""]


def render_markdown(results: dict, charts: list[str] = (), base_dir: str = ".") -> str:
    """The text of BENCHMARKS.md for ``results`` (``{"header", "records"}``)."""
    header, records = results.get("header", {}), results.get("records", [])
    machine = header.get("machine", {})
    socs = header.get("socs", ["Ascend910B1", "Ascend310P3"])
    limit = header.get("run_limit_macs")
    lines = [
        "# Benchmarks", "",
        "Generated by `python -m benchmarks` from `benchmarks/results.json`; do not edit by hand.",
        "",
        f"- last run: {header.get('date', NA)}, commit `{header.get('commit') or NA}` (HEAD when "
        "a run started; the working tree may have carried uncommitted changes), wall time "
        f"{_num(header.get('wall_s'), 0)} s",
        f"- machine: {machine.get('platform', NA)}, {machine.get('processor', NA)}, "
        f"{machine.get('cpus', NA)} CPUs; Python {machine.get('python', NA)}, TVM "
        f"{machine.get('tvm', NA)}, ONNX {machine.get('onnx', NA)}"]
    lines += _provenance_lines(results)
    if header.get("note"):
        lines.append(f"- note: {header['note']}")
    lines += [f"- note: {note}" for note in NOTES]
    lines += ["",
        "## What the columns mean", "",
        "- **baselines**: `op_by_op` = fusion off (one kernel per operator); `atc_style` = an "
        "**emulation** of ATC's fixed default fusion rules (not ATC itself); `tvm_fuseops` = "
        "plain TVM FuseOps groups; `conservative` / `aggressive` = tvm-ascend's fusion levels.",
        "- **kernels**: launches per inference, NPU + host (ops without an Ascend kernel run on "
        "the host and are counted as launches too).",
        "- **GM MB**: global-memory bytes moved, summed over every group of the fusion report "
        "(from the tiling plans; on configurations that run, the NPU part equals the "
        "emulator's counters): every byte through the GM address space. **HBM MB** and **L2 "
        "MB (est.)** split them as the timing model charges them, by one rule for every "
        "template (`schedules/l2_reuse.py`): L2 serves the cube-vector workspace round trips "
        "and the blocks read again when the bytes the working cores read between two reads "
        "(the reuse distance) fit in L2 (an estimate: no counter tells L2 hits apart); the "
        "rest is HBM traffic. Only GM MB mixes the two (it is what the emulator counts); "
        "the ratios to the bounds divide HBM bytes (n/a in records made before the split). "
        "**compulsory**: inputs, weights and outputs moved once (of a "
        "weight that only Gathers or Slices read, the rows they read: a lookup reads rows, "
        "not its table). "
        "**matmul-boundary**: every MatMul/Gemm/Conv reads its operands and writes its output "
        "once, everything else fused, attention scores never in GM (plus compulsory tensors "
        "no MatMul touches).",
        "- **est. us**: the cost model's latency **ESTIMATE** per SoC (no Ascend device was "
        "used), beside its roofline bound max(compulsory bytes / bandwidth, flops / peak). "
        "In square brackets: its uncertainty band (the times the calibration rows of each "
        "kernel's class allow, summed over the launches: see the calibration section). "
        + _launch_prose(),
        "- **compile**: `tvm_ascend.build` + `export_library`, cold = empty compile cache; "
        "warm (build cache) = the same build again, served whole from the cache "
        "(`tvm_ascend/runtime/build_cache.py`); warm (replan) = planned again with the build "
        "cache off, only the compiled kernels coming from the cache. Records before the build "
        "cache existed have no replan figure and their warm figure is a replan.",
        f"- **errors** against onnxruntime (CPU): max |a - b|, and max |a - b| / max |b| per "
        f"output (`inf` with a count where the output holds NaN/inf the reference does not); "
        f"measured only where MatMul/Gemm/Conv MACs <= {limit:.3g}: the harness decides by "
        "this size threshold, and larger configurations (the quoted BERT-base b16_s512, "
        "ResNet-50 at 224, GPT-2 medium s512) are compiled and estimated but never run on the "
        "CPU emulator, which would take hours for them here; `n/a` there." if limit else
        "- **errors** against onnxruntime (CPU).",
        "- `n/a`: the figure was not measured or the build does not report it; never a "
        "stand-in value.", "",
    ]
    if charts:
        lines += ["## Charts", ""]
        for path in charts:
            rel = os.path.relpath(path, base_dir)
            lines.append(f"![{os.path.basename(path)}]({rel})")
        lines.append("")
    groups: dict = {}
    for record in records:
        groups.setdefault((record["model"], record["config"], record["dtype"]), []).append(record)
    current_model = None
    skipped = []
    # one section per model, in the order models first appear: records of a model run in
    # different sessions are not adjacent in results.json
    first_seen = {}
    for model, _, _ in groups:
        first_seen.setdefault(model, len(first_seen))
    ordered = sorted(groups.items(), key=lambda item: first_seen[item[0][0]])
    for (model, config, dtype), group in ordered:
        if all(r["status"] == "skipped" for r in group):
            skipped.append(f"{model} {config} {dtype}")
            continue
        if model != current_model:
            lines += [f"## {model}", ""]
            current_model = model
        lines += [f"### {model} {config} {dtype} ({group[0]['style']} export)", ""]
        lines += _config_table(group, socs)
    if records:
        lines += _seed_lines(records)
        lines += efficiency_lines(records, socs)
        lines += ["## Where the time goes (seconds per stage)", ""] + _stage_table(records)
    if skipped:
        lines += ["## Not measured in this run", "",
                  "Not started within the run's time budget: " + "; ".join(skipped) + ".", ""]
    calibration = os.path.join(base_dir, "benchmarks", "calibration.json")
    if os.path.exists(calibration):  # written by benchmarks/calibration.py
        with open(calibration) as handle:
            lines += [""] + markdown_lines(json.load(handle))
    planner = os.path.join(base_dir, "benchmarks", "planner_model.json")
    if os.path.exists(planner):  # written by benchmarks/planner_model.py
        with open(planner) as handle:
            lines += planner_section(json.load(handle))
    cost_section = os.path.join(base_dir, "benchmarks", "cost_model.md")
    if os.path.exists(cost_section):  # written by benchmarks/cost_model.py
        with open(cost_section) as handle:
            lines += ["", handle.read().strip(), ""]
    return "\n".join(lines)


def write_markdown(results: dict, path: str, charts: list[str] = ()) -> str:
    """Write BENCHMARKS.md (atomically); returns ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    write_text_atomic(path, render_markdown(results, charts, folder))
    return path
