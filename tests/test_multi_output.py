"""MultiOutputFusion: a shared producer merged into the one reader a template tiles it with,
the merged kernel writing the shared result as a second output for the other readers.

A pre-LN layer's residual sum h is read by the next LayerNorm and by a later residual Add; at
the aggressive level the matmul that makes h takes the LayerNorm in (matmul_rows) and writes
h as well. Numerics against onnxruntime on both SoCs with tails and several cores, the plan's
GM bytes and UB equal to the emulator's, the report naming the exported result, the fusion
plan round trip, and the cases that stay as before."""
from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest

import tvm_ascend
from benchmarks.models.gpt2 import decoder_layer_inputs, decoder_layer_model
from conftest import assert_close, run_onnxruntime
from onnx_models import ModelBuilder


def _pre_ln(a_shape, n, dtype, norm=True, seed=3, identity_cast=False):
    """h = x @ W1 + b1 + r; y = LayerNorm(h) (ReLU(h) when not ``norm``); out = y @ W2 + h:
    h is read by the norm and again by the last Add. With ``identity_cast`` h is Cast to its
    own dtype first, as LLaMA's TorchScript export does before every RMSNorm."""
    b = ModelBuilder(dtype, seed=seed)
    k = a_shape[-1]
    out_shape = tuple(a_shape[:-1]) + (n,)
    x = b.input("x", a_shape)
    w1 = b.const(b.rng.standard_normal((k, n)) / np.sqrt(k), "w1")
    h = b.node("Add", [b.node("MatMul", [x, w1]), b.const(b.rng.standard_normal(n) * 0.1, "b1")])
    h = b.node("Add", [h, b.input("r", out_shape)])
    if identity_cast:
        h = b.node("Cast", [h], to=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    if norm:
        gamma = b.const(b.rng.uniform(0.8, 1.2, n), "gamma")
        beta = b.const(b.rng.uniform(-0.1, 0.1, n), "beta")
        y = b.node("LayerNormalization", [h, gamma, beta], axis=-1, epsilon=1e-5)
    else:
        y = b.node("Relu", [h])
    w2 = b.const(b.rng.standard_normal((n, n)) / np.sqrt(n), "w2")
    out = b.node("Add", [b.node("MatMul", [y, w2]), h])
    b.output(out, out_shape)
    return b, h


def _switch_off(tmp_path) -> str:
    path = tmp_path / "switch.cfg"
    path.write_text("MultiOutputFusion:off\n")
    return str(path)


def _exporting(report) -> list:
    return [g for g in report["groups"] if g.get("exports")]


@pytest.mark.parametrize("soc,dtype", [("Ascend910B1", "float32"), ("Ascend310P3", "float16")])
def test_pre_ln_residual_is_exported_by_the_matmul_layernorm_kernel(soc, dtype):
    b, h = _pre_ln((3, 37, 40), 100, dtype)  # 111 rows, N=100: tails on both axes
    model = b.model()
    config = tvm_ascend.CompileConfig(fusion_level="aggressive", soc_version=soc)
    lib = tvm_ascend.build(model, config=config)
    report = lib.fusion_report()
    # matmul + bias + residual + LayerNorm (exporting h), then matmul + h: two kernels
    assert report["kernels"] == {"ascend": 2, "host": 0}, report["unfused_edges"]
    (group,) = _exporting(report)
    assert group["rules"] == ["MatMulEpilogueFusion", "LayerNormFusion", "MultiOutputFusion"]
    assert [e["node"] for e in group["exports"]] == [h]
    assert f"exports its result {h} for its other reader(s)" in group["reason"]
    assert f"; exports {h}" in str(lib.report)
    other = next(g for g in report["groups"] if g["on_npu"] and g is not group)
    assert group["exports"][0]["read_by"] == [other["name"]]
    # the reader reads both outputs: the LayerNorm's (its MatMul's operand) and h
    reasons = [e["reason"] for e in report["unfused_edges"]
               if e["consumer"] == other["id"] and e["producer"] == group["id"]]
    assert len(reasons) == 2
    assert any(f"reads {h}, which kernel" in r and "second output" in r for r in reasons)
    tiling = group["tiling"]
    assert tiling["template"] == "matmul_rows" and tiling["cores"] > 1
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], f"cube/{dtype}")
    launch = next(p for p in lib.profile() if p["kernel"] == group["kernel"])
    # the plan's figures are the emulator's: the second output's write included
    rows, elem = 3 * 37, np.dtype(dtype).itemsize
    assert launch["gm_write_bytes"] == tiling["gm_write_bytes"] >= 2 * rows * 100 * elem
    assert launch["gm_read_bytes"] == tiling["gm_read_bytes"]
    assert launch["peak_ub_bytes"] == tiling["ub_bytes"]
    # one launch block per AIC (on 910B the estimate may pick the tall form's 1:2 mix: two
    # clients an AIC)
    ratio = tiling["work"]["aiv_ratio"]
    assert launch["block_dim"] == -(-tiling["cores"] // ratio) and launch["warnings"] == []


def test_an_export_whose_binding_carries_two_onnx_nodes_compiles():
    """A residual sum Cast to its own dtype is one binding with two ONNX nodes once the Cast is
    removed ("Add\\nCast"); the exporting kernel's provenance comment names both on one line
    (it used to break the line, and the matmul + RMSNorm kernels of LLaMA failed to compile)."""
    b, h = _pre_ln((2, 19, 32), 48, "float32", identity_cast=True)
    model = b.model()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        fusion_level="aggressive", soc_version="Ascend910B1", strict=True))
    report = lib.fusion_report()
    assert report["kernels"] == {"ascend": 2, "host": 0}, report["unfused_edges"]
    (group,) = _exporting(report)
    assert "\n" not in group["reason"] and h in group["reason"]
    for source in lib.kernel_sources().values():
        head = source.split("#include", 1)[0]
        assert all(line.startswith("//") for line in head.splitlines() if line.strip())
    assert_close(lib.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "cube/float32")


def test_switched_off_or_conservative_it_stays_three_kernels(tmp_path):
    b, _ = _pre_ln((2, 24, 32), 64, "float32")
    model = b.model()
    for config in (tvm_ascend.CompileConfig(fusion_level="conservative"),
                   tvm_ascend.CompileConfig(fusion_level="aggressive",
                                            fusion_switch_file=_switch_off(tmp_path))):
        report = tvm_ascend.build(model, config=config).fusion_report()
        assert report["kernels"]["ascend"] == 3 and not _exporting(report)
        assert "MultiOutputFusion" not in report["rule_stats"]


def _wide(n=2304, dtype="float32", seed=5):
    """h = x @ W1 + b1 + r with rows of ``n``; y = LayerNorm(h); outputs y @ W2 and h * 3."""
    b = ModelBuilder(dtype, seed=seed)
    x = b.input("x", (16, 32))
    w1 = b.const(b.rng.standard_normal((32, n)) / np.sqrt(32), "w1")
    h = b.node("Add", [b.node("MatMul", [x, w1]), b.const(b.rng.standard_normal(n) * 0.1, "b1")])
    h = b.node("Add", [h, b.input("r", (16, n))])
    y = b.node("LayerNormalization", [h, b.const(np.ones(n), "gamma"),
                                      b.const(np.zeros(n), "beta")], axis=-1, epsilon=1e-5)
    b.output(b.node("MatMul", [y, b.const(b.rng.standard_normal((n, 8)) / np.sqrt(n), "w2")]),
             (16, 8))
    b.output(b.node("Mul", [h, b.const(np.array(3.0), "three")]), (16, n))
    return b


@pytest.mark.parametrize("case", ["relu", "too_wide"])
def test_a_group_no_template_tiles_with_two_outputs_stays_as_before(case, tmp_path):
    """h read by a ReLU and the last Add: no row kernel, so no template takes the pair with a
    second output and nothing is tried (the report is the one with the rule off); rows of
    2304 float32: matmul-rows refuses them (L0C), the refusal is in the report, and the
    groups are the ones with the rule off."""
    b = _pre_ln((2, 24, 32), 64, "float32", norm=False)[0] if case == "relu" else _wide()
    model = b.model()
    off = tvm_ascend.CompileConfig(fusion_level="aggressive",
                                   fusion_switch_file=_switch_off(tmp_path))
    before = tvm_ascend.build(model, config=off).fusion_report()
    lib = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(fusion_level="aggressive"))
    report = lib.fusion_report()
    assert not _exporting(report)
    assert [g["nodes"] for g in report["groups"]] == [g["nodes"] for g in before["groups"]]
    if case == "relu":
        assert report["unfused_edges"] == before["unfused_edges"]
    else:
        reasons = " ".join(e["reason"] for e in report["unfused_edges"])
        assert "exporting it for the other readers" in reasons and "too wide" in reasons
    for got, want in zip(lib.run(b.feeds), run_onnxruntime(model, b.feeds)):
        assert_close(got, want, "cube/float32")


def test_fusion_plan_names_the_export_and_rebuilds_it(tmp_path):
    b, h = _pre_ln((2, 24, 32), 64, "float32")
    model = b.model()
    dump = tmp_path / "dump"
    config = tvm_ascend.CompileConfig(fusion_level="aggressive", dump_graph=True,
                                      dump_path=str(dump))
    first = tvm_ascend.build(model, config=config).fusion_report()
    plan = json.loads((dump / "fusion_plan.json").read_text())
    (entry,) = [g for g in plan["groups"] if g.get("exports")]
    assert entry["exports"] == [h] and h in entry["nodes"]
    again = tvm_ascend.build(model, config=tvm_ascend.CompileConfig(
        fusion_level="aggressive", fusion_plan_file=str(dump / "fusion_plan.json")))
    report = again.fusion_report()
    assert [g["nodes"] for g in report["groups"]] == [g["nodes"] for g in first["groups"]]
    assert [e["node"] for g in _exporting(report) for e in g["exports"]] == [h]
    assert_close(again.run(b.feeds)[0], run_onnxruntime(model, b.feeds)[0], "cube/float32")


# the dynamo / 310P3 / float16 case runs under -m slow: the default run has 310P3 float16
# exports in test_pre_ln_residual_is_exported_by_the_matmul_layernorm_kernel
@pytest.mark.parametrize("style,soc,dtype", [
    ("torchscript", "Ascend910B1", "float32"),
    pytest.param("dynamo", "Ascend310P3", "float16", marks=pytest.mark.slow)])
def test_gpt2_layer_is_one_kernel_fewer(style, soc, dtype, tmp_path):
    """A GPT-2 block (pre-LN): the out-projection + residual takes LN2 in and exports the
    residual sum for the FFN-down's residual Add: 6 kernels instead of 7."""
    shape = dict(batch=2, seq=40, hidden=72)  # 80 rows, N=72: tails, several cores
    model = decoder_layer_model(style=style, heads=2, dtype=dtype, **shape)
    feeds = decoder_layer_inputs(style=style, dtype=dtype, **shape)
    on = tvm_ascend.CompileConfig(fusion_level="aggressive", soc_version=soc)
    lib = tvm_ascend.build(model, config=on)
    report = lib.fusion_report()
    off = tvm_ascend.CompileConfig(fusion_level="aggressive", soc_version=soc,
                                   fusion_switch_file=_switch_off(tmp_path))
    before = tvm_ascend.build(model, config=off).fusion_report()
    assert report["kernels"] == {"ascend": 6, "host": 0}
    assert before["kernels"]["ascend"] == 7
    (group,) = _exporting(report)
    assert [e["node"] for e in group["exports"]] == ["h.attn.residual"]
    assert group["tiling"]["template"] == "matmul_rows" and group["tiling"]["cores"] > 1
    assert report["estimate"]["latency_us"] < before["estimate"]["latency_us"]
    assert_close(lib.run(feeds)[0], run_onnxruntime(model, feeds)[0], f"cube/{dtype}")


def test_build_cache_and_export_library_keep_both_outputs(tmp_path, monkeypatch, caplog):
    """A whole build from the build cache, and the exported library loaded again, run the
    two-output kernel with the same numbers."""
    monkeypatch.setenv("TVM_ASCEND_BUILD_CACHE", "1")
    monkeypatch.setenv("TVM_ASCEND_CACHE_DIR", str(tmp_path / "cache"))
    b, _ = _pre_ln((2, 24, 32), 64, "float32")
    model = b.model()
    config = tvm_ascend.CompileConfig(fusion_level="aggressive")
    caplog.set_level(logging.INFO, logger="tvm_ascend")
    first = tvm_ascend.build(model, config=config)
    out = first.run(b.feeds)[0]
    again = tvm_ascend.build(model, config=config)
    assert sum("build cache hit" in r.getMessage() for r in caplog.records) == 1
    assert _exporting(again.fusion_report()) == _exporting(first.fusion_report())
    np.testing.assert_array_equal(again.run(b.feeds)[0], out)
    loaded = tvm_ascend.load(again.export_library(str(tmp_path / "pre_ln.so")))
    np.testing.assert_array_equal(loaded.run(b.feeds)[0], out)
    assert_close(out, run_onnxruntime(model, b.feeds)[0], "cube/float32")


def test_acl_launcher_copies_both_outputs_back_and_passes_a_syntax_check():
    """The NPU launcher of the two-output kernel: the inputs go to the device, both outputs
    come back (h first, in parameter order), and the unit passes g++ -fsyntax-only against
    the stub ACL declarations (as tests/test_board.py checks single-output units)."""
    import re
    import subprocess

    from build_checks import acl_stub_command, acl_stub_unit
    from tvm_ascend import ir_attrs
    from tvm_ascend.codegen.ascendc_printer import ScheduledKernel, kernel_printer
    from tvm_ascend.codegen.code_buffer import CodeBuffer
    from tvm_ascend.codegen.launcher import emit_acl_launcher
    from tvm_ascend.codegen.npu_unit import npu_unit_source
    from tvm_ascend.kernel_record import record_of
    from tvm_ascend.schedules import template_by_name
    from tvm_ascend.soc import get_soc

    soc = get_soc("Ascend910B1")
    b, _ = _pre_ln((2, 24, 32), 64, "float16")
    result = tvm_ascend.partition_for_ascend(
        b.model(), tvm_ascend.CompileConfig(fusion_level="aggressive"))
    (name, template, func), = [
        (gv.name_hint, template_by_name(record_of(f).template), f.attrs[ir_attrs.PRIM_FUNC])
        for gv, f in result.mod.functions.items()
        if f.attrs and f.attrs.get("Codegen") == "ascend" and record_of(f).template ==
        "matmul_rows"]
    func_s, tiling = template.schedule(func, soc, template.knob_space(func, soc)[0])
    kernel = ScheduledKernel(name, func_s, tiling, {"name": name, "rule": "test", "ops": []})
    printer = kernel_printer(kernel)
    printer.print(CodeBuffer())
    params = printer.kernel_params()
    assert printer.n_outputs == 2
    buf = CodeBuffer()
    emit_acl_launcher(buf, name, printer, tiling.cores, timed=False)
    text = buf.text()
    back = re.findall(r"aclrtMemcpy\(a(\d+)\.data_ptr\(\), \d+, dev(\d+), \d+, "
                      r"ACL_MEMCPY_DEVICE_TO_HOST\)", text)
    assert back == [(str(i), str(i)) for i in (len(params) - 2, len(params) - 1)]
    sent = [int(i) for i in re.findall(r"aclrtMemcpy\(dev(\d+), \d+, a\d+\.data_ptr\(\)", text)]
    assert sent == list(range(len(params) - 2))
    unit = npu_unit_source(kernel, soc)
    rewritten, _ = acl_stub_unit(unit)
    done = subprocess.run(acl_stub_command(soc.name), input=rewritten, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
