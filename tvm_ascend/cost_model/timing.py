"""The Ascend timing model: estimated time of one kernel launch from its tiling plan.

Per core, four pipes work on a sequence of steps (UB tiles, rows or matmul base tiles): MTE2
(GM -> UB/L1), the cube, the vector unit (with the scalar unit's gathers) and MTE3 (UB -> GM).
Double-buffered, the steps overlap (the slowest pipe sets the pace after the first step);
single-buffered, they run one after the other. The busiest core decides, the device's start-up
of the launch is added (``device_startup_us``: more for more cores), and the result never goes
below the roofline bound of the launch:
``max(HBM bytes / nominal bandwidth + L2 bytes / L2 rate, cube flops / cube peak,
vector ops / vector peak)``. Bytes L2 serves (``schedules/l2_reuse.py``: one rule for every
template) move at the core's MTE rate; HBM bytes at most at the core's part of the bandwidth
a streaming kernel achieves (``hbm_stream_gbps``, below the nominal figure).

A launch also costs the host its submission into the stream; the host runs ahead of the
device, so that costs a model's time only where the device would wait for it
(``end_to_end_us``). A kernel's ``time_us`` is its time on the device's timeline; decisions
compare those, and ``end_to_end_us`` shows what the low and the high end of the measured
submission range make of a sequence of them.

Every figure is an estimate from the SoC profile (soc_profiles.def, sources cited there).

Example
-------
>>> from tvm_ascend.soc import get_soc
>>> est = estimate_launch(gm_bytes=64 << 20, flops=0, soc=get_soc("Ascend910B1"))
>>> round(est.time_us, 1)     # 64 MiB at 1.8 TB/s + 8 us start-up on all cores
45.3
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..schedules.tiling import ASYNC_EVENT_FETCHES
from .attention_timing import FlashBlockCycles, flash_attention_cycles
from .vector_work import VectorWork, count_vector_work

_PIPES = ("mte2", "cube", "vector", "mte3")


@dataclass(frozen=True)
class KernelEstimate:
    """Estimated time of one kernel launch (microseconds) and what it is made of.

    ``mte2_us``, ``cube_us``, ``vector_us`` (with scalar gathers) and ``mte3_us`` are the busy
    times of the busiest core's pipes; ``roofline_us`` the launch's roofline bound without its
    start-up; ``launch_us`` the device's start-up of the launch (``device_startup_us``);
    ``time_us >= roofline_us + launch_us`` always. ``bound`` names the pipe (or
    ``"roofline"``/``"launch"``) that decided the time. ``submit_low_us`` / ``submit_high_us``:
    the host's submission of the launch, at the low and the high end of the measured range;
    not in ``time_us`` (the host submits ahead of the device: ``end_to_end_us``).
    ``zero_fill_us``: the launcher's zeroing of an output the kernel adds into atomically
    (split-K: aclrtMemsetAsync on the stream before the launch), in ``time_us``.
    ``hbm_bytes`` / ``l2_bytes``: of ``gm_bytes``, those charged at HBM's rate and those L2
    serves (``l2_bytes``: workspace round trips, operand re-reads within L2's reach or shared
    by cores in flight); they add up to ``gm_bytes``.
    """

    time_us: float
    roofline_us: float
    mte2_us: float
    vector_us: float
    cube_us: float
    mte3_us: float
    launch_us: float
    scalar_us: float = 0.0
    cores: int = 1
    steps_per_core: int = 1
    double_buffered: bool = False
    gm_bytes: int = 0
    flops: float = 0.0
    bound: str = "launch"
    estimated: bool = True
    submit_low_us: float = 0.0
    submit_high_us: float = 0.0
    zero_fill_us: float = 0.0
    hbm_bytes: int = 0
    l2_bytes: int = 0

    def to_json(self) -> dict:
        """A JSON-ready dict (every figure is labelled an estimate)."""
        return asdict(self)


# A vector Gather reads each element from its own place in the UB, so it cannot stream whole
# blocks as a contiguous op does. ESTIMATE: one 32-byte block of output per cycle (no public
# throughput figure for the gather instruction).
GATHER_BYTES_PER_CYCLE = 32


def busiest_share(tiling) -> float:
    """The busiest core's part of ``tiling``'s work (its block over the total)."""
    return min(tiling.block_len, tiling.total) / max(1, tiling.total)


def launch_blocks(tiling, soc) -> tuple[int, int]:
    """(blocks the launch starts, how many the SoC has of them): AIVs for a vector kernel;
    for one that uses the cube, AICs (catlass' blockDim), each with ``aiv_ratio`` AIV
    clients: ceil(clients / ratio)."""
    cores = max(1, tiling.cores)
    if tiling.work.cube_macs:
        return -(-cores // max(1, tiling.work.aiv_ratio)), soc.ai_cores
    return cores, soc.vector_blocks


def device_startup_us(soc, blocks: int, capacity: int) -> float:
    """The device's start-up of a launch of ``blocks`` blocks where the SoC has ``capacity`` for
    that kind of kernel: ``startup_base_us + startup_all_cores_us * blocks / capacity`` (catlass'
    head cost of a kernel, 1 + 7 x blockDim / coreNum us on 910B; soc_profiles.def).

    >>> from tvm_ascend.soc import get_soc
    >>> soc = get_soc("Ascend910B1")
    >>> device_startup_us(soc, 24, 24), device_startup_us(soc, 6, 24)
    (8.0, 2.75)
    """
    share = min(1.0, max(1, blocks) / max(1, capacity))
    return soc.startup_base_us + soc.startup_all_cores_us * share


def end_to_end_us(kernel_times, submit_us: float) -> float:
    """Finish time of a sequence of launches submitted one by one into one stream.

    The host takes ``submit_us`` per launch and does not wait for the device: launch ``i`` is
    submitted at ``(i + 1) * submit_us`` and starts when it is submitted and the device is
    free (``kernel_times``: each launch's time on the device, start-up included). A
    device-bound sequence ends at the first submission plus the sum of its kernels; a
    host-bound one at ``n * submit_us`` plus its last kernel.

    >>> end_to_end_us([10.0, 10.0, 10.0], 2.0)       # device-bound: 2 + 30
    32.0
    >>> end_to_end_us([1.0, 1.0, 1.0], 5.0)          # host-bound: 3 x 5 + 1
    16.0
    """
    if submit_us < 0:
        raise ValueError(f"submit_us={submit_us} must be >= 0")
    device_free = 0.0
    for index, time_us in enumerate(kernel_times):
        device_free = max(device_free, (index + 1) * submit_us) + time_us
    return device_free


def _submit(soc) -> dict:
    return {"submit_low_us": soc.submit_low_us, "submit_high_us": soc.submit_high_us}


def _elem_rate(dtype_bytes: int) -> float:
    """Cube MAC rate relative to fp16: float runs at half rate (emulator README, "Cube")."""
    return 1.0 if dtype_bytes <= 2 else 0.5


def cube_bound_us(macs: float, dtype_bytes: int, soc) -> float:
    """Microseconds of ``macs`` multiply-adds on every AI core's cube at its peak (the cube
    part of a launch's roofline; float32 at half rate): a cube kernel's own bound.

    >>> from tvm_ascend.soc import get_soc
    >>> soc = get_soc("Ascend910B1")
    >>> round(cube_bound_us(soc.ai_cores * soc.cube_macs_per_cycle_fp16 * soc.clock_mhz, 2, soc))
    1
    """
    rate = soc.cube_macs_per_cycle_fp16 * _elem_rate(dtype_bytes)
    return macs / (rate * soc.ai_cores * soc.clock_mhz * 1e6) * 1e6


def _peaks(soc):
    clock = soc.clock_mhz * 1e6
    return clock, soc.gm_bandwidth_gbps * 1e9


def estimate_launch(gm_bytes: float, flops: float, soc, dtype_bytes: int = 2
                    ) -> KernelEstimate:
    """Estimate for a launch known only by its GM bytes and flops (a host op counted as if one
    device launch at the roofline, plus the start-up of a launch on every core).

    Parameters
    ----------
    gm_bytes : float
        Bytes read and written in GM.
    flops : float
        Floating-point operations (2 per multiply-add), counted at the cube's peak.
    soc : SocProfile
        Target SoC.
    dtype_bytes : int
        Element size; float32 runs the cube at half rate.

    Example
    -------
    >>> from tvm_ascend.soc import get_soc
    >>> estimate_launch(1 << 20, 1e6, get_soc("Ascend910B1")).bound
    'mte2'
    """
    if gm_bytes < 0 or flops < 0:
        raise ValueError(f"gm_bytes={gm_bytes} and flops={flops} must be >= 0")
    clock, bandwidth = _peaks(soc)
    mem_us = gm_bytes / bandwidth * 1e6
    cube_peak = soc.ai_cores * soc.cube_macs_per_cycle_fp16 * 2 * clock * _elem_rate(dtype_bytes)
    cube_us = flops / cube_peak * 1e6
    roofline = max(mem_us, cube_us)
    launch = device_startup_us(soc, soc.ai_cores, soc.ai_cores)
    bound = "launch" if roofline == 0 else ("mte2" if mem_us >= cube_us else "cube")
    return KernelEstimate(roofline + launch, roofline, mem_us, 0.0, cube_us, 0.0, launch,
                          cores=soc.ai_cores, gm_bytes=int(gm_bytes), flops=float(flops),
                          bound=bound, **_submit(soc), hbm_bytes=int(gm_bytes))


def l2_bytes(tiling) -> tuple[int, int]:
    """(read, written) GM bytes of ``tiling``'s kernel that L2 serves, as the timing model
    charges them: the tiles a mixed kernel passes between its cube and vector cores through
    the GM workspace (one small region per core, used again and again) and the operand
    blocks read again within L2's reach (the plan's ``l2_operand_bytes``, by the rule of
    ``schedules/l2_reuse.py``);
    the rest of its GM bytes are HBM traffic. An estimate of where bytes come from: no
    counter of the emulator or the device tells L2 hits apart.

    >>> from tvm_ascend.schedules.tiling import KernelWork, Tiling
    >>> t = Tiling("matmul", 4, 1, 4, 1, 4, 1, 0, 0, 1, 1000, 200,
    ...            work=KernelWork(workspace_read_bytes=300, l2_operand_bytes=100,
    ...                            workspace_write_bytes=50))
    >>> l2_bytes(t)
    (400, 50)
    """
    work = tiling.work
    return (min(tiling.gm_read_bytes, work.workspace_read_bytes + work.l2_operand_bytes),
            min(tiling.gm_write_bytes, work.workspace_write_bytes))


def zero_fill_us(nbytes: int, soc) -> float:
    """The device's time to zero ``nbytes`` of GM before a launch (aclrtMemsetAsync, a task
    of its own on the stream): a start-up (``startup_base_us``) and the bytes written at what
    HBM streams. ESTIMATE: no measured figure for a memset task; 0 for no bytes.

    >>> from tvm_ascend.soc import get_soc
    >>> round(zero_fill_us(1300 * 1000, get_soc("Ascend910B2")), 2)   # 1.3 MB at 1.3 TB/s
    2.0
    """
    if nbytes <= 0:
        return 0.0
    return soc.startup_base_us + nbytes / (soc.hbm_stream_gbps * 1e9) * 1e6


def _pipeline_cycles(stage_cycles: list[float], steps: int, double_buffered: bool) -> float:
    """Cycles of ``steps`` steps through the pipes: overlapped when double-buffered (fill once,
    then the slowest pipe per step), serialised when not."""
    per_step = [c / steps for c in stage_cycles]
    if double_buffered:
        return sum(per_step) + (steps - 1) * max(per_step)
    return steps * sum(per_step)


def _overlapped_cycles(stage_cycles: list[float], steps: int, round_tiles: int,
                       buffers: int = 2, gated: bool = False, panel: bool = False) -> float:
    """Cycles of ``steps`` base tiles through an asynchronous Matmul kernel, as the printed
    one runs them: rounds of ``round_tiles`` tiles, each started (``Iterate<false>``) once
    the AIV has fetched the last round's last tile; in a round the AIC computes its tiles
    back to back (``stage_cycles[0]``: operand loads overlapping the cube), and the AIV
    fetches tile i (``[1]``: MTE2 of the workspace slot and the epilogue's inputs) when the
    AIC has signalled it (tile i < 13) or ended the round (``ASYNC_EVENT_FETCHES``), runs its
    epilogue (``[2]``) and copies it out (``[3]``), each pipe one tile at a time, with at most
    ``buffers`` tiles in the UB (fetch of tile i waits for the copy-out of tile i - buffers).
    Rounds repeat alike: three are simulated and the rest extrapolated.

    ``gated``: the AIV's scalar unit waits for each row's reductions, so the fetch of tile i
    is issued only when tile i - 1's vector work is done, and the next round's
    ``Iterate<false>`` only when the last tile's vector work is done.

    ``panel``: each round is one asynchronous ``IterateAll<false>`` of a panel into one of two
    workspace slots (the matmul-rows tall form): every chunk's fetch waits for the whole round
    (``WaitIterateAll``); panels 0 and 1 are posted at the start and panel r + 1 when the AIV
    begins panel r, i.e. once panel r - 1's last chunk's vector work is done (gated), so the
    AIC computes panel r + 1 during panel r's epilogue. With ``buffers`` >= 2 the kernel
    issues chunk i + 1's copy before chunk i's epilogue (prefetch): a panel's second and later
    fetches wait for the vector work two chunks back, not one.

    ``stage_cycles`` are totals over the ``steps`` tiles.

    >>> _overlapped_cycles([40, 4, 4, 4], 4, 4)     # cube-bound: 4 x 10 + the last tile's AIV
    43.0
    >>> _overlapped_cycles([4, 40, 40, 40], 4, 4)   # two UB tiles: 30 cycles hold each
    71.0
    """
    per_step = [c / steps for c in stage_cycles]
    cube, fetch, vec, out = per_step
    tiles = max(1, min(round_tiles, steps))
    rounds = -(-steps // tiles)
    aic_free = fetch_free = vec_free = out_free = 0.0
    outs: list[float] = []
    vecs: list[float] = []  # each tile's vector work done
    ends = []
    posts = [0.0, 0.0]  # panel form: when each round's IterateAll<false> is posted
    prefetch = panel and buffers >= 2
    for r in range(min(rounds, 3)):
        if panel:
            start = max(aic_free, posts[r])
        else:
            start = max(aic_free, vec_free if gated else fetch_free)
        round_end = start + tiles * cube
        for i in range(tiles):
            ready = start + (i + 1) * cube \
                if i < ASYNC_EVENT_FETCHES - 1 and not panel else round_end
            held = outs[-buffers] if len(outs) >= buffers else 0.0
            back = 2 if prefetch and i >= 1 else 1  # the tile whose vector work gates this fetch
            gate = vecs[-back] if gated and len(vecs) >= back else 0.0
            fetch_free = max(ready, fetch_free, held, gate) + fetch
            vec_free = max(fetch_free, vec_free) + vec
            out_free = max(vec_free, out_free) + out
            outs.append(out_free)
            vecs.append(vec_free)
        aic_free = round_end
        # the panel after next is posted when the AIV begins the next one, after this
        # round's last vector work (the scalar unit waits for it where gated)
        posts.append(vec_free if gated else fetch_free)
        ends.append(out_free)
    if rounds > len(ends):
        step = ends[-1] - ends[-2] if len(ends) >= 2 else ends[-1]
        return ends[-1] + (rounds - len(ends)) * step
    return ends[-1]


def _flash_attention_pipeline(plan, steps: int, own_loads: float, cube: float, ratio: int,
                              aiv: float) -> float:
    """Cycles of the flash attention kernel's busiest AIC group (``attention_timing``): the
    AIC's per-block products from the cube cycles (both clients' in ``cube``: one client's is
    ``cube / ratio``, split evenly between QK^T and P @ V, whose MACs are alike) or from the
    client's part of the AIC's MTE2 or FIXPIPE ``own_loads`` where slower (the Matmul API
    double-buffers its operands; the pipes run side by side), and the client's own per-block work
    ``aiv`` (its MTE2, vector, scalar and MTE3 cycles). The simulation shares the AIC between
    the ``ratio`` clients itself."""
    per_block = steps * plan.attention_blocks
    product = max(cube / ratio, own_loads) / per_block / 2
    cycles = FlashBlockCycles(qk=product, pv=product, aiv=aiv / per_block)
    return flash_attention_cycles(steps, plan.attention_blocks, plan.round_tiles, cycles,
                                  clients=ratio)


def estimate_kernel(prim_func, tiling, soc, work: VectorWork | None = None) -> KernelEstimate:
    """Estimated time of one launch of the kernel ``prim_func`` tiled as ``tiling`` on ``soc``.

    Parameters
    ----------
    prim_func : tvm.tirx.PrimFunc
        The group's PrimFunc (scheduled or not); its TIR gives the vector work.
    tiling : Tiling
        The template's plan: its geometry (cores, tiles, buffers, GM bytes) and its
        ``work`` (``KernelWork``: steps, cube MACs, L2-served bytes, gathers, ...).
    soc : SocProfile
        Target SoC.
    work : VectorWork, optional
        Precomputed ``count_vector_work(prim_func, ...)`` (the emulator's counters, for one).

    Example
    -------
    >>> est = estimate_kernel(func, tiling, get_soc("Ascend910B1"))   # doctest: +SKIP
    >>> est.time_us >= est.roofline_us + est.launch_us                 # doctest: +SKIP
    True
    """
    plan = tiling.work
    work = work if work is not None else count_vector_work(
        prim_func, plan.per_output_element, plan.img2col_prologue)
    clock, bandwidth = _peaks(soc)
    stream = soc.hbm_stream_gbps * 1e9
    cores = max(1, tiling.cores)
    share = busiest_share(tiling)
    steps = max(1, plan.steps)
    double = tiling.buffer_num >= 2
    read, write = tiling.gm_read_bytes, tiling.gm_write_bytes
    # the bytes L2 serves (l2_bytes: workspace round trips, operand re-reads) move at the
    # core's MTE rate, the rest at most at the core's part of what HBM streams
    ws_read, ws_write = l2_bytes(tiling)
    core_hbm = stream / clock / cores

    def moved(hbm_bytes, l2_bytes, mte_rate):
        """Cycles of the busiest core's part of ``hbm_bytes`` from HBM and ``l2_bytes`` from
        L2, on a pipe that moves ``mte_rate`` bytes per cycle."""
        return share * (hbm_bytes / min(mte_rate, core_hbm) + l2_bytes / mte_rate)

    mte2 = moved(read - ws_read, ws_read, soc.mte2_bytes_per_cycle) \
        + (steps + plan.extra_copy_calls) * soc.mte_latency_cycles
    mte3 = moved(write - ws_write, ws_write, soc.mte3_bytes_per_cycle) \
        + steps * soc.mte_latency_cycles
    # a 1:2 mix: each client (AIV) shares its AIC with another, whose operand loads and cube
    # work take the same AIC's MTE2 and cube: per client step, both clients' share of them
    ratio = plan.aiv_ratio
    operand = min(read, plan.cube_operand_bytes)
    mte2 += (ratio - 1) * operand * share / soc.mte2_bytes_per_cycle
    # the matmul's operand loads (GM -> L1 -> L0, part of them L2 hits)
    l2_operand = min(operand, plan.l2_operand_bytes)
    operand_mte2 = moved(operand - l2_operand, l2_operand, soc.mte2_bytes_per_cycle) \
        + (ratio - 1) * operand * share / soc.mte2_bytes_per_cycle
    vec_bytes = work.weighted_ops * work.elem_bytes * share
    # vector work the template adds to the TIR's own ops (the conv's img2col: Gathers, and
    # contiguous ops on its offsets and slab)
    gathers = (plan.gather_elems * work.elem_bytes / GATHER_BYTES_PER_CYCLE
               + plan.template_vector_bytes / soc.vector_bytes_per_cycle
               + (plan.gather_calls + plan.template_vector_calls)
               * soc.vector_issue_cycles) * share
    # instructions the busiest core issues: each TIR op once per tile, row or epilogue step
    # as the printed loops run, plus the calls the printer adds around them
    instructions = work.ops_per_unit * plan.vector_repeats + plan.extra_vector_calls
    vector = (vec_bytes / soc.vector_bytes_per_cycle
              + instructions * soc.vector_issue_cycles + gathers)
    scalar = plan.scalar_elems * share * soc.scalar_cycles_per_elem
    macs = plan.cube_macs
    cube_rate = soc.cube_macs_per_cycle_fp16 * _elem_rate(work.elem_bytes)
    cube = macs * share / cube_rate * ratio
    if operand:
        # the Matmul API double-buffers its operand blocks (dbL0A/dbL0B, L1 depths): the AIC's
        # loads overlap its cube work; the tile then goes to the AIV (GetTensorC), whose loads,
        # epilogue and copy-out follow it: in step (synchronous), or as the asynchronous
        # rounds let them overlap the AIC's next tiles (``_overlapped_cycles``)
        stages = [max(operand_mte2, cube), mte2 - operand_mte2, vector + scalar, mte3]
    else:
        stages = [mte2, cube, vector + scalar, mte3]
    # a core's reads and writes share its part of what HBM streams, though MTE2 and MTE3
    # overlap as pipes
    hbm = share * (read - ws_read + write - ws_write) / core_hbm
    if plan.attention_blocks:
        # the AIC's own pipes: MTE2 loads its operands and the probabilities the AIV wrote
        # to the workspace (L2); its FIXPIPE writes the score and product tiles there (at the
        # MTE3 rate, ESTIMATE: no figure for the FIXPIPE's own). The AIV moves the rest.
        probs = share * (plan.workspace_write_bytes - plan.cube_workspace_bytes) \
            / soc.mte2_bytes_per_cycle
        fixpipe = share * plan.cube_workspace_bytes / soc.mte3_bytes_per_cycle
        loads = moved(operand - l2_operand, l2_operand, soc.mte2_bytes_per_cycle) + probs
        aiv = (mte2 - operand_mte2 - probs) + (mte3 - fixpipe) + vector + scalar
        pipeline = _flash_attention_pipeline(plan, steps, max(loads, fixpipe), cube, ratio, aiv)
    elif operand and plan.panel_chunks:
        pipeline = _overlapped_cycles(stages, steps, plan.panel_chunks, tiling.buffer_num,
                                      plan.scalar_gated, panel=True)
    elif operand and plan.round_tiles:
        pipeline = _overlapped_cycles(stages, steps, plan.round_tiles, tiling.buffer_num,
                                      plan.scalar_gated)
    else:
        pipeline = _pipeline_cycles(stages, steps, double)
    core_us = max(pipeline, hbm) / clock * 1e6
    # the roofline of the launch: every core at its peak, HBM at its nominal bandwidth and
    # the L2's bytes at every core's MTE rate
    served = ws_read + ws_write
    l2_peak = soc.mte2_bytes_per_cycle * max(soc.ai_cores, soc.vector_blocks) * clock
    mem_us = ((read + write - served) / bandwidth + served / l2_peak) * 1e6
    cube_us = cube_bound_us(macs, work.elem_bytes, soc)
    vec_us = work.weighted_ops * work.elem_bytes / (
        soc.vector_bytes_per_cycle * soc.vector_blocks * clock) * 1e6
    roofline = max(mem_us, cube_us, vec_us)
    kernel_us = max(core_us, roofline)
    # start-up grows with the blocks launched
    launch = device_startup_us(soc, *launch_blocks(tiling, soc))
    if core_us >= roofline:
        busiest = [mte2, cube, vector + scalar, mte3]
        bound = _PIPES[max(range(4), key=lambda i: busiest[i])] if core_us > 0 else "launch"
    else:
        bound = "roofline"
    fill = zero_fill_us(plan.zero_fill_bytes, soc)
    return KernelEstimate(
        kernel_us + launch + fill, roofline, mte2 / clock * 1e6, vector / clock * 1e6,
        cube / clock * 1e6, mte3 / clock * 1e6, launch, scalar_us=scalar / clock * 1e6,
        cores=cores, steps_per_core=steps, double_buffered=double, gm_bytes=read + write,
        flops=2.0 * macs + work.weighted_ops, bound=bound, **_submit(soc),
        zero_fill_us=fill, hbm_bytes=read + write - served, l2_bytes=served)


def estimate_model(kernels, soc) -> float:
    """The device's timeline of a sequence of launches, host submission hidden (the sum of
    their times): ``kernels`` is an iterable of (prim_func, tiling) pairs. ``end_to_end_us``
    on their times with ``soc.submit_low_us`` / ``submit_high_us`` adds the host's side."""
    return sum(estimate_kernel(func, tiling, soc).time_us for func, tiling in kernels)
