"""The corpus of real exports (tests/corpus/MANIFEST.json) and the inputs each row is run on:
a support module, not a test file, for test_corpus.py and the tests that build a corpus file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parent / "corpus"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text())
ROWS = {row["file"]: row for row in MANIFEST["files"]}
SEED = 0


def sample_inputs(row: dict) -> dict:
    """The inputs of one manifest row, drawn with a fixed seed: token ids within the
    vocabulary, attention masks of ones with the last row's trailing positions padded (0),
    standard normal features."""
    rng = np.random.default_rng(SEED)
    feeds = {}
    for spec in row["inputs"]:
        shape, dtype, sample = spec["shape"], spec["dtype"], spec["sample"]
        if sample["kind"] == "ids":
            feeds[spec["name"]] = rng.integers(0, sample["high"], shape).astype(dtype)
        elif sample["kind"] == "mask":
            mask = np.ones(shape, dtype)
            mask[-1, -sample["padding"]:] = 0
            feeds[spec["name"]] = mask
        else:
            feeds[spec["name"]] = rng.standard_normal(shape).astype(dtype)
    return feeds
