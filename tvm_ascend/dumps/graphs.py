"""Graph dumps before and after fusion: JSON, DOT (SVG when Graphviz is installed), ONNX.

``write_graph_dumps(model, report, folder)`` writes::

    graph_before.json / .dot [/ .svg]   the ONNX graph, each node marked with its group
                                        (DOT: one cluster per group)
    graph_after.json  / .dot [/ .svg]   the fused graph: one node per group
    graph_after.onnx                    the fused graph for Netron: each group is a node of
                                        op type ``FusionGroup`` in domain ``ai.tvm_ascend``

Node counts. Before fusion: one node per ONNX node (``report["nodes_before"]``). After fusion:
one ``FusionGroup`` node per report group that draws at least one ONNX node (below), plus
every ONNX node that is in no group, kept as it is. Nodes in no group are those TVM's importer
folds away or turns into views (Constant, Shape, Identity, a Reshape of a constant...): they
cost no launch, but keeping them keeps the fused graph connected as in the original. So::

    after nodes == groups drawing ONNX nodes + ONNX nodes in no group

A ``FusionGroup`` node's inputs and outputs are the tensors crossing the group's boundary; its
attributes are ``group_id``, ``rule``, ``kernel`` (empty on the host), ``on_npu``,
``gm_bytes_saved``, ``op_types`` and ``node_names`` (the original ops). Should a report list
one ONNX node in two groups (its ops split between kernels: a Gather's index fix-up and take,
or an attention a prepare rewrite replaced, its parts in several kernels), the node is drawn
in the group that computes its last op, whose result is the node's output, and that group's
``split_with`` names the other groups holding parts of its nodes; a group with no node of its
own is drawn only there. A node in no group that lies between nodes of one group (a Cast
the importer folded away inside an attention) is drawn in that group.
Weights are declared as graph inputs with their dtype and shape but without their data, so
the dump stays small (like ATC's ``DUMP_GE_GRAPH=2``).

Without an ONNX model (a Relax module was compiled) there are no tensors to follow: the before
graph lists the report's ops without edges, the after graph takes its edges from the report's
``unfused_edges``, and no ONNX file is written.

Example
-------
>>> from tvm_ascend.dumps.graphs import write_graph_dumps
>>> write_graph_dumps(model, lib.fusion_report(), "dump/graphs")  # doctest: +SKIP
['dump/graphs/graph_before.json', ...]
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile

import onnx
from onnx import helper

from ..errors import AscendError, ToolchainError
from ..partition.report import node_groups, write_json_atomic

logger = logging.getLogger("tvm_ascend.dumps")

FUSION_DOMAIN = "ai.tvm_ascend"
FUSION_OP = "FusionGroup"


def _write_now(path: str, write) -> None:
    write()


def write_graph_dumps(model: onnx.ModelProto | None, report: dict, folder: str,
                      guard=_write_now) -> list[str]:
    """Write the before/after graph dumps of one build into ``folder``; returns the paths.

    Parameters
    ----------
    model : onnx.ModelProto or None
        The ONNX model that was compiled (None when a Relax module was).
    report : dict
        Its fusion report (``lib.fusion_report()``).
    folder : str
        Created if missing; files are written atomically.
    guard : callable
        ``guard(path, write)`` runs ``write()``, which writes ``path``: the build's dumper
        passes one that turns an error into a warning naming the file, so one file that cannot
        be written (or drawn) leaves the others; by default errors propagate.

    Returns
    -------
    list of str
        Paths of the files written, in a fixed order (SVGs only when ``dot`` is on PATH).

    Raises
    ------
    AscendError
        The report names ONNX nodes the model lacks, or its groups depend on each other in a
        cycle; ToolchainError when ``dot`` fails.

    Example
    -------
    >>> paths = write_graph_dumps(onnx.load("m.onnx"), report, "dump/graphs")  # doctest: +SKIP
    """
    os.makedirs(folder, exist_ok=True)
    if model is not None:
        fused = fused_onnx_model(model, report)
        graphs = {"graph_before": onnx_graph_json(model, report, "before"),
                  "graph_after": onnx_graph_json(fused, report, "after")}
    else:
        fused = None
        graphs = {"graph_before": report_ops_json(report),
                  "graph_after": report_groups_json(report)}
    paths = []

    def write(path, writer):
        done = []
        guard(path, lambda: done.append(writer(path)))
        if done and done[0] is not False:
            paths.append(path)
        return bool(done)

    for stem, graph in graphs.items():
        base = os.path.join(folder, stem)
        write(base + ".json", lambda path: write_json_atomic(path, graph))
        if write(base + ".dot", lambda path: _write_text(path, graph_dot(graph))):
            write(base + ".svg", lambda path: render_svg(base + ".dot", path))
    if fused is not None:
        write(os.path.join(folder, "graph_after.onnx"),
              lambda path: _write_bytes(path, fused.SerializeToString()))
    return paths


def _node_names(model: onnx.ModelProto) -> list[str]:
    return [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]


def _owners(model: onnx.ModelProto, report: dict) -> dict[str, dict]:
    """ONNX node name -> the report group that computes the node's output.

    One node can be split between groups: the importer lowers a Gather to an index fix-up and
    a take, and a prepare rewrite credits a node it replaces to every op it makes (GQA's
    attention: Q's view, fused into the rotary kernel before it, and the attention itself).
    The node's output is the result of its last op (the highest ``parts`` index over the
    report's ops), so the node is drawn in the group holding that op. Drawn in the first group
    listing it instead, a LLaMA's attention nodes landed in its rotary kernel, its mask Add
    in the mask's kernel, and the two groups fed each other (a cycle, and no dump)."""
    known, listed = set(_node_names(model)), []
    for group in report["groups"]:
        for node in group.get("nodes", []):
            if node not in known:
                raise AscendError(f"fusion report group {group['id']} names ONNX node {node!r}, "
                                  "which the model does not have: report and model differ")
            if node not in listed:
                listed.append(node)
    # the same rule as ``explain`` (report.node_groups), so a dump and explain agree
    owner = {node: node_groups(report, node)[0] for node in listed}
    owner.update(_sandwiched(model, owner))
    return owner


def _sandwiched(model: onnx.ModelProto, owner: dict) -> dict[str, dict]:
    """Nodes in no group that lie between nodes of one group (only through nodes in no
    group): drawn in it. The importer folds such a node away (TorchScript LLaMA's Cast to
    float32 of a float32 softmax, between two parts of its attention kernel), so the node
    does nothing, and that inside the kernel; drawn on its own, it would read the group's node
    and feed the group (a cycle)."""
    names = _node_names(model)
    producer = {out: name for name, node in zip(names, model.graph.node) for out in node.output}
    nodes = dict(zip(names, model.graph.node))
    # groups reaching each ungrouped node (and reached from it) through ungrouped nodes only
    above: dict[str, list] = {}
    for name, node in nodes.items():
        if name not in owner:
            above[name] = _merged([[owner[p]] if p in owner else above.get(p, [])
                                   for p in (producer.get(t) for t in node.input) if p])
    below: dict[str, list] = {}
    consumers: dict[str, list] = {}
    for name, node in nodes.items():
        for tensor in node.input:
            if tensor in producer:
                consumers.setdefault(producer[tensor], []).append(name)
    for name in reversed(names):
        if name not in owner:
            below[name] = _merged([[owner[c]] if c in owner else below.get(c, [])
                                   for c in consumers.get(name, [])])
    found = {}
    for name in above:
        between = [g for g in above[name] if any(g is h for h in below[name])]
        if between:
            found[name] = between[0]
    return found


def _merged(lists: list[list]) -> list:
    """The groups of ``lists``, each once, in order of first appearance."""
    out: list = []
    for groups in lists:
        out += [g for g in groups if not any(g is h for h in out)]
    return out


def _rule_text(group: dict) -> str:
    rule = group.get("rules", group.get("rule", ""))
    return rule if isinstance(rule, str) else "+".join(rule)


def fused_onnx_model(model: onnx.ModelProto, report: dict) -> onnx.ModelProto:
    """The ONNX model with each report group replaced by one ``FusionGroup`` node.

    Passes ``onnx.checker.check_model``; see the module notes for counts and weights.

    Example
    -------
    >>> onnx.save(fused_onnx_model(model, report), "fused.onnx")     # doctest: +SKIP
    """
    graph, names = model.graph, _node_names(model)
    owner = _owners(model, report)
    consumers: dict[str, set[str]] = {}
    for name, node in zip(names, graph.node):
        for tensor in node.input:
            consumers.setdefault(tensor, set()).add(name)
    graph_outputs = {out.name for out in graph.output}
    units, members = [], {}  # units: (first position, node) in model order
    for position, (name, node) in enumerate(zip(names, graph.node)):
        group = owner.get(name)
        if group is None:
            units.append((position, node))
        elif group["id"] not in members:
            members[group["id"]] = [position]
            units.append((position, group))
        else:
            members[group["id"]].append(position)
    made = []
    taken = {n for n in names if n not in owner}
    for position, unit in units:
        if isinstance(unit, onnx.NodeProto):
            made.append((position, unit))
            continue
        group_nodes = [graph.node[p] for p in members[unit["id"]]]
        node_names = [names[p] for p in members[unit["id"]]]
        fusion = _fusion_node(unit, group_nodes, node_names, consumers, graph_outputs, taken)
        split = _split_with(unit, node_names, report)
        if split:
            fusion.attribute.append(helper.make_attribute("split_with", split))
        made.append((position, fusion))
    ordered = _topological(made, {i.name for i in graph.input} | {i.name for i in
                                                                   graph.initializer})
    inputs = list(graph.input) + [
        helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        for init in graph.initializer if init.name not in {i.name for i in graph.input}]
    fused_graph = helper.make_graph(
        ordered, f"{graph.name or 'model'}_fused", inputs, list(graph.output),
        value_info=_value_info(model, {t for node in ordered for t in node.output}),
        doc_string="tvm-ascend fused graph: one FusionGroup node per kernel group; weights are "
                   "listed as inputs without their data")
    opsets = [o for o in model.opset_import if o.domain != FUSION_DOMAIN]
    fused = helper.make_model(fused_graph, opset_imports=opsets + [
        helper.make_opsetid(FUSION_DOMAIN, 1)], producer_name="tvm-ascend")
    fused.ir_version = model.ir_version
    onnx.checker.check_model(fused)
    return fused


def _split_with(group: dict, node_names: list[str], report: dict) -> list[str]:
    """The other report groups holding ops of ``group``'s nodes (a node split between
    kernels is drawn once, in the group computing its output): a group drawn nowhere else
    is named here, so no kernel drops out of the dump."""
    mine = set(node_names)
    return [g["id"] for g in report["groups"]
            if g["id"] != group["id"] and mine & set(g.get("nodes", []))]


def _fusion_node(group: dict, nodes, node_names, consumers, graph_outputs, taken: set):
    inside = set(node_names)
    produced = [out for node in nodes for out in node.output if out]
    inputs = list(dict.fromkeys(t for node in nodes for t in node.input
                                if t and t not in produced))
    outputs = [t for t in produced
               if t in graph_outputs or consumers.get(t, set()) - inside] or produced
    name = group["id"] if group["id"] not in taken else f"{FUSION_OP}_{group['id']}"
    taken.add(name)
    return helper.make_node(
        FUSION_OP, inputs, outputs, name=name, domain=FUSION_DOMAIN,
        group_id=group["id"], rule=_rule_text(group), kernel=group.get("kernel") or "",
        on_npu=int(bool(group.get("on_npu"))), gm_bytes_saved=int(group.get("gm_bytes_saved", 0)),
        op_types=[n.op_type for n in nodes], node_names=node_names)


def _topological(made, available: set) -> list:
    """Nodes in an order where every input is produced first (ties: model order)."""
    producer = {out: index for index, (_, node) in enumerate(made) for out in node.output}
    waiting = {index: {producer[t] for t in node.input if t in producer and t not in available
                       and producer[t] != index} for index, (_, node) in enumerate(made)}
    order, done = [], set()
    while len(order) < len(made):
        ready = [i for i in range(len(made)) if i not in done and waiting[i] <= done]
        if not ready:
            stuck = [made[i][1].name for i in range(len(made)) if i not in done]
            raise AscendError("the fusion report's groups depend on each other in a cycle "
                              f"once each is one node: {', '.join(stuck)}")
        index = min(ready, key=lambda i: made[i][0])
        order.append(made[index][1])
        done.add(index)
    return order


def _value_info(model: onnx.ModelProto, tensors: set) -> list:
    """Shapes of the tensors between nodes of the fused graph, for Netron (from ONNX shape
    inference)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as err:  # noqa: BLE001 - shapes are a nicety of the drawing
        logger.warning("graph dumps: ONNX shape inference failed (%s); tensors drawn without "
                       "shapes", err)
        inferred = model
    return [info for info in inferred.graph.value_info if info.name in tensors]


def onnx_graph_json(model: onnx.ModelProto, report: dict, stage: str) -> dict:
    """Nodes (with their group) and tensor edges of an ONNX graph, as a JSON-ready dict.

    Example
    -------
    >>> onnx_graph_json(model, report, "before")["nodes"][0]["group"]  # doctest: +SKIP
    'G0'
    """
    graph, names = model.graph, _node_names(model)
    by_id = {g["id"]: g for g in report["groups"]}
    owner = _owners(model, report) if stage == "before" else {}
    producer = {out: name for name, node in zip(names, graph.node) for out in node.output}
    nodes, edges = [], []
    for name, node in zip(names, graph.node):
        entry = {"name": name, "op_type": node.op_type, "domain": node.domain}
        if node.domain == FUSION_DOMAIN and node.op_type == FUSION_OP:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            group = by_id[attrs["group_id"].decode()]
            entry.update(group=group["id"], rule=_rule_text(group), kernel=group.get("kernel"),
                         on_npu=bool(group.get("on_npu")),
                         members=[n.decode() for n in attrs["node_names"]])
            if "split_with" in attrs:
                entry["split_with"] = [g.decode() for g in attrs["split_with"]]
        else:
            group = owner.get(name)
            entry.update(group=group["id"] if group else None,
                         on_npu=bool(group.get("on_npu")) if group else None)
        nodes.append(entry)
        for tensor in node.input:
            if tensor in producer:
                edges.append({"src": producer[tensor], "dst": name, "tensor": tensor})
    weights = {init.name for init in graph.initializer}
    return {"graph": stage, "source": "onnx", "nodes": nodes, "edges": edges,
            "inputs": [i.name for i in graph.input if i.name not in weights],
            "outputs": [o.name for o in graph.output]}


def report_ops_json(report: dict) -> dict:
    """The before graph of a build without an ONNX model: the report's ops, no edges."""
    nodes = [{"name": op["var"], "op_type": op["op"], "onnx_node": op.get("node"),
              "group": group["id"], "on_npu": bool(group.get("on_npu"))}
             for group in report["groups"] for op in group.get("ops", [])]
    return {"graph": "before", "source": "report", "nodes": nodes, "edges": [], "inputs": [],
            "outputs": []}


def report_groups_json(report: dict) -> dict:
    """The after graph of a build without an ONNX model: groups, and unfused edges."""
    nodes = [{"name": g["id"], "op_type": FUSION_OP, "group": g["id"], "rule": _rule_text(g),
              "kernel": g.get("kernel"), "on_npu": bool(g.get("on_npu")),
              "members": [op.get("node") or op["var"] for op in g.get("ops", [])]}
             for g in report["groups"]]
    edges = [{"src": e["producer"], "dst": e["consumer"], "tensor": None}
             for e in report.get("unfused_edges", [])]
    return {"graph": "after", "source": "report", "nodes": nodes, "edges": edges, "inputs": [],
            "outputs": []}


def _quote(text) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_node(node: dict) -> str:
    if node["op_type"] == FUSION_OP:
        where = "npu" if node["on_npu"] else "host"
        title = " ".join(part for part in (node["group"], node["rule"], f"({where})") if part)
        count = len(node["members"])
        label = "\n".join(part for part in (
            title, node.get("kernel"),
            f"{count} op{'s' if count > 1 else ''}: {', '.join(node['members'])}") if part)
        colour = "lightblue" if node["on_npu"] else "lightgrey"
    else:
        label = f"{node['name']}\n{node['op_type']}"
        colour = {True: "lightblue", False: "lightgrey"}.get(node.get("on_npu"), "white")
    return f"{_quote(node['name'])} [label={_quote(label)}, fillcolor={_quote(colour)}];"


def graph_dot(graph: dict) -> str:
    """A graph dict (``onnx_graph_json`` and friends) as Graphviz DOT, one statement a line;
    before fusion, the nodes of each group sit in one cluster.

    Example
    -------
    >>> print(graph_dot(onnx_graph_json(model, report, "before")))    # doctest: +SKIP
    """
    lines = [f"digraph {_quote('graph_' + graph['graph'])} {{", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica"];']
    clusters: dict[str, list[dict]] = {}
    for node in graph["nodes"]:
        if node["op_type"] != FUSION_OP and node.get("group"):
            clusters.setdefault(node["group"], []).append(node)
        else:
            lines.append("  " + _dot_node(node))
    for group_id, nodes in clusters.items():
        where = "npu" if nodes[0]["on_npu"] else "host"
        lines += [f"  subgraph {_quote('cluster_' + group_id)} {{",
                  f"    label={_quote(f'{group_id} ({where})')};"]
        lines += ["    " + _dot_node(node) for node in nodes] + ["  }"]
    for edge in graph["edges"]:
        label = f" [label={_quote(edge['tensor'])}]" if edge["tensor"] else ""
        lines.append(f"  {_quote(edge['src'])} -> {_quote(edge['dst'])}{label};")
    return "\n".join(lines + ["}"]) + "\n"


def render_svg(dot_path: str, svg_path: str) -> bool:
    """Render ``dot_path`` to ``svg_path`` with Graphviz's ``dot`` when it is on PATH.

    Returns whether an SVG was written; raises ToolchainError when ``dot`` fails.

    Example
    -------
    >>> render_svg("dump/graph_after.dot", "dump/graph_after.svg")   # doctest: +SKIP
    True
    """
    dot = shutil.which("dot")
    if dot is None:
        logger.info("graph dumps: Graphviz 'dot' is not on PATH; no SVG for %s", dot_path)
        return False
    folder = os.path.dirname(os.path.abspath(svg_path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=".svg")
    os.close(fd)
    command = [dot, "-Tsvg", dot_path, "-o", tmp]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise ToolchainError(f"Graphviz could not draw {dot_path}", command,
                                 done.stdout + done.stderr)
        os.chmod(tmp, 0o644)
        os.replace(tmp, svg_path)
    except subprocess.TimeoutExpired as err:
        raise ToolchainError(f"Graphviz took over 300 s to draw {dot_path}", command) from err
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def _write_bytes(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; dumps are read by others too
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_text(path: str, text: str) -> None:
    _write_bytes(path, text.encode("utf-8"))


__all__ = ["write_graph_dumps", "fused_onnx_model", "onnx_graph_json", "report_ops_json",
           "report_groups_json", "graph_dot", "render_svg", "FUSION_DOMAIN", "FUSION_OP"]
