"""Real CUTLASS units of each W8A8 format (int8, fp8 e4m3) through the core JIT, without a GPU:
compile, link, exports, cache hits, the C ABI.

Proves the toolchain path on a machine without a GPU (nvcc and the nvidia-cutlass headers are
enough). The default suite compiles, per format, each lane's smallest unit (:data:`FORMATS`, in
the suite-wide background prebuild of the root ``conftest.py``): the 2.x lane's 64x64x128 mm
unit (one output dtype) and the 3.x lane's 64x32x128 quantizing unit -- one visitor tree of
each lane and each op -- and the fp8 activation quantizer. ``-m compile`` also compiles configs
as production links them (every op, every output dtype; fp8: the promoted and the
fast-accumulation main loops), a few minutes on two cores; the full lanes compile on the H200.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import shutil
import subprocess

import attrs
import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus

from oasr_scaled_mm.w8a8.row_quantizer import norm_symbol

pytestmark = pytest.mark.nvcc


@attrs.frozen
class Smoke:
    """One format's smoke units: per lane a small config, the op and the output dtypes its unit
    compiles; the output each op is called with and a dtype code each did not compile; the
    configs ``-m compile`` links whole; whether the activation quantizer is built too."""

    package: str
    units: tuple[tuple[str, str, str, tuple[str, ...] | None], ...]
    out_name: dict[str, str]
    not_compiled: dict[str, int]
    production: tuple[tuple[str, str], ...]
    quantizer: bool

    def module(self, name: str):
        return importlib.import_module(f"{self.package}.{name}")

    def items(self):
        cs, jit = self.module("config_space"), self.module("jit")
        return [(cs.config(lane, cid), op, jit.KernelModule(cs.config(lane, cid)).spec(
            ops=(op,), out_dtypes=dtypes)) for lane, cid, op, dtypes in self.units]


FORMATS = {
    "int8": Smoke("oasr_scaled_mm",
                  (("sm80_int8_mma", "b64x64x128_w32x32x128_s5", "scaled_mm", ("fp16",)),
                   ("sm90_int8_wgmma", "ws_64x32x128_c1x1", "scaled_mm_quant", None)),
                  {"scaled_mm": "fp16", "scaled_mm_quant": "int8"},
                  {"scaled_mm": 1, "scaled_mm_quant": 0},
                  (("sm80_int8_mma", "b64x64x128_w32x32x128_s5"),
                   ("sm90_int8_wgmma", "ws_64x32x128_c1x1")), False),
    "fp8": Smoke("oasr_scaled_mm_fp8",
                 (("sm89_fp8_mma", "b64x64x128_w32x32x128_s5_fa", "scaled_mm_fp8", ("bf16",)),
                  ("sm90_fp8_wgmma", "ws_64x32x128_c1x1_fa", "scaled_mm_fp8_quant", None)),
                 {"scaled_mm_fp8": "bf16", "scaled_mm_fp8_quant": "fp8"},
                 {"scaled_mm_fp8": 0, "scaled_mm_fp8_quant": 0},
                 (("sm90_fp8_wgmma", "co_128x128x128_c1x1"),
                  ("sm89_fp8_mma", "b128x128x64_w64x64x64_s5_st")), True),
}


def _installed() -> list[str]:
    return [name for name, smoke in FORMATS.items()
            if importlib.util.find_spec(smoke.package) is not None]


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module."""
    specs = []
    for name in _installed():
        smoke = FORMATS[name]
        specs += [spec for _, _, spec in smoke.items()]
        if smoke.quantizer:
            specs.append(smoke.module("quantize_kernel").spec("sm90"))
    return specs


@pytest.fixture(scope="module", params=_installed())
def built(request, smoke_builds):
    smoke = FORMATS[request.param]
    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(smoke_builds.jit_dir))
    items = smoke.items()
    reports = smoke_builds.wait()
    quantizer = (reports[smoke.module("quantize_kernel").MODULE] if smoke.quantizer else None)
    yield smoke, items, [reports[s.name] for _, _, s in items], quantizer
    mp.undo()


def test_each_lane_and_the_quantizer_compile_and_link(built):
    _, items, reports, quantizer = built
    for report in (*reports, *([quantizer] if quantizer else [])):
        assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
        assert report.path is not None and report.path.is_file()
    for (_, _, spec), report in zip(items, reports, strict=True):
        assert [u.status for u in report.units.values()] == [BuildStatus.BUILT]
        assert "--fmad=false" in spec.extra_flags


def _exported(path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_libraries_export_only_the_launchers(built):
    smoke, items, reports, quantizer = built
    codegen = smoke.module("codegen")
    for (config, op, _), report in zip(items, reports, strict=True):
        assert _exported(report.path) == {codegen.symbol(config, op),
                                          codegen.workspace_symbol(config, op)}
    if quantizer is not None:
        symbol = smoke.module("quantize_kernel").SYMBOL
        assert _exported(quantizer.path) == {symbol, norm_symbol(symbol)}


def test_another_process_finds_the_build_in_the_cache(built):
    _, items, first, _ = built
    second = core_jit.prebuild([spec for _, _, spec in items], jobs=2)
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
    smoke, items, _, _ = built
    codegen, launch = smoke.module("codegen"), smoke.module("launch")
    for config, op, spec in items:
        kernel = launch.Kernel.bind(core_jit.load(spec, build_missing=False), config, op)
        out_name = smoke.out_name[op]
        with pytest.raises(launch.LaunchError, match="workspace query refused"):
            kernel.prepare(out_name, 64, 256, 512)
        args = launch.CallArgs(m=64, n=256, k=512, dtype=codegen.OUT_CODES[out_name], split=1)
        assert launch.status_text(_call(kernel, args)) == "no CUDA device"
        args.n = 248
        assert _call(kernel, args) == 2
        args.n, args.dtype = 256, smoke.not_compiled[op]
        assert launch.status_text(_call(kernel, args)) == "dtype not compiled in"
        assert kernel.fn(0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0) == 2


@pytest.mark.compile
@pytest.mark.parametrize("name", _installed())
def test_configs_compile_every_op_and_dtype_as_production_links_them(name, tmp_path,
                                                                      monkeypatch):
    import torch

    smoke = FORMATS[name]
    cs, jit = smoke.module("config_space"), smoke.module("jit")
    codegen, launch = smoke.module("codegen"), smoke.module("launch")
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    modules = [jit.KernelModule(cs.config(lane, cid)) for lane, cid in smoke.production]
    specs = [m.spec() for m in modules]
    for module, spec, report in zip(modules, specs, core_jit.prebuild(specs, jobs=2),
                                    strict=True):
        assert report.status is BuildStatus.BUILT, (spec.name, report.error, dict(report.failed))
        assert set(module.ops) == set(cs.OPS), f"{module.config.id} serves both ops"
        assert len(report.units) == 2
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
