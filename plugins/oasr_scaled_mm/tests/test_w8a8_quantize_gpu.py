"""The activation quantizer of each W8A8 format (int8, fp8 e4m3) on a GPU against the format's
torch definition, on every kernel path of the row quantizer (M 1 .. 300000, K 7 .. 16392, the
format's special rows, a misaligned input), under CUDA graph capture, one kernel per call.

The contract: scales bit for bit (NaN where the definition has NaN), values bit for bit except
that, for fp8, any NaN encoding matches any other (e4m3fn has two). What only one format has
(int8's round-half-even ties and quantized linear, fp8's saturation at 448) is in that family's
``*_quantize_gpu`` module. Run with ``pytest -m gpu`` on a CUDA machine (fp8: sm89+)."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from oasr_scaled_mm.w8a8 import row_quantizer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TIES = (127.0, 2.5, -2.5, 3.5, 0.5, -0.5, 1.5, -126.5)
"""An int8 row whose scale is exactly 1 and whose quotients are halfway: round half to even."""


def arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def rows(shape, dtype, seed, scale=3.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * scale).to(dtype)


def _int8_special(x):
    """Row 0 zero, row 1 ties (:data:`TIES`), row 2 one large value over tiny ones."""
    rows_, k = x.shape
    if rows_ > 0:
        x[0] = 0
    if rows_ > 1:
        ties = torch.tensor(TIES, device=x.device).to(x.dtype)
        x[1] = ties.repeat(-(-k // len(TIES)))[:k]
    if rows_ > 2:
        x[2] *= 1e-3
        x[2, -1] = 200.0
    return x


def _fp8_special(x):
    """Row 0 zero; 1 an infinity; 2 a NaN; 3 -inf and a NaN; 4 one large value over tiny ones
    (e4m3 subnormals and zeros); 5 all infinite; the rest random."""
    rows_, k = x.shape
    edits = [lambda r: r.zero_(),
             lambda r: r.__setitem__(k // 2, math.inf),
             lambda r: r.__setitem__(k - 1, math.nan),
             lambda r: (r.__setitem__(0, -math.inf), r.__setitem__(k - 1, math.nan)),
             lambda r: (r.mul_(1e-4), r.__setitem__(0, 1000.0)),
             lambda r: r.fill_(math.inf)]
    for row, edit in zip(range(rows_), edits, strict=False):
        edit(x[row])
    return x


FORMATS = {
    "int8": ("oasr_scaled_mm", "quantize", "quantize_rows_reference", _int8_special,
             "oasr_quantize::"),
    "fp8": ("oasr_scaled_mm_fp8", "numerics", "quantize_rows", _fp8_special,
            "oasr_fp8_quantize::"),
}
"""Per format: its package, the module and function of its torch definition, its special rows
and the name its kernel's namespace gives the profiler."""


class Quantizer:
    """One format's quantizer under test: its kernel, torch definition and contract check."""

    def __init__(self, name: str):
        package, module, function, special, kernel = FORMATS[name]
        self.kernel = importlib.import_module(f"{package}.quantize_kernel")
        self.quantize = importlib.import_module(f"{package}.quantize")
        self.definition = getattr(importlib.import_module(f"{package}.{module}"), function)
        self.special, self.kernel_name = special, kernel

    def check(self, x, what):
        got = self.kernel.quantize_rows_cuda(x, arch())
        assert got is not None, "the quantizer kernel did not load"
        q, s = got
        want_q, want_s = self.definition(x)
        assert q.dtype == want_q.dtype and s.dtype == torch.float32, what
        assert q.shape == x.shape and s.shape == x.shape[:-1], what
        assert torch.equal(s.isnan(), want_s.isnan()), f"{what}: NaN scales differ"
        zero = torch.zeros((), device=s.device)
        assert torch.equal(s.where(~s.isnan(), zero).view(torch.int32),
                           want_s.where(~want_s.isnan(), zero).view(torch.int32)), \
            f"{what}: scales differ"
        bad = q.view(torch.uint8) != want_q.view(torch.uint8)
        if q.dtype.is_floating_point:
            bad &= ~(_nan_code(q) & _nan_code(want_q))
        assert not bool(bad.any()), f"{what}: {int(bad.sum())} of {q.numel()} values differ"


def _nan_code(q):
    return (q.view(torch.uint8) & 0x7F) == 0x7F


@pytest.fixture(params=sorted(FORMATS), scope="module")
def quantizer(request):
    if request.param == "fp8":
        pytest.importorskip("oasr_scaled_mm_fp8")
        if torch.cuda.get_device_capability() < (8, 9):
            pytest.skip("fp8 needs sm89+")
    return Quantizer(request.param)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", row_quantizer.PATH_KS)
def test_every_kernel_path_keeps_the_contract(quantizer, dtype, k):
    for m in (1, 2, 3, 7, 33, 1001):
        x = quantizer.special(rows((m, k), dtype, m * 7 + k))
        quantizer.check(x, f"M={m} K={k} {dtype} ({row_quantizer.kernel_of(k)})")


@pytest.mark.parametrize("m, k", row_quantizer.STRIDE_SHAPES)
def test_grids_smaller_than_the_rows_stride_over_all_of_them(quantizer, m, k):
    x = quantizer.special(rows((m, k), torch.bfloat16, k))
    quantizer.check(x, f"M={m} K={k} ({row_quantizer.kernel_of(k)})")


@pytest.mark.parametrize("k", [8, 1024, 4104])
def test_a_misaligned_input_takes_the_element_kernel(quantizer, k):
    flat = rows((1001 * k + 1,), torch.float16, 9)
    x = quantizer.special(flat[1:].view(1001, k))  # 2 bytes past a 16-byte boundary
    assert x.data_ptr() % 16 == 2
    quantizer.check(x, f"misaligned K={k} ({row_quantizer.kernel_of(k, aligned=False)})")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_quantize_rows_takes_the_kernel_and_captures_in_a_graph(quantizer, dtype):
    x = rows((512, 768), dtype, 3)
    want_q, want_s = quantizer.definition(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        quantizer.quantize.quantize_rows(x)  # load outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            q, s = quantizer.quantize.quantize_rows(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(s, want_s)


def test_one_kernel_per_quantization(quantizer):
    x = rows((1000, 1024), torch.bfloat16, 5)
    quantizer.quantize.quantize_rows(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        quantizer.quantize.quantize_rows(x)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = {e.name for e in kernels}
    assert len(kernels) == 1 and any(quantizer.kernel_name in n for n in names), names


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 16), (3, 64), (416, 256), (2152, 1024), (64, 4096),
                                   (8, 1000, 512), (24000, 256)])
def test_int8_kernel_equals_the_reference_bitwise_at_any_rank_and_range(dtype, shape):
    quantizer = Quantizer("int8")
    for seed, scale in ((0, 1.0), (1, 1e-3), (2, 300.0)):
        x = rows(shape, dtype, seed, scale)
        x[..., 0, :] = 0  # an all-zero row: scale 1
        quantizer.check(x, (shape, dtype, seed))


def test_the_int8_quantized_linear_serves_the_same_bits_with_the_kernel(monkeypatch):
    quantizer = Quantizer("int8")
    layer = torch.nn.Linear(512, 1024).to("cuda", torch.float16)
    x = rows((8, 200, 512), torch.float16, 4)
    with torch.inference_mode():
        fast = quantizer.quantize.quantized_linear(x, layer)
        monkeypatch.setattr(quantizer.kernel, "quantize_rows_cuda", lambda *a: None)
        slow = quantizer.quantize.quantized_linear(x, layer)
    assert torch.equal(fast, slow)


def test_fp8_quotients_beyond_448_saturate_as_the_clamp_does():
    pytest.importorskip("oasr_scaled_mm_fp8")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm89+")
    quantizer = Quantizer("fp8")
    # Rows whose amax / 448 scale rounds down, so amax / scale lands just above 448.
    x = torch.tensor([[1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0]], device="cuda")
    x = (x * torch.logspace(-3, 3, 512, device="cuda")[:, None]).to(torch.bfloat16)
    q, _ = quantizer.kernel.quantize_rows_cuda(x, arch())
    assert float(q.float().abs().amax()) == 448.0
    quantizer.check(x, "saturation")
