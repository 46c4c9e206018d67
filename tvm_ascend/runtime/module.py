"""AscendModule: the built model. Runs, profiles, exports to one ``.so``, loads back anywhere.

Example
-------
>>> lib = tvm_ascend.build("model.onnx", target="ascend")     # doctest: +SKIP
>>> outs = lib.run({"x": x})                                  # doctest: +SKIP
>>> lib.export_library("model.so")                            # doctest: +SKIP
>>> again = tvm_ascend.load("model.so")                       # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ..errors import DeviceRuleError, ExportError, ModelLoadError, ToolchainError
from ..kernel_record import TILING_SUFFIX
from . import build_cache
from .artifacts import (append_trailer, check_output_path, copy_atomic, file_lock, publish,
                        staging_dir, verify_library)
from .profile_files import check_profile_folder, write_profile
from .toolchain import (default_cache_dir, discard_emulator_runtime, emulator_compile_options,
                        runtime_in)
from .weights import append_weights, read_weights

logger = logging.getLogger("tvm_ascend.runtime")


def _load_verified(path: Path):
    """dlopen a library after checking it is whole: loading a truncated one kills the process."""
    verify_library(path)
    return tvm.runtime.load_module(str(path))


class FusionReport:
    """The fusion report a built library carries (JSON keys documented in partition/report)."""

    def __init__(self, data: dict):
        self._data = data

    def to_json(self) -> dict:
        return dict(self._data)

    def __str__(self) -> str:
        from ..partition.report import report_table

        return report_table(self._data)


class AscendModule:
    """A compiled model: host code (TVM VM) plus AscendC kernels (CPU-emulated here)."""

    def __init__(self, executable=None, metadata: dict | None = None, library_path=None,
                 cache_key: str | None = None, cache_dir=None, build_key: str | None = None,
                 cache_mode: str = "enable", weights: list | None = None):
        self._executable = executable
        # main's trailing parameters (runtime/weights.py); None: read them from the library
        self._weights = weights
        self.metadata = dict(metadata or {})
        self._library_path = Path(library_path) if library_path else None
        self._cache_key = cache_key
        self._build_key = build_key  # runtime/build_cache.py: recorded once the library exists
        self._cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self._cache_mode = cache_mode  # CompileConfig.op_compiler_cache_mode
        self._lib = None
        self._vm = None

    # ---- information --------------------------------------------------------------------------
    @property
    def soc_version(self) -> str:
        return self.metadata.get("soc_version", "")

    @property
    def input_names(self) -> list[str]:
        return list(self.metadata.get("inputs", []))

    def kernel_sources(self) -> dict[str, str]:
        """{kernel name: standalone AscendC source} of every NPU kernel."""
        return dict(self.metadata.get("kernel_sources", {}))

    def fusion_report(self) -> dict:
        """Every group, the rule that formed it, and every op kept on the host with the reason."""
        return dict(self.metadata.get("report", {}))

    @property
    def report(self) -> "FusionReport":
        """The fusion report: ``lib.report.to_json()``, ``print(lib.report)``."""
        return FusionReport(self.fusion_report())

    # ---- building and loading -------------------------------------------------------------------
    def _compile_options(self) -> list[str]:
        return emulator_compile_options(self.soc_version or "Ascend910B1", self._cache_dir)

    def export_library(self, path) -> str:
        """Write one shared library holding host code and kernels; returns its path.

        The library is built in a staging folder under the cache and renamed into place, so a
        failed or killed build leaves nothing at ``path``; it ends in the trailer that ``load``
        checks. A ``path`` that is a directory, or whose folder cannot be created or written,
        is an ExportError naming it.
        """
        path = check_output_path(path)
        if self._library_path is None and self._executable is None:
            raise ModelLoadError("this module holds neither an executable nor a library")
        library = self.compile()  # a no-op once built: build() compiled it already
        with staging_dir(self._cache_dir) as staging:
            staged = staging / "model.so"
            verify_library(library)
            shutil.copyfile(library, staged)
            verify_library(staged)  # a copy made while the source changed under it is no copy
            try:
                publish(staged, path)
            except OSError as err:
                raise ExportError(f"cannot write the library to '{path}': "
                                  f"{err.strerror}") from err
        return str(path)

    def _compile_into(self, staged: Path) -> None:
        """g++ the library to ``staged`` (its folder holds the temporaries) and seal it with the
        trailer. A runtime object the linker rejects is built again, once."""
        for attempt in (1, 2):
            options = self._compile_options()
            try:
                self._executable.export_library(str(staged), options=options,
                                                workspace_dir=str(staged.parent))
                break
            except Exception as err:  # noqa: BLE001 - TVM wraps compiler failures in RuntimeError
                runtime = runtime_in(options)
                if attempt == 1 and runtime is not None and _names(str(err), runtime):
                    logger.warning("the linker rejected the emulator runtime %s; building it "
                                   "again", runtime)
                    discard_emulator_runtime(runtime)
                    continue
                raise ToolchainError(f"compiling the kernels for {staged.name} failed",
                                     ["g++"] + options, str(err)) from err
        append_weights(staged, self._weights or [])
        append_trailer(staged)

    def _cache_path(self) -> Path | None:
        if not self._cache_key:
            return None
        flags = hashlib.sha256(" ".join(self._compile_options()).encode()).hexdigest()[:16]
        # the options name the runtime object, whose file name carries the headers' digest
        return self._cache_dir / f"{self._cache_key}-{flags}.so"

    def _cached_library(self) -> Path | None:
        """The compiled library in the cache, checked whole; None when there is none, when the
        cache mode does not read it, or when it is damaged (a warning: it is built again)."""
        if self._cache_mode != "enable":
            return None
        path = self._cache_path()
        if path is None or not path.exists():
            return None
        try:
            verify_library(path)
        except ModelLoadError as err:
            logger.warning("compile cache: %s; building it again", err)
            return None
        return path

    def _store_in_cache(self, built: Path) -> Path | None:
        """Copy a sealed library into the compile cache; its path there, or None."""
        path = self._cache_path() if self._cache_mode != "disable" else None
        if path is None:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with file_lock(self._cache_dir / build_cache.LOCK):
                copy_atomic(built, path)
        except OSError as err:  # a read-only cache must not break a build
            logger.warning("compile cache %s not written: %s", path, err)
            return None
        build_cache.record(self._build_key, path, self.metadata, self._cache_dir)
        return path

    def compile(self) -> Path:
        """Compile the kernels (g++ against the emulator) now, unless the compile cache holds
        them; ``build`` calls it, so a kernel that does not compile shows at build time (and
        is planned again without it) rather than at the first ``run`` or ``export_library``,
        which then use this library. Returns its path: in the cache, or, where no cache keeps
        it (disabled or not writable), a private copy removed with the module. Raises
        ToolchainError with the compiler's output.

        Example
        -------
        >>> lib.compile()                                             # doctest: +SKIP
        PosixPath('.../compile_cache/<key>.so')
        """
        if self._library_path is not None:
            return self._library_path
        cached = self._cached_library()
        if cached is not None:
            build_cache.record(self._build_key, cached, self.metadata, self._cache_dir)
        else:
            with staging_dir(self._cache_dir) as staging:
                staged = staging / "model.so"
                self._compile_into(staged)
                cached = self._store_in_cache(staged)
                if cached is None:  # compiled once either way: run and export read this copy
                    private = Path(tempfile.mkdtemp(prefix="tvm_ascend_"))
                    weakref.finalize(self, shutil.rmtree, private, True)
                    cached = Path(shutil.move(str(staged), str(private / "model.so")))
        self._library_path = cached
        return cached

    def _ensure_loaded(self):
        if self._vm is not None:
            return
        library = self.compile()
        self._lib = _load_verified(library)
        self._vm = relax.VirtualMachine(self._lib, tvm.cpu())
        if self._weights is None:
            self._weights = read_weights(library)

    @classmethod
    def load(cls, path) -> "AscendModule":
        """Load a library written by ``export_library`` (in this or any other process)."""
        path = Path(path)
        if not path.exists():
            raise ModelLoadError(f"library {str(path)!r} does not exist")
        verify_library(path)  # before dlopen: a truncated library would kill the process
        try:
            lib = tvm.runtime.load_module(str(path))
            meta_fn = lib.get_function("ascend_metadata_json", query_imports=True)
        except Exception as err:  # noqa: BLE001
            raise ModelLoadError(f"{str(path)!r} is not a tvm-ascend library: {err}") from err
        if meta_fn is None:
            raise ModelLoadError(f"{str(path)!r} is not a tvm-ascend library (no metadata)")
        metadata = json.loads(str(meta_fn()))
        module = module_class(metadata)(metadata=metadata, library_path=path,
                                        weights=read_weights(path))
        module._lib = lib
        module._vm = relax.VirtualMachine(lib, tvm.cpu())
        return module

    # ---- running ------------------------------------------------------------------------------
    def _ordered_inputs(self, inputs) -> list:
        names = self.input_names
        if isinstance(inputs, dict):
            missing = [n for n in names if n not in inputs]
            unknown = [n for n in inputs if n not in names]
            if missing or unknown:
                raise ValueError(f"inputs must be exactly {names}; missing {missing}, "
                                 f"unknown {unknown}")
            values = [inputs[n] for n in names]
        else:
            values = list(inputs)
            if len(values) != len(names):
                raise ValueError(f"expected {len(names)} inputs {names}, got {len(values)}")
        # np.ascontiguousarray would make a 0-d input 1-d (a scalar Clip bound, a Gemm bias)
        arrays = [np.asarray(v, order="C") for v in values]
        self._check_signature(arrays)
        self._check_index_values(arrays)
        return [tvm.runtime.tensor(a) for a in arrays]

    def _check_signature(self, arrays: list[np.ndarray]) -> None:
        """Each input against the shape and dtype it was compiled for (``metadata
        ["input_specs"]``, a library built before they were recorded has none), before the VM
        sees it: the VM's own checks say 'Check failed: ... match_cast error', and a size
        outside a compiled range overruns the buffers planned for its upper bound."""
        ranges = self.metadata.get("dim_ranges", {})
        sizes: dict[str, tuple[int, str]] = {}  # dynamic size -> (value, the input that set it)
        for spec, array in zip(self.metadata.get("input_specs", []), arrays):
            name, shape, dtype = spec["name"], spec["shape"], spec["dtype"]
            if shape is None:
                continue
            expected = _describe_shape(shape, ranges) + f" {dtype}"
            if array.ndim != len(shape) or any(isinstance(want, int) and got != want
                                               for got, want in zip(array.shape, shape)):
                raise ValueError(f"input {name!r} has shape {tuple(array.shape)}; the model "
                                 f"expects {expected}")
            if str(array.dtype) != dtype:
                raise ValueError(f"input {name!r} has dtype {array.dtype}; the model expects "
                                 f"{expected} (convert it with .astype({dtype!r}))")
            for axis, (got, want) in enumerate(zip(array.shape, shape)):
                if isinstance(want, str):
                    _check_dynamic(name, axis, got, want, ranges, sizes)

    def _check_index_values(self, arrays: list[np.ndarray]) -> None:
        """The inputs a Gather reads a table with (``metadata["index_inputs"]``): each value
        inside its table."""
        by_name = dict(zip(self.input_names, arrays))
        for table in self.metadata.get("index_inputs", []):
            if table["input"] in by_name:
                _check_indices(table["input"], by_name[table["input"]], table)

    def run(self, inputs) -> list[np.ndarray]:
        """Run the model; ``inputs`` is {name: array} or a list in input order."""
        self._ensure_loaded()
        args = self._ordered_inputs(inputs)
        function, weights = self._entry(args)
        try:
            result = self._vm[function](*args, *weights)
        except Exception as err:  # noqa: BLE001 - kernel errors arrive as RuntimeError
            if "DeviceRuleError" in str(err):
                raise DeviceRuleError(str(err)) from err
            raise
        if isinstance(result, tvm.runtime.Tensor):
            return [result.numpy()]
        return [r.numpy() for r in result]

    def _profile_report(self) -> dict:
        """The report whose groups the profile files describe each launch with."""
        return self.fusion_report()

    def _entry(self, args: list) -> tuple[str, list]:
        """The VM function that runs ``args`` (the inputs, checked) and the weights it takes
        after them (one ``main`` here; runtime/gears.py picks a gear's)."""
        return "main", self._weights

    def kernel_tiling(self, kernel: str, *sizes: int) -> dict:
        """The tiling struct's fields and blockDim that the host tiling function of
        ``kernel`` (a kernel tiled at run time: symbolic dimensions) fills for the symbolic
        dimensions' ``sizes``, in the order its plan names them; a size outside its range is
        a ValueError naming the kernel, the dimension and the range.

        Example
        -------
        >>> lib.kernel_tiling("ascend_k0_fused_add", 7)                  # doctest: +SKIP
        {'totalLength': 112, 'blockLength': 8, 'tileLength': 8, 'blockDim': 14}
        """
        self._ensure_loaded()
        try:
            function = self._lib.get_function(kernel + TILING_SUFFIX, query_imports=True)
        except AttributeError:
            function = None
        if function is None:
            raise ValueError(f"kernel {kernel!r} has no host tiling function (it is not a "
                             "kernel tiled at run time, or not in this library)")
        return json.loads(str(function(*[int(s) for s in sizes])))

    def profile(self, reset: bool = True, output=None) -> list[dict]:
        """Emulator counters of each kernel launch since the last reset (GM bytes, vector ops).

        ``output``: a folder (made if missing) to also write msprof-style files of these
        launches into, as ``msprof --output`` does: ``op_summary.csv`` (one row per launch,
        msprof's column names, every time the timing model's ESTIMATE and labelled so) and
        ``trace_view.json`` (a Chrome trace with a track per pipe: open it in
        https://ui.perfetto.dev). See ``runtime/profile_files.py``. A folder that is a file or
        cannot be written is an ExportError naming it.

        Example
        -------
        >>> lib.run({"x": x})                                           # doctest: +SKIP
        >>> launches = lib.profile(output="prof")                       # doctest: +SKIP
        >>> sorted(p.name for p in Path("prof").iterdir())              # doctest: +SKIP
        ['op_summary.csv', 'trace_view.json']
        """
        if output is not None:
            check_profile_folder(output)  # before the counters are reset: a bad folder loses none
        self._ensure_loaded()
        records = json.loads(str(self._lib.get_function("ascend_profile_json",
                                                        query_imports=True)()))
        if reset:
            self._lib.get_function("ascend_profile_reset", query_imports=True)()
        if output is not None:
            write_profile(output, records, self._profile_report())
        return records


def _names(output: str, runtime: Path) -> bool:
    """Whether a failed link's ``output`` complains about ``runtime`` (beyond listing it in the
    command line it echoes)."""
    return any(str(runtime) in line and not line.lstrip().startswith(("Command line", "command"))
               for line in output.splitlines())


def _describe_shape(shape: list, ranges: dict) -> str:
    """``(n, 4)`` / ``(2~8, 4)``: an expected shape as a user reads it."""
    dims = [f"{ranges[d][0]}~{ranges[d][1]}" if isinstance(d, str) and d in ranges
            else "?" if d is None else str(d) for d in shape]
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _check_dynamic(name: str, axis: int, got: int, size: str, ranges: dict, sizes: dict) -> None:
    """A dynamic dimension: within its compiled range, and equal in every input naming it."""
    if size in ranges and not ranges[size][0] <= got <= ranges[size][1]:
        low, high = ranges[size]
        raise ValueError(f"input {name!r} dimension {axis} ({size}) is {got}; the model was "
                         f"compiled for {low}~{high} (--input_shape); build it with a range "
                         "that holds this size")
    if size in sizes and sizes[size][0] != got:
        raise ValueError(f"input {name!r} dimension {axis} ({size}) is {got}, but input "
                         f"{sizes[size][1]!r} gave {size} = {sizes[size][0]}; inputs that "
                         "share a dimension name must agree")
    sizes.setdefault(size, (got, name))


def _check_indices(name: str, array: np.ndarray, table: dict) -> None:
    """The values of an input that a Gather reads a table with: inside the table (ONNX's
    -rows..rows-1), since neither TVM's host Gather nor a kernel checks them (a read past
    the table is a segfault or garbage)."""
    rows = table["rows"]
    if array.size == 0 or not np.issubdtype(array.dtype, np.integer):
        return
    bad = (array < -rows) | (array >= rows)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"input {name!r} holds {int(array[where])} at {where}; it indexes "
                         f"the {rows}-row table {table['table']!r} ({table['op']} "
                         f"{table['node']!r}), so its values must lie in {-rows}..{rows - 1}")


def module_class(metadata: dict) -> type:
    """The module class of a library's ``metadata``: GearedModule for a build with gears."""
    if metadata.get("gears"):
        from .gears import GearedModule  # a subclass of AscendModule: imported when needed
        return GearedModule
    return AscendModule


def load(path) -> AscendModule:
    """Load a model exported with ``AscendModule.export_library``; the file is checked whole
    (ELF headers, the tvm-ascend trailer's size and sha256) before it is loaded, and a
    truncated, damaged or foreign file is a ModelLoadError naming it."""
    return AscendModule.load(path)
