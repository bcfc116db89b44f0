"""GPU tests of op ``group_gemm`` (run on the H200 with ``pytest -m gpu``): the grouped
launchers of the 2.x lane's split-free configs, and the op's torch path on CUDA.

Kernels: a subset of the configs with grouped units (``OASR_GEMM_GROUP_GPU_CONFIGS``: a comma
list of ids, or ``all``), both dtypes, with and without bias, at G in {3, 4, 8} problems of
(N, K) in {(256, 256), (1024, 256)} with uneven rows (1 and 0 included), against the fp32
linear (the family's numerics gate); new operands through one prepared call; a CUDA graph
replaying its own records after another group ran on the stream. The op: an untuned group
of those shapes is counted ``selected`` and equals the loop of ``F.linear`` bit for bit; fp32,
unequal weights, biases on some problems and autograd are counted by their reasons; the op
runs inside a CUDA graph and under ``torch.compile``. On an sm90 device the tiers' lane is
the 3.x one, which has no grouped kernel: the op through selection runs its kernels on
sm80..sm89 devices only (not checked here).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from oasr_core.kernel_testing import device_arch, gpu_marks

from oasr_gemm import codegen, jit, launch, numerics
from oasr_gemm import config_space as cs

pytestmark = gpu_marks()

SUBSET = ("b128x128x64_w64x64x64_s3", "b64x64x64_w32x32x64_s3", "b32x128x64_w32x32x64_s3",
          "b16x64x64_w16x32x64_s3")
"""2.x tiles of several widths."""
SHAPES = ((256, 256), (1024, 256))


def _selection() -> list[str]:
    arch = device_arch()
    if arch is None:
        return []
    fitting = [c.id for c in jit.lane_configs(cs.LANE_SM80, arch) if cs.has_group(c)]
    wanted = os.environ.get("OASR_GEMM_GROUP_GPU_CONFIGS", "")
    if wanted == "all":
        return fitting
    ids = [i.strip() for i in wanted.split(",") if i.strip()] or list(SUBSET)
    return [i for i in ids if i in fitting]


SELECTION = _selection()


@pytest.fixture(scope="session")
def kernels() -> dict[str, launch.GroupKernel]:
    """The selection's grouped launchers by config id, one module (compiled here, or cache
    hits)."""
    from oasr_core import jit as core_jit

    if not SELECTION:
        pytest.skip(f"no grouped config runs on {device_arch()}")
    configs = [cs.config(cs.LANE_SM80, cid) for cid in SELECTION]
    spec = jit.module_spec(cs.LANE_SM80, device_arch(), (), name="gemm_sm80_mma_group_gpu",
                           group=configs)
    core_jit.prebuild([spec], jobs=os.cpu_count())
    module = core_jit.load(spec, build_missing=False)
    return {c.id: launch.GroupKernel.bind(module, c) for c in configs
            if codegen.group_symbol(c) in module.exports}


def _check(outs, xs, ws, bs, what):
    for g, (y, x, w) in enumerate(zip(outs, xs, ws, strict=True)):
        b = None if bs is None else bs[g]
        if x.shape[0] == 0:
            assert y.shape == (0, w.shape[0]), what
            continue
        ref = numerics.reference(x, w, b)
        verdict = numerics.numerics_gate(y, numerics.torch_output(x, w, b), ref)
        assert verdict, f"{what} problem {g}: {verdict.reason} (err {verdict.error:.3g}, " \
                        f"torch {verdict.torch_error:.3g})"


@pytest.mark.parametrize("cid", SELECTION)
def test_config_matches_the_fp32_linears(kernels, cid):
    kernel = kernels.get(cid)
    if kernel is None:
        pytest.fail(f"{cid}: its grouped unit did not compile or load")
    for dtype in (torch.float16, torch.bfloat16):
        for groups, rows in ROWS.items():
            for n, k in SHAPES:
                for bias in (True, False):
                    xs, ws, bs = _group(rows, n, k, dtype, bias, seed=groups + n)
                    outs = kernel.run(xs, ws, bs)
                    torch.cuda.synchronize()
                    _check(outs, xs, ws, bs, f"{cid} {dtype} G={groups} N={n} K={k} "
                                             f"bias={bias}")


def test_new_operands_and_a_graph_replaying_its_own_records(kernels):
    kernel = kernels[SELECTION[0]]
    rows, (n, k) = ROWS[4], SHAPES[1]
    xs, ws, bs = _group(rows, n, k)
    call = kernel.prepare("fp16", rows, n, k)
    outs = [torch.empty(r, n, device="cuda", dtype=torch.float16) for r in rows]
    launch.reserve_workspace()
    assert call(0, xs, ws, bs, outs) == 0
    torch.cuda.synchronize()
    _check(outs, xs, ws, bs, "first operands")
    xs2, ws2, bs2 = _group(rows, n, k, seed=5)
    outs2 = [torch.empty_like(o) for o in outs]
    assert call(0, xs2, ws2, bs2, outs2) == 0
    torch.cuda.synchronize()
    _check(outs2, xs2, ws2, bs2, "new operands, one prepared call")

    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        assert call(0, xs, ws, bs, outs) == 0
    # Another group on the graph's stream rewrites the workspace's records; the replay
    # writes its own again before its grouped kernel.
    with torch.cuda.stream(stream):
        assert call(0, xs2, ws2, bs2, outs2) == 0
    fresh, _, _ = _group(rows, n, k, seed=9)
    for x, f in zip(xs, fresh, strict=True):
        x.copy_(f)
    for o in outs:
        o.zero_()
    with torch.cuda.stream(stream):
        graph.replay()
    torch.cuda.synchronize()
    _check(outs, xs, ws, bs, "graph replay")

ROWS = {3: (1, 0, 333), 4: (17, 1, 0, 1000), 8: (64, 1, 0, 5, 128, 7, 300, 2)}
"""Rows of each problem per group size: uneven, with 1 and 0 rows."""


def _group(rows, n, k, dtype=torch.float16, bias=True, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    xs = [torch.randn(r, k, device="cuda", generator=g).to(dtype) for r in rows]
    ws = [(torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(dtype) for _ in rows]
    bs = [torch.randn(n, device="cuda", generator=g).to(dtype) for _ in rows] if bias else None
    return xs, ws, bs


def _loop(xs, ws, bs):
    return [F.linear(x, w, b) for x, w, b in zip(xs, ws, bs or [None] * len(xs), strict=True)]


@pytest.mark.parametrize("groups", sorted(ROWS))
@pytest.mark.parametrize(("n", "k"), [(256, 256), (1024, 256)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_untuned_group_is_the_loop_of_linears(groups, n, k, dtype):
    import oasr_gemm

    xs, ws, bs = _group(ROWS[groups], n, k, dtype)
    got = oasr_gemm.group_gemm(xs, ws, bs)
    assert all(torch.equal(g, w) for g, w in zip(got, _loop(xs, ws, bs), strict=True))
    out = [torch.empty(r, n, device="cuda", dtype=dtype) for r in ROWS[groups]]
    got = oasr_gemm.group_gemm(xs, ws, None, out=out)
    assert all(r is o for r, o in zip(got, out, strict=True))
    assert all(torch.equal(o, w) for o, w in zip(out, _loop(xs, ws, None), strict=True))
    # The group is resolved once: a second call is a memo hit, counted selected again.
    assert oasr_gemm.stats() == {"torch:selected": 2}


def test_unsupported_groups_are_counted_by_reason():
    import oasr_gemm

    xs, ws, bs = _group((5, 1, 9), 256, 256)
    x32, w32, b32 = ([t.float() for t in ts] for ts in (xs, ws, bs))
    checks = {
        "dtype": (x32, w32, b32),
        "unequal": (xs, [ws[0], ws[1], torch.randn(128, 256, device="cuda").half()], None),
        "bias": (xs, ws, [bs[0], None, bs[2]]),
    }
    for reason, (gx, gw, gb) in checks.items():
        got = oasr_gemm.group_gemm(gx, gw, gb)
        assert all(torch.equal(g, w) for g, w in zip(got, _loop(gx, gw, gb), strict=True)), reason
    with torch.enable_grad():
        wg = [w.clone().requires_grad_() for w in ws]
        sum(y.float().sum() for y in oasr_gemm.group_gemm(xs, wg, bs)).backward()
        assert all(w.grad is not None for w in wg)
    assert oasr_gemm.stats() == {"torch:dtype": 1, "torch:unequal": 1, "torch:bias": 1,
                                 "torch:autograd": 1}


def test_the_op_inside_a_cuda_graph_and_under_torch_compile():
    import oasr_gemm

    xs, ws, bs = _group(ROWS[4], 1024, 256)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        oasr_gemm.group_gemm(xs, ws, bs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        ys = oasr_gemm.group_gemm(xs, ws, bs)
    fresh, _, _ = _group(ROWS[4], 1024, 256, seed=1)
    for x, f in zip(xs, fresh, strict=True):
        x.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(y, w) for y, w in zip(ys, _loop(xs, ws, bs), strict=True))

    def project(xs, ws, bs):
        return [y * 2 for y in oasr_gemm.group_gemm(xs, ws, bs)]

    got = torch.compile(project, fullgraph=True)(xs, ws, bs)
    assert all(torch.allclose(g, 2 * w) for g, w in zip(got, _loop(xs, ws, bs), strict=True))
