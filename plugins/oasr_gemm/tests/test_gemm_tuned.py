"""A tuning file drives both the production compile set and the per-shape choice."""

from __future__ import annotations

import pytest
import torch
from oasr_core import database, stamps
from oasr_core.runtime import get_runtime
from oasr_core.testing import pretend_cuda_device

from oasr_gemm import config_space as cs
from oasr_gemm import jit, launch, ops

TUNED = "ws_128x80x64_c1x1"


@pytest.fixture
def system_tier(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    key = database.signature_key(family, "gemm", "fp16", (512, 256))
    entry = database.Entry(regions=((64, TUNED), (None, "torch")))
    database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                           arch="sm90", lane=lane, entries={key: entry},
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    pretend_cuda_device()
    return tmp_path


def _fake_library():
    return {c.id: launch.Kernel(c, lambda *a: 0, lambda *a: 0) for c in cs.space(cs.LANE_SM90)}


def test_referenced_configs_join_the_production_module(system_tier):
    assert TUNED not in jit.production_ids(cs.LANE_SM90, "sm90")
    spec = jit.production_spec(cs.LANE_SM90, "sm90")
    assert TUNED in {u.name for u in spec.units}
    assert cs.SM90_DEFAULT in {u.name for u in spec.units}


def test_regions_choose_the_kernel_or_torch(system_tier):
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library())
    small = ops._plan(("gemm", None, torch.float16, 512, 256, 48, 0))
    assert small.config.id == TUNED and small.args.dtype == 0 and small.args.act == 0
    assert ops._plan(("gemm", None, torch.float16, 512, 256, 4096, 0)) is ops.TORCH
    # No entry covers gemm_activation and the shipped model is not loaded: torch, untuned.
    assert ops._plan(("gemm_activation", "silu", torch.bfloat16, 512, 256, 48, 0)) is ops.TORCH
    counts = get_runtime().counts
    assert counts[("gemm", "gemm", "system")] == 2 and counts[("gemm", "gemm_activation",
                                                              "default")] == 1


def test_gelu_runs_on_torch_where_the_entry_was_measured_with_silu(tmp_path, monkeypatch):
    """An entry of gemm_activation speaks for SiLU and ReLU (what the build measures and a
    cheaper epilogue); a GELU call at the same shape takes torch."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    key = database.signature_key(family, "gemm_activation", "half", (2048, 512))
    database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                           arch="sm90", lane=lane,
                           entries={key: database.Entry(regions=((None, TUNED),))},
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    pretend_cuda_device()
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library())
    for act in ("silu", "relu"):
        plan = ops._plan(("gemm_activation", act, torch.float16, 2048, 512, 12000, 0))
        assert plan is not ops.TORCH and plan.config.id == TUNED, act
    assert ops._plan(("gemm_activation", "gelu", torch.float16, 2048, 512, 12000, 0)) is ops.TORCH
