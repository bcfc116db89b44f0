"""Real CUTLASS units through the core JIT: compile, link, exports, cache hits, the C ABI.

Proves the toolchain path on a machine without a GPU (nvcc and the nvidia-cutlass headers are
enough). The default suite compiles the two smallest units (:data:`SMOKE`), in the suite-wide
background prebuild (``smoke_builds`` in the root ``conftest.py``): the 2.x lane's 64x64x128
``scaled_mm`` unit (fp16 output only) and the 3.x lane's 64x32x128 ``scaled_mm_quant`` unit --
one visitor tree of each lane and each op. ``-m compile`` also compiles both configs as
production links them (every op, every output dtype), a few minutes on two cores; the full
lanes compile on the H200.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus

from oasr_scaled_mm import codegen, launch
from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm.jit import ScaledMmKernelModule

pytestmark = pytest.mark.nvcc

SMOKE = ((cs.LANE_SM80, "b64x64x128_w32x32x128_s5", cs.OP_MM, ("fp16",)),
         (cs.LANE_SM90, "ws_64x32x128_c1x1", cs.OP_QUANT, None))
"""Per lane: a small config, the op and the output dtypes its smoke unit compiles."""


def _items():
    return [(cs.config(lane, cid), op, ScaledMmKernelModule(cs.config(lane, cid)).spec(
        ops=(op,), out_dtypes=dtypes)) for lane, cid, op, dtypes in SMOKE]


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module."""
    return [spec for _, _, spec in _items()]


@pytest.fixture(scope="module")
def built(smoke_builds):
    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(smoke_builds.jit_dir))
    items = _items()
    specs = [spec for _, _, spec in items]
    reports = smoke_builds.wait()
    first = [reports[s.name] for s in specs]
    second = core_jit.prebuild(specs, jobs=2)
    yield items, first, second
    mp.undo()


def test_each_lane_compiles_and_links(built):
    items, first, _ = built
    for (_, _, spec), report in zip(items, first, strict=True):
        assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
        assert [u.status for u in report.units.values()] == [BuildStatus.BUILT]
        assert report.path is not None and report.path.is_file()
        assert "--fmad=false" in spec.extra_flags


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_libraries_export_only_the_launchers(built):
    items, first, _ = built
    for (config, op, _), report in zip(items, first, strict=True):
        out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(report.path)],
                             capture_output=True, text=True, check=True).stdout
        symbols = {line.split()[0] for line in out.splitlines() if line.strip()}
        assert symbols == {codegen.symbol(config, op), codegen.workspace_symbol(config, op)}


def test_another_process_finds_the_build_in_the_cache(built):
    items, first, second = built
    for a, b in zip(first, second, strict=True):
        assert b.status is BuildStatus.CACHED and b.key == a.key and b.path == a.path
        assert all(u.status is BuildStatus.CACHED for u in b.units.values())
    assert core_jit.build(items[0][2], jobs=1).status is BuildStatus.CACHED


def _call(kernel, args) -> int:
    return kernel.fn(ctypes.addressof(args), 0, 0, 0, 0, 0, 0, 1.0, 0, 0)


def test_the_c_abi_binds_and_answers_without_a_gpu(built):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the no-device answers; the GPU tests run the kernels")
    items, _, _ = built
    for config, op, spec in items:
        module = core_jit.load(spec, build_missing=False)
        kernel = launch.Kernel.bind(module, config, op)
        out_name = "int8" if op == cs.OP_QUANT else "fp16"
        with pytest.raises(launch.LaunchError, match="workspace query refused"):
            kernel.prepare(out_name, 64, 256, 512)
        args = launch.CallArgs(m=64, n=256, k=512, dtype=codegen.OUT_CODES[out_name], split=1)
        assert launch.status_text(_call(kernel, args)) == "no CUDA device"
        args.n = 248
        assert _call(kernel, args) == 2
        args.n, args.dtype = 256, 1 if op == cs.OP_MM else 0
        assert launch.status_text(_call(kernel, args)) == "dtype not compiled in"
        assert kernel.fn(0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0) == 2


@pytest.mark.compile
def test_the_configs_compile_every_op_and_dtype_as_production_links_them(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    configs = [cs.config(lane, cid) for lane, cid, _, _ in SMOKE]
    modules = [ScaledMmKernelModule(c) for c in configs]
    specs = [m.spec() for m in modules]
    for module, spec, report in zip(modules, specs, core_jit.prebuild(specs, jobs=2),
                                    strict=True):
        assert report.status is BuildStatus.BUILT, (spec.name, report.error, dict(report.failed))
        assert set(module.ops) == set(cs.OPS), f"{module.config.id} serves both ops"
        if torch.cuda.is_available():
            continue  # the GPU tests run every op's kernels
        library = core_jit.load(spec, build_missing=False)
        for op in module.ops:
            kernel = launch.Kernel.bind(library, module.config, op)
            for out_name in codegen.OP_OUT_DTYPES[op]:
                args = launch.CallArgs(m=64, n=256, k=512, dtype=codegen.OUT_CODES[out_name],
                                       split=1)
                assert launch.status_text(_call(kernel, args)) == "no CUDA device", (
                    module.config.id, op, out_name)
