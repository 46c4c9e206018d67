"""The fusion plan as data: export the groups of a build, edit them, import them again.

``fusion_plan.json`` holds one entry per group that has ONNX nodes::

    {"format": "tvm_ascend.fusion_plan", "version": 2, "soc_version": "Ascend910B1",
     "groups": [{"id": "G0", "rules": ["ElementwiseFusion"], "nodes": ["add", "relu"],
                 "kernel": "ascend_k0_fused_add_relu", "tiling": {...}, "on_npu": true,
                 "pinned": false, "recomputes": [], "parts": {}}, ...]}

A node computed again inside each of its readers (RecomputeFusion) is in the ``nodes`` of every
reader's group, and in each of those groups' ``recomputes``: that is how a plan says "recompute
it here" rather than "read it from GM".

One ONNX node the importer lowers to several ops (a Gemm to a MatMul and an Add, a Gather to
an index fix-up on the host and a Take) can have its ops in different groups. Its ops are
numbered 0, 1, ... in program order (the report's ``ops[*].parts``), and ``parts`` says which
of them a group holds: ``"parts": {"gemm": [1]}``. A node a group lists without ``parts`` is
there whole. Two groups may hold one part only if both recompute the node. Version 1 plans
(no ``parts``) are read as they were written.

A group whose kernel also writes the result of one of its nodes for other groups' kernels
(MultiOutputFusion: the residual sum of a pre-LN layer, taken into the LayerNorm's kernel and
read again by a later residual Add) names that node in ``exports``. Like ``kernel`` and
``tiling`` it says what the build made of the plan: a plan group holding a producer that
other groups read is exported from wherever a template tiles it so.

A person edits it (move a node, split or merge groups, set ``pinned``), or a script does with
``split_group`` / ``merge_groups``. The planner reads it as constraints: the nodes of one plan
group must fuse, nodes of different plan groups must not; ``pinned`` marks the groups a person
has fixed by hand (what else it means is up to the planner, partition/grouping.py). ``kernel``
and ``tiling`` are what the exporting build made of the group, for the reader; they are not
constraints, and editing helpers clear them on the groups they change.

Loading checks the plan against the model: the version, every node exists (closest names
suggested), a part of a node in two groups is recomputed by each of them (and a node
recomputed whole by every group that reads it), each group's nodes are connected (except a
``HorizontalFusion`` group, whose parallel ops need not be), and no cycle appears once each
group is contracted to one node (the groups on the cycle are named; edges of a node split over
groups are left out, as which part of it reads or feeds which group is not in the node graph:
the planner then warns that the plan group did not form). Every failure is a
FusionConfigError naming the file and the group or node at fault.

Connected and acyclic are judged in the graph the planner groups, after the prepare stage's
rewrites (``fit_plan``; the build passes one graph per variant it weighs, see
``pipeline.plan_fusion``), not in the ONNX graph: a rewrite can take the nodes between two
nodes of one group into the ops it makes (LLaMA's joined rotary over Q's and K's heads
computes the Slice, Neg, Concat and Mul nodes of both rotaries in ops credited to the two
Adds), so the group is connected in the graph that is grouped and not in the ONNX one. A
plan fits when its groups are connected and acyclic in one of those graphs; the error of the
first is raised when none fits. In the node graph of a module, an op credited to several
nodes links each node it reads from to each of its nodes.

Example
-------
>>> from tvm_ascend.partition.plan_file import export_plan, load_plan, onnx_node_graph
>>> export_plan(lib.fusion_report(), "fusion_plan.json")           # doctest: +SKIP
>>> nodes, edges = onnx_node_graph(model)                           # doctest: +SKIP
>>> load_plan("fusion_plan.json", nodes, edges).group_of("relu")    # doctest: +SKIP
'G0'
"""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field, replace

from ..errors import FusionConfigError
from .report import write_json_atomic

PLAN_FORMAT = "tvm_ascend.fusion_plan"
PLAN_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # 1: no "parts"
_GROUP_KEYS = {"id", "rules", "nodes", "kernel", "tiling", "on_npu", "pinned", "recomputes",
               "parts", "exports"}
_ALSO_ACCEPTED = {"rule", "comment"}  # the report's spelling; a person's note


@dataclass(frozen=True)
class PlanGroup:
    """One group of a plan: ``nodes`` are ONNX node names; ``pinned`` is set by a person."""

    id: str
    nodes: tuple[str, ...]
    pinned: bool = False
    rules: tuple[str, ...] = ()
    kernel: str | None = None
    tiling: dict | None = field(default=None, compare=False, hash=False)
    on_npu: bool | None = None
    recomputes: tuple[str, ...] = ()  # nodes of ``nodes`` that other groups compute as well
    parts: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (node, its op indices held here)
    exports: tuple[str, ...] = ()  # nodes of ``nodes`` whose result it writes for other groups

    def parts_of(self, node: str) -> tuple[int, ...] | None:
        """The indices of ``node``'s ops this group holds; None when it holds them all.

        Example
        -------
        >>> PlanGroup("G1", ("gemm",), parts=(("gemm", (1,)),)).parts_of("gemm")
        (1,)
        """
        return dict(self.parts).get(node)

    def holds(self, node: str, part: int | None = None) -> bool:
        """Whether this group computes op ``part`` of ``node`` (any of its ops if None).

        Example
        -------
        >>> PlanGroup("G1", ("gemm",), parts=(("gemm", (1,)),)).holds("gemm", 0)
        False
        """
        if node not in self.nodes:
            return False
        held = self.parts_of(node)
        return part is None or held is None or part in held

    def to_json(self) -> dict:
        """The group as written in ``fusion_plan.json``.

        Example
        -------
        >>> PlanGroup("G0", ("relu",)).to_json()["pinned"]
        False
        """
        return {"id": self.id, "rules": list(self.rules), "nodes": list(self.nodes),
                "kernel": self.kernel, "tiling": self.tiling, "on_npu": self.on_npu,
                "pinned": self.pinned, "recomputes": list(self.recomputes),
                "parts": {node: list(held) for node, held in self.parts},
                **({"exports": list(self.exports)} if self.exports else {})}


@dataclass(frozen=True)
class FusionPlan:
    """A validated plan; ``model_nodes``/``node_edges`` are kept so edits can be re-checked."""

    groups: tuple[PlanGroup, ...]
    soc_version: str | None = None
    source: str = "<plan>"
    model_nodes: frozenset = field(default=frozenset(), repr=False)
    # the edges connectivity and cycles are checked in; None: not checked yet (``fit_plan``)
    node_edges: tuple | None = field(default=None, repr=False)
    version: int = PLAN_VERSION

    def group_of(self, node: str) -> str | None:
        """The id of the plan group holding ONNX node ``node``, or None.

        Example
        -------
        >>> plan.group_of("relu")                                   # doctest: +SKIP
        'G0'
        """
        ids = self.groups_of(node)
        return ids[0] if ids else None

    def groups_of(self, node: str, part: int | None = None) -> tuple[str, ...]:
        """Ids of every plan group holding ``node`` (op ``part`` of it, when given): several
        when they all recompute it, or hold different parts of it.

        Example
        -------
        >>> plan.groups_of("scale")                                 # doctest: +SKIP
        ('G1', 'G2')
        """
        return tuple(g.id for g in self.groups if g.holds(node, part))

    def _holders(self, key) -> set[str]:
        """Groups holding a node name (whole: every one of its parts) or a (node, part) key."""
        if not isinstance(key, str):
            return set(self.groups_of(*key))
        return {g.id for g in self.groups if key in g.nodes and g.parts_of(key) is None}

    def shared_group(self, nodes) -> str | None:
        """The id of a plan group holding everything in ``nodes`` (None when none does): the
        planner may put them in one kernel only then. An item is a node name (the whole node)
        or a ``(node, part)`` pair (one op of it, see the module docstring).

        Example
        -------
        >>> plan.shared_group(["add_bias", "relu"])                 # doctest: +SKIP
        'G0'
        """
        common = None
        for node in nodes:
            ids = self._holders(node)
            common = ids if common is None else common & ids
            if not common:
                return None
        return min(common) if common else None

    def group(self, group_id: str) -> PlanGroup:
        """The group called ``group_id`` (FusionConfigError naming the known ids otherwise)."""
        for group in self.groups:
            if group.id == group_id:
                return group
        known = [g.id for g in self.groups]
        close = difflib.get_close_matches(group_id, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"groups: {', '.join(known)}"
        raise FusionConfigError(f"{self.source}: no group {group_id!r} in the plan; {hint}")

    def to_json(self) -> dict:
        """The plan as written in ``fusion_plan.json``.

        Example
        -------
        >>> FusionPlan(groups=()).to_json()["version"]
        2
        """
        return {"format": PLAN_FORMAT, "version": self.version, "soc_version": self.soc_version,
                "groups": [g.to_json() for g in self.groups]}


def onnx_node_graph(model) -> tuple[set[str], list[tuple[str, str]]]:
    """The node names of an ONNX model and its producer -> consumer edges between nodes.

    Unnamed nodes are called ``<op_type>_<index>``, as the frontend names them.

    Example
    -------
    >>> nodes, edges = onnx_node_graph(onnx.load("m.onnx"))            # doctest: +SKIP
    """
    names = [node.name or f"{node.op_type}_{index}"
             for index, node in enumerate(model.graph.node)]
    producer = {out: names[i] for i, node in enumerate(model.graph.node)
                for out in node.output if out}
    edges = []
    for i, node in enumerate(model.graph.node):
        for tensor in node.input:
            if tensor in producer and (producer[tensor], names[i]) not in edges:
                edges.append((producer[tensor], names[i]))
    return set(names), edges


def _rules_of(entry: dict) -> list[str]:
    rules = entry.get("rules", entry.get("rule", []))
    return [rules] if isinstance(rules, str) else list(rules)


def _report_keys(entry: dict) -> set:
    """The (node, part) pairs a report group computes, from its ops' ``parts``; (node, None)
    for each node of an entry without them (a report written by hand)."""
    ops = entry.get("ops")
    if ops and all("parts" in op for op in ops):
        return {(node, part) for op in ops for node, part in op["parts"].items()}
    return {(node, None) for node in entry.get("nodes", [])}


def plan_from_report(report: dict) -> dict:
    """The plan document (JSON-ready) of a fusion report; groups with no ONNX node are left out
    (nothing in the model names them).

    A part of a node that several groups compute is recomputed by each of them
    (``recomputes``); a group holding only some of a node's parts lists them (``parts``).

    Example
    -------
    >>> plan_from_report(lib.fusion_report())["groups"][0]["pinned"]   # doctest: +SKIP
    False
    """
    keys = {entry["id"]: _report_keys(entry) for entry in report["groups"]}
    holders: dict = {}  # (node, part) -> ids of the groups computing it
    for group_id, held in keys.items():
        for key in held:
            holders.setdefault(key, []).append(group_id)
    every: dict = {}  # node -> every part of it that some group computes
    for node, part in holders:
        every.setdefault(node, set()).add(part)
    groups = []
    for entry in report["groups"]:
        nodes = list(dict.fromkeys(entry.get("nodes", [])))
        if not nodes:
            continue
        mine = {node: sorted(p for n, p in keys[entry["id"]] if n == node) for node in nodes}
        groups.append({"id": entry["id"], "rules": _rules_of(entry), "nodes": nodes,
                       "kernel": entry.get("kernel"), "tiling": entry.get("tiling"),
                       "on_npu": entry.get("on_npu"), "pinned": False,
                       "recomputes": [n for n in nodes
                                      if any(len(holders[(n, p)]) > 1 for p in mine[n])],
                       "parts": {n: held for n, held in mine.items() if set(held) != every[n]},
                       **({"exports": _exported_nodes(entry)} if entry.get("exports") else {})})
    return {"format": PLAN_FORMAT, "version": PLAN_VERSION,
            "soc_version": report.get("soc_version"), "groups": groups}


def _exported_nodes(entry: dict) -> list[str]:
    """The nodes whose results a report group writes for other groups: an export's ``node``
    is its op's, newline-joined when the op computes several (an identity Cast folded into
    the op before it: TorchScript LLaMA's residual Add and its Cast to float32)."""
    return list(dict.fromkeys(node for e in entry["exports"]
                              for node in (e.get("node") or "").split("\n") if node))


def export_plan(report: dict, path: str) -> None:
    """Write the plan of a fusion report to ``path`` (atomically; see ``plan_from_report``).

    Example
    -------
    >>> export_plan(lib.fusion_report(), "dump/fusion_plan.json")      # doctest: +SKIP
    """
    write_json_atomic(path, plan_from_report(report))


def write_plan(plan: FusionPlan, path: str) -> None:
    """Write an (edited) plan to ``path`` atomically.

    Example
    -------
    >>> write_plan(merge_groups(plan, "G0", "G1"), "fusion_plan.json")  # doctest: +SKIP
    """
    write_json_atomic(path, plan.to_json())


def load_plan(path: str, model_nodes: set[str],
              node_edges: list[tuple[str, str]] | None) -> FusionPlan:
    """Read and validate ``fusion_plan.json`` against a model's nodes and edges.

    Parameters
    ----------
    path : str
        The plan file (``CompileConfig.fusion_plan_file``).
    model_nodes : set of str
        ONNX node names of the model (``onnx_node_graph``).
    node_edges : list of (producer, consumer), or None
        Edges between those nodes. None leaves connectivity and cycles to ``fit_plan`` (the
        build checks them in the graphs it groups, after the prepare stage's rewrites).

    Returns
    -------
    FusionPlan

    Raises
    ------
    FusionConfigError
        Naming the file and what is wrong: JSON syntax (line, column), version, a field of the
        wrong type, an unknown node (closest names), a part of a node in two groups that do
        not both recompute it (or a node recomputed whole but read by a group that does not),
        ``parts`` naming a node the group lacks or no op indices, a group whose nodes are not
        connected, a cycle between groups (the groups on it).

    Example
    -------
    >>> plan = load_plan("fusion_plan.json", *onnx_node_graph(model))   # doctest: +SKIP
    """
    document = _read_json(path)
    return plan_from_json(document, model_nodes, node_edges, source=path)


def plan_from_json(document, model_nodes, node_edges, source: str = "<plan>") -> FusionPlan:
    """Validate a plan document (already parsed JSON); see ``load_plan``.

    Example
    -------
    >>> doc = {"version": 1, "groups": [{"id": "G0", "nodes": ["relu"]}]}
    >>> plan_from_json(doc, {"relu"}, []).group_of("relu")
    'G0'
    """
    if not isinstance(document, dict):
        raise FusionConfigError(f"{source}: a fusion plan is a JSON object with \"version\" "
                                "and \"groups\"")
    version = document.get("version")
    if version not in _READABLE_VERSIONS:
        raise FusionConfigError(f"{source}: plan version {version!r} is not supported (this "
                                "tvm-ascend reads versions "
                                f"{', '.join(map(str, _READABLE_VERSIONS))}); export it again")
    if document.get("format", PLAN_FORMAT) != PLAN_FORMAT:
        raise FusionConfigError(f"{source}: \"format\" is {document['format']!r}, not "
                                f"{PLAN_FORMAT!r}")
    entries = document.get("groups")
    if not isinstance(entries, list):
        raise FusionConfigError(f"{source}: \"groups\" must be a list of groups")
    groups = tuple(_group(entry, index, source) for index, entry in enumerate(entries))
    plan = FusionPlan(groups=groups, soc_version=document.get("soc_version"), source=source,
                      model_nodes=frozenset(model_nodes),
                      node_edges=None if node_edges is None else tuple(node_edges))
    validate_plan(plan)
    return plan


def _group(entry, index: int, source: str) -> PlanGroup:
    where = f"{source}: group #{index}"
    if not isinstance(entry, dict):
        raise FusionConfigError(f"{where} must be an object with \"id\" and \"nodes\"")
    where = f"{source}: group {entry.get('id', '#' + str(index))!r}"
    unknown = sorted(set(entry) - _GROUP_KEYS - _ALSO_ACCEPTED)
    if unknown:
        raise FusionConfigError(f"{where}: unknown key {unknown[0]!r}; a group has "
                                f"{', '.join(sorted(_GROUP_KEYS))}")
    group_id, nodes = entry.get("id"), entry.get("nodes")
    if not isinstance(group_id, str) or not group_id:
        raise FusionConfigError(f"{where}: \"id\" must be a non-empty string")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, str) for n in nodes):
        raise FusionConfigError(f"{where}: \"nodes\" must be a non-empty list of ONNX node "
                                "names")
    if len(set(nodes)) != len(nodes):
        twice = next(n for n in nodes if nodes.count(n) > 1)
        raise FusionConfigError(f"{where}: node {twice!r} is listed twice")
    pinned = entry.get("pinned", False)
    if not isinstance(pinned, bool):
        raise FusionConfigError(f"{where}: \"pinned\" must be true or false, not {pinned!r}")
    rules = _rules_of(entry)
    if not all(isinstance(r, str) for r in rules):
        raise FusionConfigError(f"{where}: \"rules\" must be a list of rule names")
    on_npu = entry.get("on_npu")
    if on_npu is not None and not isinstance(on_npu, bool):
        raise FusionConfigError(f"{where}: \"on_npu\" must be true, false or null")
    recomputes = entry.get("recomputes", [])
    if not isinstance(recomputes, list) or not all(isinstance(n, str) for n in recomputes):
        raise FusionConfigError(f"{where}: \"recomputes\" must be a list of ONNX node names")
    stray = [n for n in recomputes if n not in nodes]
    if stray:
        raise FusionConfigError(f"{where}: \"recomputes\" names {stray[0]!r}, which is not in "
                                "its \"nodes\" (a group recomputes only its own nodes)")
    exports = entry.get("exports", [])
    if not isinstance(exports, list) or not all(isinstance(n, str) for n in exports):
        raise FusionConfigError(f"{where}: \"exports\" must be a list of ONNX node names")
    stray = [n for n in exports if n not in nodes]
    if stray:
        raise FusionConfigError(f"{where}: \"exports\" names {stray[0]!r}, which is not in its "
                                "\"nodes\" (a group exports only its own nodes' results)")
    return PlanGroup(id=group_id, nodes=tuple(nodes), pinned=pinned, rules=tuple(rules),
                     kernel=entry.get("kernel"), tiling=entry.get("tiling"), on_npu=on_npu,
                     recomputes=tuple(recomputes), parts=_parts(entry, nodes, where),
                     exports=tuple(exports))


def _parts(entry: dict, nodes: list, where: str) -> tuple:
    parts = entry.get("parts", {})
    if not isinstance(parts, dict):
        raise FusionConfigError(f"{where}: \"parts\" must be an object from node names to "
                                "lists of op indices")
    for node, held in parts.items():
        if node not in nodes:
            raise FusionConfigError(f"{where}: \"parts\" names {node!r}, which is not in its "
                                    "\"nodes\" (a group holds parts only of its own nodes)")
        if not isinstance(held, list) or not held or len(set(held)) != len(held) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in held):
            raise FusionConfigError(
                f"{where}: \"parts\" of {node!r} must be a non-empty list of distinct op "
                f"indices (0, 1, ...: the node's ops in program order), not {held!r}")
    return tuple((node, tuple(sorted(parts[node]))) for node in nodes if node in parts)


def validate_plan(plan: FusionPlan) -> None:
    """Raise FusionConfigError when ``plan`` does not fit its model (see ``load_plan``).

    Example
    -------
    >>> validate_plan(plan)  # after editing plan.groups by hand      # doctest: +SKIP
    """
    source, owner = plan.source, {}
    ids = [g.id for g in plan.groups]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise FusionConfigError(f"{source}: group id {twice!r} is used twice")
    for group in plan.groups:
        for node in group.nodes:
            if node not in plan.model_nodes:
                close = difflib.get_close_matches(node, sorted(plan.model_nodes), n=3,
                                                  cutoff=0.5)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise FusionConfigError(f"{source}: group {group.id!r} names node {node!r}, "
                                        f"which the model does not have{hint}")
            owner.setdefault(node, []).append(group)
    for node, groups in owner.items():
        _check_shared_parts(plan, node, groups)
    if plan.node_edges is not None:
        _check_structure(plan, owner)


def _check_structure(plan: FusionPlan, owner: dict) -> None:
    """What ``plan.node_edges`` decides: readers of recomputed nodes, connected groups, no
    cycle between groups. ``owner``: node -> the groups listing it."""
    split = {node for node, groups in owner.items()
             if any(g.parts_of(node) is not None for g in groups)}
    _check_recompute_readers(plan, owner, split)
    for group in plan.groups:
        _check_connected(plan, group)
    _check_acyclic(plan, {node: groups[0].id for node, groups in owner.items()},
                   {node: [g.id for g in groups] for node, groups in owner.items()
                    if len(groups) > 1}, split)


def fit_plan(plan: FusionPlan, graphs) -> FusionPlan:
    """``plan`` checked in the node graphs the planner groups: ``graphs``, one list of
    (producer, consumer) edges per module it partitions (after the prepare stage's rewrites;
    with HorizontalFusion on, one per variant it weighs). The plan fits when its groups are
    connected and acyclic in one of them (see the module docstring); the result carries that
    graph's edges, so edits are checked in it too.

    Raises
    ------
    FusionConfigError
        The first graph's failure (connectivity, a cycle, a reader of a recomputed node)
        when the plan fits none.

    Example
    -------
    >>> plan = fit_plan(load_plan(path, nodes, None), [node_graph(prepared)[1]])  # doctest: +SKIP
    """
    first = None
    for edges in graphs:
        candidate = replace(plan, node_edges=tuple(edges))
        try:
            validate_plan(candidate)
        except FusionConfigError as exc:
            first = first or exc
            continue
        return candidate
    if first is None:
        return plan
    if len(graphs) > 1:
        raise FusionConfigError(f"{first} (in the graph after the prepare stage's rewrites; "
                                f"the plan fits none of the {len(graphs)} variants the planner "
                                "weighs either)") from first
    raise first


def _check_shared_parts(plan: FusionPlan, node: str, groups: list) -> None:
    """Two groups computing one op of ``node`` must both recompute it."""
    for index, a in enumerate(groups):
        for b in groups[index + 1:]:
            held_a, held_b = a.parts_of(node), b.parts_of(node)
            both = sorted(set(held_a or held_b or ()) & set(held_b or held_a or ()))
            if (held_a is None or held_b is None or both) and not (
                    node in a.recomputes and node in b.recomputes):
                what = ("all of it" if held_a is None and held_b is None else
                        f"part{'s' if len(both) > 1 else ''} {', '.join(map(str, both))} of it")
                raise FusionConfigError(
                    f"{plan.source}: node {node!r} is in two groups, {a.id!r} and {b.id!r}, "
                    f"that both compute {what}; list it under \"recomputes\" in each to compute "
                    "it in both, or give each group its own \"parts\" of it, or keep it in one")


def _check_recompute_readers(plan: FusionPlan, owner: dict, split: set) -> None:
    """A node recomputed whole is in GM nowhere: every node reading it must sit in a group
    that recomputes it. (Which part of a ``split`` node its readers read is not in the ONNX
    graph, so those are left to the planner.)"""
    for src, dst in plan.node_edges:
        groups = owner.get(src, [])
        if src in split or not any(src in g.recomputes for g in groups):
            continue
        if not any(src in g.recomputes for g in owner.get(dst, [])):
            raise FusionConfigError(
                f"{plan.source}: node {dst!r} reads {src!r}, which groups "
                f"{', '.join(repr(g.id) for g in groups)} recompute, but {dst!r} is in no "
                f"group recomputing it; add {src!r} to {dst!r}'s group (and its "
                "\"recomputes\") or give it a group of its own")


def _check_connected(plan: FusionPlan, group: PlanGroup) -> None:
    if "HorizontalFusion" in group.rules or len(group.nodes) == 1:
        return  # parallel ops merged into one kernel share no edge
    members = set(group.nodes)
    neighbours = {node: set() for node in members}
    for src, dst in plan.node_edges:
        if src in members and dst in members:
            neighbours[src].add(dst)
            neighbours[dst].add(src)
    reached, todo = {group.nodes[0]}, [group.nodes[0]]
    while todo:
        for nxt in neighbours[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    if reached != members:
        apart = [n for n in group.nodes if n not in reached]
        raise FusionConfigError(
            f"{plan.source}: group {group.id!r} is not connected: {', '.join(apart)} share no "
            f"edge with {', '.join(n for n in group.nodes if n in reached)}; split it "
            "(or mark it \"rules\": [\"HorizontalFusion\"] for parallel ops)")


def _check_acyclic(plan: FusionPlan, owner: dict, copies: dict | None = None,
                   split: set = frozenset()) -> None:
    """Contract every group to one node; a cycle means a group would wait on itself.
    ``copies`` maps a recomputed node to every group computing it: its inputs feed each. The
    edges of a ``split`` node are left out: which of its parts reads or feeds which group is
    not in the ONNX graph, and guessing would report cycles that are not there."""
    def unit(node):
        return owner.get(node, node)

    copies = copies or {}
    succ: dict[str, list[str]] = {}
    for src, dst in plan.node_edges:
        if src in split or dst in split:
            continue
        if src in copies:
            continue  # its readers recompute it: the edge is inside each of their groups
        for b in copies.get(dst, [unit(dst)]):
            a = unit(src)
            if a != b:
                succ.setdefault(a, []).append(b)
    state, stack = {}, []  # state: 1 on the DFS path, 2 done

    def visit(start):
        path = [(start, iter(succ.get(start, ())))]
        state[start] = 1
        stack.append(start)
        while path:
            node, children = path[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return stack[stack.index(child):] + [child]
            elif child not in state:
                state[child] = 1
                stack.append(child)
                path.append((child, iter(succ.get(child, ()))))
        return None

    for start in list(succ):
        if start not in state:
            cycle = visit(start)
            if cycle:
                groups = sorted({u for u in cycle if u in {g.id for g in plan.groups}})
                raise FusionConfigError(
                    f"{plan.source}: groups {', '.join(repr(g) for g in groups)} form a cycle "
                    f"once each is one kernel ({' -> '.join(cycle)}); a group cannot both feed "
                    "and wait for another: move the nodes on the path into one group or split")


def split_group(plan: FusionPlan, group_id: str, nodes) -> FusionPlan:
    """A copy of ``plan`` where ``nodes`` leave group ``group_id`` for a new group.

    The new group's id is ``<group_id>_<n>``; both parts keep the rules and ``pinned`` and lose
    ``kernel``/``tiling`` (they no longer describe them). The result is validated.

    Example
    -------
    >>> plan2 = split_group(plan, "G0", ["relu"])                       # doctest: +SKIP
    """
    group, nodes = plan.group(group_id), list(nodes)
    outside = [n for n in nodes if n not in group.nodes]
    if not nodes or outside or len(set(nodes)) >= len(group.nodes):
        why = (f"{', '.join(outside)} not in it" if outside else
               "give a non-empty proper subset of its nodes")
        raise FusionConfigError(f"{plan.source}: cannot split {nodes} off group {group_id!r} "
                                f"({why}); its nodes: {', '.join(group.nodes)}")
    ids, count = {g.id for g in plan.groups}, 1
    while f"{group_id}_{count}" in ids:
        count += 1
    kept = replace(group, nodes=tuple(n for n in group.nodes if n not in nodes), kernel=None,
                   tiling=None, exports=(),
                   recomputes=tuple(n for n in group.recomputes if n not in nodes),
                   parts=tuple(p for p in group.parts if p[0] not in nodes))
    moved = replace(group, id=f"{group_id}_{count}",
                    nodes=tuple(n for n in group.nodes if n in nodes), kernel=None, tiling=None,
                    exports=(), recomputes=tuple(n for n in group.recomputes if n in nodes),
                    parts=tuple(p for p in group.parts if p[0] in nodes))
    groups = []
    for g in plan.groups:
        groups += [kept, moved] if g.id == group_id else [g]
    return _revalidated(plan, groups)


def merge_groups(plan: FusionPlan, first: str, second: str) -> FusionPlan:
    """A copy of ``plan`` where group ``second`` joins group ``first`` (which keeps its id).

    The merged group uses the rules of both, is pinned if either was, and has no kernel or
    tiling yet. The result is validated (a merge that makes a cycle is refused).

    Example
    -------
    >>> plan2 = merge_groups(plan, "G0", "G1")                          # doctest: +SKIP
    """
    a, b = plan.group(first), plan.group(second)
    if a.id == b.id:
        raise FusionConfigError(f"{plan.source}: cannot merge group {first!r} with itself")
    # a node both recomputed stays recomputed only if a third group still computes it too
    elsewhere = {n for g in plan.groups if g.id not in (a.id, b.id) for n in g.nodes}
    recomputes = tuple(n for n in dict.fromkeys(a.recomputes + b.recomputes) if n in elsewhere)
    nodes = tuple(dict.fromkeys(a.nodes + b.nodes))
    merged = replace(a, nodes=nodes,
                     rules=tuple(dict.fromkeys(a.rules + b.rules)), pinned=a.pinned or b.pinned,
                     kernel=None, tiling=None, on_npu=None, recomputes=recomputes,
                     parts=_merged_parts(a, b, nodes), exports=())
    groups = [merged if g.id == a.id else g for g in plan.groups if g.id != b.id]
    return _revalidated(plan, groups)


def _merged_parts(a: PlanGroup, b: PlanGroup, nodes) -> tuple:
    """The parts the union of ``a`` and ``b`` holds: a node either holds whole stays whole."""
    merged = []
    for node in nodes:
        held = [g.parts_of(node) for g in (a, b) if node in g.nodes]
        if all(h is not None for h in held):
            merged.append((node, tuple(sorted({i for h in held for i in h}))))
    return tuple(merged)


def _revalidated(plan: FusionPlan, groups) -> FusionPlan:
    edited = replace(plan, groups=tuple(groups))
    validate_plan(edited)
    return edited


def _read_json(path: str):
    if not os.path.isfile(path):
        what = "is a directory" if os.path.isdir(path) else "does not exist"
        raise FusionConfigError(f"fusion plan file {path!r} {what} (fusion_plan_file)")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise FusionConfigError(f"fusion plan file {path}: cannot be read ({exc})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FusionConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON "
                                f"({exc.msg})") from exc


__all__ = ["PlanGroup", "FusionPlan", "onnx_node_graph", "plan_from_report", "export_plan",
           "write_plan", "load_plan", "plan_from_json", "validate_plan", "fit_plan",
           "split_group",
           "merge_groups", "PLAN_VERSION"]
