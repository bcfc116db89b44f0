"""``oasr_core.route`` with a quantization scheme routes an ``nn.LayerNorm`` whose output only
the routed quantized linears read (the W8A8 families' deferred norm, one fused
norm-and-quantize pass shared by the linears after it), and leaves every other norm torch's:
one whose output also feeds a residual add, attention or the model's output, a norm subclass
with its own forward, and a norm in code that does not trace. Real torch models on the CPU
(the ops' torch path), real plugins."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from oasr_gemm import ops as gemm_ops
from oasr_scaled_mm.w8a8.scaled_ops import ROUTE
from torch import nn

from oasr_core.layers import NormedRows
from oasr_core.norm_consumers import norms_feeding_only
from oasr_core.routing import route, unroute
from oasr_core.testing import aten_calls

D, HEADS = 64, 4
SCHEMES = (("oasr_scaled_mm", "int8_w8a8"), ("oasr_scaled_mm_fp8", "fp8_w8a8"))
BOUND = {"int8_w8a8": 2e-2, "fp8_w8a8": 6e-2}
"""Max |routed - torch| / max |torch| of one block, per scheme (per-token activations and
per-channel weights: int8 keeps about 2 decimal digits, fp8 e4m3 about 1)."""


class PreNorm(nn.Module):
    """A Whisper-style pre-norm block: each norm's output goes to linears only."""

    def __init__(self) -> None:
        super().__init__()
        self.attn_ln = nn.LayerNorm(D)
        self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))
        self.mlp_ln = nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attn_ln(x)
        b, t = x.shape[0], x.shape[1]
        q, k, v = (p(h).view(b, t, HEADS, D // HEADS).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D)
        x = x + self.out(a)
        return x + self.fc2(F.gelu(self.fc1(self.mlp_ln(x))))


class PostNorm(nn.Module):
    """A post-norm block: the first norm's output feeds the residual add too, the last norm's
    is the block's output, the middle one's also goes through attention scores."""

    def __init__(self) -> None:
        super().__init__()
        self.v, self.out = nn.Linear(D, D), nn.Linear(D, D)
        self.norm1, self.mid, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x + self.out(self.v(x)))
        m = self.mid(y)
        scores = torch.softmax(m @ m.transpose(1, 2), dim=-1)
        y = y + scores @ self.fc2(F.relu(self.fc1(m)))
        return self.norm2(y + self.fc2(F.relu(self.fc1(y))))


class Fp32LayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).type(x.dtype)


class Encoder(nn.Module):
    """Blocks under a forward that does not trace (it branches on a tensor's value): the
    blocks are read one by one; ``Untraceable`` is not read at all."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([PreNorm(), PostNorm(), PreNorm(), Untraceable()])
        self.blocks[2].attn_ln = Fp32LayerNorm(D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.abs().max() > 1e4:
            x = x / x.abs().max()
        for block in self.blocks:
            x = block(x)
        return x


class Untraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(D), nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.fc(h) if h.sum() > 0 else x - self.fc(h)


def _model(seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    model = Encoder().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.2 * torch.randn(D))
                m.bias.copy_(0.2 * torch.randn(D))
    return model


def _x() -> torch.Tensor:
    return torch.randn(2, 12, D, generator=torch.Generator().manual_seed(1))


class Caching(PreNorm):
    """A block whose forward keeps its last input on the module."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = x
        return super().forward(x)


def test_tracing_puts_back_what_a_forward_sets_on_its_module():
    block = Caching()
    assert norms_feeding_only(block, [block.q, block.k, block.v]) == [block.attn_ln]
    assert "last" not in vars(block)


def test_only_norms_whose_output_only_linears_read_are_found():
    model = _model()
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    pre, post, fp32, untraceable = model.blocks
    assert norms_feeding_only(model, linears) == [pre.attn_ln, pre.mlp_ln, fp32.mlp_ln]
    # Without the attention's linears among the consumers, its norm is not theirs alone.
    assert norms_feeding_only(model, [pre.fc1]) == [pre.mlp_ln]
    # Tracing left no trace behind: the same modules, forwards and attributes.
    assert all("forward" not in vars(m) for m in model.modules())
    assert torch.equal(model(_x()), _model()(_x()))


@pytest.mark.parametrize("family, scheme", SCHEMES)
def test_route_defers_the_norms_before_quantized_linears_and_unroute_restores(family,
                                                                              scheme):
    model, ref_model = _model(), _model()
    x = _x()
    with torch.no_grad():
        ref = ref_model(x)
        counts = route(model, dtype="fp16", quantization=scheme, conv1d=False)
        assert counts == {"Linear": 17, "Conv1d": 0, "LayerNorm": 3}
        pre = model.blocks[0]
        seen = []
        hooks = [m.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
                 for m in (pre.q, pre.k, pre.v)]
        out = model(x)
        for hook in hooks:
            hook.remove()
        # q, k and v took one deferred norm, quantized once for all three.
        assert isinstance(seen[0], NormedRows) and seen[0].scheme == scheme
        assert seen == [seen[0]] * 3 and "quantized" in seen[0].computed()
        err = float((out - ref).abs().max()) / float(ref.abs().max())
        assert err <= BOUND[scheme], err
        # The same linears quantizing the norms' output themselves give the same numbers on
        # the CPU: the deferred norm changes where the rows are quantized, not what they are.
        twin = _model()
        route(twin, dtype="fp16", quantization=scheme, conv1d=False)
        for block in (twin.blocks[0], twin.blocks[2]):
            unroute(block.mlp_ln)
        unroute(twin.blocks[0].attn_ln)
        assert torch.equal(twin(x), out)
        # Unrouted: the modules' own forwards, torch's numbers exactly.
        assert unroute(model) == 20
        assert all("forward" not in vars(m) for m in model.modules())
        assert torch.equal(model(x), ref)


def test_no_scheme_routes_no_norm_and_training_norms_run_their_own_forward():
    model = _model()
    assert route(model, dtype="fp16", conv1d=False) == {"Linear": 17, "Conv1d": 0}
    assert all("forward" not in vars(m) for m in model.modules()
               if isinstance(m, nn.LayerNorm))
    assert route(model, dtype="fp16", quantization="int8_w8a8", conv1d=False)["LayerNorm"] == 3
    # Routed again without a scheme: the norms get their own forwards back.
    assert route(model, dtype="fp16", conv1d=False) == {"Linear": 17, "Conv1d": 0}
    assert all("forward" not in vars(m) for m in model.modules()
               if isinstance(m, nn.LayerNorm))
    with torch.no_grad():
        torch.testing.assert_close(model(_x()), _model()(_x()), rtol=1e-5, atol=1e-5)
    unroute(model)
    route(model, dtype="fp16", quantization="int8_w8a8", conv1d=False)
    norm = model.blocks[0].attn_ln.train()
    x = _x()
    assert torch.equal(norm(x), F.layer_norm(x, (D,), norm.weight, norm.bias, norm.eps))


@pytest.mark.parametrize("family, scheme", SCHEMES)
def test_a_routed_norm_whose_linears_run_unquantized_is_torchs_norm(cuda_like, family,
                                                                    scheme):
    """Never slower: where the family's route keeps the linears unquantized, the routed norm
    is torch's layer norm from its second call (the same aten ops as ``nn.LayerNorm``)."""
    block, own = PreNorm().half().eval(), PreNorm().half().eval()
    x = _x()[:, :, :].half().reshape(24, D)
    serving = importlib.import_module(f"{family}.ops").SERVING
    for n, k in ((D, D), (2 * D, D)):
        for normed in (False, True):
            serving.plans.store((ROUTE, n, k, 24, None, normed), True, serving.bind())
    gemm_ops._PLANS.store(("gemm", None, x.dtype, 2 * D, D, 24, 0), gemm_ops.TORCH,
                          gemm_ops.SERVING.bind())
    with torch.no_grad():
        assert route(block, dtype="fp16", quantization=scheme, conv1d=False)["LayerNorm"] == 2
        norm = block.mlp_ln
        block.fc1(norm(x))  # the first call's handle notes what the linears took: dense rows
        torch_calls = aten_calls(lambda: own.mlp_ln(x))
        for _ in range(2):
            got = norm(x)
            assert isinstance(got, torch.Tensor)
            assert aten_calls(lambda: norm(x)) == torch_calls


@pytest.mark.parametrize("family, scheme", SCHEMES[:1])
def test_a_library_style_encoders_pre_norms_are_routed_and_agree(family, scheme):
    """A Whisper-style encoder from a model library's code (its attention reads the norm's
    ``shape`` before the projections; the last norm is the encoder's output)."""
    from library_style_models import whisper_encoder

    def build():
        torch.manual_seed(0)
        return whisper_encoder(encoder_layers=2, d_model=64, encoder_attention_heads=4,
                               encoder_ffn_dim=128, num_mel_bins=16,
                               max_source_positions=32).eval()

    model, twin = build(), build()
    x = torch.randn(2, 16, 40, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ref = twin(x)
        counts = route(model, dtype="fp16", quantization=scheme, conv1d=False)
        assert counts == {"Linear": 12, "Conv1d": 0, "LayerNorm": 4}
        assert "forward" not in vars(model.layer_norm)
        out = model(x)
        err = float((out - ref).abs().max()) / float(ref.abs().max())
        assert err <= BOUND[scheme], err
