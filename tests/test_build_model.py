"""The cost model in a build: the payload a tuning file carries, and pruning with it."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import attrs

from oasr_core import build
from oasr_core.arch import ArchProfile
from oasr_core.bench import BenchCase, ScriptedArm, ScriptedTimer
from oasr_core.cost_model import CostModel
from oasr_core.database import read_tuning_file
from oasr_core.measurements import read_logs
from oasr_core.testing import fake_family_record, fake_lane_record
from oasr_core.types import Sentinel

SOFT = {"impl_hash": "fake-1"}
PROFILE = ArchProfile.synthetic("sm90")


def features(config):
    p = config.params
    return {"tile": [128, p["tile_n"], p["tile_k"]], "kind": "mma_sync", "sync_mma": True,
            "warps": 4, "stages": p["stages"], "split_k": p["split_k"]}


LANE = attrs.evolve(fake_lane_record(), cost_features=features)


def cost_us(label: str, problem) -> float:
    """Waves of 128-row CTAs times a K loop, with a per-config offset the structure lacks."""
    m, n, k = problem.m, problem.dim("N"), problem.dim("K")
    if label == "torch":
        return 3.0 + 2 * m * n * k / 200e12 * 1e6
    cfg = LANE.default if label == "default" else LANE.config(label)
    p = cfg.params
    ctas = math.ceil(m / 128) * math.ceil(n / p["tile_n"]) * p["split_k"]
    k_iters = math.ceil(k / p["split_k"] / p["tile_k"])
    offset = 0.4 * (len(cfg.id) % 3)
    return 2.0 + offset + math.ceil(ctas / 132) * (0.3 + 0.02 * k_iters * p["tile_n"] / 64)


class Device:
    """A scripted GPU recording which arms each point measured."""

    def __init__(self) -> None:
        self.problem = None
        self.measured: Counter = Counter()
        self.timer = ScriptedTimer(self.script, seed=0)

    def script(self, label: str) -> ScriptedArm:
        return ScriptedArm(ms=cost_us(label, self.problem) / 1000, sigma_rel=0.01, issue_us=8.0)

    def make_bench(self, problem, choices, options):
        self.problem = problem
        names = [c.value if isinstance(c, Sentinel) else c.id for c in choices]
        key = (problem.dim("N"), problem.m)
        self.measured[key] = max(self.measured[key], len(names))  # main phase, not cross
        return BenchCase(arms={n: (lambda i, n=n: n) for n in names}, gate=lambda out: True)


class Registry:
    def __init__(self, family) -> None:
        self._family = family

    def family(self, name):
        return self._family

    def lane(self, name):
        assert name == LANE.name
        return LANE


def live(out: Path, device: Device, **opts) -> build.BuildResult:
    fam = attrs.evolve(fake_family_record(), make_bench=device.make_bench)
    census = build.census_from_widths(fam, "512,256;1024,512;256,1024",
                                      "16,64,256,1024,4096")
    return build.build_live(census, family=fam, lane=LANE, arch="sm90", out=out,
                            timer=device.timer, soft=SOFT, profile=PROFILE,
                            options=build.BuildOptions(**opts))


def test_build_writes_the_fitted_model_and_replay_reproduces_it(tmp_path):
    out = tmp_path / "sm90" / "fake.json"
    live(out, Device(), fresh=True)
    table = read_tuning_file(out)
    model = CostModel.from_json(table.model)
    assert model.lane == LANE.name and model.calibrated
    assert model.profile == PROFILE
    assert model.evidence["signatures"] == 3  # held-out evidence chose the serve mode
    runs, _arms, _bad = read_logs([out.parent / "measurements" / "fake.jsonl"])
    assert runs[-1]["profile"] == PROFILE.to_json()
    assert list(table.model["calibrated_on"]["runs"]) == [runs[-1]["run"]]

    again = tmp_path / "replay" / "sm90" / "fake.json"
    build.build_from_log([out.parent / "measurements" / "fake.jsonl"],
                         registry=Registry(fake_family_record()), out=str(again),
                         options=build.BuildOptions(fresh=True))
    assert again.read_bytes() == out.read_bytes()


def test_a_shipped_calibration_prunes_the_next_build_and_no_prune_measures_all(tmp_path):
    out = tmp_path / "sm90" / "fake.json"
    first = Device()
    live(out, first, fresh=True)  # no prior model: every config measured
    everything = len(LANE.config_space) + 1  # + torch ("default" stands for its config)
    assert max(first.measured.values()) == everything

    pruned = Device()
    live(out, pruned, top_k=1, resume=False)
    # structure top-1 + calibrated top-1 + default + torch + the incumbent, never the space
    assert max(pruned.measured.values()) <= 5 < everything

    unpruned = Device()
    live(out, unpruned, top_k=1, resume=False, prune=False)
    assert max(unpruned.measured.values()) == everything


def test_a_lane_without_features_carries_no_model(tmp_path):
    out = tmp_path / "sm90" / "fake.json"
    device = Device()
    fam = attrs.evolve(fake_family_record(), make_bench=device.make_bench)
    census = build.census_from_widths(fam, "512,256", "16,256")
    build.build_live(census, family=fam, lane=fake_lane_record(), arch="sm90", out=out,
                     timer=device.timer, soft=SOFT, options=build.BuildOptions(fresh=True))
    assert read_tuning_file(out).model is None
