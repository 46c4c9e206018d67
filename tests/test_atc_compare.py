"""``compare --atc``: a recorded ATC run read and put beside a tvm-ascend build; the run path
through a fake ``atc`` that writes the recording (its argv, its failure, its timeout)."""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import onnx
import pytest

import tvm_ascend
from onnx_models import atc_recording_model
from tvm_ascend.atc_compare import format_side_by_side, side_by_side
from tvm_ascend.atc_run import run_atc
from tvm_ascend.compare import atc_side
from tvm_ascend.errors import AscendError, ToolchainError
from tvm_ascend.partition.atc_result import read_atc_output, read_fusion_result, read_graph_dump
from tvm_ascend.partition.report import fusion_report

RECORDING = Path(__file__).resolve().parent / "fixtures" / "atc_recording" / "matmul_softmax"
CONFIG = tvm_ascend.CompileConfig(input_shape={"x": (32, 64)})


@pytest.fixture(scope="module")
def model():
    return atc_recording_model()


def _report(model, config):
    """The fusion report of ``config``'s partition, without compiling the kernels (the
    side-by-side reads only the groups, their reasons and the refusals)."""
    return fusion_report(tvm_ascend.partition_for_ascend(model, config), {}, config, 0)


@pytest.fixture(scope="module")
def report(model):
    return _report(model, CONFIG)


def test_the_recording_is_read_as_atc_wrote_it():
    run = read_atc_output(RECORDING)
    assert run.rules == {
        "graph_fusion": {"MatMulBiasAddFusionPass": {"match_times": 1, "effect_times": 1,
                                                     "repository_hit_times": 0}},
        "ub_fusion": {name: {"match_times": 1, "effect_times": 1, "repository_hit_times": 0}
                      for name in ("TbeEltwiseFusionPass", "TbeFixPipeFusionPass")}}
    assert run.stage == "PreRunAfterBuild"
    # plumbing (Data, Const, NetOutput) left out; each op with the ONNX ops it stands for
    assert [(op.name, op.type, op.original_names) for op in run.ops] == [
        ("matmulrelu", "MatMulV2", ["matmul", "add_bias", "relu"]),
        ("softmax", "SoftmaxV2", ["softmax"]), ("scaleshift", "Sub", ["scale", "shift"])]
    assert run.ops[0].passes == ["MatMulBiasAddFusionPass", "TbeFixPipeFusionPass"]


def test_scope_members_join_and_the_last_dump_is_taken(tmp_path):
    """Nodes of one UB fusion_scope not yet merged are one op; an ATC-inserted op keeps its own
    name; of several dumps the highest index (the last graph) is read."""
    def node(name, kind, scope=None):
        attr = f'attribute {{ name: "fusion_scope" i: {scope} type: INT }}' if scope else ""
        return f'node {{ name: "{name}" op_type: "ge:{kind}" {attr} }}'
    text = "graph { " + " ".join([node("x", "Data"), node("a", "Add", 7), node("r", "Relu", 7),
                                  node("trans_TransData_1", "TransData")]) + " }"
    (tmp_path / "dumps").mkdir()
    (tmp_path / "dumps" / "ge_onnx_00003_graph_0_PreRunAfterBuild.pbtxt").write_text(text)
    (tmp_path / "dumps" / "ge_onnx_00001_graph_0_PreRunBegin.pbtxt").write_text("graph { }")
    (tmp_path / "fusion_result.json").write_text(json.dumps(
        {"session_and_graph_id_0_0": {"ub_fusion": {"P": {"match_times": "2",
                                                          "effect_times": "1"}}},
         "session_and_graph_id_0_1": {"ub_fusion": {"P": {"match_times": "1",
                                                          "effect_times": "1"}}}}))
    run = read_atc_output(tmp_path)
    assert [(op.name, op.original_names) for op in run.ops] == [
        ("ar", ["a", "r"]), ("trans_TransData_1", ["trans_TransData_1"])]
    assert run.rules["ub_fusion"]["P"]["match_times"] == 3  # summed over the graphs


def test_malformed_atc_files_are_named(tmp_path):
    bad = tmp_path / "fusion_result.json"
    bad.write_text(json.dumps({"session_and_graph_id_0_0": {"ub_fusion": {
        "TbeEltwiseFusionPass": {"match_times": "many", "effect_times": "1"}}}}))
    with pytest.raises(AscendError, match=r"fusion_result.json: .*TbeEltwiseFusionPass"
                                          r"\.match_times is 'many'"):
        read_fusion_result(bad)
    dump = tmp_path / "ge_onnx_00001_graph_0_Build.pbtxt"
    dump.write_text("graph { node { name: ")
    with pytest.raises(AscendError, match="cannot read ATC's graph dump .*ge_onnx_00001"):
        read_graph_dump(dump)
    (tmp_path / "empty").mkdir()
    with pytest.raises(AscendError, match="no fusion_result.json in .*empty"):
        read_atc_output(tmp_path / "empty")


def test_side_by_side_per_rule_and_per_op(model, report):
    table = side_by_side(read_atc_output(RECORDING), report, model)
    rules = {(row["atc_name"], row["rule"]): row for row in table["rules"]}
    # ATC's MatMul pass is our MatMulEpilogueFusion: one group formed on both sides
    matmul = rules[("MatMulBiasAddFusionPass", "MatMulEpilogueFusion")]
    assert matmul["atc"] == {"match_times": 1, "effect_times": 1}
    assert matmul["ours"] == {"match_times": 1, "effect_times": 1}
    # ATC's UB passes have no rule of ours under those names; our softmax rule is not in ATC's
    assert rules[("TbeEltwiseFusionPass", None)]["ours"] is None
    assert not any(row.get("narrower") for row in table["rules"])
    softmax = rules[(None, "SoftmaxFusion")]
    assert softmax["atc"] is None and softmax["atc_names"] == ["SoftmaxFusionPass"]
    # per op: the MatMul group is the same; the Softmax, Mul and Sub are grouped differently
    ops = {row["op"]: row for row in table["ops"]}
    assert [name for name, row in ops.items() if row["same"]] == ["matmul", "add_bias", "relu"]
    assert ops["matmul"]["atc_op"] == "matmulrelu"
    assert ops["scale"]["atc_members"] == ["scale", "shift"]
    assert ops["scale"]["members"] == ["softmax", "scale", "shift"]
    group = next(g for g in report["groups"] if "softmax" in g["nodes"])
    assert len(ops["softmax"]["why"]) == 1
    assert ops["softmax"]["why"][0].startswith("tvm-ascend fuses it with scale, shift in "
                                               f"{group['id']} (SoftmaxFusion")
    assert group["reason"] in ops["softmax"]["why"][0]
    text = format_side_by_side(table)
    assert "3 of 6 ONNX op(s) grouped alike" in text
    assert "tvm-ascend 2 kernel(s) (fusion level conservative, rule set tvm_ascend)" in text
    assert "scaleshift (Sub, TbeEltwiseFusionPass) = [scale, shift]" in text
    assert "MatMulBiasAddFusionPass" in text and "(no tvm-ascend rule of this name)" in text


def test_where_atc_fuses_and_we_do_not_our_refusal_is_the_reason(model):
    off = _report(model, CONFIG.replace(fusion_level="off"))
    table = side_by_side(read_atc_output(RECORDING), off, model)
    ops = {row["op"]: row for row in table["ops"]}
    assert table["ops_alike"] == 1  # the Softmax is alone on both sides
    assert ops["softmax"]["same"]
    why = ops["scale"]["why"]
    assert len(why) == 1 and why[0].startswith("ATC fuses it with shift (G")
    assert "fusion is off" in why[0]
    # matmul and relu are two kernels apart here: no edge between them, said so
    assert any("not adjacent" in w for w in ops["matmul"]["why"])


def _fake_atc(folder: Path, body: str) -> Path:
    """An ``atc`` script in ``folder``/bin that logs its argv, its folder and the dump
    variables to $FAKE_ATC_LOG, then runs ``body``."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "atc"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do echo "arg $a" >> "$FAKE_ATC_LOG"; done\n'
        'echo "cwd $(pwd)" >> "$FAKE_ATC_LOG"\n'
        'echo "env $DUMP_GE_GRAPH $DUMP_GRAPH_LEVEL $DUMP_GRAPH_FORMAT $DUMP_GRAPH_PATH '
        '${ASCEND_WORK_PATH:-unset}" >> "$FAKE_ATC_LOG"\n' + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


WRITE_RECORDING = (
    'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n'
    'cp "$RECORDING/fusion_result.json" .\n'
    'mkdir -p "$DUMP_GRAPH_PATH/pid_1"\n'
    'cp "$RECORDING"/ge_onnx_*.pbtxt "$DUMP_GRAPH_PATH/pid_1/"\n'
    ': > "$out.om"\n')


def _environ(tmp_path: Path) -> dict:
    return dict(os.environ, FAKE_ATC_LOG=str(tmp_path / "atc.log"), RECORDING=str(RECORDING),
                ASCEND_WORK_PATH=str(tmp_path / "work"))


def test_real_atc_runs_with_our_flags_in_a_folder_that_is_removed(tmp_path, model):
    switch = tmp_path / "switch.cfg"
    switch.write_text("TbeEltwiseFusionPass:off\n")
    atc = _fake_atc(tmp_path, WRITE_RECORDING)
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    config = CONFIG.replace(fusion_switch_file=str(switch))
    run = run_atc(model, config, str(atc), environ=_environ(tmp_path), temp_root=str(temp_root))
    assert [op.name for op in run.ops] == ["matmulrelu", "softmax", "scaleshift"]
    log = (tmp_path / "atc.log").read_text().splitlines()
    args = [line[4:] for line in log if line.startswith("arg ")]
    folder = next(line[4:] for line in log if line.startswith("cwd "))
    assert args == ["--framework=5", f"--model={folder}/model.onnx", f"--output={folder}/model",
                    "--soc_version=Ascend910B1", "--precision_mode=must_keep_origin_dtype",
                    "--export_compile_stat=1", "--input_shape=x:32,64",
                    f"--fusion_switch_file={switch}"]
    env = next(line for line in log if line.startswith("env ")).split()
    assert env[1:] == ["1", "3", "onnx", f"{folder}/ge_graphs", "unset"]
    assert Path(folder).parent == temp_root and not any(temp_root.iterdir())


def test_a_failing_atc_is_a_clear_error_and_leaves_nothing(tmp_path, model):
    atc = _fake_atc(tmp_path, 'echo "E10001: Value [Ascend000] for --soc_version is invalid" >&2\n'
                              "exit 1\n")
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    with pytest.raises(ToolchainError) as err:
        run_atc(model, CONFIG, str(atc), environ=_environ(tmp_path), temp_root=str(temp_root))
    text = str(err.value)
    assert "real atc failed with exit status 1" in text
    assert f"command: {atc} --framework=5" in text and "E10001: Value [Ascend000]" in text
    assert not any(temp_root.iterdir())


def test_a_hanging_atc_is_stopped_at_its_timeout(tmp_path, model):
    atc = _fake_atc(tmp_path, "sleep 30\n")  # a child of the script: the whole session goes
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    start = time.monotonic()
    with pytest.raises(ToolchainError, match=r"ran past its timeout of 0.5 s") as err:
        run_atc(model, CONFIG, str(atc), timeout_s=0.5, environ=_environ(tmp_path),
                temp_root=str(temp_root))
    assert time.monotonic() - start < 5
    assert f"command: {atc}" in str(err.value)
    assert not any(temp_root.iterdir())


def test_an_interrupt_stops_atc_and_leaves_nothing(tmp_path, model):
    """Ctrl-C while ATC builds: ATC and what it started are stopped, the folder removed, and
    the interrupt goes on to the caller."""
    atc = _fake_atc(tmp_path, 'echo $$ > "$FAKE_ATC_LOG.pid"\nkill -INT $PPID\nsleep 30\n')
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_atc(model, CONFIG, str(atc), environ=_environ(tmp_path), temp_root=str(temp_root))
    assert time.monotonic() - start < 5
    assert not any(temp_root.iterdir())
    pid = int((tmp_path / "atc.log.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the script is gone (killed and reaped)


def test_atc_on_path_is_found_and_run(tmp_path, monkeypatch, model, report):
    _fake_atc(tmp_path, WRITE_RECORDING)
    for key, value in _environ(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    table = atc_side(str(path), CONFIG, report=report)
    assert table["ops_alike"] == 3 and table["tvm_ascend"]["kernels"] == len(report["groups"])
    # a model file goes to atc as it is (not re-serialized: external weights stay valid)
    assert f"arg --model={path}" in (tmp_path / "atc.log").read_text().splitlines()


def _without_atc(monkeypatch) -> None:
    """PATH as the build needs it, less any folder with an atc; no toolkit root."""
    kept = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "atc").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)


def test_without_atc_one_line_and_no_build(monkeypatch, model):
    import tvm_ascend.pipeline
    from tvm_ascend.compare import find_atc

    _without_atc(monkeypatch)

    def no_build(*args, **kwargs):
        raise AssertionError("built a model for a side-by-side that has no ATC side")
    monkeypatch.setattr(tvm_ascend.pipeline, "build", no_build)
    line = atc_side(model, CONFIG)
    assert line == find_atc()[1] and line.startswith("real atc: not installed")
    assert "\n" not in line


@pytest.mark.slow  # two builds of the model with its kernels compiled (about 20 s)
def test_compare_command_with_a_recorded_atc_run(tmp_path, capsys, model):
    from tvm_ascend.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out = tmp_path / "compare.json"
    assert main(["compare", "--model", str(path), "--input_shape", "x:32,64", "--variants",
                 "conservative", "--no_groups", "--atc", str(RECORDING), "--json",
                 str(out)]) == 0
    text = capsys.readouterr().out
    assert "side by side with real ATC" in text and "3 of 6 ONNX op(s) grouped alike" in text
    document = json.loads(out.read_text())
    assert document["atc"]["ops_alike"] == 3
    assert document["variants"][0]["name"] == "conservative"


@pytest.mark.slow  # a build of the model with its kernels compiled
def test_compare_command_without_atc_says_so_in_one_line(tmp_path, capsys, monkeypatch, model):
    from tvm_ascend.cli import main
    from tvm_ascend.compare import find_atc

    _without_atc(monkeypatch)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["compare", "--model", str(path), "--variants", "conservative", "--no_groups",
                 "--atc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    reason = find_atc()[1]
    assert reason.startswith("real atc: not installed") and lines[-1] == reason
    assert sum("real atc" in line for line in lines) == 1
    assert not any("side by side" in line for line in lines)


def test_a_narrower_atc_pass_is_said_to_be_one_case_of_our_rule(model, report):
    """ATC's ConvConcatFusionPass fuses only a Conv's output into a Concat; our
    DataMovementFusion, which carries that name for switch files, is any data move: the row
    says the two counts are of different things."""
    from tvm_ascend.partition.atc_result import AtcRun

    run = AtcRun({"ub_fusion": {"ConvConcatFusionPass": {"match_times": 1, "effect_times": 1,
                                                         "repository_hit_times": 0}}},
                 [], "fusion_result.json", "ge_onnx_00001_graph_0_Build.pbtxt")
    table = side_by_side(run, report, model)
    (row,) = [r for r in table["rules"] if r["atc_name"] == "ConvConcatFusionPass"]
    assert row["rule"] == "DataMovementFusion" and row["narrower"]
    assert "ConvConcatFusionPass" in format_side_by_side(table)
    assert "one case of this rule" in format_side_by_side(table)
    # no ATC op holds any ONNX op here: each is said to be missing from ATC's graph
    assert all(not row["same"] for row in table["ops"])
    assert "not in ATC's graph" in format_side_by_side(table)
