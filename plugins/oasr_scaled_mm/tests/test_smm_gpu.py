"""GPU tests (run on the H200 with ``pytest -m gpu``): every config bitwise against torch.

Every config of both lanes that runs on this device is compiled (the lanes' full modules),
then run for both ops at several shapes (M = 1, 16, 100, 2152; N that no tile divides; a deep
K for Stream-K), with and without bias, fp16 and bf16 outputs, the out_scale as a value and
as a device tensor, eagerly and under CUDA-graph capture. Each output must be bitwise equal
(``torch.equal``) to the torch reference: the exact int32 accumulator, then the same fp32 ops
in the same order (:mod:`oasr_scaled_mm.reference`). Then the ops through selection, in a
graph and under torch.compile, the counted torch path, and the bench adapter's arms against
its gate.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import jit, launch, numerics, reference
from oasr_scaled_mm.feasibility import supports

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SHAPES = ((1, 768, 256), (16, 784, 512), (100, 1536, 1024), (2152, 784, 256),
          (64, 256, 8192))
"""(M, N, K); 784 = 16 x 49 is a multiple of no tile width."""


def _arch() -> str | None:
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def _cases() -> list[tuple[str, str]]:
    arch = _arch()
    if arch is None:
        return []
    return [(lane, c.id) for lane in cs.LANES for c in jit.lane_configs(lane, arch)]


CASES = _cases()


@pytest.fixture(scope="session")
def kernels() -> dict[tuple[str, str], launch.Kernel]:
    from oasr_core import jit as core_jit

    arch = _arch()
    lanes = [lane for lane in cs.LANES if jit.lane_configs(lane, arch)]
    specs = [jit.full_spec(lane, arch) for lane in lanes]
    core_jit.prebuild(specs, jobs=os.cpu_count())
    found: dict[tuple[str, str], launch.Kernel] = {}
    for lane, spec in zip(lanes, specs, strict=True):
        module = core_jit.load(spec, build_missing=False)
        found.update(launch.bind_all(module, jit.lane_configs(lane, arch)))
    return found


def _kernel(kernels, op, lane, cid) -> launch.Kernel:
    if (op, cid) not in kernels:
        pytest.fail(f"{lane}/{cid}: unit {cs.unit_name(cs.config(lane, cid), op)} did not "
                    "compile or load")
    return kernels[(op, cid)]


def _fits(config, m, n, k, op) -> bool:
    from oasr_core.types import Problem

    return supports(config, Problem(cs.FAMILY, op, "int8", (("N", n), ("K", k)), m))


@functools.cache
def _operands(m, n, k, bias, seed):
    return numerics.make_operands(m, n, k, bias=bias, device="cuda", seed=seed)


def _assert_bitwise(got, want, what):
    verdict = numerics.numerics_gate(got, want)
    assert verdict, f"{what}: {verdict.reason}"


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_config_is_bitwise_equal_to_the_reference(kernels, lane, cid):
    config = cs.config(lane, cid)
    ran = 0
    for i, (m, n, k) in enumerate(SHAPES):
        a, a_scale, w, w_scale, bias = _operands(m, n, k, i % 2 == 0, i)
        if _fits(config, m, n, k, cs.OP_MM):
            kernel = _kernel(kernels, cs.OP_MM, lane, cid)
            for out_dtype in (torch.float16, torch.bfloat16):
                got = kernel.run(a, w, a_scale, w_scale, bias, out_dtype=out_dtype)
                want = reference.scaled_mm(a, w, a_scale, w_scale, bias, out_dtype)
                torch.cuda.synchronize()
                _assert_bitwise(got, want, f"{cid} {out_dtype} m={m} n={n} k={k} "
                                           f"bias={bias is not None}")
                ran += 1
        if _fits(config, m, n, k, cs.OP_QUANT):
            kernel = _kernel(kernels, cs.OP_QUANT, lane, cid)
            y = reference.scale(reference.exact_acc(a, w), a_scale, w_scale, bias)
            scale = numerics.out_scale_for(y) * 0.5      # half the range: some saturate
            want = reference.quantize_output(y, scale)
            got = kernel.run(a, w, a_scale, w_scale, bias, out_scale=scale)
            on_device = kernel.run(a, w, a_scale, w_scale, bias,
                                   out_scale=torch.tensor([scale], device="cuda"))
            torch.cuda.synchronize()
            _assert_bitwise(got, want, f"{cid} quant m={m} n={n} k={k}")
            _assert_bitwise(on_device, want, f"{cid} quant (device out_scale) m={m}")
            assert int((want == 127).sum() + (want == -128).sum()) > 0 or m * n < 2000
            ran += 1
    assert ran >= 4, f"{cid}: only {ran} cases fit"


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_config_under_cuda_graph_capture(kernels, lane, cid):
    config = cs.config(lane, cid)
    m, n, k = 1000, 784, 1024
    a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda", seed=5)
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    qout = torch.empty(m, n, dtype=torch.int8, device="cuda")
    scale_t = torch.tensor([0.02], device="cuda")
    mm = _kernel(kernels, cs.OP_MM, lane, cid)
    quant = kernels.get((cs.OP_QUANT, cid)) if cs.serves(config, cs.OP_QUANT) else None
    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        mm.run(a, w, a_scale, w_scale, bias, out_dtype=torch.bfloat16, out=out)
        if quant is not None:
            quant.run(a, w, a_scale, w_scale, bias, out_scale=scale_t, out=qout)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        mm.run(a, w, a_scale, w_scale, bias, out_dtype=torch.bfloat16, out=out)
        if quant is not None:
            quant.run(a, w, a_scale, w_scale, bias, out_scale=scale_t, out=qout)
    fresh, fresh_scale = numerics.make_operands(m, n, k, device="cuda", seed=6)[:2]
    a.copy_(fresh)
    a_scale.copy_(fresh_scale)
    scale_t.fill_(0.03)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    _assert_bitwise(out, reference.scaled_mm(a, w, a_scale, w_scale, bias, torch.bfloat16),
                    f"{cid} graph replay")
    if quant is not None:
        _assert_bitwise(qout, reference.scaled_mm_quant(a, w, a_scale, w_scale, 0.03, bias),
                        f"{cid} quant graph replay")


def test_every_variant_gives_the_same_bits(kernels):
    m, n, k = 300, 784, 2048
    a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda", seed=7)
    outs = {cid: kernels[(cs.OP_MM, cid)].run(a, w, a_scale, w_scale, bias)
            for (op, cid) in kernels if op == cs.OP_MM}
    torch.cuda.synchronize()
    first = next(iter(outs.values()))
    assert all(torch.equal(o, first) for o in outs.values())
    assert torch.equal(first.cpu(), reference.scaled_mm(a.cpu(), w.cpu(), a_scale.cpu(),
                                                        w_scale.cpu(), bias.cpu()))


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
def test_ops_through_selection(out_dtype):
    import oasr_scaled_mm

    for m, n, k in ((1, 768, 256), (16, 1536, 512), (2152, 768, 1024)):
        a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda", seed=m)
        x = a.view(2, m // 2, k) if m % 2 == 0 else a
        b16 = bias.half()   # converted to fp32 by the op, exactly
        got = oasr_scaled_mm.scaled_mm(x, w, a_scale, w_scale, b16, out_dtype=out_dtype)
        _assert_bitwise(got.view(m, n), reference.scaled_mm(a, w, a_scale, w_scale, b16,
                                                            out_dtype), f"scaled_mm {m}")
        out = torch.empty(*x.shape[:-1], n, dtype=torch.int8, device="cuda")
        q = oasr_scaled_mm.scaled_mm_quant(x, w, a_scale, w_scale, 0.05, None, out=out)
        assert q is out
        _assert_bitwise(q.view(m, n), reference.scaled_mm_quant(a, w, a_scale, w_scale, 0.05),
                        f"scaled_mm_quant {m}")
        assert oasr_scaled_mm.select_config(n, k, m) is not None
    assert oasr_scaled_mm.stats() == {}, oasr_scaled_mm.stats()


def test_unsupported_inputs_take_the_counted_torch_path():
    import oasr_scaled_mm

    a, a_scale, w, w_scale, bias = numerics.make_operands(64, 200, 256, device="cuda")
    _assert_bitwise(oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, bias),
                    reference.scaled_mm(a, w, a_scale, w_scale, bias), "unaligned N")
    a2, s2, w2, ws2, _ = numerics.make_operands(64, 256, 256, device="cuda")
    strided = a2.t().contiguous().t()
    _assert_bitwise(oasr_scaled_mm.scaled_mm(strided, w2, s2, ws2),
                    reference.scaled_mm(a2, w2, s2, ws2), "non-contiguous")
    for m in (1, 16):   # the torch path's exact accumulator below _int_mm's 17 rows
        a3, s3, w3, ws3, _ = numerics.make_operands(m, 200, 256, device="cuda", seed=m)
        assert torch.equal(oasr_scaled_mm.scaled_mm_quant(a3, w3, s3, ws3, 0.02).cpu(),
                           reference.scaled_mm_quant(a3.cpu(), w3.cpu(), s3.cpu(), ws3.cpu(),
                                                     0.02))
    assert oasr_scaled_mm.stats() == {"torch:unaligned": 3, "torch:noncontiguous": 1}


def test_ops_inside_a_cuda_graph():
    import oasr_scaled_mm

    m, n, k = 640, 512, 768
    a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda", seed=9)
    w2, ws2 = numerics.make_operands(1, k, n, device="cuda", seed=10)[2:4]
    scale_t = torch.tensor([0.05], device="cuda")
    stream = torch.cuda.Stream()
    oasr_scaled_mm.reserve_workspace(stream=stream)

    def step():
        h = oasr_scaled_mm.scaled_mm_quant(a, w, a_scale, w_scale, scale_t, bias)
        ones = torch.full((m,), 1.0, device="cuda")
        return h, oasr_scaled_mm.scaled_mm(h, w2, ones * scale_t, ws2, out_dtype=torch.bfloat16)

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
    want_h = reference.scaled_mm_quant(a, w, a_scale, w_scale, scale_t, bias)
    _assert_bitwise(h, want_h, "graph: quant")
    _assert_bitwise(y, reference.scaled_mm(want_h, w2, torch.full((m,), 1.0, device="cuda")
                                           * scale_t, ws2, None, torch.bfloat16),
                    "graph: second GEMM")
    assert oasr_scaled_mm.stats() == {}


def test_torch_compile_runs_the_custom_ops():
    import oasr_scaled_mm

    a, a_scale, w, w_scale, bias = numerics.make_operands(256, 512, 256, device="cuda", seed=12)

    def f(a):
        return oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, bias,
                                        out_dtype=torch.bfloat16) * 2

    got = torch.compile(f, fullgraph=True)(a)
    torch.cuda.synchronize()
    _assert_bitwise(got, reference.scaled_mm(a, w, a_scale, w_scale, bias, torch.bfloat16) * 2,
                    "torch.compile")


@pytest.mark.parametrize("op", cs.OPS)
def test_bench_arms_pass_the_bitwise_gate(op):
    from oasr_core.bench import BenchOptions
    from oasr_core.build import resolve_choice
    from oasr_core.runtime import get_runtime
    from oasr_core.types import Problem, Sentinel

    rt = get_runtime()
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.active_lane(cs.FAMILY, _arch())
    options = BenchOptions(lane=lane.name, resolve=functools.partial(resolve_choice, family,
                                                                     lane))
    for m, n, k in ((8, 768, 256), (1000, 784, 1024)):
        problem = Problem(cs.FAMILY, op, "int8", (("N", n), ("K", k)), m)
        choices = [c for c in lane.config_space if lane.supports(c, problem)]
        case = family.make_bench(problem, [*choices, Sentinel.HEURISTIC, Sentinel.TORCH],
                                 options)
        assert set(case.arms) >= {"heuristic", "torch", *(c.id for c in choices)}, case.rejected
        a, a_scale, w, w_scale, bias = numerics.make_operands(m, n, k, device="cuda",
                                                              seed=options.seed)
        exact = reference.scale(reference.exact_acc(a, w), a_scale, w_scale, bias)
        heuristic = options.config_of(Sentinel.HEURISTIC, problem)
        for name, run in case.arms.items():
            out = run(0)
            verdict = case.gate(out)
            torch.cuda.synchronize()
            if not verdict and op == "scaled_mm":
                # Which side is off: the arm or the gate's yardstick (the heuristic's output).
                same = bool(torch.equal(out, exact.to(out.dtype)))
                verdict = verdict.__class__(False, verdict.error, f"{verdict.reason}; the arm "
                                            f"{'equals' if same else 'differs from'} the exact "
                                            f"reference; the heuristic is {heuristic.id}")
            assert verdict, f"{op} m={m} {name}: {verdict.reason}"
