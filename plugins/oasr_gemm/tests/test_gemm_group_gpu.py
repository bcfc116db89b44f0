"""GPU tests of op ``group_gemm`` (run on the H200 with ``pytest -m gpu``): the op on CUDA
tensors as this version serves it, by its torch path, the loop of ``F.linear``.

No module holds a grouped launcher yet (the grouped kernel is not built), so every group is
served by torch: an untuned group of G in {3, 4, 8} problems at (N, K) in {(256, 256),
(1024, 256)} with uneven rows (1 and 0 included) is counted ``selected`` and equals the loop
bit for bit; fp32, unequal weights, biases on some problems, autograd and misaligned outputs
are counted by their reasons; the op runs inside a CUDA graph and under ``torch.compile``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from oasr_core.kernel_testing import gpu_marks

pytestmark = gpu_marks()

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
    assert oasr_gemm.group_gemm(xs, ws, None, out=out) == out
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
