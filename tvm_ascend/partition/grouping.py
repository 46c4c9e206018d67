"""Grouping: TVM's FuseOps proposes groups; wholly supported groups go to the ``ascend`` codegen.

Flow inside this stage (one direction):
  support marking  every binding of ``main`` is checked against the ``ascend.*`` table
  legalize         LegalizeOps (float16 softmax, LayerNorm, sums and means computed in float32
                   inside their PrimFunc: legalize.py) + AnnotateTIROpPattern; host-only ops
                   become opaque so FuseOps never joins them with NPU ops
  FuseOps/FuseTIR  TVM's lattice (elemwise < broadcast < injective < reduce < opaque) groups
  offload          each group whose ops all passed becomes a Relax function with
                   ``Codegen="ascend"``, carrying its fused PrimFunc and provenance as attributes
The result is data (``PartitionResult``) that the schedule stage reads; nothing here emits code.
"""
from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from collections import Counter

from .. import ir_attrs
from ..decision import Decision
from ..errors import FusionConfigError
from ..kernel_record import KernelRecord
from ..schedules import supports
from .causal import with_causal_facts
from .cost import GroupCost, host_estimate, tir_flops
from .legalize import impl_mode_of, legalize_map
from .export import export_shared
from .dim_bounds import main_ranges, with_dim_bounds
from .merge import Site, distinct_args, merge_sites, unfused_edges
from .policy import FusionPolicy
from .rules import anchor_rule, group_rules
from .site_cost import io_bytes as _io_bytes, view_copy_reason
from .patterns import check_call, is_view_only, register_ascend_patterns
from .patterns.layout import MOVE_OPS

logger = logging.getLogger("tvm_ascend.partition")

OPAQUE = 8  # tvm::relax::OpPatternKind::kOpaque


@dataclass
class OpInfo:
    """One Relax binding of the imported model."""

    var: str
    op: str
    dtype: str
    shape: tuple
    decision: Decision
    node: str = ""  # the ONNX node that produced it ("" for modules not imported from ONNX)
    horizontal: bool = False  # made by merging parallel ops (HorizontalFusion)
    folded: bool = False      # a conv with a BatchNorm folded into its weights (BatchNormFolding)
    parts: tuple = ()         # per node of ``nodes``: this op's index among that node's ops

    @property
    def nodes(self) -> list[str]:
        """ONNX nodes it computes: several after a horizontal merge (stored newline-joined)."""
        return [n for n in self.node.split("\n") if n]

    @property
    def plan_keys(self) -> list[tuple[str, int]]:
        """(ONNX node, part) pairs it computes: how a fusion plan names one op of a node that
        was lowered to several (a Gather's index fix-up and its take)."""
        return list(zip(self.nodes, self.parts or (0,) * len(self.nodes)))


@dataclass
class KernelGroup:
    """A group of operators that runs as one kernel (on the NPU) or stays on the host."""

    name: str
    symbol: str | None
    members: list[OpInfo]
    on_npu: bool
    rule: str
    reason: str
    gm_bytes_saved: int = 0
    formed_by: str = ""
    io_bytes: int = 0          # bytes of its inputs and output (the GM traffic of a host group)
    free: bool = False         # a host group of views only: no copy, no launch
    estimate: dict = field(default_factory=dict)
    exports: list = field(default_factory=list)  # results it also writes for other kernels

    @property
    def rules(self) -> list[str]:
        return [] if self.rule == "single-op" else self.rule.split("+")

    def to_json(self) -> dict:
        return {
            "name": self.name, "kernel": self.symbol, "on_npu": self.on_npu, "rule": self.rule,
            "rules": self.rules, "formed_by": self.formed_by, "reason": self.reason,
            "gm_bytes_saved": self.gm_bytes_saved, "io_bytes": self.io_bytes,
            "launch": self.on_npu or not self.free,
            "estimate": self.estimate,
            **({"exports": self.exports} if self.exports else {}),
            "onnx_nodes": list(dict.fromkeys(n for m in self.members for n in m.nodes)),
            "ops": [{"var": m.var, "op": m.op, "node": m.node, "dtype": m.dtype,
                     "shape": list(m.shape), "supported": m.decision.ok,
                     "why": m.decision.reason, "parts": dict(m.plan_keys)}
                    for m in self.members],
        }


@dataclass
class PartitionResult:
    """The partitioned module and every grouping decision, for the stages below and the report."""

    mod: tvm.IRModule
    groups: list[KernelGroup] = field(default_factory=list)
    ops: dict[str, OpInfo] = field(default_factory=dict)
    edges: list = field(default_factory=list)  # (producer, consumer, reason, hint, summary)
    rule_matches: Counter = field(default_factory=Counter)  # rule -> candidates considered
    policy: FusionPolicy = field(default_factory=FusionPolicy.default)
    horizontal: dict = field(default_factory=dict)  # HorizontalFusion's decision, when tried

    @property
    def npu_groups(self) -> list[KernelGroup]:
        return [g for g in self.groups if g.on_npu]


def _op_name(value) -> str:
    op = getattr(value, "op", None)
    return getattr(op, "name", None) or getattr(op, "name_hint", None) or type(value).__name__


def _shape_of(ty) -> tuple:
    shape = getattr(ty, "shape", None)
    try:
        return tuple(int(d) for d in shape.values)
    except (TypeError, AttributeError):
        return ()


def _bindings(func):
    for block in func.body.blocks:
        yield from block.bindings


def mark_support(mod: tvm.IRModule) -> dict[str, OpInfo]:
    """Check every binding of ``main`` against the ascend pattern table."""
    register_ascend_patterns()
    ops = {}
    attrs = mod["main"].attrs
    key = ir_attrs.ONNX_NODES
    node_names = dict(attrs[key]) if attrs and key in attrs else {}
    merged = set(str(v) for v in attrs[ir_attrs.HORIZONTAL]) if attrs and \
        ir_attrs.HORIZONTAL in attrs else set()
    folded = set(str(v) for v in attrs[ir_attrs.FOLDED_BATCH_NORM]) if attrs and \
        ir_attrs.FOLDED_BATCH_NORM in attrs else set()
    for binding in _bindings(mod["main"]):
        value = binding.value
        ty = getattr(binding.var, "ty", None)
        if _is_call_tir(value):
            decision = _check_tir_call(mod, value)
        elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            decision = check_call(value)
        else:
            decision = Decision.no(f"{type(value).__name__} binding is not an operator call")
        ops[binding.var.name] = OpInfo(binding.var.name, _op_name(value),
                                       str(getattr(ty, "dtype", "")), _shape_of(ty), decision,
                                       str(node_names.get(binding.var.name, "")),
                                       binding.var.name in merged, binding.var.name in folded)
    _number_parts(ops.values())
    return ops


def _number_parts(infos) -> None:
    """Number the ops of each ONNX node in program order: one node the importer lowered to
    several bindings can land in several groups, and a fusion plan names each part."""
    seen: Counter = Counter()
    for info in infos:
        info.parts = tuple(seen[node] for node in info.nodes)
        seen.update(info.nodes)


def node_graph(mod: tvm.IRModule) -> tuple[set, list]:
    """(ONNX node names, (producer node, consumer node) edges) of a module's ``main``: the
    graph a fusion plan names its groups in (``plan_file.fit_plan`` checks a plan in it).

    A binding credited to several nodes (newline-joined: a horizontal merge, a prepare rewrite
    that makes one op for several nodes, as LLaMA's joined rotary does, an identity Cast folded
    into the op before it) links each node it reads from to each of its own, and its own nodes
    to each other both ways (one op cannot be in two groups): read as one name, its nodes would
    be in no edge, and a plan group holding them would look unconnected. A binding credited
    to no node links the nodes it reads from to its readers' nodes."""
    attrs = mod["main"].attrs
    names = dict(attrs[ir_attrs.ONNX_NODES]) if attrs and ir_attrs.ONNX_NODES in attrs else {}
    nodes_of: dict = {}
    edges = []
    for binding in _bindings(mod["main"]):
        nodes = [n for n in str(names.get(binding.var.name, "")).split("\n") if n]
        producers = [p for var in relax.analysis.free_vars(binding.value)
                     for p in nodes_of.get(var, ())]
        if not nodes:
            # an op no node is credited with (a cast prepare inserts, a view it adds) passes
            # its producers' nodes on: without it, a plan group across it looked unconnected
            nodes_of[binding.var] = list(dict.fromkeys(producers))
            continue
        nodes_of[binding.var] = nodes
        edges += [edge for a, b in zip(nodes, nodes[1:]) for edge in ((a, b), (b, a))]
        edges += [(producer, node) for producer in producers for node in nodes
                  if producer != node]
    return {n for nodes in nodes_of.values() for n in nodes}, list(dict.fromkeys(edges))


def _is_call_tir(value) -> bool:
    return isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.call_tir"))


def _check_tir_call(mod, call) -> Decision:
    """The importer emits some ops (Clip, ...) as call_tir already: judge their TIR."""
    callee = call.args[0].name_hint
    decision = supports(mod[call.args[0]])
    if decision:
        return Decision.yes(f"TIR function {callee}: {decision.reason}")
    return Decision.no(f"TIR function {callee}: {decision.reason}; it runs on the host")


def _call_tir_sites(func):
    """(var name, callee GlobalVar, call) for each call_tir binding of a function."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    for binding in _bindings(func):
        value = binding.value
        if isinstance(value, relax.Call) and value.op.same_as(call_tir):
            yield binding.var.name, value.args[0], value


@mutator
class _CallSwap(PyExprMutator):
    """Replaces given call expressions (by identity) with new ones."""

    def __init__(self, mod, swaps):
        super().__init__(mod)
        self.swaps = swaps  # list of (original call, replacement)

    def visit_call_(self, call):
        for original, replacement in self.swaps:
            if original.same_as(call):
                return replacement
        return super().visit_call_(call)


def _unshare_callees(mod: tvm.IRModule, ops: dict[str, OpInfo]):
    """Give every call_tir of ``main`` its own PrimFunc name; (module, name -> OpInfo).

    LegalizeOps shares structurally equal PrimFuncs between ops; one name per op lets every
    group list exactly its own model ops (equal kernels are shared again after grouping).
    LegalizeOps keeps the binding variables of ``main``; an extra call it makes has no entry in
    ``ops`` and is recorded as a host-only helper.
    """
    by_callee: dict[str, OpInfo] = {}
    swaps, seen = [], set()
    swap = _CallSwap(mod, swaps)
    for var, callee, call in _call_tir_sites(mod["main"]):
        info = ops.get(var) or OpInfo(var, "legalized helper", "", (), Decision.no(
            "extra TIR call made by LegalizeOps; it runs on the host"))
        if callee.name_hint not in seen:
            seen.add(callee.name_hint)
            by_callee[callee.name_hint] = info
            continue
        # The attribute keeps BlockBuilder from handing back the shared function.
        copy = mod[callee].with_attr(ir_attrs.MODEL_OP, var)
        gvar = swap.builder_.add_func(copy, f"{callee.name_hint}_{len(swaps) + 1}")
        by_callee[gvar.name_hint] = info
        out = call.ty_args[0]  # a Split's call has a tuple of outputs
        out = list(out.fields) if isinstance(out, relax.TupleType) else out
        swaps.append((call, relax.op.call_tir(gvar, call.args[1], out)))
    swap.builder_.update_func(mod.get_global_var("main"), swap.visit_expr(mod["main"]))
    return swap.builder_.get(), by_callee


def _make_opaque(mod: tvm.IRModule, callees) -> tvm.IRModule:
    """Give ``callees`` the opaque pattern, so FuseOps leaves them alone."""
    for gv, func in list(mod.functions.items()):
        if gv.name_hint in callees and isinstance(func, tvm.tirx.PrimFunc):
            mod.update_func(gv, func.with_attr("op_pattern", OPAQUE))
    return mod


def _always_alone(by_callee: dict, policy: FusionPolicy) -> set:
    """Callees FuseOps must never group: host-only ops, data movement and fenced nodes."""
    # Data movement is grouped by the merge rule, which checks that a template tiles the
    # result, rather than by FuseOps, which would fold a Transpose into a MatMul's epilogue.
    return {name for name, info in by_callee.items()
            if not info.decision.ok or info.op in MOVE_OPS
            or set(info.nodes) & policy.no_fuse_nodes or info.var in policy.split_ops}


def _fuse_ops(lowered, by_callee, policy: FusionPolicy, matches: Counter, untileable=None):
    """TVM's FuseOps, with the groups of switched-off kinds (or crossing an imported plan's
    groups) taken apart: their ops become opaque and FuseOps runs again, until every group it
    forms is allowed. Returns (fused module, group -> member callees, callee -> why split)."""
    alone = _always_alone(by_callee, policy)
    split: dict[str, str] = dict(untileable or {})
    for attempt in range(8):
        fused = relax.transform.FuseOps(fuse_opt_level=2 if policy.fuse else 0)(
            _make_opaque(lowered, alone | set(split)))
        members = {}
        for gv, func in fused.functions.items():
            if isinstance(func, relax.Function) and func.attrs and "Primitive" in func.attrs:
                members[gv.name_hint] = [c.name_hint for _, c, _ in _call_tir_sites(func)]
        new = {}
        for parts in members.values():
            infos = [by_callee[p] for p in parts if p in by_callee]
            rules = group_rules(info.op for info in infos)
            if attempt == 0:
                matches.update(rules)
            why = _split_reason(infos, rules, policy)
            if why:
                new.update({part: why for part in parts})
        if not new:
            return fused, members, split
        split.update(new)
    raise AssertionError("FuseOps kept forming switched-off groups")  # pragma: no cover


def _split_reason(infos, rules, policy: FusionPolicy) -> str:
    off = policy.switched_off(rules)
    if off:
        return (f"rule {off[0]} is switched off (fusion level {policy.level!r}, rule set "
                f"{policy.rule_set!r} or the fusion switch file)")
    plan = policy.plan
    if plan is not None:
        keys = [key for info in infos for key in info.plan_keys]
        if len({plan.groups_of(*key) for key in keys}) > 1 and plan.shared_group(keys) is None:
            return "the imported fusion plan puts these ops in different groups"
    return ""


_VIEWS_ON_HOST = Decision.no("only layout views: on the host they are free (no copy), so no "
                             "kernel is launched for them")


def _kernel_symbol(name: str, index: int) -> str:
    short = re.sub(r"[^0-9a-zA-Z_]", "_", name)[:48]
    return f"ascend_k{index}_{short}"


@mutator
class _OffloadRewriter(PyExprMutator):
    """Replaces the call_tir of each NPU site by a call to its codegen function; a kernel that
    exports a producer's result is bound as a tuple, whose fields replace the producer's
    binding (dropped) and the consumer's."""

    def __init__(self, mod, targets):
        super().__init__(mod)
        self.targets = targets  # list of (original call_tir, codegen GlobalVar, args)
        self.exporting: dict = {}  # consumer var -> the producer vars it exports, in order
        self.exported: set = set()  # producer vars whose binding the exporting kernel replaces

    def visit_var_binding_(self, binding):
        if binding.var in self.exported:
            return
        exports = self.exporting.get(binding.var)
        if exports is None:
            super().visit_var_binding_(binding)
            return
        outs = self.builder_.emit(self.visit_expr(binding.value),
                                  name_hint=f"{binding.var.name}_outs")
        for index, var in enumerate(list(exports) + [binding.var]):
            item = relax.TupleGetItem(outs, index)
            new = self.builder_.emit(item, name_hint=var.name) \
                if isinstance(var, relax.DataflowVar) else \
                self.builder_.emit_output(item, name_hint=var.name)
            self.set_var_remap(var, new)

    def visit_call_(self, call):
        for original, gvar, args in self.targets:
            if original.same_as(call):
                return relax.Call(gvar, [self.visit_expr(a) for a in args])
        return super().visit_call_(call)


def _codegen_function(prim_gv, prim_func, args, out_ty, symbol, group_json, plan):
    params = [relax.Var(f"p{i}", arg.ty) for i, arg in enumerate(args)]
    outs = list(out_ty.fields) if isinstance(out_ty, relax.TupleType) else out_ty
    body = relax.op.call_tir(prim_gv, relax.Tuple(params), outs)
    func = relax.Function(params, body, out_ty)
    # the schedule stage applies the plan of these knobs (None: the template's defaults)
    knobs = dataclasses.asdict(plan.knobs) if plan.knobs is not None else None
    record = KernelRecord(plan.template.name, knobs, None, group_json)
    return func.with_attrs({"Codegen": "ascend", "global_symbol": symbol,
                            ir_attrs.PRIM_FUNC: prim_func, ir_attrs.KERNEL: record.to_json()})


def partition(mod: tvm.IRModule, soc, fuse: bool = True,
              policy: FusionPolicy | None = None, cost: GroupCost | None = None,
              check_plan: bool = True) -> PartitionResult:
    """Group ``mod``'s operators and mark the NPU groups for the ``ascend`` codegen.

    Parameters
    ----------
    mod : tvm.IRModule
        Relax module with a ``main`` of high-level operators (as the ONNX importer gives).
    soc : SocProfile
        The target SoC: a group is offloaded only if a schedule template tiles it there.
    fuse : bool
        ``False`` keeps one kernel per operator (fusion off); ignored when ``policy`` is given.
    policy : FusionPolicy, optional
        Rules on, rule set, fenced nodes, imported plan (``FusionPolicy.from_config``).
    cost : GroupCost, optional
        The plans and estimates to ask (a new one for ``soc`` when none is given); a caller
        that partitions several variants of one model passes one, so each PrimFunc is planned
        once.
    check_plan : bool
        Check that every group of the policy's imported plan formed (``check_plan_formed``).
        A caller that partitions alternatives and keeps one checks the one it keeps.

    Example
    -------
    >>> result = partition(mod, get_soc("Ascend910B1"))                   # doctest: +SKIP
    >>> [g.name for g in result.npu_groups]          # doctest: +SKIP
    ['fused_add_relu_multiply']
    """
    policy = policy or FusionPolicy.default(fuse)
    ops = mark_support(mod)
    _refuse_host_ops(ops, policy)
    lowered = relax.transform.LegalizeOps(legalize_map(impl_mode_of(mod)))(mod)
    lowered = relax.transform.AnnotateTIROpPattern()(lowered)
    lowered, by_callee = _unshare_callees(lowered, ops)
    matches: Counter = Counter()
    cost = cost or GroupCost(soc)
    untileable: dict[str, str] = {}
    for _ in range(4):
        fused, members, split = _fuse_ops(lowered, by_callee, policy, matches, untileable)
        # symbolic dimensions' ranges on each PrimFunc: the templates plan over them
        fused = with_dim_bounds(relax.transform.FuseTIR()(fused), main_ranges(mod))
        new = _untileable_groups(fused, by_callee, members, cost)
        if not new:
            break
        untileable.update(new)
    result = _offload(fused, ops, by_callee, members, split, soc, policy, matches, cost)
    if policy.plan is not None and check_plan:
        check_plan_formed(result, policy.plan)
    return result


def _untileable_groups(fused, by_callee, members, cost) -> dict[str, str]:
    """Callees of FuseOps groups whose ops all run on the NPU but which no template tiles as a
    whole (a MatMul whose epilogue casts to another dtype, ...): taken apart, their ops are
    planned one by one and the merge rule rejoins what does tile, instead of the whole group
    falling back to the host."""
    out = {}
    for gv, func in fused.functions.items():
        parts = members.get(gv.name_hint, [])
        if len(parts) < 2 or not isinstance(func, tvm.tirx.PrimFunc):
            continue
        if not all(p in by_callee and by_callee[p].decision.ok for p in parts):
            continue
        if not cost.plan(func).ok:
            reason = cost.plan(func).decision.reason
            out.update({p: f"TVM's FuseOps group {gv.name_hint} tiles in no template ({reason});"
                        " its ops were planned one by one" for p in parts})
    return out


def _group_for(callee: str, by_callee, members) -> tuple[list[OpInfo], str]:
    """The model ops of a group, in program order, and what formed it."""
    parts = members.get(callee, [callee])
    infos = [by_callee.get(part) or OpInfo(part, part, "", (), Decision.no(
        f"TIR function {part} has no model op")) for part in parts]
    return infos, "tvm.FuseOps" if len(parts) > 1 else "single-op"


def rule_of(members: list[OpInfo], recomputed: bool = False, exported: bool = False) -> str:
    """The report's rule string of a group: its rules joined by ``+`` ("single-op" alone)."""
    rules = group_rules([m.op for m in members], recomputed, exported)
    if any(m.horizontal for m in members):
        rules = (rules or [anchor_rule([m.op for m in members])]) + ["HorizontalFusion"]
    if any(m.folded for m in members):
        rules = (rules or [anchor_rule([m.op for m in members])]) + ["BatchNormFolding"]
    return "+".join(rules) or "single-op"


def _npu_decision(infos: list[OpInfo], call) -> Decision:
    refused = [m for m in infos if not m.decision.ok]
    if refused:
        first = refused[0]
        return Decision.no(f"{first.op} ({first.var}): {first.decision.reason}")
    if not isinstance(call.ty_args[0] if call.ty_args else None, relax.TensorType):
        return Decision.no("the group has several outputs; multi-output elementwise kernels "
                           "are not printed yet, so it runs on the host")
    return Decision.yes(f"all {len(infos)} op(s) supported on the vector unit")


def _same_kernel(a, b) -> bool:
    """Equal computations (copies made for bookkeeping differ only in MODEL_OP) share a kernel."""
    strip = lambda f: f.without_attr(ir_attrs.MODEL_OP) if f.attrs and \
        ir_attrs.MODEL_OP in f.attrs else f  # noqa: E731
    return tvm_ffi.structural_equal(strip(a), strip(b))


def _kept_on_chip(members: list[OpInfo], exported=()) -> int:
    """GM bytes a kernel saves: every op result but the last stays on chip, which saves its
    write and one read (members are in program order; the group has one output); a result it
    exports is still written, and saves only the read of the reader that took it in."""
    total = 0
    for info in members[:-1]:
        size = tvm.runtime.DataType(info.dtype).bits // 8 if info.dtype else 0
        for dim in info.shape:
            size *= dim
        total += size if any(info is e for e in exported) else 2 * size
    return total


def _sites(fused, by_callee, members, split, policy: FusionPolicy, ops) -> list[Site]:
    sites = []
    call_tir = tvm.ir.Op.get("relax.call_tir")
    for binding in _bindings(fused["main"]):
        call = binding.value
        if not (isinstance(call, relax.Call) and call.op.same_as(call_tir)):
            if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and \
                    binding.var.name in ops:
                sites.append(_builtin_site(binding, ops[binding.var.name]))
            continue
        var, callee = binding.var, call.args[0]
        infos, formed_by = _group_for(callee.name_hint, by_callee, members)
        parts = members.get(callee.name_hint, [callee.name_hint])
        prim, args = distinct_args(fused[callee], list(call.args[1].fields), call.ty_args[0],
                                   callee.name_hint)
        site = Site(var, call, callee.name_hint, prim, args, infos, formed_by,
                    _npu_decision(infos, call),
                    split_reason=next((split[p] for p in parts if p in split), ""),
                    fence=_fence(infos, policy))
        sites.append(site)
    return sites


def _fence(infos: list[OpInfo], policy: FusionPolicy) -> str:
    """Why a site may join no group: a fenced node, or a fused kernel of its ops that failed."""
    fenced = [n for m in infos for n in m.nodes if n in policy.no_fuse_nodes]
    if fenced:
        return f"node {fenced[0]} is in no_fuse_nodes"
    failed = [m.var for m in infos if m.var in policy.split_ops]
    if failed:
        return (f"a fused kernel of {failed[0]} failed to build (a bug in tvm-ascend, in the "
                "report's kernel_failures), so its ops are kernels of their own")
    return ""


def _refuse_host_ops(ops: dict[str, OpInfo], policy: FusionPolicy) -> None:
    """Ops whose single-op kernel failed below the partitioner run on the host."""
    for var, reason in policy.host_ops:
        if var in ops:
            ops[var] = dataclasses.replace(ops[var], decision=Decision.no(reason))


def _builtin_site(binding, info: OpInfo) -> Site:
    """A model op LegalizeOps left as a Relax op (CumSum, ...): the VM runs it as a host builtin,
    so it is a host group like any other, with its edges in the report."""
    args = [a for a in binding.value.args if isinstance(a, relax.Var)]
    if is_view_only([binding.value.op.name]):
        decision = _VIEWS_ON_HOST
    else:
        decision = Decision.no(info.decision.reason if not info.decision.ok else
                               "no TIR lowering in TVM; it runs as a host builtin")
    return Site(binding.var, binding.value, binding.var.name, None, args, [info], "single-op",
                decision)


def check_plan_formed(result: PartitionResult, plan) -> None:
    """Every group of an imported plan formed; a pinned one that did not is an error, any other
    a warning (the rules on, or a template, refused it: the reasons are quoted)."""
    formed = {frozenset(k for m in g.members for k in m.plan_keys) for g in result.groups}
    keys = {key for g in result.groups for m in g.members for key in m.plan_keys}
    for wanted in plan.groups:
        held = frozenset(key for key in keys if wanted.holds(*key))
        if len(held) < 2 or held in formed:
            continue
        names = {g.name for g in result.groups
                 if {n for m in g.members for n in m.nodes} & set(wanted.nodes)}
        reasons = sorted({edge[2] for edge in result.edges
                          if edge[0] in names and edge[1] in names})
        message = (f"{plan.source}: plan group {wanted.id} ({', '.join(wanted.nodes)}) did not "
                   f"form: {'; '.join(reasons) or 'no kernel takes it as one group'}")
        if wanted.pinned:
            raise FusionConfigError(message)
        logger.warning("%s", message)


def _offload(fused: tvm.IRModule, ops, by_callee, members, split, soc, policy: FusionPolicy,
             matches: Counter, cost: GroupCost) -> PartitionResult:
    sites = _sites(fused, by_callee, members, split, policy, ops)
    if policy.merge and policy.fuse:
        sites = merge_sites(sites, fused["main"], policy, cost, matches)
        sites = export_shared(sites, fused["main"], policy, cost, matches)
    groups: dict[str, KernelGroup] = {}
    kernels: list[tuple] = []  # (PrimFunc, codegen GlobalVar, symbol, plan) per kernel
    rewriter = _OffloadRewriter(fused, [])
    builder = rewriter.builder_
    for site in sites:
        if site.absorbed_into is not None:
            continue
        # the call's causal constants, a fact on the PrimFunc the plan and kernel share
        site = dataclasses.replace(site, prim=with_causal_facts(site.prim, site.args))
        decision, plan = site.eligible, None
        # Views join a neighbour's kernel when a merge takes them; left alone they stay on
        # the host, free where TVM makes them a view and a host copy elsewhere (site_cost.py,
        # which the merges asked too)
        copy = view_copy_reason(site)
        free = copy == ""
        if copy:
            decision = Decision.no(f"only layout views, but {copy}",
                                   "only layout views, copied on the host")
        elif free and decision.ok:
            decision = _VIEWS_ON_HOST
        elif free and decision is not _VIEWS_ON_HOST:  # of a bool or integer tensor (a mask)
            decision = Decision.no(f"{decision.reason}; {_VIEWS_ON_HOST.reason}")
        # An equal kernel was already planned: it shares that kernel.
        shared = next((k for k in kernels if _same_kernel(k[0], site.prim)), None) \
            if decision.ok else None
        if shared is not None:
            plan = shared[3]
        elif decision.ok:
            plan = cost.plan(site.prim)
            decision = plan.decision
        symbol = shared[2] if shared else (
            _kernel_symbol(site.name, len(kernels)) if decision.ok else None)
        reason = "; ".join([decision.reason] + site.merges)
        estimate = {"time_us": round(plan.time_us, 3), "roofline_us": round(plan.roofline_us, 3),
                    "source": plan.source, "decided_by": plan.decided_by} \
            if plan is not None and plan.ok else \
            host_estimate(_io_bytes(site), soc, tir_flops(site.prim) if site.prim is not None
                          else 0.0)
        if plan is not None and plan.ok and plan.range_us:  # tiled at run time
            estimate["range_us"] = [{"sizes": sizes, "time_us": us} for sizes, us in plan.range_us]
        group = KernelGroup(site.name, symbol, site.members, decision.ok,
                            rule_of(site.members, site.recomputed, bool(site.exports)), reason,
                            gm_bytes_saved=_kept_on_chip(site.members, site.exported_ops)
                            if decision.ok else 0,
                            formed_by=site.rule, io_bytes=_io_bytes(site), estimate=estimate,
                            free=free,
                            exports=[{"var": op.var, "node": op.node, "op": op.op,
                                      "read_by": readers} for op, readers in
                                     zip(site.exported_ops, site.export_readers)])
        if group.free:
            group.io_bytes, group.estimate = 0, {}
        groups[site.name] = group
        if not decision.ok:
            continue
        out_ty = relax.TupleType(site.out_types) if site.exports else site.call.ty_args[0]
        if shared is None:
            prim_gv = builder.add_func(site.prim, site.name)
            func = _codegen_function(prim_gv, site.prim, site.args, out_ty, symbol,
                                     group.to_json(), plan)
            shared = (site.prim, builder.add_func(func, symbol), symbol, plan)
            kernels.append(shared)
        rewriter.targets.append((site.call, shared[1], site.args))
        if site.exports:
            rewriter.exporting[site.var] = site.exports
            rewriter.exported.update(site.exports)
    edges = [(p.name, c.name, *rest) for p, c, *rest in unfused_edges(sites, fused["main"],
                                                                         policy)]
    main_gv = fused.get_global_var("main")
    builder.update_func(main_gv, rewriter.visit_expr(fused["main"]))
    # The fused PrimFuncs now live inside the codegen functions' attributes; drop the copies.
    out = relax.transform.DeadCodeElimination(["main"])(builder.get())
    result = PartitionResult(out, list(groups.values()), ops, edges, matches, policy)
    logger.info("partition: %d NPU kernel(s), %d host group(s)", len(result.npu_groups),
                len(result.groups) - len(result.npu_groups))
    return result
