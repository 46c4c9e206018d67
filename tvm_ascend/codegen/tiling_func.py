"""Host tiling functions of kernels over symbolic shapes, and the launcher that calls them.

A kernel planned over a range (``schedules/symbolic.py``) prints the same AscendC as a static
one: it reads every extent from its ``TilingData``. What differs is the host side, as in
AscendC's TilingFunc: the launcher reads each symbolic dimension off an argument's shape,
checks it against its range (an error names the kernel, the dimension, the argument and the
range), and asks ``TilingFor`` for the tiling struct and blockDim of those sizes; the printer
writes the arithmetic (``emit_tiling_body``: the same as its template's ``tiling_at``), and
results are cached by shape (a ``std::map`` from the dimensions' values, behind a mutex). The
launcher also exports ``<symbol>__tiling(d0, ...)``: the struct's fields and blockDim as JSON,
so tests hold the C++ arithmetic equal to the Python plan at every size.

Example
-------
>>> emit_runtime_launcher(buf, "k0", printer)              # doctest: +SKIP
>>> "TilingFor(dims)" in buf.text()                        # doctest: +SKIP
True
"""
from __future__ import annotations

from ..kernel_record import TILING_SUFFIX
from .code_buffer import CodeBuffer
from .cpp_types import dtype_bytes
from .emulator_run import emit_emulator_run


def runtime_exports(kernel) -> list[str]:
    """The extra functions the unit of ``kernel`` (a ``ScheduledKernel``) exports: its
    tiling function's JSON form where it is tiled at run time, else none."""
    runtime = getattr(kernel.tiling.plan, "runtime", None)
    return [kernel.symbol + TILING_SUFFIX] if runtime is not None else []


def numel_expr(shape: tuple, dims: dict) -> str:
    """C++ element count of a parameter of ``shape`` (entries as text), the symbolic ones
    read from ``dims`` ({name: C++ expression})."""
    terms = [dims.get(entry, entry) for entry in shape]
    return " * ".join(f"static_cast<int64_t>({t})" for t in terms) or "1"


def emit_tiling_for(buf: CodeBuffer, symbol: str, printer, spec) -> None:
    """``LaunchTiling`` (tiling struct + blockDim), ``ComputeTiling`` (the printer's arithmetic)
    and ``TilingFor`` (the same, cached by the dimensions' values)."""
    impl = f"{symbol}_impl"
    n = len(spec.dims)
    with buf.indent("struct LaunchTiling {", "};"):
        buf.line(f"{impl}::TilingData tiling;")
        buf.line("int64_t blockDim;")
    with buf.indent("static LaunchTiling ComputeTiling(const int64_t* dims) {"):
        buf.line("LaunchTiling out{};")
        printer.emit_tiling_body(buf, {d.name: f"dims[{k}]" for k, d in enumerate(spec.dims)})
        buf.line("return out;")
    with buf.indent("static LaunchTiling TilingFor(const int64_t* dims) {"):
        buf.line("static std::mutex cacheMutex;")
        buf.line("static std::map<std::vector<int64_t>, LaunchTiling> cache;")
        buf.line(f"std::vector<int64_t> key(dims, dims + {n});")
        buf.line("std::lock_guard<std::mutex> lock(cacheMutex);")
        buf.line("auto found = cache.find(key);")
        buf.line("if (found != cache.end()) return found->second;")
        buf.line("LaunchTiling launch = ComputeTiling(dims);")
        buf.line("cache.emplace(key, launch);")
        buf.line("return launch;")
    args = ", ".join(f"int64_t d{k}" for k in range(n))
    with buf.indent(f"static tvm::ffi::String TilingJson({args}) {{"):
        buf.line(f"int64_t dims[{n}] = {{{', '.join(f'd{k}' for k in range(n))}}};")
        emit_range_checks(buf, symbol, spec, from_args=False)
        buf.line("LaunchTiling launch = TilingFor(dims);")
        parts = [f'"\\"{name}\\": " + std::to_string(launch.tiling.{name})'
                 for name in printer.tiling_values()]
        parts.append('"\\"blockDim\\": " + std::to_string(launch.blockDim)')
        buf.line("std::string text = std::string(\"{\") + " + ' + ", " + '.join(parts)
                 + ' + "}";')
        buf.line("return tvm::ffi::String(text);")


def emit_range_checks(buf: CodeBuffer, symbol: str, spec, from_args: bool) -> None:
    """Each dimension read (from its argument's shape where ``from_args``) and checked
    against its range: a size outside it is a ValueError naming all there is to know."""
    for k, dim in enumerate(spec.dims):
        where = f"argument {dim.param}, axis {dim.axis}"
        if from_args:
            buf.line(f"dims[{k}] = a{dim.param}.ndim() > {dim.axis} ? "
                     f"a{dim.param}.shape()[{dim.axis}] : -1;")
        with buf.indent(f"if (dims[{k}] < {dim.low} || dims[{k}] > {dim.high}) {{"):
            buf.line(f'TVM_FFI_THROW(ValueError) << "{symbol}: symbolic dimension {dim.name} '
                     f'= " << dims[{k}] << " ({where}) is outside its range '
                     f'{dim.low}~{dim.high} the kernel was compiled for";')


def emit_call_sizes(buf: CodeBuffer, symbol: str, printer, from_args: bool) -> None:
    """One call's sizes, as every launcher of a kernel tiled at run time starts: ``dims``
    (read off the arguments' shapes and checked against their ranges where ``from_args``,
    else the ranges' upper bounds: what an ACL-event timer runs at), ``numel<i>`` of every
    argument, ``launch`` (tiling struct and blockDim from ``TilingFor``) and ``tilingHost``."""
    spec = printer.shape_spec()
    n = len(spec.dims)
    if from_args:
        buf.line(f"int64_t dims[{n}];")
        emit_range_checks(buf, symbol, spec, from_args=True)
    else:
        highs = ", ".join(str(d.high) for d in spec.dims)
        buf.line(f"const int64_t dims[{n}] = {{{highs}}};  // the range's upper bound")
    names = {d.name: f"dims[{k}]" for k, d in enumerate(spec.dims)}
    for index in range(len(printer.kernel_params())):
        buf.line(f"int64_t numel{index} = {numel_expr(spec.shapes[index], names)};")
    buf.line("LaunchTiling launch = TilingFor(dims);")
    buf.line(f"{symbol}_impl::TilingData tilingHost = launch.tiling;")


def emit_runtime_launcher(buf: CodeBuffer, symbol: str, printer) -> None:
    """The emulator launcher of a kernel tiled at run time: as ``launcher.emit_launcher``
    prints for a static one, with every element count, the tiling struct and blockDim taken
    from the arguments' actual shapes."""
    spec = printer.shape_spec()
    params = printer.kernel_params()  # (name, dtype, numel at the upper bound), outputs last
    first_out = len(params) - printer.n_outputs
    args = ", ".join(f"tvm::ffi::TensorView a{i}" for i in range(len(params)))
    with buf.indent(f"namespace {symbol}_host {{", "}  // namespace"):
        emit_tiling_for(buf, symbol, printer, spec)
        with buf.indent(f"static void Launch({args}) {{"):
            emit_call_sizes(buf, symbol, printer, from_args=True)
            gm_names = []
            for index, (name, dtype, _) in enumerate(params):
                size = dtype_bytes(dtype)
                buf.line(f'tvm_ascend_rt::CheckArg(a{index}, "{symbol}", "{name}", '
                         f"numel{index}, {size * 8});")
                buf.line(f"uint8_t* gm{index} = tvm_ascend_rt::ToGm(a{index}, "
                         f"static_cast<size_t>(numel{index}) * {size}, "
                         f"{'false' if index >= first_out else 'true'});")
                gm_names.append(f"gm{index}")
            emit_emulator_run(buf, symbol, printer, gm_names, "launch.blockDim", {
                i: f"static_cast<size_t>(numel{i}) * {dtype_bytes(params[i][1])}"
                for i in range(first_out, len(params))})
    buf.line(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}, {symbol}_host::Launch);")
    buf.line(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}{TILING_SUFFIX}, {symbol}_host::TilingJson);")


__all__ = ["emit_call_sizes", "emit_range_checks", "emit_runtime_launcher", "emit_tiling_for",
           "numel_expr",
           "runtime_exports", "TILING_SUFFIX"]
