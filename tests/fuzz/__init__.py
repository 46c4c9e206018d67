"""A differential fuzzer: seeded random ONNX graphs built by tvm_ascend and compared with
onnxruntime (``generate.py`` makes the cases, ``run.py`` runs and classifies them; ``python -m
tests.fuzz --help`` from the repository root)."""
