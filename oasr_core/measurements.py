"""The measurement log and the build checkpoint: append-only JSONL files.

**Measurement log.** Every measurement a build makes is appended as it is made, one row per
(point, arm), so a build killed at any moment loses nothing it measured, a cost model can be
calibrated on it, ``oasr tune evaluate`` can score any table against it, and ``oasr tune
build --from-log`` can rebuild a table from it on a machine without a GPU. A row carries the
signature and point context the decisions need (weight, must-tune, alpha, incumbent,
largest census size), so a log alone replays a build. Two row kinds:

``{"row": "run", ...}``
    one per build run: ``run`` id, ``family``, ``arch``, ``lane``, ``soft`` (the validators
    the measurements were made under), ``protocol``, ``device``, ``started``, ``knobs``.
``{"row": "arm", ...}``
    one per measured arm (fields in :data:`ARM_FIELDS`).

**Checkpoint.** One line per finished signature, fsync'ed: its key, a digest of what it
measured (points and knobs), the entry it produced and the configs that entry names. A
restarted build reuses a signature whose digest, arch, lane and implementation hash match,
and measures nothing for it. A torn last line (a kill mid-write) is skipped.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import filelock

from oasr_core import files
from oasr_core.bench.records import ArmResult, ArmStatus
from oasr_core.database.codec import parse_lines

LOG_SCHEMA_VERSION = 1
"""Version of the row format (independent of the bench protocol version)."""

ARM_FIELDS = (
    "row", "schema_version", "run", "protocol", "phase", "family", "arch", "lane", "impl_hash",
    "sku", "key", "op", "dtype", "dims", "M", "batch", "weight", "calls", "must", "alpha",
    "fill", "incumbent", "census_max", "fallback", "config", "params", "status", "reason",
    "median_ms", "sigma_ms", "n", "stage", "solo_ms", "issue_us", "overlap", "gate_error",
    "l2", "copies", "graph_calls", "separator_ms", "contended", "sm_clock_mhz",
    "max_sm_clock_mhz", "other_processes", "power_w", "time",
)
"""Fields of an arm row. ``phase`` is ``main`` (the point's own halving run) or ``cross``
(cross-evaluation of other points' finalists); ``stage`` is the halving stage an arm was
eliminated after (null: it survived); ``sm_clock_mhz`` is ``[start, end]``."""

DIGITS = 8
"""Decimal places of times in ms written to the log; decisions use the logged values."""


def new_run_id() -> str:
    """A fresh build run id: UTC time plus random hex."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def utc_now() -> str:
    """The current UTC time, ISO 8601, seconds."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def number(value: float | None, digits: int = DIGITS) -> float | None:
    """``value`` rounded for JSON; None for None, NaN and infinities."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def arm_result(row: Mapping[str, Any]) -> ArmResult:
    """The :class:`ArmResult` a logged arm row holds."""

    def ms(name: str, default: float | None) -> float | None:
        v = row.get(name)
        return default if v is None else float(v)

    return ArmResult(
        name=str(row["config"]), status=ArmStatus(row.get("status", "ok")),
        reason=str(row.get("reason") or ""), median_ms=ms("median_ms", math.inf),
        sigma_ms=ms("sigma_ms", math.inf), rounds=int(row.get("n") or 0),
        stage=row.get("stage"), solo_ms=ms("solo_ms", None), issue_us=ms("issue_us", None),
        overlap=bool(row.get("overlap")), gate_error=ms("gate_error", None))


def arm_row(arm: ArmResult, context: Mapping[str, Any]) -> dict[str, Any]:
    """The log row of ``arm``; ``context`` supplies every other field of :data:`ARM_FIELDS`."""
    row = {f: context.get(f) for f in ARM_FIELDS}
    if context.get("points"):
        row["points"] = list(context["points"])  # exact points (exact-point families only)
    row.update(row="arm", schema_version=LOG_SCHEMA_VERSION, config=arm.name,
               status=arm.status.value, reason=arm.reason or None,
               median_ms=number(arm.median_ms), sigma_ms=number(arm.sigma_ms),
               n=arm.rounds, stage=arm.stage, solo_ms=number(arm.solo_ms),
               issue_us=number(arm.issue_us, 4), overlap=arm.overlap,
               gate_error=number(arm.gate_error, 12))
    return row


def _append_lines(path: Path, lines: Iterable[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    if not text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(files.lock_beside(path)), timeout=120):
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as handle:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    text = "\n" + text
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())


def _dumps(row: Mapping[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"), allow_nan=False)


def read_jsonl(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSONL file and how many lines were unreadable (torn, garbage,
    not an object); read through :func:`oasr_core.database.codec.parse_lines`, so with the
    size and depth guards of every oasr reader."""
    rows, bad = [], 0
    for _, value in parse_lines(path):
        if isinstance(value, dict):
            rows.append(value)
        else:
            bad += 1
    return rows, bad


class MeasurementLog:
    """An append-only measurement log (JSONL) at ``path``; appends are locked and fsync'ed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.appended = 0

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append ``rows`` (one line each) durably."""
        lines = [_dumps(r) for r in rows]
        _append_lines(self.path, lines)
        self.appended += len(lines)

    def rows(self) -> list[dict[str, Any]]:
        """Every readable row (an unreadable line is skipped)."""
        if not self.path.exists():
            return []
        return read_jsonl(self.path)[0]


def read_logs(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[dict], list[dict], int]:
    """(run rows, arm rows, unreadable lines) of one or more logs, in file order.

    An arm row whose fields are not of their types (:func:`arm_row_problem`) is unreadable
    too: every consumer may then convert them without checking again.
    """
    runs, arms, bad = [], [], 0
    for path in paths:
        rows, skipped = read_jsonl(path)
        bad += skipped
        for row in rows:
            if row.get("row") == "run":
                runs.append(row)
            elif row.get("row") == "arm" and arm_row_problem(row) is None:
                arms.append(row)
            else:
                bad += 1
    return runs, arms, bad


_MAX_SIZE = 2**31
"""Largest M, N or K a row may hold (the launchers' int32 extents)."""


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and abs(v) < 1e12


def _count(v: Any) -> bool:
    return type(v) is int and 0 <= v < 2**40


def _size(v: Any) -> bool:
    return type(v) is int and 1 <= v <= _MAX_SIZE


def _dim(v: Any) -> bool:
    return type(v) is int and 0 <= v <= _MAX_SIZE


_ARM_TYPES: dict[str, tuple[Any, bool]] = {
    **{f: (lambda v: isinstance(v, str), True) for f in ("key", "config")},
    "M": (_size, True),
    **{f: (lambda v: isinstance(v, str), False) for f in (
        "status", "phase", "run", "l2", "reason", "op", "dtype", "lane", "arch", "family",
        "fallback", "impl_hash", "incumbent")},
    **{f: (_real, False) for f in ("median_ms", "sigma_ms", "solo_ms", "issue_us",
                                   "gate_error", "alpha", "calls", "weight", "separator_ms")},
    **{f: (_count, False) for f in ("n", "stage", "batch", "copies", "graph_calls",
                                    "census_max")},
    **{f: (_size, False) for f in ("N", "K")},
    # A dim may be 0 where its family says so (``Family.zero_dims``: a conv's padding).
    "dims": (lambda v: isinstance(v, dict) and all(_dim(x) for x in v.values()), False),
    **{f: (lambda v: isinstance(v, dict), False) for f in ("params", "sku")},
}
"""Arm-row fields a consumer converts: (check, required); an optional field may be null."""


def arm_row_problem(row: Mapping[str, Any]) -> str | None:
    """Why a logged arm row cannot be used (a field missing or of another type), or None."""
    for name, (check, required) in _ARM_TYPES.items():
        value = row.get(name)
        if value is None:
            if required:
                return f"no {name}"
            continue
        if not check(value):
            return f"{name}={value!r:.40} is not of its type"
    status = row.get("status")
    if status is not None and status not in {s.value for s in ArmStatus}:
        return f"status={status!r:.40} is not an arm status"
    return None


def latest_groups(arm_rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int, str],
                                                                  list[Mapping[str, Any]]]:
    """Arm rows by (key, M, phase), each group holding only the last run that wrote it."""
    groups: dict[tuple[str, int, str], tuple[str, list]] = {}
    for row in arm_rows:
        gk = (str(row["key"]), int(row["M"]), str(row.get("phase") or "main"))
        run = str(row.get("run"))
        have = groups.get(gk)
        if have is None or have[0] != run:
            groups[gk] = (run, [row])
        else:
            have[1].append(row)
    return {gk: rows for gk, (_, rows) in groups.items()}


def digest(payload: Any) -> str:
    """16 hex digits of sha256 over the canonical JSON of ``payload``."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Checkpoint:
    """Finished signatures of a build (JSONL, one fsync'ed line per signature)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, dict[str, Any]]:
        """The last readable record per signature key."""
        if not self.path.exists():
            return {}
        rows, _ = read_jsonl(self.path)
        return {str(r["key"]): r for r in rows if "key" in r and "digest" in r}

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one finished signature durably."""
        _append_lines(self.path, [_dumps(record)])


def reusable(record: Mapping[str, Any] | None, *, digest: str, arch: str, lane: str,
             impl_hash: Any) -> bool:
    """Whether a checkpoint ``record`` was made with the same digest, arch, lane and impl."""
    return record is not None and (record.get("digest"), record.get("arch"), record.get("lane"),
                                   record.get("impl_hash")) == (digest, arch, lane, impl_hash)


def rows_by_run(run_rows: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Run header rows by run id (the last header of an id wins)."""
    return {str(r.get("run")): r for r in run_rows}

