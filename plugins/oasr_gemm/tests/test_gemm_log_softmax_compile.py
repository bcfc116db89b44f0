"""The row log-softmax of op ``gemm_log_softmax`` through the core JIT: compiled with nvcc for
both arch families (no CUTLASS: seconds), linked, exporting its launcher alone, bound through
the kit's HelperKernel and answering its C ABI without a GPU (the GPU tests run it)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus

from oasr_gemm import launch, log_softmax

pytestmark = pytest.mark.nvcc

def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module (the sm90
    module; the sm80 one, a few seconds, compiles in :func:`built`)."""
    return [log_softmax.spec("sm90")]


@pytest.fixture(scope="module")
def built(smoke_builds):
    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(smoke_builds.jit_dir))
    specs = [*SMOKE_UNITS(), log_softmax.spec("sm80")]
    reports = [smoke_builds.wait()[specs[0].name], *core_jit.prebuild(specs[1:], jobs=1)]
    yield specs, reports
    mp.undo()


def test_the_row_kernel_compiles_and_links_for_each_arch(built):
    specs, reports = built
    assert [s.arch for s in specs] == ["90a", "80"]
    for report in reports:
        assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
        assert report.path is not None and report.path.is_file()


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_the_library_exports_only_the_launcher(built):
    _, reports = built
    for report in reports:
        out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(report.path)],
                             capture_output=True, text=True, check=True).stdout
        assert {line.split()[0] for line in out.splitlines() if line.strip()} == \
            {log_softmax.SYMBOL}


def test_the_c_abi_binds_and_answers_without_a_gpu(built):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the no-device answers; the GPU tests run the kernel")
    specs, _ = built
    for spec in specs:
        fn = core_jit.load(spec, build_missing=False).function(log_softmax.SYMBOL)
        fn.argtypes, fn.restype = log_softmax.ARGTYPES, ctypes.c_int32
        aligned = 1 << 12
        assert launch.status_text(fn(aligned, 0, 64, 5008, 0)) == "no CUDA device"
        for bad in ((aligned, 0, 64, 29), (aligned, 0, 0, 64), (aligned + 8, 1, 64, 64),
                    (aligned, 0, 64, log_softmax.MAX_N + 8)):
            assert fn(*bad, 0) == 2, bad  # kErrShape, before any CUDA call
        assert fn(aligned, 7, 64, 64, 0) == 1  # kErrDtype


def test_the_helper_kernel_loads_the_built_module(built, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the GPU tests call it")
    log_softmax.KERNEL.forget()
    try:
        fn = log_softmax.KERNEL.get("sm90")
        assert fn is not None and fn.restype is ctypes.c_int32
        assert fn(1 << 12, 0, 64, 29, 0) == 2
    finally:
        log_softmax.KERNEL.forget()
