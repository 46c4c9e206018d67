"""Schedule stage: tile each NPU group's PrimFunc with the template the partitioner chose."""
from __future__ import annotations

import json
import logging

import tvm
from tvm import relax

from . import ir_attrs
from .errors import TilingError
from .schedules import knobs_from_json, template_by_name

logger = logging.getLogger("tvm_ascend.schedule")


def schedule_groups(mod: tvm.IRModule, soc, database=None, failures: dict | None = None
                    ) -> tuple[tvm.IRModule, dict]:
    """(module with scheduled PrimFuncs and Tilings on its codegen functions, {symbol: Tiling}).

    ``database`` (a tuning database folder or ``TuningDatabase``, or None): kernels whose
    workload it holds are tiled with the best recorded knobs, the others with the knobs the
    partitioner's estimate chose (``ir_attrs.KNOBS``), else the defaults. ``failures``: where
    given, a kernel whose scheduling raises is recorded there (symbol -> exception) and left
    unscheduled, for the pipeline to plan again without it (``tvm_ascend/fallback.py``);
    without it the error propagates.
    """
    from .cost_model.database import open_database

    database = open_database(database)
    tilings = {}
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function) or not func.attrs or \
                func.attrs.get("Codegen") != "ascend":
            continue
        template = template_by_name(str(func.attrs[ir_attrs.TEMPLATE]))
        chosen = func.attrs.get(ir_attrs.KNOBS)
        knobs = knobs_from_json(template.name, json.loads(str(chosen))) if chosen else None
        try:
            scheduled, tiling = tuned_schedule(template, func.attrs[ir_attrs.PRIM_FUNC], soc,
                                               database, gv.name_hint, knobs)
        except Exception as err:  # noqa: BLE001 - any failure of one kernel is that kernel's
            if failures is None:
                raise
            failures[gv.name_hint] = err
            continue
        tilings[gv.name_hint] = tiling
        mod[gv] = func.with_attrs({ir_attrs.PRIM_FUNC: scheduled,
                                   ir_attrs.TILING: tiling.to_json()})
        logger.debug("%s: %s", gv.name_hint, tiling)
    return mod, tilings


def tuned_schedule(template, prim_func, soc, database=None, kernel: str = "", knobs=None):
    """(scheduled PrimFunc, Tiling) with the database's best knobs for this workload when it
    holds any that still plan, else ``knobs`` (the partitioner's choice; None: the template's
    defaults). A recorded choice that no longer plans is logged, never an error."""
    from .cost_model.database import workload_of

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
