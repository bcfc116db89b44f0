"""Autotune results keyed by bucket, served only at or below the size they were measured at."""

from __future__ import annotations

import pytest
from autotune_kit import ARCH, K, N, ScriptedDevice, install

import oasr_core
from oasr_core import database, runtime
from oasr_core.autotuning import Result, ResultIndex
from oasr_core.shapes import bucket
from oasr_core.types import Tier

KEY = "fake|op=fake|dt=fp16|N=512|K=256"


def result(m, choice="torch", *, legacy_bucket=None, point=None, key=KEY):
    config = None if choice == "torch" else {"lane": "fake_lane"}
    if legacy_bucket is not None:
        return Result(key=key, bucket=legacy_bucket, m=None, choice=choice, config=config)
    return Result(key=key, bucket=m if point else bucket(m), m=m, choice=choice, point=point,
                  config=config)


@pytest.mark.parametrize("m, edge", [(1, 8), (8, 8), (9, 16), (120, 120), (121, 128),
                                     (128, 128), (129, 181), (181, 181), (182, 256),
                                     (725, 1024), (1024, 1024), (1025, 2048), (2049, 4096)])
def test_bucket_edges_step_8_then_sqrt2_then_doubling(m, edge):
    assert bucket(m) == edge


def test_a_result_serves_its_bucket_at_or_below_the_measured_size():
    index = ResultIndex([result(100, "a")])
    assert bucket(100) == 104 and bucket(97) == 104
    assert [index.lookup(KEY, m) is not None for m in (97, 98, 100)] == [True] * 3
    assert [index.lookup(KEY, m) for m in (101, 104)] == [None, None]
    assert index.lookup(KEY, 96) is None  # bucket 96: another bucket, never measured


def test_closest_measured_size_at_or_above_wins():
    index = ResultIndex([result(100, "a"), result(98, "b"), result(104, "c")])
    assert index.lookup(KEY, 97).choice == "b"
    assert index.lookup(KEY, 98).choice == "b"
    assert index.lookup(KEY, 99).choice == "a"
    assert index.lookup(KEY, 101).choice == "c"


@pytest.mark.parametrize("measured, inside, outside", [
    (128, [121, 127, 128], [129, 120]),
    (150, [129, 150], [151, 181]),
    (1000, [725, 999, 1000], [1001, 1024]),
    (3000, [2049, 3000], [3001, 4096]),
])
def test_bucket_boundaries_never_leak(measured, inside, outside):
    index = ResultIndex([result(measured)])
    assert all(index.lookup(KEY, m) is not None for m in inside)
    assert all(index.lookup(KEY, m) is None for m in outside)


def test_a_legacy_result_serves_its_whole_bucket_after_measured_ones():
    index = ResultIndex([result(None, "old", legacy_bucket=104), result(99, "new")])
    assert index.lookup(KEY, 98).choice == "new"
    assert index.lookup(KEY, 103).choice == "old"
    assert index.lookup(KEY, 104).choice == "old"
    assert index.lookup(KEY, 105) is None


def test_an_exact_point_serves_that_point_only():
    index = ResultIndex([result(2996, "p", point="1x3000")])
    assert index.lookup(KEY, 2996, "1x3000").choice == "p"
    assert index.lookup(KEY, 2996, "2x1500") is None
    assert index.lookup(KEY, 2996) is None


def test_results_keyed_under_other_edges_are_rekeyed_by_their_measured_size():
    moved = Result(key=KEY, bucket=128, m=100, choice="torch")  # written when 100 sat in 128
    index = ResultIndex([moved])
    found = index.lookup(KEY, 100)
    assert (found.m, found.bucket) == (100, 104)
    assert index.lookup(KEY, 101) is None


@pytest.fixture
def tune(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
    device = ScriptedDevice()
    install(device)
    yield device, tmp_path / "user"
    runtime.install_runtime(None)


def pick(m):
    return oasr_core.select("fake", "fake", "fp16", (N, K), m, ARCH)


def test_a_larger_size_in_the_bucket_is_measured_inside_and_falls_back_outside(tune):
    device, _ = tune
    with oasr_core.autotune(arch=ARCH, timer=device.timer, publish=False):
        pick(100)
        assert pick(101).tier is Tier.USER
        pick(97)
    assert device.benched == [((N, K), 100), ((N, K), 101)]
    assert pick(101).tier is Tier.DEFAULT


def test_published_winners_end_at_the_measured_size_never_the_bucket_edge(tune):
    """The original published a winner at its bucket's upper edge, so sizes up to the edge
    ran a config nobody measured there. Every published bound must be a measured size."""
    device, user = tune
    measured = [100, 150, 1000, 3000, 8]
    with oasr_core.autotune(arch=ARCH, timer=device.timer) as session:
        for m in measured:
            pick(m)
    assert sorted(r.m for r in session.results) == sorted(measured)
    tf = database.read_tuning_file(database.tier_path(
        user, ARCH, runtime.get_runtime().registry.family("fake")))
    entry = tf.entries[KEY]
    bounds = {r.m_hi for r in entry.regions}
    assert None not in bounds
    assert bounds <= set(measured)
    assert max(bounds) == max(measured)
    edges = {bucket(m) for m in measured}
    assert not (bounds & edges - set(measured))
    winners = {r.m: r.choice for r in session.results}
    ms = sorted(measured)
    for lo, hi in zip([0, *ms[:-1]], ms, strict=True):  # (lo, hi] runs what was measured at hi
        for size in {lo + 1, (lo + hi) // 2 + 1, hi}:
            sel = pick(size)
            assert (sel.tier, sel.choice_id) == (Tier.USER, winners[hi]), size
    for size in range(ms[-1] + 1, bucket(ms[-1]) + 1, 37):
        assert pick(size).tier is Tier.DEFAULT, size
