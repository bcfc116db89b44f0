#!/usr/bin/env bash
# Second H200 session, two calls on one warm machine. PHASE=compile: install, compile the
# sm90 lane's modules on the machine's 16 cores, run the gemm GPU tests. PHASE=measure: the
# shipped table (two builds), the measured ArchProfile, the gemm benchmark. Carry .whl.
set -uo pipefail
export PYTHONUNBUFFERED=1 OASR_TUNE_USER_DB=off OASR_JIT_DIR=/tmp/jit OASR_TUNE_SYSTEM_DB=off
export PYTHONPATH=/tmp/site
if [ "${PHASE:-compile}" = compile ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  python3 - <<'PY'
import time
from oasr_core import jit
from oasr_gemm import jit as gj
t = time.time()
specs = [gj.full_spec("sm90_wgmma", "sm90"), gj.production_spec("sm90_wgmma", "sm90", referenced=())]
for b in jit.prebuild(specs, jobs=16):
    print(b.name, b.status.value, round(b.seconds), "s;", len(b.failed), "failed", list(b.failed)[:4])
print("compile wall", round(time.time() - t), "s")
PY
  timeout ${TEST_S:-150} python3 -m pytest -m gpu plugins/oasr_gemm/tests -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -4
else
  python3 - <<'PY' 2>&1 | tail -3
import json, os
from oasr_core.arch import ArchProfile
p = ArchProfile.measure(use_cache=False)
open(os.environ["OUT"] + "/h200_profile.json", "w").write(json.dumps(p.to_json(), indent=1))
print(json.dumps(p.to_json())[:400])
PY
  ONE=0 BUDGET=170 MAXP=14 OASR_JIT_DIR=/tmp/jit bash benchmarks/h200/build_session.sh 2>&1 | grep -E "wrote|build [ab]:|agreement|^a |^b |^torch |^default "
  python3 benchmarks/gemm_vs_torch.py --out "$OUT/h200_gemm.md" 2>&1 | grep -A6 "## Summary"
fi
