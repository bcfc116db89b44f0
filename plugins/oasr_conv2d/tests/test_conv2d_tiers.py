"""The family through the CLI on CPU: torch serves untuned shapes; a hand-written table's
regions and exact points are served and explained; a scripted build replayed from its log."""

from __future__ import annotations

import json

import pytest
from oasr_core.testing import (
    family_cli,
    replay_scripted_build,
    write_census,
    write_system_table,
)

from oasr_conv2d import hooks, lanes, space
from oasr_conv2d.geometry import LANE

FIRST = ("conv2d|op=conv2d_relu|dt=half|Cin=1|Cout=256|W=80|kh=3|kw=3|sh=2|sw=2|ph=0|pw=0|"
         "dh=1|dw=1|groups=1")
SECOND = ("conv2d|op=conv2d_relu|dt=half|Cin=256|Cout=256|W=39|kh=3|kw=3|sh=2|sw=2|ph=0|pw=0|"
          "dh=1|dw=1|groups=1")
_WINDOW = ("kh=3", "kw=3", "sh=2", "sw=2", "ph=0", "pw=0", "dh=1", "dw=1", "groups=1")


def _dims(cin, cout, width):
    out = []
    for d in (f"Cin={cin}", f"Cout={cout}", f"W={width}", *_WINDOW):
        out += ["--dim", d]
    return out


@pytest.fixture
def run():
    return family_cli(hooks, "conv2d")


def _select(run, cin, cout, width, m, point=None, op="conv2d_relu", dtype="fp16"):
    args = ["tune", "select", "--family", "conv2d", "--op", op, "--dtype", dtype,
            *_dims(cin, cout, width), "--m", m, "--arch", "sm90"]
    if point:
        args += ["--point", point]
    return json.loads(run(*args, "--json").output)


def test_plugins_lists_the_family_and_its_lane(run):
    out = run("plugins").output
    assert "conv2d" in out and LANE in out


def test_an_uncovered_shape_is_served_by_torch(run):
    answer = _select(run, 1, 256, 80, 8 * 511 * 39, "8x1024")
    assert answer["config"] is None and answer["choice"] == "torch", answer


def _table(tmp_path):
    (family,) = hooks.oasr_register_families()
    ids = (space.FEW_CHANNELS_DEFAULT, space.DEFAULT, "ig_b128x128x64_w64x64x64_s3")
    return write_system_table(tmp_path, family, LANE, "sm90",
                              {cid: lanes.config(LANE, cid) for cid in ids}, {
        FIRST: {"regions": [[200000, space.FEW_CHANNELS_DEFAULT], [None, "torch"]],
                "points": {}},
        SECOND: {"regions": [], "points": {"8x511": "ig_b128x128x64_w64x64x64_s3",
                                           "1x127": "heuristic"}},
    })


def test_a_hand_written_table_is_served_by_region_and_exact_point(run, tmp_path, monkeypatch):
    _table(tmp_path)
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "system"))
    region = _select(run, 1, 256, 80, 8 * 511 * 39, "8x1024")
    assert region["choice"] == space.FEW_CHANNELS_DEFAULT and region["tier"] == "system"
    assert _select(run, 1, 256, 80, 400000, "16x1024")["choice"] == "torch"
    point = _select(run, 256, 256, 39, 8 * 255 * 19, "8x511")
    assert point["choice"] == "ig_b128x128x64_w64x64x64_s3"
    assert _select(run, 256, 256, 39, 63 * 19, "1x127")["config"] == space.DEFAULT
    unmeasured = _select(run, 256, 256, 39, 4 * 255 * 19, "4x511")
    assert unmeasured["config"] is None, "no region and another point: torch"
    other_act = _select(run, 1, 256, 80, 8 * 511 * 39, "8x1024", op="conv2d_gelu")
    assert other_act["config"] is None, "an entry measured with ReLU never serves GELU"
    bf16 = _select(run, 1, 256, 80, 8 * 511 * 39, "8x1024", dtype="bf16")
    assert bf16["choice"] == space.FEW_CHANNELS_DEFAULT, "dt=half serves bf16 too"


def _time_us(name, config, problem):
    """The few-channels kernels 1.5x faster than torch on the one-plane conv, one 16-byte
    tile 1.2x on the C -> C conv, everything else slower than torch."""
    if config is None:
        return 12.0
    if problem.dim("Cin") == 1:
        return 8.0 if config.params.get("algorithm") == "few_channels" else 30.0
    return 10.0 if config.id == "ig_b128x128x64_w64x64x64_s3" else 14.0


def _census(tmp_path):
    first = {"Cin": 1, "Cout": 256, "W": 80}
    second = {"Cin": 256, "Cout": 256, "W": 39}
    window = dict(s.split("=") for s in _WINDOW)
    rows = []
    for b, t in ((1, 256), (8, 1024)):
        h1 = (t - 3) // 2 + 1
        rows.append({"family": "conv2d", "op": "conv2d_relu", "dtype": "fp16",
                     "dims": {**first, **{k: int(v) for k, v in window.items()}},
                     "M": b * h1 * 39, "calls": 1.0, "weight": 1.0, "point": f"{b}x{t}"})
        rows.append({"family": "conv2d", "op": "conv2d_relu", "dtype": "fp16",
                     "dims": {**second, **{k: int(v) for k, v in window.items()}},
                     "M": b * ((h1 - 3) // 2 + 1) * 19, "calls": 1.0, "weight": 1.0,
                     "point": f"{b}x{h1}"})
    return write_census(tmp_path / "census.json", rows)


def test_a_build_replayed_from_its_log_writes_the_table(run, tmp_path):
    (family,) = hooks.oasr_register_families()
    (lane,) = hooks.oasr_register_lanes()
    _log, table = replay_scripted_build(run, tmp_path, family, lane, _time_us,
                                        _census(tmp_path))
    # The heuristic names the few-channels default for a one-plane input; the build prefers
    # the sentinel when it ties a config.
    first = table.entries[FIRST].lookup(8 * 511 * 39, "8x1024")
    assert first in ("heuristic", *(c.id for c in lanes.space(LANE)
                                    if c.params.get("algorithm") == "few_channels")), first
    assert table.entries[SECOND].lookup(8 * 255 * 19, "8x511") == "ig_b128x128x64_w64x64x64_s3"
