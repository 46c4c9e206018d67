"""Beam search over the partitions of one region: which neighbouring kernels to merge.

A region is a set of units (candidate kernels) joined by edges ``p -> c`` where ``c`` is the only
reader of ``p``'s result. A partition is a set of groups (frozensets of units); merging the
groups at both ends of an edge is an action, and so is merging three (``p -> c -> r``) when
the pair alone tiles in no template but the three do (scores -> softmax is no kernel, with
the product by V it is attention). The cost of a partition is the sum of its groups'
estimated times, asked of a callback, so this module knows nothing of TIR or Relax.

Why a search: merging greedily in program order decides each pair before the tiler and the
cost model have seen what it blocks (a MatMul taking a bias Add may then be unable to take the
residual LayerNorm it would have fused with whole). The beam keeps the ``width`` best partitions
at each depth, including ones that are momentarily worse, and the greedy path is scored beside
it, so the result is never worse than greedy merging under the same estimates. The beam's best
is then refined (``refine``): a unit moved across a kernel boundary, the region merged greedily
again, kept where that ranks better; a narrow beam over a long layer otherwise keeps only the
orders of its other merges and loses a partition one early, equally cheap merge blocks.

Example
-------
>>> costs = {frozenset({0}): 5.0, frozenset({1}): 5.0, frozenset({0, 1}): 6.0}
>>> space = RegionSpace(2, [(0, 1)], lambda key, *_: costs.get(key))
>>> best = beam_search(space, width=2)
>>> sorted(map(sorted, best.groups)), best.cost
([[0, 1]], 6.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Action:
    """Merge ``parts`` (two or three groups, producer first) into one group."""

    parts: tuple

    @property
    def key(self) -> frozenset:
        return frozenset().union(*self.parts)


@dataclass(frozen=True)
class Partition:
    """A partition of the region's units, its estimated cost and the actions that made it."""

    groups: frozenset
    cost: float
    actions: tuple = ()

    def group_of(self, unit: int) -> frozenset:
        return next(g for g in self.groups if unit in g)


@dataclass
class RegionSpace:
    """The region: ``n`` units, single-reader edges ``(producer, consumer)`` in the order a
    greedy pass would try them, and ``evaluate(key, *parts) -> cost or None`` (None: the group
    tiles in no template or a rule refuses it). ``evaluate`` is asked once per group."""

    n: int
    edges: list
    evaluate: object
    _costs: dict = field(default_factory=dict)
    _neighbours: dict | None = None

    def cost(self, key: frozenset, parts=()) -> float | None:
        if key not in self._costs:
            self._costs[key] = self.evaluate(key, *parts)
        return self._costs[key]

    def neighbours(self, unit: int) -> frozenset:
        """The units joined to ``unit`` by an edge, either way (built once per region: the
        local search asks for them on every move)."""
        if self._neighbours is None:
            links = {u: set() for u in range(self.n)}
            for p, c in self.edges:
                links[p].add(c)
                links[c].add(p)
            self._neighbours = {u: frozenset(v) for u, v in links.items()}
        return self._neighbours[unit]

    def initial(self) -> Partition:
        groups = frozenset(frozenset({u}) for u in range(self.n))
        return Partition(groups, sum(self.cost(g) for g in groups))

    def children(self, state: Partition):
        """Every partition one action away, in greedy order (duplicates possible)."""
        owner = {u: g for g in state.groups for u in g}
        for producer, consumer in self.edges:
            gp, gc = owner[producer], owner[consumer]
            if gp is gc:
                continue
            action = self._action(state, owner, gp, gc)
            if action is not None:
                yield action

    def _action(self, state, owner, gp, gc):
        merged = self.cost(gp | gc, (gp, gc))
        if merged is not None:
            return self._apply(state, Action((gp, gc)), merged)
        # look-ahead: the pair with the consumer group's only reader in the region
        readers = {owner[c] for p, c in self.edges if p in gc and owner[c] is not gc}
        if len(readers) != 1:
            return None
        (gr,) = readers
        if gr is gp:
            return None
        merged = self.cost(gp | gc | gr, (gp, gc, gr))
        return None if merged is None else self._apply(state, Action((gp, gc, gr)), merged)

    def _apply(self, state, action, merged) -> Partition:
        groups = state.groups.difference(action.parts) | {action.key}
        cost = state.cost - sum(self.cost(g) for g in action.parts) + merged
        return Partition(groups, cost, state.actions + (action,))


def _rank(state: Partition) -> tuple:
    # ties go to fewer kernels: the same estimate with one launch less is the better plan
    return (round(state.cost, 9), len(state.groups))


def greedy_path(space: RegionSpace, start: Partition | None = None) -> Partition:
    """Merge the first action (greedy order) that is no slower, until none is: what a
    pairwise greedy merger does, scored with the same estimates (from ``start``, else from
    every unit apart)."""
    state = space.initial() if start is None else start
    while True:
        step = next((c for c in space.children(state) if _rank(c) <= _rank(state)), None)
        if step is None:
            return state
        state = step


def pruned(space: RegionSpace, state: Partition) -> Partition:
    """``state`` with every merge that loses undone: an action whose group no later action
    extended (it is a group of ``state``) and whose parts cost less apart. A narrow beam can
    keep such a merge, taken while nothing better was in reach, on the path to an unrelated
    gain (the beam never sees the gain without it); undoing it only lowers the cost. Repeated
    until none loses (undoing one makes its parts groups, whose own merges are then
    checked)."""
    while True:
        for i in range(len(state.actions) - 1, -1, -1):
            action = state.actions[i]
            if action.key not in state.groups:
                continue  # a later action extended it: undoing it would undo that one too
            apart = sum(space.cost(part) for part in action.parts)
            cost = state.cost - space.cost(action.key) + apart
            if round(cost, 9) < round(state.cost, 9):  # strictly cheaper: a tie keeps it
                groups = state.groups.difference({action.key}) | set(action.parts)
                state = Partition(groups, cost, state.actions[:i] + state.actions[i + 1:])
                break
        else:
            return state


def beam_search(space: RegionSpace, width: int = 4) -> Partition:
    """The best partition found by a beam of ``width`` (never worse than ``greedy_path``),
    refined by moving units across kernels (``refine``), its losing merges undone
    (``pruned``)."""
    frontier = [space.initial()]
    best = min([frontier[0], greedy_path(space)], key=_rank)
    for _ in range(space.n - 1):
        children = {}
        for state in frontier:
            for child in space.children(state):
                known = children.get(child.groups)
                if known is None or _rank(child) < _rank(known):
                    children[child.groups] = child
        if not children:
            break
        frontier = sorted(children.values(), key=_rank)[:width]
        best = min([best, frontier[0]], key=_rank)
    # pruned before refine (a cleaner start) and after it (a moved unit can leave a merge that
    # no longer pays)
    return pruned(space, refine(space, pruned(space, best)))


def _owner(state: Partition) -> dict:
    return {u: g for g in state.groups for u in g}


def _components(space: RegionSpace, units: frozenset) -> list:
    """The connected pieces of ``units`` under the region's edges."""
    pieces, left = [], set(units)
    while left:
        todo, piece = [left.pop()], set()
        while todo:
            unit = todo.pop()
            piece.add(unit)
            for b in space.neighbours(unit) & left:
                left.discard(b)
                todo.append(b)
        pieces.append(frozenset(piece))
    return pieces


def _build(space: RegionSpace, units: frozenset):
    """(cost, actions) forming ``units`` as one group from its single units, by merges along
    its own edges (a pair, or the look-ahead's three) each of which tiles; None when the
    greedy order finds none."""
    state = Partition(frozenset(frozenset({u}) for u in units),
                      sum(space.cost(frozenset({u})) for u in units))
    while len(state.groups) > 1:
        owner, step = _owner(state), None
        for producer, consumer in space.edges:
            if producer not in units or consumer not in units:
                continue
            gp, gc = owner[producer], owner[consumer]
            if gp is gc:
                continue
            merged = space.cost(gp | gc, (gp, gc))
            if merged is not None:
                step = space._apply(state, Action((gp, gc)), merged)
                break
            readers = {owner[c] for p, c in space.edges
                       if p in gc and c in units and owner[c] is not gc}
            if len(readers) == 1 and next(iter(readers)) is not gp:
                (gr,) = readers
                merged = space.cost(gp | gc | gr, (gp, gc, gr))
                if merged is not None:
                    step = space._apply(state, Action((gp, gc, gr)), merged)
                    break
        if step is None:
            return None
        state = step
    return state.cost, state.actions


def _moved(space: RegionSpace, state: Partition, unit: int, target: frozenset):
    """``state`` with ``unit`` taken out of its group into ``target`` (both rebuilt), or None
    where a rebuilt group tiles in no template."""
    source = state.group_of(unit)
    groups = [target | {unit}] + _components(space, source - {unit})
    built = [_build(space, g) for g in groups]
    if any(b is None for b in built):
        return None
    keep = [g for g in state.groups if g is not source and g is not target]
    actions = tuple(a for a in state.actions if any(a.key <= g for g in keep))
    cost = sum(space.cost(g) for g in keep) + sum(b[0] for b in built)
    return Partition(frozenset(keep) | frozenset(groups), cost,
                     actions + sum((b[1] for b in built), ()))


def refine(space: RegionSpace, state: Partition) -> Partition:
    """Local search from ``state``: move one unit across a kernel boundary (into the group it
    feeds or the one feeding it), merge greedily from there, and keep the result where it
    ranks better; until no move does.

    Why: a beam ranks partial partitions, so a cheap early merge can crowd out of it the
    partition a later merge needs (LLaMA's K^T copy merged into K's rotary kernel is as cheap
    as into the attention kernel, but only the latter lets K's head transpose join the rotary;
    a beam of 4 loses it among the orders of the layer's other merges). Never worse than
    ``state``: a move is kept only when the result ranks strictly better."""
    improved = True
    while improved:
        improved = False
        owner = _owner(state)
        for producer, consumer in space.edges:
            gp, gc = owner[producer], owner[consumer]
            if gp is gc:
                continue
            for unit, source, target in ((producer, gp, gc), (consumer, gc, gp)):
                if len(source) == 1:
                    continue  # moving a lone unit is a merge: the search has weighed it
                moved = _moved(space, state, unit, target)
                if moved is not None:
                    moved = greedy_path(space, moved)
                    if _rank(moved) < _rank(state):
                        state, improved = moved, True
                        break
            if improved:
                break
    return state


__all__ = ["Action", "Partition", "RegionSpace", "beam_search", "greedy_path", "pruned", "refine"]
