"""The kernel printers' base: what every printer answers, and the two kernel skeletons.

A printer turns one scheduled PrimFunc and its Tiling into AscendC. ``print`` writes the kernel
(the ``<symbol>_impl`` namespace with its ``TilingData`` and ``class Kernel``, then the
``extern "C"`` entry); the unit (``ascendc_printer.py``) and the launchers (``launcher.py``)
ask it the rest: ``extra_includes``, ``kernel_params``, ``emit_tiling_init``, ``kernel_mode``,
``block_dim`` and ``user_workspace_bytes``. ``KernelPrinter`` answers them as most kernels do.

``VectorKernelPrinter`` prints the scaffolding every vector kernel shares once: the
``TilingData`` of ``tiling_fields()`` (then ``emit_tiling_constants``), ``class Kernel`` with
Init and Process public and CopyIn / Compute / CopyOut private, ``Init``'s head (the fields it
keeps, this core's ``share`` of the work) and ``Process``'s tile ``loop``. A printer states what
differs as class attributes and fills the hooks, as tinygrad's ``Renderer`` subclasses do.
``CubeKernelPrinter`` does the same for the MIX kernels that drive Matmul objects (matmul,
conv2d, attention): types, ``class Kernel``, ``Init``'s head and the entry that registers the
Matmuls (``kernel_parts.emit_cube_entry``).

Example
-------
>>> class CopyPrinter(VectorKernelPrinter):                  # doctest: +SKIP
...     loop = TileLoop("tileLength", "len", "len")
...     copied_fields = ("tileLength",)
...     def tiling_fields(self): ...
...     def emit_buffers(self, buf): ...                     # and the other emit_* hooks
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

from ..schedules.analysis.tile_values import buffer_size
from .code_buffer import CodeBuffer
from .kernel_parts import (TilingField, cube_prelude, emit_cube_entry, emit_simple_entry,
                           emit_tiling_fields, ident, row_tiling_fields, tiling_values)


class KernelPrinter(abc.ABC):
    """One kernel's printer: ``print`` writes the kernel, the other members describe its
    launch. Subclasses are constructed as ``(symbol, scheduled PrimFunc, Tiling)``."""

    kernel_mode = "AIV_MODE"  # CANN's CPU-debug kernel mode: the cores the launch runs on

    def __init__(self, symbol: str, func, tiling):
        self.symbol, self.func, self.tiling = symbol, func, tiling
        self.params = list(func.params)
        self.names = {p.name: ident(p.name) for p in self.params}

    @staticmethod
    def extra_includes(soc) -> tuple:
        """Lines the unit's prelude holds once for the kernels of this printer on ``soc``."""
        return ()

    def print(self, buf: CodeBuffer) -> None:
        """The kernel: its ``<symbol>_impl`` namespace, then its ``extern "C"`` entry."""
        with buf.indent(f"namespace {self.symbol}_impl {{", "}  // namespace"):
            self.emit_types(buf)
            self.emit_class(buf)
        self.emit_entry(buf)

    def emit_class(self, buf: CodeBuffer) -> None:
        """``class Kernel``: Init, Process and the public members, then the private part."""
        with buf.indent("class Kernel {", "};"):
            buf.label("public:")
            buf.line("__aicore__ inline Kernel() {}")
            self.emit_init(buf)
            self.emit_process(buf)
            self.emit_public_members(buf)
            buf.line()
            buf.label("private:")
            self.emit_private(buf)
            self.emit_members(buf)

    def emit_public_members(self, buf: CodeBuffer) -> None:
        """Members after Process (the Matmul objects of a cube kernel)."""

    @abc.abstractmethod
    def emit_types(self, buf: CodeBuffer) -> None:
        """``TilingData`` and the constants and types the class uses."""

    @abc.abstractmethod
    def emit_init(self, buf: CodeBuffer) -> None:
        """``Init``: the tiling, this core's work, then ``emit_buffers``."""

    @abc.abstractmethod
    def emit_buffers(self, buf: CodeBuffer) -> None:
        """The rest of ``Init``: GM views, UB queues and buffers, values read once."""

    @abc.abstractmethod
    def emit_process(self, buf: CodeBuffer) -> None:
        """``Process``: this core's tiles or work items."""

    @abc.abstractmethod
    def emit_private(self, buf: CodeBuffer) -> None:
        """The private methods ``Process`` calls."""

    @abc.abstractmethod
    def emit_members(self, buf: CodeBuffer) -> None:
        """``class Kernel``'s data members."""

    @abc.abstractmethod
    def emit_entry(self, buf: CodeBuffer) -> None:
        """The ``extern "C"`` entry: the tiling from GM, Init, Process."""

    @abc.abstractmethod
    def emit_tiling_init(self, buf: CodeBuffer, var: str) -> None:
        """The launcher's ``TilingData`` named ``var``, with the plan's values."""

    @property
    def block_dim(self) -> int:
        """blockDim of the launch: the plan's cores."""
        return self.tiling.cores

    def user_workspace_bytes(self) -> int:
        """GM bytes the kernel keeps in its own part of the workspace (``GetUserWorkspace``)."""
        return 0

    def zero_outputs(self) -> bool:
        """Whether the launcher zeroes the outputs before each launch (a kernel that adds
        into them atomically: split-K); most kernels write every output byte."""
        return False

    def gm_args(self) -> str:
        """``Init``'s GM parameters, one per kernel parameter."""
        return ", ".join(f"GM_ADDR {self.names[p.name]}" for p in self.params)

    def entry_params(self) -> list[str]:
        """The C++ names of the entry's GM parameters, in order."""
        return [self.names[p.name] for p in self.params]

    @property
    def n_outputs(self) -> int:
        """GM outputs: the last ``n_outputs`` parameters (one unless a printer exports more)."""
        return 1

    def kernel_params(self) -> list:
        """(name, dtype, element count) of each GM parameter, in entry order (outputs last:
        ``n_outputs`` of them); a kernel tiled at run time counts them at the range's upper
        bound (its launcher counts each call's from the arguments' shapes)."""
        spec = self.shape_spec()
        if spec is not None:
            high = spec.high()
            return [(self.names[p.name], str(p.dtype), spec.numel(i, high))
                    for i, p in enumerate(self.params)]
        return [(self.names[p.name], str(p.dtype), buffer_size(p)) for p in self.params]

    def shape_spec(self):
        """The ``ShapeSpec`` (schedules/symbolic.py) of a kernel whose plan tiles it at run
        time (symbolic dimensions), None for a static kernel."""
        runtime = getattr(self.tiling.plan, "runtime", None)
        return runtime.shapes if runtime is not None else None

    def emit_tiling_body(self, buf: CodeBuffer, dims: dict) -> None:
        """The host tiling function's arithmetic (codegen/tiling_func.py): set ``out.tiling``'s
        fields and ``out.blockDim`` from the dimensions (``dims``: {name: C++ expression}).
        Only printers of templates that plan over symbolic dimensions define it."""
        from ..errors import CodegenError

        raise CodegenError(f"{self.symbol}: the {self.tiling.template} printer has no host "
                           "tiling function; its template does not tile symbolic shapes")


@dataclass(frozen=True)
class CoreShare:
    """How ``Init`` finds this core's share of the work: units ``[start, end)``, ``per_core``
    of them a core and ``total`` in all (fields of TilingData); ``length`` counts them, 0 on
    the cores left idle. Every field is a C++ name."""

    start: str
    end: str
    length: str
    per_core: str
    total: str

    def emit(self, buf: CodeBuffer) -> None:
        buf.line(f"{self.start} = tiling.{self.per_core} * AscendC::GetBlockIdx();")
        buf.line(f"uint64_t {self.end} = {self.start} + tiling.{self.per_core};")
        buf.line(f"if ({self.end} > tiling.{self.total}) {self.end} = tiling.{self.total};")
        buf.line(f"{self.length} = {self.end} > {self.start} ? {self.end} - {self.start} : 0;")


ELEMENT_SHARE = CoreShare("blockStart", "blockEnd", "blockLen", "blockLength", "totalLength")
ROW_SHARE = CoreShare("rowStart", "rowEnd", "blockRows", "blockRows", "rows")
UNIT_SHARE = CoreShare("unitStart", "unitEnd", "blockUnits", "blockUnits", "units")


@dataclass(frozen=True)
class TileLoop:
    """``Process``: this core's units in tiles of ``tile``; tile ``i`` of ``count`` units (the
    last may be short) runs ``CopyIn(i, count)``, ``Compute(compute_args)``,
    ``CopyOut(i, count)``."""

    tile: str
    count: str
    compute_args: str

    def emit(self, buf: CodeBuffer, length: str) -> None:
        buf.line(f"uint32_t tiles = ({length} + {self.tile} - 1) / {self.tile};")
        with buf.indent("for (uint32_t i = 0; i < tiles; ++i) {"):
            buf.line(f"uint64_t rest = {length} - static_cast<uint64_t>(i) * {self.tile};")
            buf.line(f"uint32_t {self.count} = rest < {self.tile} ? static_cast<uint32_t>(rest)"
                     f" : {self.tile};")
            buf.line(f"CopyIn(i, {self.count});")
            buf.line(f"Compute({self.compute_args});")
            buf.line(f"CopyOut(i, {self.count});")


class VectorKernelPrinter(KernelPrinter):
    """A kernel of the vector unit alone: the skeleton printed here, the parts that differ from
    the hooks (``tiling_fields``, ``emit_tiling_constants``, ``emit_buffers``,
    ``emit_copy_in``, ``emit_compute``, ``emit_copy_out``, ``emit_members``)."""

    share: CoreShare = ELEMENT_SHARE  # this core's units, as Init finds them
    copied_fields: tuple = ()  # TilingData fields Init keeps in members of the same name
    loop: TileLoop | None = None  # Process's tile loop; None where emit_process is the printer's
    keeps_tiling = False  # True: Init keeps the whole TilingData in the member ``tiling``

    def emit_types(self, buf: CodeBuffer) -> None:
        emit_tiling_fields(buf, self.symbol, self.tiling_fields())
        self.emit_tiling_constants(buf)
        buf.line()

    def emit_private(self, buf: CodeBuffer) -> None:
        self.emit_copy_in(buf)
        self.emit_compute(buf)
        self.emit_copy_out(buf)

    def emit_entry(self, buf: CodeBuffer) -> None:
        emit_simple_entry(buf, self.symbol, self.entry_params())

    def emit_init(self, buf: CodeBuffer) -> None:
        tiling = "t" if self.keeps_tiling else "tiling"
        with buf.indent(f"__aicore__ inline void Init({self.gm_args()}, "
                        f"const TilingData& {tiling}) {{"):
            if self.keeps_tiling:
                buf.line("tiling = t;")
            for name in self.copied_fields:
                buf.line(f"{name} = tiling.{name};")
            self.emit_share(buf)
            self.emit_buffers(buf)

    def emit_share(self, buf: CodeBuffer) -> None:
        """This core's share of the units (``share``)."""
        self.share.emit(buf)

    def emit_share_members(self, buf: CodeBuffer, *fields: str) -> None:
        """The members ``share`` sets, then the ``uint32_t`` members of ``fields``."""
        buf.line(f"uint64_t {self.share.start} = 0;")
        buf.line(f"uint64_t {self.share.length} = 0;")
        for name in fields:
            buf.line(f"uint32_t {name} = 0;")

    def emit_process(self, buf: CodeBuffer) -> None:
        with buf.indent("__aicore__ inline void Process() {"):
            self.loop.emit(buf, self.share.length)

    def emit_tiling_constants(self, buf: CodeBuffer) -> None:
        """The ``constexpr`` values after TilingData (strides, BUFFER_NUM, ...)."""

    @abc.abstractmethod
    def tiling_fields(self) -> list[TilingField]:
        """TilingData's fields with the values the host launcher writes."""

    @abc.abstractmethod
    def emit_copy_in(self, buf: CodeBuffer) -> None:
        """``CopyIn``: a tile's inputs from GM into the UB."""

    @abc.abstractmethod
    def emit_compute(self, buf: CodeBuffer) -> None:
        """``Compute``: the vector program over a tile."""

    @abc.abstractmethod
    def emit_copy_out(self, buf: CodeBuffer) -> None:
        """``CopyOut``: a tile of the output back to GM."""

    def tiling_values(self) -> dict:
        """{field: value} the host launcher writes into TilingData, in field order."""
        return tiling_values(self.tiling_fields())

    def emit_tiling_init(self, buf: CodeBuffer, var: str) -> None:
        fields = ", ".join(str(value) for value in self.tiling_values().values())
        buf.line(f"{self.symbol}_impl::TilingData {var}{{{fields}}};")


class RowKernelPrinter(VectorKernelPrinter):
    """A vector kernel over whole rows (row reduce, data movement): the rows split over the
    cores, tiles of ``tileRows`` rows of ``cols`` elements (``row_tiling_fields``)."""

    share = ROW_SHARE
    copied_fields = ("cols", "tileRows")
    loop = TileLoop("tileRows", "n", "i, n")

    def tiling_fields(self) -> list[TilingField]:
        return row_tiling_fields(self.tiling)


class CubeKernelPrinter(KernelPrinter):
    """A MIX kernel: the cube drives the Matmul objects ``matmuls``, the vector unit runs the
    epilogue. ``Init`` keeps the tiling and the pipe, the Matmul objects are the public members
    after Process, and the entry registers them; the printer gives ``emit_types`` (TilingData,
    the Matmul types), ``emit_buffers``, ``emit_process``, ``emit_public_members``,
    ``emit_private``, ``emit_members`` and ``emit_tiling_init``."""

    kernel_mode = "MIX_AIC_1_1"  # one AIV per AIC: the kernel's blocks are its AIC groups
    matmuls: tuple = (("mm", "cube"),)  # (member, TilingData's field) of each Matmul object

    extra_includes = staticmethod(cube_prelude)  # Matmul header + tile copies, once a unit

    def takes_user_workspace(self) -> bool:
        """Whether Init takes the user workspace (``GetUserWorkspace``) after its GM tensors."""
        return False

    def emit_entry(self, buf: CodeBuffer) -> None:
        emit_cube_entry(buf, self.symbol, self.entry_params(), list(self.matmuls),
                        self.kernel_mode, user_workspace=self.takes_user_workspace())

    def emit_init(self, buf: CodeBuffer) -> None:
        args = self.gm_args() + (", GM_ADDR userWorkspace" if self.takes_user_workspace() else "")
        with buf.indent(f"__aicore__ inline void Init({args}, const TilingData& t, "
                        "AscendC::TPipe* pipe) {"):
            buf.line("tiling = t;")
            self.emit_buffers(buf)


__all__ = ["KernelPrinter", "VectorKernelPrinter", "RowKernelPrinter", "CubeKernelPrinter",
           "CoreShare", "TileLoop", "ELEMENT_SHARE", "ROW_SHARE", "UNIT_SHARE"]
