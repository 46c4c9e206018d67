"""The timing model's estimate of a launch from the CPU emulator's counters of it.

``lib.profile()`` returns, per kernel launch, what the emulator counted (GM bytes read and
written, cube MACs, the elements of each vector API); ``estimate_from_counters`` puts those
counts into the launch's tiling plan (the fusion report group's ``tiling``) and asks the
timing model for its time. The runtime's op summary (``runtime/profile_files.py``) and the
tuner's emulator board (``tuning/board.py``) both call it, so their figures agree. Every
figure is an estimate, never a measurement.

Example
-------
>>> group = lib.fusion_report()["groups"][0]                        # doctest: +SKIP
>>> estimate_from_counters(group, lib.profile()[0], soc).time_us   # doctest: +SKIP
3.93
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..schedules.tiling import Tiling
from .timing import KernelEstimate, estimate_kernel
from .vector_work import VectorWork

# Cost class of each vector API the emulator counts, as vector_work.py classes the TIR ops
# the printer turns into them: Reciprocal (+ Muls) is how a division is printed, so both are
# basic and a division weighs 2 either way; advanced APIs are composite. Unlisted APIs (copies,
# gathers, reductions, Duplicate, Cast) are basic.
VECTOR_API_CLASS = {
    "Div": "divide",
    "Exp": "transcendental", "Ln": "transcendental", "Sqrt": "transcendental",
    "Rsqrt": "transcendental",
    "Sigmoid": "composite", "Tanh": "composite", "Erf": "composite", "Sin": "composite",
    "Cos": "composite", "Power": "composite", "Gelu": "composite", "FasterGelu": "composite",
    "Silu": "composite",
}


def vector_work_from_counters(counters: dict, elem_bytes: int) -> VectorWork:
    """The vector work of one launch as the emulator counted it (``vector_by_op``).

    Each API's elements go to its cost class (``VECTOR_API_CLASS``); ``ops_per_unit`` is the
    number of distinct vector APIs, each taken as issued once per tile or row, as the printers
    emit a chain. This equals ``count_vector_work`` of the group's TIR when every TIR op is
    printed as one API called once per unit (elementwise chains); gathers, reductions and
    advanced APIs make the two differ.

    Example
    -------
    >>> work = vector_work_from_counters({"vector_by_op": {"Exp": {"instrs": 4, "elems": 512},
    ...                                   "Muls": {"instrs": 4, "elems": 512}}}, 4)
    >>> work.by_class["transcendental"], work.by_class["basic"], work.ops_per_unit
    (512, 512, 2)
    """
    by_class = {"basic": 0, "divide": 0, "transcendental": 0, "composite": 0}
    by_op = counters.get("vector_by_op", {})
    for api, count in by_op.items():
        by_class[VECTOR_API_CLASS.get(api, "basic")] += int(count["elems"])
    return VectorWork(by_class, len(by_op), elem_bytes)


def group_tiling(group: dict | None) -> Tiling | None:
    """The typed Tiling of a fusion-report group (None for a group without one: a host op)."""
    data = (group or {}).get("tiling")
    return Tiling.from_dict(data) if data else None


def estimate_from_counters(group: dict, counters: dict, soc) -> KernelEstimate:
    """The timing model's estimate of one launch of ``group`` (a fusion-report group) from the
    emulator's ``counters`` for it: the group's tiling with the counted GM bytes and cube MACs
    (as ``LocalRunner(mode="emulator")`` does) and the counted vector work.

    Equal to ``LocalRunner(mode="plan")``'s estimate for the same tiling when the counters
    equal the plan's (GM bytes and MACs are checked equal in the tests) and the vector work
    equals the TIR's (see ``vector_work_from_counters``). An estimate, not a measurement.

    Example
    -------
    >>> group = lib.fusion_report()["groups"][0]                        # doctest: +SKIP
    >>> estimate_from_counters(group, lib.profile()[0], soc).time_us   # doctest: +SKIP
    3.93
    """
    tiling = group_tiling(group)
    measured = dataclasses.replace(
        tiling, gm_read_bytes=int(counters["gm_read_bytes"]),
        gm_write_bytes=int(counters["gm_write_bytes"]),
        work=dataclasses.replace(tiling.work, cube_macs=int(counters.get("cube_macs", 0))))
    out_dtype = group["ops"][-1]["dtype"] if group.get("ops") else "float32"
    work = vector_work_from_counters(counters, np.dtype(out_dtype).itemsize)
    return estimate_kernel(None, measured, soc, work=work)
