"""The pluggy hook-implementation marker, in a module that imports nothing of the core.

Plugins write ``from oasr_core import hookimpl``; the package re-exports it from here, so
importing a plugin's hooks module loads pluggy and this file, not the runtime, selection or
report machinery.
"""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("oasr")
"""Decorator for plugin hook implementations: ``from oasr_core import hookimpl``."""
