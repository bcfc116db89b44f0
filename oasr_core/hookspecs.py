"""Every hook an oasr plugin can implement (pluggy project ``oasr``).

SKELETON: signatures are fixed; docstrings to be completed to the STYLE.md standard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from oasr_core.types import Config, Family, Lane, Problem

hookspec = pluggy.HookspecMarker("oasr")


@hookspec
def oasr_register_families() -> Iterable[Family]:
    """Register kernel families (instances of ``oasr_core.types.Family``)."""


@hookspec
def oasr_register_lanes() -> Iterable[Lane]:
    """Register lanes (instances of ``oasr_core.types.Lane``) of any installed family."""


@hookspec(firstresult=True)
def oasr_select_lane(family: Family, arch: str, lanes: tuple[Lane, ...]) -> str | None:
    """Name the lane a family runs on an arch family; None = no opinion."""


@hookspec(firstresult=True)
def oasr_model_select(
    family: Family,
    lane: Lane,
    problem: Problem,
    candidates: tuple[Config, ...],
    model: Mapping[str, Any] | None,
) -> Config | None:
    """The cost-model tier: pick a config for a shape no tuning entry covers; None = no pick."""
