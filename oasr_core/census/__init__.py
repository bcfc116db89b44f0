"""The census: which call shapes a deployment runs, how often, and which must be tuned.

``workload + engine configuration + traffic -> ShapeSet``. A :class:`Workload` (registered
through ``oasr_register_workloads``, or the built-in ``conformer`` / ``whisper_encoder``) is
probed once per engine key (:mod:`~oasr_core.census.engine`) under the
:class:`ShapeRecorder`, which sees every call the installed families' :class:`RecorderPatch`
records describe; :func:`run_census` weighs the calls by traffic into a :class:`ShapeSet`
(:mod:`~oasr_core.census.shapeset`), the versioned document ``oasr tune build`` reads. A
live process adds what probes miss through ``OASR_CAPTURE`` (:mod:`~oasr_core.census.capture`).

Importing this package imports no torch: the names below load their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Call": "recorder", "RecorderPatch": "recorder", "ShapeRecorder": "recorder",
    "dtype_name": "recorder", "patches_of": "recorder",
    "Workload": "workloads", "builtin_workloads": "workloads",
    "collect_workloads": "workloads", "model_workload": "workloads",
    "EngineConfig": "engine", "EngineKey": "engine", "Ladder": "engine",
    "ServiceMode": "engine", "Traffic": "engine", "engine_keys": "engine",
    "read_manifest": "engine", "parse_concurrency": "engine", "ManifestError": "engine",
    "ShapePoint": "shapeset", "ShapeSet": "shapeset", "ShapeSetError": "shapeset",
    "SignatureInfo": "shapeset", "load": "shapeset", "load_all": "shapeset", "dump": "shapeset",
    "merge": "shapeset",
    "SCHEMA_VERSION": "shapeset",
    "run_census": "probe", "estimate_ms": "probe",
    "capture_from_env": "capture", "start_capture": "capture", "merge_capture": "capture",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'oasr_core.census' has no attribute {name!r}")
    return getattr(importlib.import_module(f"oasr_core.census.{module}"), name)
