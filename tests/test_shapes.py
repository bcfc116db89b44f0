"""Bucket edges, ladders, fill points and census thinning."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oasr_core import shapes


def test_edges_step_8_then_sqrt2_then_doubling():
    assert shapes.EDGES[:16] == tuple(range(8, 129, 8))
    assert shapes.EDGES[16:22] == (181, 256, 362, 512, 724, 1024)
    assert shapes.EDGES[22:] == tuple(1 << p for p in range(11, 21))


@pytest.mark.parametrize("m, edge", [(0, 8), (1, 8), (8, 8), (9, 16), (128, 128), (129, 181),
                                     (1024, 1024), (1025, 2048), (1 << 20, 1 << 20),
                                     ((1 << 20) + 1, 1 << 21), (3_000_000, 1 << 22)])
def test_bucket_examples(m, edge):
    assert shapes.bucket(m) == edge


@given(st.integers(min_value=1, max_value=1 << 24))
def test_bucket_never_rounds_down_and_is_tight(m):
    edge = shapes.bucket(m)
    assert edge >= m
    smaller = [e for e in shapes.EDGES if e < edge]
    assert not smaller or smaller[-1] < m


def test_ladder_spans_the_buckets_of_both_ends():
    assert shapes.ladder(1000, 100) == [104, 112, 120, 128, 181, 256, 362, 512, 724, 1024]
    assert shapes.ladder(5) == [8]
    assert shapes.ladder(3 << 20, 1 << 20) == [1 << 20, 1 << 21, 1 << 22]


def test_fill_points_lie_strictly_between_census_sizes():
    census = [16, 416, 2152]
    fills = shapes.fill_points(census)
    assert fills == [e for e in shapes.EDGES if 16 < e < 2152]
    assert shapes.fill_points([64]) == [] and shapes.fill_points([]) == []
    assert 128 not in shapes.fill_points([64, 128, 256])


def test_capped_fill_goes_to_the_widest_gaps_first():
    assert shapes.fill_points([16, 416, 2152], 1) == [80]
    assert shapes.fill_points([16, 416, 2152], 3) == [80, 181, 1024]
    assert shapes.fill_points([16, 416, 2152], 0) == []


def test_thin_is_a_no_op_under_the_cap():
    kept, folds = shapes.thin([8, 16, 32], [1.0, 1.0, 1.0], 5)
    assert kept == [0, 1, 2] and folds == {}


def test_thin_caps_keeps_the_range_and_folds_dropped_points_upward():
    ms = list(range(8, 1200, 8))
    weights = [1.0] * len(ms)
    weights[50] = 100.0
    kept, folds = shapes.thin(ms, weights, 16)
    assert len(kept) == 16 and kept[0] == 0 and kept[-1] == len(ms) - 1
    assert 50 in kept
    assert set(folds) == set(range(len(ms))) - set(kept)
    for dropped, into in folds.items():
        assert ms[into] > ms[dropped] and into in kept
        assert not any(dropped < k < into for k in kept)


def test_thin_prefers_must_tune_among_equal_weights():
    ms = [8, 16, 24, 32, 40, 48]
    kept, _ = shapes.thin(ms, [1.0] * 6, 3, must=[False, False, False, True, False, False])
    assert kept == [0, 3, 5]


def test_thin_weight_bins_follow_the_traffic():
    ms = [2 ** (3 + i / 4) for i in range(40)]
    ms = sorted({math.ceil(m) for m in ms})
    weights = [0.01] * len(ms)
    heavy = list(range(20, 26))
    for i in heavy:
        weights[i] = 10.0
    kept, _ = shapes.thin(ms, weights, 8)
    assert len([k for k in kept if k in heavy]) >= 2
