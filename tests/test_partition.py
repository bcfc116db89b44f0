"""Partition: cover, DP segmentation, the noise- and overlap-aware gate, regions."""

from __future__ import annotations

import pytest

from oasr_core.partition import (
    Cell,
    PartitionOptions,
    Point,
    coverage_basis,
    greedy_cover,
    partition,
)


def pt(m, weight=1.0, alpha=0.0, incumbent=None, sigma=0.002, **times_us):
    """A point with each arm at ``times_us`` (GPU us) and ``sigma`` relative noise."""
    cells = {}
    for arm, t in times_us.items():
        if isinstance(t, tuple):
            gpu, issue = t
        else:
            gpu, issue = t, None
        cells[arm] = Cell(gpu / 1000, sigma * gpu / 1000, issue, rounds=24)
    return Point(m, weight, cells, alpha=alpha, incumbent=incumbent)


def regions(points, census_max=None, **opts):
    return partition(points, "default", PartitionOptions(**opts), census_max=census_max).regions


def test_one_near_best_config_covers_alone():
    pts = [pt(16, default=10, a=5.0, b=4.9), pt(64, default=10, a=5.0, b=5.3),
           pt(256, default=10, a=6.0, b=6.1)]
    assert greedy_cover(pts, 0.03, always=("default",)) == ["default", "a"]
    assert regions(pts, census_max=256) == ((256, "a"),)


def test_disjoint_winners_need_both():
    pts = [pt(16, default=10, a=4, b=9), pt(64, default=10, a=4, b=9),
           pt(1024, default=10, a=9, b=4), pt(4096, default=10, a=9, b=4)]
    assert set(greedy_cover(pts, 0.03)) == {"a", "b"}
    assert regions(pts) == ((64, "a"), (4096, "b"))


def test_dp_lambda_zero_follows_winners_and_a_large_lambda_collapses():
    pts = [pt(16, default=10, a=4.0, b=4.2), pt(32, default=10, a=4.2, b=4.0),
           pt(64, default=10, a=4.0, b=4.2), pt(128, default=10, a=4.2, b=4.0)]
    assert regions(pts, lam_frac=0.0, cover_eps=0.0) == (
        (16, "a"), (32, "b"), (64, "a"), (128, "b"))
    assert len(regions(pts, lam_frac=100.0, cover_eps=0.0)) == 1


def test_a_marginal_win_keeps_the_fallback():
    part = partition([pt(64, default=10.0, a=9.7), pt(128, default=10.0, a=9.7)], "default",
                     census_max=128)
    assert part.regions == ((None, "default"),)
    assert any("< gate 1.05" in n for n in part.notes)


def test_a_win_within_the_noise_keeps_the_fallback():
    noisy = [pt(m, sigma=0.05, default=11.0, a=10.0) for m in (64, 128)]
    part = partition(noisy, "default", census_max=128)
    assert part.regions == ((None, "default"),)
    assert any("within the noise" in n for n in part.notes)
    quiet = [pt(m, sigma=0.005, default=11.0, a=10.0) for m in (64, 128)]
    assert regions(quiet, census_max=128) == ((128, "a"),)


def test_a_real_win_makes_a_region_and_the_fallback_takes_the_rest():
    pts = [pt(16, default=10, a=5), pt(64, default=10, a=5.2), pt(512, default=10, a=10.4),
           pt(2048, default=20, a=26)]
    part = partition(pts, "default", census_max=2048)
    assert part.regions == ((64, "a"), (None, "default"))
    assert part.choices == ("a", "a", "default", "default")
    assert part.notes[0].startswith("M 16..64: a (1.96x vs default)")


def test_issue_cost_case_alpha_one():
    """cuBLAS 18.0 us GPU + 14 us issue loses to a CUTLASS tile at 18.4 us + 9 us."""
    def pts(alpha):
        return [pt(m, alpha=alpha, default=(30.0, 9.0), torch=(18.0, 14.0), tile=(18.4, 9.0))
                for m in (256, 512)]

    assert regions(pts(1.0), census_max=512) == ((512, "tile"),)
    assert pts(1.0)[0].time("tile") == pytest.approx(0.0274)
    assert regions(pts(0.0), census_max=512) == ((None, "torch"),)


def test_ties_go_to_the_incumbent():
    tie = [pt(m, incumbent="b", default=10, a=5.0, b=5.02) for m in (64, 128)]
    assert regions(tie, census_max=128) == ((128, "b"),)
    clear = [pt(m, incumbent="b", default=10, a=5.0, b=5.5) for m in (64, 128)]
    assert regions(clear, census_max=128) == ((128, "a"),)
    mixed = [*tie, pt(256, incumbent="a", default=10, a=5.0, b=5.3)]
    part = partition(mixed, "default", PartitionOptions(lam_frac=0.0), census_max=256)
    assert part.cover == ("default", "a")
    assert part.regions == ((128, "b"), (256, "a"))
    assert any("incumbent kept" in n for n in part.notes)


def test_a_config_never_serves_above_its_largest_measured_size():
    pts = [pt(64, default=10, a=5), pt(512, default=10, a=5)]
    assert regions(pts, census_max=512) == ((512, "a"),)
    assert regions(pts, census_max=4096) == ((512, "a"),)


def test_a_sentinel_becomes_the_catch_all_only_when_measured_to_the_census_maximum():
    pts = [pt(64, default=10, a=5), pt(512, default=10, a=12)]
    assert regions(pts, census_max=512) == ((64, "a"), (None, "default"))
    assert regions(pts, census_max=1024) == ((64, "a"), (512, "default"))
    assert regions([pt(64, default=10, torch=5)], census_max=64) == ((None, "torch"),)


def test_a_win_through_self_overlap_keeps_the_fallback():
    def pts(solo_us):
        return [Point(m, 1.0, {"default": Cell(0.010, 0.00001, solo_ms=0.0101),
                               "pdl": Cell(0.006, 0.00001, solo_ms=solo_us / 1000,
                                           overlap=True)}) for m in (64, 128)]

    part = partition(pts(11.0), "default", census_max=128)
    assert part.regions == ((None, "default"),) and "self-overlap" in " ".join(part.notes)
    assert partition(pts(8.0), "default", census_max=128).regions == ((128, "pdl"),)


def test_a_fallback_that_cannot_run_does_not_block_a_config():
    pts = [Point(64, 1.0, {"a": Cell(0.010, 0.0001)}), pt(128, default=10, a=10)]
    assert regions(pts, census_max=128) == ((64, "a"), (None, "default"))


def test_points_with_nothing_measured_are_ignored():
    part = partition([Point(64, 1.0, {})], "default")
    assert part.regions == () and part.notes == ("no point was measured",)


def test_regrets_and_summary_note():
    pts = [pt(16, default=10, a=5, b=4.9), pt(64, default=10, a=5, b=5.3)]
    part = partition(pts, "default", census_max=64)
    assert part.regrets[0] == pytest.approx(5 / 4.9 - 1)
    assert "worst regret 2.0% at M=16" in part.notes[-1]


def test_coverage_basis_counts_points_alike_and_drops_sentinels():
    sig1 = [pt(16, weight=100, default=10, torch=4, a=5), pt(64, weight=100, default=10, a=5)]
    sig2 = [pt(16, default=10, b=4), pt(64, default=10, b=4, a=9)]
    assert coverage_basis([sig1, sig2], size=8) == ["b", "a"]
    assert coverage_basis([sig1, sig2], size=1) == ["b"]


def test_uniform_share_keeps_light_points_in_the_objective():
    from oasr_core.partition import blend_weights

    pts = [Point(m=m, weight=w, cells={}) for m, w in ((16, 0.001), (4096, 100.0))]
    blended = blend_weights(pts, 0.5)
    assert sum(p.weight for p in blended) == pytest.approx(100.001)
    assert blended[0].weight == pytest.approx(0.5 * 0.001 + 0.5 * 50.0005)
    assert blend_weights(pts, 0.0) == pts


def test_near_ties_go_to_torch_so_noise_cannot_flip_two_builds():
    """Two builds measure torch and a config 0.5% apart, in opposite orders: with the
    sentinel preference both serve torch; without it each serves its own noise's winner."""
    def build(torch_us, a_us, prefer):
        pts = [pt(m, default=20.0, torch=torch_us, a=a_us) for m in (64, 256, 1024)]
        return regions(pts, census_max=1024, prefer_sentinels=prefer)

    first, second = build(10.0, 9.95, True), build(9.95, 10.0, True)
    assert first == second == ((None, "torch"),)
    assert build(10.0, 9.95, False) != build(9.95, 10.0, False)
    # a real win (beyond the tie band and the noise) still goes to the config
    assert build(10.0, 9.0, True) == ((1024, "a"),)
