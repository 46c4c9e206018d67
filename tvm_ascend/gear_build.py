"""The flow once per gear (ATC's ``--dynamic_batch_size`` / ``--dynamic_image_size`` /
``--dynamic_dims``), then one library for all of them.

Each gear is imported with its static shapes and planned, scheduled and printed as a static
build (``pipeline.plan_fusion``, with the same fallback as ``build``: a kernel that fails is
recorded and its gear planned again without it). Then:

* kernels printed alike in several gears are kept once (``codegen/gear_unit.py``) and every
  gear calls the one copy;
* each gear's host program becomes one VM function ``gear<i>_main`` (its other functions are
  renamed ``gear<i>_<name>`` beside it), all compiled into one executable;
* weights equal in several gears (same dtype, shape and bytes) are stored once;
* the report has one section per gear (``partition/gear_report.py``).

``runtime/gears.py`` runs the library. One g++ compilation serves every gear.

Example
-------
>>> lib = tvm_ascend.build("cnn.onnx", config=CompileConfig(
...     input_shape={"x": (-1, 3, 224, 224)}, dynamic_batch_size="1,2,4,8"))  # doctest: +SKIP
>>> lib.fusion_report()["npu_kernels_per_gear"]                            # doctest: +SKIP
[12, 12, 12, 12]
"""
from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from . import pipeline
from .codegen import unit_module
from .codegen.ext_codegen import scheduled_kernels
from .codegen.gear_unit import gear_kernels
from .config import CompileConfig
from .dumps import Dumper
from .errors import CodegenError, ToolchainError
from .fallback import compile_error_kernels, failure_of, policy_after
from .frontend import load_model
from .partition.gear_report import gears_report, stored_symbols
from .partition.report import fusion_report
from .runtime.gears import GearedModule
from .runtime.weights import lift_weights
from .scheduling import schedule_groups

logger = logging.getLogger("tvm_ascend")


@dataclass
class _Gear:
    """One gear's static build, as far as this module takes it before the shared library."""

    gear: object  # frontend.gears.Gear
    imported: tvm.IRModule
    policy: object
    failures: list = field(default_factory=list)
    result: object = None
    scheduled: tvm.IRModule = None
    tilings: dict = None


def build_gears(mod, spec, config: CompileConfig, params, key: str | None) -> GearedModule:
    """Build ``mod`` once per gear of ``spec`` (a ``GearSpec``) into one GearedModule."""
    cost = pipeline.group_cost(config)  # a PrimFunc plans alike in every gear: one cost
    gears = []
    for gear in spec.gears:
        imported = load_model(mod, gear.shapes, checked=True)
        gears.append(_Gear(gear, imported, pipeline.fusion_policy(config, imported)))
    for _ in range(pipeline.MAX_PLANS):
        for g in gears:
            if g.scheduled is None:
                _schedule(g, config, params, cost)
        try:
            module = _link(gears, spec, config, key)
        except _CompileFailed as failed:
            if config.strict:
                raise failed.error from None
            _replan(gears, failed.by_gear)
            continue
        _dump(mod, gears, module, config)
        return module
    raise CodegenError(f"kernels still fail after {pipeline.MAX_PLANS} plans of the gears")


def _dump(mod, gears: list, module: GearedModule, config: CompileConfig) -> None:
    """Each gear's dumps into ``<dump_path>/gear<i>``, as a static build writes them."""
    if not config.dump_graph:
        return
    report, sources = module.fusion_report(), module.kernel_sources()
    model = pipeline._onnx_model(mod)  # noqa: SLF001
    for g, section in zip(gears, report["gears"]):
        dumps = Dumper(True, os.path.join(config.dump_path, f"gear{g.gear.index}"))
        dumps.module("000_imported.py", g.imported)
        dumps.module("010_partitioned.py", g.result.mod)
        dumps.scheduled(g.scheduled)
        dumps.report(section)
        dumps.graphs(model, section)
        dumps.kernels({s: sources[s] for s in dict.fromkeys(section["kernel_symbols"].values())})


def _schedule(g: _Gear, config: CompileConfig, params, cost) -> None:
    """Plan and schedule one gear; kernels that fail to schedule or print are planned again
    without them (as ``build`` does), unless ``config.strict``."""
    for _ in range(pipeline.MAX_PLANS):
        result = pipeline.plan_fusion(g.imported, g.policy, config.soc, params,
                                      pipeline.precision_of(config), cost)
        errors: dict = {}
        scheduled, tilings = schedule_groups(result.mod, cost, failures=errors)
        stage = "schedule"
        if not errors:
            errors, stage = pipeline._print_errors(scheduled, config.soc), "print"  # noqa: SLF001
        if not errors:
            g.result, g.scheduled, g.tilings = result, scheduled, tilings
            return
        failed = pipeline._failed(result, stage, errors)  # noqa: SLF001
        if config.strict:
            raise failed.error
        for failure in failed.failures:
            logger.warning("gear %s: %s", g.gear.label, failure.describe())
        g.failures += failed.failures
        g.policy = policy_after(g.policy, failed.failures)
    raise CodegenError(f"gear {g.gear.label}: kernels still fail after {pipeline.MAX_PLANS} "
                       "plans")


class _CompileFailed(Exception):
    """Kernels that failed to compile, per gear ({gear index: [KernelFailure]})."""

    def __init__(self, by_gear: dict, error: BaseException):
        super().__init__(error)
        self.by_gear, self.error = by_gear, error


def _replan(gears: list, by_gear: dict) -> None:
    """Gears whose kernels failed to compile: recorded, planned again without them."""
    for g in gears:
        mine = by_gear.get(g.gear.index, [])
        if mine:
            for failure in mine:
                logger.warning("gear %s: %s", g.gear.label, failure.describe())
            g.failures += mine
            g.policy = policy_after(g.policy, mine)
            g.scheduled = None


def _codegen_funcs(scheduled: tvm.IRModule) -> list:
    return [func for func in scheduled.functions.values() if isinstance(func, relax.Function)
            and func.attrs and func.attrs.get("Codegen") == "ascend"]


def _link(gears: list, spec, config: CompileConfig, key: str | None) -> GearedModule:
    """The kernels kept once, every gear's host program in one executable, the weights
    stored once, and the library compiled."""
    soc = config.soc
    kernels = gear_kernels([scheduled_kernels(_codegen_funcs(g.scheduled)) for g in gears])
    hosts, weights, gear_meta, reports = [], _Weights(), [], []
    for g, mapping in zip(gears, kernels.symbols):
        lowered, _ = pipeline._codegen(_renamed_kernels(g.scheduled, mapping), soc, {})  # noqa
        host, tensors = lift_weights(lowered)
        prefix = f"gear{g.gear.index}_"
        hosts.append(_prefixed(host, prefix))
        names = pipeline._input_names(g.imported, g.scheduled)  # noqa: SLF001
        report = fusion_report(g.result, g.tilings, config, pipeline._nodes_before(g.imported))
        report["kernel_failures"] = [f.to_json() for f in g.failures]
        reports.append(stored_symbols(report, mapping))
        gear_meta.append({**g.gear.to_json(), "function": prefix + "main",
                          "weights": [weights.index(t) for t in tensors],
                          "input_specs": pipeline._input_specs(g.scheduled, names)})  # noqa
    report = gears_report(spec, reports, kernels.symbols, len(kernels.unique), kernels.shared)
    metadata = {"soc_version": soc.name, "report": report, "inputs": names,
                "gears": gear_meta, "gear_spec": spec.to_json(),
                "input_specs": gear_meta[0]["input_specs"], "dim_ranges": {},
                "index_inputs": pipeline.index_inputs_of(gears[0].imported)}
    unit_mod, unit = unit_module(list(kernels.unique), soc, metadata)
    merged = tvm.IRModule({gv: f for h in hosts for gv, f in h.functions.items()})
    merged = merged.with_attr("external_mods", [unit_mod])
    executable = tvm.compile(merged, target=tvm.target.Target("llvm"))
    module = GearedModule(executable, unit.metadata,
                          cache_key=pipeline._cache_key(merged, unit.code),  # noqa: SLF001
                          cache_dir=config.cache_dir, build_key=key,
                          cache_mode=config.op_compiler_cache_mode, weights=weights.tensors)
    try:
        module.compile()
    except ToolchainError as err:
        culprits = set(compile_error_kernels(unit.code, err.output))
        by_gear = {g.gear.index: [failure_of(group, "compile", err) for group in g.result.groups
                                  if group.on_npu and mapping.get(group.symbol) in culprits]
                   for g, mapping in zip(gears, kernels.symbols)}
        by_gear = {i: fs for i, fs in by_gear.items() if fs}
        if not by_gear:  # not a kernel's fault (the runtime, the host code): nothing to drop
            raise
        raise _CompileFailed(by_gear, err) from err
    logger.info("built %d gears: %d NPU kernel(s) stored, %d shared; %d weight tensor(s)",
                len(gears), len(kernels.unique), kernels.shared, len(weights.tensors))
    return module


def _renamed_kernels(scheduled: tvm.IRModule, mapping: dict) -> tvm.IRModule:
    """``scheduled`` with its kernels' symbols as stored (RunCodegen calls them by symbol)."""
    out = tvm.IRModule(dict(scheduled.functions.items()), attrs=scheduled.attrs)
    for gv, func in scheduled.functions.items():
        if isinstance(func, relax.Function) and func.attrs and \
                func.attrs.get("Codegen") == "ascend":
            out[gv] = func.with_attr("global_symbol", mapping[str(func.attrs["global_symbol"])])
    return out


@mutator
class _GlobalRenamer(PyExprMutator):
    """Points every GlobalVar reference at its renamed GlobalVar (by name)."""

    def __init__(self, mod, renamed: dict):
        super().__init__(mod)
        self.renamed = renamed

    def visit_global_var_(self, gv):
        return self.renamed.get(gv.name_hint, gv)


def _renamed_var(gv, name: str):
    """A GlobalVar named ``name`` with ``gv``'s type: a fresh GlobalVar has none, and a call
    to a TIR function (an op kept on the host) through an untyped one fails to normalise
    (found by the fuzzer's gears, case 0-12)."""
    new = tvm.ir.GlobalVar(name)
    if gv.ty is not None:
        relax.expr._update_type(new, gv.ty)  # noqa: SLF001 - TVM's one setter of a var's type
    return new


def _prefixed(host: tvm.IRModule, prefix: str) -> tvm.IRModule:
    """``host`` with every function named ``prefix + name`` (global symbols too), so that
    several gears' host programs live in one module."""
    renamed = {gv.name_hint: _renamed_var(gv, prefix + gv.name_hint)
               for gv in host.get_global_vars()}
    renamer = _GlobalRenamer(host, renamed)
    functions = {}
    for gv, func in host.functions.items():
        if isinstance(func, relax.Function):
            func = relax.Function(func.params, renamer.visit_expr(func.body), func.ret_ty,
                                  func.is_pure, func.attrs, func.span)
        if func.attrs and "global_symbol" in func.attrs:
            func = func.with_attr("global_symbol", prefix + str(func.attrs["global_symbol"]))
        functions[renamed[gv.name_hint]] = func
    return tvm.IRModule(functions)


class _Weights:
    """The weights of every gear, each distinct tensor (dtype, shape, bytes) once."""

    def __init__(self):
        self.tensors: list = []
        self._index: dict = {}

    def index(self, tensor) -> int:
        array = np.from_dlpack(tensor)
        key = (str(array.dtype), array.shape,
               hashlib.sha256(memoryview(np.ascontiguousarray(array)).cast("B")).hexdigest())
        if key not in self._index:
            self._index[key] = len(self.tensors)
            self.tensors.append(tensor)
        return self._index[key]
