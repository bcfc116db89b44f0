"""Real CUTLASS units through the core JIT: compile, link, exports, cache hits, the C ABI.

This proves the toolchain path on a machine without a GPU (nvcc and the nvidia-cutlass headers
are enough). The default suite compiles each lane's smallest unit for fp16 only
(:data:`SMOKE`), in the suite-wide background prebuild (``smoke_builds`` in the root
``conftest.py``); ``-m compile`` also compiles those units as production links them (both
dtypes), a few minutes on two cores. The full spaces are compiled by
``benchmarks/gemm_vs_torch.py --prebuild-only``.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus

from oasr_gemm import codegen, launch
from oasr_gemm import config_space as cs
from oasr_gemm.jit import GemmKernelModule

pytestmark = pytest.mark.nvcc

SMOKE = ((cs.LANE_SM80, "b64x64x64_w32x32x64_s3"), (cs.LANE_SM90, "ws_64x32x64_c1x1"))
"""One small config per lane, compiled for fp16 alone."""


def _configs():
    return [cs.config(lane, cid) for lane, cid in SMOKE]


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module."""
    return [GemmKernelModule(c).spec(("fp16",)) for c in _configs()]


@pytest.fixture(scope="module")
def built(smoke_builds):
    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(smoke_builds.jit_dir))
    configs, specs = _configs(), SMOKE_UNITS()
    reports = smoke_builds.wait()
    first = [reports[s.name] for s in specs]
    second = core_jit.prebuild(specs, jobs=2)
    yield configs, specs, first, second
    mp.undo()


def test_each_lane_compiles_and_links(built):
    _, _, first, _ = built
    for report in first:
        assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
        assert [u.status for u in report.units.values()] == [BuildStatus.BUILT]
        assert report.path is not None and report.path.is_file()


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_libraries_export_only_the_launchers(built):
    configs, _, first, _ = built
    for config, report in zip(configs, first, strict=True):
        out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(report.path)],
                             capture_output=True, text=True, check=True).stdout
        symbols = {line.split()[0] for line in out.splitlines() if line.strip()}
        assert symbols == {codegen.symbol(config), codegen.workspace_symbol(config)}


def test_another_process_finds_the_build_in_the_cache(built):
    _, specs, first, second = built
    for a, b in zip(first, second, strict=True):
        assert b.status is BuildStatus.CACHED and b.key == a.key and b.path == a.path
        assert all(u.status is BuildStatus.CACHED for u in b.units.values())
    again = core_jit.build(specs[1], jobs=1)
    assert again.status is BuildStatus.CACHED


def test_the_c_abi_binds_and_answers_without_a_gpu(built):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the no-device answers; the GPU tests run the kernels")
    configs, specs, _, _ = built
    for config, spec in zip(configs, specs, strict=True):
        module = core_jit.load(spec, build_missing=False)
        kernel = launch.Kernel.bind(module, config)
        with pytest.raises(launch.LaunchError, match="workspace query refused"):
            kernel.prepare("fp16", 64, 256, 512, None)
        args = launch.CallArgs(m=64, n=256, k=512, dtype=0, act=0, split=1)
        status = kernel.fn(ctypes.addressof(args), 0, 0, 0, 0, 0)
        assert launch.status_text(status) == "no CUDA device"
        args.n = 250
        assert kernel.fn(ctypes.addressof(args), 0, 0, 0, 0, 0) == 2
        assert kernel.fn(0, 0, 0, 0, 0, 0) == 2


@pytest.mark.compile
def test_the_units_compile_with_every_dtype_as_production_links_them(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    configs = _configs()
    specs = [GemmKernelModule(c).spec() for c in configs]
    for config, spec, report in zip(configs, specs, core_jit.prebuild(specs, jobs=2),
                                    strict=True):
        assert report.status is BuildStatus.BUILT, (config.id, report.error, dict(report.failed))
        kernel = launch.Kernel.bind(core_jit.load(spec, build_missing=False), config)
        if torch.cuda.is_available():
            continue  # the GPU tests run every dtype's kernel
        for dtype, code in codegen.DTYPE_CODES.items():
            args = launch.CallArgs(m=64, n=256, k=512, dtype=code, act=0, split=1)
            status = kernel.fn(ctypes.addressof(args), 0, 0, 0, 0, 0)
            assert launch.status_text(status) == "no CUDA device", (config.id, dtype)
