"""An ONNX backend node test built by TVM alone (no tvm-ascend): is a failure TVM's or ours?

The same model is imported with ``tvm.relax.frontend.onnx.from_onnx`` at the static shapes of
the test's own inputs, legalized, compiled with ``tvm.compile(mod, target="llvm")`` and run on
``relax.VirtualMachine(ex, tvm.cpu())``; its outputs are compared with ONNX's expected ones by
the node table's ``compare`` (same tolerances). A test that fails here the way it fails in the
node table is TVM's limit (``tools/onnx_node_limits.py`` records it); one that passes here but
fails through ``tvm_ascend.build`` is a tvm-ascend bug.

Run from the repository root (``--ascend`` also builds the test through tvm-ascend, alone)::

    python -m tools.onnx_tvm_reference test_slice test_cast_FLOAT_to_INT4 --ascend

Example
-------
>>> from tools.onnx_tvm_reference import tvm_reference      # doctest: +SKIP
>>> from tools.onnx_node_table import node_cases            # doctest: +SKIP
>>> tvm_reference(node_cases()["test_relu"])                # doctest: +SKIP
{'test': 'test_relu', 'result': 'passed', 'reason': ''}
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from . import onnx_node_table as table


def _static_shapes(case: dict) -> dict:
    """``{graph input name: shape}`` from the test's own input arrays (initializers skipped)."""
    initializers = {init.name for init in case["model"].graph.initializer}
    names = [v.name for v in case["model"].graph.input if v.name not in initializers]
    inputs = [table._as_array(v) for v in case["inputs"]]  # noqa: SLF001 - same conversion
    if len(names) != len(inputs):
        raise ValueError(f"{case['name']}: {len(inputs)} input arrays for graph inputs {names}")
    return {name: list(array.shape) for name, array in zip(names, inputs)}


def _to_numpy(value) -> list:
    """The VM's result (a tensor, or a tuple of them, nested) as a flat list of numpy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    if isinstance(value, (int, float, bool, np.generic)):
        return [np.asarray(value)]
    return [array for item in value for array in _to_numpy(item)]


def run_tvm_alone(case: dict) -> list:
    """Outputs of ``case`` built and run by TVM alone on the CPU (llvm); raises what TVM raises.

    Example
    -------
    >>> [o.shape for o in run_tvm_alone(node_cases()["test_relu"])]   # doctest: +SKIP
    [(3, 4, 5)]
    """
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    # the importer takes each input's dtype from the graph, as tvm-ascend's frontend does
    mod = from_onnx(case["model"], shape_dict=_static_shapes(case))
    mod = relax.transform.DecomposeOpsForInference()(mod)
    mod = relax.transform.LegalizeOps()(mod)
    executable = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(table._as_array(v)) for v in case["inputs"]]  # noqa: SLF001
    return _to_numpy(vm["main"](*args))


def tvm_reference(case: dict) -> dict:
    """``{"test", "result": "passed" | "failed", "reason"}`` of ``case`` built by TVM alone;
    the reason is the node table's mismatch text or the first line of TVM's error."""
    try:
        mismatch = table._mismatch(run_tvm_alone(case), case["outputs"])  # noqa: SLF001
    except Exception as err:  # noqa: BLE001 - TVM's failure is the answer sought
        mismatch = table._first_line(err)  # noqa: SLF001
    return {"test": case["name"], "result": "failed" if mismatch else "passed",
            "reason": mismatch}


def verdict(reference: dict, ascend: dict) -> str:
    """Whose failure ``ascend`` (a node-table row) is, given TVM alone's ``reference`` row."""
    if ascend["result"] not in ("failed", "known_limit"):
        return f"tvm-ascend {ascend['result']}"
    if reference["result"] == "failed":
        return "TVM's limit (TVM alone fails too)"
    return "tvm-ascend bug (TVM alone passes)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.onnx_tvm_reference",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="ONNX node test names")
    parser.add_argument("--ascend", action="store_true",
                        help="also build each test alone through tvm_ascend.build and say "
                             "whose failure it is")
    parser.add_argument("--json", action="store_true", help="one JSON row per test")
    args = parser.parse_args(argv)
    cases = table.node_cases()
    unknown = sorted(set(args.tests) - set(cases))
    if unknown:
        parser.error(f"unknown node tests: {', '.join(unknown[:5])}")
    for name in args.tests:
        row = tvm_reference(cases[name])
        if args.ascend:
            ascend = table.run_case(cases[name])
            row.update(ascend_result=ascend["result"], ascend_reason=ascend["reason"],
                       verdict=verdict(row, ascend))
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{name}: TVM alone {row['result']} {row['reason']}")
            if args.ascend:
                print(f"  tvm-ascend {row['ascend_result']} {row['ascend_reason']}\n"
                      f"  -> {row['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
