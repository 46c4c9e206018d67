"""Checks of a whole build that several test files share: the groups a fusion report gives
some ONNX nodes, and a build whose every kernel's plan is held equal to the emulator's counters."""
from __future__ import annotations

import os
import re

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_ascend
from tvm_ascend.codegen import ascendc_printer
from tvm_ascend.errors import CodegenError
from tvm_ascend.soc import emulator_dir
from tvm_ascend.schedules.tiling import Tiling
from conftest import assert_close, run_onnxruntime

# Outputs of long-row (70k-element) float32 sums (means, variances) are accumulated in another
# order than onnxruntime's (pairwise per 256-byte repeat within a chunk, then chunk by chunk), as
# a model's long dot products are: the whole-model tolerance. (Checked: the LayerNormalization
# kernel is within 9e-7 of the float64 result where onnxruntime is 1.5e-6 off.)
LONG_ROW_TOLERANCE = {"float32": "float32_model", "float16": "float16"}


def groups_of(report, nodes) -> list[dict]:
    """The launches that compute ``nodes`` (each group once, in report order)."""
    return [g for g in report["groups"] if set(g["nodes"]) & set(nodes)]


def build_and_check_plans(builder, target="ascend", config=None, tolerance=None):
    """Build, run, compare every output with onnxruntime; every group on the NPU with its plan's
    GM bytes and UB bytes equal to the emulator's counters. Returns the NPU groups by kernel."""
    model = builder.model()
    lib = tvm_ascend.build(model, target=target, config=config)
    outs = lib.run(builder.feeds)
    refs = run_onnxruntime(model, builder.feeds)
    for out, ref in zip(outs, refs, strict=True):
        assert_close(out, ref, tolerance or LONG_ROW_TOLERANCE[builder.dtype])
    report = lib.fusion_report()
    assert report["host_groups"] == 0, [g["reason"] for g in report["groups"]]
    launches = {p["kernel"]: p for p in lib.profile()}
    groups = {}
    for group in report["groups"]:
        assert group["on_npu"], group["reason"]
        launch, tiling = launches[group["kernel"]], group["tiling"]
        assert launch["gm_read_bytes"] == tiling["gm_read_bytes"], group["kernel"]
        assert launch["gm_write_bytes"] == tiling["gm_write_bytes"], group["kernel"]
        assert launch["peak_ub_bytes"] == tiling["ub_bytes"] <= tiling["ub_capacity"]
        # one block per AIC: a 1:2 mix runs two AIV clients per block
        assert launch["block_dim"] == -(-tiling["cores"] // tiling["work"].get("aiv_ratio", 1))
        assert launch["warnings"] == []
        groups[group["kernel"]] = group
    return lib, groups


def npu_launches(lib) -> list[tuple[dict, dict]]:
    """(group, launch) of every group of a build on the NPU, once the launch's GM bytes, cube
    MACs, cores and UB bytes are held equal to its plan's and the launch warned of nothing."""
    report = lib.report.to_json()
    launches = {p["kernel"]: p for p in lib.profile()}
    checked = []
    for group in report["groups"]:
        if not group["on_npu"]:
            continue
        tiling, launch = group["tiling"], launches[group["kernel"]]
        name = group["kernel"]
        assert launch["gm_read_bytes"] == tiling["gm_read_bytes"], name
        assert launch["gm_write_bytes"] == tiling["gm_write_bytes"], name
        assert launch["cube_macs"] == tiling["work"]["cube_macs"], name
        # one block per AIC: a 1:2 mix (matmul, the matmul-rows tall form) runs two clients
        ratio = tiling["work"].get("aiv_ratio", 1)
        assert launch["block_dim"] == -(-tiling["cores"] // ratio), name
        assert launch["warnings"] == [], name
        assert launch["peak_ub_bytes"] == tiling["ub_bytes"], name
        checked.append((group, launch))
    return checked


def chunked_tilings(groups: dict) -> list[dict]:
    """The tilings of the multi-pass kernels, with their chunk plans checked."""
    tilings = [g["tiling"] for g in groups.values()
               if g["tiling"]["template"] == "row_reduce" and g["tiling"]["plan"]["chunked"]]
    for t in tilings:
        p = t["plan"]["chunked"]
        assert t["template"] == "row_reduce" and t["tile_len"] == 1
        assert p["chunk_cols"] < t["cols"] and p["chunk_cols"] % 8 == 0
        assert p["chunks_per_row"] == -(-t["cols"] // p["chunk_cols"])
    return tilings


def conv_plan(group: dict):
    """The typed plan (``ConvPlan``) of a fusion report's group."""
    return Tiling.from_dict(group["tiling"]).plan


ACL_STUB_DIR = os.path.join(os.path.dirname(__file__), "acl_stub")
# The public AscendCL headers (hicann/runtime) the project's shared folder holds, from the
# repository root; a toolkit's own ($ASCEND_HOME_PATH/include) is looked in first.
VENDOR_ACL_INCLUDE = os.path.join("..", "shared", "vendor", "cann", "runtime", "include",
                                  "external")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def real_acl_include(environ=None, root: str = REPO_ROOT) -> tuple[str | None, list[str]]:
    """(the folder holding the real ``acl/acl.h``, or None; the folders tried, in order):
    ``$ASCEND_HOME_PATH/include`` first, then the vendored headers beside the repository."""
    environ = os.environ if environ is None else environ
    tried = []
    if environ.get("ASCEND_HOME_PATH"):
        tried.append(os.path.join(environ["ASCEND_HOME_PATH"], "include"))
    tried.append(os.path.normpath(os.path.join(root, VENDOR_ACL_INCLUDE)))
    for folder in tried:
        if os.path.isfile(os.path.join(folder, "acl", "acl.h")):
            return folder, tried
    return None, tried


def acl_stub_unit(unit: str) -> tuple[str, int]:
    """An NPU unit's source made parseable by g++ (its <<<>>> launches rewritten as calls of
    the kernel with the same arguments) and the number of launches rewritten."""
    return re.subn(r"(\w+)<<<([^>]*)>>>\(", r"tvm_ascend_stub_launch(\2), \1(", unit)


def acl_stub_command(soc_name: str, acl_include: str | None = None) -> list[str]:
    """``g++ -fsyntax-only -Wall`` of a unit from stdin against ACL declarations and the
    emulator's kernel_operator.h: syntax and types only. The declarations are the stub ones
    (tests/acl_stub) unless ``acl_include`` names a folder holding the real ``acl/acl.h``."""
    ffi_include = os.path.join(os.path.dirname(tvm_ffi.__file__), "include")
    return ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-DASCENDC_CPU_DEBUG",
            f"-DASCENDC_EMU_SOC={soc_name}", "-DASCENDC_EMU_SEPARATE_RUNTIME",
            f"-I{emulator_dir()}", f"-I{acl_include or ACL_STUB_DIR}", f"-I{ffi_include}",
            "-include", os.path.join(ACL_STUB_DIR, "launch_stub.h"), "-x", "c++", "-"]


def fused_prim_func(model):
    """The whole model as ONE PrimFunc (LegalizeOps, then FuseTIR over a Primitive function
    calling every op): what the planner's merges hand the templates."""
    mod = relax.transform.LegalizeOps()(from_onnx(model, keep_params_in_input=False))
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    main = mod["main"]
    bindings = [b for block in main.body.blocks for b in block.bindings]
    bb = relax.BlockBuilder()
    params = [relax.Var(p.name, p.ty) for p in main.params]
    env = dict(zip(main.params, params))
    gvs = {gv.name_hint: bb.add_func(f, gv.name_hint) for gv, f in mod.functions.items()
           if isinstance(f, tvm.tirx.PrimFunc)}
    with bb.function("attention", params, {"Primitive": True}, private=True):
        with bb.dataflow():
            for i, b in enumerate(bindings):
                call = b.value
                emit = bb.emit_output if i == len(bindings) - 1 else bb.emit
                env[b.var] = emit(relax.op.call_tir(
                    gvs[call.args[0].name_hint], relax.Tuple([env[a] for a in call.args[1].fields]),
                    call.ty_args[0]))
        fused_gv = bb.emit_func_output(env[bindings[-1].var])
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(relax.Call(fused_gv, params)))
    fused = relax.transform.FuseTIR()(bb.get())
    return next(f for gv, f in fused.functions.items() if gv.name_hint == "attention")


def _printer_failing(monkeypatch, when, how: str) -> None:
    """Make the printers break the kernels whose group ``when(number of ops)`` holds: ``how`` =
    "cxx" prints a line g++ rejects, "raise" raises CodegenError while printing."""
    real = ascendc_printer.kernel_printer

    class Broken:
        def __init__(self, printer, ops: int):
            self._printer, self._ops = printer, ops

        def __getattr__(self, name):  # what the launcher reads after printing
            return getattr(self._printer, name)

        def print(self, buf):
            self._printer.print(buf)
            if not when(self._ops):
                return
            if how == "raise":
                raise CodegenError(f"{self._printer.symbol}: injected printer failure")
            buf.line("this_is_not_cxx(;")

    monkeypatch.setattr(ascendc_printer, "kernel_printer",
                        lambda kernel: Broken(real(kernel), len(kernel.group.get("ops", []))))
