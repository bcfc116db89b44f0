"""A reload that references a config the loaded production module lacks drops that module."""

from __future__ import annotations

from oasr_gemm import jit, launch, ops
from oasr_gemm.config_space import LANE_SM90, SM90_DEFAULT


def _production(ids, monkeypatch):
    """Pretend the production module of sm90 was loaded holding ``ids``."""
    launch.forget_libraries()
    monkeypatch.setattr(launch.LIBRARIES, "_load", lambda lane, arch: {i: object() for i in ids})
    launch.library(LANE_SM90, "sm90")


def test_reload_drops_a_module_missing_a_newly_referenced_config(monkeypatch):
    base = set(jit.production_ids(LANE_SM90, "sm90", ()))
    extra = next(c.id for c in jit.lane_configs(LANE_SM90, "sm90") if c.id not in base)
    monkeypatch.setattr(jit, "runtime_referenced", lambda lane, arch: frozenset({extra}))
    _production(base, monkeypatch)
    ops.clear_memo(epoch=2)
    assert (LANE_SM90, "sm90") not in dict(launch.LIBRARIES.items())
    _production(base | {extra}, monkeypatch)
    ops.clear_memo(epoch=3)
    assert (LANE_SM90, "sm90") in dict(launch.LIBRARIES.items())
    launch.forget_libraries()


def test_an_installed_library_and_a_plain_memo_clear_are_left_alone(monkeypatch):
    monkeypatch.setattr(jit, "runtime_referenced", lambda lane, arch: frozenset({"x"}))
    launch.forget_libraries()
    launch.install_library(LANE_SM90, "sm90", {SM90_DEFAULT: object()})
    ops.clear_memo(epoch=2)  # a harness's library is not the production module
    assert (LANE_SM90, "sm90") in dict(launch.LIBRARIES.items())
    _production({SM90_DEFAULT}, monkeypatch)
    ops.clear_memo()  # no epoch: not a reload
    assert (LANE_SM90, "sm90") in dict(launch.LIBRARIES.items())
    launch.forget_libraries()
