"""A reload that references a config the loaded production module lacks drops that module."""

from __future__ import annotations

from oasr_scaled_mm import jit, launch, ops
from oasr_scaled_mm.config_space import LANE_SM90, OP_MM


def test_reload_drops_a_module_missing_a_newly_referenced_config(monkeypatch):
    base = set(jit.production_ids(LANE_SM90, "sm90", ()))
    extra = next(c.id for c in jit.lane_configs(LANE_SM90, "sm90") if c.id not in base)
    monkeypatch.setattr(jit, "runtime_referenced", lambda lane, arch: frozenset({extra}))
    held = set(base)
    monkeypatch.setattr(launch.LIBRARIES, "_load",
                        lambda lane, arch: {(OP_MM, i): object() for i in held})
    launch.forget_libraries()
    launch.library(LANE_SM90, "sm90")
    ops.clear_memo(epoch=2)
    assert (LANE_SM90, "sm90") not in dict(launch.LIBRARIES.items())
    held.add(extra)
    launch.library(LANE_SM90, "sm90")
    ops.clear_memo(epoch=3)
    assert (LANE_SM90, "sm90") in dict(launch.LIBRARIES.items())
    launch.forget_libraries()
