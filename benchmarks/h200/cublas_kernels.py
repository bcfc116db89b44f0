"""Which kernels cuBLAS (through torch's F.linear) launches at the shapes where it beats oasr.

Run under Nsight Compute on the H200 to read each kernel's name (nvjet names carry the tile,
cluster and split), grid, block, shared memory and duration::

    ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size,\\
launch__block_size,launch__shared_mem_per_block_dynamic,launch__cluster_dim_x,\\
launch__cluster_dim_y python3 benchmarks/h200/cublas_kernels.py

Shapes: the M ~ 1000-8192 points of benchmarks/results/h200_gemm_nopdl.md where the best
oasr config is 10-27% slower than torch. Each shape runs three times (the last call is the
steady state: cuBLAS picks its kernel on the first).

``--oasr ID,ID`` also launches those oasr_gemm configs (from the whole-space module in
``OASR_JIT_DIR``, or with ``--subset GLOBS`` the module ``gemm_vs_torch.py --configs GLOBS``
built) at each shape, three times each, so one ncu run puts both side by side.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

SHAPES = ((2152, 512, 2048), (2152, 1024, 256), (2152, 512, 512), (1500, 2048, 512),
          (4096, 768, 256), (8192, 1024, 256))


def _oasr_kernels(ids: list[str], subset: str | None) -> dict:
    from oasr_gemm import jit, launch
    from oasr_gemm.config_space import LANE_SM90, config

    from oasr_core import jit as core_jit

    spec = jit.subset_spec(LANE_SM90, "sm90", subset.split(",")) if subset \
        else jit.full_spec(LANE_SM90, "sm90")
    module = core_jit.load(spec, build_missing=False)
    return {i: launch.Kernel.bind(module, config(LANE_SM90, i)) for i in ids}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oasr", default="", help="comma list of oasr_gemm config ids")
    ap.add_argument("--shapes", default=None, help="MxNxK,... (default: the six above)")
    ap.add_argument("--subset", default=None, help="config-id globs of the module to load")
    args = ap.parse_args()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")] \
        if args.shapes else SHAPES
    kernels = _oasr_kernels([i for i in args.oasr.split(",") if i], args.subset)
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for _ in range(3):
            F.linear(a, w)
        for kernel in kernels.values():
            for _ in range(3):
                kernel.run(a, w)
        torch.cuda.synchronize()
        print(f"M={m} N={n} K={k} done", flush=True)


if __name__ == "__main__":
    main()
