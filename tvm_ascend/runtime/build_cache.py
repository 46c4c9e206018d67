"""The whole-build cache: a model compiled before, with the same configuration by the same
compiler, is not planned again.

The compile cache of ``module.py`` keys each compiled library by its kernels' source and host
module, so a rebuild skips g++ but still imports, plans and prints the model (tens of seconds
for a BERT). This cache keys the *inputs* of ``build`` instead:

* the ONNX model: every node, input, output, opset and initializer (one tensor at a time, so
  models over protobuf's 2 GB message limit hash too);
* the ``CompileConfig`` after environment overrides (the dump and cache folders aside), with
  the contents of the files it names (switch file, fusion plan, tuning database);
* the weights passed as ``params``;
* the compiler itself: every source file of the package, its templates, the emulator headers
  and the cost model, plus the TVM and ONNX versions.

An entry is written when the build's library is first compiled (``export_library`` or the
first ``run``), beside that library: ``builds/<key>.json`` with the library's cache path, its
size and sha256, and the build's metadata (report, kernel sources); a lookup checks the
library against them (``artifacts.verify_library``), so a truncated or overwritten library is
built again, never loaded. A hit returns a module over the cached library
without importing or planning anything. Builds that write dumps, and Relax modules passed
directly, are not cached (the dumps are the point of such a build; a Relax module has no
stable serialisation to key on). ``CompileConfig(build_cache=False)`` or
``TVM_ASCEND_BUILD_CACHE=0`` turns the cache off; ``op_compiler_cache_mode="force"`` rebuilds
and overwrites entries, ``"disable"`` neither reads nor writes them.

Example
-------
>>> key = build_key(model, None, config)                        # doctest: +SKIP
>>> lookup(key, default_cache_dir())                             # doctest: +SKIP
(PosixPath('.../<library>.so'), {...})
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
from pathlib import Path

from ..errors import ModelLoadError
from .artifacts import Digest, file_lock, verify_library, write_atomic

logger = logging.getLogger("tvm_ascend")

BUILDS_FOLDER = "builds"
LOCK = ".lock"  # held while an entry of the cache (a library, a build) is written
_NOT_KEYED = ("cache_dir", "dump_graph", "dump_path", "build_cache", "op_compiler_cache_mode")
_SOURCE_SUFFIXES = (".py", ".h", ".def", ".ubj", ".json")


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """Digest of everything that decides what a build produces, besides its inputs."""
    import onnx
    import tvm

    from ..soc import emulator_dir

    digest = hashlib.sha256(f"tvm {tvm.__version__} onnx {onnx.__version__}".encode())
    # located, not imported: the templates live outside the package folder in a source tree
    templates = importlib.util.find_spec("tvm_ascend.schedules")
    roots = {Path(__file__).resolve().parents[1], Path(emulator_dir()).resolve()}
    if templates is not None and templates.origin:
        roots.add(Path(templates.origin).resolve().parent)
    files = sorted({f.resolve() for root in roots for f in root.rglob("*")
                    if f.is_file() and f.suffix in _SOURCE_SUFFIXES
                    and "__pycache__" not in f.parts})
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _model_digest(model, digest) -> None:
    graph = model.graph
    digest.update(f"ir {model.ir_version}".encode())
    for part in (*model.opset_import, *model.functions, *graph.node, *graph.input,
                 *graph.output, *graph.sparse_initializer):
        digest.update(part.SerializeToString(deterministic=True))
    for tensor in graph.initializer:  # one at a time: the whole model may exceed 2 GB
        digest.update(tensor.SerializeToString(deterministic=True))


def _file_digest(path, digest) -> None:
    path = Path(path)
    if path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(str(child.relative_to(path)).encode())
            digest.update(child.read_bytes())
    elif path.is_file():
        digest.update(path.read_bytes())
    else:
        digest.update(b"<missing>")


def build_key(model, params, config) -> str | None:
    """The cache key of ``build(model, params=params, config=config)``, or None when the build
    is not cached (a Relax module, dumps on, or the cache switched off or disabled).

    Example
    -------
    >>> build_key(onnx_model, None, CompileConfig())                # doctest: +SKIP
    '5f2c...'
    """
    import onnx

    if (not config.build_cache or config.dump_graph or config.op_compiler_cache_mode == "disable"
            or not isinstance(model, onnx.ModelProto)):
        return None
    digest = hashlib.sha256(compiler_digest().encode())
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in _NOT_KEYED}
    digest.update(json.dumps(fields, sort_keys=True, default=str).encode())
    for name in ("fusion_switch_file", "fusion_plan_file", "tuning_database"):
        if getattr(config, name):
            _file_digest(getattr(config, name), digest)
    if config.planner_model.endswith((".json", ".ubj")):  # a retrained model, by its bytes
        _file_digest(config.planner_model, digest)
    for name in sorted(params or {}):
        value = params[name]
        array = value.numpy() if hasattr(value, "numpy") else value
        digest.update(f"{name} {array.dtype} {array.shape}".encode())
        digest.update(array.tobytes())
    _model_digest(model, digest)
    return digest.hexdigest()[:32]


def _entry_path(key: str, cache_dir) -> Path:
    return Path(cache_dir) / BUILDS_FOLDER / f"{key}.json"


def lookup(key: str | None, cache_dir, mode: str = "enable") -> tuple[Path, dict] | None:
    """(library path, metadata) of an earlier build with ``key``, or None.

    An entry whose library has been removed from the cache is a miss; one whose library no
    longer matches the size and sha256 the entry recorded (truncated, overwritten) is a miss
    with a warning, and the build that follows writes the entry again. Only the cache mode
    ``"enable"`` reads entries (``"force"`` rebuilds and overwrites, ``"disable"`` neither
    reads nor writes).

    Example
    -------
    >>> lookup(build_key(model, None, config), cache_dir)           # doctest: +SKIP
    """
    if key is None or mode != "enable":
        return None
    path = _entry_path(key, cache_dir)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        library = Path(entry["library"])
        metadata = entry["metadata"]
        recorded = Digest(int(entry["size"]), str(entry["sha256"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not library.is_file():
        return None
    try:
        actual = verify_library(library)
    except ModelLoadError as err:
        logger.warning("build cache entry %s: %s; building the model again", path.name, err)
        return None
    if actual != recorded:
        logger.warning("build cache entry %s: library '%s' does not match the sha256 recorded "
                       "with the entry (overwritten since); building the model again",
                       path.name, library)
        return None
    return library, metadata


def record(key: str | None, library: Path, metadata: dict, cache_dir) -> None:
    """Remember that the build with ``key`` produced ``library`` (already in the compile
    cache), with the library's size and sha256. A cache that cannot be written is a warning,
    never a failed build.

    Example
    -------
    >>> record(key, cached_library, lib.metadata, cache_dir)        # doctest: +SKIP
    """
    if key is None:
        return
    path = _entry_path(key, cache_dir)
    try:
        digest = verify_library(library)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"library": str(library), "size": digest.size, "sha256": digest.sha256,
                 "metadata": metadata}
        with file_lock(Path(cache_dir) / LOCK):
            write_atomic(path, json.dumps(entry))
    except (OSError, ModelLoadError) as err:
        logger.warning("build cache entry %s not written: %s", path, err)
