"""Regions of the merge graph searched as a whole (partition/search.py), applied to the sites.

A region is a connected set of NPU sites joined by single-reader edges (a result read by one
kernel only, and by nothing on the host or in the model's outputs): the edges along which a
producer can be merged into its consumer without recomputation. Each region's partition is
found by the beam search; its merges are then applied to the sites in the order the search
made them, with the estimates that decided them in each kernel's notes. What no region covers
(shared results, LayerNorm's diamond, recomputation) is left to the pairwise pass of
``merge.py`` that runs after, which only sees merges the search did not already weigh.

Transformers repeat one layer: a region equal to one already searched (same PrimFuncs, same
edges) takes that region's answer and only builds the kernels it chose.
"""
from __future__ import annotations

import copy
import logging

import tvm_ffi
from tvm import relax

from .. import ir_attrs
from .search import RegionSpace, beam_search
from .site_cost import UNTILED_US, alone_cost, merged_us, slower_point, view_copy_reason

logger = logging.getLogger("tvm_ascend.partition")


def find_regions(sites: list, outside: dict) -> list[tuple[list, list]]:
    """(units, edges) per region with two or more units, in program order; edges are
    (producer index, consumer index) into ``units``, in the order the consumers read them."""
    live = [s for s in sites if s.absorbed_into is None and s.eligible and not s.fence]
    all_readers: dict = {}  # var -> every live site reading it (host sites too)
    for site in sites:
        if site.absorbed_into is None:
            for arg in site.args:
                if isinstance(arg, relax.Var):
                    all_readers.setdefault(arg, set()).add(id(site))
    by_var = {s.var: s for s in live}
    parent = {id(s): id(s) for s in live}

    def root(key):
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    edges, seen = [], set()
    for consumer in live:
        for arg in consumer.args:
            producer = by_var.get(arg) if isinstance(arg, relax.Var) else None
            if producer is None or producer is consumer or outside.get(arg, 0) or \
                    all_readers.get(arg) != {id(consumer)}:
                continue
            if (id(producer), id(consumer)) in seen:
                continue
            seen.add((id(producer), id(consumer)))
            edges.append((producer, consumer))
            parent[root(id(producer))] = root(id(consumer))
    regions: dict = {}
    for site in live:
        regions.setdefault(root(id(site)), []).append(site)
    found = []
    for units in regions.values():
        if len(units) < 2:
            continue
        index = {id(s): i for i, s in enumerate(units)}
        found.append((units, [(index[id(p)], index[id(c)]) for p, c in edges
                              if id(p) in index]))
    return found


def region_signature(units: list, edges: list) -> tuple:
    """Equal signatures: the same kernels wired the same way (a repeated layer)."""
    hashes = tuple(tvm_ffi.structural_hash(_computation(u.prim), map_free_vars=True)
                   for u in units)
    wiring = tuple(tuple(i for i, arg in enumerate(units[c].args)
                         if arg.same_as(units[p].var)) for p, c in edges)
    return hashes, tuple(edges), wiring


def _computation(prim):
    """The PrimFunc without the model-op names it carries for the report (layers differ in
    names only)."""
    if prim.attrs and ir_attrs.MODEL_OP in prim.attrs:
        return prim.without_attr(ir_attrs.MODEL_OP)
    return prim


class RegionCandidates:
    """The kernels of one region's partitions: builds and plans each group once.

    ``candidate(producer, consumer)`` is merge.py's check (rules, plan file, FuseTIR, tiling)
    returning (prim, args, plan, rules) or a refusal string; ``fuse(producer, consumer)`` is
    FuseTIR alone (for the look-ahead's untiled middle)."""

    def __init__(self, units, cost, candidate, fuse):
        self.units, self.cost = units, cost
        self._candidate, self._fuse = candidate, fuse
        self.sites = {frozenset({i}): copy.copy(u) for i, u in enumerate(units)}
        self.found = {}  # group key -> (plan, rules) of the merged kernel

    def evaluate(self, key, *parts):
        """The estimate of group ``key`` (a unit alone, or the merge of ``parts``), or None
        where no kernel takes the merge; a unit alone costs what ``site_cost.alone_cost``
        says, as in merge.py's pairwise pass."""
        if not parts:
            return alone_cost(self.units[next(iter(key))], self.cost).time_us
        producer = self.sites[parts[0]]
        if len(parts) == 3:
            producer = self._middle(parts[0], parts[1])
            if producer is None:
                return None
        found = self._candidate(producer, self.sites[parts[-1]])
        if not isinstance(found, tuple):  # a Decision saying why not
            return None
        prim, args, plan, rules = found
        consumer = self.sites[parts[-1]]
        merged = copy.copy(consumer)
        merged.members = producer.members + consumer.members
        merged.prim, merged.args = prim, args
        merged.name = f"{consumer.name}__{producer.name}"[:60]
        fused = merged_us(merged, plan, self.cost)
        alone = [self.sites[part] for part in parts]
        if view_copy_reason(merged) is None and slower_point(plan, self.cost, *alone):
            # tiled at run time and slower than its parts somewhere in its range: the
            # region's sum of means would take it; the pairwise pass after says why not
            return None
        self.sites[key] = merged
        self.found[key] = (plan, rules)
        return fused

    def _middle(self, gp, gc):
        producer, consumer = self.sites[gp], self.sites[gc]
        name = f"{consumer.name}__{producer.name}"[:60]
        try:
            prim, args = self._fuse(producer, consumer, name)
        except Exception:  # noqa: BLE001 - FuseTIR may refuse some combinations
            return None
        middle = copy.copy(consumer)
        middle.members = producer.members + consumer.members
        middle.prim, middle.args, middle.name = prim, args, name
        return middle


def search_region(units, edges, cost, candidate, fuse, width: int, memo: dict):
    """The actions of the best partition of one region, as tuples of unit-index groups, and
    its estimate next to the unmerged region's: (actions, candidates, best_us, start_us)."""
    signature = region_signature(units, edges)
    candidates = RegionCandidates(units, cost, candidate, fuse)
    space = RegionSpace(len(units), edges, candidates.evaluate)
    known = memo.get(signature)
    if known is not None:
        actions, best_us, start_us = known
        for action in actions:  # build only the kernels the earlier search chose
            if any(part not in candidates.sites for part in action.parts) or \
                    space.cost(action.key, action.parts) is None:
                break  # it did not form here (a fenced node, a plan group): stop replaying
        return actions, candidates, best_us, start_us
    start = space.initial()
    best = beam_search(space, width)
    memo[signature] = (best.actions, best.cost, start.cost)
    return best.actions, candidates, best.cost, start.cost


__all__ = ["find_regions", "region_signature", "search_region", "RegionCandidates",
           "UNTILED_US"]
