"""Real dense conv1d units through the core JIT: compile, link, exports, the no-device ABI.

The default suite compiles one small unit per kernel kind for fp16 (:data:`SMOKE`: a CUTLASS
2.x unit for the sm80 lane, a 3.x Hopper unit for the sm90 lane) in the suite-wide background
prebuild (``smoke_builds`` in the root ``conftest.py``). ``-m compile`` also compiles one unit
of every other 2.x iterator and access width (few channels with the two-stage main loop, the
element-wise analytic kernel) and a clustered 3.x unit, both dtypes each.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus

from oasr_conv1d import dense
from oasr_conv1d import geometry as abi

pytestmark = pytest.mark.nvcc

SMOKE = ((dense.LANE_SM80, "ig_b64x64x32_w32x32x32_s5", "sm80"),
         (dense.LANE_SM90, "igh_ws_64x64x64_c1x1", "sm90"))
"""One small config per kernel kind, compiled for fp16 alone."""
EVERY_KIND = ((dense.LANE_SM80, "ig_b128x64x32_w64x32x32_s2_fc_a1x8", "sm80"),
              (dense.LANE_SM80, "ig_b64x64x32_w32x32x32_s2_an_a1x1", "sm80"),
              (dense.LANE_SM90, "igh_ws_128x128x64_c2x1", "sm90"))


def _spec(lane: str, cid: str, arch: str, dtypes=("fp16",)):
    return dense.module_spec(lane, arch, [dense.config(lane, cid)],
                             name=f"conv1d_dense_smoke_{cid}", dtypes=dtypes)


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module."""
    return [_spec(*entry) for entry in SMOKE]


@pytest.fixture(scope="module")
def built(smoke_builds):
    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(smoke_builds.jit_dir))
    reports = smoke_builds.wait()
    yield [(dense.config(lane, cid), spec, reports[spec.name])
           for (lane, cid, _), spec in zip(SMOKE, SMOKE_UNITS(), strict=True)]
    mp.undo()


def test_each_kernel_kind_compiles_and_links(built):
    for config, _, report in built:
        assert report.status is BuildStatus.BUILT, (config.id, report.error, dict(report.failed))
        assert report.path is not None and report.path.is_file()


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_libraries_export_only_the_launchers(built):
    for config, _, report in built:
        out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(report.path)],
                             capture_output=True, text=True, check=True).stdout
        symbols = {line.split()[0] for line in out.splitlines() if line.strip()}
        assert symbols == {dense.symbol(config), dense.workspace_symbol(config)}


def _no_device_answers(config, module, dtypes):
    import torch

    kernel = dense.bind(module, config)
    geo = abi.geometry(2, 100, 80, 512, 3, 1, 1)
    for dtype in dtypes:
        call = abi.call_args(geo, dtype)
        if not torch.cuda.is_available():
            status = kernel.fn(ctypes.addressof(call), ctypes.addressof(geo), 0, 0, 0, 0, 0)
            assert abi_status(status) == "no CUDA device", (config.id, dtype)
        call.n = 500  # disagrees with the geometry's c_out
        assert kernel.fn(ctypes.addressof(call), ctypes.addressof(geo), 0, 0, 0, 0, 0) == 2
    assert kernel.fn(0, 0, 0, 0, 0, 0, 0) == 2
    call = abi.call_args(geo, "fp16")
    call.dtype = 7
    assert kernel.fn(ctypes.addressof(call), ctypes.addressof(geo), 0, 0, 0, 0, 0) == 1
    assert kernel.workspace_fn(ctypes.addressof(geo), 7) == -1


def abi_status(status: int) -> str:
    return core_jit.kit.STATUS[status]


def test_the_c_abi_binds_and_refuses_without_a_gpu(built):
    for config, spec, _ in built:
        module = core_jit.load(spec, build_missing=False)
        _no_device_answers(config, module, ("fp16",))


@pytest.mark.compile
def test_every_kernel_kind_compiles_with_both_dtypes(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    entries = (*SMOKE, *EVERY_KIND)
    specs = [_spec(lane, cid, arch, dense.DTYPES) for lane, cid, arch in entries]
    for (lane, cid, _), spec, report in zip(entries, specs, core_jit.prebuild(specs, jobs=2),
                                            strict=True):
        assert report.status is BuildStatus.BUILT, (cid, report.error, dict(report.failed))
        _no_device_answers(dense.config(lane, cid), core_jit.load(spec, build_missing=False),
                           ("fp16", "bf16"))
