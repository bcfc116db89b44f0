"""Op ``group_gemm`` (a group of linears of equal (N, K)) without a GPU: the torch path
against the loop of ``F.linear``, its argument checks, the custom op under torch.compile, the
plan key and the routing of unsupported groups, the plan of a tuned group (the tiers' config,
its grouped launcher looked up and, absent from the module, torch), a refused launch,
feasibility and the census record of the op's own calls."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from oasr_core import database, stamps
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.runtime import get_runtime
from oasr_core.testing import pretend_cuda_device
from oasr_core.types import Problem, Sentinel
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_gemm
from oasr_gemm import bench, codegen, launch, ops, recorder
from oasr_gemm import config_space as cs
from oasr_gemm import feasibility as fe

REPO_DB = Path(__file__).parents[3] / "db"
GROUP = cs.GROUP_OP
TUNED = "b64x64x64_w32x32x64_s3"
"""A split-free config of the 2.x lane, the lane with grouped units."""


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
    """A system tier on an sm80 device: group_gemm (N=1024, K=256) TUNED up to 4096 rows,
    torch above."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family, lane = rt.registry.family("gemm"), rt.registry.lane(cs.LANE_SM80)
    database.write_entries(
        database.tier_path(tmp_path, "sm80", family), family=family, arch="sm80", lane=lane,
        entries={database.signature_key(family, GROUP, "half", (1024, 256)):
                 database.Entry(regions=((4096, TUNED), (None, "torch")))},
        configs={c.id: c for c in lane.config_space},
        soft=stamps.current_soft_validators(family))
    rt.reload()
    pretend_cuda_device(arch="sm80", sm_count=108)
    return tmp_path


def _library(workspaces, group=True):
    """A production module's kernels as the plans see them: every config's own launcher and,
    with ``group``, the grouped launcher of each config that has one (fake C functions)."""
    def workspace(*args):
        workspaces.append(args)
        return 2432

    kernels = {c.id: launch.Kernel(c, lambda *a: 0, lambda *a: 0)
               for c in cs.space(cs.LANE_SM80)}
    if group:
        kernels.update({launch.group_key(c.id): launch.GroupKernel(c, lambda *a: 0, workspace)
                        for c in cs.space(cs.LANE_SM80) if cs.has_group(c)})
    return kernels


def test_a_tuned_group_is_its_configs_grouped_launcher_prepared_for_the_rows(group_tier):
    workspaces = []
    launch.install_library(cs.LANE_SM80, "sm80", _library(workspaces))
    key = (GROUP, None, torch.bfloat16, 1024, 256, 3000, 0, (1000, 1, 0, 1999))
    plan = ops._plan_group(key)
    assert isinstance(plan, launch.GroupCall) and plan.config.id == TUNED
    assert plan.groups == 4 and list(plan.rows) == [1000, 1, 0, 1999]
    args = plan.prepared.args
    assert (args.m, args.n, args.k, args.dtype, args.split) == (3000, 1024, 256, 1, 1)
    assert workspaces == [(4, 1024, 256, 1)] and plan.prepared.workspace == (2432, 0)
    assert all(len(a) == 4 for a in plan.arrays)
    # Above the tuned region, another width: torch.
    assert ops._plan_group((GROUP, None, torch.float16, 1024, 256, 5000, 0, (5000,))) is ops.TORCH
    assert ops._plan_group((GROUP, None, torch.float16, 512, 256, 64, 0, (64,))) is ops.TORCH
    assert get_runtime().counts[("gemm", GROUP, "system")] == 2


def test_a_module_without_the_grouped_launcher_is_warned_about_and_torch_serves(group_tier):
    launch.install_library(cs.LANE_SM80, "sm80", _library([], group=False))
    with pytest.warns(RuntimeWarning, match=f"config {TUNED} .op=group_gemm fp16 N=1024 K=256 "
                                            r"G=2\) is not in this process's sm80_mma module"):
        plan = ops._plan_group((GROUP, None, torch.float16, 1024, 256, 8, 0, (4, 4)))
    assert plan is ops.TORCH


def test_the_production_module_links_the_grouped_units_the_tiers_name(group_tier):
    from oasr_gemm import jit

    assert [c.id for c in jit.group_configs(cs.LANE_SM80, "sm80")] == [TUNED]
    assert jit.group_configs(cs.LANE_SM90, "sm90") == ()
    spec = jit.production_spec(cs.LANE_SM80, "sm80")
    config = cs.config(cs.LANE_SM80, TUNED)
    (unit,) = [u for u in spec.units if u.name == codegen.group_unit(config)]
    assert set(unit.exports) == {codegen.group_symbol(config),
                                 codegen.group_symbol(config) + "_workspace"}
    assert launch.group_key(TUNED) in launch._wanted(cs.LANE_SM80, "sm80")


def test_the_grouped_unit_names_its_kernel_symbols_and_operands():
    config = cs.config(cs.LANE_SM80, TUNED)
    text = codegen.group_unit_source(config)
    assert '#include "oasr_gemm_group/sm80.cuh"' in text
    assert "oasr_gemm::group::sm80::Kernel<cutlass::half_t, 64, 64, 64, 32, 32, 64, 3>" in text
    assert "oasr_gemm::group::sm80::Kernel<cutlass::bfloat16_t, 64, 64, 64, 32, 32, 64, 3>" in text
    assert f"int32_t {codegen.group_symbol(config)}(const oasr_kit::CallArgs* c, const void* " \
           "const* xs, const void* const* ws, const void* const* bs, void* const* ds, const " \
           "int64_t* rows, int64_t groups, void* stream)" in text
    for cid in ("sk_128x64x64_c1x1",):
        with pytest.raises(ValueError, match="has no group_gemm kernel"):
            codegen.group_unit(cs.config(cs.LANE_SM90, cid))
    with pytest.raises(ValueError, match="has no group_gemm kernel"):
        codegen.group_unit(cs.config(cs.LANE_SM80, "b64x64x64_w32x32x64_s3_spk2"))


def test_the_other_units_and_the_shipped_tables_name_are_unchanged():
    """The grouped units live in their own units and header: the digest without them is the
    one recorded before them, and the new digest is recorded as the same implementation, so
    the shipped tables stay current."""
    table = json.loads(codegen.EQUIVALENTS.read_text())
    before = codegen.impl_digest(group=False)
    assert before == "4eb85822d3c73b06" and before in table
    assert table[codegen.impl_digest()]["same_as"] == table[before]["same_as"]
    shipped = json.loads((REPO_DB / "sm90" / "gemm.json").read_text())
    assert codegen.impl_hash() == shipped["validators"]["soft"]["impl_hash"]


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
    plan = _RefusingPlan(cs.config(cs.LANE_SM80, TUNED))
    ops._PLANS.store(key, plan, ops.SERVING.bind())
    with FakeTensorMode():
        xs = [torch.empty(8, 256, device="cuda", dtype=torch.float16),
              torch.empty(1, 256, device="cuda", dtype=torch.float16)]
        ws = [torch.empty(1024, 256, device="cuda", dtype=torch.float16)] * 2
        monkeypatch.setattr(torch.Tensor, "data_ptr", lambda self: 4096)
        with pytest.warns(RuntimeWarning, match=f"sm80_mma/{TUNED} refused op=group_gemm "
                                                r"N=1024 K=256 G=2 M=9"):
            assert [y.shape for y in ops.group_gemm(xs, ws)] == [(8, 1024), (1, 1024)]
    ((gx, gw, gb, gout),) = plan.calls
    assert len(gx) == len(gw) == len(gout) == 2 and gb == [None, None]
    assert oasr_gemm.stats() == {"torch:refused": 1}
    assert ops._PLANS.table[key] is ops.TORCH


def test_feasibility_takes_the_split_free_configs_of_the_2x_lane():
    problem = Problem("gemm", GROUP, "fp16", (("N", 1024), ("K", 256)), 4000)
    unaligned = Problem("gemm", GROUP, "fp16", (("N", 1020), ("K", 256)), 4000)
    space = cs.space(cs.LANE_SM80)
    served = [c for c in space if fe.supports(c, problem)]
    assert served == [c for c in space if cs.has_bmm(c)] and served
    assert not any(fe.supports(c, unaligned) for c in space)
    assert not any(fe.supports(c, problem) for c in cs.space(cs.LANE_SM90))
    assert GROUP in get_runtime().registry.family("gemm").ops


# -- the bench case -------------------------------------------------------------------------

def test_bench_rows_split_the_signature_over_the_group():
    assert bench.group_rows(4000) == (1000, 1000, 1000, 1000)
    assert bench.group_rows(10) == (3, 3, 2, 2)
    assert bench.group_rows(2) == (1, 1)


def test_the_bench_case_times_the_loop_and_the_grouped_launchers(monkeypatch):
    from oasr_core.kit import benching

    kernels = {k[1]: v for k, v in _library([]).items()
               if isinstance(k, tuple) and k[0] == GROUP}
    other = "b128x128x64_w64x64x64_s3"
    kernels.pop(other)
    monkeypatch.setattr(benching, "bench_device", lambda options, full: benching.BenchDevice(
        torch.device("cpu"), 0, kernels))
    options = SimpleNamespace(seed=3, lane=cs.LANE_SM80, copies_for=lambda nbytes: 2,
                              config_of=lambda choice, problem: None
                              if choice is Sentinel.TORCH else choice)
    problem = Problem("gemm", GROUP, "bf16", (("N", 48), ("K", 16)), 10)
    armed = []
    monkeypatch.setattr(benching, "kernel_arm", lambda prepared, index, operands, out, what:
                        armed.append((prepared, operands, out)) or (lambda i: None))
    choices = [Sentinel.TORCH, cs.config(cs.LANE_SM80, TUNED), cs.config(cs.LANE_SM80, other)]
    case = bench.make_bench(problem, choices, options)
    assert set(case.arms) == {"torch", TUNED} and case.copies == 2
    ((prepared, operands, out),) = armed
    assert list(prepared.rows) == [3, 3, 2, 2] and prepared.prepared.args.m == 10
    (xs, ws0, bs, outs), (xs1, ws1, _, _) = operands
    assert xs is xs1 and ws0[0].data_ptr() != ws1[0].data_ptr(), "one weight stack a copy"
    assert [o.data_ptr() for o in outs] == [out[r].data_ptr() for r in (0, 3, 6, 8)]
    assert "no group_gemm kernel compiled" in case.rejected[other]
    got = case.arms["torch"](1)
    assert got.shape == (10, 48)
    assert case.gate(got), case.gate(got).reason
    assert not case.gate(got * 1.01), "a scaled output fails the gate"


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
