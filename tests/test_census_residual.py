"""The reference models' residual adds: each is handed to the block's last linear
(``GemmOps.linear_residual``), which fuses it when the plugin's linear takes a residual and
otherwise computes exactly what the published models do (``x + 0.5 * ff(x)``, ``x + y``)."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from oasr_core.census import models


class PlainLinear:
    """A plugin's linear that takes no residual (a quantized family's, say): torch's, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x, layer, activation=None):
        self.calls += 1
        return models.activate(F.linear(x, layer.weight, layer.bias), activation)


class FusingLinear(PlainLinear):
    """A plugin's linear that takes the residual: records each fused call's alpha."""

    def __init__(self) -> None:
        super().__init__()
        self.alphas: list[float] = []

    def __call__(self, x, layer, activation=None, *, residual=None, alpha=1.0):
        if residual is None:
            return super().__call__(x, layer, activation)
        self.alphas.append(alpha)
        return residual.add(F.linear(x, layer.weight, layer.bias), alpha=alpha)


def _conformer(linear=None):
    torch.manual_seed(0)
    return models.ConformerEncoder(d_model=32, heads=2, ffn_dim=64, kernel_size=5, layers=2,
                                   linear=linear).eval()


def _whisper(linear=None):
    torch.manual_seed(0)
    return models.WhisperEncoder(d_model=32, heads=2, ffn_dim=64, layers=2, window=24,
                                 linear=linear).eval()


def test_the_conformer_layer_computes_the_published_formula_in_torch():
    layer = _conformer().layers[0]
    x, pos = torch.randn(2, 7, 32), models.sinusoids(torch.arange(6, -7, -1), 32).unsqueeze(0)
    with torch.no_grad():
        h = x + 0.5 * layer.ff1(x)
        h = h + layer.attn(h, pos)
        h = h + layer.conv(h)
        published = layer.norm(h + 0.5 * layer.ff2(h))
        assert torch.equal(layer(x, pos), published)


def test_the_whisper_block_computes_the_published_formula_in_torch():
    block = _whisper().blocks[0]
    x = torch.randn(2, 12, 32)
    with torch.no_grad():
        b, t, d = x.shape
        h = block.attn_ln(x)
        q, k, v = (F.linear(h, lin.weight, lin.bias).view(b, t, 2, -1).transpose(1, 2)
                   for lin in (block.q, block.k, block.v))
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        h = x + F.linear(attn, block.out.weight, block.out.bias)
        mlp = F.gelu(F.linear(block.mlp_ln(h), block.fc1.weight, block.fc1.bias))
        published = h + F.linear(mlp, block.fc2.weight, block.fc2.bias)
        assert torch.equal(block(x), published)


def test_a_linear_without_a_residual_keeps_the_models_own_add():
    plain = PlainLinear()
    assert not models.takes_residual(plain)
    served, torch_model = _conformer(plain), _conformer()
    features = torch.randn(2, 4 * 7 + 3, 80)
    with torch.no_grad():
        assert torch.equal(served(features), torch_model(features))
    assert plain.calls == 2 * 11, "every linear of both layers, the residual ones included"


def test_a_linear_taking_the_residual_gets_each_add_with_its_alpha():
    fusing = FusingLinear()
    assert models.takes_residual(fusing)
    served, torch_model = _conformer(fusing), _conformer()
    features = torch.randn(2, 4 * 7 + 3, 80)
    with torch.no_grad():
        assert torch.equal(served(features), torch_model(features))
    assert fusing.alphas == [0.5, 1.0, 1.0, 0.5] * 2
    whisper, plain_whisper = _whisper(FusingLinear()), _whisper()
    mel = torch.randn(2, 80, 24)
    with torch.no_grad():
        assert torch.equal(whisper(mel), plain_whisper(mel))
    assert whisper.ops.served.alphas == [1.0, 1.0] * 2


def test_takes_residual_reads_the_signature():
    def with_both(x, layer, activation=None, *, residual=None, alpha=1.0):
        return x

    def residual_only(x, layer, activation=None, residual=None):
        return x

    assert models.takes_residual(with_both)
    assert not models.takes_residual(residual_only)
    assert not models.takes_residual(lambda x, layer, activation=None: x)
    assert not models.takes_residual(max), "a builtin without a signature: no"
