"""The gemm lanes describe their configs to the core's cost model in the contract's terms."""

from __future__ import annotations

from oasr_core.arch import ArchProfile
from oasr_core.cost_model import CostFeatures, tile_cost
from oasr_core.cost_model.features import FEATURE_KEYS

from oasr_gemm import config_space as cs
from oasr_gemm import cost


def test_every_config_has_contract_features_and_one_kind_per_schedule():
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        for config in cs.space(lane):
            raw = cost.cost_features(config)
            assert set(raw) <= set(FEATURE_KEYS), f"{config.id}: {set(raw) - set(FEATURE_KEYS)}"
            f = CostFeatures.from_mapping(raw)
            schedule = config.params.get("schedule", "mma_sync")
            assert f.kind == schedule
            assert f.sync_mma == (lane == cs.LANE_SM80)


def test_the_schedules_translate_to_their_structure():
    sm80 = CostFeatures.from_mapping(cost.cost_features(cs.config(cs.LANE_SM80,
                                                                  cs.SM80_DEFAULT)))
    assert (sm80.threads, sm80.accumulating_threads, sm80.persistent) == (128, 128, False)
    assert not sm80.epilogue_smem and not sm80.fp32_partials
    pp = CostFeatures.from_mapping(cost.cost_features(cs.config(cs.LANE_SM90,
                                                                "pp_128x128x64_c1x2")))
    assert (pp.threads, pp.accumulating_threads, pp.tiles_in_flight) == (384, 256, 2)
    assert pp.persistent and pp.epilogue_smem and pp.fp32_partials
    assert (pp.cluster_m, pp.cluster_n, pp.group) == (1, 2, "pingpong_dp")


def test_ping_pong_hides_an_epilogue_the_cooperative_tile_pays():
    """Same tile and cluster: two tiles in flight give two slots and a cheaper fixed part."""
    profile = ArchProfile.synthetic("sm90")
    pp = CostFeatures.from_mapping(cost.cost_features(cs.config(cs.LANE_SM90,
                                                                "pp_128x128x64_c1x2")))
    coop = CostFeatures.from_mapping({**cost.cost_features(cs.config(
        cs.LANE_SM90, "pp_128x128x64_c1x2")), **cost.STRUCTURE["cooperative"],
        "kind": "cooperative", "tiles_in_flight": 1})
    a, b = tile_cost(pp, profile, "fp16"), tile_cost(coop, profile, "fp16")
    assert (a.slots, b.slots) == (2, 1) and a.a < b.a and a.b == b.b
