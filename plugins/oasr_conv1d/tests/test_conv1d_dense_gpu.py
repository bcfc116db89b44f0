"""GPU tests of the dense conv1d kernels (run on the H200 with ``pytest -m gpu``).

Every dense config of both lanes that runs on this device is compiled (one dense-only module
per lane: the same objects the plugin's lane modules link), then run at the speech front
ends' shapes (Whisper's 80 -> 384 k3 p1 and 384 -> 384 k3 s2 p1 at T = 3000, wav2vec2's
raw-audio 1 -> 512 k10 s5 and its 512 -> 512 k3/k2 s2 stack) and at odd ones (lengths no
tile divides, dilation, narrow and unaligned widths, a 40-tap window), wherever the config
says it supports them: both dtypes, with and without a bias, every activation, against an
fp32 torch reference. Then the refusals (kErrShape for widths and pointers the vector
accesses cannot read, a geometry that disagrees with the call record), geometries sharing
m, n, k and pointers, CUDA-graph capture and programmatic dependent launch.
"""

from __future__ import annotations

import functools
import os
import zlib

import pytest
import torch
from oasr_core.kernel_testing import device_arch, gpu_marks
from oasr_core.types import Problem

from oasr_conv1d import dense
from oasr_conv1d.dense import codegen
from oasr_conv1d.geometry import out_length

pytestmark = gpu_marks()

K_ERR_SHAPE = 2
FLAG_PDL = 1


def _lane_configs(lane: str, arch: str | None) -> list:
    return [] if arch is None else [c for c in dense.space(lane) if dense.fits_arch(c, arch)]


CASES = [(lane, c.id) for lane in dense.LANES for c in _lane_configs(lane, device_arch())]

# (batch, t_in, c_in, c_out, kernel, stride, pad, dilation)
SHAPES = {
    "whisper_conv1": (1, 3000, 80, 384, 3, 1, 1, 1),
    "whisper_conv2": (1, 3000, 384, 384, 3, 2, 1, 1),
    "wav2vec2_stem": (1, 16000, 1, 512, 10, 5, 0, 1),
    "wav2vec2_k3": (2, 3199, 512, 512, 3, 2, 0, 1),
    "wav2vec2_k2": (2, 199, 512, 512, 2, 2, 0, 1),
    "odd_length_dilated": (3, 37, 24, 40, 5, 1, 4, 2),
    "two_channels": (2, 101, 2, 64, 3, 1, 1, 1),
    "four_channels": (1, 77, 4, 72, 4, 3, 0, 1),
    "unaligned_widths": (2, 50, 7, 13, 3, 1, 1, 1),
    "long_window": (1, 300, 64, 64, 40, 1, 20, 1),
}
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp16": (2e-2, 1e-2), "bf16": (6e-2, 2e-2)}
"""(atol, rtol) against the fp32 reference for outputs of order one (inputs in [-1, 1], the
weight scaled by 1/sqrt(K)): a fp16/bf16 rounding of the result and of the bias, where a
missing tap, a shifted window or a lost bias is off by about the output's size."""


def _problem(shape) -> Problem:
    batch, t_in, cin, cout, k, stride, pad, dil = shape
    return Problem(family="conv1d", op="conv1d", dtype="fp16",
                   dims={"Cin": cin, "Cout": cout, "k": k, "stride": stride, "pad": pad,
                         "dil": dil, "groups": 1},
                   m=batch * out_length(t_in, k, stride, pad, dil))


@functools.cache
def _operands(name: str, dtype: str):
    batch, t_in, cin, cout, k, *_ = SHAPES[name]
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(name.encode()))
    x = torch.rand((batch, t_in, cin), generator=gen, device="cuda") * 2 - 1
    w = (torch.rand((cout, cin, k), generator=gen, device="cuda") * 2 - 1) / (cin * k) ** 0.5
    b = torch.rand((cout,), generator=gen, device="cuda") * 2 - 1
    t = TORCH_DTYPES[dtype]
    x, w, b = x.to(t), w.to(t), b.to(t)
    return x, w, dense.pack_weight(w), b


@functools.cache
def _reference(name: str, dtype: str, bias: bool, activation: str | None):
    _, _, _, _, _, stride, pad, dil = SHAPES[name]
    x, w, _, b = _operands(name, dtype)
    return dense.reference(x, w, b if bias else None, stride=stride, padding=pad, dilation=dil,
                           activation=activation)


@pytest.fixture(scope="session")
def kernels() -> dict:
    from oasr_core import jit as core_jit

    arch = device_arch()
    lanes = [lane for lane in dense.LANES if _lane_configs(lane, arch)]
    specs = [dense.module_spec(lane, arch, _lane_configs(lane, arch),
                               name=f"conv1d_dense_{lane}_all") for lane in lanes]
    core_jit.prebuild(specs, jobs=os.cpu_count())
    found = {}
    for lane, spec in zip(lanes, specs, strict=True):
        module = core_jit.load(spec, build_missing=False)
        for config in _lane_configs(lane, arch):
            for op in dense.OPS:
                found[(lane, config.id, op)] = dense.bind(module, config, op)
    return found


def _check(out, ref, dtype: str, what: str) -> None:
    atol, rtol = TOLERANCE[dtype]
    err = (out.float() - ref).abs()
    bound = atol + rtol * ref.abs()
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), (
        f"{what}: max error {err.max().item():.4g} at flat index {worst} "
        f"(ref {ref.flatten()[worst].item():.4g}, got {out.float().flatten()[worst].item():.4g})")
    assert ref.abs().max().item() > 0.1, f"{what}: the reference is degenerate"


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_every_config_matches_the_fp32_reference_wherever_it_supports_the_shape(kernels, lane,
                                                                                 cid):
    config = dense.config(lane, cid)
    ran = 0
    for name, shape in SHAPES.items():
        if not dense.supports(config, _problem(shape)):
            continue
        _, _, _, _, _, stride, pad, dil = shape
        for dtype in dense.DTYPES:
            x, _, packed, b = _operands(name, dtype)
            for op in dense.OPS:
                for bias in (True, False):
                    kernel = kernels[(lane, cid, op)]
                    out = kernel(x, packed, b if bias else None, stride=stride, padding=pad,
                                 dilation=dil)
                    ref = _reference(name, dtype, bias, codegen.ACTIVATION_OF_OP[op])
                    _check(out, ref, dtype, f"{cid} {name} {dtype} {op} bias={bias}")
                    ran += 1
    assert ran > 0, f"{cid} supports none of the test shapes"


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_widths_the_config_cannot_read_are_refused_with_kerrshape(kernels, lane, cid):
    config = dense.config(lane, cid)
    kernel = kernels[(lane, cid, "conv1d")]
    align_in, align_out = config.params["align_in"], config.params["align_out"]
    if align_in > 1:
        x = torch.randn((1, 40, align_in * 3 + 1), device="cuda", dtype=torch.float16)
        w = torch.randn((64, 3, align_in * 3 + 1), device="cuda", dtype=torch.float16)
        assert kernel.status(x, w, padding=1)[0] == K_ERR_SHAPE
        # An aligned width read through a pointer one element off the vector boundary.
        base = torch.randn((1, 40 * align_in * 4 + 1), device="cuda", dtype=torch.float16)
        x = base[:, 1:].view(1, 40, align_in * 4)
        w = torch.randn((64, 3, align_in * 4), device="cuda", dtype=torch.float16)
        assert kernel.status(x, w, padding=1)[0] == K_ERR_SHAPE
    if align_out > 1:
        x = torch.randn((1, 40, 8), device="cuda", dtype=torch.float16)
        w = torch.randn((align_out * 8 + 1, 3, 8), device="cuda", dtype=torch.float16)
        assert kernel.status(x, w, padding=1)[0] == K_ERR_SHAPE
    if align_in == 1 and align_out == 1:
        pytest.skip(f"{cid} reads any width")


def test_a_geometry_that_disagrees_with_the_call_record_is_refused(kernels):
    import ctypes

    from oasr_conv1d import geometry as abi

    lane, cid = CASES[0]
    kernel = kernels[(lane, cid, "conv1d")]
    x, _, packed, b = _operands("whisper_conv1", "fp16")
    out = torch.empty((1, 3000, 384), device="cuda", dtype=torch.float16)
    geo = abi.geometry(1, 3000, 80, 384, 3, 1, 1)
    call = abi.call_args(geo, "fp16")
    call.k += 8
    stream = torch.cuda.current_stream().cuda_stream
    status = kernel.fn(ctypes.addressof(call), ctypes.addressof(geo), x.data_ptr(),
                       packed.data_ptr(), b.data_ptr(), out.data_ptr(), stream)
    assert status == K_ERR_SHAPE
    geo.groups = 2
    assert kernel.workspace(geo, "fp16") == -1


def _default_kernel(kernels, lane, op):
    """``(id, kernel)`` of ``lane``'s untuned default for ``op``; skips where it does not run."""
    cid = dense.default_id(lane)
    if (lane, cid, op) not in kernels:
        pytest.skip(f"{cid} does not run here")
    return cid, kernels[(lane, cid, op)]


@pytest.mark.parametrize("lane", dense.LANES)
def test_geometries_sharing_m_n_k_and_pointers_get_their_own_parameters(kernels, lane):
    cid, kernel = _default_kernel(kernels, lane, "conv1d")
    flat = torch.rand((2 * 102 * 64,), device="cuda", dtype=torch.float16) - 0.5
    w = (torch.rand((64, 64, 3), device="cuda", dtype=torch.float16) - 0.5) / 14
    packed = dense.pack_weight(w)
    out = torch.empty((2 * 100 * 64,), device="cuda", dtype=torch.float16)
    # (batch, t_in, pad): each has m = batch * t_out = 200 and k = 192, on the same buffers.
    for batch, t_in, pad in ((2, 102, 0), (1, 202, 0), (2, 100, 1), (1, 200, 1)):
        x = flat[: batch * t_in * 64].view(batch, t_in, 64)
        got = kernel(x, packed, padding=pad, out=out.view(batch, 200 // batch, 64))
        ref = dense.reference(x, w, padding=pad)
        _check(got, ref, "fp16", f"{cid} batch={batch} t_in={t_in} pad={pad}")


@pytest.mark.parametrize("lane", dense.LANES)
def test_a_captured_graph_replays_the_eager_result(kernels, lane):
    cid, kernel = _default_kernel(kernels, lane, "conv1d_gelu")
    x, _, packed, b = _operands("whisper_conv2", "bf16")
    eager = kernel(x, packed, b, stride=2, padding=1)
    out = torch.empty_like(eager)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kernel(x, packed, b, stride=2, padding=1, out=out)  # prepares outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    out.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel(x, packed, b, stride=2, padding=1, out=out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_hopper_kernels_give_the_same_result_with_programmatic_dependent_launch(kernels):
    hopper = [(lane, cid) for lane, cid in CASES if dense.pdl_capable(dense.config(lane, cid))]
    if not hopper:
        pytest.skip("no 3.x config runs here")
    for lane, cid in hopper:
        kernel = kernels[(lane, cid, "conv1d_silu")]
        x, _, packed, b = _operands("wav2vec2_k3", "fp16")
        plain = kernel(x, packed, b, stride=2)
        chained = kernel(x, packed, b, stride=2, flags=FLAG_PDL)
        torch.cuda.synchronize()
        assert torch.equal(plain, chained), cid
