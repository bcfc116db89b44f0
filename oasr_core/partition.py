"""From a cross-evaluated matrix of measurements to the regions of one tuning entry.

Input: the measured points of one signature, ascending in M, each with a weight and, per
arm, a :class:`Cell` (GPU median, sigma, host issue time, single-call time, overlap mark).
An arm's time at a point is its objective, GPU ms + alpha x issue ms. Then:

1. **Cover.** Weighted greedy set cover picks a small set of configs such that every point
   has one within ``cover_eps`` (3%) of its best. Ties go to the incumbent, then to the
   config with the lower weighted time over all points.
2. **Segments.** Dynamic programming cuts the M axis into segments, each served by one
   choice, minimising the weighted regret plus ``lam_frac`` x total weight per segment.
   A segment's choice is *gated* inside the DP, so a strong win on a few points can pay
   for its own segment instead of being diluted into a wide one:
   - its best cover config replaces the fallback only when it is faster by the gate
     (``min_speedup``) **and** beyond the measured noise (speedup >= 1 + ``noise_k`` x the
     combined relative sigma of the two); a win smaller than the noise keeps the fallback;
   - an arm marked as winning through self-overlap must also be faster alone (single-call
     graphs) than the fallback, else the fallback stays;
   - a tie goes to the incumbent: cover and segmentation see each incumbent's time divided
     by (1 + its tie band: ``tie``, or the noise when larger), so within the band it *is*
     the best, and keeping it costs no regret.
3. **Regions.** Each segment becomes ``[M of its last point, choice]``; regions round up, so
   a config serves only sizes at or below the largest it was measured at. The last region
   becomes the catch-all (``null``) only when its choice is a sentinel (torch, default,
   fused, heuristic: they adapt to any size, or are what an untuned call runs anyway) and
   the largest measured point is the signature's largest census size. A config region never
   does: above it the next tier (or the family's fallback) serves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import attrs

from oasr_core.types import Sentinel, freeze


@attrs.frozen
class Cell:
    """One arm measured at one point."""

    gpu_ms: float
    sigma_ms: float = 0.0
    issue_us: float | None = None
    solo_ms: float | None = None
    overlap: bool = False
    rounds: int = 0


@attrs.frozen
class Point:
    """One measured size of a signature: weight, eager fraction, and its cells by arm."""

    m: int
    weight: float
    cells: Mapping[str, Cell] = attrs.field(converter=freeze)
    alpha: float = 0.0
    must: bool = False
    incumbent: str | None = None
    fill: bool = False

    def time(self, arm: str) -> float:
        """The arm's objective here (inf when it was not measured)."""
        cell = self.cells.get(arm)
        if cell is None or not math.isfinite(cell.gpu_ms):
            return math.inf
        return cell.gpu_ms + self.alpha * (cell.issue_us or 0.0) / 1000.0

    def best(self) -> float:
        """The best objective measured here."""
        return min((self.time(a) for a in self.cells), default=math.inf)


@attrs.frozen
class PartitionOptions:
    """The partition's knobs (``oasr tune build`` flags of the same names)."""

    min_speedup: float = 1.05
    noise_k: float = 2.0
    tie: float = 0.01
    cover_eps: float = 0.03
    lam_frac: float = 0.005
    uniform_share: float = 0.5
    prefer_sentinels: bool = True
    """Give torch/fused (sentinels other than the fallback) the incumbent's tie band."""
    """Share of the weight spread evenly over the measured points (the rest follows the
    census). A census weighs what this deployment runs; the even share keeps every measured
    size's regret in the objective, so a table also serves the sizes other deployments run
    (the first H200 build without it: 0.3% weighted but 16% p95 per-point regret)."""


@attrs.frozen
class Partition:
    """The regions of one entry and how they were reached."""

    regions: tuple[tuple[int | None, str], ...]
    choices: tuple[str, ...]
    """The choice serving each input point (ascending M)."""
    regrets: tuple[float, ...]
    """Each point's regret against its best measured arm."""
    cover: tuple[str, ...]
    notes: tuple[str, ...]


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.inf


def _is_sentinel(arm: str) -> bool:
    return Sentinel.parse(arm) is not None


def blend_weights(points: Sequence[Point], share: float) -> list[Point]:
    """``points`` with ``share`` of their total weight spread evenly (see ``uniform_share``)."""
    total = sum(p.weight for p in points)
    if share <= 0 or not points or total <= 0:
        return list(points)
    even = total / len(points)
    return [attrs.evolve(p, weight=(1 - share) * p.weight + share * even) for p in points]


def favour_incumbents(points: Sequence[Point], opt: PartitionOptions,
                      fallback: str | None = None) -> list[Point]:
    """``points`` with each favoured arm's time divided by (1 + its tie band).

    Favoured are the point's incumbent and, with ``opt.prefer_sentinels``, the sentinel arms
    other than ``fallback`` (torch, fused: they serve any size and need no compiled config).
    The band is ``tie`` or, when larger, the noise between the arm and the point's best arm.
    Cover and segmentation run on these effective times, so a favoured arm within its band
    of the best counts as the best: ties go to it, at no regret, and two builds whose noise
    reorders near-equal arms still pick the same one.
    """
    out = []
    for p in points:
        favoured = [p.incumbent] if p.incumbent is not None else []
        if opt.prefer_sentinels:
            favoured += sorted(a for a in p.cells if _is_sentinel(a) and a != fallback
                               and a not in favoured)
        favoured = [a for a in favoured if a in p.cells and math.isfinite(p.time(a))]
        if not favoured:
            out.append(p)
            continue
        best = min(p.cells, key=lambda a: (p.time(a), a))
        cells = dict(p.cells)
        for arm in favoured:
            rel = [p.cells[a].sigma_ms / p.cells[a].gpu_ms for a in (arm, best)
                   if p.cells[a].gpu_ms > 0]
            band = max(opt.tie, opt.noise_k * math.hypot(*rel) if len(rel) == 2 else 0.0)
            cell = p.cells[arm]
            cells[arm] = attrs.evolve(cell, gpu_ms=cell.gpu_ms / (1 + band),
                                      sigma_ms=cell.sigma_ms / (1 + band),
                                      issue_us=None if cell.issue_us is None else
                                      cell.issue_us / (1 + band))
        out.append(attrs.evolve(p, cells=cells))
    return out


class _Segments:
    """Prefix sums over the points for every arm, and the gated choice of a segment.

    Regret sums use the effective times (:func:`favour_incumbents`); the gate and the
    reported speedups use the measured ones.
    """

    def __init__(self, points: Sequence[Point], effective: Sequence[Point], arms: Iterable[str],
                 fallback: str, opt: PartitionOptions) -> None:
        self.points, self.fallback, self.opt = points, fallback, opt
        self.best = [p.best() for p in points]
        self.arms = sorted(set(arms) | {fallback})
        self.sums: dict[str, list[tuple[float, float, float, int]]] = {}
        for arm in self.arms:
            acc, row = (0.0, 0.0, 0.0, 0), [(0.0, 0.0, 0.0, 0)]
            for p, e in zip(points, effective, strict=True):
                t = p.time(arm)
                if math.isfinite(t):
                    acc = (acc[0] + p.weight * (e.time(arm) / e.best() - 1.0),
                           acc[1] + p.weight * t, acc[2] + p.weight * p.cells[arm].sigma_ms,
                           acc[3])
                else:
                    acc = (acc[0], acc[1], acc[2], acc[3] + 1)
                row.append(acc)
            self.sums[arm] = row

    def stats(self, arm: str, i: int, j: int) -> tuple[float, float, float] | None:
        """(weighted effective regret, weighted time, weighted sigma) over points i..j-1."""
        lo, hi = self.sums[arm][i], self.sums[arm][j]
        if hi[3] - lo[3]:
            return None
        return hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]

    def margin(self, a: str, b: str, i: int, j: int) -> float:
        sa, sb = self.stats(a, i, j), self.stats(b, i, j)
        if sa is None or sb is None:
            return 0.0
        return self.opt.noise_k * math.hypot(_ratio(sa[2], sa[1]), _ratio(sb[2], sb[1]))

    def gate(self, arm: str, i: int, j: int) -> str | None:
        """Why ``arm`` may not replace the fallback on points i..j-1 (None: it may)."""
        fb, mine = self.stats(self.fallback, i, j), self.stats(arm, i, j)
        if mine is None:
            return "not measured throughout"
        if fb is None:
            unmeasured = self.sums[self.fallback][j][3] - self.sums[self.fallback][i][3]
            return None if unmeasured == j - i else f"{self.fallback} not measured throughout"
        speedup = _ratio(fb[1], mine[1])
        if speedup < self.opt.min_speedup:
            return f"only {speedup:.2f}x < gate {self.opt.min_speedup:g}"
        noise = self.margin(arm, self.fallback, i, j)
        if speedup < 1.0 + noise:
            return f"{speedup:.2f}x is within the noise (+-{100 * noise:.1f}%)"
        if any(p.cells[arm].overlap for p in self.points[i:j]):
            solo_arm = solo_fb = 0.0
            for p in self.points[i:j]:
                a, f = p.cells[arm].solo_ms, p.cells[self.fallback].solo_ms
                if a is not None and f is not None:
                    solo_arm += p.weight * a
                    solo_fb += p.weight * f
            if not solo_arm or solo_arm >= solo_fb:
                return f"{speedup:.2f}x only through self-overlap (not faster alone)"
        return None

    def choose(self, candidates: Sequence[str], i: int, j: int) -> tuple[str, float, str]:
        """The gated choice for points i..j-1: (arm, weighted regret, why); inf regret when
        no arm may serve them all."""
        scored = []
        for arm in candidates:
            s = self.stats(arm, i, j)
            if s is not None:
                scored.append((s[0], s[1], arm))
        if not scored:
            return self.fallback, math.inf, "nothing measured throughout"
        regret, _, choice = min(scored)
        why = ""
        if choice != self.fallback:
            why = self.gate(choice, i, j) or ""
            fb = self.stats(self.fallback, i, j)
            if why and fb is None:
                return choice, math.inf, why
            if why:
                return self.fallback, fb[0], f"{choice} {why}"
        fastest = min(scored, key=lambda x: (x[1], x[2]))[2]
        if fastest != choice and all(p.incumbent == choice for p in self.points[i:j]):
            why = f"incumbent kept: within its tie band of {fastest}"
        return choice, regret, why


def greedy_cover(points: Sequence[Point], eps: float, always: Sequence[str] = ()) -> list[str]:
    """Configs such that every point has one within ``eps`` of its best (weighted greedy).

    Starts from ``always``; each step adds the arm covering the most still-uncovered
    weight; ties go to the arm that is the incumbent of more weight, then to the lower total
    relative time over all points, then to the name.
    """
    bests = [p.best() for p in points]
    arms = sorted({a for p in points for a in p.cells})
    covers = {a: {k for k, p in enumerate(points) if p.time(a) <= (1 + eps) * bests[k]}
              for a in arms}
    incumbent = {a: sum(p.weight for p in points if p.incumbent == a) for a in arms}
    relative = {a: sum(p.weight * min(p.time(a) / b, 10.0)
                       for p, b in zip(points, bests, strict=True) if math.isfinite(b))
                for a in arms}
    chosen = list(dict.fromkeys(always))
    covered = set().union(*(covers.get(a, set()) for a in chosen))
    todo = {k for k, b in enumerate(bests) if math.isfinite(b)}

    def gain(a: str) -> tuple[float, int, float, float]:
        new = covers[a] - covered
        return sum(points[k].weight for k in new), len(new), incumbent[a], -relative[a]

    while todo - covered:
        pick = max((a for a in arms if a not in chosen), key=gain, default=None)
        if pick is None or not covers[pick] - covered:
            break
        chosen.append(pick)
        covered |= covers[pick]
    return chosen


def partition(points: Sequence[Point], fallback: str, options: PartitionOptions | None = None,
              *, census_max: int | None = None) -> Partition:
    """Regions for one signature's measured ``points`` (see the module docstring)."""
    opt = options or PartitionOptions()
    pts = sorted((p for p in points if math.isfinite(p.best())), key=lambda p: p.m)
    if not pts:
        return Partition((), (), (), (), ("no point was measured",))
    pts = blend_weights(pts, opt.uniform_share)
    effective = favour_incumbents(pts, opt, fallback)
    cover = greedy_cover(effective, opt.cover_eps, always=(fallback,))
    incumbents = sorted({p.incumbent for p in pts if p.incumbent is not None} - set(cover))
    candidates = [*cover, *(a for a in incumbents if any(a in p.cells for p in pts))]
    seg = _Segments(pts, effective, candidates, fallback, opt)
    n = len(pts)
    lam = opt.lam_frac * sum(p.weight for p in pts)
    cost = [0.0] + [math.inf] * n
    back: list[tuple[int, str, str]] = [(0, fallback, "")] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            if not math.isfinite(cost[i]):
                continue
            choice, regret, why = seg.choose(candidates, i, j)
            total = cost[i] + lam + regret
            if total < cost[j]:
                cost[j], back[j] = total, (i, choice, why)
    segments, j = [], n
    while j > 0:
        i, choice, why = back[j]
        segments.append((i, j, choice, why))
        j = i
    segments.reverse()
    return _assemble(pts, seg, segments, fallback, cover, census_max)


def _assemble(pts: Sequence[Point], seg: _Segments, segments: list, fallback: str,
              cover: Sequence[str], census_max: int | None) -> Partition:
    choices: list[str] = []
    notes: list[str] = []
    for i, j, choice, why in segments:
        choices.extend([choice] * (j - i))
        span = f"M {pts[i].m}..{pts[j - 1].m}" if j - i > 1 else f"M {pts[i].m}"
        fb, mine = seg.stats(fallback, i, j), seg.stats(choice, i, j)
        speed = f" ({_ratio(fb[1], mine[1]):.2f}x vs {fallback})" if (
            fb is not None and mine is not None and choice != fallback) else ""
        notes.append(f"{span}: {choice}{speed}" + (f"; {why}" if why else ""))
    regions: list[list] = []
    for p, choice in zip(pts, choices, strict=True):
        if regions and regions[-1][1] == choice:
            regions[-1][0] = p.m
        else:
            regions.append([p.m, choice])
    if _is_sentinel(regions[-1][1]) and census_max is not None and pts[-1].m >= census_max:
        regions[-1][0] = None
    regrets = tuple(p.time(c) / b - 1.0 for p, c, b in zip(pts, choices, seg.best, strict=True))
    worst = max(range(len(pts)), key=lambda k: regrets[k])
    total_w = sum(p.weight for p in pts) or 1.0
    weighted = sum(p.weight * r for p, r in zip(pts, regrets, strict=True)) / total_w
    notes.append(f"partition: {len(regions)} region(s) over {len(pts)} point(s); worst regret "
                 f"{100 * regrets[worst]:.1f}% at M={pts[worst].m}; weighted "
                 f"{100 * weighted:.2f}%")
    return Partition(tuple((r[0], r[1]) for r in regions), tuple(choices), regrets,
                     tuple(cover), tuple(notes))


def coverage_basis(point_sets: Iterable[Sequence[Point]], eps: float = 0.03,
                   size: int = 8) -> list[str]:
    """Up to ``size`` configs (no sentinels) covering every point of every signature.

    Points count once each (weight 1), so small and large signatures are covered alike; the
    model tier and the production compile set draw on these.
    """
    flat = [attrs.evolve(p, weight=1.0, incumbent=None) for ps in point_sets for p in ps
            if math.isfinite(p.best())]
    return [a for a in greedy_cover(flat, eps) if not _is_sentinel(a)][:size]
