"""MultiOutputFusion: a producer read by several kernels merged into one of them, which also
writes the producer's result to GM for the others.

A pre-LN transformer's residual sum ``h`` is read by the next LayerNorm and by the residual
add of the block after it, so the plain merge (partition/merge.py) keeps it a kernel of its
own: a result read twice goes to GM once for both readers. Yet one reader, the LayerNorm, can
take the producer in (MatMul + bias + residual + LayerNorm is one matmul-rows kernel), if that
kernel writes ``h`` as well: a PrimFunc of two output buffers (``h`` first), a call_tir of a
tuple type, and the other readers read ``h`` from its first field. The merge is decided like
any other: the estimate of the two-output kernel (its extra write counted by the template's
plan) against the two kernels it replaces, and it is recorded in the fusion report ("exports
h for its other reader k").

The merged kernel runs where the consumer ran, so every other reader of ``h`` must come after
the consumer in ``main``; an exporting kernel takes no further merges.
"""
from __future__ import annotations

from tvm import relax

from ..decision import Decision
from .merge import (_ANCHOR_OPS, Site, _absorb, _candidate, _is_vector_only, _launch_note,
                    _outside_readers, _reads, _split_time)
from .rules import anchor_rule
from .site_cost import alone_launches, slower_point

# the readers a template takes after a matmul with a second output: row kernels (matmul_rows)
_ROW_RULES = ("LayerNormFusion", "SoftmaxFusion", "ReductionFusion")


def export_shared(sites: list[Site], main, policy, cost, matches) -> list[Site]:
    """Merge each shared producer left after the plain merges into the one reader whose
    template tiles them together, exporting its result, where the estimates say it pays
    (or an imported plan asks for it); returns ``sites``."""
    if not policy.export:
        return sites
    outside = _outside_readers(main, sites)
    order = _binding_order(main)
    for producer in list(sites):
        if producer.absorbed_into is not None or not producer.eligible or producer.fence \
                or producer.exports or not _computes_on_cube(producer):
            continue
        readers = [s for s in sites if s.absorbed_into is None and s is not producer
                   and _reads(s, producer.var)]
        if len(readers) + outside.get(producer.var, 0) < 2:
            continue
        host = _host_readers(main, sites, producer.var)
        _try_export(producer, readers, host, order, policy, cost, matches)
    return sites


def _binding_order(main) -> dict:
    """Each binding variable of ``main`` (by identity) -> its position in program order."""
    order = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            order[binding.var] = len(order)
    return order


def _computes_on_cube(site: Site) -> bool:
    return any(any(k in m.op for k in _ANCHOR_OPS) for m in site.members)


def _later_readers_only(producer: Site, consumer: Site, readers: list, host_readers: list,
                        order) -> str:
    """Why ``consumer`` cannot run the producer for all its readers ("" if it can): the merged
    kernel runs at the consumer's place, so no other reader (a kernel, or a binding of
    ``main`` that is no kernel's) may come before it."""
    at = order[consumer.var]
    early = [r.var for r in readers if r is not consumer and order[r.var] < at]
    early += [var for var in host_readers if order[var] < at]
    if early:
        return (f"{early[0].name} reads it before {consumer.name} runs, so {consumer.name} "
                "cannot write it for every reader")
    return ""


def _host_readers(main, sites: list, var) -> list:
    """Binding variables of ``main`` that read ``var`` and are no kernel candidate's."""
    site_vars = {s.var for s in sites}
    return [b.var for block in main.body.blocks for b in block.bindings
            if b.var not in site_vars
            and any(v.same_as(var) for v in relax.analysis.free_vars(b.value))]


def _try_export(producer: Site, readers: list[Site], host_readers: list, order, policy,
                cost, matches) -> bool:
    """Merge ``producer`` into the reader that gains most, exporting its result."""
    best, notes = None, []
    for reader in readers:
        if not reader.eligible or reader.fence or reader.exports or \
                not _is_vector_only(reader) or \
                anchor_rule([m.op for m in reader.members]) not in _ROW_RULES:
            continue  # no template tiles the pair with two outputs: nothing to try or say
        why = _later_readers_only(producer, reader, readers, host_readers, order)
        found = Decision.no(why) if why else _candidate(producer, reader, policy, cost,
                                                        matches, exported=True)
        if isinstance(found, Decision):
            notes.append((reader, found))
            continue
        prim, external, plan, rules = found
        split = _split_time(cost, producer, reader)
        if policy.cost_checked and plan.time_us > split:
            notes.append((reader, Decision.no(
                f"the cost model says the kernel that also writes it is slower: "
                f"{plan.time_us:.2f} us vs {split:.2f} us as two kernels ({plan.source}, "
                "estimate)" + _launch_note(plan.time_us, split, alone_launches(cost, producer),
                                           cost.soc))))
            continue
        worse = slower_point(plan, cost, producer, reader) if policy.cost_checked else ""
        if worse:
            notes.append((reader, Decision.no(
                f"the cost model says the kernel that also writes it, tiled at run time, is "
                f"slower somewhere in its range: {worse} ({plan.source}, estimate)")))
            continue
        if best is None or split - plan.time_us > best[1] - best[0][2].time_us:
            best = (found, split, reader)
    for reader, refusal in notes:
        _note_refusal(reader, producer, refusal)
    if best is None:
        return False
    (prim, external, plan, rules), split, consumer = best
    others = [r for r in readers if r is not consumer]
    # a binding that took a removed op in (an identity Cast) names both nodes, one a line
    what = ", ".join((producer.members[-1].node or producer.members[-1].var).splitlines())
    names = ", ".join(r.name for r in others) or "the model's output"
    consumer.merges.append(
        f"merged {producer.name} by {'+'.join(rules)} and exports its result {what} for its "
        f"other reader(s) {names} ({plan.template.name} template tiles both and writes it as a "
        f"second output; est. {plan.time_us:.2f} us fused vs {split:.2f} us split, "
        f"{plan.source})")
    out_types = [producer.call.ty_args[0], consumer.call.ty_args[0]]
    refused = {**producer.refused, **consumer.refused}
    _absorb(producer, consumer, prim, external)
    consumer.refused = refused
    for arg in consumer.args:  # its inputs' edges stay as the pairwise pass left them
        if isinstance(arg, relax.Var) and arg not in refused:
            refused[arg] = Decision.no(f"kernel {consumer.name} exports a result; a kernel of "
                                       "two outputs takes no further merges")
    producer.absorbed_into = consumer
    consumer.exports, consumer.out_types = [producer.var], out_types
    consumer.exported_ops = [producer.members[-1]]
    consumer.export_readers = [[r.name for r in others]]
    for reader in others:
        reader.refused[producer.var] = Decision.no(
            f"it reads {what}, which kernel {consumer.name} exports as its second output: a "
            f"result read by {len(readers)} kernels is written to global memory once for all "
            "of them")
    return True


def _note_refusal(reader: Site, producer: Site, refusal: Decision) -> None:
    """Add why ``reader`` could not take the shared ``producer`` in and export it."""
    more = f"merging it here and exporting it for the other readers: {refusal.reason}"
    first = reader.refused.get(producer.var)
    if first is None:
        reader.refused[producer.var] = Decision.no(
            "the producer's result is read by several consumers, so it is written to global "
            f"memory once for all of them; {more}", refusal.short or refusal.reason)
    else:
        reader.refused[producer.var] = Decision.no(f"{first.reason}; {more}", first.short)


__all__ = ["export_shared"]
