"""The fp8 activation quantizer on a GPU against its torch definition
(:func:`oasr_scaled_mm_fp8.numerics.quantize_rows`) on every kernel path of the kit's row
quantizer: M 1 .. 300000, K 7 .. 16392, zero rows, infinities and NaNs, a wide dynamic range,
quotients beyond +-448, a misaligned input. The contract: scales bit for bit (NaN where the
definition has NaN), values bit for bit except that any NaN encoding matches any other (e4m3fn
has two). Run with ``pytest -m gpu`` on a CUDA machine with fp8 (sm89+)."""

from __future__ import annotations

import math

import pytest
import torch
from oasr_scaled_mm.w8a8 import row_quantizer

from oasr_scaled_mm_fp8 import numerics, quantize, quantize_kernel

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
E4M3 = torch.float8_e4m3fn


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def _rows(shape, dtype, seed, scale=3.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * scale).to(dtype)


def _special(x):
    """Row 0 zero; 1 an infinity; 2 a NaN; 3 -inf and a NaN; 4 one large value over tiny ones
    (e4m3 subnormals and zeros); 5 all infinite; the rest random."""
    rows, k = x.shape
    edits = [lambda r: r.zero_(),
             lambda r: r.__setitem__(k // 2, math.inf),
             lambda r: r.__setitem__(k - 1, math.nan),
             lambda r: (r.__setitem__(0, -math.inf), r.__setitem__(k - 1, math.nan)),
             lambda r: (r.mul_(1e-4), r.__setitem__(0, 1000.0)),
             lambda r: r.fill_(math.inf)]
    for row, edit in zip(range(rows), edits, strict=False):
        edit(x[row])
    return x


def _nan_code(q):
    return (q.view(torch.uint8) & 0x7F) == 0x7F


def _assert_contract(x, what):
    got = quantize_kernel.quantize_rows_cuda(x, _arch())
    assert got is not None, "the quantizer kernel did not load"
    q, s = got
    want_q, want_s = numerics.quantize_rows(x)
    assert q.dtype == E4M3 and s.dtype == torch.float32, what
    assert q.shape == x.shape and s.shape == x.shape[:-1], what
    assert torch.equal(s.isnan(), want_s.isnan()), f"{what}: NaN scales differ"
    zero_nan = torch.zeros((), device=s.device)
    assert torch.equal(s.where(~s.isnan(), zero_nan).view(torch.int32),
                       want_s.where(~want_s.isnan(), zero_nan).view(torch.int32)), \
        f"{what}: scales differ"
    same = q.view(torch.uint8) == want_q.view(torch.uint8)
    bad = ~same & ~(_nan_code(q) & _nan_code(want_q))
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} of {q.numel()} values differ"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", row_quantizer.PATH_KS)
def test_every_kernel_path_keeps_the_contract(dtype, k):
    for m in (1, 2, 3, 7, 33, 1001):
        x = _special(_rows((m, k), dtype, m * 7 + k))
        _assert_contract(x, f"M={m} K={k} {dtype} ({row_quantizer.kernel_of(k)})")


@pytest.mark.parametrize("m, k", row_quantizer.STRIDE_SHAPES)
def test_grids_smaller_than_the_rows_stride_over_all_of_them(m, k):
    x = _special(_rows((m, k), torch.bfloat16, k))
    _assert_contract(x, f"M={m} K={k} ({row_quantizer.kernel_of(k)})")


@pytest.mark.parametrize("k", [8, 1024, 4104])
def test_a_misaligned_input_takes_the_element_kernel(k):
    flat = _rows((1001 * k + 1,), torch.float16, 9)
    x = _special(flat[1:].view(1001, k))  # 2 bytes past a 16-byte boundary, contiguous
    assert x.data_ptr() % 16 == 2
    _assert_contract(x, f"misaligned K={k} ({row_quantizer.kernel_of(k, aligned=False)})")


def test_quotients_beyond_448_saturate_as_the_clamp_does():
    # Rows whose amax / 448 scale rounds down, so amax / scale lands just above 448.
    x = torch.tensor([[1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0]], device="cuda")
    x = (x * torch.logspace(-3, 3, 512, device="cuda")[:, None]).to(torch.bfloat16)
    q, s = quantize_kernel.quantize_rows_cuda(x, _arch())
    assert float(q.float().abs().amax()) == 448.0
    _assert_contract(x, "saturation")


def test_quantize_rows_takes_the_kernel_and_captures_in_a_graph():
    x = _rows((512, 768), torch.bfloat16, 3)
    want_q, want_s = numerics.quantize_rows(x)
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
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(s, want_s)


def test_one_kernel_per_quantization():
    x = _rows((1000, 1024), torch.bfloat16, 5)
    quantize.quantize_rows(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        quantize.quantize_rows(x)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = {e.name for e in kernels}
    assert len(kernels) == 1 and any("oasr_fp8_quantize::" in n for n in names), names
