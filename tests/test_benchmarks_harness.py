"""The benchmark harness: tiny configurations of every model through it, records complete and
consistent (report bytes equal the emulator's, errors within tolerance, estimates above their
roofline), baselines mapped to CompileConfig, tables and charts rendered from the results."""
from __future__ import annotations

import json
from xml.etree import ElementTree

import numpy as np
import pytest

import tvm_ascend
from benchmarks import __main__ as cli
from benchmarks import charts, harness, markdown, results_file
from benchmarks.models import bert
from conftest import TOLERANCES

MODELS = ["bert_base", "resnet50", "gpt2_small", "gpt2_medium", "vit_base"]


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    """Every --quick configuration under ``conservative``, warm from the session's cache (the
    model tests compiled the same kernels), written to a results file as ``main`` would."""
    out = tmp_path_factory.mktemp("bench") / "results.json"
    results = harness.run_benchmarks(harness.QUICK_CONFIGS, ["conservative"], out,
                                     measure_cold=False)
    return results, out


def _record(results, model):
    return next(r for r in results["records"] if r["model"] == model)


@pytest.mark.parametrize("model", MODELS)
def test_tiny_configuration_runs_through_the_harness(quick_results, model):
    record = _record(quick_results[0], model)
    assert set(harness.RESULT_KEYS) <= set(record)
    assert record["status"] == "ok", record["error"]
    assert record["kernels"] == record["kernels_ascend"] + record["kernels_host"] > 0
    # bytes from the tiling plans equal the emulator's counters on a configuration that runs
    assert record["npu_gm_bytes"] == record["emulator_gm_bytes"] > 0
    assert record["gm_bytes"] >= record["npu_gm_bytes"]
    assert 0 < record["compulsory_bytes"] <= record["matmul_boundary_bytes"]
    tol = TOLERANCES[record["dtype"]]
    assert record["max_abs_err"] <= tol["atol"] + tol["rtol"] * record["ref_max_abs"]
    # each output relative to its own scale: at least the overall ratio, and small
    assert record["max_abs_err"] / record["ref_max_abs"] <= record["max_rel_err"] * (1 + 1e-9)
    assert record["max_rel_err"] <= 10 * tol["rtol"] + tol["atol"]
    assert record["compile_s_warm"] > 0 and record["compile_s_cold"] is None  # not measured
    assert record["compile_s_warm_replan"] > 0
    for soc in harness.SOCS:  # no estimate may beat its roofline bound
        estimate, roofline = record["est_latency_us"][soc], record["roofline_us"][soc]
        if estimate is not None:
            assert roofline is not None and estimate >= roofline > 0
            # end to end, the host's submissions only add: more at the high end
            low, high = record["est_latency_us_low"][soc], record["est_latency_us_high"][soc]
            assert estimate < low < high


def test_results_file_has_header_and_one_record_per_config_and_baseline(quick_results):
    results, out = quick_results
    on_disk = json.loads(out.read_text())
    assert on_disk["records"] == json.loads(json.dumps(results["records"]))
    header = on_disk["header"]
    assert header["date"] and header["machine"]["cpus"] >= 1
    assert "commit" in header and header["socs"] == list(harness.SOCS)
    keys = [(r["model"], r["config"], r["dtype"], r["baseline"]) for r in on_disk["records"]]
    assert len(keys) == len(set(keys)) == len(harness.QUICK_CONFIGS)


def test_emulator_bytes_count_only_the_harness_run():
    """Regression: the emulator's counters live in the loaded library, which every build of a
    model in one process shares through the compile cache, so a model already run in this
    process (the model tests run the same quick configurations) doubled the emulator bytes."""
    config = next(c for c in harness.QUICK_CONFIGS if c.model == "bert_base")
    tvm_ascend.build(config.onnx_model()).run(config.inputs())  # leaves its counts behind
    (record,) = harness.benchmark_config(config, ["conservative"], measure_cold=False)
    assert record["status"] == "ok", record["error"]
    assert record["emulator_gm_bytes"] == record["npu_gm_bytes"] > 0


@pytest.mark.slow  # compiles a model's kernels with g++ from nothing: about a minute here
def test_cold_compile_is_timed_with_an_empty_cache():
    config = next(c for c in harness.QUICK_CONFIGS if c.model == "bert_base")
    (record,) = harness.benchmark_config(config, ["conservative"], run_limit_macs=0)
    assert record["status"] == "ok", record["error"]
    # cold compiles the kernels with g++; warm finds the library in the cache it filled
    assert record["compile_s_cold"] > record["stage_s"]["export_warm"]
    assert record["stage_s"]["export_cold"] > 10 * record["stage_s"]["export_warm"]
    assert record["max_abs_err"] is None and record["emulator_gm_bytes"] is None  # not run


def test_baselines_map_to_compile_configs_and_order_the_launches():
    cfg = harness.compile_config("op_by_op", "Ascend310P3")
    assert cfg.fusion_level == "off" and cfg.soc_version == "Ascend310P3"
    assert harness.compile_config("aggressive").fusion_level == "aggressive"
    with pytest.raises(tvm_ascend.FusionConfigError, match="unknown baseline"):
        harness.compile_config("fastest")
    model = bert.encoder_layer_model(batch=1, seq=8, hidden=32, heads=2)
    launches = {}
    for baseline in harness.BASELINES:
        try:
            compile_config = harness.compile_config(baseline)
        except LookupError:  # a baseline this tvm-ascend cannot express yet
            continue
        report = tvm_ascend.build(model, config=compile_config).fusion_report()
        launches[baseline] = harness.report_figures(report)["kernels"]
    assert {"op_by_op", "conservative", "aggressive"} <= set(launches)
    # op-by-op: one launch per operator, the most of any baseline
    assert launches["op_by_op"] == max(launches.values())
    assert launches["op_by_op"] > launches["conservative"] >= launches["aggressive"]


def test_a_baseline_the_config_cannot_express_is_recorded_unavailable(monkeypatch):
    monkeypatch.setitem(harness.BASELINES, "future", {"no_such_field": 1})
    config = next(c for c in harness.QUICK_CONFIGS if c.model == "bert_base")
    (record,) = harness.benchmark_config(config, ["future"], run_limit_macs=0)
    assert record["status"] == "unavailable" and "no_such_field" in record["error"]
    assert record["kernels"] is None and record["compile_s_cold"] is None


def test_configurations_past_the_time_budget_are_recorded_skipped(tmp_path):
    results = harness.run_benchmarks(harness.QUICK_CONFIGS[:2], ["op_by_op", "aggressive"],
                                     tmp_path / "r.json", max_minutes=0)
    assert [r["status"] for r in results["records"]] == ["skipped"] * 4
    with pytest.raises(tvm_ascend.FusionConfigError, match="unknown baseline"):
        harness.run_benchmarks(harness.QUICK_CONFIGS[:1], ["fastest"])


def test_error_metrics_are_relative_to_the_output_scale():
    ref = [np.array([0.0, 2.0, -4.0]), np.array([1.0])]
    got = [np.array([1e-3, 2.0, -4.002]), np.array([1.0])]
    metrics = harness.error_metrics(got, ref)
    assert metrics["max_abs_err"] == pytest.approx(2e-3)
    assert metrics["max_rel_err"] == pytest.approx(2e-3 / 4.0)
    assert metrics["ref_max_abs"] == 4.0
    with pytest.raises(ValueError, match="shape"):
        harness.error_metrics([np.zeros(2)], [np.zeros(3)])


def test_markdown_and_charts_render_from_the_results(quick_results, tmp_path):
    results, out = quick_results
    written = cli.render(results, str(tmp_path / "BENCHMARKS.md"), str(tmp_path))
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "### bert_base tiny float32" in text and "ESTIMATE" in text
    assert "emulation" in text and results["header"]["date"] in text
    svgs = [p for p in written if p.endswith(".svg")]
    finished = {r["model"] for r in results["records"] if r["status"] == "ok"}
    assert finished, "no quick configuration finished; nothing to chart"
    assert {f"{model}_traffic.svg" for model in finished} <= {p.split("/")[-1] for p in svgs}
    for path in svgs:
        svg = ElementTree.parse(path).getroot()  # well-formed XML
        assert svg.tag.endswith("svg") and svg.findall(".//{http://www.w3.org/2000/svg}rect")
    # the CLI re-renders from the file, and says what is wrong with a missing one
    assert cli.main(["--render-only", "--output", str(out), "--markdown",
                     str(tmp_path / "again.md"), "--charts-dir", str(tmp_path)]) == 0
    assert (tmp_path / "again.md").read_text() == text
    assert cli.main(["--render-only", "--output", str(tmp_path / "none.json")]) == 2


def test_tables_say_na_rather_than_invent_figures():
    record = dict.fromkeys(harness.RESULT_KEYS)
    record.update(model="m", config="c", baseline="conservative", dtype="float32",
                  style="torchscript", status="ok", onnx_nodes=3, kernels=2, kernels_ascend=1,
                  kernels_host=1, gm_bytes=None, compulsory_bytes=100,
                  matmul_boundary_bytes=200, matmul_macs=10,
                  est_latency_us={"Ascend910B1": None}, roofline_us={"Ascend910B1": None})
    text = markdown.render_markdown({"header": {"socs": ["Ascend910B1"]}, "records": [record]})
    row = next(line for line in text.splitlines() if line.startswith("| conservative"))
    assert "| 2 (1+1) | n/a |" in row and "n/a / n/a" in row
    assert charts.write_charts({"records": [record]}, "unused") == []  # nothing to draw


def test_tables_group_records_by_model():
    """Records of one model from different runs are not adjacent in results.json; the
    rendered file still has one section per model, in the order models first appear."""
    def record(model, config):
        r = dict.fromkeys(harness.RESULT_KEYS)
        r.update(model=model, config=config, baseline="conservative", dtype="float32",
                 style="torchscript", status="ok", kernels=1, kernels_ascend=1, kernels_host=0)
        return r

    records = [record("bert", "b1"), record("resnet", "b1"), record("bert", "b16")]
    text = markdown.render_markdown({"header": {"socs": ["Ascend910B1"]}, "records": records})
    headings = [line for line in text.splitlines() if line.startswith(("## bert", "## resnet",
                                                                      "### "))]
    assert headings == ["## bert", "### bert b1 float32 (torchscript export)",
                        "### bert b16 float32 (torchscript export)", "## resnet",
                        "### resnet b1 float32 (torchscript export)"]


def test_cli_lists_and_filters_configurations(capsys):
    assert cli.main(["--quick", "--list", "--model", "resnet50"]) == 0
    assert capsys.readouterr().out.startswith("resnet50/tiny/float32")
    assert cli.main(["--list", "--config", "no_such_config"]) == 2
    with pytest.raises(SystemExit):
        cli.main(["--baseline", "fastest"])


# ---- partial reruns merge into results.json --------------------------------------------------
def _fake_record(model, config, baseline, dtype="float32", **fields):
    record = dict.fromkeys(harness.RESULT_KEYS)
    record.update(model=model, config=config, baseline=baseline, dtype=dtype,
                  style="torchscript", status="ok", onnx_nodes=3, kernels=2, kernels_ascend=2,
                  kernels_host=0, gm_bytes=1000, compulsory_bytes=500,
                  matmul_boundary_bytes=800, matmul_macs=10, stage_s={},
                  est_latency_us=dict.fromkeys(harness.SOCS),
                  roofline_us=dict.fromkeys(harness.SOCS))
    record.update(fields)
    return record


def test_a_partial_rerun_replaces_only_its_own_records(tmp_path):
    out = tmp_path / "results.json"
    first = {"header": {"commit": "c1" * 20, "date": "2026-11-29T10:00:00+00:00"},
             "records": [_fake_record("bert_base", "b1_s8", b, kernels=k)
                         for b, k in (("op_by_op", 50), ("conservative", 20))]
             + [_fake_record("resnet50", "b1_64", "conservative", kernels=56)]}
    results_file.write_results(out, results_file.merge_results(None, first))
    # a rerun of one baseline of one configuration, at a later commit
    second = {"header": {"commit": "c2" * 20, "date": "2026-11-29T12:00:00+00:00"},
              "records": [_fake_record("bert_base", "b1_s8", "conservative", kernels=18),
                          _fake_record("bert_base", "b1_s8", "conservative", "float16",
                                       kernels=17)]}
    merged = results_file.merge_results(results_file.load_results(out), second)
    results_file.write_results(out, merged)
    on_disk = json.loads(out.read_text())
    rows = {results_file.record_key(r): (r["kernels"], r["commit"][:2])
            for r in on_disk["records"]}
    assert rows == {("bert_base", "b1_s8", "op_by_op", "float32"): (50, "c1"),
                    ("bert_base", "b1_s8", "conservative", "float32"): (18, "c2"),
                    ("resnet50", "b1_64", "conservative", "float32"): (56, "c1"),
                    ("bert_base", "b1_s8", "conservative", "float16"): (17, "c2")}
    # replaced in place, new keys appended; the header lists both runs, oldest first
    assert [r["baseline"] for r in on_disk["records"]][:2] == ["op_by_op", "conservative"]
    assert [run["commit"][:2] for run in on_disk["header"]["runs"]] == ["c1", "c2"]
    text = markdown.render_markdown(on_disk)
    assert f"`{'c1' * 20}` 2026-11-29T10:00:00+00:00: bert_base b1_s8 float32 (op_by_op)" in text
    assert f"`{'c2' * 20}` 2026-11-29T12:00:00+00:00: bert_base b1_s8 float32 (conservative)" \
        in text
    assert "records by commit (2 runs)" in text
    # a run that re-measures everything the first run owned drops it from the header
    third = {"header": {"commit": "c3" * 20, "date": "2026-11-29T13:00:00+00:00"},
             "records": [_fake_record("bert_base", "b1_s8", "op_by_op"),
                         _fake_record("resnet50", "b1_64", "conservative")]}
    again = results_file.merge_results(on_disk, third)
    assert [run["commit"][:2] for run in again["header"]["runs"]] == ["c2", "c3"]


def test_a_skipped_record_keeps_the_earlier_measurement():
    old = {"header": {"commit": "a", "date": "d1"},
           "records": [_fake_record("m", "c", "conservative", kernels=7)]}
    new = {"header": {"commit": "b", "date": "d2"},
           "records": [_fake_record("m", "c", "conservative", status="skipped", kernels=None),
                       _fake_record("m", "c2", "conservative", status="skipped")]}
    merged = results_file.merge_results(old, new)["records"]
    assert [(r["config"], r["status"], r["kernels"], r["commit"]) for r in merged] == [
        ("c", "ok", 7, "a"), ("c2", "skipped", 2, "b")]


def test_run_benchmarks_merges_into_an_existing_file_and_refuses_a_corrupt_one(tmp_path):
    out = tmp_path / "results.json"
    kept = _fake_record("resnet50", "b1_64", "aggressive", kernels=56)
    results_file.write_results(out, {"header": {"commit": "old", "date": "d0"},
                                     "records": [kept]})
    results = harness.run_benchmarks(harness.QUICK_CONFIGS[:1], ["op_by_op"], out,
                                     max_minutes=0)  # skipped: no build, still merged
    on_disk = json.loads(out.read_text())
    assert on_disk == json.loads(json.dumps(results))
    assert [(r["baseline"], r["commit"]) for r in on_disk["records"]] == [
        ("aggressive", "old"), ("op_by_op", results["header"]["commit"])]
    fresh = harness.run_benchmarks(harness.QUICK_CONFIGS[:1], ["op_by_op"], out,
                                   max_minutes=0, merge=False)
    assert [r["baseline"] for r in fresh["records"]] == ["op_by_op"]
    assert not list(tmp_path.glob(".tmp_*"))  # atomic writes leave no temporary file behind
    out.write_text('{"header": {},\n "records": [oops]}')
    with pytest.raises(results_file.ResultsFileError, match=r"results.json: line 2"):
        harness.run_benchmarks(harness.QUICK_CONFIGS[:1], ["op_by_op"], out, max_minutes=0)
    assert cli.main(["--quick", "--model", "resnet50", "--baseline", "op_by_op",
                     "--max-minutes", "0", "--output", str(out), "--markdown",
                     str(tmp_path / "B.md"), "--charts-dir", str(tmp_path)]) == 2
    assert "oops" in out.read_text()  # the corrupt file is left for the person to fix


# ---- the error metric -----------------------------------------------------------------------
def test_a_known_perturbation_gives_the_expected_error():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((1, 8, 50)) * 40).astype(np.float32)
    hidden = rng.standard_normal((1, 8, 16)).astype(np.float32)
    got = [logits.copy(), hidden.copy()]
    got[0][0, 3, 7] += 0.5  # one logit off by 0.5
    got[1][0, 0, 0] -= 0.25
    metrics = harness.error_metrics(got, [logits, hidden])
    want_rel = max(0.5 / np.abs(logits).max(), 0.25 / np.abs(hidden).max())
    assert metrics["max_abs_err"] == pytest.approx(0.5, rel=1e-6)  # float32 rounding of +0.5
    assert metrics["max_rel_err"] == pytest.approx(want_rel, rel=1e-5)
    assert metrics["ref_max_abs"] == pytest.approx(np.abs(logits).max())
    assert metrics["nonfinite_outputs"] == 0
    assert harness.error_metrics([logits], [logits])["max_abs_err"] == 0.0


def test_nan_or_inf_in_the_output_is_an_infinite_error_not_zero():
    ref = [np.array([[1.0, -2.0], [3.0, -np.inf]], np.float32)]
    got = [ref[0].copy()]
    assert harness.error_metrics(got, ref)["max_rel_err"] == 0.0  # the same -inf agrees
    got[0][0, 1] = np.nan
    got[0][1, 0] = np.inf
    metrics = harness.error_metrics(got, ref)
    assert metrics["max_abs_err"] == metrics["max_rel_err"] == float("inf")
    assert metrics["nonfinite_outputs"] == 2 and metrics["ref_max_abs"] == 3.0
    record = _fake_record("gpt2_small", "b1_s8", "conservative", **metrics)
    row = next(line for line in markdown.render_markdown({"records": [record]}).splitlines()
               if line.startswith("| conservative"))
    assert "inf (2 NaN/inf values)" in row


# ---- large configurations: compiled and estimated, never run on the emulator ----------------
ISSUE_CONFIGS = {("bert_base", "b1_s128"), ("bert_base", "b16_s512"), ("resnet50", "b1_224"),
                 ("resnet50", "b32_224"), ("gpt2_medium", "b1_s512"),
                 ("gpt2_medium", "b8_s512")}


def test_the_issue_configurations_are_listed_in_both_dtypes():
    listed = {(c.model, c.name, c.dtype) for c in harness.FULL_CONFIGS}
    assert {(m, n, d) for m, n in ISSUE_CONFIGS for d in ("float16", "float32")} <= listed
    chosen = harness.select_configs(harness.FULL_CONFIGS, ["gpt2_medium"], ["b8_s512"],
                                    ["float16"])
    assert [c.key for c in chosen] == ["gpt2_medium/b8_s512/float16"]
    assert dict(chosen[0].knobs) == {"batch": 8, "seq": 512}


def test_the_size_threshold_decides_whether_the_emulator_runs(quick_results):
    config = next(c for c in harness.QUICK_CONFIGS if c.model == "bert_base")
    ran = _record(quick_results[0], "bert_base")  # under the default threshold: run, compared
    assert ran["matmul_macs"] <= harness.RUN_LIMIT_MACS and ran["max_abs_err"] is not None
    (record,) = harness.benchmark_config(config, ["conservative"],
                                         run_limit_macs=ran["matmul_macs"] - 1,
                                         measure_cold=False)
    assert record["status"] == "ok", record["error"]
    assert record["kernels"] == ran["kernels"] and record["gm_bytes"] == ran["gm_bytes"]
    assert record["max_abs_err"] is None and record["emulator_gm_bytes"] is None
    assert "run" not in record["stage_s"] and "onnxruntime" not in record["stage_s"]


@pytest.mark.slow  # builds the full-size ONNX models (GPT-2 medium: 1.4 GB of weights)
def test_every_issue_configuration_is_above_the_run_threshold():
    from benchmarks.graph_bytes import graph_references

    for config in harness.FULL_CONFIGS:
        if (config.model, config.name) in ISSUE_CONFIGS and config.dtype == "float16":
            macs = graph_references(config.onnx_model())["matmul_macs"]
            assert macs > harness.RUN_LIMIT_MACS, config.key


def test_the_tables_divide_hbm_bytes_by_the_bounds():
    """GM, HBM and L2 bytes side by side; the ratios to the bounds use HBM bytes, and a record
    made before the split says n/a instead of dividing GM bytes."""
    split = _fake_record("bert_base", "b1_s8", "aggressive", gm_bytes=1000, hbm_bytes=600,
                         l2_bytes=400)
    old = _fake_record("bert_base", "b1_s8", "op_by_op", gm_bytes=1000)
    text = markdown.render_markdown({"header": {"socs": ["Ascend910B1"]},
                                     "records": [old, split]})
    assert "| HBM MB | L2 MB (est.) | x compulsory (HBM) |" in text
    row = next(line for line in text.splitlines() if line.startswith("| aggressive |"))
    assert "| 0.001 | 0.001 | 0.000 | 1.20x | 0.75x |" in row  # 600 / 500, 600 / 800
    row = next(line for line in text.splitlines() if line.startswith("| op_by_op |"))
    assert f"| 0.001 | {markdown.NA} | {markdown.NA} | {markdown.NA} | {markdown.NA} |" in row
    figures = harness.report_figures({"groups": [
        {"on_npu": True, "gm_bytes": 10, "hbm_bytes": 6, "l2_bytes": 4},
        {"on_npu": False, "gm_bytes": 5, "hbm_bytes": 5, "l2_bytes": 0}]})
    assert (figures["gm_bytes"], figures["hbm_bytes"], figures["l2_bytes"]) == (15, 11, 4)
    assert harness.report_figures({"groups": [{"on_npu": True, "gm_bytes": 10}]})[
        "hbm_bytes"] is None


def test_the_tables_show_the_range_of_host_submission_beside_each_estimate():
    """An estimate on the device's timeline, then in brackets the same launches end to end at
    the low and the high end of host submission; a record made before launches were modelled
    so shows the estimate alone, and the prose says what the two ends are."""
    soc = "Ascend910B1"
    new = _fake_record("bert_base", "b1_s8", "aggressive", est_latency_us={soc: 14.94},
                       est_latency_us_low={soc: 23.51}, est_latency_us_high={soc: 52.33},
                       roofline_us={soc: 9.0})
    old = _fake_record("bert_base", "b1_s8", "op_by_op", est_latency_us={soc: 30.0},
                       roofline_us={soc: 9.0})
    for key in ("est_latency_us_low", "est_latency_us_high"):
        del old[key]  # as in results.json files written before these keys existed
    text = markdown.render_markdown({"header": {"socs": [soc]}, "records": [old, new]})
    row = next(line for line in text.splitlines() if line.startswith("| aggressive |"))
    assert "| 14.9 (23.5-52.3) / 9.0 |" in row
    row = next(line for line in text.splitlines() if line.startswith("| op_by_op |"))
    assert "| 30.0 / 9.0 |" in row
    assert "low and the high end of the host submission time" in text
    assert "8.6 and 23.7 us" in text
