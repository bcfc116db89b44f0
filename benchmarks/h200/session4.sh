#!/usr/bin/env bash
# Fourth H200 session (issue 3: gemm speed). Carry .whl and .jit-h200 (the whole-space sm90
# gemm library alone, compiled on the CPU machine: `gemm_vs_torch.py --prebuild-only --arch sm90`).
# Results go to $OUT (at most 8 files a call).
#   PHASE=bench : gemm_vs_torch over the 98 reference points (every config, graph-timed, the
#                 best also without PDL; eager section), then the gemm GPU tests (every sm90
#                 config of the prebuilt module, an sm80 sample, PDL chains, ops, graphs).
#   PHASE=table : the shipped gemm table rebuilt exhaustively from the Conformer censuses,
#                 twice (determinism), scored on build a's log (served vs torch is read from
#                 the log offline: benchmarks/table_vs_torch.py).
#   PHASE=final : the benchmark again on the final space (PDL on; --no-pdl was run by hand:
#                 `gemm_vs_torch.py --no-pdl --out $OUT/h200_gemm_nopdl.md`), and the engine
#                 example (prewarm, captured Conformer vs torch linears) with PDL on and off.
set -uo pipefail
source "$(dirname "$0")/env.sh"
C="--census benchmarks/census/conformer_offline.json --census benchmarks/census/conformer_streaming.json"
case "${PHASE:-bench}" in
bench)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  el "benchmark"
  timeout 330 python3 benchmarks/gemm_vs_torch.py --out "$OUT/h200_gemm.md" 2>&1 \
    | grep -E "^- |module|failed" | tail -16
  el "gemm GPU tests"
  OASR_GEMM_COMPILE_SET=all OASR_TUNE_SYSTEM_DB=off timeout 200 python3 -m pytest -m gpu \
    plugins/oasr_gemm/tests -q -p no:cacheprovider -x 2>&1 | tee "$OUT/h200_gemm_gpu_tests.log" \
    | tail -8
  el done
  ;;
table)
  export OASR_TUNE_SYSTEM_DB=off
  for run in a b; do
    el "exhaustive build $run"
    python3 -m oasr_core.cli tune build --family gemm $C --thin --max-points 14 --no-prune \
      --budget-s 250 --no-progress --fresh --seed $([ $run = a ] && echo 0 || echo 1) \
      --out "$OUT/gemm_$run.json" --log "$OUT/gemm_$run.jsonl" --checkpoint /tmp/ck_$run.jsonl \
      2>&1 | tail -3
  done
  python3 -m oasr_core.cli tune evaluate --log "$OUT/gemm_a.jsonl" --db a="$OUT/gemm_a.json" \
    --db b="$OUT/gemm_b.json" > "$OUT/evaluate.txt" 2>&1; head -12 "$OUT/evaluate.txt"
  gzip -9 "$OUT/gemm_b.jsonl"; rm -f "$OUT"/*.lock
  el done
  ;;
final)
  el "benchmark (PDL, the production launch)"
  timeout 200 python3 benchmarks/gemm_vs_torch.py --out "$OUT/h200_gemm.md" 2>&1 \
    | grep -E "^- " | tail -8
  for pdl in 1 0; do
    el "engine example, OASR_GEMM_PDL=$pdl (user tier in a temp dir)"
    env -u OASR_TUNE_USER_DB OASR_GEMM_PDL=$pdl OASR_GEMM_COMPILE_SET=all timeout 200 \
      python3 examples/engine_integration.py --budget 60 --no-system-tier \
      > "$OUT/h200_engine_pdl$pdl.txt" 2>&1
    grep -E "prewarm:|eager|CUDA graph|max \|" "$OUT/h200_engine_pdl$pdl.txt"
  done
  el done
  ;;
esac
