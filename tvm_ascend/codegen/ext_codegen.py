"""``relax.ext.ascend``: the BYOC codegen that RunCodegen calls with the partitioned groups.

It reads the decisions carried on each function (the scheduled PrimFunc and the kernel record:
template, knobs, tiling, group provenance),
prints one C++ unit and returns it as a C source module; ``export_library`` compiles it with g++
against the AscendC emulator and links it into the deployable ``.so``.
"""
from __future__ import annotations

import json
import logging

import tvm

from .. import ir_attrs
from ..errors import CodegenError
from ..kernel_record import record_of
from ..schedules.tiling import Tiling
from ..soc import get_soc
from .ascendc_printer import PrintedUnit, ScheduledKernel, translation_unit
from .tiling_func import runtime_exports

logger = logging.getLogger("tvm_ascend.codegen")

FIXED_EXPORTS = ["ascend_profile_json", "ascend_profile_reset", "ascend_metadata_json"]


def scheduled_kernels(funcs) -> list[ScheduledKernel]:
    """The kernels of scheduled codegen functions, read from their kernel records."""
    kernels = []
    for func in funcs:
        symbol, record = str(func.attrs["global_symbol"]), record_of(func)
        if record.tiling is None:
            raise CodegenError(f"kernel {symbol} has no tiling in its kernel record: its "
                               "module was partitioned but not scheduled (schedule_groups)")
        kernels.append(ScheduledKernel(symbol, func.attrs[ir_attrs.PRIM_FUNC],
                                       Tiling.from_json(json.dumps(record.tiling)),
                                       record.group))
    return kernels


class PrintedUnits:
    """Where ``relax.ext.ascend`` leaves the units it prints, for the caller of RunCodegen to
    read as data (code, kernel sources, metadata) rather than out of the C++ text. Handed in
    through the options (``"printed"``), it crosses the FFI as this Python object itself."""

    def __init__(self):
        self.units: list[PrintedUnit] = []


def unit_module(kernels, soc, metadata: dict) -> tuple[object, PrintedUnit]:
    """(the C source module of ``kernels``, the unit printed for it). ``kernels`` may be none:
    the unit still carries the metadata and the profile functions, so every built model
    exports and loads the same way."""
    unit = translation_unit(kernels, soc, metadata)
    logger.info("printed %d AscendC kernel(s) for %s", len(kernels), soc.name)
    create = tvm.get_global_func("runtime.CSourceModuleCreate")
    exports = [name for k in kernels for name in [k.symbol, *runtime_exports(k)]]
    return create(unit.code, "cc", exports + FIXED_EXPORTS, []), unit


def ascend_codegen(funcs, options, constant_names):
    """RunCodegen entry: partitioned functions in, one CSourceModule out; the printed unit
    also goes to the options' ``"printed"`` (``PrintedUnits``) when one is given."""
    options = dict(options or {})
    soc = get_soc(str(options.get("soc_version", "Ascend910B1")))
    metadata = json.loads(str(options.get("metadata", "{}")))
    module, unit = unit_module(scheduled_kernels(funcs), soc, metadata)
    printed = options.get("printed")
    if printed is not None:
        printed.units.append(unit)
    return [module]


def register_codegen() -> None:
    """Register ``relax.ext.ascend`` (idempotent)."""
    tvm.register_global_func("relax.ext.ascend", ascend_codegen, override=True)
