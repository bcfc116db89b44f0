"""Held-out encoders for ``benchmarks/e2e.py --model``: code written the way speech libraries
write it, at widths the shipped tuning tables do not cover.

None of these is a registered workload and none of their GEMM widths (N, K) has an entry in
``db/sm90/gemm.json`` (which covers the reference Conformer's d 256), so they show what a user
gets out of the box from a model oasr never saw: ``oasr tune bench`` / ``benchmarks/e2e.py``
routes every ``nn.Linear`` (and ``nn.Conv1d``) to oasr's ops (:func:`oasr_core.route`);
norms and attention stay the model's own. These modules only build models: the timing is
``benchmarks/e2e.py``'s, whole forwards (CUDA-graph replays and eager calls, each arm against
torch in the same run), not kernels back to back, so no separator kernel applies. Each is
built from a config object with random weights, in the style of the library it imitates
(module names, pre-/post-norm, biases):

- :func:`wav2vec2_like`: a wav2vec2-base encoder (d 768, 12 heads, feed-forward 3072,
  post-norm, GELU) after its convolutional feature extractor: input ``[B, T, 512]`` (the
  extractor's 512 channels at 50 frames a second), a feature projection 512 -> 768, the
  grouped positional convolution (kernel 128, 16 groups, padding 64, the extra frame
  dropped) and ``layers`` encoder layers;
- :func:`whisper_like`: a Whisper-tiny-sized encoder (d 384, 6 heads, feed-forward 1536,
  pre-norm, GELU, ``k_proj`` without bias) on log-mel input ``[B, 80, T]``: two
  convolutions (the second stride 2), sinusoidal positions, ``layers`` layers;
- :func:`zipformer_like`: a two-stack encoder in the style of Zipformer (d 192 then 384 at
  half the frame rate, SiLU feed-forwards 512 and 1024, pre-norm, a bypass scale per layer)
  on features ``[B, T, 80]``.

Run, for example::

    python benchmarks/e2e.py --model heldout_encoders:wav2vec2_like --input B,T,512 \\
        --batch 8 --frames 500
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Multi-head scaled dot-product attention over ``[B, T, D]`` projections."""
    b, t, d = q.shape
    split = [x.view(b, t, heads, d // heads).transpose(1, 2) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*split)
    return out.transpose(1, 2).reshape(b, t, d)


# -- wav2vec2-like ----------------------------------------------------------------------------

@dataclass
class Wav2Vec2LikeConfig:
    """The fields of a wav2vec2-base config that shape the encoder."""

    conv_dim_last: int = 512
    hidden_size: int = 768
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_conv_pos_embeddings: int = 128
    num_conv_pos_embedding_groups: int = 16
    layer_norm_eps: float = 1e-5


class Wav2Vec2LikeAttention(nn.Module):
    def __init__(self, config: Wav2Vec2LikeConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.v_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = _attention(self.q_proj(hidden_states), self.k_proj(hidden_states),
                         self.v_proj(hidden_states), self.num_heads)
        return self.out_proj(out)


class Wav2Vec2LikeFeedForward(nn.Module):
    def __init__(self, config: Wav2Vec2LikeConfig) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = nn.GELU()
        self.output_dense = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.output_dense(self.intermediate_act_fn(self.intermediate_dense(hidden_states)))


class Wav2Vec2LikeEncoderLayer(nn.Module):
    """Post-norm, as wav2vec2-base's (``do_stable_layer_norm`` false)."""

    def __init__(self, config: Wav2Vec2LikeConfig) -> None:
        super().__init__()
        self.attention = Wav2Vec2LikeAttention(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = Wav2Vec2LikeFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.layer_norm(hidden_states + self.attention(hidden_states))
        return self.final_layer_norm(hidden_states + self.feed_forward(hidden_states))


class Wav2Vec2LikePositionalConvEmbedding(nn.Module):
    def __init__(self, config: Wav2Vec2LikeConfig) -> None:
        super().__init__()
        k = config.num_conv_pos_embeddings
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, kernel_size=k,
                              padding=k // 2, groups=config.num_conv_pos_embedding_groups)
        self.num_pad_remove = 1 if k % 2 == 0 else 0
        self.activation = nn.GELU()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        h = self.conv(hidden_states.transpose(1, 2))
        if self.num_pad_remove:
            h = h[:, :, :-self.num_pad_remove]
        return self.activation(h).transpose(1, 2)


class Wav2Vec2LikeEncoder(nn.Module):
    """Feature projection, positional convolution, post-norm layers: ``[B, T, 512]`` in,
    ``[B, T, 768]`` out."""

    def __init__(self, config: Wav2Vec2LikeConfig) -> None:
        super().__init__()
        self.config = config
        self.feature_layer_norm = nn.LayerNorm(config.conv_dim_last, eps=config.layer_norm_eps)
        self.projection = nn.Linear(config.conv_dim_last, config.hidden_size)
        self.pos_conv_embed = Wav2Vec2LikePositionalConvEmbedding(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(Wav2Vec2LikeEncoderLayer(config)
                                    for _ in range(config.num_hidden_layers))

    def forward(self, extract_features: torch.Tensor) -> torch.Tensor:
        hidden_states = self.projection(self.feature_layer_norm(extract_features))
        hidden_states = self.layer_norm(hidden_states + self.pos_conv_embed(hidden_states))
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


def wav2vec2_like(layers: int = 12) -> nn.Module:
    """A wav2vec2-base-sized encoder with ``layers`` layers (random weights)."""
    return Wav2Vec2LikeEncoder(Wav2Vec2LikeConfig(num_hidden_layers=layers))


# -- Whisper-like -----------------------------------------------------------------------------

@dataclass
class WhisperLikeConfig:
    """The fields of a Whisper config that shape its encoder (tiny's sizes)."""

    num_mel_bins: int = 80
    d_model: int = 384
    encoder_attention_heads: int = 6
    encoder_ffn_dim: int = 1536
    encoder_layers: int = 4
    max_source_positions: int = 1500


class WhisperLikeAttention(nn.Module):
    def __init__(self, config: WhisperLikeConfig) -> None:
        super().__init__()
        d = config.d_model
        self.num_heads = config.encoder_attention_heads
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj, self.q_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d), \
            nn.Linear(d, d)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = _attention(self.q_proj(hidden_states), self.k_proj(hidden_states),
                         self.v_proj(hidden_states), self.num_heads)
        return self.out_proj(out)


class WhisperLikeEncoderLayer(nn.Module):
    """Pre-norm, GELU feed-forward."""

    def __init__(self, config: WhisperLikeConfig) -> None:
        super().__init__()
        d = config.d_model
        self.self_attn = WhisperLikeAttention(config)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, config.encoder_ffn_dim), \
            nn.Linear(config.encoder_ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states + self.self_attn(self.self_attn_layer_norm(hidden_states))
        h = self.fc2(F.gelu(self.fc1(self.final_layer_norm(hidden_states))))
        return hidden_states + h


class WhisperLikeEncoder(nn.Module):
    """Log-mel ``[B, 80, T]`` in, ``[B, T / 2, d]`` out."""

    def __init__(self, config: WhisperLikeConfig) -> None:
        super().__init__()
        d = config.d_model
        self.conv1 = nn.Conv1d(config.num_mel_bins, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        positions = torch.arange(config.max_source_positions, dtype=torch.float32)[:, None]
        scale = torch.exp(-math.log(10000) * torch.arange(d // 2, dtype=torch.float32)
                          / (d // 2 - 1))
        self.register_buffer("embed_positions", torch.cat(
            [torch.sin(positions * scale), torch.cos(positions * scale)], dim=1))
        self.layers = nn.ModuleList(WhisperLikeEncoderLayer(config)
                                    for _ in range(config.encoder_layers))
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.conv2(F.gelu(self.conv1(input_features)))).permute(0, 2, 1)
        hidden_states = h + self.embed_positions[:h.shape[1]]
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.layer_norm(hidden_states)


def whisper_like(layers: int = 4) -> nn.Module:
    """A Whisper-tiny-sized encoder with ``layers`` layers (random weights)."""
    return WhisperLikeEncoder(WhisperLikeConfig(encoder_layers=layers))


# -- Zipformer-like ---------------------------------------------------------------------------

@dataclass
class ZipformerLikeConfig:
    """Two stacks: widths, feed-forward widths, heads and layers of each."""

    feature_dim: int = 80
    encoder_dims: tuple[int, int] = (192, 384)
    feedforward_dims: tuple[int, int] = (512, 1024)
    num_heads: tuple[int, int] = (4, 8)
    num_layers: tuple[int, int] = (2, 2)


class ZipformerLikeLayer(nn.Module):
    """Pre-norm self-attention and SiLU feed-forward, the layer's output blended with its
    input by a learned bypass scale."""

    def __init__(self, d: int, ff: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm_attn, self.norm_ff = nn.LayerNorm(d), nn.LayerNorm(d)
        self.in_proj = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)
        self.feed_forward = nn.Sequential(nn.Linear(d, ff), nn.SiLU(), nn.Linear(ff, d))
        self.bypass_scale = nn.Parameter(torch.full((d,), 0.5))

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        q, k, v = self.in_proj(self.norm_attn(src)).chunk(3, dim=-1)
        x = src + self.out_proj(_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                           self.heads))
        x = x + self.feed_forward(self.norm_ff(x))
        return src + self.bypass_scale * (x - src)


class ZipformerLikeEncoder(nn.Module):
    """``[B, T, 80]`` in; stack 1 at T, stack 2 at T / 2 (pairs of frames averaged, then
    projected up); ``[B, T / 2, 384]`` out."""

    def __init__(self, config: ZipformerLikeConfig) -> None:
        super().__init__()
        (d1, d2), (f1, f2) = config.encoder_dims, config.feedforward_dims
        (h1, h2), (n1, n2) = config.num_heads, config.num_layers
        self.encoder_embed = nn.Linear(config.feature_dim, d1)
        self.stack1 = nn.ModuleList(ZipformerLikeLayer(d1, f1, h1) for _ in range(n1))
        self.downsample = nn.Linear(d1, d2)
        self.stack2 = nn.ModuleList(ZipformerLikeLayer(d2, f2, h2) for _ in range(n2))
        self.norm = nn.LayerNorm(d2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder_embed(x)
        for layer in self.stack1:
            x = layer(x)
        b, t, d = x.shape
        x = self.downsample(x[:, :t - t % 2].reshape(b, t // 2, 2, d).mean(dim=2))
        for layer in self.stack2:
            x = layer(x)
        return self.norm(x)


def zipformer_like(layers: int = 2) -> nn.Module:
    """A two-stack Zipformer-style encoder, ``layers`` layers per stack (random weights)."""
    return ZipformerLikeEncoder(ZipformerLikeConfig(num_layers=(layers, layers)))
