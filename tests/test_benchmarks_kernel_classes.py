"""Per-kernel efficiency (benchmarks/kernel_classes.py): the class rules, each class's bound,
the figure of one small build as the harness records it, and its table in BENCHMARKS.md."""
from __future__ import annotations

import pytest

import tvm_ascend
from benchmarks import harness, markdown
from benchmarks.kernel_classes import (CLASSES, LARGE_MATMUL, efficiency, kernel_bound_us,
                                       kernel_class, report_efficiency)
from tvm_ascend.soc import get_soc


def _matmul(m, n, k, batch=1, b_batched=False, dtype="float16", time_us=100.0,
            template="matmul"):
    macs = batch * m * n * k
    return {"id": "G0", "on_npu": True, "launch": True,
            "estimate": {"time_us": time_us, "roofline_us": 1.0},
            "tiling": {"template": template, "work": {"cube_macs": macs},
                       "plan": {"shape": {"batch": batch, "m": m, "n": n, "k": k,
                                          "b_batched": b_batched, "dtype": dtype}}}}


def _conv(kh, kw):
    return {"on_npu": True, "estimate": {"time_us": 5.0, "roofline_us": 1.0},
            "tiling": {"template": "conv2d", "work": {"cube_macs": 1 << 20},
                       "plan": {"shape": {"kh": kh, "kw": kw, "dtype": "float16"}}}}


def test_matmul_classes_follow_the_issue_threshold():
    big = LARGE_MATMUL
    assert kernel_class(_matmul(big, big, big)) == "large_matmul"
    assert kernel_class(_matmul(big, big, big - 16)) == "matmul"  # K short of the threshold
    # a batch over shared weights folds into M; a batch of independent products does not
    assert kernel_class(_matmul(big // 4, big, big, batch=4)) == "large_matmul"
    assert kernel_class(_matmul(big // 4, big, big, batch=4, b_batched=True)) == "matmul"
    assert kernel_class(_matmul(big, big, big, template="matmul_rows")) == "large_matmul"


def test_attention_conv_vector_and_host_groups():
    assert kernel_class({"on_npu": True, "tiling": {"template": "attention"}}) == "attention"
    assert kernel_class(_conv(3, 3)) == "conv3x3"
    assert kernel_class(_conv(1, 1)) == "conv"
    assert kernel_class(_conv(7, 7)) == "conv"
    assert kernel_class({"on_npu": True, "tiling": {"template": "row_reduce"}}) == "vector"
    assert kernel_class({"on_npu": False, "estimate": {"time_us": 8.0}}) is None
    assert efficiency([{"on_npu": False, "estimate": {"time_us": 8.0}}], "Ascend910B1") == {}


@pytest.mark.parametrize("dtype,rate", [("float16", 1.0), ("float32", 0.5)])
def test_a_cube_kernel_is_measured_against_its_cube_time(dtype, rate):
    soc = get_soc("Ascend910B1")
    group = _matmul(4096, 4096, 4096, dtype=dtype)
    cube_us = 4096 ** 3 / (soc.cube_macs_per_cycle_fp16 * rate * soc.ai_cores
                           * soc.clock_mhz * 1e6) * 1e6
    assert kernel_bound_us(group, soc) == pytest.approx(cube_us)
    found = efficiency([group, _matmul(4096, 4096, 4096, dtype=dtype, time_us=300.0)],
                       "Ascend910B1")["large_matmul"]
    assert found["kernels"] == 2 and found["est_us"] == 400.0
    assert found["ratio"] == pytest.approx(400.0 / (2 * cube_us), abs=5e-4)
    assert found["worst"] == pytest.approx(300.0 / cube_us, abs=5e-4)


def test_a_vector_kernel_is_measured_against_its_roofline():
    group = {"on_npu": True, "estimate": {"time_us": 12.0, "roofline_us": 4.0},
             "tiling": {"template": "elementwise", "work": {"cube_macs": 0}}}
    assert kernel_bound_us(group, get_soc("Ascend910B1")) == 4.0
    assert efficiency([group], "Ascend910B1")["vector"]["ratio"] == 3.0


def test_a_small_build_gives_every_launch_a_class_and_no_ratio_below_one():
    """The figure the harness records, on the tiny BERT: every NPU launch in one class, and
    no estimate below its own bound (the timing model never beats its roofline)."""
    config = next(c for c in harness.QUICK_CONFIGS if c.model == "bert_base")
    report = tvm_ascend.build(config.onnx_model(), config=harness.compile_config(
        "aggressive", "Ascend910B1")).fusion_report()
    found = report_efficiency(report)
    assert harness.report_figures(report)["kernel_efficiency"] == found
    assert set(found) <= set(CLASSES) and {"matmul", "attention", "vector"} <= set(found)
    launched = [g for g in report["groups"] if g["on_npu"] and g["launch"]]
    assert sum(e["kernels"] for e in found.values()) == len(launched)
    for entry in found.values():
        assert entry["ratio"] >= 1.0 and entry["est_us"] > 0


def test_the_table_prints_each_class_and_na_for_older_records():
    record = dict.fromkeys(harness.RESULT_KEYS)
    record.update(model="bert_base", config="b1_s8", dtype="float16", baseline="aggressive",
                  status="ok", kernel_efficiency={"Ascend910B1": {
                      "matmul": {"kernels": 3, "est_us": 30.0, "bound_us": 10.0, "ratio": 3.0,
                                 "worst": 4.5},
                      "vector": {"kernels": 1, "est_us": 2.0, "bound_us": 1.0, "ratio": 2.0,
                                 "worst": 2.0}}, "Ascend310P3": None})
    older = {**record, "baseline": "conservative"}
    older.pop("kernel_efficiency")
    lines = markdown.efficiency_lines([record, older], ["Ascend910B1", "Ascend310P3"])
    text = "\n".join(lines)
    assert ("| bert_base b1_s8 float16 | aggressive | - | 3.00x (3) [worst 4.50x] | - | - | - "
            "| 2.00x (1) |") in text
    assert ("| bert_base b1_s8 float16 | conservative | n/a | n/a | n/a | n/a | n/a "
            "| n/a |") in text
    # a SoC no record has the figure for: one line, not a table of n/a
    assert "Ascend310P3: n/a (no record carries the figure yet)" in text
    assert text.count("| configuration | baseline |") == 1
