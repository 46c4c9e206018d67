"""SoC profiles, read from the one data file shared with the AscendC emulator.

``contrib/ascendc_emu/soc_profiles.def`` is a C X-macro table; the emulator includes it and this
module parses it, so the emulator's UB limits and the planner's never disagree.

Example
-------
>>> from tvm_ascend.soc import get_soc
>>> get_soc("Ascend910B1").ub_bytes
196608
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import TargetError

_ROW = re.compile(r"^ASCEND_SOC\(([^)]*)\)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class SocProfile:
    """Hardware numbers of one Ascend SoC (sources cited in soc_profiles.def)."""

    name: str
    npu_arch: int
    ai_cores: int
    vector_cores: int
    ub_bytes: int
    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    max_live_buffers_per_position: int
    clock_mhz: float
    gm_bandwidth_gbps: float
    vector_lanes_fp16: int
    launch_overhead_us: float
    l2_bytes: int
    cube_macs_per_cycle_fp16: int
    mte2_bytes_per_cycle: float
    mte3_bytes_per_cycle: float
    vector_issue_cycles: int
    scalar_cycles_per_elem: float
    mte_latency_cycles: int
    hbm_stream_gbps: float

    @property
    def vector_bytes_per_cycle(self) -> int:
        """Bytes one vector unit consumes per cycle: ``vector_lanes_fp16`` halves (256 B)."""
        return 2 * self.vector_lanes_fp16

    @property
    def vector_blocks(self) -> int:
        """Blocks an AIV-only (vector) kernel may launch: AIVs on split 2201 chips, else cores."""
        return self.vector_cores if self.npu_arch == 2201 else self.ai_cores

    @property
    def has_data_copy_pad(self) -> bool:
        """DataCopyPad exists on 910B/A3 (2201), 310B (3002) and 950 (3510), not on 910A/310P."""
        return self.npu_arch in (2201, 3002, 3510)


def emulator_dir() -> Path:
    """Folder of the AscendC CPU emulation header (installed as package data or in the repo)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "contrib" / "ascendc_emu", here.parent / "contrib" / "ascendc_emu"):
        if (candidate / "soc_profiles.def").exists():
            return candidate
    raise FileNotFoundError(
        "AscendC emulator folder (soc_profiles.def) not found next to the package "
        f"({here}); reinstall tvm-ascend")


@functools.lru_cache(maxsize=None)
def soc_profiles() -> dict[str, SocProfile]:
    """All SoC profiles by name, parsed from soc_profiles.def."""
    text = (emulator_dir() / "soc_profiles.def").read_text()
    profiles = {}
    for match in _ROW.finditer(text):
        fields = [f.strip() for f in match.group(1).split(",")]
        name, rest = fields[0], fields[1:]
        ints = [int(v) for v in rest[:9]]
        floats = [float(v) for v in rest[9:11]]
        timing = (int(rest[13]), int(rest[14]), float(rest[15]), float(rest[16]), int(rest[17]),
                  float(rest[18]), int(rest[19]), float(rest[20]))
        profiles[name] = SocProfile(name, *ints, *floats, int(rest[11]), float(rest[12]),
                                    *timing)
    return profiles


def get_soc(name: str) -> SocProfile:
    """The profile of SoC ``name`` (ATC spelling, e.g. ``Ascend910B1``); case-insensitive."""
    table = soc_profiles()
    for key, profile in table.items():
        if key.lower() == str(name).lower():
            return profile
    raise TargetError(f"unknown --soc_version {name!r}; known: {', '.join(sorted(table))}")
