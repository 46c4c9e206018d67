"""The board side of the RPC runner: a TVM RPC server that times kernels for RPCRunner.

``python -m tvm_ascend.tuning.board --tracker host:port --key ascend.910b1 [--backend acl]``
starts a TVM RPC server (``tvm.rpc.Server``) registered with the tracker under ``key``, whose
session processes carry the two functions ``tuning.rpc_runner.RPCRunner`` calls:
``tvm_ascend.cann_device_count() -> int`` and
``tvm_ascend.time_kernel(lib_path, kernel, repeats) -> microseconds``. They are registered by
the server's ``server_init_callback`` in the server process, before it forks a worker per
session, so every session sees them.

Backends:

- ``"acl"``: through CANN. The device count comes from ``aclrtGetDeviceCount`` (ctypes on
  libascendcl); ``time_kernel`` calls the library's ``<kernel>__acl_time_us(repeats)``, which an
  NPU build prints (``codegen.launcher.emit_acl_launcher``) and which times the kernel with ACL
  events. Refused with the reason where no CANN toolkit is installed (``cann.absent_reason``).
- ``"emulator"``: for testing the whole RPC path and for boardless CI, and labelled so in every
  log line. One device; ``time_kernel`` runs the model's library through the CPU emulator and
  returns the timing model's **estimate** from the emulator's counters, never a wall clock.

Example
-------
>>> with board_server(key="ascend.test", backend="emulator") as server:   # doctest: +SKIP
...     RPCRunner(server=("127.0.0.1", server.port), key="ascend.test").ping()
{'cpu': True, 'device_count': 1}
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import logging
import re
import sys
import time
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi

from ..codegen.launcher import ACL_TIME_SUFFIX
from ..cost_model.counters import estimate_from_counters
from ..errors import AscendError
from ..runtime import cann
from ..soc import get_soc
from .rpc_runner import DEVICE_COUNT_FUNC, TIME_KERNEL_FUNC

logger = logging.getLogger("tvm_ascend.tuning")

BACKENDS = ("emulator", "acl")

_PARAM_ANNOTATION = re.compile(
    r'loc=param\[(\d+)\], param=[^,]*, annotation=R\.Tensor\(\(([^)]*)\), dtype="(\w+)"\)')


# ---- the emulator backend ----------------------------------------------------------------------
def _resolve(lib_path: str) -> Path:
    """A path sent by an RPC client is relative to the session's upload folder."""
    path = Path(lib_path)
    if path.is_absolute():
        return path
    workpath = tvm.get_global_func("tvm.rpc.server.workpath", allow_missing=True)
    return Path(workpath(lib_path)) if workpath is not None else path.resolve()


def model_input_specs(library_path) -> list[tuple[tuple, str]]:
    """(shape, dtype) of each input of a built model's ``main``, read from the Relax VM
    executable's parameter checks (the library's metadata names the inputs, not their shapes).

    Example
    -------
    >>> model_input_specs("demo.so")                                    # doctest: +SKIP
    [((2, 64, 100), 'float32')]
    """
    from tvm import relax

    from ..runtime.artifacts import verify_library

    verify_library(library_path)  # before dlopen: a truncated library would kill the process
    lib = tvm.runtime.load_module(str(library_path))
    stats = relax.VMExecutable(lib).stats()
    # main's parameters are the model's inputs, then the weights the library carries beside
    # its code (runtime/weights.py): the metadata names the inputs
    meta = lib.get_function("ascend_metadata_json", query_imports=True)
    inputs = len(json.loads(str(meta())).get("inputs", [])) if meta is not None else None
    specs = {}
    for index, dims, dtype in _PARAM_ANNOTATION.findall(stats):
        if inputs is not None and int(index) >= inputs:
            continue
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError as err:
            raise AscendError(f"{library_path}: input {index} has a symbolic shape ({dims}); "
                              "the emulator board times static shapes only") from err
        specs.setdefault(int(index), (shape, dtype))
    return [specs[i] for i in sorted(specs)][:inputs]


def _random_inputs(specs, rng) -> list[np.ndarray]:
    values = []
    for shape, dtype in specs:
        if np.issubdtype(np.dtype(dtype), np.floating):
            values.append(rng.uniform(-1, 1, shape).astype(dtype))
        else:  # index inputs: small non-negative values stay in range of any axis
            values.append(rng.integers(0, 2, shape).astype(dtype))
    return values


def emulator_time_kernel(lib_path: str, kernel: str, repeats: int) -> float:
    """ESTIMATED microseconds of one launch of ``kernel`` (emulator backend, not a wall clock).

    Loads the uploaded library, runs its model ``repeats`` times on random inputs through the
    CPU emulator, checks every launch of ``kernel`` moved the same bytes, and returns
    ``estimate_from_counters`` of the kernel's group: the timing model's estimate.

    Example
    -------
    >>> emulator_time_kernel("kernel.so", "ascend_k0_fused_add", 3)      # doctest: +SKIP
    3.93
    """
    from ..runtime.module import AscendModule

    repeats = int(repeats)
    if repeats < 1:
        raise AscendError(f"time_kernel: repeats must be >= 1, got {repeats}")
    path = _resolve(lib_path)
    module = AscendModule.load(path)
    groups = {g.get("kernel"): g for g in module.fusion_report().get("groups", [])}
    if kernel not in groups or not groups[kernel].get("tiling"):
        raise AscendError(f"time_kernel: no NPU kernel {kernel!r} in {path.name}; it has "
                          f"{sorted(k for k in groups if k)}")
    inputs = _random_inputs(model_input_specs(path), np.random.default_rng(0))
    module.profile(reset=True)
    for _ in range(repeats):
        module.run(inputs)
    launches = [p for p in module.profile(reset=True) if p.get("kernel") == kernel]
    if len(launches) < repeats:
        raise AscendError(f"time_kernel: {kernel} launched {len(launches)} times in {repeats} "
                          "runs of the model")
    keys = ("gm_read_bytes", "gm_write_bytes", "cube_macs", "vector_elems")
    if any(tuple(p.get(k) for k in keys) != tuple(launches[0].get(k) for k in keys)
           for p in launches):
        raise AscendError(f"time_kernel: {kernel}'s emulator counters differ between runs")
    soc = get_soc(module.soc_version or "Ascend910B1")
    estimate = estimate_from_counters(groups[kernel], launches[0], soc)
    logger.info("emulator board (estimate, not a measurement): %s %.3f us", kernel,
                estimate.time_us)
    return float(estimate.time_us)


def emulator_device_count() -> int:
    """The emulator backend offers one (emulated) device.

    Example
    -------
    >>> emulator_device_count()
    1
    """
    return 1


# ---- the ACL backend ---------------------------------------------------------------------------
def acl_device_count(toolkit=None) -> int:
    """Devices ACL sees (``aclrtGetDeviceCount`` through ctypes on libascendcl).

    Example
    -------
    >>> acl_device_count(cann.require())                                # doctest: +SKIP
    8
    """
    toolkit = toolkit or cann.require()
    acl = ctypes.CDLL(str(toolkit.ascendcl))
    status = acl.aclInit(None)
    if status not in (0, 100002):  # 100002: already initialised in this process
        raise AscendError(f"aclInit returned ACL error {status} ({toolkit.ascendcl})")
    count = ctypes.c_uint32(0)
    status = acl.aclrtGetDeviceCount(ctypes.byref(count))
    if status != 0:
        raise AscendError(f"aclrtGetDeviceCount returned ACL error {status}")
    return int(count.value)


def acl_time_kernel(lib_path: str, kernel: str, repeats: int) -> float:
    """Microseconds per launch of ``kernel``, measured on the NPU with ACL events by the
    library's own ``<kernel>__acl_time_us`` (a library built by ``cann.build_device_library``).

    Example
    -------
    >>> acl_time_kernel("/tmp/npu-Ascend910B1-1a2b.so", "ascend_k0_add", 10)   # doctest: +SKIP
    24.7
    """
    path = _resolve(lib_path)
    lib = tvm.runtime.load_module(str(path))
    try:
        timer = lib.get_function(kernel + ACL_TIME_SUFFIX, query_imports=True)
    except AttributeError:  # tvm-ffi raises where older TVM returned None
        timer = None
    if timer is None:
        raise AscendError(f"time_kernel: {path.name} has no {kernel + ACL_TIME_SUFFIX}: it was "
                          "built for the CPU emulator; build the kernel for the NPU "
                          "(codegen.npu_unit.npu_unit_source + "
                          "runtime.cann.build_device_library)")
    return float(timer(int(repeats)))


# ---- registration and the server -----------------------------------------------------------------
def register_board_functions(backend: str = "emulator") -> None:
    """Register DEVICE_COUNT_FUNC and TIME_KERNEL_FUNC of ``backend`` in this process.

    ``"acl"`` raises ToolchainError naming the missing piece where no CANN toolkit is found.

    Example
    -------
    >>> register_board_functions("emulator")
    >>> import tvm; tvm.get_global_func("tvm_ascend.cann_device_count")()
    1
    """
    if backend == "emulator":
        count, time_kernel = emulator_device_count, emulator_time_kernel
    elif backend == "acl":
        toolkit = cann.require()
        count, time_kernel = functools.partial(acl_device_count, toolkit), acl_time_kernel
    else:
        raise AscendError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}")
    tvm_ffi.register_global_func(DEVICE_COUNT_FUNC, count, override=True)
    tvm_ffi.register_global_func(TIME_KERNEL_FUNC, time_kernel, override=True)


def start_board(key: str, backend: str = "emulator", tracker=None, host: str = "0.0.0.0",
                port: int = 9090, port_end: int | None = None, silent: bool = False):
    """Start the board's RPC server (a ``tvm.rpc.Server``, in its own process) and return it.

    Parameters
    ----------
    key : str
        Device key, e.g. ``ascend.910b1`` (what RPCRunner's ``key`` asks the tracker for).
    backend : str
        ``"acl"`` (CANN) or ``"emulator"`` (timing-model estimates, for tests and CI).
    tracker : (host, port), optional
        The tracker to register with; without it clients connect to the server directly.
    port, port_end : int
        The server binds the first free port in ``[port, port_end)`` (``port + 100`` by
        default).
    """
    if backend not in BACKENDS:
        raise AscendError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}")
    port_end = port + 100 if port_end is None else port_end
    if port_end <= port:
        raise AscendError(f"--port-end {port_end} must be above --port {port}")
    if backend == "acl":
        cann.require()  # fail here, with the missing piece, not inside the server process
    from tvm.rpc.server import Server

    server = Server(host=host, port=port, port_end=port_end, key=key,
                    tracker_addr=tuple(tracker) if tracker else None, silent=silent,
                    server_init_callback=functools.partial(register_board_functions, backend))
    logger.info("board %r (%s backend%s) serving on %s:%d", key, backend,
                ", timing-model estimates" if backend == "emulator" else "", host, server.port)
    return server


@contextlib.contextmanager
def board_server(key: str, backend: str = "emulator", tracker=None, host: str = "127.0.0.1",
                 port: int = 9090, port_end: int | None = None):
    """``start_board`` for a ``with`` block: the server process is stopped on exit.

    Example
    -------
    >>> with board_server("ascend.test") as server:                     # doctest: +SKIP
    ...     RPCRunner(server=("127.0.0.1", server.port), key="ascend.test").ping()
    """
    server = start_board(key, backend, tracker, host, port, port_end, silent=True)
    try:
        yield server
    finally:
        server.terminate()


def _host_port(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise AscendError(f"{flag} {text!r} is not host:port (e.g. 127.0.0.1:9190)")
    return host, int(port)


def main(argv=None) -> int:
    """``python -m tvm_ascend.tuning.board``: serve until interrupted (exit 2 on bad flags).

    Example
    -------
    >>> main(["--tracker", "10.0.0.1:9190", "--key", "ascend.910b1"])   # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(prog="python -m tvm_ascend.tuning.board",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracker", help="RPC tracker host:port to register with")
    parser.add_argument("--key", default="ascend", help="device key, e.g. ascend.910b1")
    parser.add_argument("--backend", choices=BACKENDS, default="acl",
                        help="acl: time on the NPU through CANN; emulator: timing-model "
                             "estimates from the CPU emulator (tests, boardless CI)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=9090, help="first port to try")
    parser.add_argument("--port-end", type=int, default=None,
                        help="end of the port range, exclusive (default: --port + 100)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        tracker = _host_port(args.tracker, "--tracker") if args.tracker else None
        server = start_board(args.key, args.backend, tracker, args.host, args.port,
                             args.port_end)
    except AscendError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
