"""Per-layer plans of the family's conv layer and of a routed ``nn.Conv1d``: where the op's plan
is torch, a repeated call is the layer's own ``F.conv1d`` (the same aten calls as the torch
module, no op run, no copy or allocation of its own); the op serves every other call, a
recorder's, a compiling one's, and a new epoch's first.

CPU tests on real modules and tensors: a CUDA call is stood for by CPU tensors that report
CUDA device 0 (torch's own code never reads those two Python attributes),
so the op files its plan under device 0 and the torch math runs on the CPU
(``oasr_core.testing``'s ``cuda_like`` fixture)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.routing import route, unroute
from oasr_core.runtime import reload
from oasr_core.testing import aten_calls
from torch import nn

import oasr_conv1d
from oasr_conv1d import layer as conv_layer_module
from oasr_conv1d import ops
from oasr_conv1d.layer import CHANNELS_FIRST, conv_forward, conv_layer
from oasr_conv1d.numerics import torch_conv
from oasr_conv1d.recorder import recorder_patches

B, T, C, K = 2, 40, 16, 5


def _conv(groups=C, padding=K // 2, bias=True):
    """An fp16 depthwise ``nn.Conv1d`` in eval mode, no grad."""
    gen = torch.Generator().manual_seed(0)
    conv = nn.Conv1d(C, C, K, padding=padding, groups=groups, bias=bias)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen))
    return conv.half().requires_grad_(False).eval()


def _channels_last():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(B, T, C, generator=gen).half()


def _torch_plan(x, conv, op="conv1d"):
    """The tiers' torch answer for ``conv`` on channels-last ``x`` (the op's plan)."""
    key = ops._key(op, x, conv.weight, conv.stride, conv.padding, conv.dilation, conv.groups)
    ops._PLANS.store(key, ops.TORCH, ops.SERVING.bind())


def _op_runs(monkeypatch):
    """Count the op's runs (``ops._run``, which both the op and the custom op call)."""
    runs = []
    real = ops._run

    def counting(op, *args):
        runs.append(op)
        return real(op, *args)

    monkeypatch.setattr(ops, "_run", counting)
    return runs


def test_a_routed_conv_the_tiers_gave_to_torch_is_the_modules_own_call(monkeypatch, cuda_like):
    runs = _op_runs(monkeypatch)
    with torch.no_grad():
        conv, own = _conv(), _conv()
        own.weight, own.bias = conv.weight, conv.bias
        assert route(conv, linear=False) == {"Linear": 0, "Conv1d": 1}
        xl = _channels_last()
        x = xl.transpose(1, 2)
        _torch_plan(xl, conv)
        first = aten_calls(lambda: conv(x))
        later = [aten_calls(lambda: conv(x)) for _ in range(3)]
        assert conv(x).shape == own(x).shape == (B, C, T)
        assert conv(x).stride() == own(x).stride()
        torch_calls = aten_calls(lambda: own(x))
    assert runs == ["conv1d"]  # the first call only; then the layer plan
    assert "aten.clone.default" in first or "aten.empty.memory_format" in first  # the op's copy
    assert later == [torch_calls] * 3  # no view, copy or allocation of its own
    assert oasr_conv1d.stats() == {"torch:selected": 6}
    assert set(ops.SERVING.layers.table.values()) == {"torch:selected"}


def test_a_routed_conv_on_channels_first_data_is_the_modules_own_call(monkeypatch, cuda_like):
    runs = _op_runs(monkeypatch)
    with torch.no_grad():
        conv, own = _conv(), _conv()
        own.weight, own.bias = conv.weight, conv.bias
        route(conv, linear=False)
        x = _channels_last().transpose(1, 2).contiguous()  # a contiguous [B, C, T]
        torch_calls = aten_calls(lambda: own(x))
        assert aten_calls(lambda: conv(x)) == ["aten.transpose.int", *torch_calls]  # its layout
        for _ in range(2):
            assert aten_calls(lambda: conv(x)) == torch_calls
    assert runs == [] and oasr_conv1d.stats() == {"torch:noncontiguous": 2}


def test_the_conv_layer_torch_plan_is_the_ops_torch_path(monkeypatch, cuda_like):
    runs = _op_runs(monkeypatch)
    with torch.no_grad():
        conv, x = _conv(), _channels_last()
        _torch_plan(x, conv, "conv1d_silu")
        first = aten_calls(lambda: conv_layer(x, conv, "silu"))
        later = aten_calls(lambda: conv_layer(x, conv, "silu"))
        out = conv_layer(x, conv, "silu")
        torch_path = aten_calls(lambda: torch_conv(x, conv.weight, conv.bias, 1, K // 2, 1, C,
                                              "silu"))
    assert runs == ["conv1d_silu"]
    assert out.shape == (B, T, C) and out.is_contiguous()
    assert first == later == torch_path
    assert oasr_conv1d.stats() == {"torch:selected": 3}


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_the_layer_plans_compute_what_the_layer_does(activation):
    gen = torch.Generator().manual_seed(0)
    conv = nn.Conv1d(16, 16, 5, padding=2, groups=16).requires_grad_(False)
    xl = torch.randn(2, 12, 16, generator=gen)
    epoch = ops.SERVING.bind()
    ops.SERVING.layers.store((id(conv), activation, xl.shape, xl.dtype), "torch:selected",
                             epoch)
    ref = conv(xl.transpose(1, 2))
    ref = ref if activation is None else F.gelu(ref)
    assert torch.equal(conv_layer(xl, conv, activation), ref.transpose(1, 2))
    x = xl.transpose(1, 2)
    ops.SERVING.layers.store((id(conv), CHANNELS_FIRST, x.shape, x.dtype), "torch:selected",
                             epoch)
    route(conv, linear=False)
    assert torch.equal(conv(x), F.conv1d(x, conv.weight, conv.bias, 1, 2, 1, 16))
    assert unroute(conv) == 1


def test_a_grouped_conv_no_kernel_takes_is_the_modules_own_call(monkeypatch, cuda_like):
    runs = _op_runs(monkeypatch)
    with torch.no_grad():
        conv, own = _conv(groups=4), _conv(groups=4)
        own.weight, own.bias = conv.weight, conv.bias
        route(conv, linear=False)
        # Routed, yet its own forward: a grouping neither dense nor depthwise is torch's at
        # every call (conv_layer.torch_only), from the first one.
        assert "forward" not in conv.__dict__
        x = _channels_last().transpose(1, 2)
        torch_calls = aten_calls(lambda: own(x))
        for _ in range(2):
            assert aten_calls(lambda: conv(x)) == torch_calls
        layer_out = conv_layer(_channels_last(), conv, "relu")
        assert conv_layer(_channels_last(), conv, "relu").shape == layer_out.shape
    assert runs == ["conv1d_relu"]  # the family's layer's first call only
    assert oasr_conv1d.stats() == {"torch:grouped": 2}
    assert unroute(conv) == 1


def test_cpu_calls_are_the_modules_own_and_keep_no_plan(monkeypatch):
    runs = _op_runs(monkeypatch)
    conv = nn.Conv1d(16, 16, 5, padding=2, groups=16).requires_grad_(False)
    own = nn.Conv1d(16, 16, 5, padding=2, groups=16).requires_grad_(False)
    own.load_state_dict(conv.state_dict())
    route(conv, linear=False)
    x = torch.randn(2, 12, 16).transpose(1, 2)
    for _ in range(3):
        assert torch.equal(conv(x), own(x))
    assert runs == [] and not ops.SERVING.layers.table
    for _ in range(2):  # the family's layer on a CPU tensor: the op and its reason
        conv_layer(x.transpose(1, 2), conv)
    assert runs == ["conv1d"] * 2 and oasr_conv1d.stats() == {"torch:cpu": 5}


def test_a_new_epoch_and_clear_memo_forget_the_layer_plans(monkeypatch, cuda_like):
    runs = _op_runs(monkeypatch)
    with torch.no_grad():
        conv, x = _conv(), _channels_last()
        for step in range(3):
            _torch_plan(x, conv)
            conv_layer(x, conv)
            conv_layer(x, conv)
            if step == 0:
                reload()
            elif step == 1:
                ops.clear_memo()
                assert not ops.SERVING.layers.table
    assert runs == ["conv1d"] * 3


def test_a_recorder_sees_every_layer_call(cuda_like):
    with torch.no_grad():
        conv, x = _conv(), _channels_last()
        routed = _conv()
        route(routed, linear=False)
        _torch_plan(x, conv)
        _torch_plan(x, routed)
        for _ in range(2):  # served by the layer plans from the second call
            conv_layer(x, conv)
            routed(x.transpose(1, 2))
        with ShapeRecorder(recorder_patches()) as recorder:
            for _ in range(3):
                conv_layer(x, conv)
                routed(x.transpose(1, 2))
    counts = {call.op: n for call, n in recorder.counts.items()}
    assert counts == {"conv1d": 6}


@pytest.mark.parametrize("make", [
    lambda: nn.utils.parametrize.register_parametrization(_conv(), "weight", nn.Identity()),
    lambda: _conv(bias=False),
])
def test_only_a_layer_with_its_own_parameters_gets_a_torch_plan(monkeypatch, make, cuda_like):
    runs = _op_runs(monkeypatch)
    with torch.no_grad():
        conv, x = make(), _channels_last()
        _torch_plan(x, conv)
        for _ in range(2):
            assert conv_layer(x, conv).shape == (B, T, C)
    plain = "bias" in conv._parameters and "weight" in conv._parameters
    assert runs == (["conv1d"] if plain else ["conv1d", "conv1d"])


def test_compiling_goes_through_the_op(monkeypatch, cuda_like):
    runs = _op_runs(monkeypatch)
    with torch.no_grad():
        conv, x = _conv(), _channels_last()
        _torch_plan(x, conv)
        conv_layer(x, conv)
        conv_forward(conv, x.transpose(1, 2))
        assert len(runs) == 2
        monkeypatch.setattr(conv_layer_module, "_compiling", lambda: True)
        conv_layer(x, conv)
        conv_forward(conv, x.transpose(1, 2))
    assert runs == ["conv1d"] * 4
