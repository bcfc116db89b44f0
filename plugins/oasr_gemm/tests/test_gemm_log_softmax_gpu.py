"""GPU tests of op ``gemm_log_softmax`` (run on the H200 with ``pytest -m gpu``): a config's
GEMM writing the logits, then the row log-softmax in place over them.

Covered: the row kernel alone against an fp32 reference at row lengths on each of its paths
(a warp a row, a CTA a row, two passes) and with -inf and NaN logits; a subset of each lane's
configs (``OASR_GEMM_LOG_SOFTMAX_GPU_CONFIGS``: a comma list of config ids, or ``all``)
composed with it at the CTC heads' vocabularies (1024 and 5008, and 32 and 264, the 29- and
257-class heads padded to a multiple of 8) and widths K 256 and 512, both dtypes, with and
without bias, against the fp32 log-softmax of fp32 logits (the family's numerics gate);
in place over a reused output and new pointers; CUDA-graph capture; the op through
selection (eager, in a graph, under ``torch.compile``); the counted torch path for the
vocabularies the kernels do not take (29, 257), misaligned and autograd calls, an untuned
shape, and a refused row kernel.
"""

from __future__ import annotations

import os

import pytest
import torch
from oasr_core import stamps
from oasr_core.kernel_testing import device_arch, gpu_marks, subset_selection
from oasr_core.runtime import get_runtime

from oasr_gemm import codegen, jit, launch, log_softmax, numerics
from oasr_gemm import config_space as cs

pytestmark = gpu_marks()

OP = cs.LOG_SOFTMAX_OP
SUBSET = {
    cs.LANE_SM90: ("ws_64x128x64_c1x1_s4", "ws_64x32x64_c1x1", "pp_128x128x64_c1x1",
                   "co_128x256x64_c1x2", "sk_128x64x64_c1x1", "ws_64x16x128_c1x1_swap",
                   "co_128x144x64_c1x1_swap"),
    cs.LANE_SM80: ("b128x128x64_w64x64x64_s3", "b64x64x64_w32x32x64_s3",
                   "b32x128x64_w32x32x64_s3", "b64x128x64_w32x64x64_s3_sk",
                   "b32x64x64_w16x32x64_s3_pk4"),
}
"""Per lane: non-persistent, ping-pong, cooperative (2-CTA cluster), Stream-K and swapped
3.x tiles; 2.x tiles of several widths, Stream-K and parallel split-K."""
VOCABS = (1024, 5008, 32, 264)
WIDTHS = (256, 512)
ROWS = (1, 77, 1000)


SELECTION = subset_selection(SUBSET, jit.lane_configs, "OASR_GEMM_LOG_SOFTMAX_GPU_CONFIGS")
CASES = [(lane, cid) for lane, ids in SELECTION.items() for cid in ids]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="session")
def rows_fn():
    """The row log-softmax for this GPU's arch (compiled here, seconds, or a cache hit)."""
    from oasr_core import jit as core_jit

    core_jit.prebuild([log_softmax.spec(device_arch())], jobs=1)
    fn = log_softmax.KERNEL.get(device_arch())
    if fn is None:
        pytest.fail(f"the row log-softmax did not build or load for {device_arch()}")
    return fn


@pytest.fixture(scope="session")
def kernels() -> dict[str, launch.Kernel]:
    """The selection's GEMM kernels, one module per lane (compiled here, or cache hits)."""
    from oasr_core import jit as core_jit

    arch = device_arch()
    if not SELECTION:
        pytest.skip(f"no gemm config runs on {arch}")
    found = {}
    for lane, ids in SELECTION.items():
        configs = [cs.config(lane, cid) for cid in ids]
        spec = jit.module_spec(lane, arch, configs, name=f"{jit.MODULE_PREFIX[lane]}_lsm_gpu")
        core_jit.prebuild([spec], jobs=os.cpu_count())
        module = core_jit.load(spec, build_missing=False)
        found.update({c.id: launch.Kernel.bind(module, c) for c in configs
                      if codegen.symbol(c) in module.exports})
    return found


def _check(out, a, w, b, what):
    ref = numerics.reference(a, w, b, log_softmax=True)
    base = numerics.torch_output(a, w, b, log_softmax=True)
    verdict = numerics.numerics_gate(out, base, ref)
    assert verdict, f"{what}: {verdict.reason} (err {verdict.error:.3g}, torch " \
                    f"{verdict.torch_error:.3g})"


def _fits(config, m, n, k) -> bool:
    from oasr_core.types import Problem

    from oasr_gemm.feasibility import supports

    return supports(config, Problem("gemm", OP, "fp16", (("N", n), ("K", k)), m))


def _call(kernel, rows_fn, dtype, m, n, k) -> log_softmax.LogSoftmaxCall:
    return log_softmax.compose(kernel.prepare(dtype, m, n, k, None), device_arch(),
                               codegen.DTYPE_CODES[dtype], m, n)


def _run(call, a, w, b, out) -> None:
    dev = a.get_device()
    status = call(dev, a.data_ptr(), w.data_ptr(), b.data_ptr() if b is not None else 0,
                  out.data_ptr())
    assert status == 0, launch.status_text(status)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("n", [8, 32, 264, 1024, 1032, 5008, 8192, 8200, 40000])
def test_row_kernel_matches_the_fp32_reference(rows_fn, dtype, n):
    """Rows of one warp (n <= 1024), of one CTA in registers (<= 8192) and in two passes."""
    gen = torch.Generator(device="cuda").manual_seed(n)
    for rows in (1, 5, 333):
        x = (torch.randn(rows, n, generator=gen, device="cuda") * 4).to(DTYPES[dtype])
        got = x.clone()
        assert log_softmax.log_softmax_rows_(got, device_arch())
        torch.cuda.synchronize()
        ref = torch.log_softmax(x.float(), dim=-1)
        verdict = numerics.numerics_gate(got, torch.log_softmax(x, dim=-1), ref)
        assert verdict, f"n={n} rows={rows} {dtype}: {verdict.reason}"


def test_row_kernel_on_infinite_and_nan_logits(rows_fn):
    x = torch.randn(4, 2048, device="cuda", dtype=torch.float16)
    x[0, ::3] = float("-inf")
    x[1, 5] = float("nan")
    x[2, :] = float("-inf")
    x[3, 7] = float("inf")
    for n in (2048, 512):
        got = x[:, :n].contiguous()
        want = torch.log_softmax(got.float(), dim=-1).half()
        assert log_softmax.log_softmax_rows_(got, device_arch())
        torch.cuda.synchronize()
        finite = torch.isfinite(want)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), n
        assert torch.equal(torch.isinf(got), torch.isinf(want)), n
        assert torch.allclose(got[finite].float(), want[finite].float(), atol=2e-2), n


@pytest.mark.parametrize("lane,cid", CASES)
def test_config_and_row_kernel_match_the_fp32_reference(kernels, rows_fn, lane, cid):
    if cid not in kernels:
        pytest.fail(f"{cid}: its unit did not compile or load")
    kernel = kernels[cid]
    ran = 0
    for dtype in ("fp16", "bf16"):
        for i, n in enumerate(VOCABS):
            for k in WIDTHS:
                m = ROWS[(i + k // 256) % len(ROWS)]
                if not _fits(kernel.config, m, n, k):
                    continue
                a, w, b = numerics.make_operands(m, n, k, dtype, bias=i != 2, device="cuda",
                                                 seed=i + k)
                out = torch.empty(m, n, dtype=a.dtype, device="cuda")
                _run(_call(kernel, rows_fn, dtype, m, n, k), a, w, b, out)
                torch.cuda.synchronize()
                _check(out, a, w, b, f"{lane}/{cid} {dtype} m={m} n={n} k={k}")
                ran += 1
    assert ran >= 8, f"{cid}: only {ran} shapes fit"


@pytest.mark.parametrize("lane,cid", CASES[:2] + CASES[-2:])
def test_in_place_over_a_reused_output_with_new_operands(kernels, rows_fn, lane, cid):
    """One output buffer takes the logits and then their log-softmax, call after call, with
    operands changing between calls (new pointers through the prepared-parameter cache)."""
    kernel = kernels[cid]
    m, n, k = 640, 5008, 256
    sets = [numerics.make_operands(m, n, k, "fp16", device="cuda", seed=s) for s in range(3)]
    out = torch.empty(m, n, dtype=torch.float16, device="cuda")
    call = _call(kernel, rows_fn, "fp16", m, n, k)
    for which in (0, 1, 2, 1, 0):
        a, w, b = sets[which]
        _run(call, a, w, b, out)
        torch.cuda.synchronize()
        _check(out, a, w, b, f"{cid} operands {which}")


@pytest.mark.parametrize("lane,cid", CASES[:1] + CASES[-1:])
def test_config_and_row_kernel_under_cuda_graph_capture(kernels, rows_fn, lane, cid):
    kernel = kernels[cid]
    m, n, k = 1000, 1024, 512
    a, w, b = numerics.make_operands(m, n, k, "bf16", device="cuda", seed=5)
    out = torch.empty(m, n, dtype=a.dtype, device="cuda")
    call = _call(kernel, rows_fn, "bf16", m, n, k)
    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _run(call, a, w, b, out)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        _run(call, a, w, b, out)
    a.copy_(numerics.make_operands(m, n, k, "bf16", device="cuda", seed=6)[0])
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    _check(out, a, w, b, f"{cid} graph replay")


@pytest.fixture
def head_tier(tmp_path, monkeypatch, kernels):
    """A user tier serving gemm_log_softmax with the sm90 lane default at every M for the CTC
    heads the op tests call, and a library holding that config's kernel."""
    from oasr_core import database, reload

    arch = device_arch()
    lane_name = cs.LANE_SM90 if cs.LANE_SM90 in SELECTION else cs.LANE_SM80
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(lane_name)
    entries = {database.signature_key(family, OP, "half", dims):
               database.Entry(regions=((None, "default"),))
               for dims in ((5008, 256), (1024, 512), (264, 256))}
    database.write_entries(database.tier_path(tmp_path, arch, family), family=family, arch=arch,
                           lane=lane, entries=entries,
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    reload()
    from oasr_core import jit as core_jit

    default = cs.config(lane_name, cs.DEFAULTS[lane_name])
    spec = jit.module_spec(lane_name, arch, [default],
                           name=f"{jit.MODULE_PREFIX[lane_name]}_lsm_default")
    core_jit.prebuild([spec], jobs=os.cpu_count())
    module = core_jit.load(spec, build_missing=False)
    launch.install_library(lane_name, arch, {default.id: launch.Kernel.bind(module, default)})
    yield
    launch.forget_libraries()
    monkeypatch.undo()
    reload()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_op_through_selection(head_tier, rows_fn, dtype):
    import oasr_gemm

    for m, n, k in ((16, 5008, 256), (1500, 1024, 512), (300, 264, 256)):
        a, w, b = numerics.make_operands(m, n, k, dtype, device="cuda", seed=m)
        x = a.view(2, m // 2, k)
        _check(oasr_gemm.gemm_log_softmax(x, w, b), x, w, b, f"{dtype} m={m} n={n}")
        _check(oasr_gemm.gemm_log_softmax(x, w), x, w, None, f"{dtype} no bias m={m} n={n}")
        out = torch.empty(2, m // 2, n, dtype=a.dtype, device="cuda")
        assert oasr_gemm.gemm_log_softmax(x, w, b, out=out) is out
        _check(out, x, w, b, f"{dtype} out= m={m} n={n}")
    assert oasr_gemm.stats() == {}, oasr_gemm.stats()
    assert get_runtime().counts[("gemm", OP, "user")] == 3, "one per shape"


def test_op_inside_a_cuda_graph_and_under_torch_compile(head_tier, rows_fn):
    import oasr_gemm

    a, w, b = numerics.make_operands(640, 5008, 256, "fp16", device="cuda", seed=9)
    stream = torch.cuda.Stream()
    oasr_gemm.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        oasr_gemm.gemm_log_softmax(a, w, b)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        y = oasr_gemm.gemm_log_softmax(a, w, b)
    a.copy_(numerics.make_operands(640, 5008, 256, "fp16", device="cuda", seed=10)[0])
    graph.replay()
    torch.cuda.synchronize()
    _check(y, a, w, b, "graph")

    def head(x):
        return oasr_gemm.gemm_log_softmax(x, w, b) * 2

    out = torch.compile(head, fullgraph=True)(a)
    torch.cuda.synchronize()
    _check(out / 2, a, w, b, "torch.compile")
    assert oasr_gemm.stats() == {}


def test_unsupported_untuned_and_refused_calls_take_the_counted_torch_path(head_tier, rows_fn,
                                                                            monkeypatch):
    import oasr_gemm

    for n in (29, 257):  # a char or BPE-256 head unpadded: no kernel takes the rows
        a, w, b = numerics.make_operands(64, n, 256, "fp16", device="cuda", seed=n)
        _check(oasr_gemm.gemm_log_softmax(a, w, b), a, w, b, f"vocab {n}")
    a, w, b = numerics.make_operands(64, 5008, 256, "fp16", device="cuda", seed=1)
    buf = torch.empty(64 * 5008 + 1, dtype=torch.float16, device="cuda")
    shifted = buf[1:].view(64, 5008)
    assert oasr_gemm.gemm_log_softmax(a, w, b, out=shifted) is shifted
    _check(shifted, a, w, b, "misaligned out")
    with torch.enable_grad():
        wg = w.clone().requires_grad_()
        _check(oasr_gemm.gemm_log_softmax(a, wg, b).detach(), a, w, b, "autograd")
    a2, w2, b2 = numerics.make_operands(64, 2048, 256, "fp16", device="cuda", seed=2)
    _check(oasr_gemm.gemm_log_softmax(a2, w2, b2), a2, w2, b2, "untuned")
    assert oasr_gemm.stats() == {"torch:unaligned": 2, "torch:misaligned": 1,
                                 "torch:autograd": 1, "torch:selected": 1}
    # A row kernel that refuses: the GEMM ran, the torch path recomputes the whole call.
    oasr_gemm.reset_stats()
    oasr_gemm.ops.clear_memo()
    monkeypatch.setattr(log_softmax.KERNEL, "get", lambda arch: lambda *args: 6)
    a3, w3, b3 = numerics.make_operands(128, 1024, 512, "fp16", device="cuda", seed=3)
    with pytest.warns(RuntimeWarning, match="refused"):
        _check(oasr_gemm.gemm_log_softmax(a3, w3, b3), a3, w3, b3, "refused")
    _check(oasr_gemm.gemm_log_softmax(a3, w3, b3), a3, w3, b3, "refused shape, again")
    assert oasr_gemm.stats() == {"torch:refused": 1, "torch:selected": 1}
