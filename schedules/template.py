"""The template contract: analyse a group once, plan it per knobs, apply the chosen plan once.

Every tiling template derives from ``Template`` and defines:

* ``name`` (its kernel record's and its printer's key) and ``Knobs`` (its search space);
* ``applies(func) -> Decision``: legality only, cheap, never raises;
* ``analyse(func) -> Analysis``: what the template reads from the group (its shape, its row or
  epilogue program) and the schedule steps every plan shares (inlining the epilogue, the block
  layout the printer reads), as a frozen object that is never modified afterwards, so one
  analysis serves every plan of the group; raises ``TilingError`` where the template cannot
  take the group after all;
* ``plan(analysis, soc, knobs=None) -> Tiling``: arithmetic only (no TIR schedule primitive):
  cores, tiles, UB bytes, the typed plan and its ``KernelWork``; raises ``TilingError`` for
  knobs that do not fit;
* ``apply(analysis, tiling) -> PrimFunc``: the schedule primitives the plan needs (the core
  loop's annotation, its splits), on a copy of the analysed function.

``schedule(func, soc, knobs)`` is the three in a row; the planner calls them apart: one
``analyse`` per group and template, one ``plan`` per candidate knobs, one ``apply`` for the
plan it keeps.

Example
-------
>>> analysis = MatmulSchedule.analyse(func)                            # doctest: +SKIP
>>> tilings = [MatmulSchedule.plan(analysis, soc, k) for k in MatmulSchedule.variants(func, soc)]
>>> scheduled = MatmulSchedule.apply(analysis, min(tilings, key=estimate))  # doctest: +SKIP
"""
from __future__ import annotations

import typing

import tvm

from .tiling import CORE_LOOP_ANNOTATION


class Template:
    """Base of the tiling templates (see the module docstring for the contract)."""

    name: typing.ClassVar[str] = ""
    Knobs: typing.ClassVar[type] = type(None)

    @staticmethod
    def applies(func):
        raise NotImplementedError

    @classmethod
    def analyse(cls, func):
        raise NotImplementedError(f"{cls.__name__}.analyse")

    @classmethod
    def plan(cls, analysis, soc, knobs=None):
        raise NotImplementedError(f"{cls.__name__}.plan")

    @classmethod
    def apply(cls, analysis, tiling):
        raise NotImplementedError(f"{cls.__name__}.apply")

    @classmethod
    def schedule(cls, func, soc, knobs=None):
        """(scheduled PrimFunc, Tiling) of ``func`` on ``soc`` with ``knobs`` (None: the
        template's defaults): ``apply(analysis, plan(analysis, soc, knobs))``."""
        analysis = cls.analyse(func)
        tiling = cls.plan(analysis, soc, knobs)
        return cls.apply(analysis, tiling), tiling


def mark_core_loop(func, block_index: int = 0):
    """``func`` with the outermost loop of its ``block_index``-th root block annotated as the
    core loop (``CORE_LOOP_ANNOTATION``): the ``apply`` of the templates whose kernel's
    structure comes from the plan, not from loop nests."""
    sch = tvm.s_tir.Schedule(func)
    loops = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[block_index])
    sch.annotate(loops[0], CORE_LOOP_ANNOTATION, 1)
    return sch.mod["main"]


__all__ = ["Template", "mark_core_loop"]
