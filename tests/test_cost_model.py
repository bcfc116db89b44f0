"""The cost model: the formula on hand-checked cases, both rules, calibration, quality, tier."""

from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path

import attrs
import pytest

import oasr_core
from oasr_core import database, runtime
from oasr_core.arch import ArchProfile
from oasr_core.cost_model import (
    ENV,
    CostFeatures,
    CostModel,
    ModelTier,
    build_model,
    config_ranker,
    design,
    evaluate_loso,
    fit,
    geometry,
    parse_rows,
    prune,
    rank,
    tile_cost,
    top_k,
)
from oasr_core.cost_model.structure import combine, predict_structure
from oasr_core.cost_model.synthetic import DEFAULT, synthetic_log
from oasr_core.errors import ConfigurationError, OasrWarning, PluginError
from oasr_core.plugins import make_plugin_manager
from oasr_core.types import Config, Family, Lane, Problem, Tier, freeze

ROUND = dict(sku="round", sms=100, regs_per_sm=65536, max_threads_per_sm=2048,
             l2_bytes=40 << 20, dram_gbps=1000.0, l2_gbps=10000.0,
             tensor_tflops={"half": 100.0}, launch_us_eager=5.0, launch_us_graph=1.0)
"""Round numbers: per SM 1e6 FLOP/us; L2 1e7 B/us in all, a fair share 1e5 B/us per SM and
3e5 B/us for a lone SM (sm_feed_cap 3); DRAM 1e6 B/us; one graph node 1 us."""
SM80 = ArchProfile(arch="sm80", smem_per_block=166912, smem_per_sm=167936, **ROUND)
SM90 = ArchProfile(arch="sm90", smem_per_block=232448, smem_per_sm=233472, **ROUND)
WS = {"kind": "ws", "warps": 8, "producer_warps": 4, "epilogue_smem": True, "fp32_partials": True}
"""A warp-specialized kernel: one producer and one consumer warpgroup (CUTLASS 3.x's ws)."""
PP = {**WS, "kind": "pingpong", "warps": 12, "persistent": True, "tiles_in_flight": 2}
COOP_KIND = {**WS, "kind": "cooperative", "warps": 12, "persistent": True}
MMA = CostFeatures(tile_m=64, tile_n=64, tile_k=64, kind="mma_sync", sync_mma=True, stages=3,
                   warps=4)
COOP = CostFeatures(tile_m=128, tile_n=128, tile_k=64, **COOP_KIND)


def test_tile_cost_by_hand():
    tc = tile_cost(MMA, SM80, "fp16")
    # 2*64*64*64 FLOP at 1e6 FLOP/us; stage = (64+64)*64*2 B at 3e5 B/us; latency 0.5/(3-1)
    assert tc.t_mma == pytest.approx(0.524288)
    assert tc.b == pytest.approx(0.524288)
    # CTA overhead + latency + first stage + (64*64*2 B output + half a latency)
    assert tc.a == pytest.approx(0.25 + 0.5 + 16384 / 3e5 + 8192 / 3e5 + 0.25)
    # 48 KiB smem: 167936 // (49152 + 1024) = 3 CTAs per SM (threads allow 16, registers 5)
    assert (tc.smem, tc.occupancy, tc.slots) == (49152, 3, 3)
    coop = tile_cost(COOP, SM90, "fp16")
    assert coop.stages == (232448 - 8192) // 32768 == 6  # stages=0: as many as fit
    assert (coop.occupancy, coop.slots) == (1, 1)
    assert coop.a == pytest.approx(0.5 + 32768 / 3e5 + 32768 / 3e5 + 0.25)  # no CTA overhead


def test_formula_one_partial_wave():
    tc = tile_cost(MMA, SM80, "fp16")
    # M=640, N=1024: 10 x 16 = 160 CTAs, 4 K tiles; one wave of 300 slots, but 160 CTAs
    # spread over 100 SMs put 2 (not the occupancy, 3) on an SM
    geo = geometry(MMA, tc, 640, 1024, 256, SM80, "fp16")
    assert (geo.ctas, geo.waves, geo.k_iters, geo.launches) == (160, 1, 4, 1)
    assert (geo.x1, geo.x2, geo.x3) == (1.0, 8.0, 0.0)
    t = combine(geo, tc.a, tc.b, 1.0, SM80.launch_us_graph)
    assert t == pytest.approx(tc.a + 8 * 0.524288 + 1.0) == pytest.approx(6.276224)


def test_formula_full_wave_plus_tail():
    tc = tile_cost(MMA, SM80, "fp16")
    # M=1536: 24 x 16 = 384 CTAs = one full wave of 300 (3 per SM) + a tail of 84 (1 per SM)
    geo = geometry(MMA, tc, 1536, 1024, 256, SM80, "fp16")
    assert geo.waves == 2
    assert geo.x2 == pytest.approx(3 * 4 + 1 * 4)  # charging the tail 3 per SM would say 24
    assert geo.x1 == pytest.approx(2.0)  # fixed costs overlap: fill + epilogue bytes fit
    assert predict_structure(MMA, 1536, 1024, 256, SM80) == pytest.approx(
        2 * tc.a + 16 * 0.524288 + 1.0)


def test_formula_persistent_cooperative():
    tc = tile_cost(COOP, SM90, "fp16")
    # M=4096, N=1024: 256 tiles over 100 persistent CTAs = 3 waves of 2 K iterations
    geo = geometry(COOP, tc, 4096, 1024, 128, SM90, "fp16")
    assert (geo.waves, geo.x1, geo.x2) == (3, 3.0, 6.0)
    assert geo.x3 == pytest.approx(0.6)  # persistent kernel setup
    assert predict_structure(COOP, 4096, 1024, 128, SM90) == pytest.approx(
        3 * tc.a + 6 * 2.097152 + 0.6 + 1.0)


def test_rule_split_larger_than_k_tiles_is_infeasible():
    split8 = attrs.evolve(MMA, split_k=8)
    tc = tile_cost(split8, SM80, "fp16")
    assert geometry(split8, tc, 640, 1024, 256, SM80, "fp16") is None  # 4 K tiles
    assert predict_structure(split8, 640, 1024, 256, SM80) == math.inf
    split4 = attrs.evolve(MMA, split_k=4)
    geo = geometry(split4, tile_cost(split4, SM80, "fp16"), 640, 1024, 256, SM80, "fp16")
    # 640 CTAs of 1 K iteration: 2 full waves (3 per SM) + 40 (1 per SM); 3 serial fix-ups
    assert (geo.ctas, geo.k_iters, geo.waves, geo.launches) == (640, 1, 3, 2)
    assert geo.x2 == pytest.approx(7.0)
    assert geo.x3 == pytest.approx(3 * (0.4 + 2 * 64 * 64 * 2 / 3e5))


def test_stream_k_follows_cutlass_heuristic():
    sk = attrs.evolve(COOP, stream_k=True)
    tc = tile_cost(sk, SM90, "fp16")
    # 4 tiles x 32 K tiles on 100 SMs: 128 // 8 = 16 units, a multiple of 4 tiles -> 4 peers
    geo = geometry(sk, tc, 16, 512, 2048, SM90, "fp16")
    assert (geo.k_iters, geo.launches, geo.x1, geo.x2) == (8, 2, 1.0, 8.0)
    assert geo.x3 == pytest.approx(0.6 + 3 * (0.4 + 2 * 128 * 128 * 4 / 3e5))
    # a K loop of 8 tiles or fewer is never split: plain data-parallel, one launch
    flat = geometry(sk, tc, 16, 512, 512, SM90, "fp16")
    assert (flat.k_iters, flat.launches) == (8, 1)


def test_memory_floor_and_unrunnable_configs():
    slow_dram = attrs.evolve(SM80, dram_gbps=1.0)
    floor = ((640 * 256 + 1024 * 256) * 2 + 640 * 1024 * 2) / 1e3
    assert predict_structure(MMA, 640, 1024, 256, slow_dram) == pytest.approx(floor)
    huge = attrs.evolve(MMA, tile_m=256, tile_n=256, stages=4)  # 512 KiB of stages
    assert tile_cost(huge, SM80, "fp16") is None
    assert tile_cost(MMA, SM80, "fp8") is None  # no fp8 tensor rate on this profile


def test_features_contract():
    f = CostFeatures.from_mapping({"tile": [128, 64, 32], "warp": [64, 32, 32], "stages": 3,
                                   "unit": "ignored"})
    assert (f.warps, f.kind, f.split_k, f.threads, f.persistent) == (4, "tiled", 1, 128, False)
    assert f.accumulating_threads == 128 and not f.sync_mma and f.group == "tiled_dp"
    g = CostFeatures.from_mapping({"tile": (128, 128, 64), **PP, "cluster": [1, 2]})
    assert (g.threads, g.accumulating_threads, g.persistent, g.tiles_in_flight) == \
        (384, 256, True, 2)
    assert (g.cluster_n, g.group) == (2, "pingpong_dp")
    for bad, match in (({}, "tile"), ({"tile": [1, 2]}, "tile"),
                       ({"tile": [64, 64, 64], "kind": "Magic Kernel"}, "kind"),
                       ({"tile": [64, 64, 64], "warps": 4, "producer_warps": 4},
                        "producer_warps"),
                       ({"tile": [64, 64, 64], "persistent": 1}, "persistent"),
                       ({"tile": [64, 64, 64], "tiles_in_flight": 0}, "tiles_in_flight"),
                       ({"tile": [64, 64, 64], "split_k": 0}, "split_k"),
                       ({"tile": [64, 64, 64], "stream_k": "yes"}, "stream_k")):
        with pytest.raises(ValueError, match=match):
            CostFeatures.from_mapping(bad)


def _config(cid: str, **params) -> Config:
    return Config(id=cid, lane="cm_lane", params=params)


SPACE = [
    _config("co_128x128x64", tile=[128, 128, 64], **COOP_KIND),
    _config("ws_64x32x64", tile=[64, 32, 64], **WS),
    _config("ws_128x64x64", tile=[128, 64, 64], **WS),
    _config("mma_64x64x64_spk8", tile=[64, 64, 64], warps=4, stages=3, split_k=8),
    _config("opaque", kernel="hand-written"),
]


def test_rank_top_k_and_prune():
    problem = Problem(family="cmg", op="gemm", dtype="fp16", dims={"N": 256, "K": 256}, m=16)
    ranked = rank(SPACE, problem, SM90)
    ids = [c.id for c, _ in ranked]
    assert ids[0] == "ws_64x32x64"
    assert "mma_64x64x64_spk8" not in ids and "opaque" not in ids  # rule 1; no features
    assert [t for _, t in ranked] == sorted(t for _, t in ranked)
    assert [c.id for c in top_k(SPACE, problem, 2, SM90)] == ids[:2]
    kept = prune(SPACE, problem, 1, CostModel(profile=SM90), forced=("co_128x128x64",))
    assert [c.id for c in kept] == ["co_128x128x64", "ws_64x32x64", "opaque"]
    ranker = config_ranker(CostModel(profile=SM90))
    assert [c.id for c in ranker(SPACE, problem)] == ["opaque", *ids]
    with pytest.raises(PluginError, match="lane 'cm_lane'.*malformed"):
        rank(SPACE, problem, SM90, features=lambda c: {"tile": "big"})


def _truth_rows(profile, configs, coeffs, widths, ms, noise=0.005, seed=1):
    """Rows generated from the formula with known coefficients, plus relative noise."""
    rng = random.Random(seed)
    rows = []
    for cid, params in configs.items():
        f = CostFeatures.from_mapping(params)
        tc = tile_cost(f, profile, "fp16")
        a_mult, b_mult, rho = coeffs[cid]
        for n, k in widths:
            for m in ms:
                geo = geometry(f, tc, m, n, k, profile, "fp16")
                if geo is None:
                    continue
                t = combine(geo, tc.a * a_mult, tc.b * b_mult, rho, profile.launch_us_graph)
                t *= math.exp(rng.gauss(0, noise))
                rows.append({"config": cid, "op": "gemm", "dtype": "fp16", "M": m, "N": n,
                             "K": k, "median_ms": t / 1e3, "params": params, "arch": "sm90"})
    return rows


CAL_CONFIGS = {
    "ws_64x64x64": {"tile": [64, 64, 64], **WS},
    "ws_128x64x64": {"tile": [128, 64, 64], **WS},
    "pp_128x128x64": {"tile": [128, 128, 64], **PP},
    "mma_64x64x64_spk2": {"tile": [64, 64, 64], "kind": "mma_sync", "sync_mma": True,
                          "warps": 4, "stages": 3, "split_k": 2},
}
WIDTHS = ((256, 256), (1024, 512), (512, 2048), (2048, 1024))
MS = (16, 64, 256, 1024, 4096, 16384)


def test_calibration_recovers_known_coefficients():
    truth = {"ws_64x64x64": (0.6, 1.4, 1.0), "ws_128x64x64": (1.5, 0.7, 1.0),
             "pp_128x128x64": (0.8, 1.2, 1.0), "mma_64x64x64_spk2": (1.0, 1.0, 2.5)}
    raw = _truth_rows(SM90, CAL_CONFIGS, truth, WIDTHS, MS, noise=0.001)
    rows, skipped = parse_rows(raw, arch="sm90")
    assert not skipped
    model = fit(design(rows, SM90), SM90, prior_rows=1e-6)
    for cid, (a_mult, b_mult, rho) in truth.items():
        f = CostFeatures.from_mapping(CAL_CONFIGS[cid])
        tc = tile_cost(f, SM90, "fp16")
        got = model.configs[cid]
        assert got.a == pytest.approx(tc.a * a_mult, rel=0.05), cid
        assert got.b == pytest.approx(tc.b * b_mult, rel=0.05), cid
        if f.split_k > 1:
            assert got.rho == pytest.approx(rho, rel=0.1)
        assert got.rows == len([r for r in rows if r.config == cid])


def test_group_multipliers_and_shrinkage():
    truth = {cid: (0.8, 1.25, 1.0) for cid in CAL_CONFIGS}
    raw = _truth_rows(SM90, CAL_CONFIGS, truth, WIDTHS, MS)
    model = fit(design(parse_rows(raw)[0], SM90), SM90, group_prior=0.01)
    ws = model.groups["ws_dp"]
    assert (ws.a, ws.b) == (pytest.approx(0.8, rel=0.05), pytest.approx(1.25, rel=0.05))
    assert ws.rows == 2 * len(WIDTHS) * len(MS)

    few = [r for r in raw if r["config"] == "ws_64x64x64"][:3]
    tc = tile_cost(CostFeatures.from_mapping(CAL_CONFIGS["ws_64x64x64"]), SM90, "fp16")
    doubled = [dict(r, median_ms=r["median_ms"] * 2) for r in few]
    rows = design(parse_rows(doubled)[0], SM90)
    stiff = fit(rows, SM90, prior_rows=1e6, group_prior=1e6).configs["ws_64x64x64"]
    assert (stiff.a, stiff.b) == (pytest.approx(tc.a, rel=0.01), pytest.approx(tc.b, rel=0.01))
    loose = fit(rows, SM90, prior_rows=1e-6, group_prior=1e6).configs["ws_64x64x64"]
    assert loose.b > 1.2 * tc.b
    assert "ws_64x64x64" not in fit(rows[:2], SM90).configs  # below min_rows


def test_parse_rows_skips_and_merges():
    base = {"config": "ws_64x64x64", "op": "gemm", "dtype": "fp16", "M": 64, "N": 512,
            "K": 512, "median_ms": 0.004, "params": CAL_CONFIGS["ws_64x64x64"]}
    raw = [base, dict(base, median_ms=0.006), dict(base, median_ms=0.005),
           dict(base, contended=True), dict(base, arch="sm80"), dict(base, M=None),
           dict(base, sigma_ms=0.003), dict(base, config="torch", params=None),
           {k: v for k, v in base.items() if k not in ("N", "K")} | {"dims": {"N": 8, "K": 8}}]
    rows, skipped = parse_rows(raw, arch="sm90")
    assert skipped == {"contended or failed": 1, "other arch": 1, "missing fields": 1,
                       "noisy or non-positive": 1}
    by = {(r.config, r.n): r for r in rows}
    assert by[("ws_64x64x64", 512)].t_us == pytest.approx(5.0)  # median of 4, 6, 5
    assert by[("torch", 512)].sentinel and by[("torch", 512)].features is None
    assert ("ws_64x64x64", 8) in by
    log_rows = [{"row": "run", "run": "r1"}, dict(base, row="arm", status="rejected"),
                dict(base, row="arm", config="default", M=128,
                     params={"kind": "default", "config": "ws_64x64x64"})]
    rows, skipped = parse_rows(log_rows, configs={"ws_64x64x64": _config(
        "ws_64x64x64", **CAL_CONFIGS["ws_64x64x64"])})
    assert skipped == {"contended or failed": 1}
    assert [(r.config, r.m, r.sentinel, r.features.tile_n) for r in rows] == \
        [("ws_64x64x64", 128, False, 64)]


def test_model_json_round_trip():
    truth = {cid: (1.1, 0.9, 1.0) for cid in CAL_CONFIGS}
    rows = parse_rows(_truth_rows(SM90, CAL_CONFIGS, truth, WIDTHS[:2], MS))[0]
    model = fit(design(rows, SM90), SM90, lane="cm_lane")
    payload = json.loads(json.dumps(model.to_json()))
    again = CostModel.from_json(freeze(payload))
    assert again.to_json() == payload
    f = CostFeatures.from_mapping(CAL_CONFIGS["pp_128x128x64"])
    assert again.predict("pp_128x128x64", f, 512, 1024, 512) == pytest.approx(
        model.predict("pp_128x128x64", f, 512, 1024, 512), rel=1e-5)
    with pytest.raises(ConfigurationError, match="upgrade"):
        CostModel.from_json(dict(payload, schema_version=99))
    with pytest.raises(ConfigurationError, match="not an oasr cost model"):
        CostModel.from_json({"kind": "other"})


def test_loso_quality_on_synthetic_log():
    rows = parse_rows(synthetic_log(family="cmg", op="gemm",
                                    widths=((256, 256), (1024, 256), (512, 2048), (2048, 512)),
                                    ms=(16, 128, 1024, 4096)), arch="sm90")[0]
    report = evaluate_loso(rows, ArchProfile.synthetic("sm90"), default_id=DEFAULT,
                           extra={"first": lambda p: sorted(p.features)})
    held = report.rankers
    assert report.signatures == 4 and report.points == 16
    assert held["calibrated"].regret_geomean < held["structure"].regret_geomean
    assert held["structure"].regret_geomean < held["default"].regret_geomean
    assert held["first"].answered == 16
    assert report.pruned_hit >= 0.9
    text = report.to_markdown()
    assert "| calibrated |" in text and "| gemm | fp16 | 512 | 2048 | 4 |" in text


def test_build_model_chooses_serve_on_held_out_evidence():
    profile = ArchProfile.synthetic("sm90")
    model = build_model(synthetic_log(family="cmg", op="gemm",
                                      widths=((256, 256), (1024, 256), (512, 2048)),
                                      ms=(16, 256, 4096)), profile, lane="synthetic_wgmma",
                        ops=("gemm",))
    assert model.ops == ("gemm",) and model.to_json()["ops"] == ["gemm"]
    held = model.evidence["held_out"]
    best = min(("structure", "group", "calibrated"), key=lambda m: held[m]["regret_geomean"])
    assert model.serve in (best, "structure")
    few = build_model(synthetic_log(family="cmg", op="gemm", widths=((256, 256), (1024, 256)),
                                    ms=(16, 256)), profile, ops=("gemm",))
    assert few.serve == "structure" and "held_out" not in few.evidence


# The runtime tier, on an in-test family whose lane supplies cost features.

def _features(config: Config):
    return None if config.id == "opaque" else dict(config.params)


class CostModelGemm:
    @oasr_core.hookimpl
    def oasr_register_families(self):
        return [Family(name="cmg", ops=("gemm", "gemm_activation"), dims=("N", "K"),
                       dtypes=("fp16", "bf16"), dtype_classes={"half": ("fp16", "bf16")})]

    @oasr_core.hookimpl
    def oasr_register_lanes(self):
        return [Lane(name="cm_lane", family="cmg", arch_families=("sm90",), default_on=("sm90",),
                     config_space=SPACE, default_config="co_128x128x64",
                     cost_features=_features)]


@pytest.fixture
def model_runtime(tmp_path, monkeypatch):
    system = tmp_path / "system"
    system.mkdir()
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(system))
    monkeypatch.delenv(ENV, raising=False)
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(CostModelGemm())
    tier = ModelTier()
    pm.register(tier)
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)

    def write(model_payload, ops=("gemm",)):
        fam = rt.registry.family("cmg")
        payload = None if model_payload is None else dict(model_payload, ops=list(ops))
        database.write_entries(
            database.tier_path(system, "sm90", fam), family=fam, arch="sm90", lane="cm_lane",
            entries={database.signature_key(fam, "gemm", "half", (512, 512)):
                     database.Entry(regions=((None, "ws_128x64x64"),))},
            configs={c.id: c for c in SPACE}, soft={}, model=payload, fresh=True)
        rt.reload()
    return write, tier


def pick(m, dims=(256, 256), op="gemm"):
    sel = oasr_core.select("cmg", op, "fp16", dims, m, "sm90")
    return sel.choice_id, sel.tier


def test_tier_serves_uncovered_aligned_shapes(model_runtime):
    write, _ = model_runtime
    write(CostModel(profile=ArchProfile.synthetic("sm90")).to_json())
    assert pick(16, dims=(512, 512)) == ("ws_128x64x64", Tier.SYSTEM)  # an entry covers it
    assert pick(16) == ("ws_64x32x64", Tier.MODEL)
    assert pick(16384, dims=(2048, 1024)) == ("default", Tier.DEFAULT)  # default best
    assert pick(16, dims=(260, 256)) == ("default", Tier.DEFAULT)  # N not aligned
    assert pick(16, op="gemm_activation") == ("default", Tier.DEFAULT)  # op not served


def test_tier_switch_and_missing_payload(model_runtime, monkeypatch):
    write, _ = model_runtime
    write(None)
    assert pick(16) == ("default", Tier.DEFAULT)
    write(CostModel(profile=ArchProfile.synthetic("sm90")).to_json())
    monkeypatch.setenv(ENV, "0")
    assert pick(16) == ("default", Tier.DEFAULT)
    monkeypatch.setenv(ENV, "auto")
    runtime.reload()
    assert pick(16) == ("ws_64x32x64", Tier.MODEL)
    monkeypatch.setenv(ENV, "yes")
    runtime.reload()
    with pytest.raises(ConfigurationError, match=ENV):
        pick(16)


def test_tier_gate(model_runtime):
    _, _ = model_runtime
    rt = runtime.get_runtime()
    fam, lane = rt.registry.family("cmg"), rt.registry.lane("cm_lane")
    problem = Problem(family="cmg", op="gemm", dtype="fp16", dims={"N": 256, "K": 256}, m=16)
    candidates = tuple(c for c in SPACE if c.id != "mma_64x64x64_spk8")
    model = CostModel(profile=ArchProfile.synthetic("sm90"), ops=("gemm",))
    ranked = dict((c.id, t) for c, t in rank(candidates, problem, model=model, lane=lane))
    ratio = ranked["co_128x128x64"] / ranked["ws_64x32x64"]
    payload = freeze(model.to_json())
    assert ModelTier(gate=ratio * 0.999).oasr_model_select(
        family=fam, lane=lane, problem=problem, candidates=candidates, model=payload).id == \
        "ws_64x32x64"
    assert ModelTier(gate=ratio * 1.001).oasr_model_select(
        family=fam, lane=lane, problem=problem, candidates=candidates, model=payload) is None
    no_default = tuple(c for c in candidates if c.id != "co_128x128x64")
    assert ModelTier(gate=1e9).oasr_model_select(
        family=fam, lane=lane, problem=problem, candidates=no_default, model=payload) is not None
    calls = []

    def live():
        calls.append(1)
        return attrs.evolve(ArchProfile.synthetic("sm90"), sms=66)

    lazy = ModelTier(live=live)
    assert not calls
    assert lazy.model_for(payload).profile.sms == 66 and lazy.model_for(payload) is not None
    assert calls == [1]

    def no_device():
        raise ConfigurationError("no CUDA device")

    assert ModelTier(live=no_device).live() is None
    with pytest.warns(OasrWarning, match="cost model tier skipped"):
        assert ModelTier().oasr_model_select(family=fam, lane=lane, problem=problem,
                                             candidates=candidates, model={"kind": "x"}) is None


def test_the_tier_says_which_of_family_and_lane_it_cannot_rank(model_runtime):
    rt = runtime.get_runtime()
    fam, lane = rt.registry.family("cmg"), rt.registry.lane("cm_lane")
    problem = Problem(family="cmg", op="gemm", dtype="fp16", dims={"N": 256, "K": 256}, m=16)
    payload = freeze(CostModel(profile=ArchProfile.synthetic("sm90"), ops=("gemm",)).to_json())
    bare = attrs.evolve(lane, cost_features=None)
    assert ModelTier().decide(fam, bare, problem, SPACE, payload).reason == (
        "lane cm_lane describes no config to the cost model (no cost_features)")
    conv = attrs.evolve(fam, name="cmc", dims=("Cin", "Cout"))
    assert ModelTier().decide(conv, lane, problem, SPACE, payload).reason == (
        "family cmc is not GEMM-shaped (no N and K dims)")


def test_quality_benchmark_runs_on_a_synthetic_log(tmp_path):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cost_model_quality.py"
    spec = importlib.util.spec_from_file_location("cost_model_quality", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in synthetic_log(
        family="cmg", op="gemm", widths=((256, 256), (1024, 256), (512, 2048)),
        ms=(16, 1024))))
    out = tmp_path / "quality.md"
    assert bench.main(["--log", str(log), "--arch", "sm90", "--default", DEFAULT,
                       "--no-nvmmh", "--out", str(out)]) == 0
    text = out.read_text()
    assert "leave-one-signature-out" in text and "| structure |" in text
