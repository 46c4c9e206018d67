"""Fixed-length feature vectors of tuning candidates (a group plus its knob values).

Two layouts. ``FEATURE_NAMES`` (the tuner's, ``extract_features``): the candidate's
``Tiling``, its vector work and the timing model's per-pipe estimate; the tuner ranks before
it measures on a runner, so the estimate is a cheap input there. ``PLAN_FEATURE_NAMES`` (the
planner's, ``extract_plan_features``): the Tiling, its ``KernelWork``, the vector work and the
SoC only, never the timing estimate, because the planner ranks in order to run the timing
model on fewer candidates; a feature read from that estimate would make its ranking circular.
The planner's layout adds what the launch and the pipeline model depend on, counted from the
plan: the blocks the launch starts over the SoC's capacity, the busiest core's share, bytes
(HBM, L2), MACs, operand loads and vector work per busiest core, bytes per step; and, because
the planner ranks the variants of one group against each other, query-level normalised
copies of those (``rel_*``: the candidate's value over the group's smallest, in log2, as
learning-to-rank sets such as LETOR normalise features per query): ``plan_feature_matrix``
computes a group's rows. Both are deterministic: the same (PrimFunc, Tiling, SoC) always
gives the same bytes.

Example
-------
>>> vec = extract_features(func, tiling, get_soc("Ascend910B1"))   # doctest: +SKIP
>>> vec.shape == (len(FEATURE_NAMES),)                             # doctest: +SKIP
True
"""
from __future__ import annotations

import math

import numpy as np

from .timing import busiest_share, estimate_kernel, l2_bytes, launch_blocks
from .vector_work import OP_CLASSES, count_vector_work

TEMPLATES = ("elementwise", "row_reduce", "matmul")

FEATURE_NAMES = (
    *(f"is_{t}" for t in TEMPLATES),
    "log_gm_read", "log_gm_write", "log_units", "log_cols", "elem_bytes",
    "cores", "core_fraction", "log_tiles_per_core", "log_tile_len", "log_block_len",
    "double_buffer", "ub_fraction", "temp_buffers", "tail_waste", "last_core_fill",
    *(f"log_vec_{c}" for c in OP_CLASSES), "ops_per_unit", "log_scalar_gather",
    "log_cube_macs", "log_base_m", "log_base_n", "log_single_m", "log_single_n",
    "m_aligned", "n_aligned", "k_aligned",
    "log_mte2_us", "log_vector_us", "log_cube_us", "log_mte3_us", "log_scalar_us",
    "log_roofline_us", "log_kernel_us", "steps_per_core",
    "soc_clock_ghz", "soc_bandwidth_tbps", "soc_vector_blocks", "soc_ai_cores",
)


# the planner ranks the variants of the templates that have some (``template.variants``)
PLAN_TEMPLATES = ("matmul", "conv2d")
_ESTIMATE_FEATURES = ("log_mte2_us", "log_vector_us", "log_cube_us", "log_mte3_us",
                      "log_scalar_us", "log_roofline_us", "log_kernel_us")
_TEMPLATE_FEATURES = tuple(f"is_{t}" for t in TEMPLATES)
PLAN_FEATURE_NAMES = (
    *(f"is_{t}" for t in PLAN_TEMPLATES),
    *(n for n in FEATURE_NAMES if n not in _ESTIMATE_FEATURES + _TEMPLATE_FEATURES),
    "log_steps", "log_vector_repeats", "log_extra_vector_calls", "log_cube_operand_bytes",
    "log_l2_operand_bytes", "log_workspace_bytes", "log_gather_elems", "log_gather_calls",
    "log_template_vector_bytes", "aiv_ratio", "l2_fraction",
    # the launch's and the busiest core's pipes, from the plan (what timing.estimate_kernel
    # charges them on, never what it estimates)
    "log_template_vector_calls", "launch_block_fraction", "busiest_share", "imbalance",
    "log_core_read", "log_core_write", "log_core_hbm", "log_core_l2", "log_hbm_contention",
    "log_core_macs", "log_core_operand", "log_core_vector_bytes", "log_core_instructions",
    "log_core_template_vector", "log_read_per_step", "log_macs_per_step",
)
# compared within a group (rel_*: log2 of the value over the group's smallest)
_RELATIVE = ("launch_block_fraction", "log_steps", "log_core_read", "log_core_write",
             "log_core_hbm", "log_core_l2", "log_hbm_contention", "log_core_macs",
             "log_core_operand", "log_core_vector_bytes", "log_core_instructions",
             "log_core_template_vector", "log_gm_read", "log_gm_write")
_OWN_COUNT = len(PLAN_FEATURE_NAMES)
PLAN_FEATURE_NAMES = (*PLAN_FEATURE_NAMES, *(f"rel_{n}" for n in _RELATIVE))
_RELATIVE_INDEX = [PLAN_FEATURE_NAMES.index(n) for n in _RELATIVE]


def _log(value: float) -> float:
    return math.log2(1.0 + max(0.0, float(value)))


def _plan_values(tiling, soc, work) -> dict:
    """The features read from the plan, its vector work and the SoC, by name."""
    m, n, k, base_m, base_n, single_m, single_n = tiling.plan.cube_dims() \
        if tiling.plan is not None else (0,) * 7
    span = tiling.cores * tiling.block_len
    last = tiling.total - (tiling.cores - 1) * tiling.block_len
    plan = tiling.work
    values = {
        "log_gm_read": _log(tiling.gm_read_bytes), "log_gm_write": _log(tiling.gm_write_bytes),
        "log_units": _log(tiling.total), "log_cols": _log(tiling.cols),
        "elem_bytes": float(work.elem_bytes), "cores": float(tiling.cores),
        "core_fraction": tiling.cores / max(1, soc.vector_blocks),
        "log_tiles_per_core": _log(tiling.tiles_per_core), "log_tile_len": _log(tiling.tile_len),
        "log_block_len": _log(tiling.block_len),
        "double_buffer": 1.0 if tiling.buffer_num >= 2 else 0.0,
        "ub_fraction": tiling.ub_bytes / max(1, tiling.ub_capacity),
        "temp_buffers": float(tiling.temp_buffers), "tail_waste": (span - tiling.total) /
        max(1, span), "last_core_fill": last / max(1, tiling.block_len),
        **{f"log_vec_{c}": _log(work.by_class.get(c, 0)) for c in OP_CLASSES},
        "ops_per_unit": float(work.ops_per_unit), "log_scalar_gather": _log(plan.scalar_elems),
        "log_cube_macs": _log(plan.cube_macs), "log_base_m": _log(base_m),
        "log_base_n": _log(base_n), "log_single_m": _log(single_m),
        "log_single_n": _log(single_n),
        "m_aligned": float(m % 16 == 0) if m else 0.0,
        "n_aligned": float(n % 16 == 0) if n else 0.0,
        "k_aligned": float(k % 16 == 0) if k else 0.0,
        # what estimate_kernel reports as steps_per_core, read from the plan itself
        "steps_per_core": float(max(1, plan.steps)),
        "soc_clock_ghz": soc.clock_mhz / 1e3, "soc_bandwidth_tbps": soc.gm_bandwidth_gbps / 1e3,
        "soc_vector_blocks": float(soc.vector_blocks), "soc_ai_cores": float(soc.ai_cores),
        "log_steps": _log(plan.steps), "log_vector_repeats": _log(plan.vector_repeats),
        "log_extra_vector_calls": _log(plan.extra_vector_calls),
        "log_cube_operand_bytes": _log(plan.cube_operand_bytes),
        "log_l2_operand_bytes": _log(plan.l2_operand_bytes),
        "log_workspace_bytes": _log(plan.workspace_read_bytes + plan.workspace_write_bytes),
        "log_gather_elems": _log(plan.gather_elems), "log_gather_calls": _log(plan.gather_calls),
        "log_template_vector_bytes": _log(plan.template_vector_bytes),
        "aiv_ratio": float(plan.aiv_ratio),
        "l2_fraction": (plan.l2_operand_bytes + plan.workspace_read_bytes) /
        max(1, tiling.gm_read_bytes),
    }
    values.update(_core_values(tiling, soc, work))
    return values


def _core_values(tiling, soc, work) -> dict:
    """The busiest core's part of the plan and the blocks its launch starts: what the timing
    model's pipes and start-up are charged on, as plain counts (bytes, MACs, instructions)."""
    plan = tiling.work
    cores, ratio, steps = max(1, tiling.cores), max(1, plan.aiv_ratio), max(1, plan.steps)
    share = busiest_share(tiling)
    read, write = tiling.gm_read_bytes, tiling.gm_write_bytes
    l2_read, l2_write = l2_bytes(tiling)  # where the plan's bytes come from, not a time
    hbm = read - l2_read + write - l2_write
    operand = min(read, plan.cube_operand_bytes)
    started, capacity = launch_blocks(tiling, soc)
    blocks = started / max(1, capacity)
    template_vector = plan.gather_elems * work.elem_bytes + plan.template_vector_bytes
    return {
        "log_template_vector_calls": _log(plan.template_vector_calls),
        "launch_block_fraction": min(1.0, blocks), "busiest_share": share,
        "imbalance": share * cores,
        "log_core_read": _log(share * read), "log_core_write": _log(share * write),
        "log_core_hbm": _log(share * hbm), "log_core_l2": _log(share * (l2_read + l2_write)),
        # the busiest core's HBM bytes as if every core streamed as much: its part of the
        # stream bandwidth shrinks with the cores that share it
        "log_hbm_contention": _log(share * hbm * cores),
        "log_core_macs": _log(share * plan.cube_macs * ratio),
        "log_core_operand": _log(share * operand * ratio),
        "log_core_vector_bytes": _log(share * work.weighted_ops * work.elem_bytes),
        "log_core_instructions": _log(work.ops_per_unit * plan.vector_repeats
                                      + plan.extra_vector_calls),
        "log_core_template_vector": _log(share * template_vector),
        "log_read_per_step": _log(share * read / steps),
        "log_macs_per_step": _log(share * plan.cube_macs * ratio / steps),
    }


def extract_plan_features(prim_func, tiling, soc, work=None) -> np.ndarray:
    """The planner's feature vector (float32, ``len(PLAN_FEATURE_NAMES)``) of one candidate
    tiling alone: read from the plan, its vector work and the SoC, never from the timing
    estimate; its ``rel_*`` features are those of a group of one (zero). A group's rows come
    from ``plan_feature_matrix``.

    ``work``: ``count_vector_work(prim_func, ...)`` of the tiling, if already counted.
    """
    work = work if work is not None else count_vector_work(
        prim_func, tiling.work.per_output_element, tiling.work.img2col_prologue)
    values = _plan_values(tiling, soc, work)
    for t in PLAN_TEMPLATES:
        values[f"is_{t}"] = 1.0 if tiling.template == t else 0.0
    values.update({f"rel_{n}": 0.0 for n in _RELATIVE})
    return np.asarray([values[name] for name in PLAN_FEATURE_NAMES], dtype=np.float32)


def plan_feature_matrix(prim_func, tilings, soc) -> np.ndarray:
    """The planner's features of a group's candidate ``tilings`` (rows, float32): each row
    ``extract_plan_features``, its ``rel_*`` columns the candidate's value over the smallest
    of the group's (a difference of log2 counts)."""
    rows = np.stack([extract_plan_features(prim_func, t, soc) for t in tilings])
    return normalise_group(rows)


def normalise_group(rows: np.ndarray) -> np.ndarray:
    """``rows`` (a group's ``extract_plan_features``) with their ``rel_*`` columns filled in:
    each ``_RELATIVE`` feature minus its smallest value in the group."""
    rows = np.array(rows, dtype=np.float32)
    own = rows[:, _RELATIVE_INDEX]
    rows[:, _OWN_COUNT:] = own - own.min(axis=0, keepdims=True)
    return rows


def extract_features(prim_func, tiling, soc, estimate=None) -> np.ndarray:
    """The feature vector (float32, ``len(FEATURE_NAMES)``) of one candidate.

    Parameters
    ----------
    prim_func : tvm.tirx.PrimFunc
        The group.
    tiling : Tiling
        The candidate's plan (its knobs are visible through it: cores, tile sizes, buffers).
    soc : SocProfile
        Target SoC.
    estimate : KernelEstimate, optional
        ``estimate_kernel(prim_func, tiling, soc)`` if already computed.
    """
    work = count_vector_work(prim_func, tiling.work.per_output_element,
                             tiling.work.img2col_prologue)
    est = estimate or estimate_kernel(prim_func, tiling, soc, work=work)
    values = _plan_values(tiling, soc, work)
    # a matmul_rows or matmul_gated kernel counts as a matmul: the shipped XGBoost model was
    # trained on features from before those templates had names of their own
    for t in TEMPLATES:
        values[f"is_{t}"] = 1.0 if tiling.template == t or \
            (t, tiling.template) in (("matmul", "matmul_rows"), ("matmul", "matmul_gated")) \
            else 0.0
    values.update({
        "log_mte2_us": _log(est.mte2_us * 1e3), "log_vector_us": _log(est.vector_us * 1e3),
        "log_cube_us": _log(est.cube_us * 1e3), "log_mte3_us": _log(est.mte3_us * 1e3),
        "log_scalar_us": _log(est.scalar_us * 1e3),
        "log_roofline_us": _log(est.roofline_us * 1e3),
        "log_kernel_us": _log((est.time_us - est.launch_us) * 1e3),
        "steps_per_core": float(est.steps_per_core)})
    values = [values[name] for name in FEATURE_NAMES]
    return np.asarray(values, dtype=np.float32)
