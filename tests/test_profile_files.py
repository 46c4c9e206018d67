"""``lib.profile(output=...)`` and ``tvm-ascend profile``: the msprof-style op summary CSV and
the Chrome-trace timeline of a run, every figure the timing model's estimate of a launch."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

import tvm_ascend
from tvm_ascend.cli import main
from tvm_ascend.cost_model.bands import band_for_template
from tvm_ascend.cost_model.counters import estimate_from_counters, group_tiling
from tvm_ascend.cost_model.timing import l2_bytes
from tvm_ascend.errors import ExportError
from tvm_ascend.runtime.profile_files import (COLUMNS, OP_SUMMARY, TRACE, chrome_trace,
                                               launch_rows)
from tvm_ascend.soc import get_soc

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.onnx"
# the names msprof's op_summary_*.csv gives these columns (PipeUtilization metrics)
MSPROF_COLUMNS = ["Op Name", "OP Type", "Task Type", "Task Start Time(us)", "Task Duration(us)",
                  "Block Dim", "Mix Block Dim", "aic_mac_time(us)", "aic_mte2_time(us)",
                  "aiv_vec_time(us)", "aiv_mte2_time(us)", "aiv_mte3_time(us)"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """The demo (a transpose chain on the vector cores, a MatMul with its epilogue: a MIX
    kernel) run once; its launches' counters and the folder its profile went to."""
    lib = tvm_ascend.build(str(DEMO), target="ascend")
    # the counters live in the loaded library, which every module of this model built in
    # this process shares (the compile cache hands them one file): start from none
    lib.profile(reset=True)
    lib.run({"x": np.random.default_rng(0).random((2, 64, 100), dtype=np.float32)})
    folder = tmp_path_factory.mktemp("prof")
    records = lib.profile(output=folder)
    return lib, records, folder


def _rows(folder: Path) -> tuple[list[str], list[dict]]:
    with open(folder / OP_SUMMARY, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames), list(reader)


def test_op_summary_has_a_row_per_launch_at_that_launch_estimate(profiled):
    lib, records, folder = profiled
    header, rows = _rows(folder)
    assert header == COLUMNS and all(name in header for name in MSPROF_COLUMNS)
    assert len(records) == 2 and [r["Op Name"] for r in rows] == [p["kernel"] for p in records]
    groups = {g["kernel"]: g for g in lib.fusion_report()["groups"] if g.get("kernel")}
    soc = get_soc("Ascend910B1")
    start = 0.0
    for row, record in zip(rows, records):
        estimate = estimate_from_counters(groups[record["kernel"]], record, soc)
        assert float(row["Task Duration(us)"]) == pytest.approx(estimate.time_us, abs=1e-3)
        assert float(row["aic_mac_time(us)"]) == pytest.approx(estimate.cube_us, abs=1e-3)
        assert float(row["aiv_vec_time(us)"]) == pytest.approx(estimate.vector_us, abs=1e-3)
        assert float(row["aiv_mte3_time(us)"]) == pytest.approx(estimate.mte3_us, abs=1e-3)
        mte2 = float(row["aic_mte2_time(us)"]) + float(row["aiv_mte2_time(us)"])
        assert mte2 == pytest.approx(estimate.mte2_us, abs=2e-3)  # split between AIC and AIV
        assert float(row["Task Start Time(us)"]) == pytest.approx(start, abs=1e-3)
        start += estimate.time_us
        assert int(row["Block Dim"]) == record["block_dim"]
        # HBM and L2 apart: of the counted GM bytes, L2 serves what the plan says (l2_bytes)
        tiling = group_tiling(groups[record["kernel"]])
        gm = record["gm_read_bytes"] + record["gm_write_bytes"]
        assert int(row["L2 Bytes (est.)"]) == min(gm, sum(l2_bytes(tiling)))
        assert int(row["HBM Bytes (est.)"]) + int(row["L2 Bytes (est.)"]) == gm
        low, high = map(float, row["Task Duration Band(us)"].split("-"))
        band = band_for_template(tiling.template).interval(estimate.time_us)
        assert (low, high) == pytest.approx(band, abs=1e-3)
        assert row["Duration Source"].startswith("estimate") and "not measured" in \
            row["Duration Source"]
    by_kind = {row["OP Type"]: row for row in rows}
    assert by_kind["matmul"]["Task Type"] == "MIX_AIC"
    assert int(by_kind["matmul"]["L2 Bytes (est.)"]) > 0  # the cube -> vector workspace
    assert float(by_kind["matmul"]["aic_mac_time(us)"]) > 0
    assert by_kind["data_movement"]["Task Type"] == "AI_VECTOR_CORE"
    assert by_kind["data_movement"]["Mix Block Dim"] == "N/A"
    assert float(by_kind["data_movement"]["aic_mte2_time(us)"]) == 0


def test_trace_is_chrome_json_with_a_slice_per_launch_and_pipe_tracks(profiled):
    _, records, folder = profiled
    trace = json.loads((folder / TRACE).read_text())
    events = trace["traceEvents"]
    assert "estimate" in trace["otherData"]["source"]
    launches = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert [e["name"] for e in launches] == [p["kernel"] for p in records]
    assert all(e["tid"] == 0 and e["dur"] > 0 for e in launches)
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert all("estimate" in name for name in tracks.values()) and len(tracks) == 7
    pipes = [e for e in events if e["ph"] == "X" and e["cat"] == "pipe"]
    assert {tracks[e["tid"]].split(" (")[0] for e in pipes} >= {"AIC MAC", "AIV VEC",
                                                                 "AIV MTE2", "AIV MTE3"}
    for launch in launches:  # every pipe slice lies inside its launch: the tracks nest
        inside = [e for e in pipes if e["name"] == launch["name"]]
        assert inside and all(launch["ts"] <= e["ts"] and e["ts"] + e["dur"] <= launch["ts"]
                              + launch["dur"] + 1e-3 for e in inside)


def test_unsplit_cores_are_ai_core_and_a_kernel_without_a_plan_is_na(profiled):
    lib, records, _ = profiled
    report = dict(lib.fusion_report(), soc_version="Ascend310P3")
    on_310p = launch_rows([dict(r, soc="Ascend310P3") for r in records], report)
    assert {row["Task Type"] for row in on_310p} == {"AI_CORE"}
    assert all(row["Mix Block Dim"] == "N/A" for row in on_310p)
    stranger = dict(records[0], kernel="ascend_k9_not_in_the_report")
    (row, after) = launch_rows([stranger, records[0]], lib.fusion_report())
    assert row["Task Duration(us)"] == "N/A" and "no tiling plan" in row["Duration Source"]
    assert after["Task Start Time(us)"] == 0.0  # an unestimated launch takes no time
    trace = chrome_trace([row, after], "Ascend910B1")
    assert [e["name"] for e in trace["traceEvents"] if e.get("cat") == "kernel"] == \
        [records[0]["kernel"]]


def test_a_bad_profile_folder_is_an_error_naming_it_and_keeps_the_counters(profiled,
                                                                           tmp_path):
    lib, _, _ = profiled
    lib.run({"x": np.zeros((2, 64, 100), np.float32)})
    afile = tmp_path / "taken"
    afile.write_text("x")
    with pytest.raises(ExportError, match="'.*taken'.*it is a file"):
        lib.profile(output=afile)
    with pytest.raises(ExportError, match="'.*taken/sub'.*cannot be created"):
        lib.profile(output=afile / "sub")
    assert len(lib.profile()) == 2  # checked before the counters were read and reset


def test_cli_profile_writes_both_files_and_prints_estimates(tmp_path, capsys):
    assert main(["profile", "--model", str(DEMO), "--output", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "ESTIMATED" in out and "total (estimate)" in out and "MIX_AIC" in out
    assert len(_rows(tmp_path / "p")[1]) == 2
    json.loads((tmp_path / "p" / TRACE).read_text())
    (tmp_path / "f").write_text("")
    assert main(["profile", "--model", str(DEMO), "--output", str(tmp_path / "f")]) == 2
    assert "it is a file" in capsys.readouterr().err
