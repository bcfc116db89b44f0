#!/usr/bin/env bash
# On the H200 machine, from the repository root, with .whl carried (benchmarks/h200/prepare.sh
# wheels): the eager host cost of the ops and routed layers next to their torch calls (F.linear,
# F.conv1d, F.layer_norm, nn.Linear, nn.Conv1d), the host time of the held-out encoders' eager
# forwards (benchmarks/eager_host.py: torch, routed, routed with every layer on its per-M
# plan, in one process), then the e2e bench
# of the held-out encoders (benchmarks/heldout_encoders.py), out of the box: fp16 in CUDA
# graphs and eagerly, then int8 against its fp16 self and fp8 against its bf16 self.
#
#   benchmarks/h200/heldout.sh            results under $OUT (default h200-out/heldout)
#
# The project runs from this tree (its source folders ahead of the installed wheels, whose
# metadata only names the plugins), so the wheels need not be rebuilt for a code change.
# op_overhead.py runs with --stub (the ops' Python side on CUDA tensors, no kernel module
# to compile). Every step has its own timeout; a step that fails leaves the others' results.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/h200-out}/heldout
mkdir -p "$OUT"
SITE=$PWD/.gpu-site
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s] $*"; }

if [ ! -d "$SITE" ]; then
  el "installing .whl into $SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl \
    || { echo "pip install of .whl failed"; exit 2; }
fi
export OASR_JIT_DIR=${OASR_JIT_DIR:-$PWD/.jit-h200}
if [ -f .jit-h200.tgz ] && [ ! -d "$OASR_JIT_DIR/lib" ]; then
  mkdir -p "$OASR_JIT_DIR" && tar -C "$OASR_JIT_DIR" -xzf .jit-h200.tgz
fi
src=$PWD
for p in plugins/*/src; do src=$src:$PWD/$p; done
export PYTHONPATH=$src:$SITE PYTHONUNBUFFERED=1 OASR_TUNE_USER_DB=off
python3 -c "import torch, oasr_core, oasr_gemm; print('torch', torch.__version__, oasr_core.__file__, oasr_gemm.__file__)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

el "op_overhead --stub"
timeout 300 python3 benchmarks/op_overhead.py --stub --repeat "${REPEAT:-9}" \
  > "$OUT/h200_op_overhead_heldout.md" 2>"$OUT/op_overhead.err"
echo "  rc=$?"; grep -E "\| 16 \|" "$OUT/h200_op_overhead_heldout.md"

el "eager_host (torch, routed, routed with every layer on its per-M plan)"
timeout 180 python3 benchmarks/eager_host.py > "$OUT/h200_eager_host_heldout.md" \
  2>"$OUT/eager_host.err"
echo "  rc=$?"; grep -E "^- |^\| [a-z]" "$OUT/h200_eager_host_heldout.md"

e2e() {  # NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2
  el "e2e $name: $*"
  timeout "$limit" python3 benchmarks/e2e.py "$@" --replays "${REPLAYS:-100}" \
    --iters "${ITERS:-20}" --out "$OUT/$name.md" > "$OUT/$name.log" 2>&1
  echo "  rc=$?"; grep -E "^\| |^- agreement|^calls|^  [a-z_0-9]+/|rror" "$OUT/$name.log" | head -12
}
W2V=(--model heldout_encoders:wav2vec2_like --input B,T,512 --batch 8 --frames 500)
WSP=(--model heldout_encoders:whisper_like --input B,80,T --batch 8 --frames 1000)
ZIP=(--model heldout_encoders:zipformer_like --batch 32 --frames 256)
e2e h200_e2e_heldout_wav2vec2 60 "${W2V[@]}"
e2e h200_e2e_heldout_whisper 60 "${WSP[@]}"
e2e h200_e2e_heldout_zipformer 60 "${ZIP[@]}"
e2e h200_e2e_heldout_wav2vec2_int8 ${QUANT_LIMIT:-100} "${W2V[@]}" --quantization int8_w8a8
e2e h200_e2e_heldout_wav2vec2_fp8 ${QUANT_LIMIT:-100} "${W2V[@]}" --dtype bf16 \
  --quantization fp8_w8a8
el "done"
