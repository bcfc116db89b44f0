"""Op ``gemm_residual`` against the tiers, with the shipped H200 table and log: untuned it is
torch, even where the cost-model tier serves ``gemm``; a model refitted on rows that include
``gemm_residual`` measurements fits and predicts without error, and its picks for the op are
still served by torch (its candidates are the gemm production set, not the fused-residual
units the production module links)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from oasr_core import runtime
from oasr_core.build import model as build_model
from oasr_core.measurements import read_logs
from oasr_core.selection import clear_memo, select
from oasr_core.testing import pretend_cuda_device
from oasr_core.types import Tier

from oasr_gemm import config_space as cs
from oasr_gemm import launch, ops

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "db/sm90/gemm.json"
LOG = ROOT / "db/sm90/measurements/gemm.jsonl"
WIN = (512, 2048, 16)
"""An uncovered width where the shipped model serves gemm (test_integration_untuned_tier)."""


def _system_tier(tmp_path, monkeypatch, doc=None) -> None:
    root = tmp_path / "system"
    (root / "sm90").mkdir(parents=True)
    (root / "sm90" / "gemm.json").write_text(doc if doc is not None else SHIPPED.read_text())
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(root))
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    monkeypatch.delenv("OASR_TUNE_MODEL_FALLBACK", raising=False)
    runtime.reload()
    clear_memo()


def test_an_untuned_gemm_residual_is_torch_where_the_model_serves_gemm(tmp_path, monkeypatch):
    _system_tier(tmp_path, monkeypatch)
    assert select("gemm", "gemm", "fp16", WIN[:2], WIN[2], "sm90").tier is Tier.MODEL
    # The shipped model is calibrated on the op's own rows (the Conformer's residual
    # signatures), so the tier may pick for it; the op still runs torch untuned: the
    # production set's configs have no fused-residual units unless an entry names them.
    sel = select("gemm", "gemm_residual", "fp16", WIN[:2], WIN[2], "sm90")
    assert sel.tier in (Tier.MODEL, Tier.DEFAULT), sel.reason
    # A width the shipped table has gemm_residual entries for is served by its entry.
    covered = select("gemm", "gemm_residual", "fp16", (256, 1024), 2528, "sm90")
    assert covered.tier is Tier.SYSTEM and covered.config is not None
    pretend_cuda_device()
    launch.install_library(cs.LANE_SM90, "sm90", {
        launch.residual_key(c.id): launch.ResidualKernel(c, lambda *a: 0, lambda *a: 0)
        for c in cs.space(cs.LANE_SM90)})
    assert ops._plan(("gemm_residual", None, torch.float16, *WIN, 0)) is ops.TORCH


def _rows_with_residual_measurements():
    """The log's arm rows plus, for every gemm row, a gemm_residual twin 5% slower."""
    runs, arms, _bad = read_logs([LOG])
    twins = [{**r, "op": "gemm_residual", "median_ms": r["median_ms"] * 1.05}
             for r in arms if r.get("op") == "gemm" and "median_ms" in r]
    return runs, [*arms, *twins]


def test_a_model_fitted_with_residual_rows_predicts_and_the_op_stays_on_torch(tmp_path,
                                                                             monkeypatch):
    runs, rows = _rows_with_residual_measurements()
    rt = runtime.get_runtime()
    family, lane = rt.registry.family("gemm"), rt.registry.lane(cs.LANE_SM90)
    payload = build_model.fit_payload(rows, build_model.profile_of(runs), family, lane)
    assert payload is not None and payload["ops"] == ["gemm", "gemm_activation",
                                                      "gemm_residual"]
    doc = json.loads(SHIPPED.read_text())
    doc["model"] = payload
    _system_tier(tmp_path, monkeypatch, json.dumps(doc))
    sel = select("gemm", "gemm_residual", "fp16", WIN[:2], WIN[2], "sm90")
    assert sel.tier is Tier.MODEL, sel.reason  # the refitted calibration serves the op
    pretend_cuda_device()
    launch.install_library(cs.LANE_SM90, "sm90", {
        launch.residual_key(c.id): launch.ResidualKernel(c, lambda *a: 0, lambda *a: 0)
        for c in cs.space(cs.LANE_SM90)})
    assert ops._plan(("gemm_residual", None, torch.float16, *WIN, 0)) is ops.TORCH
