"""The timing model against published measurements (benchmarks/calibration.py), the one L2
rule (schedules/l2_reuse.py) and the uncertainty bands every estimate carries."""
import json
from pathlib import Path

import pytest

from benchmarks import calibration
from tvm_ascend import CompileConfig, ir_attrs
from tvm_ascend.cost_model import bands
from tvm_ascend.cost_model.timing import estimate_kernel
from tvm_ascend.kernel_record import record_of
from tvm_ascend.pipeline import partition_for_ascend
from tvm_ascend.schedules import TEMPLATES, knobs_from_json, template_by_name
from tvm_ascend.soc import get_soc

REPO = Path(__file__).resolve().parent.parent


def _planned(model, soc, **fields):
    """(tiling, estimate, prim) of the one NPU kernel of ``model``."""
    config = CompileConfig(soc_version=soc, build_cache=False, **fields)
    result = partition_for_ascend(model, config)
    func = next(f for _, f in result.mod.functions.items()
                if f.attrs and f.attrs.get("Codegen") == "ascend")
    record = record_of(func)
    template = template_by_name(record.template)
    prim = func.attrs[ir_attrs.PRIM_FUNC]
    _, tiling = template.schedule(prim, config.soc,
                                  knobs_from_json(template.name, record.knobs or {}))
    return tiling, estimate_kernel(prim, tiling, config.soc), prim


def test_gemm_rows_within_the_aim():
    """The hand-tuned and aclnn GEMMs on the 24-core die: every ratio in 0.8-1.25x (a
    regression here means a change moved the cube model away from measured kernels)."""
    rows = calibration.run_rows(only="gemm", log=lambda *_: None)
    assert len(rows) == 5
    for row in rows:
        assert row["within"], row
        assert not row["algorithm"]


def test_vector_rows_calibrate_the_vector_band():
    """The lerp kernels on a 910B2C calibrate the vector class beside the copy; the
    fused-add RMSNorm rows say why the project's two-kernel build is off and calibrate
    nothing."""
    rows = calibration.run_rows(only="lerp", log=lambda *_: None)
    assert [r["kernel_class"] for r in rows] == ["vector", "vector"]
    for row in rows:
        assert row["within"] and not row["algorithm"], row
    norms = calibration.run_rows(only="add_rms_norm", log=lambda *_: None)
    assert len(norms) == 3
    for row in norms:
        assert row["built"].startswith("2 kernels") and row["algorithm"], row


def test_vector_band_comes_from_its_rows():
    """Three vector rows (the copy and two lerp kernels) give the shipped vector band; it is
    no longer the aim the suite widens a one-row class to."""
    payload = json.loads((REPO / "benchmarks" / "calibration.json").read_text())
    vector = calibration.bands(payload["rows"])["vector"]
    assert vector["rows"] == ["copy_1gib_a3", "lerp_64m_fp16_910b2c", "lerp_256m_fp16_910b2c"]
    assert calibration.GOOD[0] < vector["low"] <= vector["high"] < calibration.GOOD[1]
    assert bands.band_for_template("elementwise").high == vector["high"]


def test_reuse_distance_decides_what_l2_serves():
    """A 7680^3 GEMM's operands (236 MB) exceed the 192 MB L2, but its walk's reuse distance
    does not: its re-reads are L2 hits. On a 96 MB L2 (910B4) it depends on the rounds: the
    default asynchronous rounds of at most 14 base tiles walk small blocks, whose re-reads
    still fit; one round a core (``round_tiles=0``: each of the 20 cores a 384-row block of A
    against all of B, 120 MB in flight) misses, so A's re-reads are HBM traffic, but the
    cores read each B panel together: 19 of every 20 reads of B are L2 hits
    (``blocks_in_flight``)."""
    model = calibration.matmul_model(7680, 7680, 7680)
    tiling, _, _ = _planned(model, "Ascend910B2")
    unique = 2 * 7680 * 7680 * 2
    assert tiling.work.l2_operand_bytes == tiling.work.cube_operand_bytes - unique
    small, _, prim = _planned(model, "Ascend910B4")
    assert small.work.round_tiles <= 14
    assert small.work.l2_operand_bytes == small.work.cube_operand_bytes - unique
    _, whole = template_by_name("matmul").schedule(
        prim, get_soc("Ascend910B4"), knobs_from_json("matmul", {"round_tiles": 0}))
    assert whole.work.round_tiles > 14 and whole.plan.single_n == 7680
    assert whole.work.l2_operand_bytes == (whole.cores - 1) * 7680 * 7680 * 2


def test_attention_rereads_are_l2_hits_by_the_same_rule():
    """K and V are read once per query block: past Q + K + V the reads are L2 hits when a
    pass fits, as for the matmul (before issue #18 attention charged them at HBM speed)."""
    model = calibration.attention_model(2, 4, 512, 512, 64)
    tiling, _, _ = _planned(model, "Ascend910B2", fusion_level="aggressive")
    assert tiling.template == "attention"
    unique = 2 * 4 * 3 * 512 * 64 * 2
    reads = tiling.gm_read_bytes - tiling.work.workspace_read_bytes
    assert reads > unique
    assert tiling.work.l2_operand_bytes == reads - unique


def test_attention_rows_count_both_aivs_of_each_core_as_clients():
    """A FlashAttention figure on n AI cores of 910B ran on their 2n AIVs: the row plans the
    template's variants on n cores, the 1:2-mix (flash) one with 2n AIV clients (regression:
    its ``cores`` knob counts clients, so "1 core" was one AIV), and keeps the faster."""
    row = calibration._flash_row(1, 1024, 40.0)
    estimate = row.estimate()
    assert "on 1 AI cores (2 AIV clients)" in estimate.built, estimate.built
    assert "'method': 'flash'" in estimate.built and "'cores': 2" in estimate.built
    model = calibration.attention_model(1, 1, 128, 1024, 128)
    one_aiv = calibration._single_kernel_us(model, calibration.DIE,
                                            {"cores": 1, "method": "flash"},
                                            fusion_level="aggressive")
    assert estimate.time_us < one_aiv.time_us


def test_reads_and_writes_share_the_streaming_bandwidth():
    """A copy moves its reads and writes through one HBM: the estimate is at least all its
    bytes at the achieved streaming rate (regression: MTE2 and MTE3 once each had the whole
    bandwidth, so a copy ran at twice what HBM streams), and never below the nominal roofline."""
    soc = get_soc("Ascend910B2")
    tiling, est, _ = _planned(calibration.copy_model(1 << 24), "Ascend910B2")
    moved = tiling.gm_read_bytes + tiling.gm_write_bytes
    assert est.time_us >= moved / (soc.hbm_stream_gbps * 1e3)
    assert est.time_us >= est.roofline_us + est.launch_us
    assert soc.hbm_stream_gbps < soc.gm_bandwidth_gbps


def test_row_units_become_times():
    row = calibration.Row("r", "vector", "Ascend910B2", "w", 1.0, "TB/s", "s",
                          lambda: None, work=2e12)
    assert row.measured_us() == pytest.approx(2e6)
    assert row.in_unit(1e6) == pytest.approx(2.0)
    rate = calibration.Row("m", "model", "Ascend310P3", "w", 200.0, "items/s", "s",
                           lambda: None, work=8)
    assert rate.measured_us() == pytest.approx(40000.0)


def test_bands_from_rows():
    rows = [{"name": "a", "kernel_class": "cube", "ratio": 0.9, "algorithm": ""},
            {"name": "b", "kernel_class": "cube", "ratio": 1.1, "algorithm": ""},
            {"name": "c", "kernel_class": "vector", "ratio": 0.98, "algorithm": ""},
            {"name": "d", "kernel_class": "attention", "ratio": 3.0, "algorithm": "other"}]
    table = calibration.bands(rows)
    assert table["cube"] == {"low": 0.9, "high": 1.1, "rows": ["a", "b"]}
    # one row says nothing about the spread: widened to the aim
    assert (table["vector"]["low"], table["vector"]["high"]) == calibration.GOOD
    assert "attention" not in table  # a row of another algorithm class calibrates nothing


def test_shipped_bands_match_the_calibration_rows():
    """The package's bands are what benchmarks/calibration.json's rows give (no drift)."""
    payload = json.loads((REPO / "benchmarks" / "calibration.json").read_text())
    shipped = json.loads(bands.BANDS_PATH.read_text())
    assert shipped["bands"] == calibration.bands(payload["rows"])
    assert shipped["bands"] == payload["bands"]


def test_every_template_has_a_band_class():
    assert {t.name for t in TEMPLATES} <= set(bands.TEMPLATE_CLASSES)
    cube = bands.band_for_template("matmul")
    assert cube.calibrated and 0 < cube.low <= cube.high
    # where the true time lies: the estimate divided by the ratios measured (all above 1
    # means the model is pessimistic, and the band lies below the estimate)
    assert cube.interval(100.0) == (100.0 / cube.high, 100.0 / cube.low)
    host = bands.band_for_template(None)
    assert not host.calibrated and host.low <= cube.low and host.high >= cube.high


def test_report_carries_bands_and_hbm_l2_apart():
    from tests.onnx_models import ModelBuilder

    mb = ModelBuilder("float32")
    x = mb.input("x", [64, 128])
    w = mb.const(mb.rng.standard_normal((128, 96)).astype("float32"), "w")
    mb.output(mb.node("Relu", [mb.node("MatMul", [x, w])]), [64, 96])
    from tvm_ascend.pipeline import build

    lib = build(mb.model(), config=CompileConfig(build_cache=False))
    report = lib.fusion_report()
    est = report["estimate"]
    text = str(lib.report).splitlines()
    assert text[1].startswith(f"estimate (timing model, not measured): {est['latency_us']:.1f}"
                              f" us (band {est['latency_band_us'][0]:.1f}-")
    assert "MB HBM +" in text[1] and "MB L2" in text[1]
    low, high = est["latency_band_us"]
    assert 0 < low <= high
    assert low == pytest.approx(sum(g["estimate"].get("band_us", (0, 0))[0]
                                    for g in report["groups"]), abs=1e-2)
    assert est["gm_bytes"] == est["hbm_bytes"] + est["l2_bytes"]
    for group in report["groups"]:
        if "time_us" in group["estimate"]:
            lo, hi = group["estimate"]["band_us"]
            template = (group.get("tiling") or {}).get("template")
            expected = bands.band_for_template(template).interval(group["estimate"]["time_us"])
            assert (lo, hi) == pytest.approx(expected, abs=1e-3)
            assert group["estimate"]["band"]


def test_markdown_section_has_plain_atc_rows():
    payload = {"date": "d", "commit": "c", "bands": {"cube": {"low": 0.9, "high": 1.1,
                                                              "rows": ["g"]}},
               "rows": [{"name": "g", "soc": "Ascend910B2", "published": 10.0, "unit": "us",
                         "estimate": 11.0, "ratio": 1.1, "algorithm": "", "workload": "w",
                         "source": "s", "published_us": 10.0, "estimate_us": 11.0},
                        {"name": "bert", "soc": "Ascend310P3", "published": 200.0,
                         "unit": "items/s", "estimate": 100.0, "ratio": 2.0,
                         "algorithm": "other kernels", "workload": "w", "source": "s",
                         "published_us": 40000.0, "estimate_us": 80000.0,
                         "other_builds_us": {"op_by_op": 120000.0, "aggressive": 60000.0}}]}
    text = "\n".join(calibration.markdown_lines(payload))
    assert "| g | Ascend910B2 | 10 us | 11 us (est.) | 1.100 | yes |" in text
    assert "no: other kernels" in text
    assert "| bert | 40.00 (200.0) | 80.00 (100.0) | 120.00 (66.7) | 60.00 (133.3) |" in text
    assert "| cube | 0.900 | 1.100 | g |" in text
