"""The loaded kernel libraries of a family's lanes, one per (lane, arch), for its ops.

A family plugin keeps one :class:`Libraries`: ``get(lane, arch)`` loads the lane's production
module once (through the plugin's ``load``) and returns its kernels, or None when it cannot
be built or loaded; a harness may ``install`` kernels of its own (a benchmark's full module).
After a reload, :meth:`Libraries.refresh` drops every production module lacking a config the
new epoch wants (``wanted(lane, arch)``: the default, the plugin's basis and what the tiers
now reference), so the next call loads one that has it. A dropped module stays mapped: ctypes
never unloads a library, so a graph captured before the reload keeps valid kernels until the
engine releases it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

Kernels = Mapping[Any, Any]
Key = tuple[str, str]


class Libraries:
    """Loaded kernels per ``(lane, arch)``; see the module docstring.

    ``load(lane, arch)`` returns the production module's kernels or None (or raises, which
    the caller sees and nothing is kept); ``ids(kernels)`` the config ids they hold;
    ``wanted(lane, arch)`` the ids the current epoch's production set must hold (checked by
    :meth:`refresh`; None: what is loaded is never refreshed, e.g. a whole-space module).
    """

    def __init__(self, load: Callable[[str, str], Kernels | None],
                 ids: Callable[[Kernels], Iterable[str]] | None = None,
                 wanted: Callable[[str, str], Iterable[str]] | None = None) -> None:
        self._load, self._ids, self._wanted = load, ids, wanted
        self._loaded: dict[Key, Kernels | None] = {}
        self._production: set[Key] = set()
        self._lock = threading.Lock()

    def get(self, lane: str, arch: str) -> Kernels | None:
        """The kernels serving ``lane`` on ``arch``, loading the production module once."""
        key = (lane, arch)
        if key in self._loaded:
            return self._loaded[key]
        with self._lock:
            if key not in self._loaded:
                self._loaded[key] = self._load(lane, arch)
                self._production.add(key)
        return self._loaded[key]

    def install(self, lane: str, arch: str, kernels: Kernels | None) -> None:
        """Serve ``lane`` on ``arch`` from ``kernels`` (None: the lane is unavailable); a
        harness's kernels are never refreshed away."""
        with self._lock:
            self._loaded[(lane, arch)] = kernels
            self._production.discard((lane, arch))

    def adopt(self, lane: str, arch: str, kernels: Kernels | None) -> None:
        """Hold ``kernels`` as ``lane``'s production module on ``arch``, as :meth:`get` would
        after loading it (so :meth:`refresh` may drop it); for tests and harnesses that
        built the production module themselves."""
        with self._lock:
            self._loaded[(lane, arch)] = kernels
            self._production.add((lane, arch))

    def items(self) -> Iterator[tuple[Key, Kernels | None]]:
        """``((lane, arch), kernels)`` of everything loaded or installed."""
        return iter(list(self._loaded.items()))

    def refresh(self) -> list[Key]:
        """Drop the production modules lacking a wanted config; returns the keys dropped."""
        dropped: list[Key] = []
        if self._wanted is None or self._ids is None:
            return dropped
        with self._lock:
            for key in sorted(self._production):
                kernels = self._loaded.get(key)
                if kernels is None:
                    continue
                if not set(self._wanted(*key)) <= set(self._ids(kernels)):
                    del self._loaded[key]
                    self._production.discard(key)
                    dropped.append(key)
        return dropped

    def forget(self) -> None:
        """Drop every entry (tests; a new production set on the next call)."""
        with self._lock:
            self._loaded.clear()
            self._production.clear()
