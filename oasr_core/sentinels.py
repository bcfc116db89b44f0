"""What a sentinel choice launches: the one place ``default`` and ``heuristic`` are resolved.

A tuning file, a measurement log or an autotune result may name a sentinel instead of a
config. Selection (serving it), the build (measuring it as an arm and logging the config it
stood for) and the autotuner (measuring and re-serving its results) all need the config of
the lane that a sentinel means at a problem; :func:`sentinel_config` is that answer for all
three, so the three can never disagree about which kernel a sentinel is.

A tuning file's sentinels are stamped, so a table means the same kernels in every process:

* ``default``: the build writes the file lane's default config id into the soft stamp
  (``"default"``; per entry, like every soft stamp, when entries of several writers mix).
  :func:`file_sentinel_config` serves a ``default`` region with that config, and only on the
  file's own lane: read under another active lane it is skipped with the same warning as a
  foreign explicit config id, and a stamped default the lane can no longer run (gone from
  its space, not compiled, unable to run the shape) is skipped the same way. Stamping the
  id rather than rewriting the region to it keeps the region a sentinel, so reports still
  say the default was within the gate there, and the committed tables and logs keep their
  regions. A file without the stamp (version 1, or a log that did not record it) means
  the file lane's current default.
* ``heuristic``: a shape heuristic's answer varies with M inside one region, so no single
  config id can stand for it. What it depends on is stamped instead: the device's SM count
  is the ``sku`` stamp's ``sms``, and the heuristic's tables are the family's own soft stamp
  (``Family.soft_validators``, e.g. a digest of a fitted-ladder file). A difference in
  either marks the file's entries stale (``oasr tune status``) and the region is still
  served with this process's heuristic: that is what the family's untuned fallback would
  serve anyway, so skipping it would only relabel the tier, and every entry of such a file
  is stale rather than only the heuristic regions because every region was chosen against
  the heuristic as the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oasr_core.types import Config, Family, Lane, Problem, Sentinel

DEFAULT_STAMP = "default"
"""The soft-stamp key holding the file lane's default config id."""


def sentinel_config(family: Family, lane: Lane | None, sentinel: Sentinel,
                    problem: Problem | Any) -> Config | None:
    """The config of ``lane`` that ``sentinel`` launches at ``problem``; None when it launches
    none of the lane's configs (``torch``, ``fused``), when there is no lane, or when the family
    has no shape heuristic behind ``heuristic``.

    ``default`` is the lane's default config; ``heuristic`` is the family's shape heuristic
    (``Family.sentinel_heuristic``), asked for this process's device.
    """
    if lane is None:
        return None
    if sentinel is Sentinel.DEFAULT:
        return lane.default
    if sentinel is Sentinel.HEURISTIC and family.sentinel_heuristic is not None:
        return family.sentinel_heuristic(problem, lane)
    return None


def choice_config(family: Family, lane: Lane, choice: Config | Sentinel,
                  problem: Problem | Any) -> Config | None:
    """The config a bench arm launches: ``choice`` itself, or what the sentinel stands for."""
    if isinstance(choice, Sentinel):
        return sentinel_config(family, lane, choice, problem)
    return choice


def stamp_sentinels(soft: Mapping[str, Any], lane: Lane | None) -> dict[str, Any]:
    """``soft`` with what ``default`` means on ``lane`` (unless it already says): the stamp a
    writer measuring on ``lane`` puts on the entries it writes."""
    stamped = dict(soft)
    if lane is not None:
        stamped.setdefault(DEFAULT_STAMP, lane.default_config)
    return stamped


def file_sentinel_config(family: Family, lane: Lane, sentinel: Sentinel, problem: Problem, *,
                         file_lane: str, stamp: Any) -> tuple[Config | None, str | None]:
    """What a tuning file's ``sentinel`` region serves on ``lane``: ``(config, None)``, or
    ``(None, why)`` when the region must be skipped (see the module docstring).

    ``file_lane`` is the lane the file was measured on; ``stamp`` the soft stamp its entry was
    measured under (``TuningFile.entry_soft``).
    """
    if sentinel is not Sentinel.DEFAULT:
        return sentinel_config(family, lane, sentinel, problem), None
    if file_lane != lane.name:
        return None, f"belongs to lane {file_lane!r}, not this process's lane {lane.name!r}"
    stamped = stamp.get(DEFAULT_STAMP) if stamp is not None else None
    if not isinstance(stamped, str) or stamped in ("*", lane.default_config):
        why = lane.unusable_reason(lane.default, problem)
        return (lane.default, None) if why is None else (
            None, f"means the lane default {lane.default_config!r} here, and it {why}")
    config = lane.config(stamped)
    if config is None:
        return None, f"was measured as {stamped!r}, which is not in lane {lane.name!r}'s space"
    why = lane.unusable_reason(config, problem)
    return (config, None) if why is None else (None, f"was measured as {stamped!r}, which {why}")
