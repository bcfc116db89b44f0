"""A family's lanes as data: their listed configs, feasible spaces and per-lane predicates.

A family lists the configs of each lane (``listers[lane]()``, before feasibility) and one
static predicate per lane; :class:`LaneSpaces` turns that into the cached full space, the
registered (feasible) space and id lookup, and :func:`by_lane` / :func:`fits_arch` answer the
per-lane predicates the ``Lane`` records and the production set need.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from oasr_core.types import Config


class LaneSpaces:
    """The config spaces of one family's lanes.

    ``listers`` maps each lane to a function yielding its listed configs; ``is_feasible`` is
    the family's static predicate (a function returning it, so feasibility may import the
    config space module that holds this object).
    """

    def __init__(self, family: str, listers: Mapping[str, Callable[[], Iterable[Config]]],
                 is_feasible: Callable[[], Callable[[Config], bool]]) -> None:
        self.family = family
        self._listers = dict(listers)
        self._is_feasible = is_feasible
        self._full: dict[str, tuple[Config, ...]] = {}
        self._space: dict[str, tuple[Config, ...]] = {}
        self._lock = threading.Lock()

    def full(self, lane: str) -> tuple[Config, ...]:
        """Every config listed for ``lane``, before feasibility (KeyError for another lane)."""
        got = self._full.get(lane)
        if got is None:
            lister = self._listers.get(lane)
            if lister is None:
                raise KeyError(f"lane {lane!r} is not a {self.family} lane "
                               f"({', '.join(self._listers)})")
            with self._lock:
                got = self._full.setdefault(lane, tuple(lister()))
        return got

    def space(self, lane: str) -> tuple[Config, ...]:
        """The registered config space of ``lane``: the listed configs that are feasible."""
        got = self._space.get(lane)
        if got is None:
            feasible = self._is_feasible()
            got = tuple(c for c in self.full(lane) if feasible(c))
            with self._lock:
                got = self._space.setdefault(lane, got)
        return got

    def config(self, lane: str, config_id: str) -> Config:
        """The config ``config_id`` of ``lane`` (``KeyError`` when the space has none)."""
        for c in self.space(lane):
            if c.id == config_id:
                return c
        raise KeyError(f"lane {lane!r} has no config {config_id!r}")


def by_lane(predicates: Mapping[str, Callable[[Config], bool]], config: Config) -> bool:
    """``predicates[config.lane](config)``; False for a lane the family does not have."""
    predicate = predicates.get(config.lane)
    return predicate is not None and predicate(config)


def fits_arch(config: Config, arch: str, *, arches: Mapping[str, Sequence[str]],
              smem: Mapping[str, Callable[[Config], int]] | None = None,
              limits: Mapping[str, int] | None = None) -> bool:
    """Whether ``config`` runs on arch family ``arch``: its lane runs there (``arches``),
    and, for lanes with an ``smem`` measure, its shared memory is within ``limits[arch]``."""
    if arch not in arches.get(config.lane, ()):
        return False
    measure = (smem or {}).get(config.lane)
    return measure is None or measure(config) <= (limits or {}).get(arch, 0)
