"""Op ``group_gemm`` (a group of linears of equal (N, K)) without a GPU: the torch path
against the loop of ``F.linear``, its argument checks, the custom op under torch.compile, the
plan key and the routing of unsupported groups, the plan of a tuned group (the tiers' config,
its grouped launcher looked up and, absent from the module, torch), a refused launch,
feasibility and the census record of the op's own calls."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from oasr_core import database, stamps
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.runtime import get_runtime
from oasr_core.testing import pretend_cuda_device
from oasr_core.types import Problem
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_gemm
from oasr_gemm import config_space as cs
from oasr_gemm import feasibility as fe
from oasr_gemm import launch, ops, recorder

GROUP = cs.GROUP_OP
TUNED = "pp_128x96x64_c1x1"


def _group(rows, n=16, k=8, dtype=torch.float32, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(*r, k, generator=g).to(dtype) for r in rows]
    ws = [torch.randn(n, k, generator=g).to(dtype) for _ in rows]
    bs = [torch.randn(n, generator=g).to(dtype) for _ in rows] if bias else None
    return xs, ws, bs


# -- the op ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bias", [True, False])
def test_cpu_torch_path_is_the_loop_of_linears(dtype, bias):
    xs, ws, bs = _group([(2, 5), (1,), (0,), (7,)], dtype=dtype, bias=bias)
    got = oasr_gemm.group_gemm(xs, ws, bs)
    want = [F.linear(x, w, None if bs is None else b)
            for x, w, b in zip(xs, ws, bs or [None] * 4, strict=True)]
    assert [g.shape for g in got] == [(2, 5, 16), (1, 16), (0, 16), (7, 16)]
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    out = [torch.empty_like(w) for w in want]
    res = oasr_gemm.group_gemm(xs, ws, bs, out=out)
    assert all(r is o and torch.equal(o, w) for r, o, w in zip(res, out, want, strict=True))
    assert oasr_gemm.stats() == {"torch:cpu": 2}


def test_groups_of_unequal_weights_or_some_biases_take_the_loop():
    xs, ws, bs = _group([(3,), (4,)])
    wide = [ws[0], torch.randn(24, 8)]
    got = oasr_gemm.group_gemm(xs, wide, bs[:1] + [torch.randn(24)])
    assert got[1].shape == (4, 24)
    assert torch.equal(got[0], F.linear(xs[0], ws[0], bs[0]))
    some = oasr_gemm.group_gemm(xs, ws, [bs[0], None])
    assert torch.equal(some[1], F.linear(xs[1], ws[1]))
    assert oasr_gemm.stats() == {"torch:unequal": 1, "torch:cpu": 1}


def test_bad_arguments_are_one_line_naming_what():
    xs, ws, bs = _group([(3,), (4,)])
    with pytest.raises(ValueError, match=r"^group_gemm: 2 inputs and 1 weights; a group needs "
                                         r"one weight per input and at least one problem$"):
        oasr_gemm.group_gemm(xs, ws[:1])
    with pytest.raises(ValueError, match="^group_gemm: 0 inputs"):
        oasr_gemm.group_gemm([], [])
    with pytest.raises(ValueError, match=r"^group_gemm: biases has 1 entries for 2 problems$"):
        oasr_gemm.group_gemm(xs, ws, bs[:1])
    with pytest.raises(ValueError, match=r"^group_gemm: out has 1 tensors for 2 problems$"):
        oasr_gemm.group_gemm(xs, ws, bs, out=[torch.empty(3, 16)])
    with pytest.raises(ValueError, match=r"^out must be a torch.float32 tensor of shape "
                                         r"\(4, 16\) on cpu; got torch.float32 \(3, 16\)"):
        oasr_gemm.group_gemm(xs, ws, bs, out=[torch.empty(3, 16), torch.empty(3, 16)])
    with pytest.raises(RuntimeError):  # a mismatched K: F.linear's own message
        oasr_gemm.group_gemm([xs[0], xs[1][:, :4]], ws)
    assert oasr_gemm.stats() == {"torch:shape": 1}


def test_autograd_flows_through_the_torch_path():
    xs, ws, bs = _group([(3,), (2,)])
    for w in ws:
        w.requires_grad_()
    sum(y.sum() for y in oasr_gemm.group_gemm(xs, ws, bs)).backward()
    assert all(torch.allclose(w.grad, x.sum(0).expand_as(w)) for x, w in zip(xs, ws,
                                                                             strict=True))


def test_custom_op_fake_impl_and_torch_compile():
    xs, ws, bs = _group([(3,), (2, 2)])
    torch.library.opcheck(torch.ops.oasr.group_gemm.default, (xs, ws, bs))
    torch.library.opcheck(torch.ops.oasr.group_gemm.default, (xs, ws, [None, None]))
    with FakeTensorMode():
        fx = [torch.empty(5, 32, device="cuda", dtype=torch.bfloat16),
              torch.empty(2, 3, 32, device="cuda", dtype=torch.bfloat16)]
        fw = [torch.empty(48, 32, device="cuda", dtype=torch.bfloat16)] * 2
        outs = torch.ops.oasr.group_gemm(fx, fw, [None, None])
        assert [o.shape for o in outs] == [(5, 48), (2, 3, 48)]
        assert all(o.dtype == torch.bfloat16 and o.is_cuda for o in outs)

    def f(xs, ws, bs):
        return [y * 2 for y in oasr_gemm.group_gemm(xs, ws, bs)]

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert all(torch.equal(c, e) for c, e in zip(compiled(xs, ws, bs), f(xs, ws, bs),
                                                 strict=True))


def test_routing_on_fake_cuda_tensors(monkeypatch):
    """The plan key holds (N, K), the rows summed and each problem's rows; a group the tiers
    gave to torch is counted as selected; with a plan, unsupported groups go to torch with
    their reason."""
    reasons = []
    with FakeTensorMode():
        def t(*shape, dtype=torch.float16):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        xs, ws = [t(6, 64), t(2, 3, 64), t(0, 64)], [t(128, 64) for _ in range(3)]
        key = (GROUP, None, torch.float16, 128, 64, 12, xs[0].get_device(), (6, 6, 0))
        ops._PLANS.store(key, ops.TORCH, ops.SERVING.bind())
        assert [y.shape for y in ops.group_gemm(xs, ws)] == [(6, 128), (2, 3, 128), (0, 128)]
        assert oasr_gemm.stats() == {"torch:selected": 1}
        monkeypatch.setattr(ops, "_torch_group", lambda reason, *_: reasons.append(reason))
        ops._PLANS.store(key, object(), ops.SERVING.bind())  # any plan: the checks run
        ops.group_gemm([xs[0], t(64, 6).transpose(0, 1), xs[2]], ws)
        ops.group_gemm([xs[0].requires_grad_(), *xs[1:]], ws)
        ops.group_gemm([x.detach() for x in xs], [*ws[:2], t(128, 64, dtype=torch.bfloat16)])
        ops.group_gemm([t(6, 60)], [t(128, 60)])  # no plan: K % 8
        ops.group_gemm([x.detach() for x in xs], ws, [t(128), None, t(128)])
        ops.group_gemm([t(0, 64)], [t(128, 64)])  # no plan, nothing to compute
        ops.group_gemm([t(6, 64)], [t(128, 64, dtype=torch.float32)])
    assert reasons == ["noncontiguous", "autograd", "dtype", "unaligned", "bias", "empty",
                       "dtype"]


# -- plans ----------------------------------------------------------------------------------

@pytest.fixture
def group_tier(tmp_path, monkeypatch):
    """A system tier: group_gemm (N=1024, K=256) TUNED up to 4096 rows, torch above."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family, lane = rt.registry.family("gemm"), rt.registry.lane(cs.LANE_SM90)
    database.write_entries(
        database.tier_path(tmp_path, "sm90", family), family=family, arch="sm90", lane=lane,
        entries={database.signature_key(family, GROUP, "half", (1024, 256)):
                 database.Entry(regions=((4096, TUNED), (None, "torch")))},
        configs={c.id: c for c in lane.config_space},
        soft=stamps.current_soft_validators(family))
    rt.reload()
    pretend_cuda_device()
    return tmp_path


class _GroupedKernel:
    """A module's grouped launcher as the plan sees one: ``prepare`` returns the call."""

    def __init__(self, prepared):
        self.prepared = prepared

    def prepare(self, dtype, rows, n, k):
        self.prepared.append((dtype, rows, n, k))
        return ("prepared", dtype, rows)


def _library(extra):
    kernels = {c.id: launch.Kernel(c, lambda *a: 0, lambda *a: 0)
               for c in cs.space(cs.LANE_SM90)}
    kernels.update(extra)
    return kernels


def test_a_tuned_group_looks_up_its_configs_grouped_launcher(group_tier):
    prepared = []
    launch.install_library(cs.LANE_SM90, "sm90",
                           _library({launch.group_key(TUNED): _GroupedKernel(prepared)}))
    key = (GROUP, None, torch.bfloat16, 1024, 256, 3000, 0, (1000, 1, 0, 1999))
    assert ops._plan_group(key) == ("prepared", "bf16", (1000, 1, 0, 1999))
    assert prepared == [("bf16", (1000, 1, 0, 1999), 1024, 256)]
    # Above the tuned region, another width: torch.
    assert ops._plan_group((GROUP, None, torch.float16, 1024, 256, 5000, 0, (5000,))) is ops.TORCH
    assert ops._plan_group((GROUP, None, torch.float16, 512, 256, 64, 0, (64,))) is ops.TORCH
    assert get_runtime().counts[("gemm", GROUP, "system")] == 2


def test_a_module_without_the_grouped_launcher_is_warned_about_and_torch_serves(group_tier):
    launch.install_library(cs.LANE_SM90, "sm90", _library({}))
    with pytest.warns(RuntimeWarning, match=f"config {TUNED} .op=group_gemm fp16 N=1024 K=256 "
                                         r"G=2\) is not in this process's sm90_wgmma module"):
        plan = ops._plan_group((GROUP, None, torch.float16, 1024, 256, 8, 0, (4, 4)))
    assert plan is ops.TORCH


class _RefusingPlan:
    def __init__(self, config):
        self.config, self.calls = config, []

    def output(self, x, n):
        return x.new_empty((*x.shape[:-1], n))

    def __call__(self, device, *operands):
        self.calls.append(operands)
        return 2


def test_a_refused_launch_is_served_by_torch_and_named(monkeypatch):
    key = (GROUP, None, torch.float16, 1024, 256, 9, 0, (8, 1))
    plan = _RefusingPlan(cs.config(cs.LANE_SM90, TUNED))
    ops._PLANS.store(key, plan, ops.SERVING.bind())
    with FakeTensorMode():
        xs = [torch.empty(8, 256, device="cuda", dtype=torch.float16),
              torch.empty(1, 256, device="cuda", dtype=torch.float16)]
        ws = [torch.empty(1024, 256, device="cuda", dtype=torch.float16)] * 2
        monkeypatch.setattr(torch.Tensor, "data_ptr", lambda self: 4096)
        with pytest.warns(RuntimeWarning, match=f"sm90_wgmma/{TUNED} refused op=group_gemm "
                                                r"N=1024 K=256 G=2 M=9"):
            assert [y.shape for y in ops.group_gemm(xs, ws)] == [(8, 1024), (1, 1024)]
    ((gx, gw, gb, gout),) = plan.calls
    assert len(gx) == len(gw) == len(gout) == 2 and gb == [None, None]
    assert oasr_gemm.stats() == {"torch:refused": 1}
    assert ops._PLANS.table[key] is ops.TORCH


def test_feasibility_takes_the_split_free_configs():
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        space = cs.space(lane)
        problem = Problem("gemm", GROUP, "fp16", (("N", 1024), ("K", 256)), 4000)
        served = [c for c in space if fe.supports(c, problem)]
        assert served == [c for c in space if cs.has_bmm(c)] and served
        unaligned = Problem("gemm", GROUP, "fp16", (("N", 1020), ("K", 256)), 4000)
        assert not any(fe.supports(c, unaligned) for c in space)
    assert GROUP in get_runtime().registry.family("gemm").ops


# -- census ---------------------------------------------------------------------------------

def test_the_recorder_records_the_ops_own_calls_once():
    xs, ws, bs = _group([(2, 5), (1,), (7,)], n=32, k=16)
    with ShapeRecorder(recorder.recorder_patches()) as rec:
        oasr_gemm.group_gemm(xs, ws, bs)  # one point, not its loop's three linears
        oasr_gemm.group_gemm(xs[:2], [ws[0], torch.randn(8, 16)])  # unequal: skipped
    counts = {(c.op, c.m, dict(c.dims)["N"], dict(c.dims)["K"]): n
              for c, n in rec.counts.items()}
    assert counts == {(GROUP, 18, 32, 16): 1}
    assert [n for r, n in rec.skipped.items() if "unequal weight shapes" in r] == [1]
    call = next(c for c in rec.counts if c.op == GROUP)
    assert call.flops == 2 * 18 * 32 * 16 and call.weight_elements == 3 * 32 * 16
