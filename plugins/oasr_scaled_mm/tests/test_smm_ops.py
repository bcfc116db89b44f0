"""The ops without a GPU: exact results on the CPU, errors, routing, custom ops, selection."""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import pytest
import torch
from oasr_core import database, stamps
from oasr_core.errors import OasrWarning, ToolchainError
from oasr_core.runtime import get_runtime
from oasr_core.testing import pretend_cuda_device
from oasr_core.types import Selection, Tier
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_scaled_mm
from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import jit, launch, numerics, ops, reference


def _operands(m=6, n=32, k=48, seed=0, bias=True):
    return numerics.make_operands(m, n, k, bias=bias, seed=seed)


def _numpy_reference(a, w, a_scale, w_scale, bias):
    """The documented op order in numpy float32: ((f(acc) * as) * ws) + b."""
    acc = a.numpy().astype(np.int64) @ w.numpy().astype(np.int64).T
    y = acc.astype(np.float32) * a_scale.numpy().reshape(-1, 1)
    y = y * w_scale.numpy().reshape(1, -1)
    return y + (bias.numpy().astype(np.float32) if bias is not None else np.float32(0))


def test_integer_results_are_exact_on_the_cpu():
    gen = torch.Generator().manual_seed(1)
    m, n, k = 37, 48, 4096
    a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
    w = torch.randint(-128, 128, (n, k), generator=gen, dtype=torch.int8)
    ones_m, ones_n = torch.ones(m), torch.ones(n)
    acc64 = a.long() @ w.long().t()
    assert torch.equal(reference.exact_acc(a, w).long(), acc64)
    # 2**-24-scaled outputs are exact in fp32, so bf16 rounding is the only rounding.
    out = oasr_scaled_mm.scaled_mm(a, w, ones_m * 2.0 ** -12, ones_n * 2.0 ** -12,
                                   out_dtype=torch.bfloat16)
    assert torch.equal(out, (acc64.double() * 2.0 ** -24).to(torch.bfloat16))
    small = torch.randint(-3, 4, (m, 64), generator=gen, dtype=torch.int8)
    wsmall = torch.randint(-3, 4, (n, 64), generator=gen, dtype=torch.int8)
    exact = small.long() @ wsmall.long().t()                       # |acc| <= 576: fp16-exact
    got = oasr_scaled_mm.scaled_mm(small, wsmall, ones_m, ones_n)
    assert torch.equal(got.long(), exact)
    q = oasr_scaled_mm.scaled_mm_quant(small, wsmall, ones_m, ones_n, 8.0)
    assert torch.equal(q.long(), torch.round(exact.double() / 8).clamp(-128, 127).long())


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_op_order_matches_the_documented_fp32_ops(out_dtype, bias):
    a, a_scale, w, w_scale, b = _operands(m=33, n=64, k=256, bias=bias)
    got = oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, b, out_dtype=out_dtype)
    want = torch.from_numpy(_numpy_reference(a, w, a_scale, w_scale, b)).to(out_dtype)
    assert torch.equal(got, want)
    assert oasr_scaled_mm.stats() == {"torch:cpu": 1}


def test_bias_dtypes_give_the_same_bits_as_its_float32_value():
    a, a_scale, w, w_scale, b = _operands()
    for dtype in (torch.float16, torch.bfloat16):
        low = b.to(dtype)
        assert torch.equal(oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, low),
                           oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, low.float()))


def test_quant_rounds_half_to_even_saturates_and_zeroes_nan():
    k = 16
    values = [-5, -3, -1, 1, 3, 5, 0, 100, -100, 7]
    a = torch.zeros(1, k, dtype=torch.int8)
    a[0, 0] = 1
    w = torch.zeros(len(values), k, dtype=torch.int8)
    w[:, 0] = torch.tensor(values, dtype=torch.int8)
    one, ones = torch.ones(1), torch.ones(len(values))
    half = oasr_scaled_mm.scaled_mm_quant(a, w, one, ones, 2.0)
    assert half[0].tolist() == [-2, -2, 0, 0, 2, 2, 0, 50, -50, 4]
    sat = oasr_scaled_mm.scaled_mm_quant(a, w, one, ones, torch.tensor([0.5]))
    assert sat[0].tolist()[6:] == [0, 127, -128, 14]
    zero = oasr_scaled_mm.scaled_mm_quant(a, w, one, ones, 0.0)   # x/0: +-inf, and 0/0 NaN
    assert zero[0].tolist() == [-128, -128, -128, 127, 127, 127, 0, 127, -128, 127]


def test_quant_divides_rather_than_multiplying_by_a_reciprocal():
    y = torch.linspace(-300, 300, 200001, dtype=torch.float32)
    s = 0.37
    got = reference.quantize_output(y.view(1, -1), s).view(-1)
    divided = np.round(y.numpy() / np.float32(s)).clip(-128, 127).astype(np.int8)
    assert torch.equal(got, torch.from_numpy(divided))


def test_leading_dims_flatten_and_out_is_filled():
    a, a_scale, w, w_scale, b = _operands(m=6)
    a3 = a.view(2, 3, -1)
    out = torch.empty(2, 3, 32, dtype=torch.float16)
    got = oasr_scaled_mm.scaled_mm(a3, w, a_scale.view(2, 3), w_scale, b, out=out)
    assert got is out and torch.equal(out.view(6, 32), oasr_scaled_mm.scaled_mm(a, w, a_scale,
                                                                                w_scale, b))
    q = torch.empty(2, 3, 32, dtype=torch.int8)
    assert oasr_scaled_mm.scaled_mm_quant(a3, w, a_scale, w_scale, 0.05, b, out=q) is q
    assert ops.stats() == {"torch:cpu": 3}


def test_meta_tensors_give_empty_results_of_the_right_shape():
    a = torch.empty(4, 7, 256, dtype=torch.int8, device="meta")
    w = torch.empty(768, 256, dtype=torch.int8, device="meta")
    a_scale = torch.empty(4, 7, device="meta")
    w_scale = torch.empty(768, device="meta")
    y = oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, out_dtype=torch.bfloat16)
    assert y.shape == (4, 7, 768) and y.dtype == torch.bfloat16 and y.device.type == "meta"
    q = oasr_scaled_mm.scaled_mm_quant(a, w, a_scale, w_scale, 0.1)
    assert q.shape == (4, 7, 768) and q.dtype == torch.int8
    assert ops.stats() == {}


def test_routing_reasons_on_fake_cuda_tensors():
    with FakeTensorMode():
        def t(*shape, dtype=torch.float32):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        def why(a, w, bias=None, out_scale=None):
            return ops._unsupported(a, w, t(a.shape[0]), t(w.shape[0]), bias, out_scale, None,
                                    w.shape[0], w.shape[1])

        a, w = t(4, 64, dtype=torch.int8), t(128, 64, dtype=torch.int8)
        assert why(a, w) is None and why(a, w, t(128)) is None
        assert why(t(4, 56, dtype=torch.int8), t(128, 56, dtype=torch.int8)) == "unaligned"
        assert why(a, t(120, 64, dtype=torch.int8)) == "unaligned"
        assert why(t(64, 4, dtype=torch.int8).t(), w) == "noncontiguous"
        strided = torch.empty_strided((128,), (2,), device="cuda")
        assert why(a, w, strided) == "noncontiguous"
        assert why(a, w, out_scale=torch.ones(1)) == "out_scale"
    cpu = ops._unsupported(torch.empty(4, 64, dtype=torch.int8),
                           torch.empty(128, 64, dtype=torch.int8), torch.empty(4),
                           torch.empty(128), None, None, None, 128, 64)
    assert cpu == "cpu"


def test_custom_ops_are_registered_with_fake_impls():
    a, a_scale, w, w_scale, b = _operands()
    torch.library.opcheck(torch.ops.oasr.scaled_mm.default,
                          (a, w, a_scale, w_scale, b, torch.bfloat16))
    torch.library.opcheck(torch.ops.oasr.scaled_mm_quant.default,
                          (a, w, a_scale, w_scale, None, 0.05, b))
    torch.library.opcheck(torch.ops.oasr.scaled_mm_quant.default,
                          (a, w, a_scale, w_scale, torch.tensor([0.05]), 1.0, None))
    with FakeTensorMode():
        fa = torch.empty(3, 5, 64, device="cuda", dtype=torch.int8)
        fw = torch.empty(48, 64, device="cuda", dtype=torch.int8)
        y = torch.ops.oasr.scaled_mm(fa, fw, torch.empty(15, device="cuda"),
                                     torch.empty(48, device="cuda"), None, torch.float16)
        assert y.shape == (3, 5, 48) and y.dtype == torch.float16 and y.is_cuda


def test_torch_compile_traces_through_the_custom_ops():
    a, a_scale, w, w_scale, b = _operands()
    scale_t = torch.tensor([0.05])

    def f(a, w, a_scale, w_scale, b):
        y = oasr_scaled_mm.scaled_mm(a, w, a_scale, w_scale, b, out_dtype=torch.bfloat16)
        q = oasr_scaled_mm.scaled_mm_quant(a, w, a_scale, w_scale, scale_t, b)
        r = oasr_scaled_mm.scaled_mm_quant(a, w, a_scale, w_scale, 0.05)
        return y, q, r

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    for got, want in zip(compiled(a, w, a_scale, w_scale, b), f(a, w, a_scale, w_scale, b),
                         strict=True):
        assert torch.equal(got, want)


# --- selection and the CUDA plan, with the GPU faked ---------------------------------------

def _pretend_gpu(monkeypatch, arch="sm90"):
    pretend_cuda_device(arch=arch)
    monkeypatch.setattr("oasr_scaled_mm.heuristic._device_index", lambda: None)


def _fake_library(lane=cs.LANE_SM90):
    return {(op, c.id): launch.Kernel(c, op, lambda *a: 0, lambda *a: 0)
            for c in cs.space(lane) for op in cs.OPS if cs.serves(c, op)}


def test_untuned_shapes_take_the_heuristic_and_bind_a_prepared_call(monkeypatch):
    _pretend_gpu(monkeypatch)
    launch.LIBRARIES.install(cs.LANE_SM90, "sm90", _fake_library())
    assert ops.select_config(768, 256, 11 * 128, "sm90").id == "ws_128x128x128_c1x1"
    plan = ops._plan((cs.OP_MM, torch.bfloat16, 768, 256, 11 * 128, 0))
    kernels = launch.LIBRARIES.get(cs.LANE_SM90, "sm90")
    assert plan.config.id == "ws_128x128x128_c1x1"
    assert plan.fn is kernels[(cs.OP_MM, plan.config.id)].fn
    assert (plan.args.m, plan.args.n, plan.args.k, plan.args.dtype) == (1408, 768, 256, 1)
    quant = ops._plan((cs.OP_QUANT, torch.int8, 768, 256, 1, 0))
    assert quant.config.id == "ws_64x32x128_c1x1" and quant.args.dtype == 2
    assert get_runtime().counts[(cs.FAMILY, cs.OP_MM, "heuristic")] == 1


def test_the_quant_op_never_serves_stream_k(monkeypatch):
    import oasr_core

    _pretend_gpu(monkeypatch)
    sk = cs.config(cs.LANE_SM90, "sk_128x128x128_c1x1")

    def fake_select(family, op, dtype, dims, m, arch=None, **_kw):
        return Selection(choice=sk, tier=Tier.SYSTEM, lane=cs.LANE_SM90, config=sk)

    monkeypatch.setattr(oasr_core, "select", fake_select)
    assert ops.select_config(768, 8192, 64, "sm90") is sk
    with pytest.warns(OasrWarning, match="no quantizing Stream-K launcher"):
        got = ops.select_quant_config(768, 8192, 64, "sm90")
    assert got.id == "ws_64x32x128_c1x1" and not got.params["stream_k"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ops.select_quant_config(768, 8192, 64, "sm90") == got


@pytest.fixture
def system_tier(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family = rt.registry.family(cs.FAMILY)
    lane = rt.registry.lane(cs.LANE_SM90)
    entries = {
        database.signature_key(family, op, None, (768, 8192)): database.Entry(
            regions=((64, "sk_128x128x128_c1x1"), (2048, "heuristic"), (None, "torch")))
        for op in cs.OPS}
    database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                           arch="sm90", lane=lane, entries=entries,
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    _pretend_gpu(monkeypatch)
    return tmp_path


def test_a_tuning_file_drives_selection_and_the_production_set(system_tier):
    family = get_runtime().registry.family(cs.FAMILY)
    keys = set(database.read_tuning_file(database.tier_path(system_tier, "sm90", family)).entries)
    assert keys == {"scaled_mm|op=scaled_mm|N=768|K=8192",
                    "scaled_mm|op=scaled_mm_quant|N=768|K=8192"}
    assert ops.select_config(768, 8192, 64, "sm90").id == "sk_128x128x128_c1x1"
    assert ops.select_config(768, 8192, 1000, "sm90").id == "ws_128x64x128_c1x1"  # heuristic
    assert ops.select_config(768, 8192, 4096, "sm90") is None
    with pytest.warns(OasrWarning, match="cannot run this shape"):
        quant = ops.select_quant_config(768, 8192, 64, "sm90")
    assert quant.id == "ws_64x32x128_c1x1"
    assert "sk_128x128x128_c1x1" in {u.name for u in jit.production_spec(cs.LANE_SM90,
                                                                          "sm90").units}


def test_unbuildable_module_falls_back_to_torch_with_one_warning(monkeypatch):
    _pretend_gpu(monkeypatch)

    def broken(*_args, **_kwargs):
        raise ToolchainError("nvcc not found (test)")

    monkeypatch.setattr(jit, "production_spec", broken)
    key = (cs.OP_MM, torch.float16, 768, 256, 64, 0)
    with pytest.warns(OasrWarning, match="unavailable.*nvcc not found"):
        assert ops._plan(key) is ops.TORCH
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ops._plan((cs.OP_QUANT, torch.int8, 768, 256, 8, 0)) is ops.TORCH
    assert launch.LIBRARIES.get(cs.LANE_SM90, "sm90") is None


def test_a_config_missing_from_the_module_is_served_by_torch(monkeypatch):
    _pretend_gpu(monkeypatch)
    kernels = _fake_library()
    del kernels[(cs.OP_QUANT, "ws_64x32x128_c1x1")]
    launch.LIBRARIES.install(cs.LANE_SM90, "sm90", kernels)
    assert launch.is_available(cs.config(cs.LANE_SM90, "ws_64x32x128_c1x1"))
    with pytest.warns(OasrWarning, match="not in this process"):
        assert ops._plan((cs.OP_QUANT, torch.int8, 768, 256, 1, 0)) is ops.TORCH
    launch.LIBRARIES.install(cs.LANE_SM90, "sm90", {})
    assert not launch.is_available(cs.config(cs.LANE_SM90, cs.SM90_DEFAULT))


def test_prepared_call_passes_every_pointer_and_the_out_scale():
    calls = []

    def fake_launcher(address, *args):
        record = launch.CallArgs.from_address(address)
        calls.append(((record.m, record.n, record.k, record.dtype, record.workspace), args))
        return 0

    config = cs.config(cs.LANE_SM80, "b64x64x128_w32x32x128_s5")
    kernel = launch.Kernel(config, cs.OP_QUANT, fake_launcher, lambda *a: 0)
    prepared = kernel.prepare("int8", 64, 256, 512)
    assert prepared.address == ctypes.addressof(prepared.args)
    assert prepared.launch(0, 7, 16, 32, 48, 64, 0, 0, 0.25, 80) == 0
    assert calls == [((64, 256, 512, 2, None), (16, 32, 48, 64, 0, 0, 0.25, 80, 7))]
    assert launch.out_scale_args(0.5) == (0, 0.5)
    assert launch.out_scale_args(torch.ones(1))[0] != 0


def test_call_record_is_the_kits():
    """The family passes the kit's call record (its layout is tested against the header in the
    core's kit tests); the output dtype travels in ``dtype``, split-K is 1."""
    from oasr_core.jit import kit

    assert launch.CallArgs is kit.CallArgs
    config = cs.config(cs.LANE_SM80, "b64x64x128_w32x32x128_s5")
    record = launch.Kernel(config, cs.OP_MM, lambda *a: 0, lambda *a: 0).prepare(
        "bf16", 64, 256, 512).args
    assert (record.dtype, record.act, record.split, record.flags) == (1, 0, 1, 0)