"""Every numbered tutorial (tutorials/NN_*.py) runs at its reduced size and prints its
side-by-side against ATC; tutorials/README.md lists each one; the real-ATC probe they print.

Each tutorial runs in a subprocess, as a user runs it (``python tutorials/NN_x.py``), with
``TVM_ASCEND_TUTORIAL_SIZE=small``. Measured on the 2-core development machine at load ~10
(cold compile cache), in this test: 02 91 s, 03 79 s wall (02 alone: 20 s CPU, 03: 35 s);
at load ~4, cold, 04 41 s, 05 70 s, 06 35 s wall (the three together: 135 s CPU, of which
~25 s is the emulator's one-time compile options of a fresh cache).
"""
from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys

import pytest

from tvm_ascend.compare import find_atc

ROOT = pathlib.Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))


def test_tutorials_are_numbered_and_listed():
    """The README lists every numbered tutorial (and the quickstart) by file name."""
    numbers = [p.name[:2] for p in TUTORIALS]
    assert {"02", "03", "04", "05", "06"} <= set(numbers) and len(set(numbers)) == len(numbers), \
        numbers
    readme = (ROOT / "tutorials" / "README.md").read_text(encoding="utf-8")
    for path in TUTORIALS + [ROOT / "tutorials" / "quickstart.py"]:
        assert f"`{path.name}`" in readme, path.name


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs_small(path, tmp_path):
    """Exit 0, the ATC-style row, the real-atc line and only labelled estimates."""
    env = dict(os.environ, TVM_ASCEND_TUTORIAL_SIZE="small",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               # the tutorials build one model several times unpatched: reusing whole builds
               # is safe here (conftest turns it off for in-process tests that patch)
               TVM_ASCEND_BUILD_CACHE="1")
    env.pop("ASCEND_HOME_PATH", None)
    env.pop("ASCEND_TOOLKIT_HOME", None)
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "ATC-style" in out
    expected = find_atc(env)[1]
    assert (expected or "real atc: found at") in out
    # every line quoting microseconds says they are estimates (that line or the table's note)
    assert "ESTIMATE" in out
    assert "(small)" in out


def test_find_atc_on_path_and_under_toolkit(tmp_path):
    """PATH first, then the toolkit root's bin/ or compiler/bin/; absent: one line why."""
    def fake(where):
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text("#!/bin/sh\n")
        where.chmod(where.stat().st_mode | stat.S_IXUSR)
        return str(where)

    on_path = fake(tmp_path / "path" / "atc")
    assert find_atc({"PATH": str(tmp_path / "path")}) == (on_path, "")
    toolkit = tmp_path / "toolkit"
    under = fake(toolkit / "compiler" / "bin" / "atc")
    assert find_atc({"PATH": "", "ASCEND_HOME_PATH": str(toolkit)}) == (under, "")
    path, reason = find_atc({"PATH": "", "ASCEND_HOME_PATH": str(tmp_path / "empty")})
    assert path is None and reason.startswith("real atc: not installed") and "\n" not in reason
    assert "empty" in reason
