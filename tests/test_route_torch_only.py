"""A routed layer whose answer is torch at every call keeps its module's own forward.

:func:`oasr_core.route` leaves a layer its own forward where its answer says torch serves it
whatever the input (``torch_only``: the gemm linear's for a width no tier can serve a kernel
at, at any M; the conv1d layer's for a grouping no kernel takes): no oasr frame on its path,
the same aten calls as torch's module from the first call, the same output. Every reload of
the runtime plans the routed layers again (a tier that now covers the width binds the
family's forward; one that no longer does gives the module its forward back), an autotune
session sends every layer through the ops, and so does :func:`oasr_core.routing.through_ops`
(what ``oasr tune bench``'s tally of the calls each tier serves runs under).

Real ``nn.Linear`` / ``nn.Conv1d`` modules and held-out encoders on the CPU; the shipped sm90
tables (``db/``) as the system tier where a test says so; a CUDA GPU stood for by the
runtime's device facts (sm90, the current device) and, where a layer is called, CPU tensors
reporting CUDA device 0 (``cuda_like``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from bench_scripts import script
from oasr_gemm import linear as gemm_linear
from oasr_gemm import ops as gemm_ops
from torch import nn

from oasr_core import selection
from oasr_core.autotuning.session import AutotuneSession
from oasr_core.routing import own_forwards, replan, route, through_ops, unroute
from oasr_core.runtime import DeviceFacts, get_runtime, reload
from oasr_core.testing import aten_calls

ROOT = Path(__file__).resolve().parents[1]
OASR_CODE = (str(ROOT / "oasr_core"), str(ROOT / "plugins"))
M = 6


@pytest.fixture
def sm90():
    """The process runtime's current CUDA device is an sm90 GPU (device 0)."""
    rt = get_runtime()
    rt.devices[None] = rt.devices[0] = DeviceFacts(index=0, arch="sm90", sm_count=132)
    return rt


def _shipped_tables(monkeypatch, on=True, tmp_path=None):
    """The shipped tables as the system tier (``on``), or an empty one; a new epoch."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(ROOT / "db") if on else str(tmp_path))
    reload()


def _linear(k, n, bias=True):
    gen = torch.Generator().manual_seed(0)
    layer = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) / k ** 0.5)
    return layer.half().requires_grad_(False).eval()


def _pair(k, n, bias=True):
    routed, own = _linear(k, n, bias), _linear(k, n, bias)
    own.load_state_dict(routed.state_dict())
    return routed, own


def _oasr_frames(fn):
    """The oasr source files of the Python frames ``fn()`` runs."""
    files = []

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename.startswith(OASR_CODE):
            files.append(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return files


@pytest.fixture
def op_runs(monkeypatch):
    """The gemm op's runs (``ops._run``, which every op call and the linear's first call
    reach)."""
    runs = []
    real = gemm_ops._run

    def counting(*args):
        runs.append(args[0])
        return real(*args)

    monkeypatch.setattr(gemm_ops, "_run", counting)
    monkeypatch.setattr(gemm_linear, "_run", counting, raising=False)
    return runs


def test_a_linear_no_tier_serves_at_any_m_runs_its_own_forward(sm90, monkeypatch, cuda_like,
                                                                op_runs):
    _shipped_tables(monkeypatch)
    # N = 1536 lies outside the widths the shipped cost model's torch calibration spans, and
    # no entry covers (1536, 384): torch at every M.
    routed, own = _pair(384, 1536)
    x = torch.randn(2, M, 384).half()
    gemm_ops.reset_stats()
    with torch.inference_mode():
        assert route(routed, dtype="fp16") == {"Linear": 1, "Conv1d": 0}
        assert "forward" not in routed.__dict__ and own_forwards(routed) == 1
        assert _oasr_frames(lambda: routed(x)) == []
        assert aten_calls(lambda: routed(x)) == aten_calls(lambda: own(x))
        assert torch.equal(routed(x), own(x))
    assert op_runs == [] and gemm_ops.stats() == {}
    assert unroute(routed) == 1 and own_forwards(routed) == 0


def test_a_width_a_tier_may_serve_keeps_the_per_m_plan(sm90, monkeypatch, cuda_like):
    _shipped_tables(monkeypatch)
    # (N 512, K 2048): no entry, but the cost model picks a kernel at some M, so the model
    # tier decides per M; (256, 1024): the shipped table's entry.
    layers = [_linear(2048, 512), _linear(1024, 256)]
    for layer in layers:
        route(layer, dtype="fp16")
        assert layer.forward.func is gemm_linear.forward
        assert own_forwards(layer) == 0


def test_the_layers_are_planned_again_when_the_tiers_change(sm90, monkeypatch, tmp_path):
    # An empty system tier: no tier serves (256, 1024), so the layer keeps its forward.
    routed, own = _pair(1024, 256)
    route(routed, dtype="fp16")
    x = torch.randn(M, 1024).half()
    assert "forward" not in routed.__dict__
    _shipped_tables(monkeypatch)  # a reload: the shipped table covers it now
    assert routed.forward.func is gemm_linear.forward
    with torch.inference_mode():
        assert torch.equal(routed(x), own(x))  # a CPU call: the op's torch path
    _shipped_tables(monkeypatch, on=False, tmp_path=tmp_path)
    assert "forward" not in routed.__dict__
    with torch.inference_mode():
        assert torch.equal(routed(x), own(x))
    monkeypatch.setenv("OASR_TUNE_MODEL_FALLBACK", "0")
    _shipped_tables(monkeypatch)
    assert routed.forward.func is gemm_linear.forward  # an entry serves, model tier or not
    replan()  # what a reload did: nothing changes
    assert own_forwards(routed) == 0 and unroute(routed) == 1


def test_an_autotune_session_sends_every_routed_linear_through_the_op(sm90):
    routed = _linear(384, 1536)
    route(routed, dtype="fp16")
    assert "forward" not in routed.__dict__
    with AutotuneSession(cache=None, publish=False, arch="sm90"):
        # A call may be measured now: it must reach the op.
        assert routed.forward.func is gemm_linear.forward
    assert "forward" not in routed.__dict__


def test_through_ops_sends_every_routed_layer_through_its_answer(sm90, cuda_like, op_runs):
    routed, own = _pair(384, 1536)
    conv = nn.Conv1d(16, 32, 3, padding=1, groups=4).half().eval()
    route(routed, dtype="fp16")
    route(conv, dtype="fp16")
    assert own_forwards(routed) == own_forwards(conv) == 1  # a grouping no kernel takes
    x = torch.randn(M, 384).half()
    with torch.inference_mode():
        with through_ops():
            assert own_forwards(routed) == own_forwards(conv) == 0
            assert torch.equal(routed(x), own(x))
        assert op_runs == ["gemm"]
        assert own_forwards(routed) == own_forwards(conv) == 1
        assert torch.equal(routed(x), own(x)) and op_runs == ["gemm"]
    assert unroute(conv) == 1


def test_when_a_signature_is_torch_at_every_m(sm90, monkeypatch):
    _shipped_tables(monkeypatch)
    every = selection.torch_at_every_m
    assert not every("gemm", "gemm", "fp16", (256, 1024))  # a table entry
    assert not every("gemm", "gemm", "fp16", (512, 2048))  # the cost model picks at some M
    assert every("gemm", "gemm", "fp16", (384, 384))  # calibrated, but it picks at no M
    assert every("gemm", "gemm", "fp16", (1536, 384))
    assert not every("gemm", "gemm", "fp32", (1536, 384))  # a dtype the family does not serve
    assert not every("no_such_family", "gemm", "fp16", (8, 8))
    monkeypatch.setenv("OASR_TUNE_MODEL_FALLBACK", "0")
    reload()
    assert every("gemm", "gemm", "fp16", (512, 2048))  # the model tier is off
    old = selection.set_session(object())
    try:
        assert not every("gemm", "gemm", "fp16", (512, 2048))  # a session measures misses
    finally:
        selection.set_session(old)
    # The gemm linear: a width the kernels never take; a parametrized weight keeps the op.
    assert gemm_linear.torch_only(_linear(30, 40), "fp16")
    param = nn.utils.parametrizations.weight_norm(_linear(1024, 256).float())
    assert not gemm_linear.torch_only(param, "fp16")


def test_without_a_cuda_device_every_routed_linear_keeps_its_forward():
    assert get_runtime().device_arch() is None or pytest.skip("this machine has a CUDA GPU")
    layer = _linear(1024, 256)
    route(layer, dtype="fp16")
    assert own_forwards(layer) == 1


@pytest.mark.parametrize("name, shape, own", [
    ("whisper_like", (1, 80, 16), 6),  # its one layer's linears (d 384, FFN 1536)
    ("zipformer_like", (1, 16, 80), 10),  # both stacks' linears (d 192 and 384)
])
def test_a_held_out_encoder_routed_computes_what_torch_does(sm90, monkeypatch, cuda_like,
                                                           name, shape, own):
    _shipped_tables(monkeypatch)
    heldout = script("heldout_encoders")
    torch.manual_seed(0)
    model = getattr(heldout, name)(layers=1).half().eval()
    twin = getattr(heldout, name)(layers=1).half().eval()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(*shape).half()
    counts = route(model, dtype="fp16")
    # No table covers these widths and the shipped cost model picks a kernel at no M of its
    # sweep: every linear keeps its module's own forward (the convs keep the per-M plan).
    assert own_forwards(model) == own == counts["Linear"]
    with torch.inference_mode():
        for _ in range(2):
            assert torch.equal(model(x), twin(x))
    compiled = torch.compile(model, backend="eager")  # Dynamo traces both kinds of layer
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), twin(x), rtol=0, atol=0)


def test_a_recorder_sees_a_routed_linear_whose_ops_load_under_it(monkeypatch):
    """The family's linear imports its ops at its first call: made while a recorder has
    rebound them, it still tells the recorder's wrapper from the op (the tally of a model
    whose layers keep their own forward, sent through the ops, is such a first call)."""
    from oasr_core.bench.e2e import _family_op_patches
    from oasr_core.census.recorder import ShapeRecorder

    monkeypatch.setattr(gemm_linear, "_OPS", None)
    routed = _linear(384, 1536).float()
    route(routed, dtype="fp16")
    with through_ops(), ShapeRecorder(_family_op_patches(get_runtime().registry)) as rec:
        routed(torch.randn(M, 384))
    assert [(c.op, c.dims, n) for c, n in rec.counts.items()] == \
        [("gemm", (("N", 1536), ("K", 384)), 1)]


def test_a_census_recorder_sees_every_routed_linear(sm90, monkeypatch, cuda_like):
    """A capture or census records a layer left to its own forward through torch's
    ``F.linear`` and one on its per-M plan through the family's op: each call once."""
    from oasr_core.census.recorder import ShapeRecorder, patches_of

    _shipped_tables(monkeypatch)
    # (N 512, K 2048): the cost model picks a kernel at M <= 64, the per-M plan (called at
    # M 128, where its answer is torch); (N 1536, K 512): at no M, its own forward.
    model = nn.Sequential(_linear(2048, 512), _linear(512, 1536))
    route(model, dtype="fp16")
    assert own_forwards(model) == 1
    x = torch.randn(1, 128, 2048).half()
    with torch.inference_mode(), ShapeRecorder(patches_of(get_runtime().registry)) as rec:
        model(x)
    gemm = {c.dims: n for c, n in rec.counts.items() if c.family == "gemm"}
    assert gemm == {(("N", 512), ("K", 2048)): 1, (("N", 1536), ("K", 512)): 1}
