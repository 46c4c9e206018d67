"""The kernels of a geared build: every gear's scheduled kernels, those printed alike kept once.

Two gears often share kernels: a classifier head behind a global pool sees the same shapes at
every image size, a branch on a static input the same at every gear. A kernel is identified by
what it compiles to: its printed body and launcher with a neutral name (the provenance
comments, which name the group, are left out), so equal kernels are compiled and stored once
and every gear's call goes to the one copy.

Naming: a kernel keeps the symbol of the first gear it appears in; a different kernel that
would take a symbol already used gets ``__g<gear>`` appended.

Example
-------
>>> kernels = gear_kernels([kernels_of_gear0, kernels_of_gear1])      # doctest: +SKIP
>>> kernels.symbols[1]["ascend_k2_matmul"]                            # doctest: +SKIP
'ascend_k2_matmul'
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from .ascendc_printer import ScheduledKernel, kernel_printer
from .code_buffer import CodeBuffer
from .launcher import emit_launcher

_NEUTRAL = "ascend_gear_kernel"


@dataclass(frozen=True)
class GearKernels:
    """The kernels stored once (``unique``, with their final symbols) and, per gear, its
    kernels' symbols as planned -> as stored (``symbols[gear]``)."""

    unique: tuple
    symbols: tuple  # ({planned symbol: stored symbol}, ...), one per gear

    @property
    def shared(self) -> int:
        """Kernels used by more than one gear."""
        users: dict = {}
        for mapping in self.symbols:
            for stored in set(mapping.values()):
                users[stored] = users.get(stored, 0) + 1
        return sum(1 for n in users.values() if n > 1)


def kernel_key(kernel: ScheduledKernel) -> str:
    """sha256 of what ``kernel`` compiles to: its body and launcher printed under a neutral
    name."""
    neutral = ScheduledKernel(_NEUTRAL, kernel.prim_func, kernel.tiling, {})
    printer = kernel_printer(neutral)
    buf = CodeBuffer()
    printer.print(buf)
    emit_launcher(buf, _NEUTRAL, printer, printer.block_dim)
    return hashlib.sha256(buf.text().encode()).hexdigest()


def gear_kernels(per_gear: list[list[ScheduledKernel]]) -> GearKernels:
    """Deduplicate the kernels of every gear (``per_gear[i]``: gear i's kernels)."""
    by_key: dict[str, ScheduledKernel] = {}
    taken: set = set()
    symbols = []
    for gear, kernels in enumerate(per_gear):
        mapping = {}
        for kernel in kernels:
            key = kernel_key(kernel)
            if key not in by_key:
                symbol = kernel.symbol if kernel.symbol not in taken \
                    else f"{kernel.symbol}__g{gear}"
                taken.add(symbol)
                by_key[key] = dataclasses.replace(kernel, symbol=symbol)
            mapping[kernel.symbol] = by_key[key].symbol
        symbols.append(mapping)
    return GearKernels(tuple(by_key.values()), tuple(symbols))
