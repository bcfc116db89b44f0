"""A real fused-residual unit through the core JIT (``-m compile``, a minute or two on two
cores): it compiles for both dtypes, exports exactly its launcher and workspace query, and
answers its C ABI without a GPU (a null residual or a bad shape refused, then no device)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus

from oasr_gemm import codegen, jit, launch
from oasr_gemm import config_space as cs

pytestmark = pytest.mark.compile

CONFIG = "ws_64x32x64_c1x1"
"""A small 3.x tile (the lane's smoke unit): the residual epilogue is what is under test."""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(tmp_path_factory.mktemp("jit")))
    config = cs.config(cs.LANE_SM90, CONFIG)
    spec = jit.module_spec(cs.LANE_SM90, "sm90", (), name="gemm_sm90_wgmma_residual_test",
                           residual=[config])
    (report,) = core_jit.prebuild([spec], jobs=2)
    yield config, spec, report
    mp.undo()


def test_the_residual_unit_compiles_for_both_dtypes(built):
    config, _, report = built
    assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
    assert list(report.units) == [codegen.residual_unit(config)]


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_the_library_exports_only_the_residual_launcher(built):
    config, _, report = built
    out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(report.path)],
                         capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert symbols == {codegen.residual_symbol(config), codegen.residual_workspace_symbol(config)}


def test_the_c_abi_binds_and_answers_without_a_gpu(built):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the no-device answers; the GPU tests run the kernel")
    config, spec, _ = built
    kernel = launch.ResidualKernel.bind(core_jit.load(spec, build_missing=False), config)
    with pytest.raises(launch.LaunchError, match="workspace query refused"):
        kernel.prepare("bf16", 64, 256, 512, None)
    for code in codegen.DTYPE_CODES.values():
        args = launch.CallArgs(m=64, n=256, k=512, dtype=code, act=0, split=1)
        address = ctypes.addressof(args)
        assert kernel.fn(address, 16, 32, 0, 0, 48, 0.5, 0) == 2, "a null residual is refused"
        status = kernel.fn(address, 16, 32, 0, 64, 48, 0.5, 0)
        assert launch.status_text(status) == "no CUDA device"
    args = launch.CallArgs(m=64, n=250, k=512, dtype=0, act=0, split=1)
    assert kernel.fn(ctypes.addressof(args), 16, 32, 0, 64, 48, 1.0, 0) == 2
    args.n, args.dtype = 256, 7
    assert launch.status_text(kernel.fn(ctypes.addressof(args), 16, 32, 0, 64, 48, 1.0,
                                        0)) == "dtype not compiled in"
