"""The census's reference models, in pure torch: a Conformer and a Whisper-style encoder, and
an RNN-T prediction network (:class:`RnntPredictor`) as a transducer decoder steps it.

Shapes, not numbers, are what the census needs, so weights are random (or absent: the census
builds these on the meta device). Every linear layer of :class:`GemmOps` (projections,
feed-forward and pointwise layers) runs through ``linear``, the callable a plugin's
``oasr_linear`` hook answered for the census's dtype and quantization (a family's GEMM ops,
or a quantized GEMM), and through plain torch when no plugin answered, as an engine built
on oasr would. A linear whose output is added to the residual stream (the Conformer's
``x + 0.5 * ff(x)``, ``x + attn(x)``, ``x + conv(x)``; Whisper's ``x + out(attn)``,
``x + fc2(..)``) hands the residual to ``linear`` when it takes one (``residual=``,
``alpha=``: one fused call, e.g. ``oasr_gemm.gemm_residual``); otherwise, and in torch, the
add stays the model's own, computed exactly as the published models do. Other layers a
plugin serves (``oasr_layer``: ``layers`` maps the torch module class name, ``"Conv1d"``, to
the plugin's callable) run channels-last through it: the Conformer's depthwise convolution
with its BatchNorm folded in and its SiLU fused, the Whisper front end's convolutions with
their GELU. Without an answer they are torch's modules
on ``[B, C, T]`` data, transposed around, as the published models run them. A pre-norm
block's ``LayerNorm``, whose output only linears take, goes through ``layers["LayerNorm"]``
where a plugin serves it (a W8A8 family defers it: the linears after it share one fused
norm-and-quantize pass) and is torch's otherwise. The attention
products stay torch; the Conformer's conv2d subsampling is torch's unless built with
``conv2d_frontend`` (then a served ``"Conv2d"`` layer runs it NHWC). Either encoder takes a
CTC head (``ctc_vocab``: hidden -> vocabulary, log-softmax) as an option.

The subsampling projection calls a ``linear`` this module imported from torch before any
recorder exists, on purpose: the original census missed a whole layer called that way,
and the recorder must see it.

The op *mix* is faithful to the published models, including what is not a GEMM here: the
Conformer's pointwise convolutions are linears over ``[B, T, C]`` (what an optimised engine
calls), its depthwise convolution a grouped ``conv1d``, its attention relative-positional with
a ``linear_pos`` projection at ``M = 2T - 1``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.functional import linear

from oasr_core.layers import Layer, Linear, activate, dense, takes_log_softmax, takes_residual


class GemmOps:
    """The served layers of a model: linears through ``linear`` (a plugin's, looked up once
    when the model is built), or torch's ``F.linear`` when it is None; other layer kinds
    through ``layers`` (``oasr_layer`` answers by torch module class name), or torch.

    The plugin's function reaches its ops through their module at call time, so the census
    recorder, which rebinds module attributes, sees each call under the family that owns it.
    """

    def __init__(self, linear: Linear | None = None,
                 layers: Mapping[str, Layer] | None = None) -> None:
        self.served = linear
        self.fuses_residual = linear is not None and takes_residual(linear)
        self.fuses_log_softmax = linear is not None and takes_log_softmax(linear)
        self.layers = MappingProxyType(dict(layers or {}))

    def conv1d(self, x: torch.Tensor, layer: nn.Conv1d, activation: str | None = None,
               norm: nn.BatchNorm1d | None = None) -> torch.Tensor:
        """``activation(norm(layer(x)))`` on channels-last ``x [B, T, C]``, channels-last out.

        Served: one call of the plugin's conv with ``norm`` folded into the convolution (eval
        mode only; a training model keeps torch, whose BatchNorm updates its statistics).
        Torch: ``layer`` and ``norm`` on the transposed data, then the activation.
        """
        served = self.layers.get("Conv1d")
        if served is not None and not (layer.training or (norm is not None and norm.training)):
            return served(x, layer if norm is None else folded_conv(layer, norm), activation)
        h = layer(x.transpose(1, 2))
        if norm is not None:
            h = norm(h)
        return activate(h, activation).transpose(1, 2)

    def norm(self, x: torch.Tensor, layer: nn.LayerNorm) -> Any:
        """``layer(x)`` for the linears after it (and nothing else): the plugin's answer for
        ``LayerNorm`` where one serves it (a W8A8 family defers the norm, so that its linears
        share one fused norm-and-quantize pass: :class:`oasr_core.layers.NormedRows`),
        else torch's. A training norm stays torch's."""
        served = self.layers.get("LayerNorm")
        if served is not None and not layer.training:
            return served(x, layer)
        return layer(x)

    def linear(self, x: Any, layer: nn.Linear) -> torch.Tensor:
        """``layer(x)``."""
        if self.served is not None:
            return self.served(x, layer)
        x = dense(x)
        return linear(x, layer.weight, layer.bias)

    def linear_act(self, x: Any, layer: nn.Linear, activation: str) -> torch.Tensor:
        """``activation(layer(x))``: one call to the plugin's linear (which may fuse it), or
        torch's linear then its activation."""
        if self.served is not None:
            return self.served(x, layer, activation)
        x = dense(x)
        return activate(linear(x, layer.weight, layer.bias), activation)

    def linear_residual(self, x: torch.Tensor, layer: nn.Linear, residual: torch.Tensor,
                        alpha: float = 1.0) -> torch.Tensor:
        """``residual + alpha * layer(x)``: one call to the plugin's linear when it takes a
        residual (the add fused into the GEMM), else the layer then the model's own add,
        ``residual + y`` (``alpha`` 1) or ``residual + alpha * y``, as the published models
        compute it."""
        if self.fuses_residual:
            return self.served(x, layer, residual=residual, alpha=alpha)
        y = self.linear(x, layer)
        return residual + y if alpha == 1.0 else residual + alpha * y

    def linear_log_softmax(self, x: Any, layer: nn.Linear) -> torch.Tensor:
        """``log_softmax(layer(x), dim=-1)`` in ``x``'s dtype: one call to the plugin's linear
        when it takes ``log_softmax`` (a CTC head op, e.g. ``oasr_gemm.gemm_log_softmax``),
        else the layer then torch's log-softmax."""
        if self.fuses_log_softmax:
            return self.served(x, layer, log_softmax=True)
        return F.log_softmax(self.linear(x, layer), dim=-1)


_FOLDED = "_oasr_folded"


def folded_conv(conv: nn.Conv1d, norm: nn.BatchNorm1d) -> Any:
    """``conv`` with the eval-mode ``norm`` after it folded into its weight and bias.

    Eagerly, folded once and kept on ``norm`` (outside the state dict), made again when a
    parameter or running statistic changes (their versions are the key). Computed in fp32,
    stored in the convolution's dtype and device.

    While ``torch.compile`` traces, the fold is written into the graph instead (a few
    pointwise ops on the weight, :class:`FoldedConv`): a cache keyed by tensor ids and
    versions would make Dynamo guard on them and recompile for every layer until it hits
    its recompile limit.
    """
    if torch.compiler.is_compiling():
        return FoldedConv(conv, *_fold(conv, norm))
    cp, np_, nb = conv._parameters, norm._parameters, norm._buffers
    tensors = (cp["weight"] if "weight" in cp else conv.weight, cp.get("bias"),
               np_.get("weight"), np_.get("bias"), nb.get("running_mean"),
               nb.get("running_var"))
    # A tensor's id, version and address: a new or updated tensor, or one moved to another
    # dtype or device (a new storage), refolds. Read from the modules' own dicts: the key is
    # made on every eager call, and Module.__getattr__ costs ~0.3 us a lookup.
    key = tuple([None if t is None else (id(t), t._version, t.data_ptr()) for t in tensors])
    cached = norm.__dict__.get(_FOLDED)
    if cached is not None and cached[0] == key:
        return cached[1]
    with torch.no_grad():
        weight, bias = _fold(conv, norm)
        fused = nn.Conv1d(conv.in_channels, conv.out_channels, conv.kernel_size,
                          stride=conv.stride, padding=conv.padding, dilation=conv.dilation,
                          groups=conv.groups, bias=True, device=conv.weight.device,
                          dtype=conv.weight.dtype).eval()
        fused.weight.copy_(weight)
        fused.bias.copy_(bias)
        fused.requires_grad_(False)
    object.__setattr__(norm, _FOLDED, (key, fused))
    return fused


def _fold(conv: nn.Conv1d, norm: nn.BatchNorm1d) -> tuple[torch.Tensor, torch.Tensor]:
    """The folded weight and bias, computed in fp32, in the convolution's dtype."""
    scale = norm.weight.float() / torch.sqrt(norm.running_var.float() + norm.eps)
    bias = conv.bias.float() if conv.bias is not None else torch.zeros_like(scale)
    dtype = conv.weight.dtype
    weight = (conv.weight.float() * scale.view(-1, 1, 1)).to(dtype)
    return weight, ((bias - norm.running_mean.float()) * scale + norm.bias.float()).to(dtype)


class FoldedConv:
    """What a served conv reads of a Conv1d (its geometry) with a folded weight and bias:
    the traced form of :func:`folded_conv`."""

    def __init__(self, conv: nn.Conv1d, weight: torch.Tensor, bias: torch.Tensor) -> None:
        self.weight, self.bias = weight, bias
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation
        self.groups, self.padding_mode = conv.groups, conv.padding_mode
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.kernel_size = conv.kernel_size


def sinusoids(positions: torch.Tensor, channels: int) -> torch.Tensor:
    """Sinusoidal embeddings ``[len(positions), channels]`` (sin on even, cos on odd)."""
    scale = torch.exp(torch.arange(0, channels, 2, dtype=torch.float32, device=positions.device)
                      * (-math.log(10000.0) / channels))
    angles = positions.float()[:, None] * scale[None, :]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)


def subsampled_frames(frames: int) -> int:
    """Output frames of the Conformer's two stride-2, kernel-3 convolutions (no padding)."""
    return ((frames - 1) // 2 - 1) // 2


class ConvSubsampling(nn.Module):
    """Two 3x3 stride-2 conv2d layers with ReLU, then a projection to ``d_model`` (4x in time).

    With ``ops`` holding a served ``Conv2d`` layer (:class:`GemmOps`; the Conformer's
    ``conv2d_frontend``), both convs run through it on NHWC data, their ReLU fused: the
    ``[B, T, F]`` features are already NHWC with one channel, and the projection reads
    ``[B, T', C * F']`` through one transpose copy, the same one torch's NCHW result needs.
    A training model keeps torch's.
    """

    def __init__(self, input_dim: int, d_model: int, ops: GemmOps | None = None) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, d_model, 3, 2), nn.ReLU(),
                                  nn.Conv2d(d_model, d_model, 3, 2), nn.ReLU())
        self.out = nn.Linear(d_model * subsampled_frames(input_dim), d_model)
        self.scale = math.sqrt(d_model)
        self.served = ops.layers.get("Conv2d") if ops is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.served is not None and not self.training:
            h = self.served(self.served(x.unsqueeze(-1), self.conv[0], "relu"), self.conv[2],
                            "relu")
            b, t, f, c = h.shape
            h = h.transpose(2, 3)
        else:
            h = self.conv(x.unsqueeze(1))
            b, c, t, f = h.shape
            h = h.transpose(1, 2)
        return linear(h.reshape(b, t, c * f), self.out.weight, self.out.bias) * self.scale


class FeedForward(nn.Module):
    """Pre-norm Swish feed-forward module (the Conformer's half-step macaron FFN)."""

    def __init__(self, d_model: int, ffn_dim: int, ops: GemmOps) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.w1 = nn.Linear(d_model, ffn_dim)
        self.w2 = nn.Linear(ffn_dim, d_model)
        self.ops = ops

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                alpha: float = 1.0) -> torch.Tensor:
        """``ff(x)``, or ``residual + alpha * ff(x)`` with ``residual``."""
        h = self.ops.linear_act(self.ops.norm(x, self.norm), self.w1, "silu")
        if residual is None:
            return self.ops.linear(h, self.w2)
        return self.ops.linear_residual(h, self.w2, residual, alpha)


def rel_shift(scores: torch.Tensor) -> torch.Tensor:
    """Align ``[B, H, T, 2T-1]`` relative-position scores to ``[B, H, T, T]`` (Transformer-XL)."""
    b, h, t, n = scores.shape
    padded = F.pad(scores, (1, 0))
    return padded.view(b, h, n + 1, t)[:, :, 1:].reshape(b, h, t, n)[..., : n // 2 + 1]


class RelPositionAttention(nn.Module):
    """Pre-norm multi-head self-attention with relative positional encoding (Conformer)."""

    def __init__(self, d_model: int, heads: int, ops: GemmOps) -> None:
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.norm = nn.LayerNorm(d_model)
        self.q, self.k, self.v, self.out = (nn.Linear(d_model, d_model) for _ in range(4))
        self.linear_pos = nn.Linear(d_model, d_model, bias=False)
        self.bias_u = nn.Parameter(torch.zeros(heads, self.d_head))
        self.bias_v = nn.Parameter(torch.zeros(heads, self.d_head))
        self.ops = ops

    def forward(self, x: torch.Tensor, pos: torch.Tensor,
                residual: torch.Tensor | None = None) -> torch.Tensor:
        """``attn(x)``, or ``residual + attn(x)`` with ``residual``."""
        b, t, _ = x.shape
        h = self.ops.norm(x, self.norm)

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(y.shape[0], -1, self.heads, self.d_head)

        q = heads(self.ops.linear(h, self.q))
        k = heads(self.ops.linear(h, self.k)).transpose(1, 2)
        v = heads(self.ops.linear(h, self.v)).transpose(1, 2)
        p = heads(self.ops.linear(pos, self.linear_pos)).transpose(1, 2)
        content = (q + self.bias_u).transpose(1, 2) @ k.transpose(-2, -1)
        position = rel_shift((q + self.bias_v).transpose(1, 2) @ p.transpose(-2, -1))
        attn = torch.softmax((content + position) / math.sqrt(self.d_head), dim=-1)
        merged = (attn @ v).transpose(1, 2).reshape(b, t, -1)
        if residual is None:
            return self.ops.linear(merged, self.out)
        return self.ops.linear_residual(merged, self.out, residual)


class ConvModule(nn.Module):
    """Pointwise (as linear) + GLU, depthwise conv1d, BatchNorm, Swish, pointwise."""

    def __init__(self, d_model: int, kernel_size: int, ops: GemmOps) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.pointwise_in = nn.Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2,
                                   groups=d_model)
        self.bn = nn.BatchNorm1d(d_model)
        self.pointwise_out = nn.Linear(d_model, d_model)
        self.ops = ops

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``conv(x)``, or ``residual + conv(x)`` with ``residual``."""
        h = F.glu(self.ops.linear(self.ops.norm(x, self.norm), self.pointwise_in), dim=-1)
        h = self.ops.conv1d(h, self.depthwise, "silu", norm=self.bn)
        if residual is None:
            return self.ops.linear(h, self.pointwise_out)
        return self.ops.linear_residual(h, self.pointwise_out, residual)


class ConformerLayer(nn.Module):
    """FFN/2, MHSA, conv, FFN/2, LayerNorm (Gulati et al. 2020, figure 1)."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, kernel_size: int,
                 ops: GemmOps) -> None:
        super().__init__()
        self.ff1 = FeedForward(d_model, ffn_dim, ops)
        self.attn = RelPositionAttention(d_model, heads, ops)
        self.conv = ConvModule(d_model, kernel_size, ops)
        self.ff2 = FeedForward(d_model, ffn_dim, ops)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x + 0.5 * ff1(x), x + attn(x), x + conv(x), norm(x + 0.5 * ff2(x)): each add is
        # handed to the block's last linear (GemmOps.linear_residual).
        x = self.ff1(x, residual=x, alpha=0.5)
        x = self.attn(x, pos, residual=x)
        x = self.conv(x, residual=x)
        return self.norm(self.ff2(x, residual=x, alpha=0.5))


class CtcHead(nn.Module):
    """A CTC output layer: hidden -> vocabulary (blank included), then log-softmax over the
    vocabulary at every frame, in the encoder's dtype: one call of the model's linear where
    it fuses the log-softmax (:meth:`GemmOps.linear_log_softmax`), else the projection
    through it and torch's log-softmax."""

    def __init__(self, d_model: int, vocab: int, ops: GemmOps) -> None:
        super().__init__()
        if vocab < 2:
            raise ValueError(f"ctc_vocab {vocab} must be at least 2 (blank and one label)")
        self.proj = nn.Linear(d_model, vocab)
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.linear_log_softmax(x, self.proj)


class ConformerEncoder(nn.Module):
    """Conformer encoder over ``[B, T, input_dim]`` features; output ``[B, T_out, d_model]``.

    Defaults are Gulati et al.'s Conformer (M) widths (16 layers, d_model 256, 4 heads, FFN
    1024) with the odd depthwise kernel 31 of ESPnet/WeNet recipes (the paper used 32).
    ``linear`` serves the linear layers, ``served`` other layer kinds by torch class name
    (:class:`GemmOps`; None: torch). ``conv2d_frontend`` runs the subsampling's convs
    through the served ``Conv2d`` layer where one is served (off: torch's, as before the
    option existed). ``ctc_vocab`` > 0 adds a CTC head (:class:`CtcHead`).
    """

    def __init__(self, *, input_dim: int = 80, d_model: int = 256, heads: int = 4,
                 ffn_dim: int = 1024, kernel_size: int = 31, layers: int = 16,
                 linear: Linear | None = None, served: Mapping[str, Layer] | None = None,
                 conv2d_frontend: bool = False, ctc_vocab: int = 0) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        ops = GemmOps(linear, served)
        self.d_model = d_model
        self.subsample = ConvSubsampling(input_dim, d_model, ops if conv2d_frontend else None)
        self.layers = nn.ModuleList(ConformerLayer(d_model, heads, ffn_dim, kernel_size, ops)
                                    for _ in range(layers))
        self.head = CtcHead(d_model, ctc_vocab, ops) if ctc_vocab else None

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.subsample(features)
        t = x.shape[1]
        offsets = torch.arange(t - 1, -t, -1, device=x.device)
        pos = sinusoids(offsets, self.d_model).to(x.dtype).unsqueeze(0)
        for layer in self.layers:
            x = layer(x, pos)
        return x if self.head is None else self.head(x)


class WhisperBlock(nn.Module):
    """Pre-norm self-attention (key without bias) and GELU MLP, as in Whisper."""

    def __init__(self, d_model: int, heads: int, ffn_dim: int, ops: GemmOps) -> None:
        super().__init__()
        self.heads = heads
        self.attn_ln = nn.LayerNorm(d_model)
        self.q, self.v, self.out = (nn.Linear(d_model, d_model) for _ in range(3))
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.mlp_ln = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.ops.norm(x, self.attn_ln)
        q, k, v = (self.ops.linear(h, layer).view(b, t, self.heads, -1).transpose(1, 2)
                   for layer in (self.q, self.k, self.v))
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = self.ops.linear_residual(attn, self.out, x)
        h = self.ops.linear_act(self.ops.norm(x, self.mlp_ln), self.fc1, "gelu")
        return self.ops.linear_residual(h, self.fc2, x)


class WhisperEncoder(nn.Module):
    """Whisper-style encoder over ``[B, n_mels, window]`` log-mel frames.

    Two conv1d layers (the second stride 2) and GELU, fixed sinusoidal positions for
    ``window / 2`` frames, then pre-norm blocks. Like Whisper's, it accepts exactly
    ``window`` frames (3000: 30 s): a longer or padded input is an error, never rounded.
    Defaults are Whisper base (d_model 512, 6 layers, 8 heads, FFN 2048). ``linear`` serves
    the linear layers, ``served`` other layer kinds (:class:`GemmOps`; None: torch);
    ``ctc_vocab`` > 0 adds a CTC head (:class:`CtcHead`).
    """

    def __init__(self, *, n_mels: int = 80, d_model: int = 512, heads: int = 8, layers: int = 6,
                 ffn_dim: int = 2048, window: int = 3000, linear: Linear | None = None,
                 served: Mapping[str, Layer] | None = None, ctc_vocab: int = 0) -> None:
        super().__init__()
        ops = GemmOps(linear, served)
        self.ops = ops
        self.window = window
        self.conv1 = nn.Conv1d(n_mels, d_model, 3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, 3, stride=2, padding=1)
        positions = torch.arange(window // 2)
        self.register_buffer("positional", sinusoids(positions, d_model), persistent=False)
        self.blocks = nn.ModuleList(WhisperBlock(d_model, heads, ffn_dim, ops)
                                    for _ in range(layers))
        self.ln_post = nn.LayerNorm(d_model)
        self.head = CtcHead(d_model, ctc_vocab, ops) if ctc_vocab else None

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        if mel.shape[-1] != self.window:
            raise ValueError(f"the encoder takes exactly {self.window} frames, got "
                             f"{mel.shape[-1]}")
        if "Conv1d" in self.ops.layers:
            h = mel.transpose(1, 2).contiguous()
            x = self.ops.conv1d(self.ops.conv1d(h, self.conv1, "gelu"), self.conv2, "gelu")
        else:
            x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)
        x = x + self.positional.to(x.dtype)
        for block in self.blocks:
            x = block(x)
        x = self.ln_post(x)
        return x if self.head is None else self.head(x)


class RnntPredictor(nn.Module):
    """An RNN-T (transducer) prediction network as a decoder runs it: one token step of ``B``
    hypotheses.

    The last token of each hypothesis through an embedding (``vocab`` x ``embed_dim``), an
    ``nn.LSTM`` (``embed_dim`` -> ``hidden``, ``layers``, batch first) over that one step from
    a zero state, and the projection to the joint network's width (``joint_dim``; a served
    linear, :class:`GemmOps`). The input is ``[B, T]``, the shape the census feeds (its values
    are arbitrary): each row's token is the integer part of its last column modulo the
    vocabulary, so any ``T`` is one decoding step at batch ``B``. The LSTM is torch's module,
    called with a sequence of one step (what :func:`oasr_core.route` serves through a
    recurrent family and what its recorder keys as one LSTM step per layer); ``served`` is
    accepted for the reference factory's protocol and not read.
    """

    def __init__(self, *, vocab: int = 1024, embed_dim: int = 640, hidden: int = 640,
                 layers: int = 1, joint_dim: int = 640, linear: Linear | None = None,
                 served: Mapping[str, Layer] | None = None) -> None:
        super().__init__()
        self.ops = GemmOps(linear, served)
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, layers, batch_first=True)
        self.proj = nn.Linear(hidden, joint_dim)

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        tokens = labels[:, -1:].long().remainder(self.vocab)
        y, _state = self.lstm(self.embed(tokens))
        return self.ops.linear(y, self.proj)
