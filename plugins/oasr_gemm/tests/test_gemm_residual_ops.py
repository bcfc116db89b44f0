"""Op ``gemm_residual`` without a GPU: the torch path, its checks, the custom op, the plan of a
tuned shape (fused-residual launcher, operands), the untuned and cost-model answers, the
2.x lane, the production module's refresh, the recorder, the bench adapter's dispatch."""

from __future__ import annotations

import attrs
import pytest
import torch
import torch.nn.functional as F
from oasr_core import database, stamps
from oasr_core.runtime import get_runtime
from oasr_core.testing import check_reload_refreshes, pretend_cuda_device
from oasr_core.types import Problem, Selection, Tier
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_gemm
from oasr_gemm import config_space as cs
from oasr_gemm import feasibility, jit, launch, ops, recorder

TUNED = "pp_128x96x64_c1x1"


def _operands(dtype=torch.float32, m=6, n=16, k=32):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(2, m, k, generator=gen).to(dtype)
    w = torch.randn(n, k, generator=gen).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    r = torch.randn(2, m, n, generator=gen).to(dtype)
    return a, w, b, r


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_cpu_torch_path_is_the_models_residual_add(dtype, alpha):
    a, w, b, r = _operands(dtype)
    y = F.linear(a, w, b)
    expect = r + y if alpha == 1.0 else r + alpha * y
    assert torch.equal(oasr_gemm.gemm_residual(a, w, b, r, alpha), expect)
    assert torch.equal(oasr_gemm.gemm_residual(a, w, None, r, alpha),
                       r + alpha * F.linear(a, w))
    assert oasr_gemm.stats() == {"torch:cpu": 2}


def test_out_and_in_place():
    a, w, b, r = _operands()
    expect = r + 0.5 * F.linear(a, w, b)
    out = torch.empty_like(r)
    assert oasr_gemm.gemm_residual(a, w, b, r, 0.5, out=out) is out
    assert torch.equal(out, expect)
    assert oasr_gemm.gemm_residual(a, w, b, r, 0.5, out=r) is r
    assert torch.equal(r, expect)


def test_a_residual_of_another_shape_or_dtype_is_an_error():
    a, w, b, r = _operands()
    with pytest.raises(ValueError, match=r"residual must be a torch.float32 tensor of shape "
                                         r"\(2, 6, 16\)"):
        oasr_gemm.gemm_residual(a, w, b, r[:, :1])
    with pytest.raises(ValueError, match="residual must be"):
        oasr_gemm.gemm_residual(a, w, b, r.half())
    with pytest.raises(ValueError, match="out must be"):
        oasr_gemm.gemm_residual(a, w, b, r, out=torch.empty(3, 16))


def test_autograd_flows_through_the_torch_path():
    a, w, b, r = _operands()
    w.requires_grad_()
    r.requires_grad_()
    oasr_gemm.gemm_residual(a, w, b, r, 0.5).sum().backward()
    assert torch.allclose(r.grad, torch.ones_like(r))
    assert torch.allclose(w.grad, 0.5 * a.reshape(-1, 32).sum(0).expand(16, 32))


def test_custom_op_fake_impl_and_torch_compile():
    a, w, b, r = _operands()
    torch.library.opcheck(torch.ops.oasr.gemm_residual.default, (a[0], w, b, r[0], 0.5))
    with FakeTensorMode():
        fa = torch.empty(3, 5, 32, device="cuda", dtype=torch.bfloat16)
        fw = torch.empty(48, 32, device="cuda", dtype=torch.bfloat16)
        fr = torch.empty(3, 5, 48, device="cuda", dtype=torch.bfloat16)
        out = torch.ops.oasr.gemm_residual(fa, fw, None, fr, 1.0)
        assert out.shape == (3, 5, 48) and out.dtype == torch.bfloat16 and out.is_cuda

    def f(a, w, b, r):
        return oasr_gemm.gemm_residual(a, w, b, r, 0.5) * 2

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert torch.equal(compiled(a, w, b, r), f(a, w, b, r))


def test_routing_on_fake_cuda_tensors(monkeypatch):
    """A shape the tiers gave to torch skips the operand checks; with a plan, an unsupported
    residual (non-contiguous, or needing autograd) is sent to torch with its reason."""
    reasons = []
    with FakeTensorMode():
        def t(*shape, dtype=torch.float16):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        a, w, r = t(4, 64), t(128, 64), t(4, 128)
        key = ("gemm_residual", None, torch.float16, 128, 64, 4, a.get_device())
        ops._PLANS.store(key, ops.TORCH, ops.SERVING.bind())
        assert ops.gemm_residual(a, w, None, t(128, 4).t()).shape == (4, 128)
        assert oasr_gemm.stats() == {"torch:selected": 1}
        monkeypatch.setattr(ops, "_torch_residual", lambda reason, *_: reasons.append(reason))
        ops._PLANS.store(key, object(), ops.SERVING.bind())  # any plan: the per-call checks run
        ops.gemm_residual(a, w, None, t(128, 4).t())
        ops.gemm_residual(a, w, None, r.requires_grad_())
        with torch.no_grad():
            ops.gemm_residual(a, w, None, t(4, 128).requires_grad_(), out=t(128, 4).t())
    assert reasons == ["noncontiguous", "autograd", "noncontiguous"]


@pytest.fixture
def residual_tier(tmp_path, monkeypatch):
    """A system tier with a gemm_residual entry: TUNED up to M=64, torch above."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    key = database.signature_key(family, "gemm_residual", "half", (512, 256))
    database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                           arch="sm90", lane=lane,
                           entries={key: database.Entry(regions=((64, TUNED), (None, "torch")))},
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    pretend_cuda_device()
    return tmp_path


def _fake_library(calls):
    def launcher(address, *operands):
        calls.append(operands)
        return 0

    kernels = {c.id: launch.Kernel(c, launcher, lambda *a: 0) for c in cs.space(cs.LANE_SM90)}
    kernels.update({launch.residual_key(c.id): launch.ResidualKernel(c, launcher, lambda *a: 0)
                    for c in cs.space(cs.LANE_SM90)})
    return kernels


def test_a_tuned_shape_runs_the_fused_residual_launcher(residual_tier):
    calls = []
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library(calls))
    plan = ops._plan(("gemm_residual", None, torch.bfloat16, 512, 256, 48, 0))
    assert plan.config.id == TUNED and plan.args.dtype == 1 and plan.args.act == 0
    assert plan.launch(0, 7, 16, 32, 0, 48, 64, 0.5) == 0
    assert calls == [(16, 32, 0, 48, 64, 0.5, 7)]
    assert ops._plan(("gemm_residual", None, torch.float16, 512, 256, 4096, 0)) is ops.TORCH
    # The gemm op at that width has no entry: untuned, torch.
    assert ops._plan(("gemm", None, torch.float16, 512, 256, 48, 0)) is ops.TORCH
    counts = get_runtime().counts
    assert counts[("gemm", "gemm_residual", "system")] == 2
    assert counts[("gemm", "gemm", "default")] == 1


def test_an_untuned_or_model_chosen_shape_runs_on_torch(monkeypatch):
    import oasr_core

    pretend_cuda_device()
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library([]))
    assert ops._plan(("gemm_residual", None, torch.float16, 768, 256, 64, 0)) is ops.TORCH
    config = cs.config(cs.LANE_SM90, TUNED)
    picked = Selection(choice=config, tier=Tier.MODEL, lane=cs.LANE_SM90, config=config)
    monkeypatch.setattr(oasr_core, "select", lambda *a, **k: picked)
    assert ops._plan(("gemm_residual", None, torch.float16, 1024, 256, 64, 0)) is ops.TORCH
    assert ops._plan(("gemm", None, torch.float16, 1024, 256, 64, 0)).config.id == TUNED


def test_the_2x_lane_does_not_support_the_op():
    problem = Problem("gemm", "gemm_residual", "fp16", (("N", 256), ("K", 256)), 64)
    assert not feasibility.supports(cs.config(cs.LANE_SM80, cs.SM80_DEFAULT), problem)
    assert feasibility.supports(cs.config(cs.LANE_SM90, cs.SM90_DEFAULT), problem)
    gemm = attrs.evolve(problem, op="gemm")
    assert feasibility.supports(cs.config(cs.LANE_SM80, cs.SM80_DEFAULT), gemm)


def test_reload_drops_a_module_missing_a_newly_referenced_residual_kernel(tmp_path, monkeypatch):
    base = jit.production_ids(cs.LANE_SM90, "sm90")

    def reference_residual():
        monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
        family = get_runtime().registry.family("gemm")
        key = database.signature_key(family, "gemm_residual", "fp16", (512, 256))
        database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                               arch="sm90", lane=cs.LANE_SM90,
                               entries={key: database.Entry(regions=((None, base[0]),))},
                               configs={base[0]: cs.config(cs.LANE_SM90, base[0])}, soft={})

    check_reload_refreshes(launch.SERVING, cs.LANE_SM90, "sm90", {i: object() for i in base},
                           reference_residual)


def test_the_recorder_files_the_op_under_gemm_residual():
    from oasr_core.census.recorder import ShapeRecorder

    a, w, b, r = _operands()
    with ShapeRecorder(recorder.recorder_patches()) as rec:
        oasr_gemm.ops.gemm_residual(a, w, b, r, 0.5)
    ((call, count),) = rec.counts.items()
    assert (call.op, dict(call.dims), call.m, count) == ("gemm_residual", {"N": 16, "K": 32},
                                                         12, 1)
    assert call.elements == 12 * 32 + 16 * 32 + 2 * 12 * 16, "the residual read is counted"


@pytest.mark.parametrize("op", ["gemm_residual", "gemm"])
def test_the_bench_case_times_addmm_then_the_residual_add(monkeypatch, op):
    """On the host (the device and its kernels stubbed): a gemm_residual case takes its
    kernels from the fused-residual library, its torch arm adds the residual (alpha 0.5) and
    passes the gate against the fp32 reference; without a compiled kernel a config is
    rejected with the reason."""
    from types import SimpleNamespace

    from oasr_core.kit import benching
    from oasr_core.types import Sentinel

    from oasr_gemm import bench, numerics

    libraries = []
    monkeypatch.setattr(benching, "bench_device", lambda options, full: libraries.append(full)
                        or benching.BenchDevice(torch.device("cpu"), 0, {}))
    config = cs.config(cs.LANE_SM90, TUNED)
    options = SimpleNamespace(seed=3, lane=cs.LANE_SM90, copies_for=lambda nbytes: 2,
                              config_of=lambda choice, problem: None
                              if choice is Sentinel.TORCH else choice)
    problem = Problem("gemm", op, "bf16", (("N", 64), ("K", 32)), 24)
    case = bench.make_bench(problem, [Sentinel.TORCH, config], options)
    assert libraries == [bench.FULL_RESIDUAL if op == "gemm_residual" else bench.FULL]
    assert "compiled in the sm90_wgmma module" in case.rejected[TUNED]
    out = case.arms["torch"](1)
    assert case.gate(out), case.gate(out).reason
    a, w, b = bench.device_operands(24, 64, 32, "bf16", "cpu", 3)
    if op == "gemm_residual":
        r = bench.device_residual(24, 64, "bf16", "cpu", 3)
        assert torch.equal(out, numerics.torch_output(a, w, b, None, r, bench.BENCH_ALPHA))
        assert not case.gate(F.linear(a, w, b)), "an output without the residual fails"
    else:
        assert torch.equal(out, F.linear(a, w, b))
