"""The reference models' non-linear layers served through ``oasr_layer``, channels-last.

A plugin serving ``"Conv1d"`` receives ``[B, T, C]`` activations, the module (the Conformer's
depthwise convolution with its BatchNorm folded in) and the activation that follows; the
models' outputs must equal their torch path's, which runs the modules on ``[B, C, T]``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from oasr_core import hookimpl
from oasr_core.census import models
from oasr_core.census.workloads import builtin_workloads, served_layers
from oasr_core.errors import PluginError


class ChannelsLastConv:
    """A served conv: the module on channels-last data, counting calls and activations."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], int, str | None]] = []

    def __call__(self, x: torch.Tensor, layer: nn.Conv1d, activation: str | None = None):
        assert x.is_contiguous()
        self.calls.append((tuple(x.shape), layer.groups, activation))
        y = F.conv1d(x.transpose(1, 2), layer.weight, layer.bias, layer.stride, layer.padding,
                     layer.dilation, layer.groups)
        return models.activate(y, activation).transpose(1, 2).contiguous()


class ConvPlugin:
    def __init__(self, served: ChannelsLastConv, schemes: tuple[str, ...] = ("none",)):
        self.served, self.schemes = served, schemes

    @hookimpl
    def oasr_layer(self, kind, dtype, quantization):
        if kind != "Conv1d" or quantization not in self.schemes:
            return None
        return self.served


def _randomise_norms(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


def test_conformer_conv_module_is_served_channels_last_with_its_norm_folded():
    torch.manual_seed(0)
    served = ChannelsLastConv()
    kw = {"d_model": 32, "heads": 2, "ffn_dim": 64, "kernel_size": 7, "layers": 2}
    oasr = models.ConformerEncoder(served={"Conv1d": served}, **kw).eval()
    _randomise_norms(oasr)
    plain = models.ConformerEncoder(**kw).eval()
    plain.load_state_dict(oasr.state_dict(), strict=True)
    x = torch.randn(2, 4 * 10 + 3, 80)
    with torch.no_grad():
        got, want = oasr(x), plain(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert served.calls == [((2, 10, 32), 32, "silu")] * 2
    # the fold is kept, and made again when a statistic changes
    bn = oasr.layers[0].conv.bn
    first = models.folded_conv(oasr.layers[0].conv.depthwise, bn)
    assert models.folded_conv(oasr.layers[0].conv.depthwise, bn) is first
    with torch.no_grad():
        bn.running_var.mul_(2.0)
    second = models.folded_conv(oasr.layers[0].conv.depthwise, bn)
    assert second is not first
    # ... and when the model moves to another dtype (its tensors' storage is new)
    oasr.double()
    third = models.folded_conv(oasr.layers[0].conv.depthwise, bn)
    assert third is not second and third.weight.dtype == torch.float64
    assert "_oasr_folded" not in "".join(oasr.state_dict())


def test_a_training_model_keeps_torch_for_its_norms():
    served = ChannelsLastConv()
    model = models.ConformerEncoder(served={"Conv1d": served}, d_model=16, heads=2, ffn_dim=32,
                                    kernel_size=3, layers=1).train()
    model(torch.randn(1, 4 * 6 + 3, 80))
    assert served.calls == []


def test_whisper_front_end_is_served_channels_last_with_gelu():
    torch.manual_seed(1)
    served = ChannelsLastConv()
    kw = {"n_mels": 8, "d_model": 16, "heads": 2, "layers": 1, "ffn_dim": 32, "window": 40}
    oasr = models.WhisperEncoder(served={"Conv1d": served}, **kw).eval()
    plain = models.WhisperEncoder(**kw).eval()
    plain.load_state_dict(oasr.state_dict(), strict=True)
    mel = torch.randn(3, 8, 40)
    with torch.no_grad():
        torch.testing.assert_close(oasr(mel), plain(mel), rtol=1e-4, atol=1e-4)
    assert served.calls == [((3, 40, 8), 1, "gelu"), ((3, 40, 16), 1, "gelu")]


def test_served_layers_asks_unquantized_when_the_scheme_has_no_answer(plugin_manager,
                                                                      register_plugin):
    served = ChannelsLastConv()
    register_plugin(ConvPlugin(served))
    assert served_layers(plugin_manager, dtype="fp16", quantization="int8_w8a8") == {
        "Conv1d": served}
    assert served_layers(plugin_manager, dtype="fp16") == {"Conv1d": served}


def test_reference_factory_passes_served_layers_unless_family_ops_is_false(plugin_manager,
                                                                           register_plugin):
    served = ChannelsLastConv()
    register_plugin(ConvPlugin(served))
    conformer = next(w for w in builtin_workloads(plugin_manager) if w.name == "conformer")
    kw = {"d_model": 16, "heads": 2, "ffn_dim": 32, "kernel_size": 3, "layers": 1}
    assert "Conv1d" in conformer.factory(**kw).layers[0].conv.ops.layers
    assert not conformer.factory(family_ops=False, **kw).layers[0].conv.ops.layers


def test_a_layer_hook_answering_a_class_is_one_line(plugin_manager, register_plugin):
    class Wrong:
        @hookimpl
        def oasr_layer(self, kind, dtype, quantization):
            return ChannelsLastConv

    register_plugin(Wrong())
    with pytest.raises(PluginError, match="oasr_layer answered a type"):
        served_layers(plugin_manager, dtype="fp16")
