"""Which configs of a lane a loaded tuning file can serve: what its production module links.

A file names configs in its entries and coverage basis, and sentinels (``default``,
``heuristic``) whose configs it launches only through the lane: ``default`` the file's stamped
default id (:data:`oasr_core.sentinels.DEFAULT_STAMP`, else the lane's default), ``heuristic``
the family's shape heuristic at the problem. A production module that lacks one of these
serves that region from torch with a warning ("is not in this process's ... module"): the
compile set is computed here so that it never does. The heuristic's pick varies with M inside
a region, so it is asked at each region's bounds (its first and last M) and at each exact
point; families whose heuristic is a ladder link the whole ladder anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from oasr_core.database import parse_signature_key
from oasr_core.sentinels import DEFAULT_STAMP
from oasr_core.types import Family, Lane, Problem, Sentinel


def referenced_ids(family: Family, lane: Lane | None, lane_name: str, tf: Any,
                   ops: Iterable[str] | None = None) -> set[str]:
    """Config ids of ``lane_name`` that tier file ``tf`` can serve (module docstring); only
    the entries of ``ops`` (and then no coverage basis) when given."""
    wanted = None if ops is None else frozenset(ops)
    ids: set[str] = set()
    if wanted is None:
        ids.update(c for c in tf.coverage_basis if c in tf.configs)
    for key in tf.entries:
        try:
            parsed = parse_signature_key(key)
        except ValueError:
            continue
        if wanted is not None and parsed.op not in wanted:
            continue
        choices = tf.entry_choices(key)
        ids.update(c for c in choices if c in tf.configs)
        if lane is not None and tf.lane == lane_name:
            ids.update(sentinel_ids(family, lane, tf, key, parsed, choices))
    return {c for c in ids if c in tf.configs and tf.configs[c].lane == lane_name
            or c not in tf.configs}


def sentinel_ids(family: Family, lane: Lane, tf: Any, key: str, parsed: Any,
                 choices: frozenset[str]) -> set[str]:
    """The config ids the sentinel regions of entry ``key`` launch on ``lane``."""
    out: set[str] = set()
    if Sentinel.DEFAULT.value in choices:
        stamped = tf.entry_soft(key).get(DEFAULT_STAMP)
        out.add(stamped if isinstance(stamped, str) else lane.default_config)
    if Sentinel.HEURISTIC.value in choices and family.sentinel_heuristic is not None:
        for problem in _problems(family, tf, key, parsed):
            try:
                picked = family.sentinel_heuristic(problem, lane)
            except Exception:  # a heuristic that cannot judge a sample: the others still count
                continue
            if picked is not None:
                out.add(picked.id)
    return out


def _problems(family: Family, tf: Any, key: str, parsed: Any) -> Iterator[Problem]:
    """Problems at the heuristic regions' first and last M and at the entry's points."""
    try:
        entry = tf.entries[key]
        dims = tuple((name, int(value)) for name, value in parsed.dims)
    except Exception:  # a malformed lazy entry: selection skips it too
        return
    dtype = _dtype(family, parsed.dtype)
    heuristic = Sentinel.HEURISTIC.value
    low = 1
    for region in entry.regions:
        high = region.m_hi if region.m_hi is not None else low
        if region.choice == heuristic:
            for m in dict.fromkeys((low, high)):
                yield Problem(family=family.name, op=parsed.op, dtype=dtype, dims=dims, m=m)
        low = (region.m_hi or low) + 1
    for point, choice in entry.points.items():
        if choice == heuristic:
            m = _point_m(point)
            if m is not None:
                yield Problem(family=family.name, op=parsed.op, dtype=dtype, dims=dims, m=m,
                              point=point)


def _dtype(family: Family, key_dtype: str | None) -> str:
    if key_dtype is None:
        return family.dtypes[0]
    members = family.dtype_classes.get(key_dtype)
    return members[0] if members else key_dtype


def _point_m(point: str) -> int | None:
    """A point's size for the heuristic: the product of its ``x``-joined integers."""
    try:
        m = 1
        for part in point.split("x"):
            m *= int(part)
        return m
    except ValueError:
        return None
