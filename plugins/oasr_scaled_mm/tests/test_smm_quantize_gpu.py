"""The one-kernel activation quantizer on a GPU: bit for bit the torch reference on every
kernel path of the kit's row quantizer (M 1 .. 300000, K 7 .. 16392, zero rows, ties, a wide
dynamic range, a misaligned input), under CUDA graph capture, and through the quantized
linear. Run with ``pytest -m gpu`` on a CUDA machine."""

from __future__ import annotations

import pytest
import torch

from oasr_scaled_mm import quantize, quantize_kernel
from oasr_scaled_mm.w8a8 import row_quantizer

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


TIES = (127.0, 2.5, -2.5, 3.5, 0.5, -0.5, 1.5, -126.5)
"""A row whose scale is exactly 1 and whose quotients are halfway: round half to even."""


def _special(x):
    """Row 0 zero, row 1 ties (:data:`TIES`), row 2 one large value over tiny ones."""
    rows = x.shape[0]
    if rows > 0:
        x[0] = 0
    if rows > 1:
        ties = torch.tensor(TIES, device=x.device).to(x.dtype)
        x[1] = ties.repeat(-(-x.shape[1] // len(TIES)))[:x.shape[1]]
    if rows > 2:
        x[2] *= 1e-3
        x[2, -1] = 200.0
    return x


def _assert_bitwise(x, what):
    got = quantize_kernel.quantize_rows_cuda(x, _arch())
    assert got is not None, "the quantizer did not load"
    q, s = got
    q_ref, s_ref = quantize.quantize_rows_reference(x)
    assert q.dtype == torch.int8 and s.dtype == torch.float32, what
    assert q.shape == x.shape and s.shape == x.shape[:-1], what
    assert torch.equal(s.view(torch.int32), s_ref.view(torch.int32)), what
    bad = int((q != q_ref).sum())
    assert bad == 0, f"{what}: {bad} of {q.numel()} values differ"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", row_quantizer.PATH_KS)
def test_every_kernel_path_is_the_reference_bitwise(dtype, k):
    for m in (1, 2, 3, 33, 1001):
        x = _special(_rows((m, k), dtype, m * 7 + k, scale=3.0))
        _assert_bitwise(x, f"M={m} K={k} {dtype} ({row_quantizer.kernel_of(k)})")


@pytest.mark.parametrize("m, k", row_quantizer.STRIDE_SHAPES)
def test_grids_smaller_than_the_rows_stride_over_all_of_them(m, k):
    x = _special(_rows((m, k), torch.bfloat16, k))
    _assert_bitwise(x, f"M={m} K={k} ({row_quantizer.kernel_of(k)})")


@pytest.mark.parametrize("k", [8, 1024, 4104])
def test_a_misaligned_input_takes_the_element_kernel(k):
    flat = _rows((1001 * k + 1,), torch.float16, 9)
    x = _special(flat[1:].view(1001, k))  # 2 bytes past a 16-byte boundary, contiguous
    assert x.data_ptr() % 16 == 2
    _assert_bitwise(x, f"misaligned K={k} ({row_quantizer.kernel_of(k, aligned=False)})")


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
    assert len(kernels) == 1 and any("oasr_quantize::" in n for n in names), names
