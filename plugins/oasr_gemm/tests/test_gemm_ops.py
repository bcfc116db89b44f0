"""The ops on a machine without a GPU: routing to torch (counted), custom ops, fallbacks."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from oasr_core import stamps
from oasr_core.errors import OasrWarning, ToolchainError
from oasr_core.testing import pretend_cuda_device
from torch._subclasses.fake_tensor import FakeTensorMode

import oasr_gemm
from oasr_gemm import config_space as cs
from oasr_gemm import jit, launch, ops


def _operands(dtype=torch.float16, m=6, n=16, k=32):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(2, m, k, generator=gen).to(dtype)
    w = torch.randn(n, k, generator=gen).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    return a, w, b


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cpu_inputs_take_the_torch_path_and_are_counted(dtype):
    a, w, b = _operands(dtype)
    assert torch.equal(oasr_gemm.gemm(a, w, b), F.linear(a, w, b))
    assert torch.equal(oasr_gemm.gemm(a, w), F.linear(a, w))
    for act, fn in (("relu", F.relu), ("gelu", F.gelu), ("silu", F.silu)):
        assert torch.equal(oasr_gemm.gemm_activation(a, w, b, act), fn(F.linear(a, w, b)))
    assert oasr_gemm.stats() == {"torch:cpu": 5}
    oasr_gemm.reset_stats()
    assert oasr_gemm.stats() == {}


def test_mismatched_shapes_reach_torch_and_its_error():
    a, w, _ = _operands()
    with pytest.raises(RuntimeError):
        oasr_gemm.gemm(a, w[:, :16])
    assert oasr_gemm.stats() == {"torch:shape": 1}


def test_out_argument_is_filled_and_checked():
    a, w, b = _operands()
    out = torch.empty(2, 6, 16, dtype=torch.float16)
    assert oasr_gemm.gemm(a, w, b, out=out) is out
    assert torch.equal(out, F.linear(a, w, b))
    with pytest.raises(ValueError, match="out must be"):
        oasr_gemm.gemm(a, w, b, out=torch.empty(6, 16, dtype=torch.float16))


def test_unknown_activation_is_an_error():
    a, w, b = _operands()
    with pytest.raises(ValueError, match="activation"):
        oasr_gemm.gemm_activation(a, w, b, "tanh")


def test_routing_reasons_on_fake_cuda_tensors():
    with FakeTensorMode():
        def t(*shape, dtype=torch.float16):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        def why(a, w, b=None):
            return ops._unsupported(a, w, b, w.shape[0], w.shape[1])

        a, w, b = t(4, 64), t(128, 64), t(128)
        assert why(a, w, b) is None
        assert why(a, w) is None
        assert why(t(4, 64, dtype=torch.float32), t(128, 64, dtype=torch.float32)) == "dtype"
        assert why(a, t(128, 64, dtype=torch.bfloat16)) == "dtype"
        assert why(t(4, 60), t(128, 60)) == "unaligned"
        assert why(a, t(124, 64)) == "unaligned"
        assert why(t(64, 4).t(), w) == "noncontiguous"
        assert why(a, t(64, 128).t()) == "noncontiguous"
        assert why(a, w, t(64)) == "bias"
        assert why(a, w, t(128, dtype=torch.bfloat16)) == "bias"
        grad_w = t(128, 64).requires_grad_()
        assert why(a, grad_w) == "autograd"
        with torch.no_grad():
            assert why(a, grad_w) is None
    assert ops._unsupported(torch.empty(4, 64), torch.empty(128, 64), None, 128, 64) == "cpu"


def test_a_shape_the_tiers_gave_to_torch_skips_the_operand_checks(monkeypatch):
    def no_checks(*_args):
        raise AssertionError("a torch-served shape must not pay for the operand checks")

    monkeypatch.setattr(ops, "_unsupported", no_checks)
    with FakeTensorMode():
        a = torch.empty(64, 4, device="cuda", dtype=torch.float16).t()  # non-contiguous
        w = torch.empty(128, 64, device="cuda", dtype=torch.float16)
        ops._PLANS.store(("gemm", None, torch.float16, 128, 64, 4, a.get_device()), ops.TORCH,
                         ops.SERVING.bind())
        assert ops.gemm(a, w).shape == (4, 128)
        # K = 0 is an empty product, never a division by zero
        assert ops.gemm(torch.empty(4, 0, device="cuda", dtype=torch.float16),
                        torch.empty(128, 0, device="cuda", dtype=torch.float16)).shape == (4, 128)
    assert oasr_gemm.stats() == {"torch:selected": 1, "torch:empty": 1}


def test_custom_ops_are_registered_with_fake_impls():
    a, w, b = _operands()
    torch.library.opcheck(torch.ops.oasr.gemm.default, (a[0], w, b))
    torch.library.opcheck(torch.ops.oasr.gemm_activation.default, (a[0], w, b, "gelu"))
    with FakeTensorMode():
        fa = torch.empty(3, 5, 32, device="cuda", dtype=torch.bfloat16)
        fw = torch.empty(48, 32, device="cuda", dtype=torch.bfloat16)
        out = torch.ops.oasr.gemm_activation(fa, fw, None, "relu")
        assert out.shape == (3, 5, 48) and out.dtype == torch.bfloat16 and out.is_cuda


def test_torch_compile_traces_through_the_custom_op():
    a, w, b = _operands()

    def f(a, w, b):
        return oasr_gemm.gemm_activation(a, w, b, "silu") + oasr_gemm.gemm(a, w)

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert torch.equal(compiled(a, w, b), f(a, w, b))


def _pretend_gpu(monkeypatch, arch="sm90"):
    pretend_cuda_device(arch=arch)


def _default_served(tmp_path, monkeypatch, dims=(256, 512)):
    """A system tier whose entry serves the lane default at ``dims`` (an uncovered shape is
    served by torch, so a test of the kernel path needs an entry)."""
    from oasr_core import database
    from oasr_core.runtime import get_runtime

    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    rt = get_runtime()
    family, lane = rt.registry.family("gemm"), rt.registry.lane(cs.LANE_SM90)
    database.write_entries(
        database.tier_path(tmp_path, "sm90", family), family=family, arch="sm90", lane=lane,
        entries={database.signature_key(family, "gemm", "fp16", dims):
                 database.Entry(regions=((None, "default"),))},
        configs={}, soft=stamps.current_soft_validators(family))


def test_unbuildable_module_falls_back_to_torch_with_one_warning(monkeypatch, tmp_path):
    _default_served(tmp_path, monkeypatch)
    _pretend_gpu(monkeypatch)

    def broken(*_args, **_kwargs):
        raise ToolchainError("nvcc not found (test)")

    monkeypatch.setattr(jit, "production_spec", broken)
    key = ("gemm", None, torch.float16, 256, 512, 64, 0)
    with pytest.warns(RuntimeWarning, match="unavailable.*nvcc not found"):
        assert ops._plan(key) is ops.TORCH
    assert ops._PLANS.table[key] is ops.TORCH
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ops._plan(("gemm_activation", "gelu", torch.bfloat16, 256, 512, 8, 0)) \
            is ops.TORCH
    assert launch.library(cs.LANE_SM90, "sm90") is None


def test_config_missing_from_the_loaded_module_is_served_by_torch(monkeypatch, tmp_path):
    _default_served(tmp_path, monkeypatch)
    _pretend_gpu(monkeypatch)
    launch.install_library(cs.LANE_SM90, "sm90", {})
    default = cs.config(cs.LANE_SM90, cs.SM90_DEFAULT)
    assert launch.is_available(default) is False
    # Selection skips a tier entry whose config this process's module lacks (one warning) and
    # the next tier, here torch, serves it.
    with pytest.warns(OasrWarning, match="not in this process"):
        assert ops._plan(("gemm", None, torch.float16, 256, 512, 64, 0)) is ops.TORCH


def test_torch_sentinel_selection_needs_no_module(monkeypatch):
    _pretend_gpu(monkeypatch, "sm75")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ops._plan(("gemm", None, torch.float16, 256, 512, 64, 0)) is ops.TORCH
    assert (cs.LANE_SM80, "sm75") not in dict(launch.LIBRARIES.items())


def test_prepared_call_binds_codes_and_a_call_record():
    import ctypes

    calls = []

    def fake_launcher(address, *ptrs):
        record = launch.CallArgs.from_address(address)
        calls.append(((record.m, record.n, record.k, record.dtype, record.act, record.split,
                       record.workspace), ptrs))
        return 0

    def fake_workspace(m, n, k, dtype, split, sem_ref):
        return 0

    config = cs.config(cs.LANE_SM80, "b64x64x64_w32x32x64_s3_spk4")
    kernel = launch.Kernel(config, fake_launcher, fake_workspace)
    prepared = kernel.prepare("bf16", 64, 256, 512, "gelu")
    assert prepared.address == ctypes.addressof(prepared.args)
    assert prepared.launch(0, 7, 16, 32, 0, 48) == 0
    assert calls == [((64, 256, 512, 1, 2, 4, None), (16, 32, 0, 48, 7))]


def _record_flags(config_id: str, lane: str, **kwargs) -> int:
    kernel = launch.Kernel(cs.config(lane, config_id), lambda *a: 0, lambda *a: 0)
    return kernel.prepare("fp16", 64, 256, 512, None, **kwargs).args.flags


def test_programmatic_dependent_launch_flag(monkeypatch):
    from oasr_core.errors import ConfigurationError

    monkeypatch.delenv(launch.PDL_ENV, raising=False)
    assert _record_flags(cs.SM90_DEFAULT, cs.LANE_SM90) == launch.FLAG_PDL
    assert _record_flags(cs.SM90_DEFAULT, cs.LANE_SM90, pdl=False) == 0
    # kernels without grid-dependency instructions never get the flag
    assert _record_flags("sk_128x128x64_c1x1", cs.LANE_SM90, pdl=True) == 0
    assert _record_flags(cs.SM80_DEFAULT, cs.LANE_SM80, pdl=True) == 0
    monkeypatch.setenv(launch.PDL_ENV, "0")
    assert _record_flags(cs.SM90_DEFAULT, cs.LANE_SM90) == 0
    assert _record_flags(cs.SM90_DEFAULT, cs.LANE_SM90, pdl=True) == launch.FLAG_PDL
    monkeypatch.setenv(launch.PDL_ENV, "sometimes")
    with pytest.raises(ConfigurationError, match="OASR_GEMM_PDL='sometimes'"):
        _record_flags(cs.SM90_DEFAULT, cs.LANE_SM90)


def test_fused_epilogue_flag_and_the_header_agree(monkeypatch):
    """``fused=True`` sets kFlagFused beside the PDL bit; the values match the headers (the
    kit's kFlagPdl and kFlagFamily, the family's kFlagFused = kFlagFamily)."""
    import re

    from oasr_core.jit import kit

    from oasr_gemm import codegen

    monkeypatch.delenv(launch.PDL_ENV, raising=False)
    assert _record_flags(cs.SM90_DEFAULT, cs.LANE_SM90, fused=True) == \
        launch.FLAG_PDL | launch.FLAG_FUSED
    assert _record_flags(cs.SM90_DEFAULT, cs.LANE_SM90, pdl=False, fused=True) == \
        launch.FLAG_FUSED
    kit_header = (kit.INCLUDE_DIR / "oasr_kit" / "launcher.cuh").read_text()
    assert dict(re.findall(r"(kFlag\w+) = (\d+)", kit_header)) == {
        "kFlagPdl": str(launch.FLAG_PDL), "kFlagFamily": str(kit.FLAG_FAMILY)}
    header = (codegen.csrc_dir() / "oasr_gemm" / "common.cuh").read_text()
    assert re.findall(r"(kFlag\w+) = (\w+)", header) == [("kFlagFused", "kFlagFamily")]
    assert launch.FLAG_FUSED == kit.FLAG_FAMILY


def test_call_record_matches_the_c_layout():
    import ctypes

    offsets = {name: getattr(launch.CallArgs, name).offset for name, _ in
               launch.CallArgs._fields_}
    assert offsets == {"m": 0, "n": 8, "k": 16, "dtype": 24, "act": 28, "split": 32,
                       "flags": 36, "workspace": 40, "workspace_bytes": 48, "semaphores": 56,
                       "semaphore_bytes": 64}
    assert ctypes.sizeof(launch.CallArgs) == 72


def test_a_selection_error_is_warned_and_served_by_torch(monkeypatch):
    import oasr_core
    from oasr_core.errors import ConfigurationError

    _pretend_gpu(monkeypatch)

    def refuse(*_args, **_kwargs):
        raise ConfigurationError("bad tuning setup (test)")

    monkeypatch.setattr(oasr_core, "select", refuse)
    with pytest.warns(RuntimeWarning, match="selection failed.*bad tuning setup"):
        assert ops._plan(("gemm", None, torch.float16, 256, 512, 64, 0)) is ops.TORCH
