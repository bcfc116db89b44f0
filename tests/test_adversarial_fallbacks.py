"""Every fallback answers only what the shape can run: the int8 ladder walks down to a rung
the lane supports, else no lane config (torch); the same through selection and the CLI.

Real inputs: the installed scaled_mm plugin, its lanes and fitted ladders.
"""

from __future__ import annotations

import itertools
import json

import pytest
from click.testing import CliRunner

from oasr_core import runtime
from oasr_core.cli import CliState, main
from oasr_core.selection import select
from oasr_core.types import Problem, Tier

WIDTHS = (8, 16, 24, 100, 256, 1000, 1024, 1032, 4096, 5120)
MS = (1, 7, 64, 1000, 20000)


def _problem(op, n, k, m):
    return Problem(family="scaled_mm", op=op, dtype="int8", dims=(("N", n), ("K", k)), m=m)


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
@pytest.mark.parametrize("op", ["scaled_mm", "scaled_mm_quant"])
def test_the_heuristic_serves_only_configs_its_lane_supports(arch, op):
    from oasr_scaled_mm import heuristic

    registry = runtime.get_runtime().registry
    lane = registry.active_lane("scaled_mm", arch)
    for n, k, m in itertools.product(WIDTHS, WIDTHS, MS):
        problem = _problem(op, n, k, m)
        config = heuristic.heuristic_config(problem, lane, sm_count=132, arch=arch)
        if config is None:
            assert not any(lane.supports(c, problem) for c in heuristic.ladder_configs(lane, arch))
        else:
            assert lane.supports(config, problem), (n, k, m, config.id)
        sel = select("scaled_mm", op, "int8", (n, k), m, arch)
        if sel.config is not None:
            assert lane.supports(registry.lane(sel.lane).config(sel.config.id), problem)


def test_an_unaligned_width_goes_to_torch_with_a_reason():
    sel = select("scaled_mm", "scaled_mm", "int8", (1000, 256), 64, "sm90")
    assert sel.tier is Tier.HEURISTIC and sel.config is None
    assert "no config that can run this shape" in sel.reason
    got = CliRunner().invoke(main, ["tune", "select", "--family", "scaled_mm", "--op",
                                    "scaled_mm", "--dtype", "int8", "--dim", "N=1000", "--dim",
                                    "K=256", "--m", "64", "--arch", "sm90", "--json"],
                             obj=CliState())
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout)["config"] is None


@pytest.mark.parametrize("tier", ["system", "user"])
def test_a_default_region_never_serves_a_default_the_lane_cannot_run(tmp_path, monkeypatch,
                                                                      tier):
    """A conv1d ``default`` region on a depthwise key: the lane's default config cannot run
    it, so the region is skipped with one warning and the next tier answers (torch or a
    config the lane supports), never the default."""
    from pathlib import Path

    from oasr_core.selection import clear_memo

    key = ("conv1d|op=conv1d_silu|dt=half|Cin=512|Cout=512|k=31|stride=1|pad=15|dil=1"
           "|groups=512")
    shipped = Path(__file__).resolve().parents[1] / "db/sm90/conv1d.json"
    doc = json.loads(shipped.read_text())
    doc["entries"][key]["regions"][0][1] = "default"
    roots = {t: tmp_path / t for t in ("system", "user")}
    for root in roots.values():
        (root / "sm90").mkdir(parents=True)
    (roots["system"] / "sm90" / "conv1d.json").write_text(shipped.read_text())
    (roots[tier] / "sm90" / "conv1d.json").write_text(json.dumps(doc))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(roots["system"]))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(roots["user"]) if tier == "user" else "off")
    runtime.install_runtime(None)
    clear_memo()
    dims = (("Cin", 512), ("Cout", 512), ("k", 31), ("stride", 1), ("pad", 15), ("dil", 1),
            ("groups", 512))
    lane = runtime.get_runtime().registry.lane("sm90_conv1d")
    problem = Problem(family="conv1d", op="conv1d_silu", dtype="fp16", dims=dims, m=1)
    assert lane.unusable_reason(lane.default, problem) is not None
    with pytest.warns(UserWarning, match="means the lane default"):
        sel = select("conv1d", "conv1d_silu", "fp16", tuple(v for _, v in dims), 1, "sm90")
    assert sel.config is None or (sel.config.id != lane.default_config
                                  and lane.unusable_reason(sel.config, problem) is None)
    runtime.install_runtime(None)
