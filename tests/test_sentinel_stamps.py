"""A tuning file's sentinels mean the same kernels in every process: ``default`` is served as
the file lane's stamped default and only on that lane; the build and the autotuner stamp it;
a heuristic's own stamp marks entries stale."""

from __future__ import annotations

import warnings

import pytest
from oasr_test_plugins import ARCH

import oasr_core
from oasr_core import database, runtime
from oasr_core.build import logged_default
from oasr_core.errors import OasrWarning
from oasr_core.sentinels import DEFAULT_STAMP, file_sentinel_config, stamp_sentinels
from oasr_core.types import Problem, Sentinel, Tier

KEY_DIMS = ("gemm", "half", (512, 256))


def _write(root, regions, *, lane="tg_main", soft=None):
    rt = runtime.get_runtime()
    fam = rt.registry.family("tg")
    key = database.signature_key(fam, *KEY_DIMS)
    configs = {c: rt.registry.lane("tg_main").config(c) for _, c in regions
               if Sentinel.parse(c) is None}
    database.write_entries(database.tier_path(root, ARCH, fam), family=fam, arch=ARCH,
                           lane=lane, entries={key: database.Entry(regions=regions)},
                           configs=configs, soft=soft or {})
    rt.reload()


def _select(m=64, **kw):
    return oasr_core.select("tg", "gemm", "fp16", (512, 256), m, ARCH, **kw)


def test_an_unstamped_default_region_is_the_file_lanes_default(tiers):
    _write(tiers["system"], [(None, "default")])
    sel = _select()
    assert (sel.choice, sel.tier, sel.config.id) == (Sentinel.DEFAULT, Tier.SYSTEM, "d")


def test_a_stamped_default_serves_the_kernel_it_was_measured_as(tiers):
    _write(tiers["system"], [(None, "default")], soft={DEFAULT_STAMP: "b"})
    sel = _select()
    assert (sel.choice, sel.tier, sel.config.id) == (Sentinel.DEFAULT, Tier.SYSTEM, "b")


def test_a_default_read_under_another_lane_is_skipped_like_a_foreign_config(tiers):
    _write(tiers["user"], [(None, "default")], lane="tg_other")
    _write(tiers["system"], [(None, "a")], lane="tg_main")
    with pytest.warns(OasrWarning, match=r"names 'default' \(tg_other\), which belongs to "
                                         r"lane 'tg_other', not this process's lane 'tg_main'"):
        sel = _select()
    assert (sel.choice_id, sel.tier) == ("a", Tier.SYSTEM)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _select(m=65).choice_id == "a"
    # Under the file's own lane the same region serves that lane's default.
    sel = _select(lane="tg_other")
    assert (sel.choice, sel.tier, sel.config.id) == (Sentinel.DEFAULT, Tier.USER, "x")


@pytest.mark.parametrize("stamp, why", [("gone", "not in lane 'tg_main'"),
                                        ("uncompiled", "compiled set")])
def test_a_stamped_default_the_lane_cannot_run_is_skipped(tiers, stamp, why):
    _write(tiers["system"], [(None, "default")], soft={DEFAULT_STAMP: stamp})
    with pytest.warns(OasrWarning, match=f"measured as '{stamp}'.*{why}"):
        sel = _select()
    assert (sel.tier, sel.config.id) == (Tier.DEFAULT, "d")


def test_other_sentinels_resolve_as_before(tiers):
    rt = runtime.get_runtime()
    fam, lane = rt.registry.family("tg"), rt.registry.lane("tg_main")
    problem = Problem(family="tg", op="gemm", dtype="fp16", dims=(("N", 512), ("K", 256)), m=8)
    assert file_sentinel_config(fam, lane, Sentinel.TORCH, problem, file_lane="tg_other",
                                stamp={}) == (None, None)


def test_writers_stamp_the_lanes_default_and_keep_a_given_one(tiers):
    lane = runtime.get_runtime().registry.lane("tg_main")
    assert stamp_sentinels({"impl_hash": "1"}, lane) == {"impl_hash": "1", DEFAULT_STAMP: "d"}
    assert stamp_sentinels({DEFAULT_STAMP: "b"}, lane) == {DEFAULT_STAMP: "b"}
    assert stamp_sentinels({"nvcc": None}, None) == {"nvcc": None}


def test_a_replayed_log_stamps_the_config_its_default_arms_ran():
    rows = [{"params": {"kind": "default", "config": "ws_64"}}, {"params": {"kind": "torch"}},
            {"params": {"tile": [64, 64]}}, {"params": {"kind": "default", "config": "ws_64"}}]
    assert logged_default(rows) == "ws_64"
    assert logged_default(rows + [{"params": {"kind": "default", "config": "pp_128"}}]) is None
    assert logged_default(rows[1:3]) is None


def test_a_heuristic_stamp_difference_marks_entries_stale():
    stamped = {"heuristic": "ladder-1111", "sku": {"name": "H200", "sms": 132, "l2": 1}}
    assert database.stale_reasons(stamped, {"heuristic": "ladder-2222"}) == [
        "heuristic ladder-1111 != ladder-2222"]
    assert database.stale_reasons(stamped, {"sku": {"name": "H100", "sms": 114, "l2": 1}}) == [
        "sku H200 (sms=132, l2=1) != H100 (sms=114, l2=1)"]
