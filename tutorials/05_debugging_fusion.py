"""Debugging fusion: dumps for Netron, ``explain``, a switch file, ``no_fuse_nodes``, a plan
file edited by hand, and a group with a precision problem fenced off.

    python tutorials/05_debugging_fusion.py                                  # hidden 64, seq 32
    TVM_ASCEND_TUTORIAL_SIZE=small python tutorials/05_debugging_fusion.py   # hidden 32, seq 16

ATC users: these are ATC's debugging knobs, with the same names where ATC has one.

1. ``DUMP_GRAPH=1`` / ``--dump_graph`` (``CompileConfig(dump_graph=True, dump_path=...)``)
   writes numbered dumps: the Relax module at each stage, the fusion report,
   ``fusion_result.json`` (ATC's per-rule counts), ``fusion_plan.json``, every AscendC kernel,
   and ``graphs/``: ``graph_before.onnx``-style JSON/DOT and ``graph_after.onnx``, the fused
   graph with one ``FusionGroup`` node per kernel, which Netron opens (``netron
   <dump_path>/graphs/graph_after.onnx``).
2. ``tvm-ascend explain --model M --node NAME`` says why a node is in its group and why each
   edge of that group stayed unfused; ``explain_node(report, NAME)`` is the same in Python.
3. ``--fusion_switch_file`` (ATC's format: ``RuleName:off`` lines, ours or ATC's rule names;
   ``tvm-ascend explain --rules`` lists them) turns a rule off for the whole model.
4. ``fusion_plan.json`` from the dumps is the grouping as data: edit it (split a group, move a
   node) and rebuild with ``--fusion_plan`` (``CompileConfig.fusion_plan_file``); the planner
   takes it as constraints and warns about any plan group that did not form.
5. ``compare`` measures the error of every fused group against onnxruntime, so the group that
   loses precision is named; ``--no_fuse_nodes a,b`` (``CompileConfig.no_fuse_nodes``) keeps
   the named nodes out of every group, which fences that group off; compare again.

Every step prints what changed: kernel counts and the groups that moved. The model is one
post-LN transformer encoder layer (``benchmarks/models/transformer.py``: attention, LayerNorm
op chains, a GELU FFN). Times are the timing model's: ESTIMATES, not measurements. Seven
builds: on a loaded 2-core machine, small 70 s wall in the test run (cold cache), default 55 s.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile

import tvm_ascend
from tvm_ascend import CompileConfig
from tvm_ascend.compare import compare_model, find_atc
from tvm_ascend.partition.report import explain_node

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.models.transformer import encoder_layer  # noqa: E402

# TVM_ASCEND_TUTORIAL_SIZE picks the layer: "small" is what tests/test_tutorials.py runs.
SIZES = {
    "default": dict(batch=1, seq=32, hidden=64, heads=2, ffn=128),
    "small": dict(batch=1, seq=16, hidden=32, heads=2, ffn=64),
}
SOC = "Ascend910B1"


def groups_of(lib) -> dict:
    """{group id: (rule, nodes)} of a build's groups that hold ONNX nodes (in float16 the
    casts of the model's inputs and outputs are kernels of their own, with none)."""
    return {g["id"]: (g["rule"], tuple(g["nodes"])) for g in lib.fusion_report()["groups"]
            if g["nodes"]}


def moved(before, after) -> str:
    """The groups of ``after`` whose nodes no group of ``before`` has, one line each."""
    old = {frozenset(nodes) for _, nodes in groups_of(before).values()}
    new = [(gid, rule, nodes) for gid, (rule, nodes) in groups_of(after).items()
           if frozenset(nodes) not in old]
    return "\n".join(f"    now {gid} {rule}: {', '.join(nodes)}" for gid, rule, nodes in new) \
        or "    (no group changed)"


def kernels(lib) -> int:
    return lib.fusion_report()["npu_kernels"]


def main() -> None:
    size = os.environ.get("TVM_ASCEND_TUTORIAL_SIZE", "default")
    model = encoder_layer(**SIZES[size])
    work = pathlib.Path(tempfile.mkdtemp(prefix="tvm_ascend_tutorial05_"))
    model_path = work / "layer.onnx"
    model_path.write_bytes(model.SerializeToString())
    print(f"encoder layer ({size}): {len(model.graph.node)} ONNX nodes, files in {work}")
    # float16, as ATC converts by default (precision_mode="force_fp16"), with reductions in
    # float16 too (op_select_implmode="high_performance"): step 5 looks for the group that
    # loses the most precision.
    config = CompileConfig(soc_version=SOC, fusion_level="aggressive",
                           precision_mode="force_fp16", op_select_implmode="high_performance")

    # 1. Dumps. The fused graph for Netron is graphs/graph_after.onnx under dump_path.
    dump = work / "dump"
    base = tvm_ascend.build(model, target="ascend",
                            config=config.replace(dump_graph=True, dump_path=str(dump)))
    print(f"\n1. dumps in {dump}: " + ", ".join(sorted(
        p.name for p in dump.iterdir() if p.is_file()))[:400])
    graphs = sorted(p.name for p in (dump / "graphs").iterdir())
    print(f"   graphs/: {', '.join(graphs)}")
    print(f"   open the fused graph in Netron: netron {dump / 'graphs' / 'graph_after.onnx'}")
    print(f"   {kernels(base)} NPU kernels:")
    for gid, (rule, nodes) in groups_of(base).items():
        print(f"    {gid} {rule}: {len(nodes)} nodes ({nodes[0]} ... {nodes[-1]})")

    # 2. explain: why ln1.mean is in its group, and why that group's edges stayed unfused.
    #    On the command line: tvm-ascend explain --model layer.onnx --node ln1.mean
    #    --fusion_level aggressive
    print("\n2. explain ln1.mean:")
    print("   " + explain_node(base.fusion_report(), "ln1.mean").replace("\n", "\n   "))

    # 3. A switch file turning LayerNormFusion off (ATC's name, LayerNormFusionPass, works
    #    too): each LayerNorm leaves the MatMul's kernel before it.
    switch = work / "fusion_switch.cfg"
    switch.write_text("# keep each LayerNorm out of the MatMul before it\nLayerNormFusion:off\n")
    no_ln = tvm_ascend.build(model, target="ascend",
                             config=config.replace(fusion_switch_file=str(switch)))
    print(f"\n3. --fusion_switch_file ({switch.name}: LayerNormFusion:off): "
          f"{kernels(base)} -> {kernels(no_ln)} NPU kernels; groups that changed:")
    print(moved(base, no_ln))

    # 4. Edit fusion_plan.json: split the FFN's up-projection group so that the GELU runs as a
    #    kernel of its own after the MatMul + bias, and rebuild from the plan.
    plan = json.loads((dump / "fusion_plan.json").read_text())
    up = next(g for g in plan["groups"] if "ffn.up.matmul" in g["nodes"])
    gelu = [n for n in up["nodes"] if n.startswith("gelu.")]
    up["nodes"] = [n for n in up["nodes"] if n not in gelu]
    plan["groups"].append({"id": "G_gelu", "rules": ["ElementwiseFusion"], "nodes": gelu,
                           "pinned": True, "comment": "split by hand in tutorial 05"})
    up["pinned"] = True
    for key in ("kernel", "tiling"):  # what the earlier build made of it: not constraints
        up.pop(key, None)
    edited = work / "fusion_plan_edited.json"
    edited.write_text(json.dumps(plan, indent=1))
    replanned = tvm_ascend.build(model, target="ascend",
                                 config=config.replace(fusion_plan_file=str(edited)))
    print(f"\n4. fusion_plan.json edited ({up['id']} split: {', '.join(gelu)} moved to a group "
          f"of its own), rebuilt with --fusion_plan {edited.name}: {kernels(base)} -> "
          f"{kernels(replanned)} NPU kernels; groups that changed:")
    print(moved(base, replanned))

    # 5. A group with a precision problem, fenced with no_fuse_nodes. compare measures every
    #    fused group's output against onnxruntime's float32, so the group that loses the most
    #    precision is named, not just the layer. (Its build has step 1's config without the
    #    dumps: the same groups, under the same ids.)
    results, source = compare_model(model, config, variants=("aggressive",))
    (row,) = results
    worst = max(row.group_errors, key=lambda e: e[4])
    print(f"\n5. compare (vs {source}); error of every fused group:")
    for gid, rule, tensor, _, rel_err in row.group_errors:
        print(f"    {gid} {rule:<50} {tensor:<12} max rel err {rel_err:.1e}"
              + ("   <- worst" if gid == worst[0] else ""))
    # Fence the worst group: its nodes fused with nothing, so each is a kernel of its own
    # and GM holds every intermediate between them. If the output error does not move, the
    # fusion is not where the error comes from, float16 is: ``keep_dtype=<nodes>`` computes
    # named nodes in float32 wherever they are fused.
    nodes = groups_of(base)[worst[0]][1]
    fenced_rows, _ = compare_model(model, config.replace(no_fuse_nodes=nodes),
                                   variants=("aggressive",), groups=False)
    output = next(iter(row.output_errors))
    print(f"   --no_fuse_nodes {','.join(nodes)} (worst group {worst[0]}, {worst[1]}):")
    for label, r in (("as built", row), (f"{worst[0]} fenced", fenced_rows[0])):
        print(f"    {label:<12} {r.launches:>3} launches, output {output} max rel err "
              f"{r.output_errors[output][1]:.1e}, est. {r.est_latency_us:.1f} us (ESTIMATE)")
    before, after = row.output_errors[output][1], fenced_rows[0].output_errors[output][1]
    if abs(after - before) <= 0.1 * before:
        print(f"   fencing {worst[0]} left the output's error where it was: that group's fusion "
              "is not the cause (float16 is); unfence it and try keep_dtype")
    else:
        print(f"   fencing {worst[0]} moved the output's error {before:.1e} -> {after:.1e}: "
              "the fusion of that group matters for precision")

    # Side by side with ATC: the ATC-style build (only ATC's rules, the same templates and
    # timing model, the same float16 flags) against the first build.
    atc = tvm_ascend.build(model, target="ascend",
                           config=config.replace(fusion_level="conservative", rule_set="atc_style"))
    print(f"\n{SOC}{'':<12}{'launches':>9}{'HBM bytes':>12}{'est. us':>10}")
    for name, lib in (("ATC-style (emulated)", atc), ("tvm-ascend aggressive", base)):
        report = lib.fusion_report()
        launches = report["kernels"]["ascend"] + report["kernels"]["host"]
        print(f"{name:<23}{launches:>9}{report['estimate']['hbm_bytes']:>12}"
              f"{report['estimate']['latency_us']:>10.1f}")
    print("(est. us: ESTIMATES from the timing model, not measured)")
    path, reason = find_atc()
    print(reason or f"real atc: found at {path}; run it with --model={model_path} "
          f"--framework=5 --soc_version={SOC} --fusion_switch_file={switch} for its side "
          "(`tvm-ascend compare --atc`, issue 21)")
    print("published plain ATC: benchmarks/calibration.json has no figure for this layer "
          "(tutorial 03 prints BERT-base's)")


if __name__ == "__main__":
    main()
