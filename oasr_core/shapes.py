"""Shape buckets of the dynamic axis, ladder fill points, and census thinning.

Bucket edges run in steps of 8 up to 128, by about sqrt(2) up to 1024 (181, 256, 362, 512,
724, 1024), then double up to 2**20; above that the next power of two. ``bucket(m)`` is the
smallest edge at or above ``m``, so a bucket never rounds a size down, and runtime results keyed
by bucket still serve only sizes at or below the one measured (regions round up).

A build measures each signature's census sizes plus *fill points*: ladder edges between the
smallest and largest census size, widest gaps first, so a region boundary between two census
sizes far apart is placed from measurements rather than guessed. ``thin`` caps the census sizes of a
dense signature (a streaming census keys every cohort width) while keeping each dropped
size served by the region that will hold it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_EDGE = 1 << 20

EDGES: tuple[int, ...] = (
    *range(8, 129, 8),
    181, 256, 362, 512, 724, 1024,
    *(1 << p for p in range(11, 21)),
)
"""Bucket edges up to 2**20."""


def bucket(m: int) -> int:
    """The smallest edge at or above ``max(1, m)``; above 2**20 the next power of two."""
    m = max(1, int(m))
    if m > MAX_EDGE:
        return 1 << (m - 1).bit_length()
    lo, hi = 0, len(EDGES) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if EDGES[mid] >= m:
            hi = mid
        else:
            lo = mid + 1
    return EDGES[lo]


def ladder(m_max: int, m_min: int = 1) -> list[int]:
    """Every edge from ``bucket(m_min)`` to ``bucket(m_max)`` inclusive, ascending."""
    lo, hi = bucket(m_min), bucket(m_max)
    out = [e for e in EDGES if lo <= e <= hi]
    edge = MAX_EDGE * 2
    while edge <= hi:
        out.append(edge)
        edge *= 2
    return out


def fill_points(census: Sequence[int], room: int | None = None) -> list[int]:
    """Ladder edges strictly between the smallest and largest of ``census``, not in it.

    With ``room``, at most that many, chosen where measurements are sparsest: each next one
    is the candidate farthest (in log M) from every size already measured or chosen, so a
    capped fill goes to the widest gaps between census sizes first. Ascending.
    """
    if not census:
        return []
    lo, hi = min(census), max(census)
    have = set(census)
    candidates = [e for e in ladder(hi, lo) if lo < e < hi and e not in have]
    if room is None or room >= len(candidates):
        return candidates
    placed = [math.log(m) for m in have]
    chosen: list[int] = []
    for _ in range(max(room, 0)):
        pick = max((c for c in candidates if c not in chosen),
                   key=lambda c: (min(abs(math.log(c) - p) for p in placed), -c))
        chosen.append(pick)
        placed.append(math.log(pick))
    return sorted(chosen)


def _heaviest(indices: Sequence[int], ms: Sequence[int], weights: Sequence[float],
              must: Sequence[bool]) -> int:
    return max(indices, key=lambda i: (weights[i], must[i], -ms[i]))


def thin(ms: Sequence[int], weights: Sequence[float], cap: int,
         must: Sequence[bool] | None = None) -> tuple[list[int], dict[int, int]]:
    """Choose at most ``cap`` of the sizes ``ms`` (ascending, distinct) to measure.

    The smallest and largest stay. Of the remaining ``cap - 2`` slots, half (rounded up) go
    to equal bins of log M and half to equal bins of cumulative weight (each point placed at
    the weight below it plus half its own); each bin keeps its heaviest point (ties: must-tune,
    then the smaller M); slots left over go to the heaviest remaining points. Returns the kept
    indices (ascending) and, for every dropped index, the kept index whose measurement serves
    it: the next kept size above, because regions round up.
    """
    n = len(ms)
    must = list(must) if must is not None else [False] * n
    if n <= cap or cap < 2:
        kept = list(range(n)) if n <= cap else [n - 1]
        return kept, _fold_targets(kept, n)
    chosen = {0, n - 1}
    inner = list(range(1, n - 1))
    slots = cap - 2
    log_bins = math.ceil(slots / 2)
    lo, hi = math.log(ms[0]), math.log(ms[-1])
    span = (hi - lo) or 1.0
    total = sum(weights) or 1.0
    below, pos = 0.0, []
    for w in weights:
        pos.append((below + w / 2) / total)
        below += w
    for bins, coord in ((log_bins, lambda i: (math.log(ms[i]) - lo) / span),
                        (slots - log_bins, lambda i: pos[i])):
        for b in range(bins):
            members = [i for i in inner if i not in chosen
                       and b / bins <= coord(i) < (b + 1) / bins + (b == bins - 1)]
            if members:
                chosen.add(_heaviest(members, ms, weights, must))
    rest = [i for i in inner if i not in chosen]
    while len(chosen) < cap and rest:
        pick = _heaviest(rest, ms, weights, must)
        chosen.add(pick)
        rest.remove(pick)
    kept = sorted(chosen)
    return kept, _fold_targets(kept, n)


def _fold_targets(kept: Sequence[int], n: int) -> dict[int, int]:
    targets, k = {}, 0
    for i in range(n):
        while k < len(kept) and kept[k] < i:
            k += 1
        if k < len(kept) and kept[k] != i:
            targets[i] = kept[k]
    return targets
