"""The developer tools in tools/: the kernel diff's dump honours --only, and the cold-compile
measurement reports a build's wall and CPU times in a fresh cache."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_kernel_diff_dump_builds_only_the_cases_asked_for(tmp_path):
    models = tmp_path / "models"
    subprocess.run([sys.executable, "tools/kernel_diff.py", "models", "--out", str(models)],
                   cwd=ROOT, check=True, capture_output=True)
    cases = json.loads((models / "cases.json").read_text())
    assert any(c["name"] == "demo__off__Ascend910B1" for c in cases) and len(cases) > 2
    out = tmp_path / "dump"
    subprocess.run([sys.executable, "tools/kernel_diff.py", "dump", "--cases",
                    str(models / "cases.json"), "--out", str(out), "--only",
                    "demo__off__Ascend910B1"], cwd=ROOT, check=True, capture_output=True)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["demo__off__Ascend910B1"]
    assert list((out / "demo__off__Ascend910B1").glob("*.cpp"))


def test_cold_compile_measures_one_build(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    from make_demo import make_demo_model

    import onnx

    model = tmp_path / "demo.onnx"
    onnx.save(make_demo_model(), str(model))
    out = subprocess.run([sys.executable, "tools/cold_compile.py", "measure", "--model",
                          str(model)], cwd=ROOT, check=True, capture_output=True, text=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["npu_kernels"] == 2
    assert row["build_s"] > 0 and row["export_s"] > 0 and row["gxx_cpu_s"] > 0
