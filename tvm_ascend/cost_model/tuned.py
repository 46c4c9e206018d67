"""Applying tuned knobs: a kernel's best recorded knobs from the database, or the defaults.

Example
-------
>>> scheduled, tiling = tuned_schedule(ElementwiseSchedule, func, soc, db)   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import logging

from ..errors import TilingError
from ..schedules import (AttentionKnobs, Conv2dKnobs, DataMovementKnobs, ElementwiseKnobs,
                         MatmulKnobs, RowReduceKnobs)
from ..schedules.axis_reduce import AxisReduceKnobs
from ..schedules.matmul_rows import MatmulRowsKnobs
from ..schedules.pool2d import Pool2dKnobs
from .database import workload_of

logger = logging.getLogger("tvm_ascend.cost_model")

KNOB_CLASSES = {"elementwise": ElementwiseKnobs, "row_reduce": RowReduceKnobs,
                "matmul": MatmulKnobs, "matmul_rows": MatmulRowsKnobs,
                "attention": AttentionKnobs, "data_movement": DataMovementKnobs,
                "axis_reduce": AxisReduceKnobs, "pool2d": Pool2dKnobs, "conv2d": Conv2dKnobs}


def knobs_from_json(template_name: str, values: dict):
    """The knobs dataclass of ``template_name`` from a record's ``knobs`` object."""
    cls = KNOB_CLASSES[template_name]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise TypeError(f"unknown {template_name} knobs {sorted(unknown)}")
    return cls(**values)


def tuned_schedule(template, prim_func, soc, database=None, kernel: str = "", knobs=None):
    """(scheduled PrimFunc, Tiling) with the database's best knobs for this workload when it
    holds any that still plan, else ``knobs`` (the partitioner's choice; None: the template's
    defaults). A recorded choice that no longer plans is logged, never an error."""
    if database is not None:
        record = database.best(workload_of(prim_func, template.name, soc))
        if record is not None:
            try:
                recorded = knobs_from_json(template.name, record["knobs"])
                scheduled, tiling = template.schedule(prim_func, soc, recorded)
                logger.info("%s: tuned knobs %s (%.2f us estimated)", kernel, record["knobs"],
                            record["time_us"])
                return scheduled, tiling
            except (TypeError, TilingError) as err:
                logger.warning("%s: recorded knobs %s not usable (%s); %s tiling", kernel,
                               record["knobs"], err, "the planned" if knobs else "default")
    if knobs is not None:
        return template.schedule(prim_func, soc, knobs)
    return template.schedule(prim_func, soc)
