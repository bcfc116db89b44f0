"""The batched units of op ``bmm`` through the core JIT: real CUTLASS units compiled with nvcc
(no GPU needed), linked, exporting their launchers alone, bound as :class:`BmmKernel` and
answering their C ABI without a GPU (the GPU tests run them).

Opt-in (``-m compile``), so the default suite's background compile stays one unit per lane
(the lanes' own units in ``test_gemm_compile.py``): one unit per lane for fp16 (:data:`SMOKE`:
the 2.x unit with the TN layout, the 3.x unit with NN, through the suite-wide background
prebuild), then the other layout of each and a swapped 3.x config (whose main loop reads the NN
operand N-major as its A) with both dtypes, as production links them: a few minutes on two
cores.
"""

from __future__ import annotations

import ctypes

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus
from oasr_core.kernel_testing import smoke_module

from oasr_gemm import codegen, jit, launch
from oasr_gemm import config_space as cs

pytestmark = pytest.mark.compile

SMOKE = ((cs.LANE_SM80, "b64x64x64_w32x32x64_s3", "tn"), (cs.LANE_SM90, "ws_64x32x64_c1x1", "nn"))
"""One small config per lane and one layout each, compiled for fp16 alone."""
MORE = ((cs.LANE_SM80, "b64x64x64_w32x32x64_s3", "nn"), (cs.LANE_SM90, "ws_64x32x64_c1x1", "tn"),
        (cs.LANE_SM90, "ws_64x16x64_c1x1_swap", "nn"))
"""What ``-m compile`` adds: the other layouts, and a swapped 3.x kernel."""


def _spec(lane, cid, layout, dtypes=("fp16",)):
    config = cs.config(lane, cid)
    arch = "sm90" if lane == cs.LANE_SM90 else "sm80"
    name = f"{jit.MODULE_PREFIX[lane]}_{codegen.bmm_unit(config, layout)}"
    return config, jit.module_spec(lane, arch, (), dtypes=dtypes, name=name,
                                   bmm=[(config, layout)])


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module."""
    return [_spec(*entry)[1] for entry in SMOKE]


built, test_the_units_export_only_their_launchers = smoke_module()


def test_each_lane_compiles_and_links_a_batched_unit(built):
    for (spec, report), (lane, cid, layout) in zip(built, SMOKE, strict=True):
        assert report.status is BuildStatus.BUILT, (cid, report.error, dict(report.failed))
        assert [u.status for u in report.units.values()] == [BuildStatus.BUILT]
        config = cs.config(lane, cid)
        assert [u.name for u in spec.units] == [codegen.bmm_unit(config, layout)]
        assert set(spec.units[0].exports) == {codegen.bmm_symbol(config, layout),
                                              codegen.bmm_workspace_symbol(config, layout)}


def _answers_without_a_gpu(config, spec, layout, dtypes):
    kernel = launch.BmmKernel.bind(core_jit.load(spec, build_missing=False), config, layout)
    assert kernel.layout == layout
    with pytest.raises(launch.LaunchError, match=f"bmm {layout} workspace query refused"):
        kernel.prepare("fp16", 8, 100, 256, 64)
    for dtype in dtypes:
        code = codegen.DTYPE_CODES[dtype]
        args = launch.CallArgs(m=100, n=256, k=64, dtype=code, act=0, split=1)
        assert launch.status_text(kernel.fn(ctypes.addressof(args), 0, 0, 0, 8, 0)) == \
            "no CUDA device"
        assert kernel.fn(ctypes.addressof(args), 0, 0, 0, 0, 0) == 2, "a batch of 0"
        args.n = 250
        assert kernel.fn(ctypes.addressof(args), 0, 0, 0, 8, 0) == 2, "N % 8"
    args = launch.CallArgs(m=100, n=256, k=64, dtype=1 - codegen.DTYPE_CODES[dtypes[0]])
    if len(dtypes) == 1:
        assert kernel.fn(ctypes.addressof(args), 0, 0, 0, 8, 0) == 1, "dtype not compiled in"
    assert kernel.fn(0, 0, 0, 0, 8, 0) == 2


def test_the_c_abi_binds_and_answers_without_a_gpu(built):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the no-device answers; the GPU tests run the kernels")
    for (spec, _), (lane, cid, layout) in zip(built, SMOKE, strict=True):
        _answers_without_a_gpu(cs.config(lane, cid), spec, layout, ("fp16",))


def test_the_other_layouts_and_a_swapped_kernel_compile_with_every_dtype(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    built = [(_spec(lane, cid, layout, jit.ALL_DTYPES), layout) for lane, cid, layout in MORE]
    reports = core_jit.prebuild([spec for (_, spec), _ in built], jobs=2)
    for ((config, spec), layout), report in zip(built, reports, strict=True):
        assert report.status is BuildStatus.BUILT, (config.id, report.error, dict(report.failed))
        if not torch.cuda.is_available():
            _answers_without_a_gpu(config, spec, layout, jit.ALL_DTYPES)
