"""Fixed-length feature vectors of tuning candidates (a group plus its knob values).

Every feature is derived from the candidate's ``Tiling``, its vector work and the timing
model's per-pipe estimate, never computed a second way. The vector is deterministic: the same
(PrimFunc, Tiling, SoC) always gives the same bytes.

Example
-------
>>> vec = extract_features(func, tiling, get_soc("Ascend910B1"))   # doctest: +SKIP
>>> vec.shape == (len(FEATURE_NAMES),)                             # doctest: +SKIP
True
"""
from __future__ import annotations

import math

import numpy as np

from .timing import estimate_kernel
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


def _log(value: float) -> float:
    return math.log2(1.0 + max(0.0, float(value)))


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
    # (m, n, k, base_m, base_n, single_m, single_n) of a cube product; zeros without one
    m, n, k, base_m, base_n, single_m, single_n = tiling.plan.cube_dims() \
        if tiling.plan is not None else (0,) * 7
    span = tiling.cores * tiling.block_len
    last = tiling.total - (tiling.cores - 1) * tiling.block_len
    values = [
        # a matmul_rows kernel counts as a matmul: the shipped XGBoost model was trained on
        # features from before that template had a name of its own
        *(1.0 if tiling.template == t or (t, tiling.template) == ("matmul", "matmul_rows")
          else 0.0 for t in TEMPLATES),
        _log(tiling.gm_read_bytes), _log(tiling.gm_write_bytes), _log(tiling.total),
        _log(tiling.cols), float(work.elem_bytes),
        float(tiling.cores), tiling.cores / max(1, soc.vector_blocks),
        _log(tiling.tiles_per_core), _log(tiling.tile_len), _log(tiling.block_len),
        1.0 if tiling.buffer_num >= 2 else 0.0, tiling.ub_bytes / max(1, tiling.ub_capacity),
        float(tiling.temp_buffers), (span - tiling.total) / max(1, span),
        last / max(1, tiling.block_len),
        *(_log(work.by_class.get(c, 0)) for c in OP_CLASSES), float(work.ops_per_unit),
        _log(tiling.work.scalar_elems),
        _log(tiling.work.cube_macs), _log(base_m), _log(base_n),
        _log(single_m), _log(single_n),
        float(m % 16 == 0) if m else 0.0, float(n % 16 == 0) if n else 0.0,
        float(k % 16 == 0) if k else 0.0,
        _log(est.mte2_us * 1e3), _log(est.vector_us * 1e3), _log(est.cube_us * 1e3),
        _log(est.mte3_us * 1e3), _log(est.scalar_us * 1e3), _log(est.roofline_us * 1e3),
        _log((est.time_us - est.launch_us) * 1e3), float(est.steps_per_core),
        soc.clock_mhz / 1e3, soc.gm_bandwidth_gbps / 1e3, float(soc.vector_blocks),
        float(soc.ai_cores),
    ]
    assert len(values) == len(FEATURE_NAMES), (len(values), len(FEATURE_NAMES))
    return np.asarray(values, dtype=np.float32)
