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
from benchmarks import charts, harness, markdown
from benchmarks.models import bert
from conftest import TOLERANCES

MODELS = ["bert_base", "resnet50", "gpt2_small", "gpt2_medium"]


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
    for soc in harness.SOCS:  # no estimate may beat its roofline bound
        estimate, roofline = record["est_latency_us"][soc], record["roofline_us"][soc]
        if estimate is not None:
            assert roofline is not None and estimate >= roofline > 0


def test_results_file_has_header_and_one_record_per_config_and_baseline(quick_results):
    results, out = quick_results
    on_disk = json.loads(out.read_text())
    assert on_disk["records"] == json.loads(json.dumps(results["records"]))
    header = on_disk["header"]
    assert header["date"] and header["machine"]["cpus"] >= 1
    assert "commit" in header and header["socs"] == list(harness.SOCS)
    keys = [(r["model"], r["config"], r["dtype"], r["baseline"]) for r in on_disk["records"]]
    assert len(keys) == len(set(keys)) == len(harness.QUICK_CONFIGS)


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


def test_cli_lists_and_filters_configurations(capsys):
    assert cli.main(["--quick", "--list", "--model", "resnet50"]) == 0
    assert capsys.readouterr().out.startswith("resnet50/tiny/float32")
    assert cli.main(["--list", "--config", "no_such_config"]) == 2
    with pytest.raises(SystemExit):
        cli.main(["--baseline", "fastest"])
