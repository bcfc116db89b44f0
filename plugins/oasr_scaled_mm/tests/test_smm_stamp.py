"""The heuristic's tables are stamped into scaled_mm tuning files (soft validator
``heuristic``), so an entry measured against other ladders reads as stale."""

from __future__ import annotations

import attrs
from oasr_core import database

from oasr_scaled_mm import heuristic
from oasr_scaled_mm.config_space import LANE_SM90


def test_the_family_stamps_its_ladder_digest(monkeypatch):
    monkeypatch.setattr("oasr_scaled_mm.jit.soft_validators",
                        lambda: {"impl_hash": "abcd", "cutlass": None})
    stamps = heuristic.soft_validators()
    assert stamps == {"impl_hash": "abcd", "cutlass": None,
                      "heuristic": heuristic.ladder_digest()}
    assert len(stamps["heuristic"]) == 16


def test_another_fitted_or_unfitted_table_changes_the_digest(monkeypatch):
    # The plugin's conftest empties ARCH_LADDERS; load the shipped fitted file again.
    monkeypatch.setattr(heuristic, "ARCH_LADDERS", heuristic.load_fitted())
    before = heuristic.ladder_digest()
    assert heuristic.ladder_digest() == before
    (key, fitted), *_ = heuristic.ARCH_LADDERS.items()
    changed = attrs.evolve(fitted, fill=((0.25, 0.25, 0.25), *fitted.fill[1:]))
    monkeypatch.setitem(heuristic.ARCH_LADDERS, key, changed)
    refitted = heuristic.ladder_digest()
    assert refitted != before
    monkeypatch.setitem(heuristic.LADDERS, LANE_SM90,
                        attrs.evolve(heuristic.LADDERS[LANE_SM90], k_bounds=(512, 4096)))
    assert heuristic.ladder_digest() not in (before, refitted)
    assert database.stale_reasons({"heuristic": before}, {"heuristic": refitted}) == [
        f"heuristic {before} != {refitted}"]
