"""Ascend rules on top of FuseOps: merge neighbouring groups that one template can still tile.

TVM's FuseOps never fuses past a reduction's result and never joins two reductions, so a
LayerNorm written as an op chain becomes three groups and a scaled Softmax two. Here a producer
group is merged into its consumer when (1) every op of both runs on the NPU, (2) the producer's
result is read by that consumer only (it then never goes to global memory), and (3) a schedule
template tiles the merged PrimFunc (made by TVM's own FuseTIR). Each merge records the GM bytes
it saves. The search order is greedy, consumer by consumer in program order; the cost model
will later rank alternatives.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..decision import Decision
from ..schedules import select_template

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
    refused: dict = field(default_factory=dict)  # producer var -> why a merge was refused


def _bytes_of(ty) -> int:
    size = tvm.runtime.DataType(str(ty.dtype)).bits // 8
    for dim in ty.shape.values:
        size *= int(dim)
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


def _fuse(producer: Site, consumer: Site, name: str):
    """(merged PrimFunc, external args): FuseTIR over a function calling both PrimFuncs."""
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
            out = bb.emit_output(relax.op.call_tir(c_gv, relax.Tuple(mapped),
                                                   consumer.call.ty_args[0]))
        merged_gv = bb.emit_func_output(out)
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(relax.Call(merged_gv, params)))
    fused = relax.transform.FuseTIR()(bb.get())
    prim = next(f for gv, f in fused.functions.items() if gv.name_hint == name)
    return prim, external


def merge_sites(sites: list[Site], main, soc) -> list[Site]:
    """Merge producers into consumers where the rules above allow; returns the updated sites."""
    by_var = {s.var: s for s in sites}
    outside = _outside_readers(main, sites)
    changed = True
    while changed:
        changed = False
        for consumer in sites:
            if consumer.absorbed_into is not None or not consumer.eligible:
                continue
            for arg in list(consumer.args):
                producer = by_var.get(arg) if isinstance(arg, relax.Var) else None
                if producer is None or producer.absorbed_into is not None \
                        or not producer.eligible:
                    continue
                if _readers(arg, sites, outside) != 1:
                    continue  # read elsewhere too: it has to reach global memory anyway
                if _try_merge(producer, consumer, soc):
                    changed = True
                    break
    return sites


def _try_merge(producer: Site, consumer: Site, soc) -> bool:
    name = f"{consumer.name}__{producer.name}"[:60]
    try:
        prim, external = _fuse(producer, consumer, name)
    except Exception as err:  # noqa: BLE001 - FuseTIR may refuse some combinations
        logger.debug("merge %s -> %s refused by FuseTIR: %s", producer.name, consumer.name, err)
        consumer.refused[producer.var] = f"TVM's FuseTIR cannot fuse the two functions ({err})"
        return False
    template, decision = select_template(prim, soc)
    if template is None:
        consumer.refused[producer.var] = f"the merged group would not tile: {decision.reason}"
        return False
    saved = 2 * _bytes_of(producer.call.ty_args[0])  # written once, read once
    consumer.merges.append(f"merged {producer.name} ({template.name} template tiles both; "
                           f"{saved} GM bytes saved)")
    consumer.members = producer.members + consumer.members
    consumer.prim, consumer.args, consumer.name = prim, external, name
    consumer.rule = consumer.rule + "+ascend.merge" if "ascend.merge" not in consumer.rule \
        else consumer.rule
    producer.absorbed_into = consumer
    return True


def unfused_edges(sites: list[Site], main, merge_enabled: bool) -> list[tuple]:
    """(producer site, consumer site, reason, hint) for every edge that crosses global memory."""
    by_var = {s.var: s for s in sites}
    outside = _outside_readers(main, sites)
    edges = []
    for consumer in sites:
        if consumer.absorbed_into is not None:
            continue
        for arg in consumer.args:
            producer = by_var.get(arg) if isinstance(arg, relax.Var) else None
            if producer is None or producer.absorbed_into is not None:
                continue
            edges.append((producer, consumer) + _edge_reason(producer, consumer, sites, outside,
                                                             merge_enabled))
    return edges


def _edge_reason(producer, consumer, sites, outside, merge_enabled) -> tuple[str, str]:
    if not merge_enabled:
        return ("fusion is off (fusion_level='off' or AUTOFUSION_ENABLE=0)",
                "turn fusion on to let FuseOps and the merge rule join them")
    for side, site in (("producer", producer), ("consumer", consumer)):
        if not site.eligible:
            return (f"the {side} runs on the host: {site.eligible.reason}",
                    "an Ascend kernel for that op would let the edge fuse")
    readers = _readers(producer.var, sites, outside)
    if readers > 1:
        return (f"the producer's result is read by {readers} consumers, so it is written to "
                "global memory once for all of them",
                "recomputing it inside each consumer is a cost-model decision (not made yet)")
    if producer.var in consumer.refused:
        return consumer.refused[producer.var], "a template for the merged class would fuse it"
    return "not tried", ""


__all__ = ["Site", "merge_sites", "unfused_edges"]
