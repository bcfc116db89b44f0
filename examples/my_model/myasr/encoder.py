"""A small speech encoder written without oasr in mind: what the README's "Your own model"
section censuses, tunes and benchmarks (``--model myasr.encoder:build``, run from
``examples/my_model``).

Each block is a feed-forward layer (LayerNorm, Linear, GELU, Linear, residual) and a
convolution module (LayerNorm, depthwise Conv1d called on a transposed channels-last tensor,
GELU, Linear, residual); an input projection from 80 features and an output projection to
the vocabulary frame them.
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, ffn: int, kernel: int) -> None:
        super().__init__()
        self.ff_norm, self.conv_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.conv = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.down(nn.functional.gelu(self.up(self.ff_norm(x))))
        h = self.conv(self.conv_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.proj(nn.functional.gelu(h))


class Encoder(nn.Module):
    def __init__(self, d: int, ffn: int, layers: int, kernel: int, vocab: int) -> None:
        super().__init__()
        self.inp = nn.Linear(80, d)
        self.blocks = nn.ModuleList(Block(d, ffn, kernel) for _ in range(layers))
        self.out = nn.Linear(d, vocab)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """``feats`` is ``[batch, frames, 80]`` log-mel features."""
        x = self.inp(feats)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def build(d: int = 256, ffn: int = 1024, layers: int = 4, kernel: int = 15,
          vocab: int = 512) -> Encoder:
    """The encoder; every argument is a ``--param`` on the command line."""
    return Encoder(d, ffn, layers, kernel, vocab)
