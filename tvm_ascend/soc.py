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

import dataclasses
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
    l2_bytes: int
    cube_macs_per_cycle_fp16: int
    mte2_bytes_per_cycle: float
    mte3_bytes_per_cycle: float
    vector_issue_cycles: int
    scalar_cycles_per_elem: float
    mte_latency_cycles: int
    hbm_stream_gbps: float
    # a launch: the device's start-up (base + all_cores x the share of the blocks it uses) and
    # the host's submission, as the low and the high end of the measured range
    startup_base_us: float
    startup_all_cores_us: float
    submit_low_us: float
    submit_high_us: float

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
    return parse_profiles(text, str(emulator_dir() / "soc_profiles.def"))


# each column's type, in the order of soc_profiles.def (SocProfile's fields after ``name``)
_COLUMN_TYPES = tuple(f.type for f in dataclasses.fields(SocProfile))[1:]


def parse_profiles(text: str, where: str = "soc_profiles.def") -> dict[str, SocProfile]:
    """The SoC profiles of the ASCEND_SOC(...) rows in ``text`` (a soc_profiles.def), by name.

    A row with another number of columns than SocProfile has fields (an edit or a merge that
    added or dropped one) is an error naming the row, never a profile with shifted columns.

    >>> row = "ASCEND_SOC(X, 2201" + ", 1" * 23 + ")"
    >>> parse_profiles(row)["X"].submit_high_us
    1.0
    """
    profiles = {}
    for match in _ROW.finditer(text):
        fields = [f.strip() for f in match.group(1).split(",")]
        name, rest = fields[0], fields[1:]
        if len(rest) != len(_COLUMN_TYPES):
            raise TargetError(f"{where}: the row of {name} has {len(fields)} columns, not the "
                              f"{len(_COLUMN_TYPES) + 1} the header comment lists")
        values = [float(v) if kind == "float" else int(v) for kind, v in zip(_COLUMN_TYPES, rest)]
        profiles[name] = SocProfile(name, *values)
    return profiles


def get_soc(name: str) -> SocProfile:
    """The profile of SoC ``name`` (ATC spelling, e.g. ``Ascend910B1``); case-insensitive."""
    table = soc_profiles()
    for key, profile in table.items():
        if key.lower() == str(name).lower():
            return profile
    raise TargetError(f"unknown --soc_version {name!r}; known: {', '.join(sorted(table))}")
