#!/usr/bin/env bash
# The shipped sm90 gemm table, built twice on the H200 from the Conformer censuses (offline and
# streaming), then scored: regret against the measured oracle, agreement of the two builds.
# Run from the repo root on the device machine with .whl and .jit-carry carried.
set -uo pipefail
export PYTHONUNBUFFERED=1 OASR_TUNE_USER_DB=off OASR_JIT_DIR=${OASR_JIT_DIR:-$PWD/.jit-carry} OASR_TUNE_SYSTEM_DB=off
[ -d /tmp/site/oasr_core ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv | tee "$OUT/gpu.txt"
C="--census benchmarks/census/conformer_offline.json --census benchmarks/census/conformer_streaming.json"
K="--thin --max-points ${MAXP:-14} --budget-s ${BUDGET:-200} --no-progress --fresh"
for run in a b; do
  t0=$(date +%s)
  python3 -m oasr_core.cli tune build --family gemm $C $K --seed $([ $run = a ] && echo 0 || echo 1) --out "$OUT/gemm_$run.json" \
    --log "$OUT/gemm_$run.jsonl" --checkpoint /tmp/ck_$run.jsonl 2>&1 | tail -12
  echo "build $run: $(( $(date +%s) - t0 )) s"
  [ "${ONE:-0}" = 1 ] && break
done
python3 -m oasr_core.cli tune evaluate --log "$OUT/gemm_a.jsonl" --db a="$OUT/gemm_a.json" \
  $( [ -f "$OUT/gemm_b.json" ] && echo --db b="$OUT/gemm_b.json" ) 2>&1 | tee "$OUT/evaluate.txt" | tail -30
