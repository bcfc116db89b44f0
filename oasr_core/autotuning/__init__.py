"""Run-time autotuning: ``oasr_core.autotune()`` and the pieces the engine tuner shares.

- :mod:`.session`: the context manager and its selection hook;
- :mod:`.measure`: candidates, the bench protocol at one problem, the winner;
- :mod:`.cache`: the cache file (versions 1 to 3), its locked merging writer;
- :mod:`.publish`: winners into the user tier at the sizes they were measured at;
- :mod:`.eager`: the eager timer for ops that cannot be captured in a CUDA graph.

Importing this package imports no torch and touches no GPU.
"""

from __future__ import annotations

from .cache import (
    CACHE_SCHEMA_VERSION,
    AutotuneWarning,
    CacheArchError,
    CacheFile,
    CacheFileError,
    CacheTooNewError,
    Result,
    ResultIndex,
    Timing,
    load_cache,
    read_cache,
    write_cache,
)
from .eager import EagerTimer
from .measure import Measurement, Measurer, candidates
from .publish import PublishReport, publish
from .session import AutotuneSession, autotune

__all__ = [
    "CACHE_SCHEMA_VERSION",
    "AutotuneSession",
    "AutotuneWarning",
    "CacheArchError",
    "CacheFile",
    "CacheFileError",
    "CacheTooNewError",
    "EagerTimer",
    "Measurement",
    "Measurer",
    "PublishReport",
    "Result",
    "ResultIndex",
    "Timing",
    "autotune",
    "candidates",
    "load_cache",
    "publish",
    "read_cache",
    "write_cache",
]
