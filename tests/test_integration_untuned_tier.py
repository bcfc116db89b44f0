"""gemm's untuned selector is torch; the model tier serves a compiled config only where the
shipped payload predicts it beats its calibration of torch by the margin.

Real inputs: the committed H200 measurement log, the tuning file its replay writes, and the
gemm plugin's production compile set.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from oasr_core import runtime
from oasr_core.cli import CliState, main
from oasr_core.cost_model.tier import MARGIN
from oasr_core.selection import clear_memo, model_candidates, select
from oasr_core.types import Problem, Sentinel, Tier

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "db/sm90/gemm.json"
LOG = ROOT / "db/sm90/measurements/gemm.jsonl"
LANE = "sm90_wgmma"
WIN = (512, 2048, 16)
"""An uncovered width where the payload predicts ws_64x16x128 well under torch."""
NO_WIN = (512, 2048, 4096)
"""The same width at an M where no compiled config is predicted to beat torch by the margin."""


def _system_tier(tmp_path, monkeypatch, model_edit=None) -> Path:
    root = tmp_path / "system"
    (root / "sm90").mkdir(parents=True)
    if model_edit is None:
        shutil.copy(SHIPPED, root / "sm90" / "gemm.json")
    else:
        doc = json.loads(SHIPPED.read_text())
        model_edit(doc["model"])
        (root / "sm90" / "gemm.json").write_text(json.dumps(doc))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(root))
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    monkeypatch.delenv("OASR_TUNE_MODEL_FALLBACK", raising=False)
    runtime.reload()
    clear_memo()
    return root


def _oasr(*args: str):
    """``oasr <args>`` in-process with the installed plugins (the gemm entry point)."""
    return CliRunner().invoke(main, list(args), obj=CliState(), catch_exceptions=False)


def _select(n, k, m, op="gemm"):
    return select("gemm", op, "fp16", (n, k), m, "sm90")


def test_gemm_declares_torch_as_its_untuned_selector():
    fam = runtime.get_runtime().registry.family("gemm")
    assert fam.untuned_choice is Sentinel.TORCH
    assert fam.fallback is Sentinel.DEFAULT  # the build's baseline is unchanged


def test_uncovered_shape_is_torch_unless_the_model_predicts_a_win(tmp_path, monkeypatch):
    _system_tier(tmp_path, monkeypatch)
    win = _select(*WIN)
    assert win.tier is Tier.MODEL and win.config.id == "ws_64x16x128_c1x1_swap"
    assert f"x {MARGIN:g} <= torch" in win.reason
    lose = _select(*NO_WIN)
    assert lose.tier is Tier.DEFAULT and lose.choice is Sentinel.TORCH and lose.config is None
    assert "predicts no win over torch" in lose.reason
    # A width outside what the torch calibration measured (N 256..512): no extrapolation.
    wide = _select(2048, 512, 16)
    assert wide.choice is Sentinel.TORCH and "no calibration of the torch arm" in wide.reason
    # An op the calibration has too few widths of: torch.
    act = _select(2048, 512, 16, op="gemm_activation")
    assert act.choice is Sentinel.TORCH


def test_a_covered_shape_still_comes_from_its_entry(tmp_path, monkeypatch):
    _system_tier(tmp_path, monkeypatch)
    sel = _select(256, 4864, 512)
    assert sel.tier is Tier.SYSTEM and sel.config.id == "ws_64x32x128_c1x1_swap"
    assert sel.reason == "system tier entry gemm|op=gemm|dt=half|N=256|K=4864"


def test_the_model_tier_ranks_only_the_production_set(tmp_path, monkeypatch):
    from oasr_gemm import jit

    from oasr_core.cost_model import ModelTier

    _system_tier(tmp_path, monkeypatch)
    rt = runtime.get_runtime()
    lane, fam = rt.registry.lane(LANE), rt.registry.family("gemm")
    compiled = {c.id for c in jit.PRODUCTION.configs(LANE, "sm90")}
    assert len(compiled) < len(lane.config_space)
    # With no margin, ranking the whole space picks a config the production module lacks
    # (a call then fell to torch with it); the tier as selection asks it does not.
    eager = ModelTier(margin=1.0)
    model = rt.tiers(fam, "sm90").system.model
    missing = []
    for n, k, m in ((512, 512, 200), (448, 1536, 700), (512, 2048, 700), (320, 1280, 700)):
        problem = Problem(family="gemm", op="gemm", dtype="fp16", dims={"N": n, "K": k}, m=m)
        assert {c.id for c in model_candidates(lane, "sm90", problem)} <= compiled
        whole = eager.decide(fam, lane, problem, lane.config_space, model)
        if whole.pick is not None and whole.pick.id not in compiled:
            missing.append((n, k, m))
    assert missing  # the whole space's pick is outside the production set somewhere
    shipped = rt.pm.get_plugin("oasr_core.model_tier")
    rt.pm.unregister(name="oasr_core.model_tier")
    rt.pm.register(eager, name="oasr_core.model_tier")
    try:
        clear_memo()
        sel = _select(*missing[0])  # served by a compiled config, or by torch: never absent
        assert sel.config.id in compiled if sel.tier is Tier.MODEL else sel.config is None
        served = [sel.config.id for n, k in ((256, 512), (384, 768), (512, 2048), (448, 1536))
                  for m in (16, 48, 200, 700, 3000, 9000)
                  if (sel := _select(n, k, m)).tier is Tier.MODEL]
        assert served and set(served) <= compiled
    finally:
        rt.pm.unregister(name="oasr_core.model_tier")
        rt.pm.register(shipped, name="oasr_core.model_tier")
        clear_memo()


def test_a_payload_without_the_torch_calibration_serves_torch(tmp_path, monkeypatch):
    _system_tier(tmp_path, monkeypatch, model_edit=lambda model: model.pop("fallbacks"))
    sel = _select(*WIN)
    assert sel.tier is Tier.DEFAULT and sel.choice is Sentinel.TORCH
    assert "no calibration of the torch arm" in sel.reason


def test_model_fallback_off_serves_torch(tmp_path, monkeypatch):
    _system_tier(tmp_path, monkeypatch)
    monkeypatch.setenv("OASR_TUNE_MODEL_FALLBACK", "0")
    sel = _select(*WIN)
    assert sel.choice is Sentinel.TORCH and "OASR_TUNE_MODEL_FALLBACK=0" in sel.reason


def test_select_cli_reports_tier_and_reason(tmp_path, monkeypatch):
    _system_tier(tmp_path, monkeypatch)
    args = ["tune", "select", "--family", "gemm", "--op", "gemm", "--dtype", "fp16",
            "--dim", "N=512", "--dim", "K=2048", "--arch", "sm90", "--json"]
    won = json.loads(_oasr(*args, "--m", str(WIN[2])).output)
    assert won["tier"] == "model" and won["choice"] == "ws_64x16x128_c1x1_swap"
    assert "<= torch" in won["reason"]
    lost = _oasr(*args[:-1], "--m", str(NO_WIN[2]))
    assert lost.exit_code == 0, lost.output
    assert lost.output.startswith("torch  (tier default") and "why: no user or system entry" \
        in lost.output and "predicts no win over torch" in lost.output


def test_the_replay_writes_the_shipped_table_byte_for_byte(tmp_path):
    out = tmp_path / "gemm.json"
    result = _oasr("tune", "build", "--from-log", str(LOG), "--thin", "--max-points", "14",
                   "--fresh", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == SHIPPED.read_bytes()
    fallbacks = json.loads(out.read_text())["model"]["fallbacks"]
    assert set(fallbacks["torch"]) == {"gemm", "gemm_residual"}
    assert fallbacks["torch"]["gemm"]["signatures"] == 4  # the residual rows calibrate their own op
