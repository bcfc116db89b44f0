"""The grouped units of op ``group_gemm`` through the core JIT: a real CUTLASS 2.x
``GemmGrouped`` unit compiled with nvcc for sm80 (no GPU needed) with both dtypes, linked,
exporting its launcher and workspace query alone, bound as :class:`GroupKernel` and answering
its C ABI without a GPU (the GPU tests run the kernels).

Opt-in (``-m compile``): the default suite's background compile keeps one unit per lane."""

from __future__ import annotations

import ctypes

import pytest
from oasr_core import jit as core_jit
from oasr_core.jit import BuildStatus

from oasr_gemm import codegen, jit, launch
from oasr_gemm import config_space as cs

pytestmark = pytest.mark.compile

CONFIG = "b64x64x64_w32x32x64_s3"


def test_a_grouped_unit_compiles_links_and_answers_without_a_gpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    config = cs.config(cs.LANE_SM80, CONFIG)
    spec = jit.module_spec(cs.LANE_SM80, "sm80", (), name="gemm_sm80_mma_group_compile",
                           group=[config])
    (report,) = core_jit.prebuild([spec], jobs=2)
    assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
    assert [u.name for u in spec.units] == [codegen.group_unit(config)]
    assert set(spec.units[0].exports) == {codegen.group_symbol(config),
                                          codegen.group_symbol(config) + "_workspace"}
    if torch.cuda.is_available():
        return
    kernel = launch.GroupKernel.bind(core_jit.load(spec, build_missing=False), config)
    with pytest.raises(launch.LaunchError, match="group_gemm workspace query refused G=3"):
        kernel.prepare("fp16", (5, 0, 9), 256, 256)
    for dtype in jit.ALL_DTYPES:
        args = launch.CallArgs(m=14, n=256, k=256, dtype=codegen.DTYPE_CODES[dtype])
        rows = (ctypes.c_int64 * 2)(5, 9)
        ptrs = (ctypes.c_void_p * 2)()
        call = (ctypes.addressof(args), ctypes.addressof(ptrs), ctypes.addressof(ptrs), 0,
                ctypes.addressof(ptrs), ctypes.addressof(rows))
        assert kernel.fn(*call, 2, 0) == 4, "no workspace"
        args.workspace, args.workspace_bytes = 4096, 1 << 20
        assert launch.status_text(kernel.fn(*call, 2, 0)) == "no CUDA device"
        assert kernel.fn(*call, 33, 0) == 2, "above the group limit"
        assert kernel.fn(*call, 0, 0) == 2, "an empty group"
        args.n = 250
        assert kernel.fn(*call, 2, 0) == 2, "N % 8"
    args = launch.CallArgs(m=14, n=256, k=256, dtype=7)
    assert kernel.fn(ctypes.addressof(args), 0, 0, 0, 0, 0, 2, 0) == 1, "dtype not compiled in"
    assert kernel.fn(0, 0, 0, 0, 0, 0, 2, 0) == 2
