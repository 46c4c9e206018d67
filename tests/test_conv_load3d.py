"""The conv template's Load3D variant (``Conv2dKnobs.method="load3d"``) on Ascend310P3 in
float16: the cube's own img2col from input rows in L1, the template's epilogue on the rows the
product comes back as. Numerics against onnxruntime; every kernel's plan (GM bytes, cube MACs,
scalar elements, Gathers, UB bytes) equal to the emulator's counters.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tvm_ascend
from build_checks import conv_plan, npu_launches
from conftest import TOLERANCES, run_onnxruntime
from onnx_models import ModelBuilder, add_conv
from tvm_ascend.schedules.conv2d import Conv2dKnobs, Conv2dSchedule, Load3dConvPlan

# (N, Cin, H, W, Cout, kernel, stride, pad, dilation, groups, epilogue)
SWEEP = [
    (1, 3, 11, 13, 5, 3, 1, 1, 1, 1, "bias_relu"),        # odd sizes, 3 channels, row tails
    (1, 16, 16, 16, 20, 7, 2, 3, 1, 1, "none"),           # 7x7 stride 2 pad 3 (a stem)
    (1, 17, 6, 6, 33, 1, 1, 0, 1, 1, "bias"),             # 1x1, a second channel group
    (1, 8, 10, 10, 16, 3, 1, 2, 2, 1, "none"),            # dilation 2
    (2, 24, 9, 9, 24, 3, 2, 1, 1, 1, "bias_relu"),        # stride 2, batch 2
    (1, 32, 20, 20, 48, 3, 1, 1, 1, 1, "relu_residual"),  # bias + ReLU + residual, cores
    (1, 40, 8, 8, 272, 3, 1, 1, 1, 1, "bias_relu"),       # 2 channel tiles, taps split 8 + 1
    (1, 48, 6, 6, 32, 3, 1, 1, 1, 1, "none"),             # 3 channel groups in one slab
    (1, 3, 40, 224, 16, 7, 2, 3, 1, 1, "bias_relu"),      # a stem's 224-wide rows, 13 zeros
]


@pytest.fixture
def load3d_default(monkeypatch):
    """Every conv planned with the Load3D variant where it takes the conv (the partitioner's
    default knobs become ``method="load3d"``)."""
    plan = Conv2dSchedule.plan

    def forced(analysis, soc, knobs=None):
        knobs = knobs or Conv2dKnobs()
        return plan(analysis, soc, knobs if knobs.method else replace(knobs, method="load3d"))

    monkeypatch.setattr(Conv2dSchedule, "plan", staticmethod(forced))


def _check_load3d_counters(lib) -> list[dict]:
    """Every NPU group's plan equals its launch's counters; returns the Load3D conv groups."""
    convs = []
    for group, launch in npu_launches(lib):
        tiling, name = group["tiling"], group["kernel"]
        if tiling["template"] == "conv2d" and isinstance(conv_plan(group), Load3dConvPlan):
            work = tiling["work"]
            assert launch["scalar_writes"] == work["scalar_elems"], name
            gather = launch["vector_by_op"].get("Gather", {})
            assert gather.get("elems", 0) == work["gather_elems"], name
            convs.append(group)
    return convs


def test_load3d_sweep_float16_310p_matches_onnxruntime_and_counters(load3d_default):
    b = ModelBuilder("float16", seed=21)
    for index, case in enumerate(SWEEP):
        add_conv(b, case, index)
    model = b.model()
    lib = tvm_ascend.build(model, target="ascend/310p3")
    outs, refs = lib.run(b.feeds), run_onnxruntime(model, b.feeds)
    for case, out, ref in zip(SWEEP, outs, refs):
        np.testing.assert_allclose(out.astype(np.float64), ref, **TOLERANCES["cube/float16"],
                                   err_msg=str(case))
    convs = _check_load3d_counters(lib)
    assert len(convs) == len(SWEEP)
    assert lib.report.to_json()["kernels"] == {"ascend": len(SWEEP), "host": 0}
    assert max(g["tiling"]["cores"] for g in convs) > 1
    plans = [conv_plan(g).load3d for g in convs]
    assert any(p.tiles_n > 1 for p in plans) and any(p.c1_step > 1 for p in plans)
    assert any(p.tap_step < p.shape.kh * p.shape.kw for p in plans)
    sources = "\n".join(lib.kernel_sources().values())
    assert "LoadData3DParamsV2" in sources and "Img2col(" not in sources


def test_load3d_feature_map_larger_than_l1(load3d_default):
    """A 64-channel 72 x 72 feature map (648 KiB) with 48 output channels: its rows go to L1
    tile by tile (only those under a tile's taps), and the tiles spread over every core."""
    from tvm_ascend.soc import get_soc

    case = (1, 64, 72, 72, 48, 3, 1, 1, 1, 1, "bias_relu")
    b = ModelBuilder("float16", seed=22)
    add_conv(b, case, 0)
    model = b.model()
    lib = tvm_ascend.build(model, target="ascend/310p3")
    np.testing.assert_allclose(lib.run(b.feeds)[0].astype(np.float64),
                               run_onnxruntime(model, b.feeds)[0], **TOLERANCES["cube/float16"])
    (conv,) = _check_load3d_counters(lib)
    p, soc = conv_plan(conv), get_soc("Ascend310P3")
    s = p.shape
    assert s.cin * s.h * s.w * 2 > p.load3d.l1_bytes
    assert p.load3d.l1_bytes <= soc.l1_bytes and p.load3d.tiles_h > 1
    assert conv["tiling"]["cores"] == soc.ai_cores


def test_load3d_variant_only_for_310p_half_ungrouped():
    """The partitioner estimates the Load3D kernel beside the img2col one (and the tuner
    searches it) for half convolutions on 310P; float32 (Load3D v2 there takes half only),
    910B (the NCHW <-> 5HD turns need the AIV) and grouped convs keep the img2col kernel."""
    from tvm_ascend.schedules.conv2d.shape import ConvShape
    from tvm_ascend.schedules.conv2d.load3d_kernel import load3d_variant_refusal
    from tvm_ascend.soc import get_soc
    from tvm_ascend.errors import TilingError

    p310, b910 = get_soc("Ascend310P3"), get_soc("Ascend910B1")

    def shape(dtype, groups=1):
        return ConvShape(1, 16, 12, 12, 16, 3, 3, 12, 12, (1, 1), (1, 1), (1, 1), groups, dtype,
                         "x", "w")

    assert load3d_variant_refusal(shape("float16"), p310) is None
    assert "half only" in load3d_variant_refusal(shape("float32"), p310)
    assert "coupled chips" in load3d_variant_refusal(shape("float16"), b910)
    assert "grouped" in load3d_variant_refusal(shape("float16", groups=2), p310)
    from tvm_ascend.schedules.conv2d import plan
    with pytest.raises(TilingError, match="half only"):
        plan(shape("float32"), None, p310, Conv2dKnobs(method="load3d"))
    with pytest.raises(TilingError, match="do not apply"):
        plan(shape("float16"), None, p310, Conv2dKnobs(method="load3d", base_m=32))
    tiling = plan(shape("float16"), None, p310, Conv2dKnobs(method="load3d"))
    assert isinstance(tiling.plan, Load3dConvPlan) and tiling.plan.variant == "load3d"
    # the JSON form (fusion reports, the compile cache) reads back as the Load3D plan
    from tvm_ascend.schedules.tiling import Tiling
    assert Tiling.from_json(tiling.to_json()) == tiling


def test_partitioner_picks_load3d_by_estimate_on_310p_half():
    """Unforced: a ResNet-style 3x3 conv (64 channels, 28 x 28) is estimated faster through
    Load3D (no img2col Gathers over every tap) and built so; the report's reason names the
    knob and both estimates; the float32 twin keeps the img2col kernel."""
    import re

    case = (1, 64, 28, 28, 64, 3, 1, 1, 1, 1, "bias_relu")
    for dtype, expected in (("float16", Load3dConvPlan), ("float32", None)):
        b = ModelBuilder(dtype, seed=23)
        add_conv(b, case, 0)
        model = b.model()
        lib = tvm_ascend.build(model, target="ascend/310p3")
        (group,) = [g for g in lib.report.to_json()["groups"] if g["on_npu"]]
        if expected is None:
            assert not isinstance(conv_plan(group), Load3dConvPlan)
            continue
        assert isinstance(conv_plan(group), expected)
        est = re.search(r"'method': 'load3d'\}: est\. ([\d.]+) us against ([\d.]+) us",
                        group["reason"])
        assert est and float(est.group(1)) < float(est.group(2)), group["reason"]
        np.testing.assert_allclose(lib.run(b.feeds)[0].astype(np.float64),
                                   run_onnxruntime(model, b.feeds)[0],
                                   **TOLERANCES["cube/float16"])
        _check_load3d_counters(lib)


def test_tuner_knob_space_holds_load3d_on_310p_half_only():
    """The tuner searches the Load3D kernel where it is a variant, and a record's knobs read
    back as that kernel's."""
    from tvm_ascend import ir_attrs
    from tvm_ascend.schedules import knobs_from_json
    from tvm_ascend.soc import get_soc

    b = ModelBuilder("float16", seed=24)
    add_conv(b, (1, 32, 14, 14, 64, 3, 1, 1, 1, 1, "none"), 0)
    result = tvm_ascend.partition_for_ascend(b.model())
    (func,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    load3d = Conv2dKnobs(method="load3d")
    assert load3d in Conv2dSchedule.knob_space(func, get_soc("Ascend310P3"))
    assert load3d not in Conv2dSchedule.knob_space(func, get_soc("Ascend910B1"))
    assert knobs_from_json("conv2d", {"method": "load3d"}) == load3d
    _, tiling = Conv2dSchedule.schedule(func, get_soc("Ascend310P3"), load3d)
    assert isinstance(tiling.plan, Load3dConvPlan)


def test_corpus_resnet_float16_every_conv_through_load3d(load3d_default):
    """The exported ResNet (float16, tests/corpus) on 310P3 with every conv forced through
    Load3D: its folded-BatchNorm biases, ReLUs and residual adds on the product rows, the
    output as onnxruntime's and each kernel's plan equal to the emulator's counters."""
    from pathlib import Path

    import onnx

    from tvm_ascend.config import CompileConfig

    model = onnx.load(Path(__file__).parent / "corpus" / "resnet_dynamo_op18_fp16.onnx")
    (inp,) = [i for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    feeds = {inp.name: np.random.default_rng(0).standard_normal(shape).astype(np.float16)}
    lib = tvm_ascend.build(model, target="ascend/310p3",
                           config=CompileConfig(fusion_level="aggressive"))
    np.testing.assert_allclose(lib.run(feeds)[0].astype(np.float64),
                               run_onnxruntime(model, feeds)[0], **TOLERANCES["cube/float16"])
    convs = _check_load3d_counters(lib)
    assert len(convs) >= 5
    assert all(g["tiling"]["template"] != "conv2d" for g in lib.report.to_json()["groups"]
               if g["on_npu"] and g not in convs)
