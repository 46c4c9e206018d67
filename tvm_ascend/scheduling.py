"""Schedule stage: each NPU group's PrimFunc scheduled once, by the partitioner's plan."""
from __future__ import annotations

import json
import logging

import tvm
from tvm import relax

from . import ir_attrs
from .kernel_record import record_of

logger = logging.getLogger("tvm_ascend.schedule")


def schedule_groups(mod: tvm.IRModule, cost, failures: dict | None = None
                    ) -> tuple[tvm.IRModule, dict]:
    """(module with scheduled PrimFuncs and completed kernel records on its codegen functions,
    {symbol: Tiling}).

    ``cost``: the build's ``GroupCost`` (``partition/cost.py``), whose plans the partitioner
    made: each kernel's plan with the template and knobs its kernel record names
    (``ir_attrs.KERNEL``), a tuning record's included, is applied once (its template's
    ``apply``), so nothing is planned twice, and the tiling completes the record; a kernel the
    cost holds no plan for (a module partitioned elsewhere) is planned through it. ``failures``: where given, a kernel
    whose scheduling raises is recorded there (symbol -> exception) and left unscheduled, for
    the pipeline to plan again without it (``tvm_ascend/fallback.py``); without it the error
    propagates.
    """
    tilings = {}
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function) or not func.attrs or \
                func.attrs.get("Codegen") != "ascend":
            continue
        record = record_of(func)
        try:
            plan = cost.kernel(func.attrs[ir_attrs.PRIM_FUNC], record.template, record.knobs)
        except Exception as err:  # noqa: BLE001 - any failure of one kernel is that kernel's
            if failures is None:
                raise
            failures[gv.name_hint] = err
            continue
        tilings[gv.name_hint] = plan.tiling
        record = record.with_tiling(json.loads(plan.tiling.to_json()))
        mod[gv] = func.with_attrs({ir_attrs.PRIM_FUNC: plan.scheduled,
                                   ir_attrs.KERNEL: record.to_json()})
        logger.debug("%s: %s", gv.name_hint, plan.tiling)
    return mod, tilings
