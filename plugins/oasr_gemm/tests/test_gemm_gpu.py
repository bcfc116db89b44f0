"""GPU tests (run on the H200 with ``pytest -m gpu``): kernels against an fp32 reference.

Covered: every config of the lane production set on this device (the default, the coverage
basis and what the shipped tuning tiers reference) plus a spread sample of both lanes' spaces
(``OASR_GEMM_GPU_SAMPLE``, default 28; every config of a lane whose whole-space module is
already prebuilt, e.g. by ``benchmarks/gemm_vs_torch.py``), each at several shapes, both
dtypes, both ops (gemm with and without bias, gemm_activation with ReLU / GELU / SiLU),
eagerly and under CUDA-graph capture; the ops through selection, the torch fallbacks, the
prepared-parameter cache with changing pointers, torch.compile, and chains of dependent gemms
under programmatic dependent launch. Correctness is the family's numerics gate: within 4x of
torch's own relative error against fp32, no NaN/Inf.
"""

from __future__ import annotations

import os

import pytest
import torch
from oasr_core.kernel_testing import device_arch, gpu_marks

from oasr_gemm import codegen, jit, launch, numerics
from oasr_gemm import config_space as cs
from oasr_gemm.feasibility import supports

pytestmark = gpu_marks()

SAMPLE = int(os.environ.get("OASR_GEMM_GPU_SAMPLE", "28"))
SHAPES = ((1, 256, 512), (77, 768, 256), (1000, 512, 1024), (2152, 1024, 512))
ACTS = (None, "relu", "gelu", "silu")


def _lanes(arch: str) -> tuple[str, ...]:
    return tuple(lane for lane in (cs.LANE_SM90, cs.LANE_SM80) if jit.lane_configs(lane, arch))


def _shipped_references(lane: str, arch: str) -> frozenset[str]:
    """What the installed (system/user) tiers reference, read before tests isolate the tiers."""
    try:
        from oasr_core.plugins import make_plugin_manager
        from oasr_core.runtime import Runtime

        import oasr_gemm.hooks

        pm = make_plugin_manager(load_entrypoints=False)
        pm.register(oasr_gemm.hooks, name="gemm")
        return Runtime(pm=pm).referenced_configs("gemm", arch, lane)
    except Exception:  # no tier files: the production set is default + basis
        return frozenset()


def _prebuilt(lane: str, arch: str) -> bool:
    """Whether the lane's whole-space module is already compiled (then testing every config
    of the lane costs no compile)."""
    from oasr_core import jit as core_jit

    try:
        return core_jit.is_prebuilt(jit.full_spec(lane, arch))
    except Exception:  # no toolchain: the fixture reports it
        return False


def _selection() -> dict[str, list[str]]:
    """Per lane: the default lane's production set plus a spread sample of the rest (every
    config of a lane whose whole-space module is prebuilt)."""
    arch = device_arch()
    if arch is None:
        return {}
    chosen: dict[str, list[str]] = {}
    lanes = _lanes(arch)
    default_lane = next((lane for lane in lanes if lane == cs.LANE_SM90), lanes[0])
    for lane in lanes:
        if _prebuilt(lane, arch):
            chosen[lane] = [c.id for c in jit.lane_configs(lane, arch)]
            continue
        ids = list(jit.production_ids(lane, arch, _shipped_references(lane, arch))) \
            if lane == default_lane else []
        rest = [c.id for c in jit.lane_configs(lane, arch) if c.id not in ids]
        want = SAMPLE // len(lanes) + (SAMPLE % len(lanes) if lane == lanes[0] else 0)
        step = max(1, len(rest) // max(1, want))
        ids += rest[::step][:want]
        chosen[lane] = ids
    return chosen


SELECTION = _selection()
CASES = [(lane, cid) for lane, ids in SELECTION.items() for cid in ids]


@pytest.fixture(scope="session")
def kernels() -> dict[str, launch.Kernel]:
    """The selected configs' launchers: from the lane's whole-space module when one is
    prebuilt (the benchmark's, an ``OASR_GEMM_COMPILE_SET=all`` cache), else from a module
    of the selection alone, compiled here."""
    from oasr_core import jit as core_jit
    from oasr_core.errors import JitBuildError

    arch = device_arch()
    modules = []
    for lane, ids in SELECTION.items():
        try:
            modules.append(core_jit.load(jit.full_spec(lane, arch), build_missing=False))
            continue
        except JitBuildError:
            pass
        configs = [c for c in jit.lane_configs(lane, arch) if c.id in set(ids)]
        spec = jit.module_spec(lane, arch, configs, name=jit.MODULE_PREFIX[lane] + "_gpu")
        core_jit.prebuild([spec], jobs=os.cpu_count())
        modules.append(core_jit.load(spec, build_missing=False))
    found: dict[str, launch.Kernel] = {}
    for module, (lane, ids) in zip(modules, SELECTION.items(), strict=True):
        for config in jit.lane_configs(lane, arch):
            if config.id in ids and codegen.symbol(config) in module.exports:
                found[config.id] = launch.Kernel.bind(module, config)
    return found


def _kernel(kernels, lane, cid) -> launch.Kernel:
    config = cs.config(lane, cid)
    if cid not in kernels:
        pytest.fail(f"{lane}/{cid}: unit {config.params['unit']} did not compile or load")
    return kernels[cid]


def _fits(config, m, n, k, op="gemm") -> bool:
    from oasr_core.types import Problem

    return supports(config, Problem("gemm", op, "fp16", (("N", n), ("K", k)), m))


def _check(out, a, w, b, act, what):
    ref = numerics.reference(a, w, b, act)
    base = numerics.torch_output(a, w, b, act)
    verdict = numerics.numerics_gate(out, base, ref)
    assert verdict, f"{what}: {verdict.reason} (err {verdict.error:.3g}, torch " \
                    f"{verdict.torch_error:.3g})"


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_config_matches_fp32_reference(kernels, lane, cid):
    kernel = _kernel(kernels, lane, cid)
    ran = 0
    for dtype in ("fp16", "bf16"):
        for i, (m, n, k) in enumerate(SHAPES):
            act = ACTS[i % len(ACTS)]
            if not _fits(kernel.config, m, n, k, "gemm_activation" if act else "gemm"):
                continue
            a, w, b = numerics.make_operands(m, n, k, dtype, bias=i != 0, device="cuda",
                                             seed=i)
            if i == 1:
                a = a.view(7, 11, k)
            # Without bias and activation a 3.x config runs its plain-epilogue kernel: check
            # the fused one there too.
            for fused in (False, True) if b is None and act is None else (False,):
                out = kernel.run(a, w, b, activation=act, fused=fused)
                torch.cuda.synchronize()
                _check(out, a, w, b, act,
                       f"{cid} {dtype} m={m} n={n} k={k} act={act} fused={fused}")
            ran += 1
    assert ran >= 4, f"{cid}: only {ran} shapes fit"


@pytest.mark.parametrize(("lane", "cid"), CASES)
def test_config_under_cuda_graph_capture(kernels, lane, cid):
    kernel = _kernel(kernels, lane, cid)
    m, n, k = 1000, 512, 1024
    dtype = ("fp16", "bf16")[CASES.index((lane, cid)) % 2]
    a, w, b = numerics.make_operands(m, n, k, dtype, device="cuda", seed=5)
    out = torch.empty(m, n, dtype=a.dtype, device="cuda")
    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kernel.run(a, w, b, out, "gelu")
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel.run(a, w, b, out, "gelu")
    fresh, _, _ = numerics.make_operands(m, n, k, dtype, device="cuda", seed=6)
    a.copy_(fresh)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    _check(out, a, w, b, "gelu", f"{cid} graph replay {dtype}")


def test_prepared_cache_follows_new_pointers(kernels):
    cid = next((c for c in SELECTION.get(cs.LANE_SM90, []) if c.startswith("ws_")),
               next(iter(kernels)))
    lane = cs.LANE_SM90 if cid in SELECTION.get(cs.LANE_SM90, []) else cs.LANE_SM80
    kernel = _kernel(kernels, lane, cid)
    m, n, k = 300, 256, 512
    ops_ = [numerics.make_operands(m, n, k, "fp16", device="cuda", seed=s) for s in range(3)]
    outs = [torch.empty(m, n, dtype=torch.float16, device="cuda") for _ in range(2)]
    order = [(0, 0), (1, 1), (2, 0), (0, 1), (1, 0)]
    for which, o in order:
        a, w, b = ops_[which]
        kernel.run(a, w, b, outs[o])
        torch.cuda.synchronize()
        _check(outs[o], a, w, b, None, f"{cid} operands {which} into out {o}")


@pytest.fixture
def kernel_tier(tmp_path, monkeypatch):
    """A user tier whose entries serve the lane's default config at every M for the widths the
    op tests call (an uncovered shape would run on torch, the family's untuned choice)."""
    from oasr_core import database, reload, stamps
    from oasr_core.runtime import get_runtime

    arch = device_arch()
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.active_lane("gemm", arch)
    entries = {database.signature_key(family, op, "half", dims): database.Entry(
        regions=((None, "default"),)) for op in ("gemm", "gemm_activation")
        for dims in ((1024, 256), (256, 1024), (512, 512))}
    database.write_entries(database.tier_path(tmp_path, arch, family), family=family, arch=arch,
                           lane=lane, entries=entries,
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    reload()
    yield
    monkeypatch.undo()
    reload()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ops_through_selection(kernel_tier, dtype):
    import oasr_gemm

    name = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    for m, n, k in ((16, 1024, 256), (1500, 256, 1024)):
        a, w, b = numerics.make_operands(m, n, k, name, device="cuda", seed=m)
        x = a.view(2, m // 2, k) if m % 2 == 0 else a
        _check(oasr_gemm.gemm(x, w), x, w, None, None, f"gemm {name} {m}")
        _check(oasr_gemm.gemm(x, w, b), x, w, b, None, f"gemm+bias {name} {m}")
        for act in ("relu", "gelu", "silu"):
            out = torch.empty((*x.shape[:-1], n), dtype=dtype, device="cuda")
            got = oasr_gemm.gemm_activation(x, w, b, act, out=out)
            assert got is out
            _check(out, x, w, b, act, f"gemm_activation {act} {name} {m}")
    # GELU is not an activation the entries were measured with: torch serves it.
    assert oasr_gemm.stats() == {"torch:selected": 2}, oasr_gemm.stats()


def test_unsupported_inputs_take_the_counted_torch_path():
    import oasr_gemm

    a, w, b = numerics.make_operands(64, 250, 256, "fp16", device="cuda")
    _check(oasr_gemm.gemm(a, w, b), a, w, b, None, "unaligned N")
    a2, w2, _ = numerics.make_operands(64, 256, 256, "fp16", device="cuda")
    _check(oasr_gemm.gemm(a2.t().contiguous().t(), w2), a2, w2, None, None, "non-contiguous")
    a3 = a2.float()
    assert torch.allclose(oasr_gemm.gemm(a3, w2.float()), a3 @ w2.float().T)
    assert oasr_gemm.stats() == {"torch:unaligned": 1, "torch:noncontiguous": 1,
                                 "torch:dtype": 1}


def test_ops_inside_a_cuda_graph(kernel_tier):
    import oasr_gemm

    a, w, b = numerics.make_operands(640, 512, 512, "fp16", device="cuda", seed=9)
    w2, b2 = numerics.make_operands(1, 512, 512, "fp16", device="cuda", seed=10)[1:]
    stream = torch.cuda.Stream()
    oasr_gemm.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        oasr_gemm.gemm(oasr_gemm.gemm_activation(a, w, b, "silu"), w2, b2)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        h = oasr_gemm.gemm_activation(a, w, b, "silu")
        y = oasr_gemm.gemm(h, w2, b2)
    a.copy_(numerics.make_operands(640, 512, 512, "fp16", device="cuda", seed=11)[0])
    graph.replay()
    torch.cuda.synchronize()
    _check(h, a, w, b, "silu", "graph: first op")
    _check(y, h, w2, b2, None, "graph: second op")
    assert oasr_gemm.stats() == {}


def test_torch_compile_runs_the_custom_op():
    import oasr_gemm

    a, w, b = numerics.make_operands(256, 512, 256, "bf16", device="cuda", seed=12)

    def mlp(x):
        return oasr_gemm.gemm_activation(x, w, b, "gelu") * 0.5

    compiled = torch.compile(mlp, fullgraph=True)
    out = compiled(a)
    torch.cuda.synchronize()
    _check(out * 2, a, w, b, "gelu", "torch.compile")


def _pdl_chain_configs() -> list[str]:
    ids = SELECTION.get(cs.LANE_SM90, [])
    picks = [next((c for c in ids if c.startswith(p)), None) for p in ("ws_", "pp_", "co_")]
    return [c for c in picks if c is not None]


@pytest.mark.parametrize("cid", _pdl_chain_configs())
def test_dependent_launches_read_what_the_previous_gemm_wrote(kernels, cid):
    """Programmatic dependent launch: each gemm of a chain reads the previous one's output.

    The outputs are poisoned with NaN by a torch kernel before the chain, so a kernel that
    read its input before the previous one finished would carry NaN or stale values; checked
    eagerly and in a replayed CUDA graph, with the flag on and off.
    """
    kernel = _kernel(kernels, cs.LANE_SM90, cid)
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
                                     x.data_ptr(), w.data_ptr(), 0, o.data_ptr())
            assert status == 0, launch.status_text(status)
            x = o

    def verify(what: str) -> None:
        torch.cuda.synchronize()
        x = x0
        for i, (w, o) in enumerate(zip(ws, outs, strict=True)):
            _check(o, x, w, None, None, f"{cid} {what} link {i}")
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
