"""RPCRunner: measure candidates on Ascend boards through TVM's RPC tracker (``tvm.rpc``).

A board runs a TVM RPC server registered with a tracker under a key (``ascend.910b1`` say) and
loads a library that registers ``tvm_ascend.cann_device_count`` and
``tvm_ascend.time_kernel(lib_path, kernel, repeats) -> microseconds`` (CANN's ACL timing).
This runner requests a session per batch, uploads each candidate's built library and asks for
its time. Where the remote has no CANN runtime those functions are absent: the device part is
skipped and every result says so (``error``), so a search falls back on other measurements.
The board side is ``tvm_ascend.tuning.board`` (``python -m tvm_ascend.tuning.board --tracker
host:port --key ascend.910b1 [--backend acl|emulator]``): it registers both functions, through
CANN (``acl``) or, for tests and boardless CI, through the CPU emulator and the timing model
(``emulator``: estimates, not measurements).

Example
-------
>>> runner = RPCRunner(tracker=("127.0.0.1", 9190), key="ascend.910b1")   # doctest: +SKIP
>>> runner.ping()["device_count"]                                          # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
from pathlib import Path

from tvm import rpc

from ..errors import AscendError
from .runner import Candidate, MeasureResult, build_with_knobs

logger = logging.getLogger("tvm_ascend.tuning")

DEVICE_COUNT_FUNC = "tvm_ascend.cann_device_count"
TIME_KERNEL_FUNC = "tvm_ascend.time_kernel"


class RPCRunner:
    """Measure on remote boards, through a tracker or one server.

    Parameters
    ----------
    tracker : (host, port), optional
        An RPC tracker (``python -m tvm.exec.rpc_tracker``); sessions are requested by ``key``.
    server : (host, port), optional
        One RPC server reached directly (no tracker).
    key : str
        Device key registered with the tracker / the server.
    repeats : int
        Timed repetitions per kernel on the board.
    """

    def __init__(self, tracker=None, server=None, key: str = "ascend", repeats: int = 10,
                 session_timeout: int = 60):
        if (tracker is None) == (server is None):
            raise AscendError("RPCRunner needs exactly one of tracker=(host, port) or "
                              "server=(host, port)")
        self.tracker, self.server, self.key = tracker, server, key
        self.repeats, self.session_timeout = repeats, session_timeout

    def _session(self):
        try:
            if self.tracker is not None:
                client = rpc.connect_tracker(*self.tracker)
                return client.request(self.key, session_timeout=self.session_timeout)
            return rpc.connect(*self.server, key=self.key, session_timeout=self.session_timeout)
        except Exception as err:  # noqa: BLE001 - socket and RPC errors of every kind
            where = f"tracker {self.tracker}" if self.tracker else f"server {self.server}"
            raise AscendError(f"RPC {where} (key {self.key!r}) unreachable: {err}") from err

    @staticmethod
    def _device_count(session) -> int:
        try:
            return int(session.get_function(DEVICE_COUNT_FUNC)())
        except AttributeError:  # the remote never registered it: no CANN runtime there
            return 0

    def ping(self) -> dict:
        """Open a session and report what the remote offers (``device_count`` 0: no CANN)."""
        session = self._session()
        return {"cpu": bool(session.cpu(0).exist), "device_count": self._device_count(session)}

    def measure(self, candidates: list[Candidate]) -> list[MeasureResult]:
        """Time each candidate on a board; without CANN on the remote every result carries
        the reason it was skipped."""
        session = self._session()
        if self._device_count(session) == 0:
            reason = (f"skipped: the remote for key {self.key!r} has no CANN runtime "
                      f"({DEVICE_COUNT_FUNC} not registered)")
            logger.info(reason)
            return [MeasureResult(None, error=reason, runner="rpc") for _ in candidates]
        time_kernel = session.get_function(TIME_KERNEL_FUNC)
        results = []
        for cand in candidates:
            with tempfile.TemporaryDirectory(prefix="tvm_ascend_rpc_") as workdir:
                try:
                    lib = build_with_knobs(cand, Path(workdir) / "db")
                    path = lib.export_library(Path(workdir) / "kernel.so")
                    session.upload(path, "kernel.so")
                    time_us = float(time_kernel("kernel.so", cand.kernel, self.repeats))
                    results.append(MeasureResult(time_us, runner="rpc"))
                except AscendError as err:
                    results.append(MeasureResult(None, error=str(err), runner="rpc"))
        return results


@contextlib.contextmanager
def loopback_server(key: str = "ascend", port: int = 9190, tracker_addr=None):
    """An RPC server on 127.0.0.1 for tests (and a local board); stopped on exit by killing
    the worker process it started (TVM's own terminate needs psutil)."""
    from tvm.rpc.server import Server

    server = Server(host="127.0.0.1", port=port, port_end=port + 100, key=key,
                    tracker_addr=tracker_addr, silent=True)
    try:
        yield server
    finally:
        proc = getattr(getattr(server, "proc", None), "_proc", None)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
