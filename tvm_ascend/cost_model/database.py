"""The tuning database: JSON lines of measured candidates, keyed by workload.

A workload is one kernel's op class (template), parameter shapes and dtypes, SoC, and the
structural hash of its PrimFunc (two groups with equal shapes but other ops differ). Each line
is one measured candidate: ``{"workload": {...}, "key": "...", "knobs": {...},
"time_us": float, "runner": "local"}``. A database is a folder holding ``records.jsonl``
(the form ``CompileConfig.tuning_database`` names) or a ``.jsonl`` file.

Example
-------
>>> db = TuningDatabase("tuning_db")                       # doctest: +SKIP
>>> db.commit(workload_of(func, "elementwise", soc), {"tile_len": 4096}, 12.5)
>>> db.best(workload_of(func, "elementwise", soc))["knobs"]
{'tile_len': 4096}
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path

import tvm_ffi

from ..errors import AscendError

logger = logging.getLogger("tvm_ascend.cost_model")

RECORDS_FILE = "records.jsonl"
FORMAT_VERSION = 1


class TuningDatabaseError(AscendError):
    """A tuning database path cannot be used (names the file and line)."""


def workload_of(prim_func, template: str, soc) -> dict:
    """The workload key of one kernel: op class, shapes, dtypes, SoC, structure hash."""
    shapes = [[int(d) for d in p.shape] for p in prim_func.params]
    dtypes = [str(p.dtype) for p in prim_func.params]
    structure = tvm_ffi.structural_hash(prim_func.without_attr("global_symbol")
                                        if prim_func.attrs and "global_symbol" in prim_func.attrs
                                        else prim_func, map_free_vars=True)
    return {"op_class": template, "shapes": shapes, "dtypes": dtypes, "soc": soc.name,
            "structure": f"{int(structure) & 0xFFFFFFFFFFFFFFFF:016x}"}


def workload_key(workload: dict) -> str:
    """A short stable key of ``workload``."""
    text = json.dumps(workload, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def knobs_to_json(knobs) -> dict:
    return dataclasses.asdict(knobs) if dataclasses.is_dataclass(knobs) else dict(knobs or {})


class TuningDatabase:
    """JSON-lines records of measured candidates, best per workload on lookup.

    Parameters
    ----------
    path : str or Path
        A folder (``records.jsonl`` inside, created on the first commit) or a ``.jsonl`` file.
    """

    def __init__(self, path):
        path = Path(path)
        # an existing file is the records file whatever its name, so a file that is not one
        # (a text file given by mistake) is an error rather than a folder never found
        self.path = path if path.suffix == ".jsonl" or path.is_file() else path / RECORDS_FILE
        self._best: dict[str, dict] = {}
        self._all: dict[str, list[dict]] = {}  # every record, per workload key: for retraining
        self._count = 0
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise TuningDatabaseError(f"tuning database {self.path} cannot be read: {err}") \
                from err
        lines = text.splitlines()
        skipped = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                self._check(record)
            except (json.JSONDecodeError, TuningDatabaseError, TypeError, ValueError) as err:
                if number == len(lines) and not text.endswith("\n"):  # cut by a crash mid-write
                    logger.warning("%s:%d: truncated record skipped (%s)", self.path, number,
                                   err)
                    continue
                skipped.append(f"{self.path}:{number}: not a tuning record: {err}")
                continue
            self._add(record)
        if skipped and not self._count:
            raise TuningDatabaseError(f"tuning database {self.path} holds no tuning records "
                                      f"(written by 'tvm-ascend tune'): {skipped[0]}")
        for message in skipped:  # a damaged line costs its record, not the database
            logger.warning("%s; skipped", message)

    @staticmethod
    def _check(record) -> None:
        if not isinstance(record, dict):
            raise TuningDatabaseError("a record is a JSON object")
        missing = {"workload", "key", "knobs", "time_us"} - set(record)
        if missing:
            raise TuningDatabaseError(f"record lacks {sorted(missing)}")
        if record["key"] != workload_key(record["workload"]):
            raise TuningDatabaseError("record key does not match its workload")
        if not isinstance(record["knobs"], dict) or not float(record["time_us"]) > 0:
            raise TuningDatabaseError("knobs must be an object and time_us > 0")

    def _add(self, record: dict) -> None:
        self._count += 1
        self._all.setdefault(record["key"], []).append(record)
        best = self._best.get(record["key"])
        if best is None or record["time_us"] < best["time_us"]:
            self._best[record["key"]] = record

    def __len__(self) -> int:
        return self._count

    def commit(self, workload: dict, knobs, time_us: float, runner: str = "local",
               extra: dict | None = None) -> dict:
        """Append one measured candidate (one line, flushed and fsynced: a crash loses at most
        the line being written, which the reader skips)."""
        record = {"version": FORMAT_VERSION, "workload": workload, "key": workload_key(workload),
                  "knobs": knobs_to_json(knobs), "time_us": float(time_us), "runner": runner}
        if extra:
            record["extra"] = extra
        self._check(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        self._add(record)
        return record

    def best(self, workload: dict) -> dict | None:
        """The fastest record of ``workload``, or None."""
        return self._best.get(workload_key(workload))

    def workloads(self) -> list[dict]:
        """The best record of every workload."""
        return list(self._best.values())

    def records(self, workload: dict | None = None) -> list[dict]:
        """Every record of ``workload`` (of every workload when None), in commit order: each
        measured candidate, not only the best, as a learned model trains on them."""
        if workload is not None:
            return list(self._all.get(workload_key(workload), ()))
        return [record for records in self._all.values() for record in records]


def open_database(database) -> TuningDatabase | None:
    """A ``TuningDatabase`` from a path, an instance or None."""
    if database is None or isinstance(database, TuningDatabase):
        return database
    return TuningDatabase(database)
