"""oasr_core: the plugin host, tuning database and runtime selection of oasr.

Importing this package loads no plugin, compiles nothing and touches no GPU: plugins are
found through the ``oasr`` entry-point group the first time something needs them.

Engine-facing API:

- :func:`select` — the config (and tier) serving one call shape; one dict lookup when memoised;
- :func:`reload` — start a new epoch: tuning files are re-read, selections resolved anew;
- :func:`tuning_report` — tier counts, loaded and stale files;
- :func:`route` — send an uncompiled model's ``Linear`` and ``Conv1d`` layers through oasr's
  ops (``torch.compile(model, backend="oasr")`` is the compiled path: :mod:`oasr_core.compile`);
- :func:`capture_from_env` — with ``OASR_CAPTURE=<path>`` set, record every oasr call (and
  ``F.linear``/``F.conv1d`` on the calling thread) from now to exit, for ``oasr tune census
  --capture``; the one call a process makes at startup (the variable alone records nothing:
  only the process knows when its model starts);
- :func:`autotune` — a context manager measuring, inside it, every call shape with no result;
- :class:`TuningConfig` and :class:`Tuner` — what an engine holds to prewarm the user tier
  and check coverage before it captures graphs.

Every name but ``hookimpl`` loads its module on first access (then it is a plain module
attribute: ``oasr_core.select`` costs what a module global costs). ``from oasr_core import
hookimpl`` imports only :mod:`oasr_core.markers`, so a plugin's hooks module loads no runtime.
"""

from __future__ import annotations

from typing import Any

from oasr_core.markers import hookimpl

__version__ = "0.1.0"

_LAZY = {"autotune": "oasr_core.autotuning.session", "TuningConfig": "oasr_core.tuner",
         "Tuner": "oasr_core.tuner", "reload": "oasr_core.runtime",
         "select": "oasr_core.selection", "tuning_report": "oasr_core.report",
         "route": "oasr_core.routing", "capture_from_env": "oasr_core.census.capture"}

__all__ = ["__version__", "TuningConfig", "Tuner", "autotune", "capture_from_env", "hookimpl",
           "reload", "route", "select", "tuning_report"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'oasr_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
