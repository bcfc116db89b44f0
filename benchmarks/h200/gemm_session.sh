#!/usr/bin/env bash
# One H200 session for the gemm family: install the wheels, link the carried JIT cache, run the
# GPU tests and the benchmark against torch. Run from the repo root on the device machine with
# .whl and .jit carried; everything worth keeping lands under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 OASR_TUNE_USER_DB=off OASR_JIT_DIR=$PWD/.jit-carry
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
python3 -m oasr_core.cli tune prebuild --family gemm --arch 90a --all --jobs 16 > "$OUT/prebuild.txt" 2>&1
echo "prebuild rc=$? $(( $(date +%s) - t0 ))s"; tail -4 "$OUT/prebuild.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout ${TEST_S:-280} python3 -m pytest -m gpu plugins/oasr_gemm/tests -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
fi
python3 benchmarks/gemm_vs_torch.py --out "$OUT/h200_gemm.md" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -40
