"""Tiling plans: frozen data that the printer obeys and the cost model reads."""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import asdict, dataclass, fields

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


# CANN's Matmul client waits on an event for the first 14 fetches of an asynchronous round
# (INC_PROCESS_CHECK, kfc_comm.h: the AIC signals tiles 1..13 and the end of the round, as many
# as its event counter holds), so from tile 13 on a fetch waits for the whole round.
ASYNC_EVENT_FETCHES = 14


@dataclass(frozen=True)
class KernelWork:
    """What one kernel does, as its template's plan counts it: the timing model's only input
    besides the Tiling's geometry (cores, tiles, buffers, GM bytes) and the TIR's vector ops.

    Whole-kernel counts: ``cube_macs`` (MACs issued on the cube, fractal padding included);
    ``cube_operand_bytes`` (GM bytes the cube's operand loads read, part of the Tiling's
    ``gm_read_bytes``) and ``l2_operand_bytes`` (those of them that are re-reads served by L2);
    ``workspace_read_bytes`` / ``workspace_write_bytes`` (GM bytes that go between the cube
    and the vector cores through the GM workspace, which stays in L2); ``gather_elems`` /
    ``gather_calls`` (vector Gathers the template adds, e.g. the conv's img2col) and
    ``template_vector_bytes`` / ``template_vector_calls`` (other vector work it adds:
    img2col offsets and slab copies); ``scalar_elems`` (elements moved on the scalar unit).

    Busiest-core counts, as the printed loops run: ``steps`` (pipeline steps: UB tiles, row
    chunks, or cube base tiles), ``vector_repeats`` (times each of the TIR's vector ops is
    issued), ``extra_vector_calls`` (calls the printer adds around them: the column fills that
    repeat a broadcast column over a block of rows, one Brcb per column of row scalars).

    How the TIR's vector ops are counted (``cost_model.vector_work``): ``per_output_element``
    when the template inlines every block into the output's (each op runs once per output
    element); ``img2col_prologue`` when the blocks before the product are the template's own
    img2col (counted above, not as vector ops).

    ``aiv_ratio``: vector cores per cube core the kernel runs with (2 on 910B's 1:2 mix); two
    clients share one cube core's MTE2 and cube time.

    ``round_tiles``: base tiles in each asynchronous Matmul round (``Iterate<false>``: the AIC
    computes them ahead into the GM workspace while the AIV, double-buffered, runs the epilogue
    and copy-out of the ones before); 0 where the kernel iterates synchronously.
    ``panel_chunks``: UB chunks of rows the AIV runs over each ``IterateAll`` panel of the
    product (the matmul-rows template's tall form: the AIC computes a whole panel into the GM
    workspace, then the AIV streams it through the UB); 0 where none.
    ``scalar_gated``: the AIV's scalar unit waits for each row's reductions (ReduceSum read
    back with V_S), so it issues the next tile's fetch only after this tile's vector work.

    ``extra_copy_calls``: GM -> UB copies the busiest core issues beyond one a step (a
    residual streamed in chunks of rows: one a chunk), each paying the MTE latency.

    ``attention_blocks``: key blocks per work item (their mean, rounded up, where a causal
    mask lets items skip some) of the pipelined (flash) attention kernel,
    whose score tiles come in asynchronous rounds of ``round_tiles`` and whose P @ V products
    are synchronous calls on the AIC the two clients share (``cost_model.attention_timing``);
    0 elsewhere. ``cube_workspace_bytes``: of the workspace bytes written, those the cube core
    writes (the score and product tiles; the rest, the probabilities, the AIV writes and the
    AIC reads back): the flash timing charges each to its side; 0 where not told apart.

    ``zero_fill_bytes``: GM bytes the launcher zeroes before the launch (split-K's C, which
    the slices add into atomically: aclrtMemsetAsync on the stream).

    ``a + b`` is the work of ``a`` then ``b`` in one kernel: counts add, the ratio and the
    counting flags are the kernel's own and must agree; ``KernelWork()`` is the zero.

    >>> (KernelWork(steps=2, cube_macs=10) + KernelWork(steps=1, scalar_elems=3)).steps
    3
    """

    steps: int = 0
    vector_repeats: int = 0
    extra_vector_calls: int = 0
    cube_macs: int = 0
    cube_operand_bytes: int = 0
    l2_operand_bytes: int = 0
    workspace_read_bytes: int = 0
    workspace_write_bytes: int = 0
    gather_elems: int = 0
    gather_calls: int = 0
    template_vector_bytes: int = 0
    template_vector_calls: int = 0
    scalar_elems: int = 0
    aiv_ratio: int = 1
    per_output_element: bool = False
    img2col_prologue: bool = False
    round_tiles: int = 0
    extra_copy_calls: int = 0
    panel_chunks: int = 0
    scalar_gated: bool = False
    attention_blocks: int = 0
    cube_workspace_bytes: int = 0
    zero_fill_bytes: int = 0

    _KERNEL_OWN = ("aiv_ratio", "per_output_element", "img2col_prologue", "round_tiles",
                   "panel_chunks", "scalar_gated", "attention_blocks")

    def __add__(self, other: "KernelWork") -> "KernelWork":
        values = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name in self._KERNEL_OWN:
                default = f.default
                if mine != default and theirs != default and mine != theirs:
                    raise ValueError(f"KernelWork.{f.name}: {mine} + {theirs} in one kernel")
                values[f.name] = theirs if mine == default else mine
            else:
                values[f.name] = mine + theirs
        return KernelWork(**values)

    @staticmethod
    def from_dict(values: dict) -> "KernelWork":
        return KernelWork(**values)


# template name -> its plan class (TemplatePlan subclasses register themselves)
PLAN_TYPES: dict = {}


@dataclass(frozen=True)
class TemplatePlan:
    """Base of the typed plans: what one template decided for one kernel, beyond the Tiling's
    geometry (base tiles, the img2col method, row chunks, ...), frozen, with one JSON form.

    A template defines its plan as ``@dataclass(frozen=True) class ConvPlan(TemplatePlan,
    template="conv2d")``; the printer and the tests read its fields, never string keys, and
    ``Tiling.from_json`` finds the class again by the template's name. Tuples, nested plans
    and ``X | None`` fields come back from JSON as they went in.

    >>> @dataclass(frozen=True)
    ... class DemoPlan(TemplatePlan, template="demo"):
    ...     rows: int
    ...     pad: tuple = (0, 0)
    >>> DemoPlan.from_dict(json.loads(json.dumps(asdict(DemoPlan(4, (1, 2)))))).pad
    (1, 2)
    """

    template: typing.ClassVar[str] = ""

    def __init_subclass__(cls, template: str = "", **kwargs):
        super().__init_subclass__(**kwargs)
        if template:
            cls.template = template
            PLAN_TYPES[template] = cls

    @classmethod
    def from_dict(cls, values: dict):
        return _dataclass_from_json(cls, values)

    @property
    def planned_data_copy_pad(self):
        """True/False where the plan chose the copies for a SoC with/without DataCopyPad (the
        unit's shared copy helpers must be that SoC's), None where it did not."""
        return getattr(self, "data_copy_pad", None)

    def cube_dims(self) -> tuple:
        """(m, n, k, base_m, base_n, single_m, single_n) of the cube's product, for the cost
        model's features; zeros where the kernel has none (cube plans override it)."""
        return (0,) * 7


def _dataclass_from_json(cls, values: dict):
    """The dataclass ``cls`` of its ``asdict`` form, each field read as its type says."""
    hints = typing.get_type_hints(cls)
    return cls(**{name: _from_json_value(hints.get(name), value)
                  for name, value in values.items()})


def _from_json_value(hint, value):
    """``value`` read back from JSON as the field type ``hint`` says (tuples, nested plans)."""
    if value is None or hint is None:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is not type(None):
                return _from_json_value(arg, value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        # a nested plan's own tuples and dataclasses are read by their types too
        return _dataclass_from_json(hint, value)
    if origin is tuple or hint is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json_value(args[0], v) for v in value)
        if args:
            return tuple(_from_json_value(a, v) for a, v in zip(args, value))
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    return value


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
    work: KernelWork = KernelWork()  # what the kernel does, for the timing model
    plan: TemplatePlan | None = None  # the template's typed decisions, for its printer

    def __post_init__(self):
        assert self.cores >= 1 and self.tile_len >= 1, self
        assert self.block_len == self.tiles_per_core * self.tile_len, self
        assert (self.cores - 1) * self.block_len < self.total <= self.cores * self.block_len, self
        assert self.ub_bytes <= self.ub_capacity, self

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Tiling":
        return Tiling.from_dict(json.loads(text))

    @staticmethod
    def from_dict(values: dict) -> "Tiling":
        """The Tiling of ``asdict(tiling)`` (a fusion report's ``tiling``)."""
        values = dict(values)
        values["work"] = KernelWork.from_dict(values.get("work", {}))
        if values.get("plan") is not None:
            values["plan"] = PLAN_TYPES[values["template"]].from_dict(values["plan"])
        return Tiling(**values)
