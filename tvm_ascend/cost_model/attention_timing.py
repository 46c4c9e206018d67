"""Timing of the pipelined (flash) attention kernel on a split chip, as the printed one runs.

Two AIV clients share one AIC (the 1:2 mix). Each client walks its work items (query blocks);
per item, per round of key blocks, it asks the AIC for the round's score tiles in one
asynchronous message (``Iterate<false>``): the AIC computes them back to back into the
client's workspace slots. For each key block the client waits for its tile (signalled as it is
produced: rounds hold fewer than ``ASYNC_EVENT_FETCHES`` tiles), runs its own per-block work
(fetch of the tile, mask, softmax, probabilities out, fetch of the product tile and the
rescaled accumulation: ``aiv`` cycles) and asks for the P @ V product synchronously: the AIC
serves it after whatever it was asked before (the other client's round, its product), and the
client waits for it. The AIC serves the requests in the order they arrive.

Simplification (ESTIMATE): the client's per-block work is charged before the product it asks
for (in the kernel the accumulation of block j's product follows it, right before block
j + 1's work: the same sequence except at an item's ends).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..schedules.tiling import ASYNC_EVENT_FETCHES

SIMULATED_ITEMS = 3  # items simulated per client; the rest repeat the last one's time


@dataclass(frozen=True)
class FlashBlockCycles:
    """Cycles of one key block of one work item of one client.

    ``qk`` and ``pv``: the AIC's time for the score tile and for the product tile (the cube's
    MACs, or the operand loads where they take longer: the Matmul API double-buffers them
    under the cube); ``aiv``: the client's own work on the block (its MTE2, vector, scalar
    and MTE3 time)."""

    qk: float
    pv: float
    aiv: float


def _client(items: int, blocks: int, round_blocks: int, cycles: FlashBlockCycles, ends: list):
    """One client's requests to the AIC as a generator: yields ("qk", at, tiles) and receives
    the tiles' finish times, yields ("pv", at) and receives the product's finish time; appends
    each item's finish time to ``ends``."""
    now = 0.0
    for _ in range(items):
        for first in range(0, blocks, round_blocks):
            tiles = min(round_blocks, blocks - first)
            done = yield ("qk", now, tiles)
            for i in range(tiles):
                ready = done[i] if i < ASYNC_EVENT_FETCHES - 1 else done[-1]
                now = max(now, ready) + cycles.aiv
                now = yield ("pv", now)
        ends.append(now)


def flash_attention_cycles(items: int, blocks: int, round_blocks: int,
                           cycles: FlashBlockCycles, clients: int = 2) -> float:
    """Cycles until the busiest AIC group's clients (``clients`` of them, ``items`` work items
    each, ``blocks`` key blocks an item, score tiles in rounds of ``round_blocks``) are done.
    ``SIMULATED_ITEMS`` items are simulated; the rest take the last one's time each.

    >>> c = FlashBlockCycles(qk=10, pv=10, aiv=5)
    >>> flash_attention_cycles(1, 2, 2, c, clients=1)  # tiles at 10, 20; pv 20-30, 35-45
    45.0
    >>> flash_attention_cycles(1, 2, 2, c)   # the other client's round and products between
    80.0
    >>> flash_attention_cycles(4, 4, 4, FlashBlockCycles(1, 1, 40))  # vector-bound: ~16 x 41
    665.0
    """
    if items <= 0 or blocks <= 0:
        return 0.0
    round_blocks = max(1, min(round_blocks, blocks))
    simulated = min(items, SIMULATED_ITEMS)
    ends = [[] for _ in range(clients)]
    gens = [_client(simulated, blocks, round_blocks, cycles, ends[c]) for c in range(clients)]
    pending = {c: next(g) for c, g in enumerate(gens)}
    aic_free = 0.0
    while pending:
        c = min(pending, key=lambda k: (pending[k][1], k))  # the AIC serves in arrival order
        request = pending[c]
        start = max(aic_free, request[1])
        if request[0] == "qk":
            done = [start + (i + 1) * cycles.qk for i in range(request[2])]
            aic_free, answer = done[-1], done
        else:
            aic_free = answer = start + cycles.pv
        try:
            pending[c] = gens[c].send(answer)
        except StopIteration:
            del pending[c]
    finish = []
    for item_ends in ends:
        last = item_ends[-1]
        step = item_ends[-1] - item_ends[-2] if len(item_ends) >= 2 else item_ends[-1]
        finish.append(last + (items - simulated) * step)
    return max(finish)


__all__ = ["FlashBlockCycles", "flash_attention_cycles"]
