"""Live capture: a running process records the calls it makes, for paths probes do not reach.

``OASR_CAPTURE=<path>`` names where to write; the process calls :func:`capture_from_env`
once at startup (an engine does it where it builds its runtime). From then until exit, the
installed families' recorder patches count every call, and at exit the counts are written as a
ShapeSet whose points are eager (``must`` false, ``eager_fraction`` 1, ``keys``
``["capture"]``) with ``calls`` the raw counts. ``{pid}`` in the path is replaced by the
process id, so several workers can record side by side.

What a capture sees: plugin ops on every thread; torch functions (``F.linear``) on the thread
that started it (a ``TorchFunctionMode`` is per thread). CUDA graph replays launch no Python,
so a capture sees only what ran eagerly, which is exactly what its points claim.

``oasr tune census --capture FILE`` merges a recording into a census with
:func:`merge_capture`: the recording is scaled to a share of the merged traffic.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core.census import shapeset as ss
from oasr_core.census.probe import PointBuilder
from oasr_core.census.recorder import RecorderPatch, ShapeRecorder, patches_of
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Registry
from oasr_core.types import thaw

ENV = "OASR_CAPTURE"
CAPTURE_KEY = "capture"

_lock = threading.Lock()
_current: list[ShapeRecorder] = []  # the process's one live capture, if started


def capture_from_env(*, patches: Sequence[RecorderPatch] | None = None) -> ShapeRecorder | None:
    """Start the process's capture when ``OASR_CAPTURE`` is set; idempotent.

    ``patches`` default to the installed families' (a plugin manager is built for them).
    Returns the live recorder, or None when the variable is unset or empty.
    """
    path = os.environ.get(ENV, "").strip()
    if not path:
        return None
    return start_capture(path, patches=patches)


def start_capture(path: str | os.PathLike[str], *,
                  patches: Sequence[RecorderPatch] | None = None) -> ShapeRecorder:
    """Record from now until the process exits, then write the ShapeSet to ``path``."""
    with _lock:
        if _current:
            return _current[0]
        if patches is None:
            patches = patches_of(Registry.from_plugin_manager(make_plugin_manager()))
        recorder = ShapeRecorder(patches)
        recorder.start()
        _current.append(recorder)
    target = Path(str(path).replace("{pid}", str(os.getpid())))
    provenance = {"tool": "OASR_CAPTURE", "source": CAPTURE_KEY, "pid": os.getpid(),
                  "argv": list(sys.argv), "started": _now()}
    atexit.register(_dump_at_exit, recorder, target, provenance)
    return recorder


def _dump_at_exit(recorder: ShapeRecorder, target: Path, provenance: dict[str, Any]) -> None:
    recorder.stop()
    try:
        ss.dump(capture_shapeset(recorder.take(), {**provenance, "ended": _now(),
                                                   "skipped": recorder.skipped_json()}),
                target)
    except ss.ShapeSetError as exc:
        print(f"oasr warning: {ENV}: {exc}", file=sys.stderr)


def capture_shapeset(counts: Any, provenance: dict[str, Any]) -> ss.ShapeSet:
    """The ShapeSet of a recording: raw counts as eager calls under the key ``capture``."""
    builder = PointBuilder()
    builder.add(counts, share=1.0, captured=False, label=CAPTURE_KEY)
    return ss.ShapeSet(points=builder.points(), signatures=builder.signatures(),
                       provenance=provenance)


def merge_capture(census: ss.ShapeSet, capture: ss.ShapeSet, *, share: float = 0.5,
                  origin: str = "") -> ss.ShapeSet:
    """``census`` with ``capture`` merged in as ``share`` of the combined calls.

    The recording's raw counts are scaled so that its calls are ``share`` of the merged
    total (``share`` 0.5: as much traffic as the census describes); its points stay eager,
    adding to the eager fraction of points the probes also reached.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"capture share {share} is not in (0, 1)")
    base, recorded = census.total_calls, capture.total_calls
    if recorded <= 0:
        return census.with_provenance(captures=[*_captures(census), {
            "file": origin, "calls": 0, "scale": 0.0}])
    factor = share / (1.0 - share) * (base if base > 0 else 1.0) / recorded
    merged = ss.merge([census, ss.scale(capture, factor)])
    record = {"file": origin, "calls": recorded, "scale": factor, "share": share,
              "provenance": thaw(capture.provenance)}
    return attrs.evolve(merged, provenance={**thaw(census.provenance),
                                            "captures": [*_captures(census), record]},
                        working_set_bytes=census.working_set_bytes)


def _captures(shapeset: ss.ShapeSet) -> list[Any]:
    return list(thaw(shapeset.provenance.get("captures", ())))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
