"""The one-kernel activation quantizer on a GPU: bit for bit the torch reference, under CUDA
graph capture, and through the quantized linear. Run with ``pytest -m gpu`` on a CUDA machine."""

from __future__ import annotations

import pytest
import torch

from oasr_scaled_mm import quantize, quantize_kernel

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def _rows(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * scale).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 16), (3, 64), (416, 256), (2152, 1024), (64, 4096),
                                   (8, 1000, 512), (24000, 256)])
def test_kernel_equals_the_reference_bitwise(dtype, shape):
    for seed, scale in ((0, 1.0), (1, 1e-3), (2, 300.0)):
        x = _rows(shape, dtype, seed, scale)
        x[..., 0, :] = 0  # an all-zero row: scale 1
        got = quantize_kernel.quantize_rows_cuda(x, _arch())
        assert got is not None, "the quantizer did not load"
        q, s = got
        q_ref, s_ref = quantize.quantize_rows_reference(x)
        assert q.dtype == torch.int8 and s.dtype == torch.float32
        assert q.shape == x.shape and s.shape == x.shape[:-1]
        assert torch.equal(s.view(torch.int32), s_ref.view(torch.int32)), (shape, dtype, seed)
        assert torch.equal(q, q_ref), (shape, dtype, seed, (q != q_ref).sum().item())


def test_quantize_rows_takes_the_kernel_and_captures_in_a_graph():
    x = _rows((512, 768), torch.float16, 3)
    q_ref, s_ref = quantize.quantize_rows_reference(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        quantize.quantize_rows(x)  # load outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            q, s = quantize.quantize_rows(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)


def test_the_quantized_linear_serves_the_same_bits_with_the_kernel(monkeypatch):
    layer = torch.nn.Linear(512, 1024).to("cuda", torch.float16)
    x = _rows((8, 200, 512), torch.float16, 4)
    with torch.inference_mode():
        fast = quantize.quantized_linear(x, layer)
        monkeypatch.setattr(quantize_kernel, "quantize_rows_cuda", lambda *a: None)
        slow = quantize.quantized_linear(x, layer)
    assert torch.equal(fast, slow)


def test_one_kernel_per_quantization():
    x = _rows((1000, 1024), torch.bfloat16, 5)
    quantize.quantize_rows(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        quantize.quantize_rows(x)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = {e.name for e in kernels}
    assert len(kernels) == 1 and any("quantize_rows" in n for n in names), names
