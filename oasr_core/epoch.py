"""The per-epoch state of one runtime, and memo tables that follow it.

An :class:`Epoch` holds everything that a reload or a newly installed runtime must forget:
memo tables by name (the selection memo, each family's call plans) and the set of warnings
already given. :class:`oasr_core.runtime.Runtime` holds the current one; a reload replaces it
with a new one and closes the old, and installing a runtime closes the outgoing runtime's.
Closing empties every table, so code that still holds a reference to one sees a miss and
re-binds to the current epoch: that is how a hot path can be a bare ``dict.get`` and still
never serve an answer from a past epoch.

:class:`EpochMemo` is that reference: ``memo.table`` is the current epoch's table of its
name (a plain dict; read it on the hot path), and :meth:`EpochMemo.bind` (on a miss) points it
at the epoch it is handed: the current runtime's (``get_runtime().state``), which the caller
asks for, so this module sits below the runtime and imports nothing of oasr.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import attrs

_CLOSED: dict = {}
"""What an unbound memo reads: always empty (never written, see :meth:`EpochMemo.store`)."""


@attrs.define(eq=False)
class Epoch:
    """One epoch's forgettable state (see the module docstring)."""

    number: int = 0
    closed: bool = False
    """Set by :meth:`close`; a closed epoch's tables stay empty."""
    _tables: dict[str, dict] = attrs.field(factory=dict)
    _warned: set[str] = attrs.field(factory=set)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def table(self, name: str) -> dict:
        """The memo table ``name`` of this epoch (made empty on first use)."""
        got = self._tables.get(name)
        if got is None:
            with self._lock:
                got = self._tables.setdefault(name, {})
        return got

    def warn_once(self, key: str, message: str, category: type[Warning] = UserWarning,
                  stacklevel: int = 3) -> bool:
        """Warn ``message`` the first time ``key`` is seen in this epoch; True if it warned."""
        if key in self._warned:
            return False
        with self._lock:
            if key in self._warned:
                return False
            self._warned.add(key)
        warnings.warn(message, category, stacklevel=stacklevel)
        return True

    def close(self) -> None:
        """End this epoch: every table is emptied, so holders re-bind on their next miss."""
        with self._lock:
            self.closed = True
            for table in self._tables.values():
                table.clear()


class EpochMemo:
    """A named memo table that always belongs to the current epoch (module docstring).

    ``memo.table.get(key)`` is the hot path. On a miss, :meth:`store` records an answer in
    the current epoch's table (re-binding first when the epoch changed).
    """

    __slots__ = ("name", "table", "_epoch")

    def __init__(self, name: str) -> None:
        self.name = name
        self.table: dict = _CLOSED
        self._epoch: Epoch | None = None

    def bind(self, epoch: Epoch) -> Epoch:
        """Point :attr:`table` at ``epoch`` (the current runtime's); returns it."""
        if epoch is not self._epoch:
            self.table = epoch.table(self.name)
            self._epoch = epoch
        return epoch

    @property
    def epoch(self) -> Epoch | None:
        """The epoch :attr:`table` belongs to (None before the first bind)."""
        return self._epoch

    def store(self, key: Any, value: Any, epoch: Epoch) -> Any:
        """Memoise ``value`` under ``key`` in the current epoch; returns ``value``.

        A value computed while a reload closed the epoch is not kept: it may come from the
        old epoch's tiers.
        """
        epoch = self.bind(epoch)
        if not epoch.closed:
            self.table[key] = value
        return value

    def clear(self) -> None:
        """Forget this memo's entries in the epoch it is bound to (the epoch goes on)."""
        self.table.clear()
