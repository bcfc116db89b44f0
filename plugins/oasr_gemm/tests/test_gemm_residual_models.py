"""The reference models with the gemm family's linear (``oasr_linear``): the residual adds
are fused into ``gemm_residual`` calls, which on a CPU take the torch path and compute the
torch models' outputs bitwise; the census records those calls as op ``gemm_residual``."""

from __future__ import annotations

import pytest
import torch
from oasr_core.census import models
from oasr_core.census.engine import EngineConfig, Traffic
from oasr_core.census.probe import run_census
from oasr_core.census.workloads import builtin_workloads
from oasr_core.plugins import make_plugin_manager

import oasr_gemm
from oasr_gemm import hooks, recorder
from oasr_gemm.linear import linear


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_conformer_with_the_family_linear_equals_the_torch_model(dtype):
    torch.manual_seed(0)
    plain = models.ConformerEncoder(layers=2).eval().to(dtype)
    served = models.ConformerEncoder(layers=2, linear=linear).eval().to(dtype)
    served.load_state_dict(plain.state_dict())
    features = torch.randn(2, 4 * 9 + 3, 80, dtype=dtype)
    with torch.no_grad():
        assert torch.equal(served(features), plain(features))
    assert oasr_gemm.stats() == {"torch:cpu": 2 * 11}


def test_the_whisper_encoder_with_the_family_linear_equals_the_torch_model():
    torch.manual_seed(0)
    kw = {"d_model": 64, "heads": 4, "ffn_dim": 128, "layers": 2, "window": 40}
    plain = models.WhisperEncoder(**kw).eval()
    served = models.WhisperEncoder(linear=linear, **kw).eval()
    served.load_state_dict(plain.state_dict())
    mel = torch.randn(2, 80, 40)
    with torch.no_grad():
        assert torch.equal(served(mel), plain(mel))


def test_a_residual_after_an_activation_has_no_fused_op():
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="no fused op"):
        linear(x, layer, "gelu", residual=x)


def test_the_census_records_the_residual_sites_as_gemm_residual():
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(hooks, name="gemm")
    conformer = next(w for w in builtin_workloads(pm) if w.name == "conformer")
    result = run_census(conformer, EngineConfig(service_mode="offline", max_batch_size=2),
                        Traffic(durations_s=(3.0,)), recorder.recorder_patches(),
                        params={"layers": 2}, dtype="fp16")
    steps = {label: info.calls_per_step for label, info in result.signatures.items()}
    assert steps == {
        "gemm|op=gemm|dt=fp16|N=256|K=4864": 1,
        "gemm|op=gemm|dt=fp16|N=256|K=256": 2 * 4,  # q, k, v, linear_pos
        "gemm|op=gemm|dt=fp16|N=512|K=256": 2,  # the first pointwise conv
        "gemm|op=gemm_activation|dt=fp16|N=1024|K=256": 2 * 2,
        "gemm|op=gemm_residual|dt=fp16|N=256|K=1024": 2 * 2,  # both half-step FFNs' w2
        "gemm|op=gemm_residual|dt=fp16|N=256|K=256": 2 * 2,  # attention out, pointwise out
        # The relative-position attention's products (T = 79 frames, 157 positions, d 64);
        # k, p and v are head views of the linears' rows, so torch copies each contiguous.
        "gemm|op=bmm_nn|dt=fp16|N=79|K=64": 2,  # content: (q + u) k^T
        "gemm|op=bmm_nn|dt=fp16|N=157|K=64": 2,  # position: (q + v) p^T
        "gemm|op=bmm_nn|dt=fp16|N=64|K=79": 2,  # attn @ v
    }
