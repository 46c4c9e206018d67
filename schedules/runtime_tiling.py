"""The Tiling one call of a kernel over symbolic shapes runs with, by template.

A template that plans over symbolic dimensions (``schedules/symbolic.py``) keeps in its plan
how each call is tiled (``plan.runtime``); ``tiling_at`` gives that call's Tiling at the
dimensions' sizes, exactly what the kernel's host tiling function fills in
(``codegen/tiling_func.py``): the partitioner estimates a kernel at its range's ends and
midpoint with it, and tests hold the emulator's counters of each call equal to it.

Example
-------
>>> tiling_at(tiling, {"s": 7}).cores                       # doctest: +SKIP
7
"""
from __future__ import annotations

from tvm_ascend.errors import TilingError

from .attention import attention_tiling_at
from .data_movement import data_movement_tiling_at
from .elementwise import elementwise_tiling_at
from .matmul import matmul_tiling_at
from .row_reduce import row_reduce_tiling_at

_AT = {"elementwise": elementwise_tiling_at, "row_reduce": row_reduce_tiling_at,
       "matmul": matmul_tiling_at, "attention": attention_tiling_at,
       "data_movement": data_movement_tiling_at}


def is_runtime_tiled(tiling) -> bool:
    """Whether ``tiling``'s kernel is tiled per call (its plan holds a ``runtime``)."""
    return getattr(tiling.plan, "runtime", None) is not None


def tiling_at(tiling, values: dict):
    """The Tiling of one call of ``tiling``'s kernel at ``values`` ({dimension: size})."""
    if not is_runtime_tiled(tiling):
        raise TilingError(f"the {tiling.template} kernel is static: it has no run-time tiling")
    try:
        at = _AT[tiling.template]
    except KeyError as err:
        raise TilingError(f"the {tiling.template} template does not tile at run time") from err
    return at(tiling, values)


__all__ = ["is_runtime_tiled", "tiling_at"]
