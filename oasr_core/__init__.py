"""oasr_core: the plugin host, tuning database and runtime selection of oasr.

Importing this package loads no plugin, compiles nothing and touches no GPU: plugins are
found through the ``oasr`` entry-point group the first time something needs them.

Engine-facing API:

- :func:`select` — the config (and tier) serving one call shape; one dict lookup when memoised;
- :func:`reload` — start a new epoch: tuning files are re-read, selections resolved anew;
- :func:`tuning_report` — tier counts, loaded and stale files.
"""

from __future__ import annotations

import pluggy

from oasr_core.report import tuning_report
from oasr_core.runtime import reload
from oasr_core.selection import select

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("oasr")
"""Decorator for plugin hook implementations: ``from oasr_core import hookimpl``."""

__all__ = ["__version__", "hookimpl", "reload", "select", "tuning_report"]
