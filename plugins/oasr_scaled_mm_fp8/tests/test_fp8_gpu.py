"""GPU tests (the H200, ``pytest -m gpu``): every tile of both fp8 lanes, both ops, the numerics
claim, graphs, torch.compile, the quantizer, the quantized linear's route and the bench arms.

The claim under test (:mod:`oasr_scaled_mm_fp8.numerics`): every variant -- fast-accumulation,
promoted and staged alike -- is within the stated bound of the fp32 reference of the same fp8
operands, at M = 1 .. 2152, N that no tile divides and K up to 8192; the quant op saturates to
+-448 and keeps NaN. It is a tolerance claim, not a bitwise one: the test of the fast versus the
promoted main loop asserts both are within the bound and reports how far apart they are.
"""

from __future__ import annotations

import functools
import math
import os

import pytest
import torch

from oasr_scaled_mm_fp8 import config_space as cs
from oasr_scaled_mm_fp8 import jit, launch, numerics, quantize, quantize_kernel, reference

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SHAPES = ((1, 768, 256), (16, 784, 512), (100, 1536, 1024), (2152, 784, 256), (64, 256, 8192))
"""(M, N, K); 784 = 16 x 49 is a multiple of no tile width; K = 8192 for deep accumulation."""
E4M3 = torch.float8_e4m3fn


def _arch() -> str | None:
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


CASES = [(lane, c.id) for lane in cs.LANES for c in jit.lane_configs(lane, _arch())] \
    if _arch() else []


@pytest.fixture(scope="session")
def kernels() -> dict[tuple[str, str], launch.Kernel]:
    from oasr_core import jit as core_jit

    arch = _arch()
    lanes = [lane for lane in cs.LANES if jit.lane_configs(lane, arch)]
    specs = [jit.full_spec(lane, arch) for lane in lanes]
    core_jit.prebuild(specs, jobs=os.cpu_count())
    found: dict[tuple[str, str], launch.Kernel] = {}
    for lane, spec in zip(lanes, specs, strict=True):
        found.update(launch.bind_all(core_jit.load(spec, build_missing=False),
                                     jit.lane_configs(lane, arch)))
    return found


def _kernel(kernels, op, cid) -> launch.Kernel:
    if (op, cid) not in kernels:
        pytest.fail(f"{cid} ({op}) did not compile or load")
    return kernels[(op, cid)]


@functools.cache
def _operands(m, n, k, bias, seed):
    return numerics.make_operands(m, n, k, bias=bias, device="cuda", seed=seed)


def _within(got, ref, what):
    verdict = numerics.within(got, ref)
    assert verdict, f"{what}: {verdict.reason} (worst {verdict.error:.2e} of max |ref|)"
    return verdict.error


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_every_tile_is_within_the_bound_for_both_ops(kernels, lane, cid):
    for i, (m, n, k) in enumerate(SHAPES):
        a, a_scale, w, w_scale, bias = _operands(m, n, k, i % 2 == 0, i)
        ref = reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
        mm = _kernel(kernels, cs.OP_MM, cid)
        for out_dtype in (torch.bfloat16, torch.float16):
            got = mm.run(a, w, a_scale, w_scale, bias, out_dtype=out_dtype)
            torch.cuda.synchronize()
            _within(got, ref, f"{cid} {out_dtype} m={m} n={n} k={k}")
        scale = numerics.out_scale_for(ref) * 0.5       # half the range: some saturate
        target = (ref / scale).clamp(-448, 448)
        quant = _kernel(kernels, cs.OP_QUANT, cid)
        by_value = quant.run(a, w, a_scale, w_scale, bias, out_scale=scale)
        by_tensor = quant.run(a, w, a_scale, w_scale, bias,
                              out_scale=torch.tensor([scale], device="cuda"))
        torch.cuda.synchronize()
        assert by_value.dtype == E4M3
        _within(by_value, target, f"{cid} quant m={m}")
        assert torch.equal(by_value.view(torch.uint8), by_tensor.view(torch.uint8))
        if m * n >= 2000:
            assert int((by_value.float().abs() == 448).sum()) > 0


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_quant_saturates_and_keeps_nan(kernels, lane, cid):
    a, a_scale, w, w_scale, bias = _operands(100, 1536, 1024, True, 3)
    quant = _kernel(kernels, cs.OP_QUANT, cid)
    tiny = quant.run(a, w, a_scale, w_scale, bias, out_scale=1e-6).float()
    nan = quant.run(a, w, a_scale, w_scale, bias, out_scale=math.nan).float()
    torch.cuda.synchronize()
    assert float(tiny.abs().amax()) == 448.0 and not tiny.isnan().any()
    assert nan.isnan().all()


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_every_tile_under_cuda_graph_capture(kernels, lane, cid):
    m, n, k = 1000, 784, 1024
    a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda", seed=5)
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    qout = torch.empty(m, n, dtype=E4M3, device="cuda")
    scale_t = torch.tensor([0.02], device="cuda")
    mm, quant = _kernel(kernels, cs.OP_MM, cid), _kernel(kernels, cs.OP_QUANT, cid)
    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)

    def step():
        mm.run(a, w, a_scale, w_scale, bias, out_dtype=torch.bfloat16, out=out)
        quant.run(a, w, a_scale, w_scale, bias, out_scale=scale_t, out=qout)

    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        step()
    fresh, fresh_scale = numerics.make_operands(m, n, k, device="cuda", seed=6)[:2]
    a.copy_(fresh)
    a_scale.copy_(fresh_scale)
    scale_t.fill_(0.03)
    graph.replay()
    torch.cuda.synchronize()
    ref = reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
    _within(out, ref, f"{cid} graph replay")
    _within(qout, (ref / 0.03).clamp(-448, 448), f"{cid} quant graph replay")


def test_fast_and_promoted_accumulation_are_both_within_the_bound_at_deep_k(kernels):
    """The tolerance claim's reason: the fast main loop and the promoted one differ in bits."""
    a, a_scale, w, w_scale, bias = _operands(512, 1024, 8192, False, 8)
    ref = reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
    errors = {}
    for cid in ("pp_128x128x128_c1x1_fa", "pp_128x128x128_c1x1"):
        if (cs.OP_MM, cid) in kernels:
            got = kernels[(cs.OP_MM, cid)].run(a, w, a_scale, w_scale, bias)
            torch.cuda.synchronize()
            errors[cid] = _within(got, ref, cid)
    if not errors:
        pytest.skip("no sm90 lane on this device")
    print("worst error / max|ref| at K=8192:", errors)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_ops_through_selection(out_dtype):
    import oasr_scaled_mm_fp8 as fp8

    for m, n, k in ((1, 768, 256), (16, 1536, 512), (2152, 768, 1024)):
        a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda", seed=m)
        x = a.view(2, m // 2, k) if m % 2 == 0 else a
        got = fp8.scaled_mm_fp8(x, w, a_scale, w_scale, bias.to(out_dtype), out_dtype=out_dtype)
        ref = reference.scaled_mm_value(a, w, a_scale, w_scale, bias.to(out_dtype))
        _within(got.view(m, n), ref, f"scaled_mm_fp8 {m}")
        out = torch.empty(*x.shape[:-1], n, dtype=E4M3, device="cuda")
        q = fp8.scaled_mm_fp8_quant(x, w, a_scale, w_scale, 0.05, None, out=out)
        assert q is out
        _within(q.view(m, n), (reference.scaled_mm_value(a, w, a_scale, w_scale) / 0.05)
                .clamp(-448, 448), f"scaled_mm_fp8_quant {m}")
        assert fp8.select_config(n, k, m) is not None
    assert fp8.stats() == {}, fp8.stats()


def test_unsupported_inputs_take_the_counted_torch_path():
    import oasr_scaled_mm_fp8 as fp8

    a, a_scale, w, w_scale, bias = numerics.make_operands(64, 200, 256, device="cuda")
    _within(fp8.scaled_mm_fp8(a, w, a_scale, w_scale, bias),
            reference.scaled_mm_value(a, w, a_scale, w_scale, bias), "unaligned N")
    a2, s2, w2, ws2, _ = numerics.make_operands(64, 256, 256, device="cuda")
    strided = a2.t().contiguous().t()
    _within(fp8.scaled_mm_fp8(strided, w2, s2, ws2), reference.scaled_mm_value(a2, w2, s2, ws2),
            "non-contiguous")
    assert fp8.stats() == {"torch:unaligned": 1, "torch:noncontiguous": 1}


def test_a_quantized_two_layer_step_inside_a_cuda_graph():
    import oasr_scaled_mm_fp8 as fp8

    m, n, k = 640, 512, 768
    a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda", seed=9)
    w2, ws2 = numerics.make_operands(1, k, n, device="cuda", seed=10)[2:4]
    scale_t = torch.tensor([0.05], device="cuda")
    ones = torch.ones(m, device="cuda")

    def step():
        h = fp8.scaled_mm_fp8_quant(a, w, a_scale, w_scale, scale_t, bias)
        return h, fp8.scaled_mm_fp8(h, w2, ones * scale_t, ws2)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        h, y = step()
    a.copy_(numerics.make_operands(m, n, k, device="cuda", seed=11)[0])
    graph.replay()
    torch.cuda.synchronize()
    want_h = (reference.scaled_mm_value(a, w, a_scale, w_scale, bias) / 0.05).clamp(-448, 448)
    _within(h, want_h, "graph: quant")
    _within(y, reference.scaled_mm_value(h, w2, ones * scale_t, ws2), "graph: second GEMM")
    assert fp8.stats() == {}


def test_torch_compile_runs_the_custom_ops():
    import oasr_scaled_mm_fp8 as fp8

    a, a_scale, w, w_scale, bias = numerics.make_operands(256, 512, 256, device="cuda", seed=12)

    def f(a):
        return fp8.scaled_mm_fp8(a, w, a_scale, w_scale, bias) * 2

    got = torch.compile(f, fullgraph=True)(a)
    torch.cuda.synchronize()
    _within(got, reference.scaled_mm_value(a, w, a_scale, w_scale, bias) * 2, "torch.compile")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [256, 1000, 4096])
def test_the_quantizer_kernel_is_bitwise_the_torch_definition(dtype, k):
    x = torch.randn(300, k, device="cuda").to(dtype) * 3
    x[7] = 0
    x[11, 5] = math.nan
    got = quantize_kernel.quantize_rows_cuda(x, _arch())
    assert got is not None, "the quantizer kernel did not load"
    q, scale = got
    want_q, want_scale = numerics.quantize_rows(x)
    torch.cuda.synchronize()
    assert torch.equal(scale.isnan(), want_scale.isnan())
    assert torch.equal(scale.nan_to_num(), want_scale.nan_to_num())
    same = q.view(torch.uint8) == want_q.view(torch.uint8)
    both_nan = q.float().isnan() & want_q.float().isnan()
    assert bool((same | both_nan).all())
    assert float(scale[7]) == 1.0 and q[11].float().isnan().all()


def test_the_quantized_linear_serves_f_linear_where_the_table_says_unquantized(tmp_path,
                                                                               monkeypatch):
    from oasr_core import database, runtime
    from oasr_core.types import Sentinel

    import oasr_scaled_mm_fp8 as fp8

    rt = runtime.get_runtime()
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.active_lane(cs.FAMILY, _arch())
    entry = database.Entry(regions=((256, Sentinel.UNQUANTIZED.value), (None, "heuristic")))
    key = database.signature_key(family, cs.OP_MM, None, (512, 768))
    database.write_entries(database.tier_path(tmp_path, _arch(), family), family=family,
                           arch=_arch(), lane=lane.name, entries={key: entry}, configs={},
                           soft={})
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    rt.reload()
    layer = torch.nn.Linear(768, 512, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(4, 50, 768, device="cuda", dtype=torch.bfloat16)
    big = torch.randn(1000, 768, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(quantize.quantized_linear(small, layer), layer(small))
    assert fp8.unquantized(512, 768, 200, 0) and not fp8.unquantized(512, 768, 1000, 0)
    y = quantize.quantized_linear(big, layer)
    rel = float((y.float() - layer(big).float()).abs().amax() / layer(big).float().abs().amax())
    assert 0 < rel < 0.1
    assert fp8.stats() == {}


@pytest.mark.parametrize("op", cs.OPS)
def test_bench_arms_pass_the_gate(op):
    from oasr_core.bench import BenchOptions
    from oasr_core.build import resolve_choice
    from oasr_core.runtime import get_runtime
    from oasr_core.types import Problem, Sentinel

    rt = get_runtime()
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.active_lane(cs.FAMILY, _arch())
    options = BenchOptions(lane=lane.name, resolve=functools.partial(resolve_choice, family,
                                                                     lane))
    sentinels = [Sentinel.HEURISTIC, Sentinel.TORCH, Sentinel.UNQUANTIZED]
    for m, n, k in ((8, 768, 256), (1000, 784, 1024)):
        problem = Problem(cs.FAMILY, op, cs.DTYPE, (("N", n), ("K", k)), m)
        choices = [c for c in lane.config_space if lane.supports(c, problem)]
        case = family.make_bench(problem, [*choices, *sentinels], options)
        want = {"heuristic", "torch", *(c.id for c in choices)}
        if op == cs.OP_MM:
            want.add("unquantized")
        else:
            assert "unquantized" in case.rejected
        assert set(case.arms) >= want, case.rejected
        for name, run in case.arms.items():
            verdict = case.gate(run(0))
            torch.cuda.synchronize()
            assert verdict, f"{op} m={m} {name}: {verdict.reason}"
