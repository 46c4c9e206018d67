"""Quickstart: compile the demo model, see what was fused and why, run it, export it.

    python tutorials/quickstart.py

ATC users: this is ``atc --model=demo.onnx --framework=5 --soc_version=Ascend910B1
--output=demo``, with the fusion decisions written out instead of hidden.
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

import tvm_ascend

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
from make_demo import make_demo_model  # noqa: E402


def main() -> None:
    model = make_demo_model()
    lib = tvm_ascend.build(model, target="ascend/910b1")

    report = lib.fusion_report()
    print(f"{report['ops']} ops -> {report['npu_kernels']} NPU kernels, "
          f"{report['host_groups']} host group(s)")
    for group in report["groups"]:
        where = group["kernel"] if group["on_npu"] else "host"
        ops = ", ".join(op["op"].replace("relax.", "") for op in group["ops"])
        print(f"  [{where}] {ops}\n      why: {group['reason']}")

    x = np.random.default_rng(0).standard_normal((2, 64, 100)).astype(np.float32)
    (out,) = lib.run({"x": x})
    print("output", out.shape, out.dtype)
    for launch in lib.profile():
        print(f"  {launch['kernel']}: {launch['block_dim']} cores, "
              f"GM read {launch['gm_read_bytes']} B, written {launch['gm_write_bytes']} B")

    name, source = next(iter(lib.kernel_sources().items()))
    print(f"\nfirst lines of {name}.cpp:\n" + "\n".join(source.splitlines()[:6]))
    path = lib.export_library("demo.so")
    print(f"\nexported {path}; load it anywhere with tvm_ascend.load({path!r})")
    print(json.dumps({"npu_kernels": report["npu_kernels"]}))


if __name__ == "__main__":
    main()
