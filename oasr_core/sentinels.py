"""What a sentinel choice launches: the one place ``default`` and ``heuristic`` are resolved.

A tuning file, a measurement log or an autotune result may name a sentinel instead of a
config. Selection (serving it), the build (measuring it as an arm and logging the config it
stood for) and the autotuner (measuring and re-serving its results) all need the config of
the lane that a sentinel means at a problem; :func:`sentinel_config` is that answer for all
three, so the three can never disagree about which kernel a sentinel is.
"""

from __future__ import annotations

from typing import Any

from oasr_core.types import Config, Family, Lane, Problem, Sentinel


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
