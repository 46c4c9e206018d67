"""The fusion report's ``dynamic`` section: what a symbolic dimension does to the build.

A group over symbolic dimensions with a range (``--input_shape "x:2,1~64,8"``) that the
elementwise template takes, or the row template (rows of a static length, or a Softmax's rows
as long as a symbolic last axis), is compiled once for the whole range and tiled at run time:
its kernel gets a host tiling function (as AscendC's TilingFunc) that fills its tiling struct
from each call's shape (``codegen/tiling_func.py``), its UB tiles are sized for the range's
upper bound, and the partitioner estimated it at the range's ends and midpoint
(``partition/cost.py``); so is a matmul over a symbolic M, N or K (projections, FFNs, and
attention's two products as batched matmuls) and the fused attention kernel over a symbolic
sequence. Every other op whose shape holds a symbolic dimension (data movement, a reduction
other than Softmax over a symbolic axis, an epilogue column over a symbolic N) still runs on
the host (TVM's llvm build), and nothing may fall back silently: the section lists every such
op with its dimensions, and ``warn_dynamic`` logs one warning naming them and the gear flags
that would put them on the NPU (one static build per listed size: ``--dynamic_dims``,
``--dynamic_batch_size``).

Section keys: ``symbolic_dims`` ({name: {"range": [lo, hi] or None, "inputs": [[input,
axis], ...], "shapes": {input: its shape, -1 where symbolic}}}), ``host_ops`` ([{"node",
"op", "var", "dims", "why"}]), ``host_groups`` ([{"group", "ops", "vars", "nodes", "dims", "why"}]:
host groups over a symbolic dimension whose ops pass the op check but that no template tiles
as a group, with the templates' reason), ``npu_kernels``, ``runtime_tiling`` ({"templates": the
templates that tile at run time, "kernels": [{"kernel", "template", "dims", "range_us":
[{"sizes", "time_us"}, ...]}]: this build's kernels tiled at run time, each estimated at its
range's lower end, midpoint and upper end}), ``hint`` (the gear flags for the host ops).

Example
-------
>>> report["dynamic"]["host_ops"][0]                                        # doctest: +SKIP
{'node': 'node_matmul_3', 'op': 'relax.matmul', 'var': 'lv29', 'dims': ['seq'], ...}
>>> report["dynamic"]["runtime_tiling"]["kernels"][0]["range_us"][0]        # doctest: +SKIP
{'sizes': {'seq': 1}, 'time_us': 3.2}
"""
from __future__ import annotations

import json
import logging
import re

import tvm

from .. import ir_attrs

logger = logging.getLogger("tvm_ascend")

MAX_NAMED = 8  # ops named in the warning; the section has them all
# the templates whose kernels tile at run time (schedules/runtime_tiling.py); the partition
# stage may not import the templates' registry for the report alone, so it is named here and
# tests/test_runtime_tiling.py holds it equal to that registry
RUNTIME_TILED_TEMPLATES = ("elementwise", "row_reduce", "matmul", "attention", "data_movement")


def symbolic_inputs(imported: tvm.IRModule) -> dict:
    """{dimension name: {"range": [lo, hi] or None, "inputs": [[input, axis], ...]}} of the
    symbolic sizes of ``main``'s parameters."""
    main = imported["main"]
    attrs = main.attrs
    ranges = json.loads(str(attrs[ir_attrs.DIM_RANGES])) if attrs and \
        ir_attrs.DIM_RANGES in attrs else {}
    names = [str(n) for n in attrs[ir_attrs.ONNX_INPUTS]] if attrs and \
        ir_attrs.ONNX_INPUTS in attrs else [p.name for p in main.params]
    dims: dict = {}
    for name, param in zip(names, main.params):
        for axis, dim in enumerate(_dims(param.ty)):
            if isinstance(dim, tvm.tirx.Var):
                entry = dims.setdefault(str(dim.name), {"range": ranges.get(str(dim.name)),
                                                        "inputs": [], "shapes": {}})
                entry["inputs"].append([name, axis])
                entry["shapes"][name] = [int(d) if isinstance(d, tvm.tirx.IntImm) else -1
                                         for d in _dims(param.ty)]
    return dims


def _dims(ty) -> list:
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    return list(values) if values is not None else []


def _symbols_of(ty, names: set) -> list:
    """The symbolic dimension names that ``ty``'s shape mentions."""
    found = []
    for dim in _dims(ty):
        if isinstance(dim, (int, tvm.tirx.IntImm)):
            continue
        for word in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", str(dim)):
            if word in names and word not in found:
                found.append(word)
    return found


def dynamic_section(imported: tvm.IRModule, result, report: dict) -> dict | None:
    """The report's ``dynamic`` section of one partition, or None for a static model."""
    dims = symbolic_inputs(imported)
    if not dims:
        return None
    names = set(dims)
    symbolic = {}
    for block in imported["main"].body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, tvm.relax.Var):
                # the importer's `gv = lv` naming the output: an alias moves no data and the
                # partitioner builds no group for it, so it is kept nowhere (not a host op)
                continue
            found = _symbols_of(getattr(binding.var, "ty", None), names)
            for arg in getattr(binding.value, "args", ()):
                found += [d for d in _symbols_of(getattr(arg, "ty", None), names)
                          if d not in found]
            if found:
                symbolic[binding.var.name] = found
    host_ops = [{"node": op.node, "op": op.op, "var": op.var, "dims": symbolic[op.var],
                 "why": op.decision.reason}
                for op in result.ops.values() if not op.decision.ok and op.var in symbolic]
    return {"symbolic_dims": dims, "host_ops": host_ops,
            "host_groups": host_groups(result, symbolic),
            "npu_kernels": report["npu_kernels"],
            "runtime_tiling": {"templates": list(RUNTIME_TILED_TEMPLATES),
                               "kernels": runtime_kernels(report, names)},
            "hint": gear_hint(dims)}


def host_groups(result, symbolic: dict) -> list[dict]:
    """Host groups over a symbolic dimension whose ops each pass the op check (so they are no
    ``host_ops``) but that no template tiles as a group (BERT's position-embedding add over
    ``(1, seq, 64)``): the group, its ops, the dimensions and the templates' reason. With
    ``host_ops`` they are everything a symbolic dimension keeps on the host."""
    groups = []
    for group in result.groups:
        if group.on_npu or group.free:
            continue
        members = [m for m in group.members if m.decision.ok and m.var in symbolic]
        if not members:
            continue
        dims = list(dict.fromkeys(d for m in members for d in symbolic[m.var]))
        groups.append({"group": group.name, "ops": [m.op for m in members],
                       "vars": [m.var for m in members],
                       "nodes": list(dict.fromkeys(m.node for m in members if m.node)),
                       "dims": dims, "why": group.reason})
    return groups


def runtime_kernels(report: dict, names: set) -> list[dict]:
    """The report's kernels tiled at run time: kernel, template, the symbolic dimensions its
    plan reads, and its estimates at the range's ends and midpoint."""
    kernels = []
    for group in report["groups"]:
        runtime = ((group.get("tiling") or {}).get("plan") or {}).get("runtime")
        if not group["on_npu"] or not runtime:
            continue
        dims = [d["name"] for d in runtime["shapes"]["dims"] if d["name"] in names]
        kernels.append({"kernel": group["kernel"], "template": group["tiling"]["template"],
                        "dims": dims, "range_us": group["estimate"].get("range_us", [])})
    return kernels


def _listed(names) -> str:
    """``a``, ``a and b``, ``a, b and c``: names as a sentence lists them."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def gear_hint(dims: dict) -> str:
    """The ATC gear flags that would build these dimensions statically: one build per size,
    here each range's ends and middle (an unbounded dimension: 1, 8, 64)."""
    sizes = {}
    for name, entry in dims.items():
        low, high = entry["range"] or (None, None)
        sizes[name] = [low, (low + high) // 2, high] if high else [1, 8, 64]
    axes: dict = {}
    shapes: dict = {}
    for name, entry in dims.items():
        for input_name, axis in entry["inputs"]:
            axes.setdefault(input_name, {})[axis] = name
            shapes[input_name] = entry["shapes"][input_name]
    order = [axes[n][a] for n in axes for a in sorted(axes[n])]  # each -1, in input order
    spelled = ";".join(f"{n}:" + ",".join(str(d) for d in shape) for n, shape in shapes.items())
    gears = ";".join(",".join(str(sizes[name][k]) for name in order) for k in range(3))
    return (f"to compile them for the NPU, build gears: --input_shape \"{spelled}\" "
            f"--input_format ND --dynamic_dims \"{gears}\" (one value per -1, "
            "one static build per gear), or --dynamic_batch_size where only the batch varies")


def warn_dynamic(report: dict) -> None:
    """One warning naming the ops kept on the host by a symbolic dimension (none is moved
    there silently), with the gear flags that would compile them for the NPU."""
    section = report.get("dynamic")
    if not section or not (section["host_ops"] or section.get("host_groups")):
        return
    ops = section["host_ops"] + [{"node": ", ".join(g["nodes"]) or g["group"],
                                  "op": "+".join(dict.fromkeys(g["ops"])), "var": g["group"]}
                                 for g in section.get("host_groups", [])]
    named = ", ".join(f"{o['node'] or o['var']} ({o['op'].replace('relax.', '')})"
                      for o in ops[:MAX_NAMED])
    more = f" and {len(ops) - MAX_NAMED} more" if len(ops) > MAX_NAMED else ""
    dims = ", ".join(f"{n} in {e['range'][0]}~{e['range'][1]}" if e["range"] else f"{n}"
                     for n, e in section["symbolic_dims"].items())
    tiled = len(section["runtime_tiling"]["kernels"])
    logger.warning("%d op(s) kept on the host because a dimension is symbolic (%s; run-time "
                   "tiling covers %s kernels only, %d of this build's kernels use it): "
                   "%s%s; %s", len(ops), dims, _listed(RUNTIME_TILED_TEMPLATES), tiled,
                   named, more, section["hint"])
