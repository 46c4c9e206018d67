"""AscendC API conformance: what the printers emit exists in CANN's real AscendC headers
(asc-devkit: include/ and impl/basic_api/<arch>, dav_c220 for 910B, dav_m200 for 310P) with
an overload taking as many (template) arguments, and is neither unsupported nor deprecated on
the kernel's architecture. The printed code compiles against the emulator
(contrib/ascendc_emu) in every other test, so this is what keeps the emulator from drifting
from the real API unnoticed: an emulator-only call or overload fails here. The headers are
read, not compiled (they need CANN's compiler); see tests/ascendc_api.py."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

import tvm_ascend
from tvm_ascend import codegen, ir_attrs
from tvm_ascend.codegen import EMITTED_API, kernel_source
from tvm_ascend.codegen.ascendc_printer import ScheduledKernel
from tvm_ascend.schedules import MatmulRowsKnobs, MatmulRowsSchedule
from tvm_ascend.codegen.kernels.row_reduce import REDUCE_API
from tvm_ascend.soc import get_soc
from ascendc_api import (ARCH_OF_SOC, Use, api_index, asc_devkit_root, check_use, uses_in)
from onnx_models import CHAIN_STEPS, ModelBuilder, add_chain
from printed_kernels import SOCS, kernels_of, kernels_of_every_template

# Declared only in folders the vendored asc-devkit subset lacks (impl/adv_api/detail: the
# Matmul API's MatmulType lives there): checked by name once they are vendored; the test
# fails when one appears, so the entry is removed then.
NOT_VENDORED = {"MatmulType": "impl/adv_api/detail/matmul (not vendored)"}
# Printed although the architecture's folder marks them deprecated, with why they stay.
KNOWN_DEPRECATED = {
    # every cube entry sets the system workspace before REGIST_MATMUL_OBJ reads it back with
    # GetSysWorkSpacePtr(), as CANN's kernel-launch Matmul samples still do; CANN's notice
    # says it "will be removed in the next version" and names no replacement
    "SetSysWorkspace": "cube kernels' entry (codegen/kernel_parts.py emit_cube_entry)",
}


@pytest.fixture(scope="module")
def devkit() -> str:
    folder, tried = asc_devkit_root()
    if folder is None:
        pytest.skip("no AscendC headers (include/kernel_operator.h and impl/basic_api) in: "
                    + ", ".join(tried))
    return folder


def _ops_model(dtype: str):
    """Every elementwise step of the chains (one kernel each way), comparisons and selects,
    min/max and pow on top of kernels_of_every_template's graph."""
    b = ModelBuilder(dtype, seed=6)
    add_chain(b, 0, (3, 40), list(CHAIN_STEPS))
    x, y = b.input("p", (3, 40)), b.input("q", (3, 40))
    b.output(b.node("Where", [b.node("Greater", [x, y]), x, y]), (3, 40))
    b.output(b.node("Min", [b.node("Max", [x, y]), b.const(np.array(1.5), "cap")]), (3, 40))
    b.output(b.node("Reciprocal", [b.node("Floor", [x])]), (3, 40))
    b.output(b.node("Pow", [x, y]), (3, 40))
    b.output(b.node("ReduceMin", [x], axes=[-1], keepdims=1), (3, 1))
    return b.model()


def _conv_model():
    """A half 3x3 stride-2 Conv + bias + ReLU the Load3D variant takes (on coupled chips)."""
    b = ModelBuilder("float16", seed=8)
    w = b.const(b.rng.standard_normal((24, 16, 3, 3)) * 0.2, "w")
    conv = b.node("Conv", [b.input("x", (1, 16, 9, 9)), w], pads=[1, 1, 1, 1], strides=[2, 2])
    b.output(b.node("Relu", [conv]), (1, 24, 5, 5))
    return b.model()


def _tall_rows_kernels(soc) -> list:
    """On split chips, the MatMul + LayerNorm kernel in the matmul-rows tall form (IterateAll
    panels through the GM workspace) in both mixes, 1:1 and 1:2; a template's first knobs
    are its short form."""
    if soc.npu_arch != 2201:
        return []
    b = ModelBuilder("float16", seed=9)
    w = b.const(b.rng.standard_normal((48, 200)) * 0.1, "w")
    h = b.node("MatMul", [b.input("x", (3, 70, 48)), w])
    gamma, beta = b.const(b.rng.uniform(0.8, 1.2, 200), "g"), b.const(np.zeros(200), "b")
    b.output(b.node("LayerNormalization", [h, gamma, beta], axis=-1, epsilon=1e-5),
             (3, 70, 200))
    result = tvm_ascend.partition_for_ascend(b.model(), tvm_ascend.CompileConfig(
        fusion_level="aggressive", soc_version=soc.name))
    (prim,) = [f.attrs[ir_attrs.PRIM_FUNC] for f in result.mod.functions.values()
               if f.attrs and f.attrs.get("Codegen") == "ascend"]
    out = []
    for ratio in (None, 2):
        scheduled, tiling = MatmulRowsSchedule.schedule(prim, soc, MatmulRowsKnobs(
            tall=True, panels=2, aiv_ratio=ratio))
        out.append(ScheduledKernel(f"tall_rows_{ratio or 1}", scheduled, tiling,
                                   {"name": "tall_rows", "rule": "test", "ops": []}))
    assert [k.tiling.work.aiv_ratio for k in out] == [1, 2]
    return out


@functools.lru_cache(maxsize=None)
def _printed(soc_name: str) -> dict[str, str]:
    """Standalone kernel sources for ``soc_name``: every template, and the vector ops."""
    soc = get_soc(soc_name)
    kernels = list(kernels_of_every_template(soc_name))
    kernels += [k for k in kernels_of(_conv_model(), soc, every_method=True)
                if getattr(k.tiling.plan, "variant", None) == "load3d"]
    assert soc_name != "Ascend310P3" or any(
        getattr(k.tiling.plan, "variant", None) == "load3d" for k in kernels)
    for dtype in ("float32", "float16"):
        kernels += kernels_of(_ops_model(dtype), soc)
    kernels += _tall_rows_kernels(soc)
    return {f"{k.tiling.template}:{k.symbol}:{i}": kernel_source(k, soc)
            for i, k in enumerate(kernels)}


def _uses(soc_name: str) -> dict[Use, list[str]]:
    found: dict[Use, list[str]] = {}
    for where, source in _printed(soc_name).items():
        for use in uses_in(source):
            found.setdefault(use, []).append(where)
    return found


@pytest.mark.parametrize("soc_name", SOCS)
def test_every_printed_ascendc_use_is_declared_with_its_arity(devkit, soc_name):
    index = api_index(devkit, ARCH_OF_SOC[soc_name])
    uses = _uses(soc_name)
    kinds = {u.kind for u in uses}
    assert {"call", "member", "type", "enum", "macro"} <= kinds and len(uses) > 80, kinds
    # DataCopyExtParams{...}, BinaryRepeatParams(...): constructors' value counts too
    assert soc_name != "Ascend910B1" or "construct" in kinds
    wrong = {}
    for use, where in uses.items():
        reason = check_use(use, index)
        if reason and use.name not in NOT_VENDORED:
            wrong[str(use)] = (reason, where[:2])
    assert not wrong, "\n".join(f"{u}: {r} (in {w})" for u, (r, w) in sorted(wrong.items()))
    for name in NOT_VENDORED:  # still absent; remove the entry once it is vendored
        assert not index.has_type(name) and name not in index.functions, name


@pytest.mark.parametrize("soc_name", SOCS)
def test_no_printed_api_is_unsupported_or_deprecated_on_its_architecture(devkit, soc_name):
    """DataCopyPad, Fixpipe, Copy, ... are "unsupported API on current device" on 310P
    (dav_m200); the printers may not print them for it."""
    index = api_index(devkit, ARCH_OF_SOC[soc_name])
    called = {u.name for u in _uses(soc_name) if u.kind in ("call", "member")}
    flagged = {name: sorted(index.notices[name]) for name in called if name in index.notices}
    unexpected = {n: k for n, k in flagged.items()
                  if n not in KNOWN_DEPRECATED or k != ["deprecated"]}
    assert not unexpected, unexpected
    # the known ones are still printed and still deprecated: the list cannot go stale
    assert set(KNOWN_DEPRECATED) == set(flagged), flagged


def _names_in_printer_sources() -> set[tuple[str, str]]:
    """(scope, name) of every AscendC name the printers' sources spell out (``AscendC::X``,
    ``AscendC::E::V``; f-string fields are what EMITTED_API and REDUCE_API list)."""
    root = Path(codegen.__file__).parent
    names = set()
    for path in root.rglob("*.py"):
        # (not PlatformAscendC::, the host tiling class a comment names)
        for scope, name in re.findall(r"(?<!\w)AscendC::(?:([A-Za-z_]\w*)::)?([A-Za-z_]\w*)",
                                      path.read_text()):
            if scope != "emu" and name != "emu":
                names.add((scope, name))
    names |= {("", name) for name in EMITTED_API}
    names |= {("", name) for name in REDUCE_API.values()}
    return names


@pytest.mark.parametrize("soc_name", SOCS)
def test_every_ascendc_name_in_the_printers_sources_is_declared(devkit, soc_name):
    """Names only some builds print (every unary op, the conv and attention paths' cube
    calls) are checked at least by name and, for enum values, by their enum."""
    index = api_index(devkit, ARCH_OF_SOC[soc_name])
    names = _names_in_printer_sources()
    assert ("", "Mmad") in names and ("", "Sigmoid") in names and len(names) > 80
    missing = []
    for scope, name in sorted(names):
        if scope:
            known = name in index.enum_values(scope)
        else:
            known = (name in index.functions or index.has_type(name)
                     or name in NOT_VENDORED or name in CPU_DEBUG_ONLY)
        if not known:
            missing.append(f"{scope + '::' if scope else ''}{name}")
    assert not missing, missing


CPU_DEBUG_ONLY = ("GmAlloc", "GmFree", "SetKernelMode")


@pytest.mark.parametrize("soc_name", SOCS)
def test_the_cpu_debug_only_names_stay_out_of_kernels_and_npu_units(soc_name):
    """GmAlloc, GmFree and SetKernelMode are CANN's CPU-debug library calls (tikicpulib), not
    the kernel API: only the emulator build's host launcher may print them, never a kernel
    nor the unit a device compiler builds."""
    from tvm_ascend.codegen.npu_unit import npu_unit_source

    soc = get_soc(soc_name)
    texts = list(_printed(soc_name).values())
    texts += [npu_unit_source(k, soc) for k in kernels_of_every_template(soc_name)[:2]]
    for name in CPU_DEBUG_ONLY:
        assert not any(f"AscendC::{name}(" in text for text in texts), name


def test_the_conformance_checks_have_teeth(devkit):
    c220, m200 = api_index(devkit, "dav_c220"), api_index(devkit, "dav_m200")
    assert check_use(Use("call", "Exp", None, 3), c220) is None
    assert "no overload" in check_use(Use("call", "Exp", None, 2), c220)
    assert "no overload" in check_use(Use("call", "SetFlag", 3, 1), c220)
    assert check_use(Use("call", "ExpInPlace", None, 2), c220) == "no function ExpInPlace"
    assert check_use(Use("type", "TQue", 2), c220) is None
    assert "template arguments" in check_use(Use("type", "TQue", 5), c220)
    assert check_use(Use("enum", "VECIN", scope="QuePosition"), c220) is None  # an alias
    assert "no value" in check_use(Use("enum", "VECIN2", scope="QuePosition"), c220)
    assert check_use(Use("macro", "REGIST_MATMUL_OBJ"), c220) is None
    assert check_use(Use("construct", "DataCopyExtParams", None, 5), c220) is None
    assert "no constructor" in check_use(Use("construct", "DataCopyExtParams", None, 4), c220)
    # DataCopyPad: printed for 910B, unsupported on 310P
    assert "DataCopyPad" not in c220.notices and m200.notices["DataCopyPad"] == {"unsupported"}


def test_printed_uses_are_read_with_their_argument_counts():
    source = """
    AscendC::Duplicate(slab[a + b], static_cast<half>(0.0f), margin,
                       static_cast<uint8_t>(n - r < 255 ? n - r : 255), 1, 2);
    AscendC::SetFlag<AscendC::HardEvent::V_S>(0);
    AscendC::TQue<AscendC::QuePosition::VECIN, 1> xQue;  // AscendC::Commented(1)
    AscendC::DataCopyExtParams params{1, 2, 0, 0, 0};
    x = xQue.AllocTensor<half>(); op.Init(a, b); REGIST_MATMUL_OBJ(&pipe, w, mm, t);
    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b) {}
    AscendC::emu::LastLaunch();
    """
    assert uses_in(source) == {
        Use("call", "Duplicate", None, 6), Use("call", "SetFlag", 1, 1),
        Use("enum", "V_S", scope="HardEvent"), Use("type", "TQue", 2),
        Use("enum", "VECIN", scope="QuePosition"), Use("type", "DataCopyExtParams"),
        Use("construct", "DataCopyExtParams", None, 5),
        Use("member", "AllocTensor", 1, 0), Use("macro", "REGIST_MATMUL_OBJ")}


def test_the_headers_are_looked_for_in_the_toolkit_first(tmp_path):
    toolkit = tmp_path / "toolkit" / "asc"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "kernel_operator.h").write_text("")
    (toolkit / "impl" / "basic_api").mkdir(parents=True)
    vendored = str(tmp_path / "shared" / "vendor" / "cann" / "asc-devkit")
    env = {"ASCEND_HOME_PATH": str(tmp_path / "toolkit")}
    assert asc_devkit_root(env, str(tmp_path / "repo")) == (str(toolkit),
                                                              [str(toolkit), vendored])
    assert asc_devkit_root({}, str(tmp_path / "repo")) == (None, [vendored])
