"""The scaled_mm_fp8 shape heuristic (``Sentinel.HEURISTIC``, the family's untuned selector).

"The largest data-parallel tile that still launches at least half a wave": the lane's
:func:`rungs` are one config per tile shape, largest tile area first (ties: taller tile
first); the first whose CTA count ``ceil(M / TM) * ceil(N / TN)`` reaches :data:`FILL` x the
SM count serves, and the smallest tile catches everything below. Per tile shape the rung is
its fast-accumulation config with a 1x1 cluster, the non-persistent kernel before the
cooperative one before ping-pong (a shape the heuristic serves is untuned: the simplest
kernel of the tile). The SM count is the device's (:func:`oasr_core.kit.devices.
heuristic_device`), the ``sku`` stamp of a tuning file, so nothing else is stamped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oasr_core.kit.devices import heuristic_device
from oasr_core.types import Config, Lane, Problem

FILL = 0.5
"""The fraction of a wave of CTAs (one per SM) a rung must launch."""
_SCHEDULE_ORDER = {"mma_sync": 0, "ws": 0, "cooperative": 1, "pingpong": 2}


def _preference(config: Config) -> tuple:
    p = config.params
    return (not p.get("fast_accum", False), tuple(p.get("cluster", (1, 1))) != (1, 1),
            _SCHEDULE_ORDER.get(p.get("schedule"), 3), config.id)


def rungs(configs: Iterable[Config]) -> tuple[Config, ...]:
    """One config per tile shape of ``configs``, largest tile area first (see the module
    docstring)."""
    best: dict[tuple[int, int], Config] = {}
    for c in sorted(configs, key=_preference):
        best.setdefault(tuple(c.params["tile"][:2]), c)
    return tuple(best[t] for t in sorted(best, key=lambda t: (-t[0] * t[1], -t[0])))


def pick(ladder: Sequence[Config], n: int, m: int, sm_count: int) -> Config:
    """The first rung of ``ladder`` launching ``FILL * sm_count`` CTAs at ``(N, M)``, else
    the last."""
    for config in ladder:
        tm, tn = config.params["tile"][:2]
        if -(-m // tm) * -(-n // tn) >= FILL * sm_count:
            return config
    return ladder[-1]


def heuristic_config(problem: Problem, lane: Lane, *, sm_count: int | None = None) -> Config:
    """The heuristic's config for ``problem`` on ``lane`` (``sm_count``: this process's
    device, or the lane's default arch's stated count)."""
    if sm_count is None:
        _arch, sm_count = heuristic_device(lane.arch_families, lane.default_on)
    ladder = rungs(c for c in lane.config_space if lane.is_feasible(c))
    if not ladder:
        raise ValueError(f"lane {lane.name}: no feasible config")
    return pick(ladder, problem.dim("N"), problem.m, sm_count)


def sentinel_heuristic(problem: Problem, lane: Lane) -> Config:
    """``Family.sentinel_heuristic``: :func:`heuristic_config` on this process's device."""
    return heuristic_config(problem, lane)


def soft_validators() -> dict[str, str | None]:
    """``Family.soft_validators``: the JIT's stamps (the heuristic reads only the SM count)."""
    from oasr_scaled_mm_fp8 import jit

    return jit.soft_validators()
