#!/usr/bin/env bash
# Third H200 session (issues 3, 4, 6, 7, 8), chained calls on one warm machine; carry .whl and
# .jit-carry (the JIT cache compiled on the CPU machine: `oasr tune prebuild`, no device in its
# key). Results go to $OUT, at most 8 files a call.
#   PHASE=smmtest : install; GPU tests of scaled_mm (every tile of both lanes, bitwise).
#   PHASE=test : GPU tests of gemm (activation epilogue) and of autotune(); the engine example.
#   PHASE=gemm : the shipped gemm table, built twice (determinism), scored.
#   PHASE=final : the engine example with prewarm; two gemm builds pruned by the shipped model.
#   PHASE=int8 : scaled_mm sweep of every tile vs torch, ladder fit, the shipped scaled_mm table
#                built from the int8 Conformer census with the fitted ladder, served vs torch.
set -uo pipefail
export OASR_JIT_DIR=$PWD/.jit-carry
source "$(dirname "$0")/env.sh"
case "${PHASE:-test}" in
smmtest)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  el "prebuild scaled_mm (cache hits expected)"
  python3 -m oasr_core.cli tune prebuild --family scaled_mm --arch 9.0a --all --jobs 16 \
    --json > /tmp/prebuild.json 2>&1; tail -c 400 /tmp/prebuild.json
  el "scaled_mm GPU tests"
  timeout 240 python3 -m pytest -m gpu plugins/oasr_scaled_mm/tests -q -p no:cacheprovider \
    2>&1 | tee "$OUT/smm_gpu_tests.log" | tail -12
  ;;
test)
  el "prebuild gemm (cache hits expected)"
  python3 -m oasr_core.cli tune prebuild --family gemm --arch 9.0a --all --jobs 16 \
    --json > /tmp/prebuild.json 2>&1; tail -c 400 /tmp/prebuild.json
  el "gemm GPU tests (activation epilogue) and autotune"
  OASR_TUNE_SYSTEM_DB=off timeout 150 python3 -m pytest -m gpu plugins/oasr_gemm/tests \
    tests/test_autotune_gpu.py -q -p no:cacheprovider 2>&1 | tee "$OUT/gemm_gpu_tests.log" | tail -6
  el "engine example"
  timeout 150 python3 examples/engine_integration.py --budget 60 --no-system-tier \
    2>&1 | tee "$OUT/engine_integration.txt" | tail -30
  ;;
gemm)
  OASR_TUNE_SYSTEM_DB=off ONE=0 BUDGET=170 MAXP=14 bash benchmarks/h200/build_session.sh 2>&1 \
    | grep -E "wrote|build [ab]:|agreement|^a |^b |^torch |^default "
  gzip -9 "$OUT/gemm_b.jsonl"
  rm -f "$OUT"/*.lock "$OUT"/gpu.txt
  ;;
int8)
  C="--census benchmarks/census/conformer_offline_int8.json --census benchmarks/census/conformer_streaming_int8.json"
  B=benchmarks/scaled_mm_vs_torch.py
  el "sweep"
  timeout 220 python3 $B sweep --out "$OUT/h200_scaled_mm_sweep.md" 2>&1 | tail -8
  el "fit"
  python3 $B fit --log "$OUT/h200_scaled_mm_sweep.jsonl" --out-ladders "$OUT/fitted_ladders.json" \
    --out "$OUT/h200_scaled_mm_fit.md" 2>&1 | tail -25
  cp "$OUT/fitted_ladders.json" /tmp/site/oasr_scaled_mm/fitted_ladders.json
  el "build (fitted ladder)"
  OASR_TUNE_SYSTEM_DB=off python3 -m oasr_core.cli tune build --family scaled_mm $C --thin \
    --max-points 14 --no-progress --fresh --out "$OUT/scaled_mm.json" \
    --log "$OUT/scaled_mm.jsonl" --checkpoint /tmp/ck_smm.jsonl 2>&1 | tail -8
  el "served"
  timeout 150 python3 $B served $C --db "$OUT/scaled_mm.json" --ladders "$OUT/fitted_ladders.json" \
    --out "$OUT/h200_scaled_mm.md" 2>&1 | tail -14
  rm -f "$OUT"/*.lock
  el done
  ;;
final)
  el "engine example (user tier in a temp dir)"
  env -u OASR_TUNE_USER_DB timeout 260 python3 examples/engine_integration.py --budget 60 \
    --no-system-tier > "$OUT/h200_engine_integration.txt" 2>&1
  tail -14 "$OUT/h200_engine_integration.txt"
  C="--census benchmarks/census/conformer_offline.json --census benchmarks/census/conformer_streaming.json"
  for run in a b; do
    el "pruned build $run (prior: the shipped table's calibrated model)"
    python3 -m oasr_core.cli tune build --family gemm $C --thin --max-points 14 --no-progress \
      --fresh --seed $([ $run = a ] && echo 0 || echo 1) --out "$OUT/pruned_$run.json" \
      --log "$OUT/pruned_$run.jsonl" --checkpoint /tmp/pck_$run.jsonl 2>&1 | tail -2
  done
  python3 -m oasr_core.cli tune evaluate --log db/sm90/measurements/gemm.jsonl \
    --db pruned_a="$OUT/pruned_a.json" --db pruned_b="$OUT/pruned_b.json" \
    > "$OUT/pruned_evaluate.txt" 2>&1; head -8 "$OUT/pruned_evaluate.txt"; tail -1 "$OUT/pruned_evaluate.txt"
  gzip -9 "$OUT"/pruned_*.jsonl; rm -f "$OUT"/*.lock
  el done
  ;;
esac
