"""The kit's prepared call, bench-arm helpers, lane rules and gate verdict (no GPU)."""

from __future__ import annotations

import ctypes

import pytest

from oasr_core.jit.kit import CallArgs
from oasr_core.kit import BufferKind, WorkspacePool, calls, lanes
from oasr_core.kit.benching import choice_arms
from oasr_core.kit.gates import Verdict
from oasr_core.types import Config, Sentinel


def _config(**params) -> Config:
    return Config(lane="lane_x", id="cfg", params=params)


class _Buffer:
    def __init__(self, nbytes: int) -> None:
        self.raw = ctypes.create_string_buffer(nbytes)

    def numel(self) -> int:
        return len(self.raw)

    def element_size(self) -> int:
        return 1

    def data_ptr(self) -> int:
        return ctypes.addressof(self.raw)


def _recorder(seen: list):
    def fn(address, *rest):
        record = CallArgs.from_address(address)
        seen.append((record.m, record.workspace_bytes, record.semaphore_bytes, rest))
        return 0
    return fn


def test_a_plain_call_passes_its_record_and_the_current_stream(monkeypatch):
    seen: list = []
    monkeypatch.setattr(calls, "_current_stream", lambda device: 70 + device)
    monkeypatch.setattr(calls, "_current_device", lambda: 1)
    prepared = calls.PreparedCall(_recorder(seen), CallArgs(m=5), _config())
    assert prepared.plain and prepared.address == ctypes.addressof(prepared.args)
    assert prepared(1, 10, 20) == 0
    assert prepared.launch(1, 9, 30) == 0
    assert seen == [(5, 0, 0, (10, 20, 71)), (5, 0, 0, (30, 9))]


def test_a_workspace_call_gets_its_streams_buffers_in_a_copy_of_the_record(monkeypatch):
    seen: list = []
    pool = WorkspacePool((BufferKind("scratch", 64), BufferKind("sems", 16, zeroed=True)),
                         warn=lambda m: None, allocate=lambda kind, n, dev: _Buffer(n),
                         capturing=lambda: False)
    monkeypatch.setattr(calls, "_current_stream", lambda device: 3)
    monkeypatch.setattr(calls, "_current_device", lambda: 0)
    prepared = calls.PreparedCall(_recorder(seen), CallArgs(m=2), _config(), (100, 8), pool)
    assert not prepared.plain
    assert prepared(0, 11) == 0
    assert seen == [(2, 100, 16, (11, 3))]
    assert prepared.args.workspace is None  # the prepared record itself is never written


def test_a_workspace_call_needs_a_pool():
    with pytest.raises(ValueError, match="lane_x/cfg: a call needing workspace"):
        calls.PreparedCall(lambda *a: 0, CallArgs(), _config(), (0, 8))


class _Options:
    def config_of(self, choice, problem):
        return choice if isinstance(choice, Config) else None


def test_choice_arms_names_arms_and_rejections():
    good, bad = (Config(lane="lane_x", id=i, params={}) for i in ("good", "bad"))

    def kernel_arm(cfg):
        if cfg.id == "bad":
            raise RuntimeError("refused m=1")
        return lambda i: cfg.id

    arms, rejected = choice_arms(None, [good, bad, Sentinel.TORCH, Sentinel.DEFAULT],
                                 _Options(), family="fam", torch_arm=lambda: (lambda i: "t"),
                                 kernel_arm=kernel_arm)
    assert {name: arm(0) for name, arm in arms.items()} == {"good": "good", "torch": "t"}
    assert rejected == {"bad": "refused m=1", "default": "default has no fam launcher"}


def test_cutlass3_tile_rules():
    def cfg(tile=(128, 128, 64), cluster=(1, 1), schedule="ws", stages=0, stream_k=False):
        return _config(tile=tile, cluster=cluster, schedule=schedule, stages=stages,
                       stream_k=stream_k)

    tile = lanes.cutlass3_tile(cfg(), max_cluster=2)
    assert (tile.m, tile.n, tile.k, tile.consumers) == (128, 128, 64, 1)
    assert lanes.cutlass3_tile(cfg((256, 128, 64), schedule="cooperative"),
                               max_cluster=2).consumers == 2
    for bad in (cfg((256, 128, 64)), cfg((128, 8, 64)), cfg((128, 128, 32)),
                cfg(cluster=(2, 2)), cfg(stream_k=True), cfg(stages=1),
                cfg((192, 128, 64), schedule="cooperative")):
        assert lanes.cutlass3_tile(bad, max_cluster=2) is None


def test_lane_rules_answer_feasibility_arch_and_alignment():
    rules = lanes.LaneRules({"lane_x": lambda c: c.params["ok"]}, {"lane_x": ("sm80",)},
                            {"lane_x": lambda c: c.params["smem"]}, align=8)
    small = _config(ok=True, smem=1000)
    assert rules.is_feasible(small) and not rules.is_feasible(_config(ok=False, smem=0))
    assert rules.fits_arch(small, "sm80") and not rules.fits_arch(small, "sm90")
    assert not rules.fits_arch(_config(ok=True, smem=lanes.SMEM_LIMIT["sm80"] + 1), "sm80")
    assert rules.aligned(16, 8) and not rules.aligned(12, 8) and not rules.aligned(0, 8)


def test_a_verdict_is_truthy_when_it_passes():
    assert Verdict(True, 0.0) and not Verdict(False, 1.0, "differs")
    assert Verdict(False, 1.0, "differs").reason == "differs"
