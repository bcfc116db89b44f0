"""Speech encoders written the way popular model libraries write them (no tests here).

The census must work on code nobody wrote for oasr. These modules follow the layout of a
widely used library's wav2vec2 and Whisper encoders, written here from their published
architecture (that library is not a dependency): configuration objects with attribute access
and keyword overrides, a raw-audio ``Conv1d`` feature encoder (padding 0, strides 5 and 2,
GroupNorm on the first layer, GELU), a feature projection, a grouped positional convolution
(kernel 128, 16 groups, weight-normalised, one frame trimmed), attention with an additive
mask built from an attention mask, post-norm (``do_stable_layer_norm=False``) and pre-norm
layers; and a mel front end of two ``Conv1d`` (padding 1, the second strided) with learned
positions. The factories take the configuration's fields as keyword arguments, so ``oasr tune
census --model library_style_models:wav2vec2_encoder --param num_hidden_layers=2`` builds one.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

ACT2FN = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}


class StyleConfig:
    """A configuration object in the libraries' style: class defaults, keyword overrides,
    unknown keywords kept as attributes."""

    def __init__(self, **kwargs: Any) -> None:
        for name, value in kwargs.items():
            setattr(self, name, tuple(value) if isinstance(value, list) else value)


class Wav2Vec2StyleConfig(StyleConfig):
    hidden_size = 768
    num_hidden_layers = 12
    num_attention_heads = 12
    intermediate_size = 3072
    hidden_act = "gelu"
    feat_extract_norm = "group"
    feat_extract_activation = "gelu"
    conv_dim = (512, 512, 512, 512, 512, 512, 512)
    conv_stride = (5, 2, 2, 2, 2, 2, 2)
    conv_kernel = (10, 3, 3, 3, 3, 2, 2)
    conv_bias = False
    num_conv_pos_embeddings = 128
    num_conv_pos_embedding_groups = 16
    do_stable_layer_norm = False
    layer_norm_eps = 1e-5


class WhisperStyleConfig(StyleConfig):
    num_mel_bins = 80
    d_model = 512
    encoder_layers = 6
    encoder_attention_heads = 8
    encoder_ffn_dim = 2048
    max_source_positions = 1500
    activation_function = "gelu"


class ConvLayer(nn.Module):
    """One feature-encoder layer: Conv1d (no padding), optional GroupNorm, activation."""

    def __init__(self, config: Wav2Vec2StyleConfig, layer_id: int) -> None:
        super().__init__()
        in_dim = config.conv_dim[layer_id - 1] if layer_id > 0 else 1
        out_dim = config.conv_dim[layer_id]
        self.conv = nn.Conv1d(in_dim, out_dim, kernel_size=config.conv_kernel[layer_id],
                              stride=config.conv_stride[layer_id], bias=config.conv_bias)
        grouped = layer_id == 0 and config.feat_extract_norm == "group"
        self.layer_norm = nn.GroupNorm(out_dim, out_dim, affine=True) if grouped else None
        self.activation = ACT2FN[config.feat_extract_activation]()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.conv(hidden_states)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return self.activation(hidden_states)


class FeatureEncoder(nn.Module):
    def __init__(self, config: Wav2Vec2StyleConfig) -> None:
        super().__init__()
        self.conv_layers = nn.ModuleList(ConvLayer(config, i)
                                         for i in range(len(config.conv_dim)))

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        hidden_states = input_values[:, None]
        for conv_layer in self.conv_layers:
            hidden_states = conv_layer(hidden_states)
        return hidden_states


class PositionalConvEmbedding(nn.Module):
    """Grouped convolution over time, weight-normalised, one frame trimmed (even kernel)."""

    def __init__(self, config: Wav2Vec2StyleConfig) -> None:
        super().__init__()
        conv = nn.Conv1d(config.hidden_size, config.hidden_size,
                         kernel_size=config.num_conv_pos_embeddings,
                         padding=config.num_conv_pos_embeddings // 2,
                         groups=config.num_conv_pos_embedding_groups)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        self.num_pad_remove = 1 if config.num_conv_pos_embeddings % 2 == 0 else 0
        self.activation = ACT2FN[config.hidden_act]()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.conv(hidden_states.transpose(1, 2))
        if self.num_pad_remove:
            hidden_states = hidden_states[:, :, :-self.num_pad_remove]
        return self.activation(hidden_states).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_states: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        bsz, tgt_len, _ = hidden_states.shape

        def shape(x: torch.Tensor) -> torch.Tensor:
            return x.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)

        query = shape(self.q_proj(hidden_states) * self.scaling)
        key, value = shape(self.k_proj(hidden_states)), shape(self.v_proj(hidden_states))
        weights = query @ key.transpose(-1, -2)
        if attention_mask is not None:
            weights = weights + attention_mask
        probs = torch.softmax(weights, dim=-1)
        out = (probs @ value).transpose(1, 2).reshape(bsz, tgt_len, -1)
        return self.out_proj(out)


class FeedForward(nn.Module):
    def __init__(self, config: Wav2Vec2StyleConfig) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]()
        self.output_dense = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.output_dense(self.intermediate_act_fn(self.intermediate_dense(hidden_states)))


class EncoderLayer(nn.Module):
    """Post-norm (``stable=False``: add, then norm) or pre-norm (``stable=True``)."""

    def __init__(self, config: Wav2Vec2StyleConfig, stable: bool) -> None:
        super().__init__()
        self.stable = stable
        self.attention = Attention(config.hidden_size, config.num_attention_heads)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.stable:
            hidden_states = hidden_states + self.attention(self.layer_norm(hidden_states),
                                                           attention_mask)
            return hidden_states + self.feed_forward(self.final_layer_norm(hidden_states))
        hidden_states = self.layer_norm(hidden_states + self.attention(hidden_states,
                                                                       attention_mask))
        return self.final_layer_norm(hidden_states + self.feed_forward(hidden_states))


class Wav2Vec2StyleEncoder(nn.Module):
    """Raw audio ``[B, samples]`` (and an optional ``[B, samples]`` attention mask) to
    hidden states ``[B, frames, hidden]``."""

    def __init__(self, config: Wav2Vec2StyleConfig) -> None:
        super().__init__()
        self.config = config
        self.feature_extractor = FeatureEncoder(config)
        self.feature_layer_norm = nn.LayerNorm(config.conv_dim[-1], eps=config.layer_norm_eps)
        self.feature_projection = nn.Linear(config.conv_dim[-1], config.hidden_size)
        self.pos_conv_embed = PositionalConvEmbedding(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(EncoderLayer(config, config.do_stable_layer_norm)
                                    for _ in range(config.num_hidden_layers))

    def feature_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        for kernel, stride in zip(self.config.conv_kernel, self.config.conv_stride,
                                  strict=True):
            lengths = torch.div(lengths - kernel, stride, rounding_mode="floor") + 1
        return lengths

    def forward(self, input_values: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        features = self.feature_extractor(input_values).transpose(1, 2)
        hidden_states = self.feature_projection(self.feature_layer_norm(features))
        additive = None
        if attention_mask is not None:
            frames = hidden_states.shape[1]
            lengths = self.feature_lengths(attention_mask.sum(-1))
            keep = torch.arange(frames, device=lengths.device)[None, :] < lengths[:, None]
            additive = (~keep)[:, None, None, :].to(hidden_states.dtype) * torch.finfo(
                hidden_states.dtype).min
            hidden_states = hidden_states * keep[..., None].to(hidden_states.dtype)
        hidden_states = hidden_states + self.pos_conv_embed(hidden_states)
        if not self.config.do_stable_layer_norm:
            hidden_states = self.layer_norm(hidden_states)
        for layer in self.layers:
            hidden_states = layer(hidden_states, additive)
        if self.config.do_stable_layer_norm:
            hidden_states = self.layer_norm(hidden_states)
        return hidden_states


class WhisperStyleLayer(nn.Module):
    def __init__(self, config: WhisperStyleConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config.d_model, config.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]()
        self.fc1 = nn.Linear(config.d_model, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states + self.self_attn(self.self_attn_layer_norm(hidden_states))
        residual = hidden_states
        hidden_states = self.fc2(self.activation_fn(self.fc1(self.final_layer_norm(
            hidden_states))))
        return residual + hidden_states


class WhisperStyleEncoder(nn.Module):
    """Log-mel ``[B, mels, frames]`` to ``[B, frames / 2, d_model]``."""

    def __init__(self, config: WhisperStyleConfig) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(config.num_mel_bins, config.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(config.d_model, config.d_model, kernel_size=3, stride=2,
                               padding=1)
        self.embed_positions = nn.Embedding(config.max_source_positions, config.d_model)
        self.layers = nn.ModuleList(WhisperStyleLayer(config)
                                    for _ in range(config.encoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.gelu = nn.GELU()

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        hidden_states = self.gelu(self.conv2(self.gelu(self.conv1(input_features))))
        hidden_states = hidden_states.permute(0, 2, 1)
        positions = self.embed_positions.weight[: hidden_states.shape[1]]
        hidden_states = hidden_states + positions
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.layer_norm(hidden_states)


def wav2vec2_encoder(**config: Any) -> Wav2Vec2StyleEncoder:
    """A wav2vec2-style encoder from configuration fields (``num_hidden_layers=2``)."""
    return Wav2Vec2StyleEncoder(Wav2Vec2StyleConfig(**config))


def whisper_encoder(**config: Any) -> WhisperStyleEncoder:
    """A Whisper-style encoder from configuration fields (``encoder_layers=2``)."""
    return WhisperStyleEncoder(WhisperStyleConfig(**config))


def feature_frames(samples: int, config: Wav2Vec2StyleConfig | None = None) -> int:
    """Frames the feature encoder makes of ``samples`` (no padding: ``(L - k) // s + 1``)."""
    config = config or Wav2Vec2StyleConfig()
    for kernel, stride in zip(config.conv_kernel, config.conv_stride, strict=True):
        samples = math.floor((samples - kernel) / stride) + 1
    return samples
