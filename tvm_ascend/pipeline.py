"""The flow, chained once: frontend -> prepare -> partition -> schedule -> codegen -> runtime.

Example
-------
>>> import tvm_ascend
>>> lib = tvm_ascend.build("model.onnx", target="ascend/910b1")    # doctest: +SKIP
>>> lib.fusion_report()["npu_kernels"]                              # doctest: +SKIP
3
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, replace

import tvm
import tvm_ffi
from tvm import relax

from . import ir_attrs
from .codegen import PrintedUnit, PrintedUnits, register_codegen, unit_module
from .codegen.ascendc_printer import kernel_source
from .codegen.ext_codegen import scheduled_kernels
from .config import CompileConfig
from .cost_model.planner_model import planner_ranking
from .cost_model.timing import end_to_end_us
from .errors import CodegenError, ToolchainError
from .fallback import KernelFailure, compile_error_kernels, failure_of, policy_after
from .frontend import config_gears, load_model, read_model
from .partition.cost import GroupCost
from .partition.dynamic_report import dynamic_section, warn_dynamic
from .partition.grouping import check_plan_formed, node_graph, partition
from .partition.plan_file import fit_plan, load_plan
from .partition.policy import FusionPolicy, switches_of
from .dumps import Dumper
from .partition.report import fusion_report
from .prepare import prepare
from .prepare.horizontal import merge_parallel_elementwise, merge_parallel_matmuls
from .prepare.rotary_heads import join_rotary_heads
from .runtime import AscendModule
from .runtime.module import module_class
from .runtime.build_cache import build_key, lookup
from .runtime.toolchain import default_cache_dir
from .runtime.weights import lift_weights
from .scheduling import schedule_groups
from .target import resolve_target

logger = logging.getLogger("tvm_ascend")


def plan_fusion(imported: tvm.IRModule, policy: FusionPolicy, soc, params=None,
                precision: tuple = ("must_keep_origin_dtype", ()), cost: GroupCost | None = None):
    """Prepare (with the precision mode ``precision`` = (mode, keep_dtype[, implmode])) and
    partition ``imported`` under ``policy``.

    ``prepare`` runs once, and every partition asks one ``cost`` (``GroupCost``, a new one when
    none is given): the alternatives below and the plans a kernel failure makes ``build`` draw
    again share its plans, since a PrimFunc plans the same on one SoC whatever holds it.

    HorizontalFusion rewrites the graph before partitioning, so whether it pays shows only in
    the groups that follow (a merged Q/K/V projection pays when the attention kernel takes
    the slices; parallel MatMuls with their own epilogues lose them; with Q and K adjacent
    slices of one product, their rotaries become one over both's heads,
    ``prepare.rotary_heads``): the unmerged partition,
    the one with parallel MatMuls merged and the one with parallel elementwise ops merged too
    (``prepare.horizontal.merge_parallel_elementwise``) are made and the one with the lowest
    estimated latency on the device's timeline is kept; the report's ``horizontal_fusion``
    records every estimate, also end to end at the low and the high end of the host's
    submission time per launch (``est_us_low`` / ``est_us_high``), and its ``reason`` says
    when either end would keep another alternative.
    """
    fold = "BatchNormFolding" in policy.rules
    cost = cost or GroupCost(soc)
    prepared = prepare(imported, params, fold, precision)
    horizontal = "HorizontalFusion" in policy.rules
    if horizontal:
        merged_mod, merged = merge_parallel_matmuls(prepared)
        if merged:  # Q and K now adjacent slices of one product: one rotary over their heads
            merged_mod, _ = join_rotary_heads(merged_mod)
        # elementwise merges are a second alternative on top of the MatMul one: a bad one
        # (e.g. bias Adds torn from their MatMuls) must not cost a good QKV merge
        both_mod, elementwise = merge_parallel_elementwise(merged_mod)
    if policy.plan is not None:
        # the plan's groups are connected and acyclic in the graph they formed in, the one
        # after prepare's rewrites (and merges), not always in the ONNX graph
        variants = [prepared] + ([merged_mod] if horizontal and merged else []) + \
            ([both_mod] if horizontal and elementwise else [])
        policy = replace(policy, plan=fit_plan(policy.plan,
                                               [node_graph(m)[1] for m in variants]))
    # with alternatives, an imported plan is checked against the one kept: the unmerged one
    # cannot form a plan's merged Q/K/V group, which is no reason to warn when another does
    result = partition(prepared, soc, policy=policy, cost=cost, check_plan=not horizontal)
    if not horizontal:
        return result
    alternatives = [(result, "none", 0)]
    if merged:
        alternatives.append((partition(merged_mod, soc, policy=policy, cost=cost,
                                       check_plan=False), "matmul", merged))
    if elementwise:
        alternatives.append((partition(both_mod, soc, policy=policy, cost=cost,
                                       check_plan=False),
                             "matmul+elementwise" if merged else "elementwise", elementwise))
    if len(alternatives) == 1:
        return _plan_checked(result, policy)
    estimates = [_estimated_us(alt) for alt, _, _ in alternatives]
    best = min(range(len(alternatives)), key=lambda i: (estimates[i], i))
    keep = alternatives[best][0]
    with_h = min(estimates[1:])
    names = [name for _, name, _ in alternatives]
    # the choice is made on the device's timeline; a merge that adds launches (the copies of
    # a QKV merge whose slices no kernel takes) can lose once the host's submissions show
    ends = {end: [end_to_end_us(_launch_times(alt), submit) for alt, _, _ in alternatives]
            for end, submit in (("low", soc.submit_low_us), ("high", soc.submit_high_us))}
    keep.horizontal = {"merged_groups": merged, "elementwise_groups": elementwise,
                       "est_us_merged": round(with_h, 3), "est_us_unmerged": round(estimates[0], 3),
                       "est_us": {name: round(est, 3) for name, est in zip(names, estimates)},
                       **{f"est_us_{end}": {name: round(est, 3) for name, est in zip(names, ests)}
                          for end, ests in ends.items()},
                       "kept": best > 0, "kept_variant": alternatives[best][1],
                       "reason": _horizontal_reason(names, estimates, ends, best, soc)}
    logger.info("HorizontalFusion: %d MatMul + %d elementwise group(s); %s", merged,
                elementwise, keep.horizontal["reason"])
    return _plan_checked(keep, policy)


def _plan_checked(result, policy: FusionPolicy):
    """``result``, once every group of the policy's imported plan is found in it (a pinned one
    missing is an error, any other a warning: ``check_plan_formed``)."""
    if policy.plan is not None:
        check_plan_formed(result, policy.plan)
    return result


def precision_of(config: CompileConfig) -> tuple:
    """The (precision mode, keep_dtype, op_select_implmode) that ``prepare`` applies for
    ``config``."""
    return config.precision_mode, tuple(config.keep_dtype), config.op_select_implmode


def _estimated_us(result) -> float:
    return sum(g.estimate.get("time_us", 0.0) for g in result.groups)


def _launch_times(result) -> list[float]:
    """Device times of the launches of ``result``, in program order (free views launch nothing)."""
    return [g.estimate.get("time_us", 0.0) for g in result.groups if g.on_npu or not g.free]


def _horizontal_reason(names: list, device: list, ends: dict, best: int, soc) -> str:
    """Why HorizontalFusion kept ``names[best]``, and whether the host's submission time per
    launch (``ends``: end-to-end estimates at its low and high end) would choose otherwise."""
    others = ", ".join(f"{device[i]:.2f} us {names[i]}" for i in range(len(names)) if i != best)
    reason = (f"kept {names[best]}: est. {device[best]:.2f} us on the device's timeline "
              f"(host submission hidden) against {others}")
    flips = []
    for end, submit in (("low", soc.submit_low_us), ("high", soc.submit_high_us)):
        times = ends[end]
        winner = min(range(len(names)), key=lambda i: (times[i], i))
        if winner != best:
            flips.append(f"at the {end} end ({submit:g} us per launch) {names[winner]} wins, "
                         f"{times[winner]:.2f} us against {times[best]:.2f} us")
    if flips:
        reason += ("; this choice depends on the host's submission time per launch: "
                   + "; ".join(flips))
    else:
        reason += (f"; the same at {soc.submit_low_us:g} and {soc.submit_high_us:g} us of host "
                   "submission per launch")
    return reason


def fusion_policy(config: CompileConfig, imported: tvm.IRModule) -> FusionPolicy:
    """The planner's policy: rules from the config, and the imported plan checked against the
    model (unknown nodes, cycles) before any work starts."""
    plan = None
    if config.fusion_plan_file:
        # connectivity and cycles wait for the graphs the planner groups (plan_fusion)
        plan = load_plan(config.fusion_plan_file, node_graph(imported)[0], None)
    return FusionPolicy.from_config(config, plan, imported)


def group_cost(config: CompileConfig) -> GroupCost:
    """The one cost of a build: the config's SoC, tuning database and planner model."""
    return GroupCost(config.soc, config.tuning_database,
                     planner_ranking(config.planner_model, config.planner_top_k))


def partition_for_ascend(mod, config: CompileConfig | None = None):
    """Partition a Relax module for Ascend, in the style of TVM's other BYOC backends.

    Returns the module with NPU groups as ``Codegen="ascend"`` functions and the decisions.
    """
    config = (config or CompileConfig()).with_env()
    imported = load_model(mod, config.input_shape)
    policy = fusion_policy(config, imported)
    return plan_fusion(imported, policy, config.soc, precision=precision_of(config),
                       cost=group_cost(config))


def _nodes_before(mod: tvm.IRModule) -> int:
    """ONNX nodes of the model (bindings of ``main`` for a module not imported from ONNX)."""
    attrs = mod["main"].attrs
    if attrs and ir_attrs.ONNX_NODE_COUNT in attrs:
        return int(attrs[ir_attrs.ONNX_NODE_COUNT])
    return sum(len(block.bindings) for block in mod["main"].body.blocks)


def _onnx_model(mod):
    """The ONNX model behind ``mod`` (for the graph dumps), or None for a Relax module."""
    import onnx
    if isinstance(mod, onnx.ModelProto):
        return mod
    if isinstance(mod, (str, os.PathLike)):
        return onnx.load(os.fspath(mod), load_external_data=False)
    return None


def build(mod, target="ascend", params=None, config: CompileConfig | None = None
          ) -> AscendModule:
    """Compile a model for an Ascend NPU.

    Parameters
    ----------
    mod : str, os.PathLike, onnx.ModelProto or tvm.IRModule
        The model: an ONNX file, a loaded ONNX model, or a Relax IRModule.
    target : str or tvm.target.Target
        ``"ascend"`` (SoC from ``config.soc_version``) or a SoC tag such as ``"ascend/310p3"``.
    params : dict, optional
        Weights to bind into ``main`` (name -> array), as Relay-era ``build`` took them.
    config : CompileConfig, optional
        Fusion level, dumps, SoC, ...; environment variables override it.

    Returns
    -------
    AscendModule
        ``run``, ``export_library``, ``kernel_sources``, ``fusion_report``, ``profile``.

    Example
    -------
    >>> lib = build("model.onnx", config=CompileConfig(fusion_level="aggressive"))  # doctest: +SKIP
    """
    config = (config or CompileConfig()).with_env()
    _, target_soc = resolve_target(target)
    if str(target).strip().lower() != "ascend" and target_soc != config.soc_version:
        config = config.replace(soc_version=target_soc)
    switches_of(config)  # parse now: a bad switch file is an error before any work starts
    gears = config_gears(config)  # so are gears that break ATC's rules
    _check_device(config)  # and a device build without its toolkit
    register_codegen()
    mod = read_model(mod)
    key = build_key(mod, params, config)
    cache_dir = config.cache_dir or default_cache_dir()
    earlier = lookup(key, cache_dir, config.op_compiler_cache_mode)
    if earlier is not None:
        logger.info("build cache hit %s: the library of an earlier identical build", key)
        return module_class(earlier[1])(metadata=earlier[1], library_path=earlier[0],
                                        cache_dir=cache_dir)
    if gears is not None:
        from .gear_build import build_gears  # the flow once per gear, then one library

        return build_gears(mod, gears, config, params, key)
    dumps = Dumper(config.dump_graph, config.dump_path)
    imported = load_model(mod, config.input_shape, checked=True)
    dumps.module("000_imported.py", imported)
    built = _plan_and_build(imported, fusion_policy(config, imported), config, params, key)
    result, scheduled, report, source = built.result, built.scheduled, built.report, built.source
    dumps.module("010_partitioned.py", result.mod)
    dumps.scheduled(scheduled)
    dumps.report(report)
    dumps.graphs(_onnx_model(mod) if config.dump_graph else None, report)
    dumps.kernels(built.module.kernel_sources())
    logger.info("built: %d NPU kernel(s), %d host group(s)", report["npu_kernels"],
                report["host_groups"])
    warn_dynamic(report)
    return built.module


def _check_device(config: CompileConfig) -> None:
    """Raise ToolchainError for a ``device="npu"`` build this installation cannot make:
    without a CANN toolkit, naming what is missing (``cann.probe``: the home variable, the
    device compiler, acl/acl.h, the AscendC headers or libascendcl.so)."""
    if config.device != "npu":
        return
    from .runtime import cann

    toolkit, reason = cann.probe()
    if toolkit is None:
        raise ToolchainError(
            f"device='npu' builds the kernels with CANN's device compiler and runs them "
            f"through ACL, which needs a CANN toolkit: {reason}. Build with "
            f"device='emulator' (the default) to run on the CPU emulator")
    # the per-kernel device build exists (runtime/cann.py, used by tuning/board.py); linking
    # every kernel and the ACL launchers into one exported module does not yet
    raise ToolchainError(
        f"device='npu': the CANN toolkit at {toolkit.root} ({toolkit.home_variable}) is "
        f"complete, but whole-model NPU builds are not implemented yet; single kernels are "
        f"built and timed on a board through tvm_ascend.tuning.board. Build with "
        f"device='emulator' (the default) to run on the CPU emulator")


# A failed kernel costs one more plan; each plan takes at least one op off a fused kernel or
# the NPU, so a few rounds settle any model seen so far. A model that needs more fails loudly.
MAX_PLANS = 6


@dataclass
class _Built:
    result: object
    scheduled: tvm.IRModule
    report: dict
    source: str
    module: AscendModule


def _plan_and_build(imported: tvm.IRModule, policy: FusionPolicy, config: CompileConfig,
                    params, key: str | None) -> _Built:
    """Plan, schedule, print and compile; a kernel that fails at any of the three stages
    below the partitioner is recorded and the model planned again without it (its group split
    into single ops, a single op on the host: ``fallback.py``), unless ``config.strict``."""
    soc = config.soc
    failures: list[KernelFailure] = []
    # one cost for the build: every alternative, the plan drawn again after a failure and the
    # schedule stage ask it, and it asks the tuning database first
    cost = group_cost(config)
    for _ in range(MAX_PLANS):
        result = plan_fusion(imported, policy, soc, params, precision_of(config), cost)
        try:
            return _build_plan(result, imported, config, failures, key, cost)
        except _KernelsFailed as failed:
            if config.strict:
                raise failed.error from None
            for failure in failed.failures:
                logger.warning("%s", failure.describe())
            failures += failed.failures
            policy = policy_after(policy, failed.failures)
    raise CodegenError(f"kernels still fail after {MAX_PLANS} plans: "
                       + "; ".join(f.describe() for f in failures[-3:]))


class _KernelsFailed(Exception):
    """Kernels of one plan that failed (``failures``), and the first error, for strict mode."""

    def __init__(self, failures: list[KernelFailure], error: BaseException):
        super().__init__(error)
        self.failures, self.error = failures, error


def _failed(result, stage: str, errors: dict) -> _KernelsFailed:
    """The _KernelsFailed of ``errors`` ({kernel symbol: exception}) at ``stage``."""
    failures = [failure_of(group, stage, errors[group.symbol]) for group in result.groups
                if group.on_npu and group.symbol in errors]
    return _KernelsFailed(failures, next(iter(errors.values())))


def _build_plan(result, imported, config: CompileConfig, earlier: list, key: str | None,
                cost: GroupCost) -> _Built:
    """One plan's schedule, print and compile stages (the kernels as ``cost`` planned them);
    raises _KernelsFailed naming the kernels that failed."""
    soc = config.soc
    errors: dict = {}
    scheduled, tilings = schedule_groups(result.mod, cost, failures=errors)
    if errors:
        raise _failed(result, "schedule", errors)
    report = fusion_report(result, tilings, config, _nodes_before(imported))
    report["kernel_failures"] = [f.to_json() for f in earlier]
    dynamic = dynamic_section(imported, result, report)
    if dynamic is not None:  # ops a symbolic dimension keeps on the host: none silently
        report["dynamic"] = dynamic
    names = _input_names(imported, scheduled)
    metadata = {"soc_version": soc.name, "report": report, "inputs": names,
                "input_specs": _input_specs(scheduled, names),
                "dim_ranges": _dim_ranges(imported), "index_inputs": index_inputs_of(imported)}
    try:
        lowered, unit = _codegen(scheduled, soc, metadata)
    except CodegenError as err:  # printed again one by one, only now, to name the culprits
        errors = _print_errors(scheduled, soc)
        if not errors:
            raise
        raise _failed(result, "print", errors) from err
    source = unit.code
    host, weights = lift_weights(lowered)  # the library holds code; its weights ride beside
    executable = tvm.compile(host, target=tvm.target.Target("llvm"))
    module = AscendModule(executable, unit.metadata,
                          cache_key=_cache_key(lowered, source), cache_dir=config.cache_dir,
                          build_key=key, cache_mode=config.op_compiler_cache_mode,
                          weights=weights)
    try:
        module.compile()
    except ToolchainError as err:
        culprits = compile_error_kernels(source, err.output)
        if not culprits:  # not a kernel's fault (the runtime, the host code): nothing to drop
            raise
        raise _failed(result, "compile", {symbol: err for symbol in culprits}) from err
    return _Built(result, scheduled, report, source, module)


def _print_errors(scheduled: tvm.IRModule, soc) -> dict:
    """{kernel symbol: exception} of the kernels whose printer fails."""
    funcs = [func for func in scheduled.functions.values() if isinstance(func, relax.Function)
             and func.attrs and func.attrs.get("Codegen") == "ascend"]
    errors = {}
    for kernel in scheduled_kernels(funcs):
        try:
            kernel_source(kernel, soc)
        except Exception as err:  # noqa: BLE001 - any printer failure is that kernel's
            errors[kernel.symbol] = err
    return errors


def _input_names(imported: tvm.IRModule, scheduled: tvm.IRModule) -> list[str]:
    """The names ``lib.run`` takes: the ONNX graph's input names where the model came from
    ONNX (TVM renames some, "1" -> "input_1"), the Relax parameter names otherwise."""
    params = [p.name for p in scheduled["main"].params]
    attrs = imported["main"].attrs
    if attrs and ir_attrs.ONNX_INPUTS in attrs:
        names = [str(n) for n in attrs[ir_attrs.ONNX_INPUTS]]
        if len(names) == len(params):
            return names
    return params


def _input_specs(scheduled: tvm.IRModule, names: list[str]) -> list[dict]:
    """What ``lib.run`` checks each input against: ``{"name", "shape", "dtype"}``, a dimension
    an integer, the name of a dynamic size (inputs naming one size must agree), or None (an
    expression of sizes, left to the VM)."""
    specs = []
    for name, param in zip(names, scheduled["main"].params):
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or getattr(ty.shape, "values", None) is None:
            specs.append({"name": name, "shape": None, "dtype": None})
            continue
        dims = []
        for dim in ty.shape.values:
            if isinstance(dim, tvm.tirx.IntImm):
                dims.append(int(dim))
            else:
                dims.append(dim.name if isinstance(dim, tvm.tirx.Var) else None)
        specs.append({"name": name, "shape": dims, "dtype": str(ty.dtype)})
    return specs


def _dim_ranges(imported: tvm.IRModule) -> dict:
    """{dimension name: [lo, hi]} of the ranged input dimensions (``--input_shape x:1~8``)."""
    attrs = imported["main"].attrs
    if attrs and ir_attrs.DIM_RANGES in attrs:
        return json.loads(str(attrs[ir_attrs.DIM_RANGES]))
    return {}


def index_inputs_of(imported: tvm.IRModule) -> list[dict]:
    """The inputs whose values index a table (frontend/index_bounds.py), for ``lib.run``."""
    attrs = imported["main"].attrs
    if attrs and ir_attrs.INDEX_INPUTS in attrs:
        return json.loads(str(attrs[ir_attrs.INDEX_INPUTS]))
    return []


def _codegen(scheduled: tvm.IRModule, soc, metadata: dict) -> tuple[tvm.IRModule, PrintedUnit]:
    """RunCodegen with ``relax.ext.ascend``: (module with the unit attached, the unit as
    printed: its code, kernel sources and metadata, handed back through ``PrintedUnits``)."""
    printed = PrintedUnits()
    codegen = relax.transform.RunCodegen(
        {"ascend": {"soc_version": soc.name, "metadata": json.dumps(metadata),
                    "printed": printed}})
    try:
        lowered = codegen(scheduled)
    except Exception as err:  # noqa: BLE001 - errors in relax.ext.ascend cross the FFI
        raise CodegenError(f"printing the AscendC kernels failed: {err}") from err
    if not printed.units:  # nothing offloaded: the unit still carries the metadata
        module, unit = unit_module([], soc, metadata)
        return lowered.with_attr("external_mods", [module]), unit
    (unit,) = printed.units  # RunCodegen hands relax.ext.ascend every kernel at once
    return lowered, unit


def _cache_key(lowered: tvm.IRModule, source: str) -> str:
    """Key of the compiled library: the kernels' source and the whole host module, weights
    included (the script printer leaves constants out, the structural hash does not)."""
    host_hash = sorted(f"{gv.name_hint}:{tvm_ffi.structural_hash(func, map_free_vars=True)}"
                       for gv, func in lowered.functions.items())
    return hashlib.sha256(f"{source}|{host_hash}".encode()).hexdigest()[:32]
