"""Op ``gemm_log_softmax`` (the CTC head) without a GPU: the torch path against torch, its
checks, the custom op under torch.compile, the plan of a tuned shape (a config's GEMM, then
the row log-softmax), the untuned and refused answers, feasibility, the bench case, the
census record of a CTC head and the compile pass's rewrite on a real FX graph."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from oasr_core import database, stamps
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.kit import LaunchError
from oasr_core.runtime import get_runtime
from oasr_core.testing import pretend_cuda_device
from oasr_core.types import Problem, Sentinel
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_gemm
from oasr_gemm import config_space as cs
from oasr_gemm import feasibility, jit, launch, log_softmax, ops, recorder

TUNED = "pp_128x96x64_c1x1"
OP = cs.LOG_SOFTMAX_OP


def _operands(dtype=torch.float32, m=6, n=40, k=32):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(2, m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    return a, w, b


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cpu_torch_path_is_linear_then_log_softmax_in_the_input_dtype(dtype):
    a, w, b = _operands(dtype)
    got = oasr_gemm.gemm_log_softmax(a, w, b)
    assert got.dtype == dtype and got.shape == (2, 6, 40)
    assert torch.equal(got, torch.log_softmax(F.linear(a, w, b), dim=-1))
    assert torch.equal(oasr_gemm.gemm_log_softmax(a, w), F.log_softmax(F.linear(a, w), dim=-1))
    assert oasr_gemm.stats() == {"torch:cpu": 2}


def test_out_is_filled_and_returned():
    a, w, b = _operands()
    out = torch.empty(2, 6, 40)
    assert oasr_gemm.gemm_log_softmax(a, w, b, out=out) is out
    assert torch.equal(out, torch.log_softmax(F.linear(a, w, b), dim=-1))


def test_bad_arguments_are_one_line_naming_what():
    a, w, b = _operands()
    with pytest.raises(ValueError, match=r"^out must be a torch.float32 tensor of shape "
                                         r"\(2, 6, 40\) on cpu; got torch.float32 \(2, 6, 8\)"):
        oasr_gemm.gemm_log_softmax(a, w, b, out=torch.empty(2, 6, 8))
    with pytest.raises(ValueError, match="^out must be"):
        oasr_gemm.gemm_log_softmax(a, w, b, out=torch.empty(2, 6, 40, dtype=torch.float16))
    with pytest.raises(RuntimeError):  # torch's own message for mismatched K
        oasr_gemm.gemm_log_softmax(a[..., :16], w, b)
    from oasr_gemm.linear import linear

    with pytest.raises(ValueError, match="log_softmax takes no activation or residual"):
        linear(a, nn.Linear(32, 40), "relu", log_softmax=True)


def test_autograd_flows_through_the_torch_path():
    a, w, b = _operands()
    w.requires_grad_()
    oasr_gemm.gemm_log_softmax(a, w, b).exp().sum().backward()
    assert w.grad is not None and float(w.grad.abs().max()) < 1e-4  # rows of exp sum to one


def test_custom_op_fake_impl_and_torch_compile():
    a, w, b = _operands()
    torch.library.opcheck(torch.ops.oasr.gemm_log_softmax.default, (a[0], w, b))
    with FakeTensorMode():
        fa = torch.empty(3, 5, 32, device="cuda", dtype=torch.bfloat16)
        fw = torch.empty(48, 32, device="cuda", dtype=torch.bfloat16)
        out = torch.ops.oasr.gemm_log_softmax(fa, fw, None)
        assert out.shape == (3, 5, 48) and out.dtype == torch.bfloat16 and out.is_cuda

    def f(a, w, b):
        return oasr_gemm.gemm_log_softmax(a, w, b) * 2

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert torch.equal(compiled(a, w, b), f(a, w, b))


def test_routing_on_fake_cuda_tensors(monkeypatch):
    """A shape the tiers gave to torch is counted as selected with no operand checks; with a
    plan, unsupported operands go to torch with their reason."""
    reasons = []
    with FakeTensorMode():
        def t(*shape, dtype=torch.float16):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        a, w = t(4, 64), t(128, 64)
        key = (OP, None, torch.float16, 128, 64, 4, a.get_device())
        ops._PLANS.store(key, ops.TORCH, ops.SERVING.bind())
        assert ops.gemm_log_softmax(a, w).shape == (4, 128)
        assert oasr_gemm.stats() == {"torch:selected": 1}
        monkeypatch.setattr(ops, "_torch_log_softmax",
                            lambda reason, *_: reasons.append(reason))
        ops._PLANS.store(key, object(), ops.SERVING.bind())  # any plan: the checks run
        ops.gemm_log_softmax(t(64, 4).t(), w)
        ops.gemm_log_softmax(a, w.requires_grad_())
        ops.gemm_log_softmax(a, t(128, 64, dtype=torch.bfloat16))
        ops.gemm_log_softmax(a, t(128, 64), t(64))
    assert reasons == ["noncontiguous", "autograd", "dtype", "bias"]


@pytest.fixture
def head_tier(tmp_path, monkeypatch):
    """A system tier with a gemm_log_softmax entry: TUNED up to M=64, torch above."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    key = database.signature_key(family, OP, "half", (1024, 256))
    database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                           arch="sm90", lane=lane,
                           entries={key: database.Entry(regions=((64, TUNED), (None, "torch")))},
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    pretend_cuda_device()
    return tmp_path


def _fake_library(calls, status=0):
    def launcher(address, *operands):
        calls.append(("gemm", operands))
        return status

    return {c.id: launch.Kernel(c, launcher, lambda *a: 0) for c in cs.space(cs.LANE_SM90)}


def _fake_rows(monkeypatch, calls, status=0):
    def rows(*args):
        calls.append(("rows", args))
        return status

    monkeypatch.setattr(log_softmax.KERNEL, "get", lambda arch: rows)


def test_a_tuned_shape_runs_the_gemm_then_the_row_log_softmax(head_tier, monkeypatch):
    calls = []
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library(calls))
    _fake_rows(monkeypatch, calls)
    plan = ops._plan((OP, None, torch.bfloat16, 1024, 256, 48, 0))
    assert isinstance(plan, log_softmax.LogSoftmaxCall)
    assert plan.config.id == TUNED
    assert plan.gemm.args.dtype == 1 and plan.gemm.args.act == 0
    assert plan.launch(0, 7, 16, 32, 64, 48) == 0
    assert calls == [("gemm", (16, 32, 64, 48, 7)), ("rows", (48, 1, 48, 1024, 7))]
    assert ops._plan((OP, None, torch.float16, 1024, 256, 4096, 0)) is ops.TORCH
    # gemm at that width has no entry: untuned, torch; so has an untuned head width.
    assert ops._plan(("gemm", None, torch.float16, 1024, 256, 48, 0)) is ops.TORCH
    assert ops._plan((OP, None, torch.float16, 512, 256, 48, 0)) is ops.TORCH
    counts = get_runtime().counts
    assert counts[("gemm", OP, "system")] == 2


def test_the_gemm_status_stops_the_row_kernel(head_tier, monkeypatch):
    calls = []
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library(calls, status=2))
    _fake_rows(monkeypatch, calls)
    plan = ops._plan((OP, None, torch.float16, 1024, 256, 48, 0))
    assert plan.launch(0, 7, 16, 32, 64, 48) == 2
    assert [c[0] for c in calls] == ["gemm"]


def test_without_the_row_kernel_the_shape_runs_on_torch(head_tier, monkeypatch):
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library([]))
    monkeypatch.setattr(log_softmax.KERNEL, "get", lambda arch: None)
    with pytest.warns(RuntimeWarning, match="row log-softmax for sm90 is unavailable"):
        assert ops._plan((OP, None, torch.float16, 1024, 256, 48, 0)) is ops.TORCH


def test_compose_refuses_rows_the_kernel_does_not_take(monkeypatch):
    _fake_rows(monkeypatch, [])
    for n in (29, log_softmax.MAX_N + 8):
        with pytest.raises(LaunchError, match="multiple of 8 elements"):
            log_softmax.compose(object(), "sm90", 0, 4, n)
    assert log_softmax.compose(object(), "sm90", 0, 4, 5008).n == 5008


def test_every_config_a_gemm_with_bias_takes_serves_the_op_up_to_the_row_limit():
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        for config in cs.space(lane)[:20]:
            gemm = Problem("gemm", "gemm", "fp16", (("N", 5008), ("K", 256)), 64)
            head = Problem("gemm", OP, "fp16", (("N", 5008), ("K", 256)), 64)
            assert feasibility.supports(config, head) == feasibility.supports(config, gemm)
    config = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    for n, ok in ((29, False), (1032, True), (log_softmax.MAX_N, True),
                  (log_softmax.MAX_N + 8, False)):
        problem = Problem("gemm", OP, "fp16", (("N", n), ("K", 256)), 64)
        assert feasibility.supports(config, problem) is ok, n
    assert OP in get_runtime().registry.family("gemm").ops


def test_the_row_kernel_is_prebuilt_beside_each_lane_and_reads_its_cu_file():
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        specs = jit.lane_specs(lane, "sm90", "production")
        assert [s.name for s in specs][-1] == log_softmax.MODULE
    spec = log_softmax.spec("sm90")
    assert spec.arch == "90a" and not spec.cutlass
    (unit,) = spec.units
    assert unit.exports == (log_softmax.SYMBOL,)
    assert unit.source == log_softmax.source_path().read_text()
    assert f"OASR_EXPORT int32_t {log_softmax.SYMBOL}(" in unit.source
    assert jit.lane_specs(cs.LANE_SM90, "sm80", "production") == []


def test_the_bench_case_times_addmm_then_log_softmax(monkeypatch):
    """On the host (the device and its kernels stubbed): the torch arm is addmm then
    log_softmax and passes the gate against the fp32 reference; a raw GEMM output fails it;
    a config arm composes its GEMM with the row kernel, and is rejected where that cannot
    load or the config is not compiled."""
    from oasr_core.kit import benching

    from oasr_gemm import bench, numerics

    config = cs.config(cs.LANE_SM90, TUNED)
    kernels = _fake_library([])
    monkeypatch.setattr(benching, "bench_device", lambda options, full: benching.BenchDevice(
        torch.device("cpu"), 0, kernels))
    monkeypatch.setattr("oasr_core.runtime.device_arch_of", lambda index: "sm90")
    other = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    kernels.pop(other.id)
    options = SimpleNamespace(seed=3, lane=cs.LANE_SM90, copies_for=lambda nbytes: 2,
                              config_of=lambda choice, problem: None
                              if choice is Sentinel.TORCH else choice)
    problem = Problem("gemm", OP, "bf16", (("N", 64), ("K", 32)), 24)
    _fake_rows(monkeypatch, [])
    armed = []
    monkeypatch.setattr(benching, "kernel_arm", lambda prepared, *rest: armed.append(prepared)
                        or (lambda i: None))
    case = bench.make_bench(problem, [Sentinel.TORCH, config, other], options)
    assert set(case.arms) == {"torch", TUNED}
    ((prepared,),) = [armed]
    assert isinstance(prepared, log_softmax.LogSoftmaxCall)
    assert (prepared.config.id, prepared.m, prepared.n, prepared.dtype_code) == (TUNED, 24, 64, 1)
    assert "is not compiled in the sm90_wgmma module" in case.rejected[other.id]
    out = case.arms["torch"](1)
    assert case.gate(out), case.gate(out).reason
    a, w, b = bench.device_operands(24, 64, 32, "bf16", "cpu", 3)
    assert torch.equal(out, numerics.torch_output(a, w, b, log_softmax=True))
    assert not case.gate(F.linear(a, w, b)), "logits without the log-softmax fail"
    monkeypatch.setattr(log_softmax.KERNEL, "get", lambda arch: None)
    case = bench.make_bench(problem, [Sentinel.TORCH, config], options)
    assert "row log-softmax for sm90 is unavailable" in case.rejected[TUNED]


class CtcHead(nn.Module):
    """A CTC head as user code writes it: the projection, then a log-softmax module."""

    def __init__(self, d: int = 32, vocab: int = 40) -> None:
        super().__init__()
        self.proj = nn.Linear(d, vocab)
        self.lsm = nn.LogSoftmax(dim=-1)

    def forward(self, x):
        return self.lsm(self.proj(x))


def test_the_recorder_files_a_linear_into_a_log_softmax_as_the_head_op():
    a, w, b = _operands()
    head = CtcHead()
    with ShapeRecorder(recorder.recorder_patches()) as rec:
        head(a)
        F.log_softmax(head.proj(a), dim=-1)
        head.proj(a).log_softmax(2)
        torch.log_softmax(oasr_gemm.ops.gemm(a, w, b), -1)
        oasr_gemm.ops.gemm_log_softmax(a, w, b)
        # Not a head: another dim, another dtype, a softmax, a reused or viewed output.
        F.log_softmax(head.proj(a), dim=1)
        F.log_softmax(head.proj(a), dim=-1, dtype=torch.float64)
        F.softmax(head.proj(a), dim=-1)
        F.log_softmax(head.proj(a).view(12, 40), dim=-1)
    counts = {(c.op, c.m, dict(c.dims)["N"]): n for c, n in rec.counts.items()}
    assert counts == {(OP, 12, 40): 5, ("gemm", 12, 40): 4}
    call = next(c for c in rec.counts if c.op == OP)
    assert call.elements == 12 * 32 + 40 * 32 + 3 * 12 * 40, "the row pass is counted"


@pytest.mark.parametrize("served", [False, True])
def test_the_reference_encoders_ctc_head_is_one_census_point(served):
    from oasr_core.census.models import ConformerEncoder, WhisperEncoder

    from oasr_gemm.linear import linear

    lin = linear if served else None
    for model, x in ((ConformerEncoder(layers=1, ctc_vocab=257, linear=lin),
                      torch.randn(2, 64, 80)),
                     (WhisperEncoder(layers=1, window=64, ctc_vocab=29, linear=lin),
                      torch.randn(1, 80, 64))):
        with ShapeRecorder(recorder.recorder_patches()) as rec, torch.no_grad():
            y = model.eval()(x)
        heads = [(dict(c.dims), c.m, n) for c, n in rec.counts.items() if c.op == OP]
        vocab = y.shape[-1]
        assert heads == [({"N": vocab, "K": model.head.proj.in_features}, y.shape[0] * y.shape[1],
                          1)]
        assert torch.allclose(y.exp().sum(-1), torch.ones(y.shape[:-1]), atol=1e-4)
    plain = ConformerEncoder(layers=1, linear=lin)
    assert plain.head is None
    with ShapeRecorder(recorder.recorder_patches()) as rec, torch.no_grad():
        plain.eval()(torch.randn(2, 64, 80))
    assert not any(c.op == OP for c in rec.counts)


def _user_entry(tmp_path, monkeypatch, n, k):
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    key = database.signature_key(family, OP, "half", (n, k))
    database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                           arch="sm90", lane=lane,
                           entries={key: database.Entry(regions=((None, TUNED),))},
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    rt.reload()


def _compiled(model, x, **options):
    import oasr_core.compile as oc
    from oasr_core.testing import aot_pass_backend

    torch._dynamo.reset()
    backend = oc.backend(arch="sm90", **options)
    graphs = []
    with torch.no_grad():
        out = torch.compile(model, backend=aot_pass_backend(backend.graph_pass, graphs))(x)
    return backend, [str(n.target) for n in graphs[0].nodes if n.op == "call_function"], out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_compile_pass_serves_a_tuned_ctc_head_and_leaves_an_untuned_one(
        tmp_path, monkeypatch, dtype):
    torch.manual_seed(0)
    model = CtcHead(256, 1024).eval().to(dtype)
    x = torch.randn(2, 50, 256, dtype=dtype)
    with torch.no_grad():
        ref = model(x)
    backend, targets, out = _compiled(model, x)
    assert backend.rewritten == {}
    assert "aten.addmm.default" in targets and "aten.amax.default" in targets
    _user_entry(tmp_path, monkeypatch, 1024, 256)
    backend, targets, out = _compiled(model, x)
    assert backend.rewritten == {("gemm", OP): 1}
    assert targets.count("oasr.gemm_log_softmax.default") == 1
    assert not {"aten.addmm.default", "aten.amax.default", "aten.exp.default",
                "aten.log.default"} & set(targets)
    assert out.shape == ref.shape and out.dtype == dtype
    assert torch.equal(out, ref)  # the op's torch path on a CPU: what the model computes


def test_a_log_softmax_over_another_dim_is_not_a_head(tmp_path, monkeypatch):
    class Other(CtcHead):
        def forward(self, x):
            return F.log_softmax(self.proj(x), dim=1)

    _user_entry(tmp_path, monkeypatch, 1024, 256)
    model = Other(256, 1024).eval().bfloat16()
    backend, targets, _ = _compiled(model, torch.randn(2, 50, 256, dtype=torch.bfloat16))
    assert ("gemm", OP) not in backend.rewritten
    assert "aten.amax.default" in targets


def test_a_compile_census_records_the_head_op():
    from oasr_core.census.probe import compiled_calls

    model = CtcHead(256, 1024).eval()
    with torch.no_grad():
        calls = compiled_calls(model, (torch.randn(3, 40, 256),), "bf16")
    ((call, count),) = calls.items()
    assert (call.label, call.m, count) == (f"gemm|op={OP}|dt=bf16|N=1024|K=256", 120, 1)
    assert call.elements == 120 * 256 + 1024 * 256 + 3 * 120 * 1024


def test_a_compile_census_of_the_reference_conformer_records_its_ctc_head():
    from oasr_core.census.models import ConformerEncoder
    from oasr_core.census.probe import compiled_calls

    model = ConformerEncoder(layers=1, ctc_vocab=264).eval()
    with torch.no_grad():
        calls = compiled_calls(model, (torch.randn(2, 64, 80),), "bf16")
    heads = {(c.label, c.m): n for c, n in calls.items() if c.op == OP}
    assert heads == {(f"gemm|op={OP}|dt=bf16|N=264|K=256", 2 * 15): 1}
    assert not any(dict(c.dims).get("N") == 264 for c in calls if c.op != OP)
