# Sourced by the session scripts on the H200 machine: the project's wheels (carried in .whl)
# installed once into /tmp/site, a gzipped JIT library (.jit-h200.tgz) unpacked into .jit-h200,
# and `el`, which prefixes a line with the seconds since the script started. OASR_JIT_DIR
# defaults to .jit-h200; the user tier is off unless a command turns it on.
export PYTHONUNBUFFERED=1 OASR_TUNE_USER_DB=off OASR_JIT_DIR=${OASR_JIT_DIR:-$PWD/.jit-h200}
[ -d /tmp/site/oasr_core ] || python3 -m pip install -q --no-index --no-deps --no-compile \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
[ -f .jit-h200.tgz ] && { mkdir -p .jit-h200 && tar -C .jit-h200 -xzf .jit-h200.tgz || exit 1; }
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
