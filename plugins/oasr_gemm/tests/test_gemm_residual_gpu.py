"""GPU tests of op ``gemm_residual`` (run on the H200 with ``pytest -m gpu``): the 3.x lane's
fused-residual kernels, ``residual + alpha * (a @ w.T + bias)`` in one epilogue.

Covered: a subset of sm90 configs spanning every schedule, Stream-K, explicit epilogue
subtiles, clusters and swapped tiles (``OASR_GEMM_RESIDUAL_GPU_CONFIGS``: a comma list of
config ids, or ``all`` for the whole lane), each at several shapes, both dtypes, with and
without bias, at several alphas, against an fp32 reference that includes the residual (the
family's numerics gate); bitwise where the kernel must reproduce an input exactly (alpha 0
gives the residual itself, read with D's layout, swapped tiles included); in place
(``out=residual``); new pointers and alphas through the prepared-parameter cache; CUDA-graph
capture; the op through selection (eager, in a graph, under ``torch.compile``), its torch
fallbacks; and a chain of dependent residual GEMMs under programmatic dependent launch.

The kernels come from one module of the subset's fused-residual units (compiled here, or
cache hits when a prebuild left them; a unit is the same object whatever module links it).
"""

from __future__ import annotations

import os

import pytest
import torch
from oasr_core import stamps
from oasr_core.kernel_testing import device_arch, gpu_marks
from oasr_core.runtime import get_runtime

from oasr_gemm import codegen, jit, launch, numerics
from oasr_gemm import config_space as cs

pytestmark = gpu_marks()

SUBSET = ("ws_64x32x64_c1x1", "ws_64x128x64_c1x1_s4", "pp_128x128x64_c1x1_e64x64",
          "co_128x128x64_c1x2", "co_256x128x64_c1x1_e128x64", "sk_128x64x64_c1x1",
          "ws_64x16x128_c1x1_swap", "co_128x144x64_c1x1_swap", "pp_128x96x64_c1x1_swap",
          "ws_128x80x64_c4x1_swap")
"""Non-persistent, ping-pong, cooperative and Stream-K kernels, explicit epilogue subtiles,
2- and 4-CTA clusters, and four swapped tiles (D^T written column-major, C read alike)."""
SHAPES = ((1, 256, 512), (77, 768, 256), (1000, 512, 1024), (2152, 1024, 512))
ALPHAS = (1.0, 0.5, -2.0)


def _selection() -> list[str]:
    arch = device_arch()
    if arch is None or not jit.lane_configs(cs.LANE_SM90, arch):
        return []
    wanted = os.environ.get("OASR_GEMM_RESIDUAL_GPU_CONFIGS", "")
    fitting = [c.id for c in jit.lane_configs(cs.LANE_SM90, arch)]
    if wanted == "all":
        return fitting
    ids = [i.strip() for i in wanted.split(",") if i.strip()] or list(SUBSET)
    return [i for i in ids if i in fitting]


SELECTION = _selection()


@pytest.fixture(scope="session")
def module():
    """The loaded module of the selection's fused-residual units (and the default config's
    own unit, which the selection tests serve the op through)."""
    from oasr_core import jit as core_jit

    arch = device_arch()
    if not SELECTION:
        pytest.skip(f"no sm90 config runs on {arch}")
    configs = [cs.config(cs.LANE_SM90, cid) for cid in SELECTION]
    default = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    spec = jit.module_spec(cs.LANE_SM90, arch, [default], residual=configs,
                           name="gemm_sm90_wgmma_residual_gpu")
    core_jit.prebuild([spec], jobs=os.cpu_count())
    return core_jit.load(spec, build_missing=False)


@pytest.fixture(scope="session")
def kernels(module) -> dict[str, launch.ResidualKernel]:
    found = {}
    for cid in SELECTION:
        config = cs.config(cs.LANE_SM90, cid)
        if codegen.residual_symbol(config) in module.exports:
            found[cid] = launch.ResidualKernel.bind(module, config)
    return found


def _kernel(kernels, cid) -> launch.ResidualKernel:
    if cid not in kernels:
        pytest.fail(f"{cid}: unit {codegen.residual_unit(cs.config(cs.LANE_SM90, cid))} did "
                    "not compile or load")
    return kernels[cid]


def _fits(config, m, n, k) -> bool:
    from oasr_core.types import Problem

    from oasr_gemm.feasibility import supports

    return supports(config, Problem("gemm", "gemm_residual", "fp16", (("N", n), ("K", k)), m))


def _operands(m, n, k, dtype, *, bias=True, seed=0):
    a, w, b = numerics.make_operands(m, n, k, dtype, bias=bias, device="cuda", seed=seed)
    return a, w, b, numerics.make_residual(m, n, dtype, device="cuda", seed=seed)


def _check(out, a, w, b, r, alpha, what):
    ref = numerics.reference(a, w, b, None, r, alpha)
    base = numerics.torch_output(a, w, b, None, r, alpha)
    verdict = numerics.numerics_gate(out, base, ref)
    assert verdict, f"{what}: {verdict.reason} (err {verdict.error:.3g}, torch " \
                    f"{verdict.torch_error:.3g})"


@pytest.mark.parametrize("cid", SELECTION)
def test_config_matches_fp32_reference(kernels, cid):
    kernel = _kernel(kernels, cid)
    ran = 0
    for dtype in ("fp16", "bf16"):
        for i, (m, n, k) in enumerate(SHAPES):
            if not _fits(kernel.config, m, n, k):
                continue
            alpha = ALPHAS[i % len(ALPHAS)]
            a, w, b, r = _operands(m, n, k, dtype, bias=i != 0, seed=i)
            if i == 1:
                a, r = a.view(7, 11, k), r.view(7, 11, n)
            out = kernel.run(a, w, b, r, alpha)
            torch.cuda.synchronize()
            _check(out, a, w, b, r, alpha, f"{cid} {dtype} m={m} n={n} k={k} alpha={alpha}")
            ran += 1
    assert ran >= 4, f"{cid}: only {ran} shapes fit"


@pytest.mark.parametrize("cid", SELECTION)
def test_alpha_zero_reproduces_the_residual_bitwise(kernels, cid):
    """With alpha 0 the output is exactly C: the residual is read with D's layout (row-major
    D, or D^T column-major for a swapped tile), every element from its own place."""
    kernel = _kernel(kernels, cid)
    m, n, k = 300, 512, 256
    a, w, b, r = _operands(m, n, k, "bf16", seed=3)
    out = kernel.run(a, w, b, r, 0.0)
    torch.cuda.synchronize()
    assert torch.equal(out, r), f"{cid}: alpha 0 does not give the residual back"


@pytest.mark.parametrize("cid", SELECTION[:4] + [c for c in SELECTION if "swap" in c][:2])
def test_in_place_and_new_pointers_and_alphas(kernels, cid):
    """``out=residual`` (in place), then operands, outputs and alphas changing between calls
    at one shape: each call gets its own prepared parameters (the residual's descriptor and
    alpha are in the call key)."""
    kernel = _kernel(kernels, cid)
    m, n, k = 640, 256, 512
    sets = [_operands(m, n, k, "fp16", seed=s) for s in range(3)]
    a, w, b, r = sets[0]
    expect = numerics.reference(a, w, b, None, r, 0.5)
    base = numerics.torch_output(a, w, b, None, r, 0.5)
    got = kernel.run(a, w, b, r, 0.5, out=r)
    torch.cuda.synchronize()
    assert got is r
    assert numerics.numerics_gate(r, base, expect), f"{cid} in place"
    outs = [torch.empty(m, n, dtype=torch.float16, device="cuda") for _ in range(2)]
    for which, o, alpha in ((1, 0, 1.0), (2, 1, 0.5), (1, 1, -1.0), (2, 0, 1.0), (1, 0, 0.25)):
        a, w, b, r = sets[which]
        kernel.run(a, w, b, r, alpha, out=outs[o])
        torch.cuda.synchronize()
        _check(outs[o], a, w, b, r, alpha, f"{cid} operands {which} into out {o} alpha {alpha}")


@pytest.mark.parametrize("cid", SELECTION)
def test_config_under_cuda_graph_capture(kernels, cid):
    kernel = _kernel(kernels, cid)
    m, n, k = 1000, 512, 1024
    dtype = ("fp16", "bf16")[SELECTION.index(cid) % 2]
    a, w, b, r = _operands(m, n, k, dtype, seed=5)
    out = torch.empty_like(r)
    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kernel.run(a, w, b, r, 0.5, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel.run(a, w, b, r, 0.5, out=out)
    fresh_a, _, _, fresh_r = _operands(m, n, k, dtype, seed=6)
    a.copy_(fresh_a)
    r.copy_(fresh_r)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    _check(out, a, w, b, r, 0.5, f"{cid} graph replay {dtype}")


@pytest.fixture
def residual_tier(tmp_path, monkeypatch, module):
    """A user tier serving gemm_residual with the lane default at every M for the widths the
    op tests call, and a library holding that config's kernels (installed as the production
    module would hold them)."""
    from oasr_core import database, reload

    arch = device_arch()
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    entries = {database.signature_key(family, "gemm_residual", "half", dims):
               database.Entry(regions=((None, "default"),))
               for dims in ((1024, 256), (256, 1024), (512, 512))}
    database.write_entries(database.tier_path(tmp_path, arch, family), family=family, arch=arch,
                           lane=lane, entries=entries,
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    reload()
    default = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    launch.install_library(cs.LANE_SM90, arch, {
        default.id: launch.Kernel.bind(module, default),
        launch.residual_key(default.id): launch.ResidualKernel.bind(module, default)})
    yield
    launch.forget_libraries()
    monkeypatch.undo()
    reload()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_op_through_selection(residual_tier, dtype):
    import oasr_gemm

    name = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    for m, n, k in ((16, 1024, 256), (1500, 256, 1024)):
        a, w, b, r = _operands(m, n, k, name, seed=m)
        x, res = (a.view(2, m // 2, k), r.view(2, m // 2, n)) if m % 2 == 0 else (a, r)
        _check(oasr_gemm.gemm_residual(x, w, b, res, 0.5), x, w, b, res, 0.5,
               f"gemm_residual {name} {m}")
        _check(oasr_gemm.gemm_residual(x, w, None, res), x, w, None, res, 1.0,
               f"gemm_residual no bias {name} {m}")
        out = torch.empty_like(res)
        assert oasr_gemm.gemm_residual(x, w, b, res, 0.5, out=out) is out
        _check(out, x, w, b, res, 0.5, f"gemm_residual out= {name} {m}")
    assert oasr_gemm.stats() == {}, oasr_gemm.stats()
    assert get_runtime().counts[("gemm", "gemm_residual", "user")] == 2, "one per shape"


def test_unsupported_and_untuned_calls_take_the_counted_torch_path(residual_tier):
    import oasr_gemm

    a, w, b, r = _operands(64, 512, 512, "fp16", seed=1)
    buf = torch.empty(64 * 512 + 1, dtype=torch.float16, device="cuda")
    shifted = buf[1:].view(64, 512)
    shifted.copy_(r)
    _check(oasr_gemm.gemm_residual(a, w, b, shifted, 0.5), a, w, b, r, 0.5, "misaligned")
    _check(oasr_gemm.gemm_residual(a, w, b, r.t().contiguous().t(), 0.5), a, w, b, r, 0.5,
           "non-contiguous residual")
    a2, w2, b2, r2 = _operands(64, 768, 256, "fp16", seed=2)  # no entry: untuned
    _check(oasr_gemm.gemm_residual(a2, w2, b2, r2, 0.5), a2, w2, b2, r2, 0.5, "untuned")
    assert oasr_gemm.stats() == {"torch:misaligned": 1, "torch:noncontiguous": 1,
                                 "torch:selected": 1}


def test_op_inside_a_cuda_graph(residual_tier):
    import oasr_gemm

    a, w, b, r = _operands(640, 512, 512, "fp16", seed=9)
    _, w2, b2, _ = _operands(1, 512, 512, "fp16", seed=10)
    stream = torch.cuda.Stream()
    oasr_gemm.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        oasr_gemm.gemm_residual(oasr_gemm.gemm_residual(a, w, b, r, 0.5), w2, b2, r)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        h = oasr_gemm.gemm_residual(a, w, b, r, 0.5)
        y = oasr_gemm.gemm_residual(h, w2, b2, r)
    a.copy_(_operands(640, 512, 512, "fp16", seed=11)[0])
    graph.replay()
    torch.cuda.synchronize()
    _check(h, a, w, b, r, 0.5, "graph: first op")
    _check(y, h, w2, b2, r, 1.0, "graph: second op")
    assert oasr_gemm.stats() == {}


def test_torch_compile_runs_the_custom_op(residual_tier):
    import oasr_gemm

    a, w, b, r = _operands(256, 512, 512, "bf16", seed=12)

    def block(x, res):
        return oasr_gemm.gemm_residual(x, w, b, res, 0.5) * 2

    compiled = torch.compile(block, fullgraph=True)
    out = compiled(a, r)
    torch.cuda.synchronize()
    _check(out / 2, a, w, b, r, 0.5, "torch.compile")
    assert oasr_gemm.stats() == {}


@pytest.mark.parametrize("cid", [c for c in SELECTION if not c.startswith("sk_")][:3])
def test_dependent_residual_launches_read_what_the_previous_one_wrote(kernels, cid):
    """Programmatic dependent launch: x_{i+1} = x_i + 0.5 * (x_i @ W_i^T), each kernel reading
    the previous output as both its A operand and its residual; outputs poisoned with NaN by
    a torch kernel first, checked eagerly and in a replayed graph, with the flag on and off."""
    kernel = _kernel(kernels, cid)
    m, width, depth = 4096, 512, 4
    torch.manual_seed(3)
    x0 = torch.randn(m, width, device="cuda", dtype=torch.float16)
    ws = [torch.randn(width, width, device="cuda", dtype=torch.float16) / width ** 0.5
          for _ in range(depth)]
    outs = [torch.empty(m, width, device="cuda", dtype=torch.float16) for _ in range(depth)]
    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)
    dev = torch.cuda.current_device()

    def chain(pdl: bool) -> None:
        for o in outs:
            o.fill_(float("nan"))
        x = x0
        for w, o in zip(ws, outs, strict=True):
            prepared = kernel.prepare("fp16", m, width, width, None, pdl=pdl)
            status = prepared.launch(dev, torch._C._cuda_getCurrentRawStream(dev),
                                     x.data_ptr(), w.data_ptr(), 0, x.data_ptr(), o.data_ptr(),
                                     0.5)
            assert status == 0, launch.status_text(status)
            x = o

    def verify(what: str) -> None:
        torch.cuda.synchronize()
        x = x0
        for i, (w, o) in enumerate(zip(ws, outs, strict=True)):
            _check(o, x, w, None, x, 0.5, f"{cid} {what} link {i}")
            x = o

    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for pdl in (True, False):
            chain(pdl)
            verify(f"eager pdl={pdl}")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            chain(True)
    x0.copy_(torch.randn(m, width, device="cuda", dtype=torch.float16))
    graph.replay()
    verify("graph replay")
