"""Ascend rules on top of FuseOps: merge neighbouring groups that one template can still tile.

TVM's FuseOps never fuses past a reduction's result and never joins two reductions, so a
LayerNorm written as an op chain becomes three groups and a scaled Softmax two. Here a producer
group is merged into its consumer when
  1. every op of both runs on the NPU and no op is fenced off (``no_fuse_nodes``),
  2. every rule the merged group uses is switched on (partition/rules.py),
  3. an imported fusion plan, if any, puts both in the same group,
  4. a schedule template tiles the merged PrimFunc (made by TVM's own FuseTIR),
  5. the cost interface estimates the merged kernel no slower than the two it replaces, on
     the device's timeline (skipped by the fixed-pattern rule sets, which emulate compilers
     without a cost model); a refusal by less than the host's submission of the launch the
     merge would save says so, since where the host falls behind the merge would win,
  6. the producer's result is read by that consumer only, or (RecomputeFusion) every reader
     can recompute it and the estimates say recomputing beats writing it to GM once.
Which merges to make is searched region by region first (partition/region_search.py: a beam
over the partitions of each set of kernels joined by single-reader edges); the pairwise pass
here then closes what no region covers (diamonds, shared results, recomputation).
Each merge records the estimates and the GM bytes it saves.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..decision import Decision
from .dim_bounds import carry_bounds
from .region_search import find_regions, search_region
from .rules import anchor_rule, group_rules
from .site_cost import (alone_launches, alone_us, free_views, merged_us, slower_point,
                        view_copy_reason)

logger = logging.getLogger("tvm_ascend.partition")


@dataclass
class Site:
    """One kernel candidate: a call_tir of ``main`` and what it computes."""

    var: relax.Var           # the binding variable of the call in main (names may repeat)
    call: relax.Call         # the call_tir to replace (the consumer's, after merges)
    name: str                # PrimFunc name (shared PrimFuncs share kernels)
    prim: object             # the PrimFunc
    args: list               # Relax expressions passed to it
    members: list            # OpInfo of every model op inside
    rule: str
    eligible: Decision       # all ops NPU-supported and one output
    absorbed_into: object = None  # the consumer Site that took this one in
    merges: list = field(default_factory=list)  # notes of merges, for the report
    refused: dict = field(default_factory=dict)  # producer var -> Decision: why not merged
    split_reason: str = ""   # why FuseOps' group containing it was taken apart
    fence: str = ""          # why it may not join any group (no_fuse_nodes, a failed kernel)
    recomputed: bool = False  # it recomputes a producer that other kernels also read
    exports: list = field(default_factory=list)  # producer vars it also writes (export.py)
    exported_ops: list = field(default_factory=list)  # the OpInfo each export computes
    export_readers: list = field(default_factory=list)  # per export, its other readers' names
    out_types: list = field(default_factory=list)  # its outputs' types when it exports


def _bytes_of(ty) -> int:
    """Bytes of a tensor type; a symbolic dimension counts 1 (the report's bytes saved are
    then per unit of it: its size is only known per call)."""
    size = tvm.runtime.DataType(str(ty.dtype)).bits // 8
    for dim in ty.shape.values:
        size *= int(dim) if isinstance(dim, (int, tvm.tirx.IntImm)) else 1
    return size


def _outside_readers(main, sites: list) -> dict:
    """Per variable (by identity), how many non-site bindings and the return value read it."""
    site_vars = {s.var for s in sites}
    counts: dict = {}
    exprs = [b.value for block in main.body.blocks for b in block.bindings
             if b.var not in site_vars] + [main.body.body]
    for expr in exprs:
        for var in relax.analysis.free_vars(expr):
            counts[var] = counts.get(var, 0) + 1
    return counts


def _reads(site: Site, var) -> bool:
    return any(isinstance(a, relax.Var) and a.same_as(var) for a in site.args)


def _readers(var, sites: list, outside: dict) -> int:
    """Distinct readers of ``var`` now: live sites plus everything else."""
    live = sum(1 for s in sites if s.absorbed_into is None and _reads(s, var))
    return live + outside.get(var, 0)


def _fuse(producer: Site, consumer: Site, name: str, export: bool = False):
    """(merged PrimFunc, external args): FuseTIR over a function calling both PrimFuncs;
    ``export``: the producer's result is an output too, before the consumer's (a PrimFunc of
    two output buffers, in that order)."""
    external, params = [], []

    def param_for(expr):
        for seen, param in zip(external, params):
            if seen.same_as(expr):
                return param
        external.append(expr)
        params.append(relax.Var(f"p{len(params)}", expr.ty))
        return params[-1]

    for arg in producer.args:
        param_for(arg)
    for arg in consumer.args:
        if not arg.same_as(producer.var):
            param_for(arg)
    bb = relax.BlockBuilder()
    p_gv = bb.add_func(producer.prim, f"{name}_producer")
    c_gv = bb.add_func(consumer.prim, f"{name}_consumer")
    with bb.function(name, params, {"Primitive": True}, private=True):
        with bb.dataflow():
            inner = bb.emit(relax.op.call_tir(p_gv, relax.Tuple([param_for(a) for a in
                                                                  producer.args]),
                                              producer.call.ty_args[0]))
            mapped = [inner if a.same_as(producer.var) else param_for(a)
                      for a in consumer.args]
            out = relax.op.call_tir(c_gv, relax.Tuple(mapped), consumer.call.ty_args[0])
            out = bb.emit_output(relax.Tuple([inner, bb.emit(out)]) if export else out)
        merged_gv = bb.emit_func_output(out)
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(relax.Call(merged_gv, params)))
    fused = relax.transform.FuseTIR()(bb.get())
    prim = next(f for gv, f in fused.functions.items() if gv.name_hint == name)
    return carry_bounds(prim, producer.prim, consumer.prim), external


def distinct_args(prim, args: list, out_ty, name: str) -> tuple:
    """(PrimFunc, args) of a call that passes one tensor several times (``Add(x, x)``,
    ``Concat(x, x)``, ``MatMul(x, x)``): one parameter per distinct tensor, each of its own
    name, as FuseTIR gives a fused group. LegalizeOps names each parameter after its argument,
    so the PrimFunc of such a call has two buffers of one name, which every printer would
    declare twice; one buffer also means the kernel reads the tensor from GM once. Calls with
    distinct arguments and parameter names are returned unchanged."""
    distinct = []
    for arg in args:
        if not any(seen.same_as(arg) for seen in distinct):
            distinct.append(arg)
    names = [p.name for p in prim.params]
    if len(distinct) == len(args) and len(set(names)) == len(names):
        return prim, args
    # FuseTIR names each buffer after its parameter: the tensor's own name where it is unique
    hints = [arg.name if isinstance(arg, relax.Var) else "" for arg in distinct]
    params = [relax.Var(hint if hint and hints.count(hint) == 1 else f"p{i}", arg.ty)
              for i, (hint, arg) in enumerate(zip(hints, distinct))]
    param_of = lambda arg: next(p for a, p in zip(distinct, params) if a.same_as(arg))  # noqa: E731
    bb = relax.BlockBuilder()
    callee = bb.add_func(prim, f"{name}_repeated")
    with bb.function(name, params, {"Primitive": True}, private=True):
        with bb.dataflow():
            # a call of several outputs (a BatchNorm kept whole) names each output's type
            outs = list(out_ty.fields) if isinstance(out_ty, relax.TupleType) else out_ty
            out = bb.emit_output(relax.op.call_tir(
                callee, relax.Tuple([param_of(a) for a in args]), outs))
        wrapper = bb.emit_func_output(out)
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(relax.Call(wrapper, params)))
    fused = relax.transform.FuseTIR()(bb.get())
    made = next(f for gv, f in fused.functions.items() if gv.name_hint == name)
    return carry_bounds(made, prim), distinct


def merge_sites(sites: list[Site], main, policy, cost, matches) -> list[Site]:
    """Merge producers into consumers where the rules above allow; returns the updated sites.

    ``policy`` is the FusionPolicy, ``cost`` the GroupCost (plans and estimates), ``matches`` a
    Counter of candidates per rule (ATC's ``match_times``)."""
    by_var = {s.var: s for s in sites}
    outside = _outside_readers(main, sites)

    def region(*seeds):
        return _region(seeds, sites, by_var)

    def only_reader(site):
        """The one live site reading ``site`` (None if the model or several kernels do)."""
        if outside.get(site.var, 0):
            return None
        readers = [s for s in sites if s.absorbed_into is None and _reads(s, site.var)]
        return readers[0] if len(readers) == 1 else None

    if policy.cost_checked and policy.search_width > 1:
        _merge_regions(sites, outside, policy, cost, matches, region)
    tried: set = set()  # (producer, consumer) compositions already refused: same answer again
    # Plain merges first, to a fixed point: a diamond (LayerNorm's centred value read twice)
    # closes by merging, so recomputation is only tried for producers still shared after that.
    recompute = False
    changed = True
    while changed or (policy.recompute and not recompute):
        if not changed:
            recompute = True
        changed = False
        for consumer in sites:
            if consumer.absorbed_into is not None or not consumer.eligible or consumer.exports:
                continue
            for arg in list(consumer.args):
                producer = by_var.get(arg) if isinstance(arg, relax.Var) else None
                if producer is None or producer.absorbed_into is not None \
                        or not producer.eligible or producer.exports:
                    continue
                key = (producer.name, consumer.name, recompute)
                if key in tried:
                    continue
                tried.add(key)
                if _readers(arg, sites, outside) != 1:
                    if recompute and _try_recompute(producer, sites, outside, policy, cost,
                                                    matches):
                        changed = True
                        break
                    continue  # read elsewhere too: it has to reach global memory anyway
                if _try_merge(producer, consumer, policy, cost, matches, region, only_reader):
                    changed = True
                    break
    return sites


def _merge_regions(sites, outside, policy, cost, matches, region) -> None:
    """Apply the partition the beam search found best in each region, in its order."""
    memo: dict = {}  # region signature -> its answer (a repeated layer is searched once)

    def candidate(producer, consumer):
        return _candidate(producer, consumer, policy, cost, matches, region=region)

    for units, edges in find_regions(sites, outside):
        actions, found, best_us, start_us = search_region(units, edges, cost, candidate, _fuse,
                                                          policy.search_width, memo)
        current = {frozenset({i}): unit for i, unit in enumerate(units)}
        for action in actions:
            if action.key not in found.found:
                break  # a repeated region whose kernel did not form here: the pass after decides
            parts = [current[part] for part in action.parts]
            plan, rules = found.found[action.key]
            merged = found.sites[action.key]
            split = _split_time(cost, *parts)
            views = free_views(cost, *parts)
            saved = 2 * sum(_bytes_of(p.call.ty_args[0]) for p in parts[:-1])
            names = " and ".join(p.name for p in parts[:-1])
            how = "look-ahead: the pair alone tiles in no template; " if len(parts) == 3 else ""
            target = parts[-1]
            # the absorbed groups' notes (their own earlier merges) come first
            target.merges[:0] = [note for part in parts[:-1] for note in part.merges]
            target.merges.append(
                f"merged {names} by {'+'.join(rules)} ({how}region search, beam width "
                f"{policy.search_width} over {len(units)} kernels: est. {start_us:.2f} -> "
                f"{best_us:.2f} us for the region; this kernel "
                f"{merged_us(merged, plan, cost):.2f} us vs {split:.2f} us split{views}, "
                f"{plan.template.name} template; {saved} GM bytes saved, {plan.source})")
            target.members, target.prim, target.args = merged.members, merged.prim, merged.args
            target.name = merged.name
            if "ascend.merge" not in target.rule:
                target.rule = target.rule + "+ascend.merge"
            for part in parts[:-1]:
                part.absorbed_into = target
            current[action.key] = target


def _is_vector_only(site: Site) -> bool:
    return site.eligible and not any(any(k in m.op for k in _ANCHOR_OPS) for m in site.members)


def _region(seeds, sites, by_var) -> list[Site]:
    """The live vector-only sites connected to ``seeds`` (a LayerNorm's centred value is read
    twice, so shared edges count too; MatMul/Conv/Pool sites bound the region)."""
    found = {id(s): s for s in seeds}
    todo = list(seeds)
    while todo:
        site = todo.pop()
        neighbours = [by_var.get(a) for a in site.args if isinstance(a, relax.Var)]
        neighbours = [n for n in neighbours if n is not None]
        neighbours += [s for s in sites if s.absorbed_into is None and _reads(s, site.var)]
        for other in neighbours:
            if other.absorbed_into is None and id(other) not in found and \
                    _is_vector_only(other):
                found[id(other)] = other
                todo.append(other)
    return list(found.values())


def _legal(producer: Site, consumer: Site, policy) -> str:
    """Why the pair may not merge before any tiling is tried ("" if it may)."""
    for site in (producer, consumer):
        if site.fence:
            return site.fence
    plan = policy.plan
    if plan is not None:
        keys = [key for m in producer.members + consumer.members for key in m.plan_keys]
        if plan.shared_group(keys) is None:
            return "the imported fusion plan keeps them in different groups"
    return ""


_PATTERN_RULES = ("LayerNormFusion", "SoftmaxFusion")
_PARTIAL_RULES = frozenset({"ReductionFusion", "ElementwiseFusion"})
_ANCHOR_OPS = ("matmul", "conv", "pool")
# each is one fixed pass in ATC: a group matching two of them is no ATC group
_ATC_PATTERN_RULES = frozenset({"MatMulEpilogueFusion", "ConvEpilogueFusion", "LayerNormFusion",
                                "SoftmaxFusion", "PoolingFusion", "AttentionFusion"})


def _vector_region_rule(producer: Site, consumer: Site, region) -> str | None:
    """LayerNormFusion/SoftmaxFusion if the pair lies in a region of vector ops (connected,
    no MatMul/Conv/Pool) that forms that pattern as a whole.

    A chain pattern is merged one pair at a time, and its partial groups look like plain
    reductions; ATC's LayerNormFusionPass and SoftmaxFusionPass match the whole chain, so a
    pair is judged by the pattern its region completes."""
    ops = [m.op for site in region(producer, consumer) for m in site.members]
    rule = anchor_rule(ops)
    return rule if rule in _PATTERN_RULES else None


_UNTILED = "the merged group would not tile"  # a refusal the look-ahead may still turn round


def _kind(site: Site) -> str:
    """What a site computes, in a few words: its op, or its rules."""
    if len(site.members) == 1:
        return site.members[0].op.removeprefix("relax.")
    rules = "+".join(group_rules([m.op for m in site.members], site.recomputed)) or "fused"
    return f"{'an' if rules[0] in 'AEIOU' else 'a'} {rules} group"


def _candidate(producer: Site, consumer: Site, policy, cost, matches, recomputed=False,
               region=None, exported=False):
    """(merged PrimFunc, args, plan, rules) of the pair, or a Decision saying why not;
    ``exported``: the merged kernel also writes the producer's result (MultiOutputFusion)."""
    name = f"{consumer.name}__{producer.name}"[:60]
    why = _legal(producer, consumer, policy)
    if why:
        return Decision.no(why)
    rules = group_rules([m.op for m in producer.members + consumer.members], recomputed,
                        exported)
    off = policy.switched_off(rules)
    if off and set(off) <= _PARTIAL_RULES and region is not None:
        pattern = _vector_region_rule(producer, consumer, region)
        if pattern and pattern not in off and not policy.switched_off([pattern]):
            rules = [pattern] + [r for r in rules if r not in _PARTIAL_RULES]
            off = policy.switched_off(rules)
    matches.update(rules)
    patterns = [r for r in rules if r in _ATC_PATTERN_RULES]
    if policy.rule_set == "atc_style" and len(patterns) > 1:
        return Decision.no(f"ATC's fixed passes form no group of two patterns "
                           f"({' and '.join(patterns)}), so the atc_style emulation keeps them "
                           "apart")
    if off:
        return Decision.no(f"rule {off[0]} is switched off (fusion level {policy.level!r}, "
                           f"rule set {policy.rule_set!r} or the fusion switch file)")
    try:
        prim, external = _fuse(producer, consumer, name, exported)
    except Exception as err:  # noqa: BLE001 - FuseTIR may refuse some combinations
        logger.debug("merge %s -> %s refused by FuseTIR: %s", producer.name, consumer.name, err)
        return Decision.no(f"TVM's FuseTIR cannot fuse the two functions ({err})",
                           f"TVM's FuseTIR cannot fuse {_kind(producer)} into {_kind(consumer)} "
                           f"({type(err).__name__})")
    plan = cost.plan(prim)
    if not plan.ok:
        closest = plan.decision.summary or (
            f"no schedule template takes {_kind(producer)} followed by {_kind(consumer)} as "
            "one kernel")
        return Decision.no(f"{_UNTILED}: {plan.decision.reason}", f"{_UNTILED}: {closest}")
    return prim, external, plan, rules


def _split_time(cost, *sites) -> float:
    """The estimate of ``sites`` each left alone (``site_cost.alone_cost``: a free view 0 us)."""
    return alone_us(cost, *sites)


def _launch_note(fused_us: float, split_us: float, launches_saved: int, soc) -> str:
    """What the host's submissions would make of a merge refused on the device's timeline: in
    a stream where the host falls behind, each launch the merge saves is one submission less
    (``submit_low_us`` to ``submit_high_us``), so a fused kernel slower by less than that
    would win there; "" when it is slower by more at either end, or saves no launch (it
    absorbs a view free on the host)."""
    if launches_saved <= 0:
        return ""
    lost = fused_us - split_us
    ends = [end for end, submit in (("low", soc.submit_low_us), ("high", soc.submit_high_us))
            if lost < launches_saved * submit]
    if not ends:
        return ""
    which = "either end" if len(ends) == 2 else "the high end"
    saved = "the launch" if launches_saved == 1 else f"the {launches_saved} launches"
    return (f"; it is slower by {lost:.2f} us on the device's timeline, less than the host's "
            f"submission of {saved} it saves at {which} of {soc.submit_low_us:g}-"
            f"{soc.submit_high_us:g} us per launch: where the host falls behind the device, "
            "the fused kernel would win")


def _try_merge(producer: Site, consumer: Site, policy, cost, matches, region=None,
               lookahead=None) -> bool:
    found = _candidate(producer, consumer, policy, cost, matches, region=region)
    if isinstance(found, Decision):
        consumer.refused[producer.var] = found
        if found.reason.startswith(_UNTILED) and lookahead is not None:
            return _try_triple(producer, consumer, lookahead(consumer), policy, cost, matches)
        return False
    prim, external, plan, rules = found
    split = _split_time(cost, producer, consumer)
    merged = dataclasses.replace(consumer, members=producer.members + consumer.members,
                                 prim=prim, args=external)
    fused = merged_us(merged, plan, cost)
    views = free_views(cost, producer, consumer)
    if policy.cost_checked and fused > split:
        consumer.refused[producer.var] = Decision.no(
            f"the cost model says the fused kernel is slower: {fused:.2f} us fused vs "
            f"{split:.2f} us {'apart' if views else 'as two kernels'}{views} ({plan.source}, "
            "estimate)"
            + _launch_note(fused, split, alone_launches(cost, producer, consumer) - 1,
                           cost.soc))
        return False
    # a merge of views only stays on the host (``merged_us``): no kernel's range to compare
    worse = slower_point(plan, cost, producer, consumer) \
        if policy.cost_checked and view_copy_reason(merged) is None else ""
    if worse:
        consumer.refused[producer.var] = Decision.no(
            f"the cost model says the fused kernel, tiled at run time, is slower somewhere in "
            f"its range: {worse}{views} (mean {fused:.2f} vs {split:.2f} us; {plan.source}, "
            "estimate)")
        return False
    saved = 2 * _bytes_of(producer.call.ty_args[0])  # written once, read once
    consumer.merges.append(
        f"merged {producer.name} by {'+'.join(rules)} ({plan.template.name} template tiles "
        f"both; {saved} GM bytes saved; est. {fused:.2f} us fused vs {split:.2f} us "
        f"split{views}, {plan.source})")
    _absorb(producer, consumer, prim, external)
    producer.absorbed_into = consumer
    return True


def _try_triple(producer: Site, consumer: Site, reader, policy, cost, matches) -> bool:
    """One step of look-ahead: a pair no template tiles may still be the middle of a pattern
    that one does (scores -> softmax is no kernel, scores -> softmax -> PV is attention), so
    try the pair together with the consumer's only reader."""
    if reader is None or not reader.eligible or reader.fence:
        return False
    name = f"{consumer.name}__{producer.name}"[:60]
    try:
        prim, external = _fuse(producer, consumer, name)
    except Exception:  # noqa: BLE001 - FuseTIR may refuse some combinations
        return False
    pair = Site(consumer.var, consumer.call, name, prim, external,
                producer.members + consumer.members, consumer.rule, consumer.eligible,
                merges=producer.merges + consumer.merges)
    found = _candidate(pair, reader, policy, cost, matches)
    if isinstance(found, Decision):
        _also_refused(consumer, producer, f"; with its reader {reader.name} too: {found.reason}")
        return False
    prim, external, plan, rules = found
    split = _split_time(cost, producer, consumer, reader)
    views = free_views(cost, producer, consumer, reader)
    if policy.cost_checked and plan.time_us > split:
        _also_refused(consumer, producer,
                      f"; with its reader {reader.name} too, the cost model says the fused "
                      f"kernel is slower: {plan.time_us:.2f} us vs {split:.2f} us{views} "
                      f"({plan.source}, estimate)"
                      + _launch_note(plan.time_us, split,
                                     alone_launches(cost, producer, consumer, reader) - 1,
                                     cost.soc))
        return False
    worse = slower_point(plan, cost, producer, consumer, reader) if policy.cost_checked else ""
    if worse:
        _also_refused(consumer, producer,
                      f"; with its reader {reader.name} too, the fused kernel, tiled at run "
                      f"time, is slower somewhere in its range: {worse}{views} ({plan.source}, "
                      "estimate)")
        return False
    saved = 2 * (_bytes_of(producer.call.ty_args[0]) + _bytes_of(consumer.call.ty_args[0]))
    reader.merges.append(
        f"merged {producer.name} and {consumer.name} together by {'+'.join(rules)} (look-ahead: "
        f"the pair alone tiles in no template, the three do in {plan.template.name}; {saved} GM "
        f"bytes saved; est. {plan.time_us:.2f} us fused vs {split:.2f} us split{views}, "
        f"{plan.source})")
    del consumer.refused[producer.var]
    _absorb(pair, reader, prim, external)
    producer.absorbed_into = consumer.absorbed_into = reader
    return True


def _also_refused(consumer: Site, producer: Site, more: str) -> None:
    """Add the look-ahead's answer to the pair's refusal; the pair's reason still decided."""
    first = consumer.refused[producer.var]
    consumer.refused[producer.var] = Decision.no(first.reason + more, first.short)


def _absorb(producer: Site, consumer: Site, prim, external) -> None:
    """``consumer`` takes ``producer`` in; the producer's notes of its own earlier merges come
    first in the consumer's (the report shows how the whole kernel formed)."""
    consumer.merges[:0] = producer.merges
    consumer.members = producer.members + consumer.members
    consumer.prim, consumer.args = prim, external
    consumer.name = f"{consumer.name}__{producer.name}"[:60]
    if "ascend.merge" not in consumer.rule:
        consumer.rule = consumer.rule + "+ascend.merge"


def _try_recompute(producer: Site, sites, outside, policy, cost, matches) -> bool:
    """Recompute ``producer`` inside every reader if all can and the estimates say it pays."""
    if outside.get(producer.var, 0):
        return False  # a host op or the model output needs it in GM anyway
    readers = [s for s in sites if s.absorbed_into is None and s is not producer
               and _reads(s, producer.var)]
    found = []
    for reader in readers:
        if not reader.eligible:
            return False
        candidate = _candidate(producer, reader, policy, cost, matches, recomputed=True)
        if isinstance(candidate, Decision):
            reader.refused[producer.var] = Decision.no(
                f"recomputing the shared producer: {candidate.reason}",
                f"recomputing the shared producer: {candidate.short}")
            return False
        found.append((reader, candidate))
    fused_time = sum(plan.time_us for _, (_, _, plan, _) in found)
    split_time = _split_time(cost, producer, *readers)
    if policy.cost_checked and fused_time > split_time:
        for reader in readers:
            reader.refused[producer.var] = Decision.no(
                f"recomputing the shared producer in all {len(readers)} readers is estimated "
                f"slower: {fused_time:.2f} us vs {split_time:.2f} us with it in GM "
                f"({found[0][1][2].source}, estimate)"
                + _launch_note(fused_time, split_time, alone_launches(cost, producer),
                               cost.soc))
        return False
    for reader, (prim, external, plan, rules) in found:
        reader.merges.append(
            f"recomputes {producer.name} (read by {len(readers)} kernels) by "
            f"{'+'.join(rules)}; est. {fused_time:.2f} us for all readers vs {split_time:.2f} "
            f"us with it in GM, {plan.source}")
        _absorb(producer, reader, prim, external)
        reader.recomputed = True
    producer.absorbed_into = readers[0]
    return True


def unfused_edges(sites: list[Site], main, policy) -> list[tuple]:
    """(producer site, consumer site, reason, hint, summary) for every edge that crosses
    global memory: ``reason`` in full (every template's refusal), ``summary`` the one reason
    that decided, in one line, and ``hint`` what a user can do about it ("" when nothing)."""
    by_var = {s.var: s for s in sites}
    # a result a kernel exports is read from that kernel's second output
    by_var.update({var: s for s in sites if s.absorbed_into is None for var in s.exports})
    outside = _outside_readers(main, sites)
    edges = []
    for consumer in sites:
        if consumer.absorbed_into is not None:
            continue
        for arg in consumer.args:
            producer = by_var.get(arg) if isinstance(arg, relax.Var) else None
            if producer is None or producer.absorbed_into is not None:
                continue
            why, hint = _edge_reason(producer, consumer, sites, outside, policy, arg)
            edges.append((producer, consumer, why.reason, hint, why.short))
    return edges


def _edge_reason(producer, consumer, sites, outside, policy, var) -> tuple[Decision, str]:
    """(why the edge crosses GM, what a user can do about it or ""); ``var`` is what the
    consumer reads: the producer's result, or one it exports."""
    if not policy.fuse:
        return (Decision.no("fusion is off (fusion_level='off' or AUTOFUSION_ENABLE=0)"),
                "turn fusion on to let FuseOps and the merge rule join them")
    for side, site in (("producer", producer), ("consumer", consumer)):
        if not site.eligible:  # no Ascend kernel for that op: nothing a user can switch
            return Decision.no(f"the {side} runs on the host: {site.eligible.reason}",
                               f"the {side} runs on the host: {site.eligible.short}"), ""
        if site.fence:
            hint = ("remove the node from no_fuse_nodes to let it fuse"
                    if "no_fuse_nodes" in site.fence else
                    "report the failure (fusion report: kernel_failures); the ops run unfused")
            return Decision.no(site.fence), hint
    if var in consumer.refused:
        refusal = consumer.refused[var]
        return refusal, _hint(refusal.reason)
    readers = _readers(var, sites, outside)
    if readers > 1:
        hint = ("fusion_level='aggressive' turns RecomputeFusion on, which recomputes a shared "
                "producer in each reader when the cost model says it pays"
                if not policy.recompute else "")
        return Decision.no(f"the producer's result is read by {readers} consumers, so it is "
                           "written to global memory once for all of them"), hint
    for site in (producer, consumer):
        if site.split_reason:
            return Decision.no(site.split_reason), _hint(site.split_reason)
    if not policy.merge:
        return (Decision.no("the rule set 'tvm_fuseops' keeps TVM's FuseOps groups unchanged"),
                "rule_set='tvm_ascend' lets the Ascend merge rules join them")
    return Decision.no("not tried"), ""


def _hint(reason: str) -> str:
    """What a user can do about a refusal, or "" where there is nothing to do (no template
    takes the merged ops, TVM cannot fuse or schedule them)."""
    if "switched off" in reason:
        rule = reason.split("rule ", 1)[1].split(" ", 1)[0]
        return (f"turn {rule} on: a switch file line '{rule}:on', or a fusion level / rule set "
                "that includes it (tvm-ascend explain lists the rules)")
    if "slower" in reason:
        return "an estimate decided: a tuned tiling (tvm-ascend tune) may change it"
    if "plan" in reason:
        return "edit the fusion plan file to put both in one group"
    return ""


__all__ = ["Site", "merge_sites", "unfused_edges"]
