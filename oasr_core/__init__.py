"""oasr_core: the plugin host, tuning database and runtime selection of oasr.

Importing this package loads no plugin, compiles nothing and touches no GPU: plugins are
found through the ``oasr`` entry-point group the first time something needs them.
"""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("oasr")
"""Decorator for plugin hook implementations: ``from oasr_core import hookimpl``."""

__all__ = ["__version__", "hookimpl"]
