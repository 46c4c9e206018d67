"""Export the dynamic-sequence corpus that tests/test_symbolic_dims.py builds.

The corpus's tiny BERT and GPT-2 (tests/corpus/export_corpus.py: 2 layers, hidden 64, 4 heads,
vocabulary 96, 32 positions, seeded random weights), written by PyTorch's dynamo exporter
(``torch.onnx.export(..., dynamo=True, dynamic_shapes=...)``) with the sequence dimension
dynamic in 2~32 (torch.export's ``Dim("seq", min=2, max=32)``; it special-cases sizes 0 and 1,
so 2 is its smallest range start) and the batch static (2). The exporter writes the sequence
length as the symbol ``s`` and computes every shape that depends on it at run time: the
``Shape -> Gather -> Concat -> Reshape`` chains that tvm_ascend/frontend/onnx_symbolic.py
resolves.

Only this script needs torch, transformers and onnxscript; the tests read the committed files
and ``MANIFEST.json`` (each file's model, inputs with the symbolic dimension and its range,
the versions that wrote it and its sha256). Run from the repository root:

    python tests/corpus/dynamic/export_dynamic.py
"""
from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import onnx
import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from export_corpus import SEED, _dtype_name, _without_stack_traces, build_model  # noqa: E402

SEQ_RANGE = (2, 32)  # the tiny configs have 32 positions
OPSET = 18
MODELS = ("bert", "gpt2")


def export_dynamic(name: str) -> dict:
    """Export ``name`` with a dynamic sequence dimension into this folder; its manifest row."""
    model, args, input_names, output_names, hints = build_model(name)
    model.eval()
    seq = torch.export.Dim("seq", min=SEQ_RANGE[0], max=SEQ_RANGE[1])
    dynamic = (tuple({1: seq} for _ in args),)  # forward(*args): one element, a tuple
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, dynamo=True, opset_version=OPSET,
                                    input_names=input_names, output_names=output_names,
                                    dynamic_shapes=dynamic, external_data=False,
                                    verbose=False)
    proto = _without_stack_traces(program.model_proto)
    onnx.checker.check_model(proto)
    path = HERE / f"{name}_dynamo_op{OPSET}_fp32_dynseq.onnx"
    onnx.save(proto, str(path), save_as_external_data=False)
    data = path.read_bytes()
    inputs = []
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        inputs.append({"name": value.name,
                       "shape": [d.dim_value if d.HasField("dim_value") else d.dim_param
                                 for d in dims],
                       "dtype": _dtype_name(value.type.tensor_type.elem_type),
                       "sample": hints.get(value.name, {"kind": "normal"})})
    return {"file": path.name, "model": name, "exporter": "dynamo", "opset": OPSET,
            "dtype": "float32", "inputs": inputs, "range": list(SEQ_RANGE),
            "outputs": [o.name for o in proto.graph.output], "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def main() -> int:
    rows = [export_dynamic(name) for name in MODELS]
    for row in rows:
        print(f"{row['file']}: {row['bytes']} bytes, inputs "
              f"{[(i['name'], i['shape']) for i in row['inputs']]}")
    manifest = {"torch": torch.__version__, "transformers": transformers.__version__,
                "onnx": onnx.__version__, "seed": SEED, "files": rows}
    (HERE / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
