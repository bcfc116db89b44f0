"""Which kernels cuBLAS (through torch's F.linear) launches at the shapes where it beats oasr.

Run under Nsight Compute on the H200 to read each kernel's name (nvjet names carry the tile,
cluster and split), grid, block, shared memory and duration::

    ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size,\\
launch__block_size,launch__shared_mem_per_block_dynamic,launch__cluster_dim_x,\\
launch__cluster_dim_y python3 benchmarks/h200/cublas_kernels.py

Shapes: the M ~ 1000-8192 points of benchmarks/results/h200_gemm_nopdl.md where the best
oasr config is 10-27% slower than torch. Each shape runs three times (the last call is the
steady state: cuBLAS picks its kernel on the first).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SHAPES = ((2152, 512, 2048), (2152, 1024, 256), (2152, 512, 512), (1500, 2048, 512),
          (4096, 768, 256), (8192, 1024, 256))


def main() -> None:
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for _ in range(3):
            F.linear(a, w)
        torch.cuda.synchronize()
        print(f"M={m} N={n} K={k} done", flush=True)


if __name__ == "__main__":
    main()
