"""msprof-style files of a profile: an op summary CSV and a Chrome-trace timeline, of ESTIMATES.

``lib.profile(output="prof")`` writes, beside returning the emulator's counters:

- ``op_summary.csv``: one row per kernel launch, in launch order, with the columns msprof's
  ``op_summary_*.csv`` names (``Op Name``, ``OP Type``, ``Task Type``, ``Task Start Time(us)``,
  ``Task Duration(us)``, ``Block Dim``, ``Mix Block Dim`` and the PipeUtilization pipe times
  ``aic_mac_time(us)``, ``aic_mte2_time(us)``, ``aiv_vec_time(us)``, ``aiv_scalar_time(us)``,
  ``aiv_mte2_time(us)``, ``aiv_mte3_time(us)``), then this project's own columns (the pipe that
  bound the launch, its GM bytes as the emulator counted them and, apart, the HBM and L2 bytes
  of them as the plan has L2 serve them (estimates), the duration's uncertainty band from the
  calibration rows of its kernel class, its fusion group and ONNX nodes) and ``Duration
  Source``, which says on every row that the times are the timing model's estimate, not a
  measurement;
- ``trace_view.json``: the same launches as a Chrome trace (``traceEvents`` of ``ph: "X"``
  events, microseconds; open it in https://ui.perfetto.dev or chrome://tracing): one track of
  launches and one track per pipe.

Where the figures come from: each launch's emulator counters (GM bytes, cube MACs, vector API
elements) go into its group's tiling plan and through the timing model
(``cost_model.counters.estimate_from_counters``, the figure the tuner's emulator board
returns). The launches are laid end to end on one stream from time 0; host ops, which no NPU
launch covers, take no time on this timeline. The timing model gives one MTE2 busy time per
launch; in a kernel that drives the cube (a MIX kernel: its cube and vector cores share the
work) it is split between the AIC and the AIV by bytes, the matmul operand loads to the AIC
and the rest (epilogue operands) to the AIV. The column names are the Atlas A2 (910B) ones on
every SoC; on a SoC whose cores are not split (310P) each kernel's ``Task Type`` is
``AI_CORE``.

Example
-------
>>> records = lib.profile(output="prof")                       # doctest: +SKIP
>>> import csv; rows = list(csv.DictReader(open("prof/op_summary.csv")))   # doctest: +SKIP
>>> rows[0]["Task Duration(us)"], rows[0]["Duration Source"]   # doctest: +SKIP
('3.736', 'estimate: tvm-ascend timing model from CPU-emulator counters, not measured')
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from ..cost_model.bands import band_for_template
from ..cost_model.counters import estimate_from_counters, group_tiling
from ..cost_model.timing import l2_bytes
from ..errors import ExportError
from ..soc import get_soc
from .artifacts import write_atomic

OP_SUMMARY = "op_summary.csv"
TRACE = "trace_view.json"
ESTIMATE_NOTE = "estimate: tvm-ascend timing model from CPU-emulator counters, not measured"
# (msprof column, trace track) of each pipe, in msprof's PipeUtilization order
PIPES = (("aic_mac_time(us)", "AIC MAC (cube)"), ("aic_mte2_time(us)", "AIC MTE2"),
         ("aiv_vec_time(us)", "AIV VEC"), ("aiv_scalar_time(us)", "AIV SCALAR"),
         ("aiv_mte2_time(us)", "AIV MTE2"), ("aiv_mte3_time(us)", "AIV MTE3"))
COLUMNS = (["Op Name", "OP Type", "Task Type", "Task Start Time(us)", "Task Duration(us)",
            "Task Wait Time(us)", "Block Dim", "Mix Block Dim"]
           + [column for column, _ in PIPES]
           + ["Bound", "GM Bytes", "HBM Bytes (est.)", "L2 Bytes (est.)",
              "Task Duration Band(us)", "Group", "ONNX Nodes", "Duration Source"])
_SPLIT_ARCH = 2201  # 910B/A3: cube (AIC) and vector (AIV) cores are separate cores


def launch_rows(records: list[dict], report: dict) -> list[dict]:
    """One op-summary row (``COLUMNS`` -> value) per launch in ``records`` (``lib.profile()``),
    estimated from its counters and its group in ``report`` (the fusion report).

    A launch whose kernel has no tiling plan in the report gets ``N/A`` times and says why in
    ``Duration Source``; the next launch starts where the last estimated one ended: the
    device's timeline, each duration with its start-up, the host's submissions hidden (the
    fusion report's ``estimate.latency_us``; ``latency_us_low``/``_high`` add them).

    Example
    -------
    >>> rows = launch_rows(lib.profile(), lib.fusion_report())    # doctest: +SKIP
    >>> rows[0]["Task Type"]                                      # doctest: +SKIP
    'AI_VECTOR_CORE'
    """
    groups = {g.get("kernel"): g for g in report.get("groups", []) if g.get("kernel")}
    rows, start = [], 0.0
    for record in records:
        kernel = record.get("kernel", "")
        group = groups.get(kernel)
        soc = get_soc(record.get("soc") or report.get("soc_version") or "Ascend910B1")
        mixed = int(record.get("cube_macs", 0)) > 0
        split = soc.npu_arch == _SPLIT_ARCH
        block_dim = int(record.get("block_dim", 0))
        tiling = group_tiling(group)
        row = {"Op Name": kernel, "OP Type": tiling.template if tiling else "N/A",
               "Task Type": ("MIX_AIC" if mixed else "AI_VECTOR_CORE") if split else "AI_CORE",
               "Block Dim": block_dim,
               "Mix Block Dim": block_dim * max(1, int(record.get("task_ratio", 1)))
               if mixed and split else "N/A",
               "Task Wait Time(us)": 0,
               "GM Bytes": int(record.get("gm_read_bytes", 0))
               + int(record.get("gm_write_bytes", 0)),
               "Group": (group or {}).get("id", "N/A"),
               "ONNX Nodes": ";".join((group or {}).get("onnx_nodes", []))}
        if not tiling:
            row.update({"Task Start Time(us)": _us(start), "Task Duration(us)": "N/A",
                        "Bound": "N/A", "HBM Bytes (est.)": "N/A", "L2 Bytes (est.)": "N/A",
                        "Task Duration Band(us)": "N/A",
                        "Duration Source": f"no estimate: the fusion report has no tiling "
                                           f"plan for kernel {kernel!r}"})
            row.update({column: "N/A" for column, _ in PIPES})
            rows.append(row)
            continue
        estimate = estimate_from_counters(group, record, soc)
        # of the bytes the emulator counted, those the plan has L2 serve (l2_bytes: one rule,
        # schedules/l2_reuse.py); no counter tells an L2 hit apart, so both are estimates
        served = min(row["GM Bytes"], sum(l2_bytes(tiling)))
        low, high = band_for_template(tiling.template).interval(estimate.time_us)
        row.update({"Task Start Time(us)": _us(start), "Task Duration(us)": _us(estimate.time_us),
                    "Bound": estimate.bound, "Duration Source": ESTIMATE_NOTE,
                    "HBM Bytes (est.)": row["GM Bytes"] - served, "L2 Bytes (est.)": served,
                    "Task Duration Band(us)": f"{_us(low)}-{_us(high)}"})
        row.update(zip([column for column, _ in PIPES],
                       map(_us, _pipe_times(estimate, tiling, record, mixed))))
        row["_launch_us"] = estimate.launch_us
        rows.append(row)
        start += estimate.time_us
    return rows


def _pipe_times(estimate, tiling, record: dict, mixed: bool) -> tuple:
    """(aic mac, aic mte2, aiv vec, aiv scalar, aiv mte2, aiv mte3) busy microseconds."""
    aic_share = 0.0
    if mixed:
        read = int(record.get("gm_read_bytes", 0))
        operand = tiling.work.cube_operand_bytes
        aic_share = min(read, operand) / read if read else 1.0
    return (estimate.cube_us, estimate.mte2_us * aic_share, estimate.vector_us,
            estimate.scalar_us, estimate.mte2_us * (1.0 - aic_share), estimate.mte3_us)


def _us(value: float) -> float:
    return round(float(value), 3)


def op_summary_csv(rows: list[dict]) -> str:
    """The rows of ``launch_rows`` as CSV text with msprof's header line."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def chrome_trace(rows: list[dict], soc_version: str = "") -> dict:
    """The rows of ``launch_rows`` as a Chrome trace (JSON object format, microseconds).

    Track 0 holds one slice per launch (its device start-up nested at its start); tracks 1-6
    one slice per pipe busy in it, from the end of the start-up, as long as its busy
    time (at most the launch's remaining time: ``args.busy_us`` keeps the full figure).
    """
    pid = 1
    events = [{"ph": "M", "pid": pid, "name": "process_name",
               "args": {"name": f"NPU {soc_version} (ESTIMATES: timing model, not measured)"}},
              {"ph": "M", "pid": pid, "tid": 0, "name": "thread_name",
               "args": {"name": "kernel launches (estimate)"}}]
    for tid, (_, track) in enumerate(PIPES, start=1):
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                       "args": {"name": f"{track} (estimate)"}})
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": tid}})
    for row in rows:
        if row["Task Duration(us)"] == "N/A":
            continue
        start, duration, launch = (row["Task Start Time(us)"], row["Task Duration(us)"],
                                   row["_launch_us"])
        args = {key: row[key] for key in COLUMNS if key not in ("Op Name",)}
        events.append({"ph": "X", "pid": pid, "tid": 0, "name": row["Op Name"],
                       "cat": "kernel", "ts": start, "dur": duration, "args": args})
        events.append({"ph": "X", "pid": pid, "tid": 0, "name": "device start-up",
                       "cat": "launch", "ts": start, "dur": launch,
                       "args": {"estimate": True}})
        body = max(0.0, duration - launch)
        for tid, (column, track) in enumerate(PIPES, start=1):
            busy = row[column]
            if busy > 0:
                events.append({"ph": "X", "pid": pid, "tid": tid, "name": row["Op Name"],
                               "cat": "pipe", "ts": _us(start + launch),
                               "dur": _us(min(busy, body)),
                               "args": {"pipe": track, "busy_us": busy, "estimate": True}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": ESTIMATE_NOTE, "soc_version": soc_version}}


def write_profile(folder, records: list[dict], report: dict) -> dict[str, Path]:
    """Write ``op_summary.csv`` and ``trace_view.json`` of ``records`` into ``folder`` (made
    if missing), each through a temporary file and one rename; returns {name: path}.

    A ``folder`` that is a file, or that cannot be created or written, is an ExportError
    naming it.

    Example
    -------
    >>> write_profile("prof", lib.profile(), lib.fusion_report())  # doctest: +SKIP
    {'op_summary.csv': PosixPath('prof/op_summary.csv'), 'trace_view.json': ...}
    """
    folder = check_profile_folder(folder)
    rows = launch_rows(records, report)
    written = {OP_SUMMARY: folder / OP_SUMMARY, TRACE: folder / TRACE}
    trace = chrome_trace(rows, report.get("soc_version", ""))
    try:
        write_atomic(written[OP_SUMMARY], op_summary_csv(rows))
        write_atomic(written[TRACE], json.dumps(trace, indent=1))
    except OSError as err:
        raise ExportError(f"cannot write the profile into '{folder}': {err.strerror}") from err
    return written


def check_profile_folder(folder) -> Path:
    """``folder`` as a folder the profile files can be written into (made if missing), or an
    ExportError naming it."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"cannot write the profile into '{folder}': it is a file, not a "
                          "folder; give a folder (it is made if missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ExportError(f"cannot write the profile into '{folder}': the folder cannot be "
                          f"created ({err.strerror})") from err
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write the profile into '{folder}': the folder is not "
                          "writable")
    return folder
