"""Parts shared by the kernel printers: C++ names for tensors, tiling fields, resident columns
and the two ``extern "C"`` entries (``kernel_printer.py`` holds the skeletons that use them).
Each function prints one construct."""
from __future__ import annotations

from dataclasses import dataclass

from .code_buffer import CodeBuffer
from .cpp_types import field_literal
from .templates import tile_copy_helpers


# Tensor names become C++ parameter and member names: these would not compile as such.
CPP_KEYWORDS = frozenset({
    "auto", "bool", "break", "case", "catch", "char", "class", "const", "continue", "default",
    "delete", "do", "double", "else", "enum", "explicit", "extern", "false", "float", "for",
    "friend", "goto", "if", "inline", "int", "long", "namespace", "new", "operator", "private",
    "protected", "public", "register", "return", "short", "signed", "sizeof", "static",
    "struct", "switch", "template", "this", "throw", "true", "try", "typedef", "typename",
    "union", "unsigned", "using", "virtual", "void", "volatile", "while", "half"})


# What the printers declare themselves (members, Init and entry parameters, locals), and the
# stems of those that end in a suffix a tensor's identifier takes (``cTile`` is ``c`` +
# ``Tile``, ``outQue`` ``out`` + ``Que``): a tensor named so would redeclare or shadow one of
# them. test_printer derives the set from the printers' sources and checks it is complete.
PRINTER_NAMES = frozenset("""
    a a2 aQue acc accBuf accLocal accQue aligned at avail b b2 bQue base batch before bits
    blockBuf blockEnd blockLen blockLength blockRows blockStart blockUnits blocks bottom burst
    bursts c c0 cQue cTile ch0 chunkCols chunks ci ciLo cmatrixInit cnt co0 col colBuf colElems
    colFor colGm colKey colOff cols copied copy count countBuf counts coutG couts cs curKv curM
    curN curQ device divisor dst elapsedMs epiBuf f fillValue first first0 first1 firstRow
    firstStep fit fmap fmapQue folded frac fracL1 fracL1Que fractals g groups h hi i i0 ih ihHi
    image img in inQue inRows inTile inner item itemsPerCore iw j jj k k0 kBase kChunk kHi kLo
    kc keepBase keepBits keepH kk kvOff kx ky landed last len lo m m16 mIdx mOff mTile margin
    maskBase maskF n n0 nOff nTaps nTile nb nbs now nt nt16 numel nz nzQue o off offs offsetBuf
    offsets offsetsFor oh oh0 oh1 on op out outGm outQue outT outTile outer over p p0 padded
    pads part partBuf pipe pitch pixels plane planesPer planesPerTile preBuf q qAt qOff r r0
    reach real reduce reducedBuf repRows repeats reps rest restM restN round roundM roundN row
    rowBuf rowEnd rowMax rowOff rowStart rowTaps rowTiles rows rowsPer rowsPerTile rowsQue s
    shift shifted singleM singleN slab slabBuf slabLead slabQue src stat step stride t t0 tail
    tap taps tile tileLength tileRows tiles tilesM tilesN tilesPerCore tiling tilingData tmpBuf
    top totalItems totalLength totalTiles totalUnits u unit unitEnd unitStart units unitsPerCore
    v vBase vBuf vRow valueBuf values w1 wFrac wRows whole work workBuf workspace ws wsElems wsGm
    bc chunk curRound panel panelElems panelRow rb roundOff
    cIn next slot
    kIdx kOff kSlice kSplits singleK
    diag kvEnd
    align block blockDim cores dims found perCore tileCap tilingHost total
    bound
    kSteps kTile size
    seqQ seqKv baseQ baseKv blocksQ roundKv kvBlocks dimSize
    gap leastGap hidden most maskT padMost
    gQue gTile
""".split())


def ident(name: str) -> str:
    """A C++ identifier for a TIR buffer name: never a keyword, never a name the printers
    declare themselves, never starting with a digit (ONNX tensor names are free text:
    ``long``, ``1``, ``c`` beside the product tile ``cTile``)."""
    text = "".join(ch if ch.isalnum() else "_" for ch in name)
    reserved = text in CPP_KEYWORDS or text in PRINTER_NAMES or text[:1].isdigit()
    return text + "_" if reserved else text


@dataclass(frozen=True)
class TilingField:
    """One field of a vector kernel's ``struct TilingData``: its type, name, the value the
    launcher writes and what it counts."""

    ctype: str
    name: str
    value: int
    comment: str = ""


def emit_tiling_fields(buf: CodeBuffer, symbol: str, fields: list[TilingField]) -> None:
    """``struct TilingData`` of ``fields``, each value checked against its type
    (``field_literal``: a value too large is refused, never truncated)."""
    width = max(len(f"{f.ctype} {f.name};") for f in fields) + 2
    with buf.indent("struct TilingData {", "};"):
        for f in fields:
            field_literal(symbol, f.name, f.ctype, f.value)
            decl = f"{f.ctype} {f.name};"
            buf.line(f"{decl:<{width}}// {f.comment}" if f.comment else decl)


def emit_field_assignments(buf: CodeBuffer, symbol: str, var: str, ctype: str,
                           values: dict) -> None:
    """``var.field = value;`` for each of ``values`` (a launcher filling a cube kernel's
    TilingData, fields such as ``cube.M``), every value checked against the fields' type."""
    for field, value in values.items():
        buf.line(f"{var}.{field} = {field_literal(symbol, field, ctype, value)};")


def row_tiling_fields(tiling) -> list[TilingField]:
    """The fields of the row kernels (row reduce, data movement): rows split over the cores,
    tiles of whole rows."""
    return [TilingField("uint64_t", "rows", tiling.total, "rows of the output"),
            TilingField("uint64_t", "blockRows", tiling.block_len,
                        "rows per core (the last core takes the rest)"),
            TilingField("uint32_t", "tileRows", tiling.tile_len, "rows per UB tile"),
            TilingField("uint32_t", "cols", tiling.cols, "elements per row")]


def tiling_values(fields: list[TilingField]) -> dict:
    """{name: value} of ``fields`` in field order: what the host launcher writes."""
    return {f.name: f.value for f in fields}


def emit_resident_columns(buf: CodeBuffer, names: list[str], ctype: str, count: str,
                          buffer_bytes: str, pipe: str = "pipe.") -> None:
    """Load each broadcast column (gamma, beta, bias) once into the UB; vector code reads it."""
    for n in names:
        buf.line(f"{n}Gm.SetGlobalBuffer((__gm__ {ctype}*){n}, {count});")
        buf.line(f"{pipe}InitBuffer({n}Res, {buffer_bytes});")
        buf.line(f"{n}Col = {n}Res.Get<{ctype}>();")
        buf.line(f"CopyGmToUb({n}Col, {n}Gm, {count});")
    if names:
        # Vector instructions read the resident columns: wait for MTE2 to land them.
        buf.line("AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(0);")
        buf.line("AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(0);")


def emit_simple_entry(buf: CodeBuffer, symbol: str, params: list[str]) -> None:
    """The kernel entry of a vector kernel: read the tiling struct, Init, Process."""
    args = ", ".join(f"GM_ADDR {p}" for p in params)
    impl = f"{symbol}_impl"
    with buf.indent(f'extern "C" __global__ __aicore__ void {symbol}({args}, '
                    "GM_ADDR workspace, GM_ADDR tiling) {"):
        buf.line(f"{impl}::TilingData tilingData = "
                 f"*reinterpret_cast<__gm__ {impl}::TilingData*>(tiling);")
        buf.line(f"{impl}::Kernel op;")
        buf.line(f"op.Init({', '.join(params)}, tilingData);")
        buf.line("op.Process();")


def cube_prelude(soc) -> tuple:
    """What a cube kernel needs once per unit: the Matmul API header and the ``CopyTileIn`` /
    ``CopyTileOut`` helpers for ``soc`` (with or without DataCopyPad)."""
    return ('#include "lib/matmul_intf.h"', tile_copy_helpers(soc.has_data_copy_pad))


# The task type a MIX kernel declares for the device compiler, per CPU-debug kernel mode.
TASK_TYPE_OF_MODE = {"MIX_MODE": "KERNEL_TYPE_MIX_AIC_1_2",
                     "MIX_AIC_1_1": "KERNEL_TYPE_MIX_AIC_1_1"}


def emit_cube_entry(buf: CodeBuffer, symbol: str, params: list[str],
                    matmuls: list[tuple[str, str]], kernel_mode: str,
                    user_workspace: bool = False) -> None:
    """The ``extern "C"`` entry of a kernel that drives Matmul objects: its task type (1:2 or
    1:1 mix, as ``kernel_mode`` says), system workspace, tiling from GM, idle clients return,
    one TPipe, every ``(member, tiling field)`` Matmul registered, then Init (given the user
    workspace after its GM arguments where ``user_workspace``) and Process."""
    impl = f"{symbol}_impl"
    args = ", ".join(f"GM_ADDR {p}" for p in params)
    with buf.indent(f'extern "C" __global__ __aicore__ void {symbol}({args}, '
                    "GM_ADDR workspace, GM_ADDR tiling) {"):
        buf.line(f"KERNEL_TASK_TYPE_DEFAULT({TASK_TYPE_OF_MODE[kernel_mode]});")
        buf.line("AscendC::SetSysWorkspace(workspace);")
        buf.line(f"{impl}::TilingData tilingData = "
                 f"*reinterpret_cast<__gm__ {impl}::TilingData*>(tiling);")
        buf.line(f"if (AscendC::GetBlockIdx() >= tilingData.{matmuls[0][1]}.usedCoreNum) "
                 "return;")
        buf.line("AscendC::TPipe pipe;")
        buf.line(f"{impl}::Kernel op;")
        objects = ", ".join(f"op.{member}, &tilingData.{field}" for member, field in matmuls)
        buf.line(f"REGIST_MATMUL_OBJ(&pipe, AscendC::GetSysWorkSpacePtr(), {objects});")
        workspace = ["AscendC::GetUserWorkspace(workspace)"] if user_workspace else []
        buf.line(f"op.Init({', '.join(params + workspace)}, tilingData, &pipe);")
        buf.line("op.Process();")
