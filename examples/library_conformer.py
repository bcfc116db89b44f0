"""A Conformer encoder written the way torchaudio writes ``torchaudio.models.Conformer``,
for checking oasr on model code no one here wrote the oasr way: plain ``nn.Linear``,
``nn.Conv1d`` on channels-first data, ``nn.MultiheadAttention``, ``nn.BatchNorm1d``, no
oasr call anywhere.

``build(input_dim=80, d_model=512, heads=8, ffn_dim=2048, layers=12, kernel=31)`` returns
the encoder (random weights, eval mode): a linear input projection, then ``layers``
Conformer layers (half-step feed-forward, self-attention, convolution module, half-step
feed-forward, final LayerNorm), taking ``[B, T, input_dim]``. The sizes are a
Conformer-M-like encoder's, none of which the shipped tables were tuned for.

    python benchmarks/e2e.py --model examples.library_conformer:build --batch 8 \\
        --frames 1024 --compile        # with the repository root on PYTHONPATH
"""

from __future__ import annotations

import torch
from torch import nn


class _FeedForwardModule(nn.Module):
    def __init__(self, input_dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.sequential = nn.Sequential(
            nn.LayerNorm(input_dim), nn.Linear(input_dim, hidden_dim, bias=True), nn.SiLU(),
            nn.Dropout(dropout), nn.Linear(hidden_dim, input_dim, bias=True),
            nn.Dropout(dropout))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.sequential(input)


class _ConvolutionModule(nn.Module):
    def __init__(self, input_dim: int, num_channels: int, depthwise_kernel_size: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(input_dim)
        self.sequential = nn.Sequential(
            nn.Conv1d(input_dim, 2 * num_channels, 1, stride=1, padding=0, bias=True),
            nn.GLU(dim=1),
            nn.Conv1d(num_channels, num_channels, depthwise_kernel_size, stride=1,
                      padding=(depthwise_kernel_size - 1) // 2, groups=num_channels,
                      bias=True),
            nn.BatchNorm1d(num_channels), nn.SiLU(),
            nn.Conv1d(num_channels, input_dim, kernel_size=1, stride=1, padding=0, bias=True),
            nn.Dropout(dropout))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = self.layer_norm(input)
        x = x.transpose(1, 2)
        x = self.sequential(x)
        return x.transpose(1, 2)


class ConformerLayer(nn.Module):
    def __init__(self, input_dim: int, ffn_dim: int, num_attention_heads: int,
                 depthwise_conv_kernel_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ffn1 = _FeedForwardModule(input_dim, ffn_dim, dropout=dropout)
        self.self_attn_layer_norm = nn.LayerNorm(input_dim)
        self.self_attn = nn.MultiheadAttention(input_dim, num_attention_heads, dropout=dropout,
                                               batch_first=True)
        self.self_attn_dropout = nn.Dropout(dropout)
        self.conv_module = _ConvolutionModule(input_dim, input_dim,
                                              depthwise_conv_kernel_size, dropout=dropout)
        self.ffn2 = _FeedForwardModule(input_dim, ffn_dim, dropout=dropout)
        self.final_layer_norm = nn.LayerNorm(input_dim)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        residual = input
        x = self.ffn1(input)
        x = x * 0.5 + residual
        residual = x
        x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, need_weights=False)
        x = self.self_attn_dropout(x)
        x = x + residual
        residual = x
        x = self.conv_module(x)
        x = residual + x
        residual = x
        x = self.ffn2(x)
        x = x * 0.5 + residual
        return self.final_layer_norm(x)


class Conformer(nn.Module):
    def __init__(self, input_dim: int, d_model: int, num_heads: int, ffn_dim: int,
                 num_layers: int, depthwise_conv_kernel_size: int) -> None:
        super().__init__()
        self.input_linear = nn.Linear(input_dim, d_model)
        self.conformer_layers = nn.ModuleList(
            ConformerLayer(d_model, ffn_dim, num_heads, depthwise_conv_kernel_size)
            for _ in range(num_layers))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = self.input_linear(input)
        for layer in self.conformer_layers:
            x = layer(x)
        return x


def build(input_dim: int = 80, d_model: int = 512, heads: int = 8, ffn_dim: int = 2048,
          layers: int = 12, kernel: int = 31) -> Conformer:
    """The encoder in eval mode, random weights (see the module docstring)."""
    return Conformer(input_dim, d_model, heads, ffn_dim, layers, kernel).eval()
