"""Real CUTLASS units through the core JIT, without a GPU: compile, link, exports, the C ABI.

The default suite compiles each lane's smallest unit and the activation quantizer
(:data:`SMOKE`, in the suite-wide background prebuild of the root ``conftest.py``): the 2.x
lane's 64x64x128 ``scaled_mm_fp8`` unit (bf16 only) and the 3.x lane's 64x32x128
``scaled_mm_fp8_quant`` unit -- one visitor tree of each lane and op. ``-m compile`` also
compiles two configs as production links them (every op and output dtype, the promoted and the
fast-accumulation main loops); the full lanes compile on the H200.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus
from oasr_scaled_mm.w8a8.row_quantizer import norm_symbol

from oasr_scaled_mm_fp8 import codegen, launch, quantize_kernel
from oasr_scaled_mm_fp8 import config_space as cs
from oasr_scaled_mm_fp8.jit import Fp8KernelModule

pytestmark = pytest.mark.nvcc

SMOKE = ((cs.LANE_SM89, "b64x64x128_w32x32x128_s5_fa", cs.OP_MM, ("bf16",)),
         (cs.LANE_SM90, "ws_64x32x128_c1x1_fa", cs.OP_QUANT, None))


def _items():
    return [(cs.config(lane, cid), op, Fp8KernelModule(cs.config(lane, cid)).spec(
        ops=(op,), out_dtypes=dtypes)) for lane, cid, op, dtypes in SMOKE]


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module."""
    return [spec for _, _, spec in _items()] + [quantize_kernel.spec("sm90")]


@pytest.fixture(scope="module")
def built(smoke_builds):
    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(smoke_builds.jit_dir))
    items = _items()
    reports = smoke_builds.wait()
    yield items, [reports[s.name] for _, _, s in items], reports[quantize_kernel.MODULE]
    mp.undo()


def test_each_lane_and_the_quantizer_compile_and_link(built):
    items, reports, quantizer = built
    for report in (*reports, quantizer):
        assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
        assert report.path is not None and report.path.is_file()
    for _, _, spec in items:
        assert "--fmad=false" in spec.extra_flags


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_libraries_export_only_the_launchers(built):
    items, reports, quantizer = built

    def exported(path):
        out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(path)],
                             capture_output=True, text=True, check=True).stdout
        return {line.split()[0] for line in out.splitlines() if line.strip()}

    for (config, op, _), report in zip(items, reports, strict=True):
        assert exported(report.path) == {codegen.symbol(config, op),
                                         codegen.workspace_symbol(config, op)}
    assert exported(quantizer.path) == {quantize_kernel.SYMBOL,
                                        norm_symbol(quantize_kernel.SYMBOL)}


def _call(kernel, args) -> int:
    return kernel.fn(ctypes.addressof(args), 0, 0, 0, 0, 0, 0, 1.0, 0, 0)


def test_the_c_abi_binds_and_answers_without_a_gpu(built):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the no-device answers; the GPU tests run the kernels")
    items, _, _ = built
    for config, op, spec in items:
        kernel = launch.Kernel.bind(core_jit.load(spec, build_missing=False), config, op)
        out_name = "fp8" if op == cs.OP_QUANT else "bf16"
        with pytest.raises(launch.LaunchError, match="workspace query refused"):
            kernel.prepare(out_name, 64, 256, 512)
        args = launch.CallArgs(m=64, n=256, k=512, dtype=codegen.OUT_CODES[out_name], split=1)
        assert launch.status_text(_call(kernel, args)) == "no CUDA device"
        args.n = 248
        assert _call(kernel, args) == 2
        args.n, args.dtype = 256, 0
        assert launch.status_text(_call(kernel, args)) == "dtype not compiled in"


@pytest.mark.compile
def test_two_configs_compile_every_op_and_dtype(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    configs = [cs.config(cs.LANE_SM90, "co_128x128x128_c1x1"),
               cs.config(cs.LANE_SM89, "b128x128x64_w64x64x64_s5_st")]
    specs = [Fp8KernelModule(c).spec() for c in configs]
    for spec, report in zip(specs, core_jit.prebuild(specs, jobs=2), strict=True):
        assert report.status is BuildStatus.BUILT, (spec.name, report.error, dict(report.failed))
        assert len(report.units) == 2
