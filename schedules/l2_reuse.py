"""What the L2 cache serves: one rule for every template's re-reads.

A kernel reads some GM bytes more than once: a matmul's operand panels once per output tile,
attention's K and V once per query block, a row longer than the UB once per pass (and a
broadcast column such as LayerNorm's gamma once per row and pass). The first read of a byte
comes from HBM; a later read finds it in L2 when the bytes the whole chip read since the
earlier one (the *reuse distance*) fit in the L2. The rule is all or nothing, as for a
cyclic walk under LRU: a walk over more than the cache holds evicts every block before its
next use. Templates compute the
distance of their walk (:func:`walk_distance`: the distinct bytes the working cores read
between two reads of one block) and give ``KernelWork.l2_operand_bytes``
from :func:`l2_served`; the timing model charges those at the L2 rate and the rest at HBM's.

The cube-to-vector workspace tiles of split chips are L2 traffic by the same rule: a small
region per core, written and read again at once (distance: the cores' regions).

ESTIMATE: no counter of the emulator or the device tells L2 hits apart. Checked against the
pto-isa GEMMs of ``benchmarks/calibration.py``: their 24 cores re-read operands at about
150 GB/s each (TLOAD busy 91-98% of the kernel), an L2 rate, up to 7680^3 whose operands
(236 MB) exceed the 192 MB L2 but whose walk's distance (6 A row blocks and 4 B panels of a
6 x 4 core grid: 126 MB) does not.

Example
-------
>>> from types import SimpleNamespace
>>> soc = SimpleNamespace(l2_bytes=192 << 20)
>>> l2_served(reread_bytes=1000, reuse_distance_bytes=100 << 20, soc=soc)
1000
>>> l2_served(reread_bytes=1000, reuse_distance_bytes=300 << 20, soc=soc)
0
"""
from __future__ import annotations


def l2_served(reread_bytes: int, reuse_distance_bytes: int, soc) -> int:
    """The bytes of ``reread_bytes`` (bytes read again after a first read) that ``soc``'s L2
    serves: all when ``reuse_distance_bytes`` (bytes the chip reads between two reads of one
    byte) fit in the L2, none when they do not."""
    if reread_bytes <= 0:
        return 0
    return int(reread_bytes) if reuse_distance_bytes <= soc.l2_bytes else 0


def walk_distance(streams) -> int:
    """The reuse distance of a walk the working cores run together, from ``streams``: pairs
    of (distinct blocks in flight, bytes of each block) the cores read in one pass between two
    reads of the same block. The cores start together and run the same walk, so a block that
    several of them read in the same pass is fetched once and counts once.

    >>> walk_distance([(6, 1280 * 7680 * 2), (4, 128 * 7680 * 2)])   # a 6 x 4 core grid
    125829120
    """
    return sum(max(0, int(count)) * max(0, int(size)) for count, size in streams)
