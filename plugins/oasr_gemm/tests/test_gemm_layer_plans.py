"""Per-layer plans of the family's linear: a layer whose op plan is torch calls F.linear on its
parameters with no op key or checks; the op serves every other call, a recorder's, a
compiling one's, and a new epoch's first."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.runtime import reload
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_gemm
from oasr_gemm import linear as gemm_linear
from oasr_gemm import ops
from oasr_gemm.recorder import recorder_patches


def _layer_and_input(m=4):
    """A CUDA fp16 ``nn.Linear(64, 128)`` and its input, under the caller's fake mode."""
    layer = nn.Linear(64, 128, device="meta")
    cuda = {"device": "cuda", "dtype": torch.float16}
    layer.weight = nn.Parameter(torch.empty(128, 64, **cuda), requires_grad=False)
    layer.bias = nn.Parameter(torch.empty(128, **cuda), requires_grad=False)
    x = torch.empty(m, 64, device="cuda", dtype=torch.float16)
    return layer, x


def _op_runs(monkeypatch):
    """Count the op's runs from the layer path (``_run`` as the linear module bound it)."""
    runs = []
    real = gemm_linear._load_ops()._run

    def counting(*args):
        runs.append(args[0])
        return real(*args)

    monkeypatch.setattr(gemm_linear, "_run", counting)
    return runs


def _torch_plan(x, n=128, k=64):
    epoch = ops.SERVING.bind()
    ops._PLANS.store(("gemm", None, x.dtype, n, k, x.numel() // k, x.get_device()), ops.TORCH,
                     epoch)
    ops._PLANS.store(("gemm_activation", "relu", x.dtype, n, k, x.numel() // k,
                      x.get_device()), ops.TORCH, epoch)


def test_a_layer_the_tiers_gave_to_torch_calls_f_linear_from_its_second_call(monkeypatch):
    runs = _op_runs(monkeypatch)
    with FakeTensorMode():
        layer, x = _layer_and_input()
        _torch_plan(x)
        for _ in range(3):
            assert gemm_linear.linear(x, layer).shape == (4, 128)
            assert gemm_linear.linear(x, layer, "relu").shape == (4, 128)
    assert runs == ["gemm", "gemm_activation"]  # the first call of each; then the layer plan
    assert oasr_gemm.stats() == {"torch:selected": 6}
    plans = set(ops.SERVING.layers.table.values())
    assert plans == {ops.TORCH}


def test_the_layer_plan_computes_what_the_layer_does():
    gen = torch.Generator().manual_seed(0)
    layer = nn.Linear(16, 8).half().requires_grad_(False)
    x = torch.randn(3, 16, generator=gen).half()
    key = (id(layer), None, x.shape, x.dtype)
    epoch = ops.SERVING.bind()
    ops.SERVING.layers.store(key, ops.TORCH, epoch)  # as a CUDA layer's torch plan would be
    assert torch.equal(gemm_linear.linear(x, layer), F.linear(x, layer.weight, layer.bias))
    ops.SERVING.layers.store((id(layer), "gelu", x.shape, x.dtype), ops.TORCH, epoch)
    assert torch.equal(gemm_linear.linear(x, layer, "gelu"),
                       F.gelu(F.linear(x, layer.weight, layer.bias)))


def test_cpu_calls_keep_the_op_and_its_reason(monkeypatch):
    runs = _op_runs(monkeypatch)
    layer = nn.Linear(16, 8)
    x = torch.randn(3, 16)
    for _ in range(3):
        assert torch.equal(gemm_linear.linear(x, layer), layer(x))
    assert runs == ["gemm"] * 3 and oasr_gemm.stats() == {"torch:cpu": 3}
    assert set(ops.SERVING.layers.table.values()) == {"op"}


def test_a_new_epoch_and_clear_memo_forget_the_layer_plans(monkeypatch):
    runs = _op_runs(monkeypatch)
    with FakeTensorMode():
        layer, x = _layer_and_input()
        _torch_plan(x)
        gemm_linear.linear(x, layer)
        gemm_linear.linear(x, layer)
        reload()
        _torch_plan(x)
        gemm_linear.linear(x, layer)
        ops.clear_memo()
        assert not ops.SERVING.layers.table
        _torch_plan(x)
        gemm_linear.linear(x, layer)
    assert runs == ["gemm"] * 3


def test_a_recorder_sees_every_layer_call(monkeypatch):
    with FakeTensorMode():
        layer, x = _layer_and_input()
        _torch_plan(x)
        gemm_linear.linear(x, layer)
        gemm_linear.linear(x, layer)  # served by the layer plan
        with ShapeRecorder(recorder_patches()) as recorder:
            for _ in range(3):
                gemm_linear.linear(x, layer)
                gemm_linear.linear(x, layer, "relu")
        gemm_linear.linear(x, layer)
    counts = {call.op: n for call, n in recorder.counts.items()}
    assert counts == {"gemm": 3, "gemm_activation": 3}


def test_a_layer_whose_weight_is_not_a_registered_parameter_keeps_the_op(monkeypatch):
    runs = _op_runs(monkeypatch)
    with FakeTensorMode():
        layer, x = _layer_and_input()
        layer = nn.utils.parametrize.register_parametrization(layer, "weight", nn.Identity())
        _torch_plan(x)
        for _ in range(2):
            assert gemm_linear.linear(x, layer).shape == (4, 128)
    assert runs == ["gemm", "gemm"]


def test_compiling_goes_through_the_op(monkeypatch):
    with FakeTensorMode():
        layer, x = _layer_and_input()
        _torch_plan(x)
        gemm_linear.linear(x, layer)
        monkeypatch.setattr(gemm_linear, "_compiling", lambda: True)
        seen = []
        monkeypatch.setattr(ops, "gemm", lambda *args: seen.append(args) or x)
        gemm_linear.linear(x, layer)
    assert len(seen) == 1


def test_a_torch_served_residual_call_still_names_a_mismatched_residual():
    import pytest

    with FakeTensorMode():
        layer, x = _layer_and_input()
        ops._PLANS.store(("gemm_residual", None, x.dtype, 128, 64, 4, x.get_device()),
                         ops.TORCH, ops.SERVING.bind())
        good = torch.empty(4, 128, device="cuda", dtype=torch.float16)
        assert ops.gemm_residual(x, layer.weight, layer.bias, good, 0.5).shape == (4, 128)
        for bad in (torch.empty(1, 128, device="cuda", dtype=torch.float16),
                    torch.empty(4, 128, device="cuda", dtype=torch.float32)):
            with pytest.raises(ValueError, match="residual must be"):
                ops.gemm_residual(x, layer.weight, layer.bias, bad)
    assert oasr_gemm.stats() == {"torch:selected": 1}
