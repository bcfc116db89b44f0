"""The family through the CLI and the op's plan on CPU: torch serves untuned shapes; a
hand-written table's regions are served and explained, in the user tier over the system
tier; a scripted build replayed from its log."""

from __future__ import annotations

import json

import pytest
from oasr_core.testing import family_cli, replay_scripted_build, write_system_table

from oasr_recurrent import hooks, lanes, space
from oasr_recurrent.ops_names import LANE

KEY = "recurrent|op=lstm_step|dt=half|I=640|H=640"


@pytest.fixture
def run():
    return family_cli(hooks, "recurrent")


def _select(run, input_size, hidden, m, dtype="fp16", arch="sm90"):
    result = run("tune", "select", "--family", "recurrent", "--op", "lstm_step", "--dtype",
                 dtype, "--dim", f"I={input_size}", "--dim", f"H={hidden}", "--m", m, "--arch",
                 arch, "--json")
    return json.loads(result.output)


def test_plugins_lists_the_family_and_its_lane(run):
    out = run("plugins").output
    assert "recurrent" in out and LANE in out


def test_an_uncovered_shape_is_served_by_torch(run):
    answer = _select(run, 640, 640, 16)
    assert answer["config"] is None and answer["choice"] == "torch", answer


def _table(root, regions):
    (family,) = hooks.oasr_register_families()
    ids = {cid for _m, cid in regions if cid not in ("torch", "default")}
    return write_system_table(root, family, LANE, "sm90",
                              {cid: lanes.config(LANE, cid) for cid in ids},
                              {KEY: {"regions": regions}})


def test_a_tier_naming_a_config_serves_it_by_region(run, tmp_path, monkeypatch):
    _table(tmp_path, [[4, "u2_r1_t256_s2"], [16, "u4_r4_t128_s1"], [64, "u8_r16_t256_s1"],
                      [None, "torch"]])
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "system"))
    assert _select(run, 640, 640, 1)["choice"] == "u2_r1_t256_s2"
    tuned = _select(run, 640, 640, 16)
    assert tuned["choice"] == "u4_r4_t128_s1" and tuned["tier"] == "system", tuned
    assert _select(run, 640, 640, 33)["config"] == "u8_r16_t256_s1"
    assert _select(run, 640, 640, 128)["choice"] == "torch"
    assert _select(run, 640, 640, 16, dtype="bf16")["choice"] == "u4_r4_t128_s1", \
        "dt=half serves bf16 too"
    assert _select(run, 320, 640, 16)["choice"] == "torch", "another signature"


def test_the_user_tier_wins_over_the_system_tier(run, tmp_path, monkeypatch):
    _table(tmp_path, [[None, "u4_r4_t128_s1"]])
    user = tmp_path / "user"
    _table(user, [[None, "u8_r8_t256_s1"]])
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "system"))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(user / "system"))
    answer = _select(run, 640, 640, 8)
    assert answer["choice"] == "u8_r8_t256_s1" and answer["tier"] == "user", answer


def test_the_ops_plan_selects_the_tiers_config(tmp_path, monkeypatch):
    """The op's miss path on a machine without the kernels' module: it selects the tier's
    config, finds no loaded module and serves torch for the rest of the epoch."""
    import oasr_core
    import torch

    from oasr_recurrent import launch, ops

    _table(tmp_path, [[None, "u4_r4_t128_s1"]])
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "system"))
    oasr_core.reload()
    picked = oasr_core.select("recurrent", "lstm_step", "fp16", (640, 640), 16, "sm90")
    assert picked.config.id == "u4_r4_t128_s1" and picked.tier.value == "system"
    monkeypatch.setattr(launch.LIBRARIES, "get", lambda lane, arch: None)
    monkeypatch.setattr(ops, "device_arch_of", lambda dev: "sm90")
    key = ("lstm_step", torch.float16, 16, 640, 640, 0)
    assert ops._plan(key) == "torch", "no module loaded: torch serves"
    assert ops._PLANS.table[key] == "torch"


def _time_us(name, config, problem):
    """Small row tiles 2x faster than torch at B <= 4, the 16-row tile 1.5x at larger B,
    everything else slower."""
    if config is None:
        return 10.0
    rows = config.params["rows"]
    if problem.m <= 4:
        return 5.0 if rows == 1 and config.params["units"] == 2 else 12.0
    return 6.5 if rows == 16 else 14.0


CENSUS = [{"family": "recurrent", "op": "lstm_step", "dtype": "fp16", "dims": {"I": 640, "H": 640},
           "M": b, "calls": 1.0, "weight": 1.0} for b in (1, 4, 16, 64)]
"""One decoder's steps at four beam widths."""


def test_a_build_replayed_from_its_log_writes_the_table(run, tmp_path):
    (family,), (lane,) = hooks.oasr_register_families(), hooks.oasr_register_lanes()
    _log, table = replay_scripted_build(run, tmp_path, family, lane, _time_us, CENSUS)
    entry = table.entries[KEY]
    small = entry.lookup(1, None)
    assert lanes.config(LANE, small).params["rows"] == 1, small
    assert entry.lookup(64, None) == "u8_r16_t256_s1"
    assert space.DEFAULT in {c.id for c in lanes.space(LANE)}
