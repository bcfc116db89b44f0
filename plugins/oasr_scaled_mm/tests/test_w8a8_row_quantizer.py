"""The kit's row quantizer: the generated unit, its dispatch in words, and one real compile.

The int8 family's module is compiled here (``SMOKE_UNITS``, in the suite's background
prebuild); the fp8 family's compile test compiles its own. The kernels' numerics are checked
on a GPU by each family's quantizer tests.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from oasr_core.jit import BuildStatus
from oasr_scaled_mm_fp8 import quantize_kernel as fp8

from oasr_scaled_mm import quantize_kernel as int8
from oasr_scaled_mm.w8a8 import row_quantizer
from oasr_scaled_mm.w8a8.rows import ROW_QUANTIZER_ARGTYPES
from oasr_scaled_mm.w8a8.rows import row_quantizer as helper


def SMOKE_UNITS():
    """The int8 quantizer's module (the fp8 one is in the fp8 compile test's list)."""
    return [int8.spec("sm90")]


def test_each_family_writes_its_numerics_into_the_shared_skeleton():
    a = int8.spec("sm90").units[0].source
    b = fp8.spec("sm89").units[0].source
    for source, module in ((a, int8), (b, fp8)):
        assert f"OASR_EXPORT int32_t {module.SYMBOL}(" in source
        for kernel in ("group_rows", "block_rows", "stream_rows"):
            assert f"{kernel}(const T* __restrict__ x" in source
        assert "row_scale(" in source and "quantize_pair(" in source
    assert "constexpr bool kPropagateNan = false;" in a and "__fdiv_rn(amax, 127.f)" in a
    assert "constexpr bool kPropagateNan = true;" in b and "__fdiv_rn(amax, 448.f)" in b
    assert "#include <cuda_fp8.h>" in b and "cuda_fp8" not in a
    assert "__NV_SATFINITE, __NV_E4M3" in b
    assert f"vectors <= {row_quantizer.GROUP_MAX_VECTORS}" in a
    assert f"vectors <= {row_quantizer.BLOCK_MAX_VECTORS}" in a
    assert "@" not in a and "@" not in b  # every placeholder filled


def test_the_specs_need_no_cutlass_and_no_family_headers():
    for module, arch, target in ((int8, "sm80", "80"), (fp8, "sm90", "90a")):
        spec = module.spec(arch)
        assert spec.name == module.MODULE and spec.arch == target
        assert not spec.cutlass and spec.include_dirs == ()
        assert "--fmad=false" in spec.extra_flags


def test_a_bad_name_is_refused_naming_it():
    with pytest.raises(ValueError, match="symbol 'oasr-bad' is not a C identifier"):
        row_quantizer.unit_source(int8.FORMAT, namespace="ns", symbol="oasr-bad", title="t")
    with pytest.raises(ValueError, match="namespace '1ns'"):
        row_quantizer.unit_source(int8.FORMAT, namespace="1ns", symbol="s", title="t")


def test_the_dispatch_in_words_reaches_every_kernel_at_its_boundaries():
    k_of = row_quantizer.kernel_of
    assert k_of(8) == k_of(32) == "group_rows<4>, 1 lane(s) per row"
    assert k_of(40) == "group_rows<4>, 2 lane(s) per row"
    assert k_of(1024) == "group_rows<4>, 32 lane(s) per row"
    assert k_of(1032) == k_of(2048) == "block_rows<4>, 2 warps per row"
    assert k_of(2056) == k_of(4096) == "block_rows<4>, 4 warps per row"
    assert k_of(4104) == k_of(8192) == "block_rows<4>, 8 warps per row"
    assert k_of(8200) == k_of(16384) == "block_rows<8>, 8 warps per row"
    assert k_of(16392) == "stream_rows, 16-byte vectors"
    assert k_of(1004) == k_of(7) == k_of(1024, aligned=False) == \
        "stream_rows, one element per access"
    assert len({k_of(k) for k in row_quantizer.PATH_KS}) == 12
    with pytest.raises(ValueError, match="k must be positive"):
        k_of(0)


def test_the_helper_binds_the_c_abi():
    kernel = helper(int8.spec, int8.SYMBOL, label="x")
    assert kernel.argtypes == ROW_QUANTIZER_ARGTYPES and len(ROW_QUANTIZER_ARGTYPES) == 7
    assert kernel.fallback == "quantizing with torch"
    assert int8.KERNEL.symbol == int8.SYMBOL and fp8.KERNEL.symbol == fp8.SYMBOL


@pytest.mark.nvcc
def test_the_int8_quantizer_compiles_and_exports_its_two_functions(smoke_builds):
    report = smoke_builds.wait()[int8.MODULE]
    assert report.status is BuildStatus.BUILT, (report.error, dict(report.failed))
    if shutil.which("nm") is None:
        pytest.skip("binutils' nm is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(report.path)],
                         capture_output=True, text=True, check=True).stdout
    assert {line.split()[0] for line in out.splitlines() if line.strip()} == {
        int8.SYMBOL, row_quantizer.norm_symbol(int8.SYMBOL)}
