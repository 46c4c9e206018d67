"""Export the corpus of real PyTorch exports that tests/test_corpus.py builds.

Small random-weight (seeded) versions of BERT, GPT-2, ViT, a LLaMA-style decoder, a T5 encoder
and a Whisper encoder (transformers' own classes with tiny configs), a ResNet and a
MobileNetV2-style network (written here in torch.nn: torchvision does not install beside the
CPU torch wheel this project's machines have), each written by both of PyTorch's ONNX exporters
(``torch.onnx.export(..., dynamo=False)``, TorchScript, and ``dynamo=True``), at opsets 17 and
18, in float32 and for some models float16. Every file keeps its weights inside (no external
data); ``MANIFEST.json`` records each file's model, exporter, opset, dtype, inputs, the torch and
transformers versions that wrote it and its sha256.

Only this script needs torch, transformers and onnxscript (for the dynamo exporter); the tests
read the committed files. Run from the repository root:

    python tests/corpus/export_corpus.py              # the committed corpus (a few MB)
    python tests/corpus/export_corpus.py --full OUT   # full-size BERT-base, GPT-2, ViT-base,
                                                      # ResNet-50 into OUT (not committed)

A combination the exporter refuses is recorded in the manifest's ``"failed"`` list with the
exporter's first error line, not silently left out.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import warnings
from pathlib import Path

import onnx
import torch
import transformers
from torch import nn

HERE = Path(__file__).resolve().parent
SEED = 0
VOCAB = 96
SEQ = 16
BATCH = 2
TEXT = ("input_ids", "attention_mask")

# (model, exporter, opset, dtype): each model with both exporters; each exporter at both
# opsets; float16 for BERT, GPT-2, ResNet and LLaMA with both exporters. The dynamo exporter
# writes opset 18 and converts down: BERT, ViT and Whisper convert to 17; GPT-2's conversion
# writes an invalid model and ResNet's stays at 18 (both kept here, so the manifest's
# "failed" list records them); LLaMA, T5 and MobileNet also stay at 18 (seen with torch 2.13).
MATRIX = [
    ("bert", "torchscript", 17, "float32"), ("bert", "dynamo", 18, "float32"),
    ("bert", "torchscript", 18, "float16"), ("bert", "dynamo", 17, "float16"),
    ("gpt2", "torchscript", 18, "float32"), ("gpt2", "dynamo", 18, "float32"),
    ("gpt2", "dynamo", 17, "float32"),
    ("gpt2", "torchscript", 17, "float16"), ("gpt2", "dynamo", 18, "float16"),
    ("vit", "torchscript", 18, "float32"), ("vit", "dynamo", 17, "float32"),
    ("resnet", "torchscript", 18, "float32"), ("resnet", "dynamo", 18, "float32"),
    ("resnet", "dynamo", 17, "float32"),
    ("resnet", "torchscript", 17, "float16"), ("resnet", "dynamo", 18, "float16"),
    ("llama", "torchscript", 17, "float32"), ("llama", "dynamo", 18, "float32"),
    ("llama", "torchscript", 18, "float16"), ("llama", "dynamo", 18, "float16"),
    ("t5_encoder", "torchscript", 17, "float32"), ("t5_encoder", "dynamo", 18, "float32"),
    ("whisper_encoder", "torchscript", 18, "float32"),
    ("whisper_encoder", "dynamo", 17, "float32"),
    ("mobilenet", "torchscript", 17, "float32"), ("mobilenet", "dynamo", 18, "float32"),
]


# ---- the CNNs, in torch.nn ------------------------------------------------------------------
class BasicBlock(nn.Module):
    """ResNet-18/34's block: two 3x3 convolutions with BatchNorm, a projected shortcut."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = _shortcut(cin, cout, stride)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


def _shortcut(cin: int, cout: int, stride: int):
    """The residual branch's projection (1x1 conv + BN) where the block changes shape."""
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (stride here, as torchvision's v1.5), 1x1 expand."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = _shortcut(cin, cout, stride)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """torchvision's ResNet layout: 7x7 stem, max pool, stages of blocks, average pool, fc."""

    def __init__(self, block, stages, widths, classes: int, stem: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, stem, 7, 2, 3, bias=False), nn.BatchNorm2d(stem),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], stem
        for index, (count, width) in enumerate(zip(stages, widths)):
            for j in range(count):
                layers.append(block(cin, width, 2 if (j == 0 and index > 0) else 1))
                cin = width * (4 if block is Bottleneck else 1)
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 linear project."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNet(nn.Module):
    """A MobileNetV2-shaped network: stem, inverted residuals (with and without the shortcut),
    a 1x1 head, average pool and a classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
            InvertedResidual(8, 8, 1, 1), InvertedResidual(8, 12, 2, 4),
            InvertedResidual(12, 12, 1, 4), InvertedResidual(12, 16, 2, 4),
            nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6())
        self.classifier = nn.Linear(32, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(
            self.features(x), 1), 1))


def _random_batchnorm_stats(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial statistics and affine parameters (fresh ones are the
    identity, which would hide a wrong fold)."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)


# ---- the transformers, with tiny configs ----------------------------------------------------
class HiddenStates(nn.Module):
    """A transformers model called positionally, returning its tensors as a tuple (both
    exporters take positional tensors and tuple outputs most reliably)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], keys: tuple[str, ...],
                 **fixed):
        super().__init__()
        self.model, self.names, self.keys, self.fixed = model, names, keys, fixed

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=True, **self.fixed)
        return tuple(out[key] for key in self.keys)


def _text_inputs(batch: int, seq: int, vocab: int):
    ids = torch.randint(0, vocab, (batch, seq), dtype=torch.long)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, seq - 3:] = 0  # right padding on the last row: no row is masked out entirely
    return ids, mask


def build_model(name: str, full: bool = False):
    """(module, example inputs, input names, output names, sample-input hints) for ``name``;
    ``full`` gives the published sizes (BERT-base, GPT-2 small, ViT-base, ResNet-50)."""
    torch.manual_seed(SEED)
    tiny = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128)
    seq = 128 if full else SEQ
    batch = 1 if full else BATCH
    eager = dict(attn_implementation="eager")
    if name in ("bert", "gpt2", "llama", "t5_encoder"):
        vocab = {"bert": 30522, "gpt2": 50257}.get(name, VOCAB) if full else VOCAB
        if name == "bert":
            config = transformers.BertConfig(**({} if full else dict(
                tiny, max_position_embeddings=32)), **eager)
            model = HiddenStates(transformers.BertModel(config), TEXT,
                                 ("last_hidden_state", "pooler_output"))
        elif name == "gpt2":
            config = transformers.GPT2Config(**({} if full else dict(
                vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=32)), **eager)
            model = HiddenStates(transformers.GPT2Model(config), TEXT, ("last_hidden_state",),
                                 use_cache=False)
        elif name == "llama":
            config = transformers.LlamaConfig(
                **dict(tiny, num_key_value_heads=2, max_position_embeddings=64,
                       rms_norm_eps=1e-6), **eager)
            model = HiddenStates(transformers.LlamaModel(config), TEXT, ("last_hidden_state",),
                                 use_cache=False)
        else:
            config = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128,
                                           num_layers=2, num_heads=4, **eager)
            model = HiddenStates(transformers.T5EncoderModel(config), TEXT,
                                 ("last_hidden_state",))
        ids, mask = _text_inputs(batch, seq, vocab)
        hints = {"input_ids": {"kind": "ids", "high": vocab},
                 "attention_mask": {"kind": "mask", "padding": 3}}
        return (model, (ids, mask), list(TEXT),
                list(model.keys), hints)
    if name == "vit":
        config = transformers.ViTConfig(**({} if full else dict(
            tiny, image_size=32, patch_size=8, num_channels=3)), **eager)
        model = HiddenStates(transformers.ViTModel(config), ("pixel_values",),
                             ("last_hidden_state", "pooler_output"))
        size = 224 if full else 32
        pixels = torch.randn(1, 3, size, size)
        return model, (pixels,), ["pixel_values"], list(model.keys), {
            "pixel_values": {"kind": "normal"}}
    if name == "whisper_encoder":
        config = transformers.WhisperConfig(
            num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_layers=1, decoder_attention_heads=4,
            decoder_ffn_dim=128, max_source_positions=16, vocab_size=VOCAB, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **eager)
        model = HiddenStates(transformers.WhisperModel(config).get_encoder(),
                             ("input_features",), ("last_hidden_state",))
        features = torch.randn(1, 16, 32)
        return model, (features,), ["input_features"], list(model.keys), {
            "input_features": {"kind": "normal"}}
    if name == "resnet":
        if full:
            model = ResNet(Bottleneck, (3, 4, 6, 3), (64, 128, 256, 512), 1000, 64)
        else:
            model = ResNet(BasicBlock, (1, 1, 1), (8, 16, 32), 10, 8)
        size = 224 if full else 32
    elif name == "mobilenet":
        model, size = MobileNet(), 32
    else:
        raise ValueError(f"unknown model {name!r}")
    _random_batchnorm_stats(model)
    return model, (torch.randn(1, 3, size, size),), ["input"], ["output"], {
        "input": {"kind": "normal"}}


# ---- export -----------------------------------------------------------------------------------
def export(model: nn.Module, args, input_names, output_names, exporter: str, opset: int
           ) -> onnx.ModelProto:
    """The ONNX model ``exporter`` writes for ``model`` on ``args`` (weights inside)."""
    model.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            buffer = io.BytesIO()
            torch.onnx.export(model, args, buffer, dynamo=False, opset_version=opset,
                              input_names=input_names, output_names=output_names,
                              do_constant_folding=True)
            return onnx.load_from_string(buffer.getvalue())
        program = torch.onnx.export(model, args, dynamo=True, opset_version=opset,
                                    input_names=input_names, output_names=output_names,
                                    external_data=False, verbose=False)
        return _without_stack_traces(program.model_proto)


def _without_stack_traces(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Drop the dynamo exporter's per-node Python stack traces: they name this machine's
    paths (the file would differ on every machine) and are a third of a small file; the
    other metadata it writes (namespace, class hierarchy, FX node) stays."""
    for node in proto.graph.node:
        kept = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    return proto


def _dtype_name(elem_type: int) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name


def _inputs(model: onnx.ModelProto, hints: dict) -> list[dict]:
    """Name, static shape, dtype and sample-input hint of every graph input."""
    initializers = {t.name for t in model.graph.initializer}
    rows = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        rows.append({"name": value.name,
                     "shape": [d.dim_value for d in tensor.shape.dim],
                     "dtype": _dtype_name(tensor.elem_type),
                     "sample": hints.get(value.name, {"kind": "normal"})})
    return rows


def export_one(name: str, exporter: str, opset: int, dtype: str, out_dir: Path,
               full: bool = False) -> dict:
    """Export one corpus entry into ``out_dir``; its manifest row."""
    model, args, input_names, output_names, hints = build_model(name, full)
    if dtype == "float16":
        model = model.half()
        args = tuple(a.half() if a.is_floating_point() else a for a in args)
    proto = export(model, args, input_names, output_names, exporter, opset)
    onnx.checker.check_model(proto)
    written = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    if written != opset:
        raise ValueError(f"asked for opset {opset}, the {exporter} exporter wrote opset "
                         f"{written} (its version conversion failed)")
    short = {"float32": "fp32", "float16": "fp16"}[dtype]
    stem = "_full" if full else ""
    path = out_dir / f"{name}{stem}_{exporter}_op{opset}_{short}.onnx"
    onnx.save(proto, str(path), save_as_external_data=False)
    data = path.read_bytes()
    return {"file": path.name, "model": name, "exporter": exporter, "opset": opset,
            "dtype": dtype, "inputs": _inputs(proto, hints),
            "outputs": [o.name for o in proto.graph.output], "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def main(argv=None) -> int:
    """Write the corpus and its manifest (or, with ``--full``, the full-size models)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", metavar="OUT", help="export full-size models into OUT")
    parser.add_argument("--only", help="comma-separated model names to export")
    args = parser.parse_args(argv)
    out_dir = Path(args.full) if args.full else HERE
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.full:
        matrix = [(m, e, 18 if e == "dynamo" else 17, "float32")
                  for m in ("bert", "gpt2", "vit", "resnet") for e in ("torchscript", "dynamo")]
    else:
        matrix = MATRIX
    if args.only:
        keep = set(args.only.split(","))
        matrix = [row for row in matrix if row[0] in keep]
    rows, failed = [], []
    for name, exporter, opset, dtype in matrix:
        try:
            row = export_one(name, exporter, opset, dtype, out_dir, full=bool(args.full))
        except Exception as exc:  # noqa: BLE001 - an exporter's refusal is recorded
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            failed.append({"model": name, "exporter": exporter, "opset": opset,
                           "dtype": dtype, "error": f"{type(exc).__name__}: {first}"})
            print(f"FAILED {name} {exporter} op{opset} {dtype}: {failed[-1]['error']}",
                  file=sys.stderr)
            continue
        rows.append(row)
        print(f"{row['file']}: {row['bytes']} bytes")
    path = out_dir / ("MANIFEST_full.json" if args.full else "MANIFEST.json")
    if args.only and path.exists():  # keep the other models' rows, in the matrix's order
        earlier = json.loads(path.read_text())
        rows += [r for r in earlier["files"] if r["model"] not in keep]
        failed += [r for r in earlier["failed"] if r["model"] not in keep]
    order = {(m, e, o, d): i for i, (m, e, o, d) in enumerate(MATRIX)}
    position = lambda r: order.get((r["model"], r["exporter"], r["opset"], r["dtype"]), 0)  # noqa
    manifest = {"torch": torch.__version__, "transformers": transformers.__version__,
                "onnx": onnx.__version__, "seed": SEED, "files": sorted(rows, key=position),
                "failed": sorted(failed, key=position)}
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
