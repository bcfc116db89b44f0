"""Runtime resolution: regions, tiers, dtype classes, lanes, skips, memo, epochs, counts."""

from __future__ import annotations

import warnings

import pytest
from oasr_test_plugins import ARCH, write

import oasr_core
from oasr_core import database, runtime, selection
from oasr_core.errors import OasrWarning, UnknownFamilyError
from oasr_core.types import Sentinel, Tier


def pick(m, op="gemm", dtype="fp16", dims=(512, 256), family="tg", **kw):
    sel = oasr_core.select(family, op, dtype, dims, m, ARCH, **kw)
    return sel.choice_id, sel.tier


def test_spec_example_regions_round_up(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[512, "a"], [2152, "b"],
                                                                 [None, "torch"]]})
    assert pick(416) == ("a", Tier.SYSTEM)
    assert pick(512) == ("a", Tier.SYSTEM)
    assert pick(513) == ("b", Tier.SYSTEM)
    assert pick(2152) == ("b", Tier.SYSTEM)
    assert pick(2153) == ("torch", Tier.SYSTEM)


def test_without_catch_all_falls_to_next_tier(tiers):
    write(tiers["user"], "tg", {("gemm", "half", (512, 256)): [[512, "a"], [2152, "b"]]})
    assert pick(2152) == ("b", Tier.USER)
    assert pick(2153) == ("default", Tier.DEFAULT)
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "torch"]]})
    assert pick(2153) == ("torch", Tier.SYSTEM)
    assert pick(100) == ("a", Tier.USER)


def test_tier_precedence_is_per_signature(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "b"]],
                                  ("gemm", "half", (256, 256)): [[None, "b"]]})
    write(tiers["user"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    assert pick(64) == ("a", Tier.USER)
    assert pick(64, dims=(256, 256)) == ("b", Tier.SYSTEM)
    assert pick(64, dims=(1024, 256)) == ("default", Tier.DEFAULT)


def test_half_serves_both_dtypes_and_exact_dtype_wins(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]],
                                  ("gemm", "bf16", (512, 256)): [[None, "b"]]})
    assert pick(64, dtype="fp16") == ("a", Tier.SYSTEM)
    assert pick(64, dtype="bf16") == ("b", Tier.SYSTEM)


def test_default_sentinel_resolves_to_lane_default(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "default"]]})
    sel = oasr_core.select("tg", "gemm", "fp16", (512, 256), 64, ARCH)
    assert (sel.choice, sel.tier, sel.config.id) == (Sentinel.DEFAULT, Tier.SYSTEM, "d")


def test_torch_sentinel_has_no_config(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "torch"]]})
    sel = oasr_core.select("tg", "gemm", "fp16", (512, 256), 64, ARCH)
    assert sel.choice is Sentinel.TORCH and sel.config is None


@pytest.mark.parametrize("bad, why", [("x", "lane"), ("uncompiled", "compiled set"),
                                      ("split8", "cannot run this shape")])
def test_unusable_config_warned_once_and_skipped(tiers, bad, why):
    if bad == "x":
        write(tiers["user"], "tg", {("gemm", "half", (512, 256)): [[None, "x"]]},
              lane="tg_other")
    else:
        write(tiers["user"], "tg", {("gemm", "half", (512, 256)): [[None, bad]]})
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "b"]]})
    with pytest.warns(OasrWarning, match=why) as record:
        assert pick(64) == ("b", Tier.SYSTEM)
        assert pick(65) == ("b", Tier.SYSTEM)
    assert len([r for r in record if issubclass(r.category, OasrWarning)]) == 1


def test_split_config_serves_where_k_allows(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 1024)): [[None, "split8"]],
                                  ("gemm", "half", (512, 256)): [[None, "split8"]]})
    assert pick(64, dims=(512, 1024)) == ("split8", Tier.SYSTEM)
    with pytest.warns(OasrWarning):
        assert pick(64, dims=(512, 256)) == ("default", Tier.DEFAULT)


def test_lane_override_resolves_for_that_lane(tiers):
    write(tiers["user"], "tg", {("gemm", "half", (512, 256)): [[None, "x"]]}, lane="tg_other")
    sel = oasr_core.select("tg", "gemm", "fp16", (512, 256), 64, ARCH, lane="tg_other")
    assert (sel.choice_id, sel.tier, sel.lane) == ("x", Tier.USER, "tg_other")
    with pytest.raises(UnknownFamilyError, match="not_a_lane"):
        oasr_core.select("tg", "gemm", "fp16", (512, 256), 64, ARCH, lane="not_a_lane")


def test_memoised_until_reload(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    first = oasr_core.select("tg", "gemm", "fp16", (512, 256), 64, ARCH)
    assert oasr_core.select("tg", "gemm", "fp16", (512, 256), 64, ARCH) is first
    assert oasr_core.select("tg", "gemm", "fp16", {"N": 512, "K": 256}, 64, ARCH) is first
    counts = dict(tiers["rt"].counts)
    assert counts[("tg", "gemm", "system")] == 1
    # a file changed on disk is not seen inside the epoch ...
    database.write_entries(
        database.tier_path(tiers["system"], ARCH, tiers["rt"].registry.family("tg")),
        family=tiers["rt"].registry.family("tg"), arch=ARCH, lane="tg_main",
        entries={"tg|op=gemm|dt=half|N=512|K=256": database.Entry(regions=((None, "b"),))},
        configs={"b": tiers["rt"].registry.lane("tg_main").config("b")}, soft={})
    assert pick(64) == ("a", Tier.SYSTEM)
    # ... until a new epoch starts
    epoch = oasr_core.reload()
    assert epoch == tiers["rt"].epoch
    assert pick(64) == ("b", Tier.SYSTEM)


def test_reload_listeners_hear_the_new_epoch(tiers):
    heard = []
    tiers["rt"].add_reload_listener(heard.append)
    oasr_core.reload()
    tiers["rt"].remove_reload_listener(heard.append)
    oasr_core.reload()
    assert heard == [tiers["rt"].epoch - 1]


def test_corrupt_user_file_never_crashes_selection(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "b"]]})
    bad = tiers["user"] / ARCH / "tg.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    for garbage in (b"{not json", b"", b"\x00\xff" * 40, b'{"schema_version": 99}', b"[]"):
        bad.write_bytes(garbage)
        oasr_core.reload()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            assert pick(64) == ("b", Tier.SYSTEM)
        assert any("user tier file skipped" in str(r.message) for r in rec)


def test_heuristic_family_fallback_and_measured_entry(tiers):
    sel = oasr_core.select("tq", "scaled_mm", "int8", (768, 256), 32, ARCH)
    assert (sel.choice, sel.tier, sel.config.id) == (Sentinel.HEURISTIC, Tier.HEURISTIC, "small")
    write(tiers["system"], "tq", {("scaled_mm", None, (768, 256)): [[None, "heuristic"]],
                                  ("scaled_mm", None, (512, 256)): [[64, "heuristic"],
                                                                    [None, "sk"]]})
    sel = oasr_core.select("tq", "scaled_mm", "int8", (768, 256), 4096, ARCH)
    assert (sel.choice_id, sel.tier, sel.config.id) == ("heuristic", Tier.SYSTEM, "big")
    assert pick(4096, "scaled_mm", "int8", (512, 256), "tq") == ("sk", Tier.SYSTEM)


def test_exact_points_then_regions(tiers):
    entry = database.Entry(points={"1x3000": "p"}, regions=((8192, "r"),))
    write(tiers["system"], "tc", {("conv1d", "fp16", (80, 384)): entry})
    kw = {"op": "conv1d", "dims": (80, 384), "family": "tc"}
    assert pick(6000, point="1x3000", **kw) == ("p", Tier.SYSTEM)
    assert pick(6000, point="2x3000", **kw) == ("r", Tier.SYSTEM)
    assert pick(9000, point="3x3000", **kw) == ("default", Tier.DEFAULT)


class ModelPlugin:
    @oasr_core.hookimpl
    def oasr_model_select(self, family, lane, problem, candidates, model):
        if family.name != "tg":
            return None
        return min(candidates, key=lambda c: abs(c.params["tile"][0] - problem.m))


def test_model_tier_serves_uncovered_shapes_only(tiers):
    tiers["rt"].pm.register(ModelPlugin())
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    assert pick(64) == ("a", Tier.SYSTEM)
    assert pick(70, dims=(768, 256)) == ("b", Tier.MODEL)
    assert pick(16, dims=(768, 256)) == ("a", Tier.MODEL)  # never the uncompiled 16-tile


def test_bad_requests_name_what_is_wrong(tiers):
    with pytest.raises(UnknownFamilyError, match="nope"):
        oasr_core.select("nope", "gemm", "fp16", (1, 2), 4, ARCH)
    with pytest.raises(oasr_core.errors.OasrError, match="no op 'conv'"):
        oasr_core.select("tg", "conv", "fp16", (1, 2), 4, ARCH)
    with pytest.raises(oasr_core.errors.OasrError, match="dtype 'fp32'"):
        oasr_core.select("tg", "gemm", "fp32", (1, 2), 4, ARCH)
    with pytest.raises(oasr_core.errors.OasrError, match="2 dims"):
        oasr_core.select("tg", "gemm", "fp16", (1, 2, 3), 4, ARCH)


def test_tuning_report_counts_each_resolution_once(tiers):
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[512, "a"]]})
    for m in (16, 16, 32, 4096, 4096):
        pick(m)
    report = oasr_core.tuning_report(arch=ARCH)
    counts = {(f, o, t): n for f, o, t, n in report.counts}
    assert counts == {("tg", "gemm", "system"): 2, ("tg", "gemm", "default"): 1}
    text = str(report)
    assert "sm90/tg (lane tg_main)" in text and "tg/gemm: default=1, system=2" in text


def test_memo_key_is_cleared_by_runtime_install(tiers):
    oasr_core.select("tg", "gemm", "fp16", (512, 256), 64, ARCH)
    assert selection._MEMO.table
    runtime.install_runtime(None)
    assert not selection._MEMO.table


def test_a_reload_hook_clears_on_a_new_runtime_and_on_every_reload():
    from oasr_core import runtime
    from oasr_core.plugins import make_plugin_manager

    calls = []
    hook = runtime.ReloadHook(calls.append)
    old = runtime.install_runtime(runtime.Runtime(pm=make_plugin_manager(load_entrypoints=False)))
    try:
        hook.bind()
        hook.bind()  # already bound to this runtime: nothing more
        assert calls == [None]
        epoch = runtime.reload()
        assert calls == [None, epoch]
        runtime.install_runtime(runtime.Runtime(pm=make_plugin_manager(load_entrypoints=False)))
        hook.bind()  # a new runtime: plans of the old one are dropped
        assert calls == [None, epoch, None]
    finally:
        runtime.install_runtime(old)


def test_the_untuned_gate_sends_a_shape_it_refuses_to_torch(tiers):
    import attrs

    from oasr_core.types import Problem

    oasr_core.select("tq", "scaled_mm", "int8", (768, 256), 32, ARCH)  # builds the runtime
    rt = runtime.get_runtime()
    fam = attrs.evolve(rt.registry.family("tq"), untuned_gate=lambda c, p: p.m >= 1000)
    lane = rt.registry.active_lane("tq", ARCH)

    def problem(m):
        return Problem("tq", "scaled_mm", "int8", (("N", 768), ("K", 256)), m)

    small = selection._fallback(rt, fam, lane, problem(32))
    assert small.tier is Tier.HEURISTIC and small.config is None
    assert "untuned gate" in small.reason
    big = selection._fallback(rt, fam, lane, problem(4096))
    assert big.config.id == "big"
