"""Tiling plans: frozen data that the printer obeys and the cost model reads."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import tvm

# Shared by every template. The annotation marks the loop whose iterations are AI cores.
CORE_LOOP_ANNOTATION = "ascend.block_idx"
# UB kept free for API scratch (8 KB) and the CV-fusion reserve (256 B): ascendc.md section 6.1.
UB_RESERVED_BYTES = 8192 + 256
BLOCK_BYTES = 32  # DataCopy granularity and UB alignment
SUPPORTED_DTYPES = ("float32", "float16")
# the cube's fractal side: M and N of its operands (and K of fp16) are padded to it
FRACTAL = 16


def dtype_bytes(dtype) -> int:
    """Bytes per element of ``dtype``."""
    return tvm.runtime.DataType(str(dtype)).bits // 8


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pieces(extent: int, size: int) -> list[int]:
    """Sizes of the consecutive pieces of ``size`` that cut an axis of ``extent`` (the last
    one shorter)."""
    return [min(size, extent - start) for start in range(0, extent, size)]


def knob_grid(knobs_cls, all_cores: int, cores: list, sizes: list) -> list:
    """The tuner's grid of a template whose knobs are (cores, a tile size, double_buffer):
    the defaults first, then every (buffering, core count, size), a core count equal to
    ``all_cores`` spelled None (the default), without repeats.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class K:
    ...     cores: int = None
    ...     size: int = None
    ...     double_buffer: bool = True
    >>> len(knob_grid(K, 8, [8, 4], [None, 64]))
    8
    """
    space = [knobs_cls()]
    for double in (True, False):
        for n in cores:
            for size in sizes:
                knobs = knobs_cls(None if n == all_cores else n, size, double)
                if knobs not in space:
                    space.append(knobs)
    return space


def round_up(a: int, b: int) -> int:
    """``a`` rounded up to a multiple of ``b``."""
    return ceil_div(a, b) * b


@dataclass(frozen=True)
class Tiling:
    """How one kernel is split over AI cores and UB tiles.

    ``block_len`` units per core (the last core gets the rest), ``tile_len`` units per UB tile,
    where a unit is an element (elementwise) or a row of ``cols`` elements (row templates);
    ``buffer_num`` 2 for double buffering; ``ub_bytes`` is exactly what InitBuffer reserves.
    """

    template: str
    total: int
    cores: int
    block_len: int
    tile_len: int
    tiles_per_core: int
    buffer_num: int
    temp_buffers: int
    ub_bytes: int
    ub_capacity: int
    gm_read_bytes: int
    gm_write_bytes: int
    cols: int = 1  # elements per row for row templates (``total`` then counts rows)
    params: dict = field(default_factory=dict)  # template-specific sizes (matmul base tiles)

    def __post_init__(self):
        assert self.cores >= 1 and self.tile_len >= 1, self
        assert self.block_len == self.tiles_per_core * self.tile_len, self
        assert (self.cores - 1) * self.block_len < self.total <= self.cores * self.block_len, self
        assert self.ub_bytes <= self.ub_capacity, self

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Tiling":
        return Tiling(**json.loads(text))
