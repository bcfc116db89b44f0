"""A family's lanes as data: their listed configs, feasible spaces and per-lane predicates.

A family lists the configs of each lane (``listers[lane]()``, before feasibility) and one
static predicate per lane; :class:`LaneSpaces` turns that into the cached full space, the
registered (feasible) space and id lookup, and :func:`by_lane` / :func:`fits_arch` answer the
per-lane predicates the ``Lane`` records and the production set need. :class:`LaneRules`
bundles a family's predicates as data; :data:`SMEM_LIMIT` and the CUTLASS lanes' arch
families are the hardware facts they use.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

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

    @classmethod
    def from_listed(cls, family: str, lanes: Iterable[str],
                    listed: Callable[[str], Iterable[Config]],
                    is_feasible: Callable[[Config], bool]) -> LaneSpaces:
        """The spaces of ``lanes`` from one lister, ``listed(lane)``, and the static predicate
        ``is_feasible`` (a family whose space module lists every lane)."""
        return cls(family, {lane: functools.partial(listed, lane) for lane in lanes},
                   lambda: is_feasible)

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


SMEM_LIMIT = {"sm80": 166912, "sm86": 101376, "sm87": 166912, "sm89": 101376, "sm90": 232448}
"""Opt-in shared memory per block in bytes (``cudaDevAttrMaxSharedMemoryPerBlockOptin``)."""
CUTLASS2_ARCHES = ("sm80", "sm86", "sm89", "sm90")
"""Arch families a CUTLASS 2.x (``mma.sync``) lane runs on."""
CUTLASS2_DEFAULT_ON = ("sm80", "sm86", "sm89")
"""Where a 2.x lane is the active one by default (a 3.x lane serves sm90)."""
CUTLASS3_ARCHES = ("sm90",)
"""Arch families a CUTLASS 3.x (``wgmma``) lane runs on."""


@attrs.frozen
class Cutlass3Tile:
    """The CTA tile of a CUTLASS 3.x config that meets the rules every wgmma lane shares."""

    m: int
    n: int
    k: int
    schedule: str
    consumers: int
    """Consumer warpgroups per CTA (2 for the cooperative schedule, else 1)."""


def cutlass3_tile(config: Config, *, max_cluster: int) -> Cutlass3Tile | None:
    """The tile of a CUTLASS 3.x config, or None when it breaks a rule every wgmma lane shares:
    tile M 64, 128 or 256 (256 only cooperative, whose two consumer warpgroups take 128 rows
    each; otherwise at most 128), N a multiple of 16 in 16..256 (the TMA epilogue's subtile),
    K 64 or 128 (the main loop's swizzles); a cluster of 1..``max_cluster`` CTAs; Stream-K
    only with the cooperative kernel; at least 2 stages when the stage count is fixed."""
    p = config.params
    tm, tn, tk = p["tile"]
    cm, cn = p["cluster"]
    schedule = p["schedule"]
    cooperative = schedule == "cooperative"
    if tm not in (64, 128, 256) or tn % 16 or not 16 <= tn <= 256 or tk not in (64, 128):
        return None
    if cm < 1 or cn < 1 or cm * cn > max_cluster:
        return None
    if (tm % 128 if cooperative else tm > 128) or (p["stream_k"] and not cooperative):
        return None
    if p["stages"] and p["stages"] < 2:
        return None
    return Cutlass3Tile(tm, tn, tk, schedule, 2 if cooperative else 1)


@attrs.frozen
class LaneRules:
    """A family's per-lane feasibility as data: static predicates, arches, shared memory, and
    the row alignment its kernels need; its methods are the family's ``is_feasible``,
    ``fits_arch`` and ``aligned``."""

    static: Mapping[str, Callable[[Config], bool]]
    """Per lane: does a config build and compute the right thing on some arch of the lane."""
    arches: Mapping[str, Sequence[str]]
    """Per lane: the arch families it runs on."""
    smem: Mapping[str, Callable[[Config], int]] = attrs.field(factory=dict)
    """Per lane with an arch-dependent limit: a config's shared memory in bytes."""
    limits: Mapping[str, int] = SMEM_LIMIT
    align: int = 1
    """N and K must be positive multiples of this many elements."""

    def is_feasible(self, config: Config) -> bool:
        """Static predicate: the config builds and computes the right thing on its lane."""
        return by_lane(self.static, config)

    def fits_arch(self, config: Config, arch: str) -> bool:
        """Whether ``config`` runs on arch family ``arch`` (``sm90``): lane arches and shared
        memory."""
        return fits_arch(config, arch, arches=self.arches, smem=self.smem, limits=self.limits)

    def aligned(self, n: int, k: int) -> bool:
        """N and K positive multiples of :attr:`align` (16-byte rows)."""
        return n > 0 and k > 0 and n % self.align == 0 and k % self.align == 0
