"""Reading measurement logs for a command: skipped lines counted and named, an empty or
garbage log a one-line error instead of a puzzle about families."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from oasr_core.errors import ConfigurationError
from oasr_core.measurements import read_logs


def read_checked(paths: Sequence[Path]) -> tuple[list[dict], list[dict]]:
    """(run rows, arm rows) of ``paths``; a note on stderr per log with lines skipped (not
    JSON, or not a run or measurement row), and :class:`ConfigurationError` when no log holds
    a single measurement row."""
    runs: list[dict] = []
    arms: list[dict] = []
    skipped: dict[Path, int] = {}
    for path in paths:
        r, a, bad = read_logs([path])
        runs += r
        arms += a
        if bad:
            skipped[path] = bad
            click.echo(f"note: {path}: {bad} line(s) skipped (not JSON, or not a run or "
                       "measurement row)", err=True)
    if not arms:
        where = ", ".join(str(p) for p in paths)
        why = f" ({sum(skipped.values())} line(s) skipped)" if skipped else " (it is empty)" \
            if not runs else ""
        raise ConfigurationError(f"{where}: no measurement row{why}; a measurement log is the "
                                 "JSONL `oasr tune build` writes (measurements/<family>.jsonl "
                                 "beside the tuning file)")
    return runs, arms
