#!/usr/bin/env bash
# Fifth H200 session (issue 3: gemm speed). Carry .whl and .jit-h200 or .jit-h200.tgz (the
# libraries compiled on the CPU machine, `gemm_vs_torch.py --prebuild-only --arch sm90
# [--configs GLOBS]`, copied from lib/ of that OASR_JIT_DIR; gzip shrinks them ~8x).
# Results go to $OUT (at most 8 files a call).
#   PHASE=epilogue : the plain (D = acc) against the fused bias/activation epilogue, on the
#                    subset module (SUBSET globs), PDL off, all 98 points; then Nsight Compute
#                    (warp states, scheduler, occupancy) of cuBLAS and two oasr kernels at
#                    M=2152 N=1024 K=256.
#   PHASE=bench    : the whole-space benchmark, PDL off (kernel for kernel) and on, then the gemm
#                    GPU tests (every sm90 config, both epilogues).
#   PHASE=table    : the shipped gemm table rebuilt exhaustively from the Conformer censuses,
#                    twice (determinism), scored on build a's log; then the engine example.
set -uo pipefail
source "$(dirname "$0")/env.sh"
case "${PHASE:-bench}" in
epilogue)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  for epi in plain fused; do
    el "subset benchmark, $epi epilogue, PDL off"
    flag=$([ $epi = fused ] && echo --fused-epilogue)
    timeout 200 python3 benchmarks/gemm_vs_torch.py --no-pdl --no-eager $flag \
      --configs "$SUBSET" --out "$OUT/h200_gemm_subset_$epi.md" 2>&1 | grep -E "^- " | tail -7
  done
  el "ncu at 2152x1024x256"
  timeout 150 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis python3 benchmarks/h200/cublas_kernels.py \
    --shapes 2152x1024x256 --subset "$SUBSET" \
    --oasr co_128x144x64_c1x1_swap,ws_128x96x64_c1x1_swap > "$OUT/ncu_2152x1024x256.txt" 2>&1
  grep -E "Duration|Warp Cycles Per Issued|No Eligible|Issued Warp|Achieved Occupancy|Stall" \
    "$OUT/ncu_2152x1024x256.txt" | head -40
  el done
  ;;
bench)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  el "benchmark, PDL off"
  timeout 200 python3 benchmarks/gemm_vs_torch.py --no-pdl --no-eager \
    --out "$OUT/h200_gemm_nopdl.md" 2>&1 | grep -E "^- |module|failed" | tail -12
  # The PDL benchmark with its eager section and the gemm GPU tests are session 4's bench phase.
  PHASE=bench bash benchmarks/h200/session4.sh
  el done
  ;;
table)
  # The two exhaustive builds and their evaluation are session 4's table phase, unchanged.
  PHASE=table bash benchmarks/h200/session4.sh
  el "engine example (prewarm, captured Conformer vs torch linears; user tier in a temp dir)"
  env -u OASR_TUNE_USER_DB OASR_GEMM_COMPILE_SET=all timeout 200 \
    python3 examples/engine_integration.py --budget 60 --no-system-tier \
    > "$OUT/h200_engine_integration.txt" 2>&1
  grep -E "prewarm:|eager|CUDA graph|max \|" "$OUT/h200_engine_integration.txt"
  el done
  ;;
esac
