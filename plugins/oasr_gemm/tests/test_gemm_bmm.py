"""Op ``bmm`` (batched GEMMs) without a GPU: the torch path against ``torch.bmm`` in both
layouts and on views, its checks, the custom op under torch.compile, the plan of a tuned
shape (a config's batched launcher for the layout, M per batch, the batch as an operand),
the untuned and refused answers, feasibility and the production set, the batched units'
text (and the other units' text unchanged), the bench case, the census records of batched
matmuls and the compile pass's rewrite of ``aten.bmm`` on real FX graphs."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from oasr_core import database, stamps
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.runtime import get_runtime
from oasr_core.testing import pretend_cuda_device
from oasr_core.types import Problem, Sentinel
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_gemm
from oasr_gemm import bench, codegen, jit, launch, numerics, ops, recorder
from oasr_gemm import config_space as cs
from oasr_gemm import feasibility as fe

REPO_DB = Path(__file__).parents[3] / "db"
TUNED = "pp_128x96x64_c1x1"
UNCHANGED = {
    (cs.LANE_SM80, "b64x64x64_w32x32x64_s3"): "ea4690534e0b072e",
    (cs.LANE_SM90, "ws_64x128x64_c1x1_s4"): "31eb633952c30224",
    (cs.LANE_SM90, "sk_128x64x64_c1x1"): "610646b2046e4603",
    (cs.LANE_SM90, "co_128x144x64_c1x1_swap"): "ec303f7f682073ed",
    (cs.LANE_SM90, "pp_128x128x64_c1x1_e64x64"): "672e138e4e7bdb17",
}
"""sha256 (16 hex) of ``unit_source`` of a few configs, taken before the fused-residual and
the batched units existed (``test_gemm_residual_codegen.UNCHANGED``)."""
TN, NN = cs.BMM_OPS["tn"], cs.BMM_OPS["nn"]


def _float_operands(layout, batch, m, n, k, dtype):
    a, b = numerics.make_bmm_operands(batch, m, n, k, layout, "bf16", seed=1)
    a = a.to(dtype)
    b = (b.transpose(1, 2).to(dtype).transpose(1, 2) if layout == "tn" else b.to(dtype))
    return a, b


# -- the op ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["tn", "nn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cpu_torch_path_is_torch_bmm_in_both_layouts(layout, dtype):
    a, b = _float_operands(layout, 3, 5, 16, 8, dtype)
    assert ops.bmm_layout(b) == layout
    got = oasr_gemm.bmm(a, b)
    assert got.dtype == dtype and got.shape == (3, 5, 16)
    assert torch.equal(got, torch.bmm(a, b))
    out = torch.empty(3, 5, 16, dtype=dtype)
    assert oasr_gemm.bmm(a, b, out=out) is out and torch.equal(out, got)
    assert oasr_gemm.stats() == {"torch:cpu": 2}


def test_views_of_4d_attention_tensors_and_other_strides():
    """``[B, H, T, d]`` flattened to ``[B * H, T, d]``: ``k^T`` is a TN view, ``v`` NN; a
    ``b`` with other strides (a sliced last dim) is neither, and torch serves it."""
    q, k, v = (torch.randn(2, 4, 12, 16) for _ in range(3))
    kt = k.flatten(0, 1).transpose(1, 2)
    assert ops.bmm_layout(kt) == "tn" and ops.bmm_layout(v.flatten(0, 1)) == "nn"
    scores = oasr_gemm.bmm(q.flatten(0, 1), kt)
    assert torch.allclose(scores.view(2, 4, 12, 12), q @ k.transpose(-1, -2), atol=1e-5)
    context = oasr_gemm.bmm(scores.softmax(-1), v.flatten(0, 1))
    assert torch.allclose(context, torch.bmm(scores.softmax(-1), v.flatten(0, 1)))
    sliced = torch.randn(8, 16, 24)[:, :, :12]
    assert ops.bmm_layout(sliced) is None
    assert torch.equal(oasr_gemm.bmm(q.flatten(0, 1), sliced),
                       torch.bmm(q.flatten(0, 1), sliced))
    assert oasr_gemm.stats() == {"torch:cpu": 2, "torch:noncontiguous": 1}


def test_bad_arguments_are_one_line_naming_what():
    a, b = _float_operands("nn", 3, 5, 16, 8, torch.float32)
    with pytest.raises(ValueError, match=r"^out must be a torch.float32 tensor of shape "
                                         r"\(3, 5, 16\) on cpu; got torch.float32 "
                                         r"\(3, 5, 8\) on cpu$"):
        oasr_gemm.bmm(a, b, out=torch.empty(3, 5, 8))
    with pytest.raises(ValueError, match="^out must be"):
        oasr_gemm.bmm(a, b, out=torch.empty(3, 5, 16, dtype=torch.float16))
    with pytest.raises(RuntimeError):  # torch's own messages: mismatched K, batch, rank
        oasr_gemm.bmm(a[..., :4], b)
    with pytest.raises(RuntimeError):
        oasr_gemm.bmm(a[:2], b)
    with pytest.raises(RuntimeError):
        oasr_gemm.bmm(a[0], b[0])
    assert oasr_gemm.stats() == {"torch:shape": 3}


def test_autograd_flows_through_the_torch_path():
    a, b = _float_operands("tn", 2, 4, 8, 8, torch.float32)
    a.requires_grad_()
    oasr_gemm.bmm(a, b).sum().backward()
    assert torch.allclose(a.grad, b.sum(-1).unsqueeze(1).expand_as(a))


def test_custom_op_fake_impl_and_torch_compile():
    a, b = _float_operands("tn", 2, 4, 8, 8, torch.float32)
    torch.library.opcheck(torch.ops.oasr.bmm.default, (a, b))
    torch.library.opcheck(torch.ops.oasr.bmm.default, (a, b.contiguous()))
    with FakeTensorMode():
        fa = torch.empty(6, 5, 32, device="cuda", dtype=torch.bfloat16)
        fb = torch.empty(6, 48, 32, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        out = torch.ops.oasr.bmm(fa, fb)
        assert out.shape == (6, 5, 48) and out.dtype == torch.bfloat16 and out.is_cuda

    def f(a, b):
        return oasr_gemm.bmm(a, b) * 2

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert torch.equal(compiled(a, b), f(a, b))


def test_routing_on_fake_cuda_tensors(monkeypatch):
    """The plan key holds the layout's op, N, K, the rows across the batch and the batch; a
    shape the tiers gave to torch is counted as selected with no operand checks; with a plan,
    unsupported operands go to torch with their reason."""
    reasons = []
    with FakeTensorMode():
        def t(*shape, dtype=torch.float16):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        a, b = t(4, 6, 64), t(4, 128, 64).transpose(1, 2)
        key = (TN, None, torch.float16, 128, 64, 24, a.get_device(), 4)
        ops._PLANS.store(key, ops.TORCH, ops.SERVING.bind())
        assert ops.bmm(a, b).shape == (4, 6, 128)
        assert oasr_gemm.stats() == {"torch:selected": 1}
        monkeypatch.setattr(ops, "_torch_bmm", lambda reason, *_: reasons.append(reason))
        ops._PLANS.store(key, object(), ops.SERVING.bind())  # any plan: the checks run
        ops.bmm(t(4, 64, 6).transpose(1, 2), b)
        ops.bmm(a.requires_grad_(), b)
        ops.bmm(a.detach(), t(4, 128, 64, dtype=torch.bfloat16).transpose(1, 2))
        ops.bmm(t(4, 6, 60), t(4, 128, 60).transpose(1, 2))  # no plan: K % 8
        ops.bmm(a.detach(), t(64, 4, 128).transpose(0, 1))  # batch-major: neither layout
    assert reasons == ["noncontiguous", "autograd", "dtype", "unaligned", "noncontiguous"]


# -- plans ----------------------------------------------------------------------------------

def _write_tier(path, entries):
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(cs.LANE_SM90)
    database.write_entries(
        database.tier_path(path, "sm90", family), family=family, arch="sm90", lane=lane,
        entries={database.signature_key(family, op, "half", dims): database.Entry(regions=r)
                 for (op, dims), r in entries.items()},
        configs={c.id: c for c in lane.config_space},
        soft=stamps.current_soft_validators(family))


@pytest.fixture
def bmm_tier(tmp_path, monkeypatch):
    """A system tier: bmm_tn (N=1504, K=64) TUNED up to 64 * 1504 rows, torch above;
    bmm_nn (64, 1504) TUNED everywhere."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    _write_tier(tmp_path, {(TN, (1504, 64)): ((64 * 1504, TUNED), (None, "torch")),
                           (NN, (64, 1504)): ((None, TUNED),)})
    get_runtime().reload()
    pretend_cuda_device()
    return tmp_path


def _fake_library(calls, status=0):
    def launcher(address, *operands):
        calls.append(operands)
        return status

    # A production module holds every config's own launcher beside the batched ones (a
    # config's availability is read from those).
    kernels = {c.id: launch.Kernel(c, launcher, lambda *a: 0) for c in cs.space(cs.LANE_SM90)}
    for c in cs.space(cs.LANE_SM90):
        if cs.has_bmm(c):
            for layout in cs.BMM_LAYOUTS:
                kernels[launch.bmm_key(layout, c.id)] = launch.BmmKernel(
                    c, launcher, lambda *a: 0, layout)
    return kernels


def test_a_tuned_shape_runs_the_configs_batched_launcher(bmm_tier):
    calls = []
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library(calls))
    plan = ops._plan_bmm((TN, None, torch.bfloat16, 1504, 64, 64 * 1504, 0, 64))
    assert plan.config.id == TUNED
    args = plan.args
    assert (args.m, args.n, args.k, args.dtype, args.act, args.split) == (1504, 1504, 64, 1, 0, 1)
    assert plan.launch(0, 7, 16, 32, 48, 64) == 0
    assert calls == [(16, 32, 48, 64, 7)]
    nn_plan = ops._plan_bmm((NN, None, torch.float16, 64, 1504, 8 * 1504, 0, 8))
    assert nn_plan.config.id == TUNED and nn_plan.args.m == 1504
    # Above the tuned region, another width, another layout at the TN width: torch.
    assert ops._plan_bmm((TN, None, torch.float16, 1504, 64, 65 * 1504, 0, 65)) is ops.TORCH
    assert ops._plan_bmm((TN, None, torch.float16, 512, 64, 4096, 0, 8)) is ops.TORCH
    assert ops._plan_bmm((NN, None, torch.float16, 1504, 64, 4096, 0, 8)) is ops.TORCH
    counts = get_runtime().counts
    assert counts[("gemm", TN, "system")] == 2


class _RefusingPlan:
    """A plan whose launcher refuses (status 2), as a prepared call is called."""

    def __init__(self, config):
        self.config, self.calls = config, []

    def output(self, a, n):
        return a.new_empty((*a.shape[:-1], n))

    def __call__(self, device, *operands):
        self.calls.append(operands)
        return 2


def test_a_refused_launch_is_served_by_torch_and_named(monkeypatch):
    key = (TN, None, torch.float16, 1504, 64, 4 * 1504, 0, 4)
    plan = _RefusingPlan(cs.config(cs.LANE_SM90, TUNED))
    ops._PLANS.store(key, plan, ops.SERVING.bind())
    with FakeTensorMode():
        a = torch.empty(4, 1504, 64, device="cuda", dtype=torch.float16)
        b = torch.empty(4, 1504, 64, device="cuda", dtype=torch.float16).transpose(1, 2)
        monkeypatch.setattr(torch.Tensor, "data_ptr", lambda self: 4096)
        with pytest.warns(RuntimeWarning, match=f"sm90_wgmma/{TUNED} refused op=bmm_tn N=1504 "
                                                r"K=64 L=4 M=1504 \(shape not implementable\)"):
            assert ops.bmm(a, b).shape == (4, 1504, 1504)
    assert [o[3] for o in plan.calls] == [4], "the batch count is the launch's operand"
    assert oasr_gemm.stats() == {"torch:refused": 1}
    assert ops._PLANS.table[key] is ops.TORCH


def test_a_config_without_batched_units_or_the_model_tier_is_not_served(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    _write_tier(tmp_path, {(TN, (1504, 64)): ((None, "sk_128x64x64_c1x1"),)})
    get_runtime().reload()
    pretend_cuda_device()
    launch.install_library(cs.LANE_SM90, "sm90", _fake_library([]))
    with pytest.warns(UserWarning, match="names config 'sk_128x64x64_c1x1'.*cannot run"):
        assert ops._plan_bmm((TN, None, torch.float16, 1504, 64, 1504, 0, 1)) is ops.TORCH


def test_feasibility_takes_the_split_free_configs_for_both_layouts():
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        space = cs.space(lane)
        for op in (TN, NN):
            problem = Problem("gemm", op, "fp16", (("N", 1504), ("K", 64)), 64 * 1504)
            served = [c for c in space if fe.supports(c, problem)]
            assert served == [c for c in space if cs.has_bmm(c)] and served
            unaligned = Problem("gemm", op, "fp16", (("N", 1500), ("K", 64)), 64 * 1500)
            assert not any(fe.supports(c, unaligned) for c in space)
    sk = cs.config(cs.LANE_SM90, "sk_128x64x64_c1x1")
    spk = cs.config(cs.LANE_SM80, "b64x64x64_w32x32x64_s3_spk2")
    pk = cs.config(cs.LANE_SM80, "b32x64x64_w16x32x64_s3_pk4")
    assert not any(cs.has_bmm(c) for c in (sk, spk, pk))
    assert cs.has_bmm(cs.config(cs.LANE_SM80, "b64x64x64_w32x32x64_s3"))
    assert {TN, NN} <= set(get_runtime().registry.family("gemm").ops)


def test_the_production_module_links_the_batched_units_the_tiers_name(bmm_tier):
    for lane in (cs.LANE_SM80, cs.LANE_SM90):
        assert jit.bmm_configs(lane, "sm90", {}) == {"tn": (), "nn": ()}
    chosen = jit.bmm_configs(cs.LANE_SM90, "sm90")
    assert [c.id for c in chosen["tn"]] == [TUNED] == [c.id for c in chosen["nn"]]
    names = [u.name for u in jit.production_spec(cs.LANE_SM90, "sm90").units]
    assert f"{TUNED}_bmm_tn" in names and f"{TUNED}_bmm_nn" in names
    plain = [u.name for u in jit.production_spec(cs.LANE_SM90, "sm90", bmm={}).units]
    assert not any("_bmm_" in n for n in plain)
    wanted = launch._wanted(cs.LANE_SM90, "sm90")
    assert launch.bmm_key("tn", TUNED) in wanted and launch.bmm_key("nn", TUNED) in wanted
    # The exhaustive build's modules: every split-free config's unit of one layout.
    full = jit.bmm_full_spec(cs.LANE_SM80, "sm80", "nn")
    assert len(full.units) == sum(cs.has_bmm(c) for c in jit.lane_configs(cs.LANE_SM80, "sm80"))
    assert all(u.name.endswith("_bmm_nn") for u in full.units)
    sk = cs.config(cs.LANE_SM90, "sk_128x64x64_c1x1")
    spec = jit.bmm_bench_spec(cs.LANE_SM90, "sm90", "tn", [cs.config(cs.LANE_SM90, TUNED), sk],
                              ("fp16",))
    assert [u.name for u in spec.units] == [f"{TUNED}_bmm_tn"]
    assert "cutlass::bfloat16_t" not in spec.units[0].source
    with pytest.raises(ValueError, match="bmm layout 'tt' is not one of"):
        jit.bmm_full_spec(cs.LANE_SM90, "sm90", "tt")


# -- generated units ------------------------------------------------------------------------

def test_the_batched_units_name_their_kernels_symbols_and_operands():
    c = cs.config(cs.LANE_SM90, "ws_64x16x64_c1x1_swap")
    src = codegen.bmm_unit_source(c, "nn")
    assert '#include "oasr_gemm_bmm/sm90.cuh"' in src and "CUTLASS_ENABLE_GDC" not in src
    assert ("oasr_gemm::bmm::sm90::Kernel<cutlass::half_t, 64, 16, 64, 1, 1, 0, "
            "cutlass::gemm::KernelTmaWarpSpecialized, cutlass::epilogue::TmaWarpSpecialized, "
            "void, true, 1>") in src
    assert codegen.bmm_symbol(c, "nn") == "oasr_gemm_sm90_ws_64x16x64_c1x1_swap_bmm_nn"
    assert (f"OASR_EXPORT int32_t {codegen.bmm_symbol(c, 'nn')}(const oasr_kit::CallArgs* c, "
            "const void* a, const void* b, void* d, int64_t batch, void* stream)") in src
    assert (f"OASR_EXPORT int64_t {codegen.bmm_workspace_symbol(c, 'nn')}(int64_t m, "
            "int64_t n, int64_t k, int64_t batch, int32_t dtype)") in src
    assert ("K1::run(a, b, d, batch, c->m, c->n, c->k, c->workspace, c->workspace_bytes, "
            "c->flags, static_cast<cudaStream_t>(stream))") in src
    epi = codegen.bmm_kernel_type(cs.config(cs.LANE_SM90, "pp_128x128x64_c1x1_e64x64"),
                                  "bf16", "tn")
    assert epi.endswith("void, false, 0, 64, 64>")
    c80 = cs.config(cs.LANE_SM80, "b64x64x64_w32x32x64_s3")
    src80 = codegen.bmm_unit_source(c80, "tn", ("bf16",))
    assert '#include "oasr_gemm_bmm/sm80.cuh"' in src80
    assert ("using K1 = oasr_gemm::bmm::sm80::Kernel<cutlass::bfloat16_t, 64, 64, 64, 32, 32, "
            "64, 3, 0>;") in src80 and "K0" not in src80
    assert "c->workspace_bytes, 0, static_cast<cudaStream_t>(stream))" in src80
    assert codegen.bmm_unit(c80, "tn") == "b64x64x64_w32x32x64_s3_bmm_tn"
    for bad, layout in ((cs.config(cs.LANE_SM90, "sk_128x64x64_c1x1"), "tn"), (c80, "nt")):
        with pytest.raises(ValueError, match="no bmm kernel|bmm layout"):
            codegen.bmm_unit_source(bad, layout)


def test_the_other_units_and_the_shipped_tables_name_are_unchanged():
    """The batched units live in their own units and headers: every other unit's text is
    what it was (the hashes taken before the fused-residual units, still current), the
    digest without them is the one recorded before, and the new digest is recorded as the
    same implementation, so the shipped tables stay current."""
    for (lane, cid), digest in UNCHANGED.items():
        text = codegen.unit_source(cs.config(lane, cid))
        assert hashlib.sha256(text.encode()).hexdigest()[:16] == digest
    table = json.loads(codegen.EQUIVALENTS.read_text())
    before = codegen.impl_digest(bmm=False, group=False)
    assert before == "f2d97fd2df6840dd" and before in table
    assert table[codegen.impl_digest()]["same_as"] == table[before]["same_as"]
    shipped = json.loads((REPO_DB / "sm90" / "gemm.json").read_text())
    assert codegen.impl_hash() == shipped["validators"]["soft"]["impl_hash"]
    assert "oasr_gemm_bmm" not in " ".join(h.name for h in codegen.csrc_dir().glob(
        "oasr_gemm/*.cuh"))


# -- the bench case -------------------------------------------------------------------------

def test_bench_batches_lay_the_rows_out_as_attention_does():
    assert bench.bmm_batches(1504, 64, 64 * 1504) == (64, 1504)
    assert bench.bmm_batches(64, 1504, 64 * 1504) == (64, 1504)
    assert bench.bmm_batches(256, 64, 32 * 255) == (32, 255)
    assert bench.bmm_batches(8, 16, 800) == (50, 16)
    assert bench.bmm_batches(8, 8, 7) == (1, 7)


@pytest.mark.parametrize("layout", ["tn", "nn"])
def test_the_bench_case_times_torch_bmm_and_the_batched_launchers(monkeypatch, layout):
    from oasr_core.kit import benching

    config = cs.config(cs.LANE_SM90, TUNED)
    calls = []
    kernels = {k[1]: v for k, v in _fake_library(calls).items()
               if isinstance(k, tuple) and k[0] == cs.BMM_OPS[layout]}
    monkeypatch.setattr(benching, "bench_device", lambda options, full: benching.BenchDevice(
        torch.device("cpu"), 0, kernels))
    other = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    kernels.pop(other.id)
    options = SimpleNamespace(seed=3, lane=cs.LANE_SM90, copies_for=lambda nbytes: 2,
                              config_of=lambda choice, problem: None
                              if choice is Sentinel.TORCH else choice)
    n, k = (48, 16) if layout == "tn" else (16, 48)
    problem = Problem("gemm", cs.BMM_OPS[layout], "bf16", (("N", n), ("K", k)), 4 * 48)
    armed = []
    monkeypatch.setattr(benching, "kernel_arm", lambda prepared, index, operands, out, what:
                        armed.append((prepared, operands)) or (lambda i: None))
    case = bench.make_bench(problem, [Sentinel.TORCH, config, other], options)
    assert set(case.arms) == {"torch", TUNED} and case.copies == 2
    ((prepared, operands),) = armed
    assert (prepared.args.m, prepared.args.n, prepared.args.k) == (48, n, k)
    assert [o[3] for o in operands] == [4, 4], "the batch count is the launch's operand"
    assert f"no bmm {layout} kernel compiled" in case.rejected[other.id]
    out = case.arms["torch"](1)
    assert out.shape == (4, 48, n)
    assert case.gate(out), case.gate(out).reason
    assert not case.gate(out * 1.01), "a scaled output fails the gate"


# -- census -----------------------------------------------------------------------------------

def test_the_recorder_keys_batched_matmuls_as_bmm_by_layout():
    q, k, v = (torch.randn(2, 4, 48, 64) for _ in range(3))
    heads = torch.randn(2, 48, 4, 64).transpose(1, 2)  # a head view: not contiguous
    with ShapeRecorder(recorder.recorder_patches()) as rec:
        scores = q @ k.transpose(-1, -2)  # TN: k contiguous
        torch.matmul(scores.softmax(-1), v)  # NN
        q.matmul(heads.transpose(-1, -2))  # torch copies the head view: NN
        torch.bmm(q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2))  # TN, 3-D
        oasr_gemm.bmm(q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2))  # the op, once
        q @ k[:1].transpose(-1, -2)  # broadcast batch: skipped
        q @ torch.randn(64, 32)  # a 2-D weight: gemm
    counts = {(c.op, c.m, dict(c.dims)["N"], dict(c.dims)["K"]): n
              for c, n in rec.counts.items()}
    assert counts == {(TN, 8 * 48, 48, 64): 3, (NN, 8 * 48, 64, 48): 1,
                      (NN, 8 * 48, 48, 64): 1, ("gemm", 8 * 48, 32, 64): 1}
    call = next(c for c in rec.counts if c.op == TN)
    assert call.batch == 1 and call.weight_elements == 0
    assert call.elements == 8 * (48 * 64 + 64 * 48 + 48 * 48)
    assert call.flops == 2 * 8 * 48 * 48 * 64
    (skip,) = rec.skipped_json()
    assert "broadcast batch" in skip["reason"] and skip["calls"] == 1


# -- the compile pass -------------------------------------------------------------------------

class RelPositionAttention(nn.Module):
    """Attention with a relative-position term (Transformer-XL / Conformer style) written
    with matmuls: Inductor does not turn it into SDPA, so its products stay ``aten.bmm``."""

    def __init__(self, heads: int = 4, d_head: int = 64) -> None:
        super().__init__()
        self.u = nn.Parameter(torch.randn(heads, 1, d_head) / 8)
        self.v = nn.Parameter(torch.randn(heads, 1, d_head) / 8)
        self.scale = 1 / math.sqrt(d_head)

    def forward(self, q, k, v, p):
        content = torch.matmul(q + self.u, k.transpose(-1, -2))
        position = torch.matmul(q + self.v, p.transpose(-1, -2))
        probs = ((content + position) * self.scale).softmax(-1)
        return torch.matmul(probs, v)


def _attention_inputs(dtype, t=48, d=64):
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 4, t, d, generator=gen).to(dtype) for _ in range(4))


def _compiled(model, inputs):
    import oasr_core.compile as oc
    from oasr_core.testing import aot_pass_backend

    torch._dynamo.reset()
    backend = oc.backend(arch="sm90")
    graphs = []
    with torch.no_grad():
        out = torch.compile(model, backend=aot_pass_backend(backend.graph_pass, graphs))(
            *inputs)
    return backend, [str(n.target) for n in graphs[0].nodes if n.op == "call_function"], out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_compile_pass_serves_tuned_products_and_leaves_untuned_ones(
        tmp_path, monkeypatch, dtype):
    model = RelPositionAttention().eval().to(dtype)
    inputs = _attention_inputs(dtype)
    with torch.no_grad():
        ref = model(*inputs)
    backend, targets, _ = _compiled(model, inputs)
    assert backend.rewritten == {} and targets.count("aten.bmm.default") == 3
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    _write_tier(tmp_path, {(TN, (48, 64)): ((None, TUNED),)})
    get_runtime().reload()
    backend, targets, out = _compiled(model, inputs)
    assert backend.rewritten == {("gemm", TN): 2}
    assert targets.count("oasr.bmm.default") == 2 and targets.count("aten.bmm.default") == 1
    assert out.shape == ref.shape and out.dtype == dtype
    assert torch.allclose(out.float(), ref.float(), atol=2e-2)  # the op's torch path on a CPU
    _write_tier(tmp_path, {(TN, (48, 64)): ((None, TUNED),), (NN, (64, 48)): ((None, TUNED),)})
    get_runtime().reload()
    backend, targets, _ = _compiled(model, inputs)
    assert backend.rewritten == {("gemm", TN): 2, ("gemm", NN): 1}
    assert "aten.bmm.default" not in targets


def test_a_compile_census_records_the_products_and_inductors_own_sdpa_is_no_site():
    from oasr_core.census.probe import compiled_calls

    inputs = _attention_inputs(torch.float32)
    with torch.no_grad():
        calls = compiled_calls(RelPositionAttention().eval(), inputs, "bf16")
    got = {(c.label, c.m, c.elements): n for c, n in calls.items()}
    rows = 8 * 48
    assert got == {
        (f"gemm|op={TN}|dt=bf16|N=48|K=64", rows, rows * 64 + 8 * 64 * 48 + rows * 48): 2,
        (f"gemm|op={NN}|dt=bf16|N=64|K=48", rows, rows * 48 + 8 * 48 * 64 + rows * 64): 1}

    class Plain(nn.Module):
        def forward(self, q, k, v):
            return torch.matmul((q @ k.transpose(-1, -2) * 0.125).softmax(-1), v)

    with torch.no_grad():
        calls = compiled_calls(Plain().eval(), inputs[:3], "bf16")
    assert calls == {}, "Inductor rewrites plain eager attention into SDPA before the pass"


def test_the_reference_conformers_relative_position_attention_is_three_bmm_sites():
    """The reference Conformer writes its attention with matmuls (content, relative-position
    and context products), so its compile census holds them as bmm sites; its head views
    reach ``bmm`` contiguous (NN). At 64 input frames T = 15 after subsampling, 29
    positions: unaligned widths, which the op serves from torch."""
    from oasr_core.census.models import ConformerEncoder
    from oasr_core.census.probe import compiled_calls

    model = ConformerEncoder(layers=1).eval()
    with torch.no_grad():
        calls = compiled_calls(model, (torch.randn(2, 64, 80),), "bf16")
    rows = 2 * 4 * 15  # batch x heads x frames
    got = {(c.op, dict(c.dims)["N"], dict(c.dims)["K"], c.m): n for c, n in calls.items()
           if c.op in (TN, NN)}
    assert got == {(NN, 15, 64, rows): 1, (NN, 29, 64, rows): 1, (NN, 64, 15, rows): 1}
