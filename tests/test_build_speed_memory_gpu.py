"""Peak GPU memory of a build is bounded by its largest point, whatever the census holds.

A build allocates operands per point (``make_bench``: A, the weight and its L2-rotation
copies, bias, the output, torch's output and the fp32 reference) and frees them when the point
is measured; its CUDA graphs launch into preallocated outputs and are released after each
point. So the peak of a build is that of its largest point: for gemm at (M, N, K) with
``c`` weight copies (``BenchOptions.copies_for``: at most ``max_copy_bytes``, 1 GiB, of copies)

    2MK + 2NK*c + 2N + 2MN (out) + 2MN (torch) + 4MN (reference)
    + max(4MK + 4NK + 4MN (the fp32 reference's temporaries), 12MN (the gate's))

plus cuBLAS's workspace and the allocator's rounding. Measured with
``torch.cuda.max_memory_allocated`` across real pruned builds of large shapes: one signature,
then three signatures of the same largest shape, which must peak the same. (The builds measure
from the whole-space module of the JIT cache, which the GPU tests have prebuilt; an effort
level's per-signature modules change which arms run, not what a point allocates.)
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MIB = 1 << 20
SLACK = 256 * MIB
"""cuBLAS workspace, the allocator's block rounding, the separator's buffers."""


def point_bound(m: int, n: int, k: int, copies: int) -> int:
    """The bytes one gemm point may hold at its peak (module docstring)."""
    held = 2 * m * k + 2 * n * k * copies + 2 * n + 8 * m * n
    return held + max(4 * m * k + 4 * n * k + 4 * m * n, 12 * m * n)


def run_build(tmp_path, widths: str, ladder: str, name: str) -> int:
    from oasr_core import build
    from oasr_core.arch import ArchProfile
    from oasr_core.cost_model import CostModel, config_ranker
    from oasr_core.runtime import get_runtime

    rt = get_runtime()
    fam = rt.registry.family("gemm")
    lane = rt.registry.active_lane("gemm", rt.device_arch())
    ranker = config_ranker(CostModel(profile=ArchProfile.synthetic("sm90")), lane=lane)
    census = build.census_from_widths(fam, widths, ladder)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    result = build.build_live(
        census, family=fam, lane=lane, arch=rt.device_arch(),
        out=tmp_path / name / "gemm.json", rankers=(ranker,),
        options=build.BuildOptions(top_k=1, max_points=2, fill=False, fresh=True,
                                   resume=False))
    assert result.entries, result.messages
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def test_peak_memory_of_a_build_is_that_of_its_largest_point(tmp_path):
    from oasr_core.bench import BenchOptions

    m, n, k = 16384, 8192, 8192
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copies = BenchOptions(l2_bytes=l2).copies_for(n * k * 2)
    bound = point_bound(m, n, k, copies) + SLACK
    one = run_build(tmp_path, f"{n},{k}", f"4096,{m}", "one")
    three = run_build(tmp_path, f"{n},{k};{n // 2},{k};{n},{k // 2}", f"1024,4096,{m}",
                      "three")
    print(f"peak one signature {one / MIB:.0f} MiB, three {three / MIB:.0f} MiB, "
          f"bound {bound / MIB:.0f} MiB ({copies} weight copies)")
    assert one <= bound
    assert three <= bound
    assert three <= one + 64 * MIB  # more signatures, same largest point: no growth
