"""Shared pieces of the build-speed tests: a fake lane the cost model can describe, a ranker
whose favourite config depends on the size (so a signature's pooled set spans several), and
killing a child build once it reaches a marker."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import attrs

from oasr_core.testing import fake_lane_record


def features(config):
    """Cost features of a fake config (``Lane.cost_features``)."""
    p = config.params
    return {"tile": [128, p["tile_n"], p["tile_k"]], "kind": "mma_sync", "sync_mma": True,
            "warps": 4, "stages": p["stages"], "split_k": p["split_k"]}


def modelled_lane(**changes):
    """The fake lane with cost features (a pruned build may rank it), plus ``changes``."""
    return attrs.evolve(fake_lane_record(), cost_features=features, **changes)


def by_size(configs, problem):
    """A ranker: narrow tiles first at small M, wide ones first at M >= 1024."""
    wide = problem.m >= 1024
    return sorted(configs, key=lambda c: (-c.params["tile_n"] if wide else c.params["tile_n"],
                                          c.id))


def kill_at(proc: subprocess.Popen, marker: Path, timeout_s: float = 240.0) -> None:
    """SIGKILL ``proc`` once ``marker`` exists (it must not exit or stall before)."""
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline, f"the child never wrote {marker.name}"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
