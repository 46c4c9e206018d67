"""How far an estimate can be trusted: uncertainty bands from the calibration rows.

``benchmarks/calibration.py`` estimates work that others timed on real chips (GEMMs, a copy,
FlashAttention, whole models through ATC) and writes, per kernel class, the range of
``estimated / measured`` ratios of the rows that calibrate it into
``calibration_bands.json`` beside this module. A kernel estimated at ``t`` us then lies in
``[t / high, t / low]``: the band printed next to every estimate (fusion report, ``compare``,
BENCHMARKS.md). A class no row calibrates (the measured kernels were of another algorithm
class) borrows the band of all calibrating rows and says so (``calibrated=False``).

Example
-------
>>> band = band_for_template("matmul")
>>> band.kernel_class
'cube'
>>> lo, hi = band.interval(100.0)      # the estimate over the highest and the lowest ratio
>>> (round(lo * band.high), round(hi * band.low))
(100, 100)
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

BANDS_PATH = Path(__file__).resolve().parent / "calibration_bands.json"
# The kernel class of each template: the work its calibration rows measured.
TEMPLATE_CLASSES = {
    "matmul": "cube", "matmul_rows": "cube", "matmul_gated": "cube",
    "conv2d": "cube",
    "attention": "attention",
    "elementwise": "vector", "row_reduce": "vector", "axis_reduce": "vector",
    "pool2d": "vector", "data_movement": "vector",
}
# Without a calibration file (a damaged install): the acceptance range of issue #18, marked
# uncalibrated, rather than no band at all.
_FALLBACK = (0.8, 1.25)


@dataclass(frozen=True)
class Band:
    """``low``..``high``: the estimated/measured ratios of the rows behind it (``rows``)."""

    kernel_class: str
    low: float
    high: float
    rows: tuple[str, ...] = ()
    calibrated: bool = True

    def interval(self, time_us: float) -> tuple[float, float]:
        """(fastest, slowest) time the measurements allow for an estimate of ``time_us``."""
        return time_us / self.high, time_us / self.low

    def to_json(self) -> dict:
        return {"class": self.kernel_class, "low": self.low, "high": self.high,
                "rows": list(self.rows), "calibrated": self.calibrated}


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    try:
        return json.loads(BANDS_PATH.read_text())
    except (OSError, ValueError):
        return {}


def band_for_class(kernel_class: str) -> Band:
    """The band of ``kernel_class`` (``cube``, ``attention``, ``vector``; anything else, host
    ops included, borrows the band of every calibrating row)."""
    table = _table().get("bands", {})
    entry = table.get(kernel_class)
    if entry is not None:
        return Band(kernel_class, entry["low"], entry["high"], tuple(entry["rows"]))
    if table:
        rows = tuple(r for e in table.values() for r in e["rows"])
        return Band(kernel_class, min(e["low"] for e in table.values()),
                    max(e["high"] for e in table.values()), rows, calibrated=False)
    return Band(kernel_class, *_FALLBACK, calibrated=False)


def band_for_template(template: str | None) -> Band:
    """The band of a kernel printed by ``template`` (None: a host op)."""
    return band_for_class(TEMPLATE_CLASSES.get(template or "", "host"))

