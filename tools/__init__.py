"""Developer scripts, run from the repository root and never shipped in the wheel:
``kernel_diff.py`` (did a change alter any printed kernel), and the ONNX node-test table
(``python -m tools.onnx_node_table --write`` writes ``tests/ONNX_NODE_TESTS.md``, with its known
limits in ``onnx_node_limits.py`` and the TVM-alone reference in ``onnx_tvm_reference.py``).

A package (not a namespace folder) so that ``from tools import onnx_node_table`` in the tests
finds this folder even where some installed distribution ships a top-level ``tools`` package.
"""
