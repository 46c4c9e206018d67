"""The files the runtime writes, written so that a reader can trust them.

* **Libraries carry a trailer.** Every ``.so`` tvm-ascend writes (``export_library``, the
  compile cache) ends, after its ELF image and its weights section (``runtime/weights.py``),
  in 56 bytes: the sha256 and the size of everything before them, and a magic word. dlopen
  ignores bytes after an ELF image; a reader checks the trailer *before* loading, because
  dlopen of a truncated library kills the process with SIGBUS instead of raising. A library
  without a trailer is told apart from a truncated one by its ELF headers.
* **Other cached files carry a side record** (``<file>.sha256``: digest and size), checked
  before the file is used.
* **Writes are atomic and never leave a temporary beside their target**: a library is built
  in a staging folder under the cache (``tmp/<pid>@<host>@...``; a killed build's folder is
  swept by the next build on that host) and renamed into place; only when the target is on
  another file system is it copied next to the target first and renamed.
* **Writers of one cache serialise** on ``fcntl.flock`` lock files.

Example
-------
>>> append_trailer(Path("model.so"))          # doctest: +SKIP
Digest(size=254328, sha256='5f2c...')
>>> verify_library(Path("model.so"))          # doctest: +SKIP
Digest(size=254328, sha256='5f2c...')
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import socket
import struct
import tempfile
from pathlib import Path
from typing import NamedTuple

from ..errors import ExportError, ModelLoadError

MAGIC = b"tvm-ascend-lib1\0"
_TRAILER = struct.Struct("<32sQ16s")  # sha256 of the image, size of the image, MAGIC
TRAILER_BYTES = _TRAILER.size
STAGING = "tmp"
_CHUNK = 1 << 20
_SHT_NOBITS = 8


class Digest(NamedTuple):
    """Size and sha256 of a file (of a library's ELF image, for a library)."""

    size: int
    sha256: str


def sha256_of(path: Path, limit: int | None = None) -> str:
    """sha256 of the first ``limit`` bytes of ``path`` (all of it when None)."""
    digest = hashlib.sha256()
    left = os.path.getsize(path) if limit is None else limit
    with open(path, "rb") as handle:
        while left > 0:
            chunk = handle.read(min(_CHUNK, left))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def append_trailer(path: Path) -> Digest:
    """Append the trailer that ``verify_library`` checks to the library at ``path``."""
    digest = Digest(os.path.getsize(path), sha256_of(path))
    with open(path, "ab") as handle:
        handle.write(_TRAILER.pack(bytes.fromhex(digest.sha256), digest.size, MAGIC))
    _VERIFIED.pop(_stat_key(path), None)
    return digest


_VERIFIED: dict[tuple, Digest] = {}  # stat of a library already checked -> its digest


def _stat_key(path: Path) -> tuple:
    st = os.stat(path)
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


def verify_library(path) -> Digest:
    """The digest of a library written by tvm-ascend, checked without loading it.

    Raises ModelLoadError, naming the file, for a file that is not a shared library, a
    truncated one, one whose bytes changed since it was written, or one another tool wrote.
    """
    path = Path(path)
    try:
        key = _stat_key(path)
        if key in _VERIFIED:
            return _VERIFIED[key]
        size = key[3]
        with open(path, "rb") as handle:
            head = handle.read(64)
            handle.seek(max(0, size - _TRAILER.size))
            tail = handle.read(_TRAILER.size)
    except OSError as err:
        raise ModelLoadError(f"library '{path}' cannot be read: {err.strerror}") from err
    if head[:4] != b"\x7fELF":
        raise ModelLoadError(f"'{path}' is not a shared library (it does not begin with the "
                             "ELF magic number); give a library written by export_library or "
                             "'tvm-ascend compile'")
    if len(tail) == _TRAILER.size and tail.endswith(MAGIC):
        sha, image, _ = _TRAILER.unpack(tail)
        if image != size - _TRAILER.size or sha256_of(path, image) != sha.hex():
            raise ModelLoadError(f"library '{path}' does not match the sha256 recorded when it "
                                 "was written (it was overwritten or damaged since); export it "
                                 "again")
        _VERIFIED[key] = Digest(image, sha.hex())
        return _VERIFIED[key]
    end = _elf_end(path, head, size)
    if end is None or end > size:
        raise ModelLoadError(f"library '{path}' is truncated (its ELF headers reach past its "
                             f"{size} bytes); it cannot be loaded: export or copy it again")
    if end < size:
        raise ModelLoadError(f"library '{path}' is truncated or damaged: {size - end} bytes "
                             "follow its ELF image but are not the trailer tvm-ascend ends its "
                             "libraries with; export or copy it again")
    raise ModelLoadError(f"'{path}' is a shared library not written by tvm-ascend (it has no "
                         "tvm-ascend trailer); load a library written by export_library or "
                         "'tvm-ascend compile' (one written by an older tvm-ascend must be "
                         "exported again)")


def _elf_end(path: Path, head: bytes, size: int) -> int | None:
    """Where the ELF image in ``path`` ends by its headers, or None when they lie past the end
    of the file (it was cut short)."""
    if len(head) < 64 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    order = "<" if head[5] == 1 else ">"
    if head[4] == 2:  # ELF64
        shoff, = struct.unpack_from(order + "Q", head, 0x28)
        entsize, count = struct.unpack_from(order + "HH", head, 0x3A)
        layout = struct.Struct(order + "4xI16xQQ")  # sh_type, sh_offset, sh_size
    else:
        shoff, = struct.unpack_from(order + "I", head, 0x20)
        entsize, count = struct.unpack_from(order + "HH", head, 0x2E)
        layout = struct.Struct(order + "4xI8xII")
    table_end = shoff + entsize * count
    if shoff == 0 or table_end > size or entsize < layout.size:
        return None
    with open(path, "rb") as handle:
        handle.seek(shoff)
        table = handle.read(entsize * count)
    end = table_end
    for index in range(count):
        kind, offset, length = layout.unpack_from(table, index * entsize)
        if kind != _SHT_NOBITS:
            end = max(end, offset + length)
    return end


def write_digest(path: Path, recorded_as: Path | None = None) -> Digest:
    """Record ``path``'s size and sha256 in the side file ``<recorded_as>.sha256`` (of
    ``path`` itself by default; a temporary records the name it is about to take)."""
    digest = Digest(os.path.getsize(path), sha256_of(path))
    write_atomic(_side(recorded_as or path), f"{digest.sha256} {digest.size}\n")
    return digest


def matches_digest(path: Path) -> bool | None:
    """Whether ``path`` matches its side record; None when it has none."""
    try:
        sha, size = _side(path).read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return None
    return os.path.getsize(path) == int(size) and sha256_of(path) == sha


def discard(path: Path) -> None:
    """Remove a cached file and its side record (missing ones are fine)."""
    for victim in (path, _side(path)):
        with contextlib.suppress(FileNotFoundError):
            victim.unlink()


def _side(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary beside ``path`` and rename it in."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def copy_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` to a temporary beside ``target`` (same mode) and rename it in."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        shutil.copymode(source, tmp)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def publish(staged: Path, target: Path) -> None:
    """Move a staged file to ``target`` by one rename; across file systems, by a copy beside
    the target and a rename."""
    try:
        os.replace(staged, target)
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
        copy_atomic(staged, target)


def check_output_path(path, create: bool = True) -> Path:
    """``path`` as a place a library can be written, or an ExportError naming it: a directory,
    a folder that cannot be created or is not writable. ``create`` makes missing folders;
    without it, the nearest existing one must be a writable folder."""
    path = Path(path)
    if path.is_dir():
        raise ExportError(f"cannot write the library to '{path}': it is a directory; give a "
                          f"file name, such as '{path / 'model.so'}'")
    folder = path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ExportError(f"cannot write the library to '{path}': its folder '{folder}' cannot "
                          f"be created ('{existing}' is a file)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write the library to '{path}': the folder '{existing}' is "
                          "not writable")
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ExportError(f"cannot write the library to '{path}': its folder '{folder}' "
                              f"cannot be created ({err.strerror})") from err
    return path


@contextlib.contextmanager
def staging_dir(cache_dir):
    """A private folder for one build's temporaries, under ``cache_dir`` (the system's temp
    folder when the cache cannot be written), removed afterwards."""
    root = Path(cache_dir) / STAGING
    host = socket.gethostname()
    try:
        root.mkdir(parents=True, exist_ok=True)
        _sweep(root, host)
        path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}@{host}@", dir=root))
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="tvm_ascend_"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sweep(root: Path, host: str) -> None:
    """Remove the staging folders of killed builds on this host."""
    for child in root.iterdir():
        pid, _, rest = child.name.partition("@")
        if not pid.isdigit() or rest.partition("@")[0] != host:
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(child, ignore_errors=True)
        except OSError:
            pass  # alive, another user's
