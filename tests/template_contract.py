"""The template contract as one check the template test files share (a support module, not a
test file): ``analyse`` once, ``plan`` per knobs, ``apply`` per plan equals ``schedule``.

Example
-------
>>> check_analyse_plan_apply(ElementwiseSchedule, func, soc, [None, ElementwiseKnobs(cores=4)])
"""
from __future__ import annotations

import tvm_ffi


def check_analyse_plan_apply(template, func, soc, knobs_list) -> None:
    """For each knobs of ``knobs_list``: ``apply(analysis, plan(analysis, soc, knobs))`` of one
    ``analysis = analyse(func)`` is the Tiling and the PrimFunc (structurally) that
    ``schedule(func, soc, knobs)`` gives, and applying a plan twice gives the same function
    (``apply`` leaves the analysis as it found it)."""
    analysis = template.analyse(func)
    for knobs in knobs_list:
        tiling = template.plan(analysis, soc, knobs)
        scheduled = template.apply(analysis, tiling)
        expected, expected_tiling = template.schedule(func, soc, knobs)
        assert tiling == expected_tiling, knobs
        # the printer reads names too (loops, buffers): the printed scripts are equal as well
        assert tvm_ffi.structural_equal(scheduled, expected), knobs
        assert scheduled.script() == expected.script(), knobs
        again = template.apply(analysis, tiling)
        assert tvm_ffi.structural_equal(again, scheduled), knobs
