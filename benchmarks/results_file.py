"""``benchmarks/results.json``: read it, merge a partial rerun into it, write it atomically.

A run of a subset of the configurations replaces only the records it produced (same model,
configuration, baseline and dtype) and keeps every other record as it was. Each record carries
the ``commit`` and ``date`` of the run that produced it, so a file merged from several runs still
says where every figure came from; :func:`provenance` lists the distinct commits for the header
of ``BENCHMARKS.md``.

Example
-------
>>> old = {"header": {"commit": "aaa", "date": "d1"},
...        "records": [{"model": "m", "config": "c", "baseline": "b", "dtype": "float32",
...                     "kernels": 3}]}
>>> new = {"header": {"commit": "bbb", "date": "d2"},
...        "records": [{"model": "m", "config": "c", "baseline": "b2", "dtype": "float32",
...                     "kernels": 2}]}
>>> merged = merge_results(old, new)
>>> [(r["baseline"], r["commit"]) for r in merged["records"]]
[('b', 'aaa'), ('b2', 'bbb')]
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tvm_ascend.errors import AscendError

# The fields that identify a record: a rerun's record replaces the old one with the same key.
RECORD_KEY = ("model", "config", "baseline", "dtype")
# Header fields that describe one run, not the merged file: kept per commit in ``runs``.
_RUN_FIELDS = ("commit", "date", "wall_s", "machine", "run_limit_macs")


class ResultsFileError(AscendError):
    """A results file that cannot be read or merged (names the file and what is wrong)."""


def record_key(record: dict) -> tuple:
    """The identity of ``record``: (model, config, baseline, dtype).

    Example
    -------
    >>> record_key({"model": "bert_base", "config": "b1_s8", "baseline": "aggressive",
    ...             "dtype": "float16", "kernels": 95})
    ('bert_base', 'b1_s8', 'aggressive', 'float16')
    """
    missing = [field for field in RECORD_KEY if record.get(field) is None]
    if missing:
        raise ResultsFileError(f"record without {', '.join(missing)}: "
                               f"{json.dumps({k: record.get(k) for k in RECORD_KEY})}")
    return tuple(record[field] for field in RECORD_KEY)


def stamp_records(records: list[dict], header: dict) -> list[dict]:
    """Copies of ``records`` with ``commit`` and ``date`` set from the run ``header`` where a
    record has none yet (this run's records, and those of files written before these fields
    existed).

    Example
    -------
    >>> stamp_records([{"model": "m"}], {"commit": "abc", "date": "2026-11-29"})
    [{'model': 'm', 'commit': 'abc', 'date': '2026-11-29'}]
    """
    stamped = []
    for record in records:
        record = dict(record)
        for field in ("commit", "date"):
            if record.get(field) is None:
                record[field] = header.get(field)
        stamped.append(record)
    return stamped


def merge_results(existing: dict | None, new: dict) -> dict:
    """``new`` merged into ``existing``: records with the key of a new record are replaced in
    place, new keys are appended, everything else is kept; the header is the new run's, with
    ``runs`` listing every run whose records remain (see :func:`provenance`). A new record with
    ``status="skipped"`` (not started within the run's time budget) measured nothing, so it
    replaces no existing record.

    Parameters
    ----------
    existing : dict or None
        The results already on disk (``{"header", "records"}``), or ``None`` for none.
    new : dict
        This run's results; its records are stamped with its header's commit and date.

    Example
    -------
    >>> old = {"header": {"commit": "a", "date": "d1"},
    ...        "records": [{"model": "m", "config": "c", "baseline": "b", "dtype": "f",
    ...                     "kernels": 3}]}
    >>> new = {"header": {"commit": "b", "date": "d2"},
    ...        "records": [{"model": "m", "config": "c", "baseline": "b", "dtype": "f",
    ...                     "kernels": 2}]}
    >>> merge_results(old, new)["records"][0]["kernels"]
    2
    """
    header = dict(new.get("header", {}))
    fresh = stamp_records(new.get("records", []), header)
    by_key = {}
    for record in fresh:
        key = record_key(record)
        if key in by_key:
            raise ResultsFileError(f"this run produced two records for {'/'.join(map(str, key))}")
        by_key[key] = record
    merged, placed = [], set()
    if existing:
        old_header = existing.get("header", {})
        for record in stamp_records(existing.get("records", []), old_header):
            key = record_key(record)
            if key in by_key and by_key[key].get("status") == "skipped":
                placed.add(key)  # the old measurement stays; the skip produced nothing
            elif key in by_key:
                if key not in placed:
                    merged.append(by_key[key])
                    placed.add(key)
                continue
            merged.append(record)
    merged += [record for key, record in by_key.items() if key not in placed]
    header["runs"] = _runs(existing, header, merged)
    return {"header": header, "records": merged}


def _runs(existing: dict | None, header: dict, records: list[dict]) -> list[dict]:
    """The runs (commit, date, machine, wall time) that still own at least one record."""
    known = {}
    if existing:
        old_header = existing.get("header", {})
        for run in old_header.get("runs") or [{f: old_header.get(f) for f in _RUN_FIELDS}]:
            known[(run.get("commit"), run.get("date"))] = run
    known[(header.get("commit"), header.get("date"))] = {f: header.get(f) for f in _RUN_FIELDS}
    owners = {(r.get("commit"), r.get("date")) for r in records}
    runs = [run for key, run in known.items() if key in owners]
    return sorted(runs, key=lambda run: str(run.get("date") or ""))


def provenance(results: dict) -> list[dict]:
    """One entry per distinct (commit, date) of the records: ``commit``, ``date`` and the
    ``records`` it produced as ``"model config dtype baseline"`` strings, oldest first.

    Example
    -------
    >>> provenance({"records": [{"model": "m", "config": "c", "baseline": "b", "dtype": "f",
    ...                          "commit": "abc", "date": "d1"}]})
    [{'commit': 'abc', 'date': 'd1', 'records': ['m c f b']}]
    """
    header = results.get("header", {})
    groups: dict = {}
    for record in stamp_records(results.get("records", []), header):
        key = (record.get("commit"), record.get("date"))
        name = " ".join(str(record.get(field)) for field in ("model", "config", "dtype",
                                                              "baseline"))
        groups.setdefault(key, []).append(name)
    return [{"commit": commit, "date": date, "records": names}
            for (commit, date), names in sorted(groups.items(), key=lambda kv: str(kv[0][1]))]


def load_results(path) -> dict | None:
    """The results in ``path``; ``None`` when the file does not exist.

    Raises ``ResultsFileError`` naming the file (and the line for bad JSON) when it cannot be
    used, so a corrupt file is never silently replaced by a partial run.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ResultsFileError(f"{path}: line {err.lineno}: not valid JSON ({err.msg}); fix or "
                               "remove it, or run with --fresh to overwrite it") from err
    except OSError as err:
        raise ResultsFileError(f"{path}: cannot be read ({err.strerror})") from err
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ResultsFileError(f"{path}: not a results file (needs a 'records' list); "
                               "run with --fresh to overwrite it")
    return data


def write_results(path, results: dict) -> None:
    """Write ``results`` to ``path`` atomically (temporary file, then rename)."""
    from tvm_ascend.partition.report import write_json_atomic

    write_json_atomic(str(path), results)


def git_commit(*args: str) -> str | None:
    """The repository's HEAD as ``git rev-parse HEAD`` (or ``git describe`` with ``args``, e.g.
    ``"--always", "--dirty"``) prints it, for the provenance of a results file; None where git
    or the repository is missing."""
    command = ["git", "describe", *args] if args else ["git", "rev-parse", "HEAD"]
    try:
        done = subprocess.run(command, cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
