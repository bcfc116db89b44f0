#!/usr/bin/env bash
# The one entry point for GPU work on the H200 machine (benchmarks/README.md says what it needs
# and how benchmarks/h200/prepare.sh makes it on a CPU machine). Run from the repository root:
#
#   benchmarks/h200/run.sh [OPTIONS] PHASE [PHASE...]
#
# Phases run in the order given; each writes under $OUT/<phase>/ (OUT defaults to ./h200-out)
# and `setup` runs first whatever is asked, so any phase works on a fresh machine.
#   setup            install .whl/*.whl into .gpu-site (again only when the wheels changed),
#                    unpack .jit-h200.tgz into .jit-h200, record the GPU (gpu.txt)
#   prebuild         gemm's sm90 lane whole (or --subset), scaled_mm's and scaled_mm_fp8's lanes
#                    whole, as prepare.sh jit makes them (cache hits when the carried cache is
#                    complete; what is missing compiles here on 16 cores)
#   gpu-tests        `pytest -m "gpu and not fp8"` of gemm and scaled_mm, the integration tests
#                    and the build's peak-memory test, every sm90 config (OASR_*_COMPILE_SET=all:
#                    the whole-space modules of the cache); gemm_residual's are
#                    gpu-tests-residual, gemm_log_softmax's gpu-tests-logsoftmax, bmm's
#                    gpu-tests-bmm, group_gemm's gpu-tests-group, the W8A8 tests' fp8 rows
#                    gpu-tests-fp8
#   bench-gemm       benchmarks/gemm_vs_torch.py (--pdl, --bias, --subset, --epilogue)
#   ncu              Nsight Compute of cuBLAS and oasr kernels at --ncu-shape
#   bench-scaled-mm  scaled_mm sweep of every tile vs torch, ladder fit, the scaled_mm table
#                    built from the int8 Conformer censuses with the fitted ladder, served vs torch
#   build-table      the gemm table rebuilt twice (seeds 0 and 1) from the Conformer censuses,
#                    exhaustively (or --prune: pruned by the shipped cost model), evaluated
#   build-speed      benchmarks/build_speed.py: `oasr tune build --effort default` of the reference
#                    Conformer census and of a 14-signature census (Conformer-L / Zipformer
#                    widths x 11 sizes), each from its own EMPTY JIT cache under /tmp (never the
#                    carried one: the compile is counted), then the 14-signature reference (every
#                    config at every census point, its own empty cache, --budget 170 s); wall /
#                    compile / measure times, regret against the exhaustive logs (the committed
#                    one for the Conformer) and agreement -> build_speed.md, build_speed.json
#                    (with the tables), the logs (.jsonl.gz); BUILD_SPEED_CENSUS picks builds
#                    (default "conformer speed14 speed14_reference"; ~4 + ~8 min)
#   profile          the measured ArchProfile of the device (h200_profile.json)
#   served           benchmarks/served_vs_torch.py: the op as served out of the box (tiers, cost
#                    model, untuned fallback) against F.linear at 11 widths no table covers x 14
#                    M, separated, with the serving tier per point (h200_served_vs_torch.md)
#   engine           examples/engine_integration.py: prewarm into a temporary user tier, then
#                    the captured Conformer vs torch linears (--pdl)
#   e2e              benchmarks/e2e.py out of the box (shipped tables, production modules):
#                    Conformer x16 batch 8 x 1024 and Whisper-base encoder batch 8 x 3000, fp16,
#                    CUDA graph and eager, and the int8 Conformer against its fp16 self
#   e2e-tuned        per model: census, `oasr tune build` into a temporary user tier
#                    (--e2e-budget), e2e again with that tier (whole-space modules)
#   e2e-compile      benchmarks/e2e.py --compile --profile, out of the box: torch, torch.compile and
#                    torch.compile(backend="oasr") of the Conformer (batch 8 x 1024), the
#                    Whisper-base encoder (batch 8) and a torchaudio-style Conformer
#                    (examples/library_conformer.py, batch 8 x 1024), CUDA graphs, compile times,
#                    GPU time by kernel class of each compiled forward (h200_compile_*.md, .json);
#                    E2E_COMPILE_MODELS picks models (default "conformer whisper_encoder
#                    library_conformer")
#   e2e-compile-tuned  the compile censuses (benchmarks/census/<model>_compile.json, what
#                    `oasr tune census --compile` records at batch 8) built for gemm and conv1d
#                    into a user tier (--e2e-budget; E2E_COMPILE_TIER names an existing tier
#                    root instead and skips the build), then e2e-compile's arms with that tier
#                    (h200_compile_<model>_tuned.md, .json; the tier's tables beside them)
#   e2e-compile-fp8  benchmarks/e2e.py --compile --quantization fp8_w8a8 --dtype bf16 --profile:
#                    torch.compile(backend="oasr") with the fp8 scheme against Inductor alone
#                    on the Whisper-base encoder (batch 8) and a wide Conformer (d_model 1024,
#                    FFN 4096, 8 layers, batch 16 x 1024): quantized linears where the table
#                    or the untuned route says fp8 pays, the fused norm + quantize before them
#                    (h200_compile_<model>_fp8.md, .json); E2E_COMPILE_FP8_MODELS picks models
#   gpu-tests-fp8    `pytest -m "gpu and fp8"` of the W8A8 tests (scaled_mm's tests, fp8 rows):
#                    every tile of both fp8 lanes, both ops, the numerics bound, graphs,
#                    torch.compile, the quantizer, the unquantized route
#   gpu-tests-residual  `pytest -m gpu` of gemm's op gemm_residual (test_gemm_residual_gpu.py):
#                    the fused-residual kernels of 10 sm90 configs (every schedule, Stream-K,
#                    subtiles, clusters, swapped) vs fp32, alpha 0 bitwise, in place, graphs,
#                    the op through selection and torch.compile, PDL chains; compiles those
#                    10 units (~1-2 min on 16 cores) -> gpu_tests_residual.log
#   bench-fp8        the scaled_mm_fp8 table built from the fp8 Conformer censuses with its
#                    measurement log (what db/sm90/scaled_mm_fp8.json ships), its offline replay
#                    (--from-log --fresh) cmp'd, then benchmarks/fp8_vs_torch.py served from it
#   gpu-tests-logsoftmax  `pytest -m gpu` of gemm's op gemm_log_softmax
#                    (test_gemm_log_softmax_gpu.py): the row log-softmax on each of its paths,
#                    12 configs (7 sm90_wgmma, 5 sm80_mma) composed with it at V
#                    1024/5008/32/264 and K 256/512 vs fp32, in place, graphs, the op through
#                    selection and torch.compile, the counted torch path (V 29/257, refused);
#                    compiles those 12 units -> one line a test (gpu_tests_logsoftmax.log,
#                    junit XML beside it; GPU_TESTS_LIMIT, default 400 s)
#   bench-logsoftmax benchmarks/gemm_log_softmax_vs_torch.py: sm90 configs composed with
#                    the row log-softmax vs F.linear + log_softmax, separated, at the reference
#                    CTC heads and a sweep -> h200_gemm_log_softmax.md, .jsonl; LOGSM_CONFIGS picks
#                    the configs (default: the GPU tests' 7 and 5 wider tiles, 12 configs whose
#                    units the carried cache can hold; "all": the whole sm90 space, ~9 min here)
#   gpu-tests-bmm    `pytest -m gpu` of gemm's op bmm (test_gemm_bmm_gpu.py): the batched
#                    launchers of 11 split-free configs (7 sm90_wgmma, 4 sm80_mma), layouts TN
#                    and NN, both dtypes, at attention's (L, M, N, K) vs fp32 (the unaligned
#                    T = 1500 / 255 shapes refused), new operands, graphs, the op through
#                    selection on 4-D attention views and torch.compile, the counted torch path;
#                    compiles those 22 units (~2 min on 16 cores) -> one line a test
#                    (gpu_tests_bmm.log, junit XML beside it; GPU_TESTS_LIMIT, default 400 s)
#   gpu-tests-group  `pytest -m gpu` of gemm's op group_gemm (test_gemm_group_gpu.py): the
#                    grouped launchers of 4 split-free sm80_mma configs (CUTLASS 2.x GemmGrouped,
#                    run on sm90), both dtypes, with and without bias, G = 3, 4, 8 at (256, 256)
#                    and (1024, 256) with uneven rows incl. 1 and 0 vs fp32, new operands, a
#                    graph replaying its own records, the op's counted torch path, torch.compile;
#                    compiles 4 units -> one line a test (gpu_tests_group.log, junit XML beside)
#   bench-group      benchmarks/group_gemm_vs_torch.py: the grouped launchers of the split-free
#                    sm80_mma configs (CUTLASS 2.x GemmGrouped on sm90) vs the loop of addmm,
#                    separated, at attention projections of different inputs and expert-style
#                    uneven groups -> h200_group_gemm.md, .jsonl; GROUP_CONFIGS picks the
#                    configs (default: every grouped config, 42 units on sm90)
#   bench-bmm        benchmarks/bmm_vs_torch.py: sm90 configs' batched launchers, both layouts,
#                    vs torch.bmm, separated, at attention's shapes and a sweep -> h200_bmm.md,
#                    .jsonl; BMM_CONFIGS picks the configs (default: the lane's default, its
#                    coverage basis and 4 cooperative tiles, 13 configs = 26 units compiled
#                    here in ~1-2 min on 16 cores; "all": every split-free config, 258 units,
#                    more than one call's time unless the carried cache holds them)
#   gpu-tests-quant  the activation quantizers (the kit's one-pass row quantizer): `pytest -m gpu`
#                    of both families' quantizer tests, every kernel path against each torch
#                    definition, and the fused layer norm (tests/test_integration_normed_gpu.py)
#                    (gpu_tests_quant.log); benchmarks/quantizer_bandwidth.py, bf16 and
#                    fp16, cold, GB/s against the 4.8 TB/s bound (quantizer_bandwidth.md, .json);
#                    when bench-fp8 ran on this machine, the fp8 untuned route replayed on its
#                    fp8_vs_torch log and refitted (fp8_untuned_offline.md, .json); ~3 min
#   e2e-fp8          benchmarks/e2e.py: the fp8 Conformer against its bf16 self, untuned (the
#                    untuned route: the heuristic's tile where fp8 is predicted to beat bf16,
#                    F.linear elsewhere; whole-space module) and, when bench-fp8 ran on this
#                    machine, with its table as the user tier; a wide Conformer (d_model 1024)
#                    with the fused layer norm and with torch's
#   conv1d           the conv1d family: both sm90 modules prebuilt (sm90_conv1d, sm80_conv1d whole),
#                    `pytest -m gpu plugins/oasr_conv1d` (gpu_tests_conv1d.log), the conv1d table
#                    built from the conv censuses (conv1d.json, conv1d.jsonl) and its offline
#                    replay cmp'd; ~8 min
#   conv2d           the conv2d family in one call (~3 min with the lane carried in .jit-h200.tgz):
#                    the whole-space module (cache hits), `pytest -m gpu plugins/oasr_conv2d`
#                    (gpu_tests_conv2d.log), benchmarks/conv2d_vs_torch.py out of the box
#                    (conv2d_vs_torch.md, .jsonl: every config, torch NHWC and NCHW, served =
#                    torch untuned), a quick conv2d table built from the Conformer census with
#                    the conv2d front end (benchmarks/census/conformer_conv2d_offline.json ->
#                    conv2d.json, .jsonl), then the Conformer set served from that table
#                    (conv2d_vs_torch_tuned.md)
#   e2e-conv2d       benchmarks/e2e.py out of the box: the Conformer (batch 8 x 1024, fp16) with its
#                    subsampling served by the conv2d family (--param conv2d_frontend=true),
#                    then with a CTC head (--param ctc_vocab=1024: the gemm_log_softmax baseline);
#                    CUDA graph and eager (h200_e2e_conformer_conv2d.md, h200_e2e_conformer_ctc.md)
#   e2e-heads-tuned  the Conformer with both options (the conv2d front end and a CTC head of 1024
#                    classes, batch 8 x 1024) and the Whisper-base encoder with the CTC head
#                    (batch 8), fp16, CUDA graph and eager: out of the box, then with a user tier
#                    of conv2d built from their censuses
#                    (benchmarks/census/{conformer_conv2d_ctc,whisper_encoder_ctc}_offline.json)
#                    and gemm's gemm_log_softmax built at the heads' widths (--e2e-budget each)
#                    -> h200_e2e_{conformer_heads,whisper_encoder_ctc}{,_tuned}.md, the tables
#   bench-conv1d     benchmarks/conv1d_vs_torch.py: every config and the served op against torch
#                    at the Conformer / Whisper / wav2vec2 shapes and a sweep (conv1d_vs_torch*.md,
#                    .jsonl), served from the conv1d phase's table when it ran on this machine
#                    (shapes the table does not cover are served by torch), else out of the box
#   distributed      the sharded build on this machine's GPUs (oasr-core[distributed]; the dask
#                    wheels carried): the int8 Conformer census's scaled_mm signatures (sm80 lane,
#                    whole-space module carried; DISTRIBUTED_FAMILY, _LANE, _CENSUS change it)
#                    built on the GPU with no scheduler, then through `--scheduler local --gpus
#                    1` (one GPU worker, one CPU compile worker), each table against its own
#                    log's replay (byte for byte) and the two tables' diff, wall times and the
#                    driver's overhead -> distributed.md, distributed_logs.tgz; then, when
#                    DISTRIBUTED_GPUS is set (e.g. 1,2,4), benchmarks/distributed_build.py on
#                    those GPU worker counts with a worker killed mid-build (distributed_build.md)
#   heldout-tuned    the held-out encoders after a build of their own censuses
#                    (benchmarks/census/heldout_*_offline.json, recorded on a CPU with `oasr tune
#                    census --model heldout_encoders:...`): gemm and conv1d built into a user tier
#                    (--e2e-budget each; the build compiles what it measures and the production
#                    modules its tables name), then the e2e bench of each model with that tier,
#                    graph and eager (h200_e2e_heldout_<model>_tuned.md, the tables beside them)
#   gpu-tests-recurrent  the recurrent family: its lane's whole-space module on sm90 (32 small
#                    units: every cell's, seconds on 16 cores), `pytest -m gpu plugins/oasr_recurrent`
#                    (every config of each cell at the prediction networks' widths vs fp32, graphs,
#                    the ops through the tiers, a routed nn.LSTM / nn.RNN decoding;
#                    gpu_tests_recurrent.log)
#   bench-recurrent  benchmarks/recurrent_vs_torch.py: every config of each op (lstm_step,
#                    rnn_tanh_step, rnn_relu_step), torch's cell, nn.LSTM's / nn.RNN's one step and
#                    the served op at 6 widths x B 1, 4, 16, 64, separated; the eager host cost per
#                    decoding step of the reference prediction networks, nn.LSTM against the
#                    routed module (recurrent_vs_torch.md, .jsonl)
#   gpu-tests-families  `pytest -m gpu` of gemm, conv1d, conv2d, scaled_mm (int8) and its fp8 rows,
#                    each family its own run and time limit (GPU_TESTS_LIMIT, default 300 s),
#                    one line a test (gpu_tests_<family>.log, junit XML beside it), so a run cut
#                    short still names what passed and what failed; GPU_TESTS_FAMILIES picks
# Options:
#   --pdl on|off|both   programmatic dependent launch for bench-gemm and engine (default: both
#                       for bench-gemm, on for engine)
#   --bias              bench-gemm times calls with a bias
#   --subset GLOBS      comma list of gemm config-id globs: bench-gemm and ncu use the subset
#                       module (the whole-space module's objects) instead of the whole space
#   --epilogue plain|fused|both   bench-gemm's 3.x epilogue for calls without bias (default plain)
#   --ncu-shape MxNxK   ncu's shape (default 2152x1024x256)
#   --ncu-oasr IDS      comma list of oasr configs ncu launches beside cuBLAS
#                       (default co_128x144x64_c1x1_swap,ws_128x96x64_c1x1_swap)
#   --prune             build-table prunes with the shipped calibrated model (default: exhaustive)
#   --budget S          build-table's measuring budget per build, seconds (default 250)
#   --e2e-replays N     e2e and e2e-tuned: CUDA graph replays per model (default 200; eager
#                       forwards are a tenth of it, at least 10)
#   --e2e-budget S      e2e-tuned's measuring budget per model's build, seconds (default 120)
# At most 8 files come back from one device call: ask for one or two phases a call.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "run.sh: $*" >&2; exit 2; }

PDL="" BIAS=0 SUBSET="" EPILOGUE=plain PRUNE=0 BUDGET=250 E2E_REPLAYS=200 E2E_BUDGET=120
NCU_SHAPE=2152x1024x256 NCU_OASR=co_128x144x64_c1x1_swap,ws_128x96x64_c1x1_swap
PHASES=()
while (($#)); do
  case "$1" in
    --pdl) PDL=${2:?--pdl needs on, off or both}; shift ;;
    --bias) BIAS=1 ;;
    --subset) SUBSET=${2:?--subset needs config-id globs}; shift ;;
    --epilogue) EPILOGUE=${2:?--epilogue needs plain, fused or both}; shift ;;
    --ncu-shape) NCU_SHAPE=${2:?--ncu-shape needs MxNxK}; shift ;;
    --ncu-oasr) NCU_OASR=${2:?--ncu-oasr needs config ids}; shift ;;
    --prune) PRUNE=1 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    --e2e-replays) E2E_REPLAYS=${2:?--e2e-replays needs a count}; shift ;;
    --e2e-budget) E2E_BUDGET=${2:?--e2e-budget needs seconds}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) PHASES+=("$1") ;;
  esac
  shift
done
((${#PHASES[@]})) || { usage >&2; exit 2; }
case "$PDL" in ""|on|off|both) ;; *) die "--pdl $PDL is not on, off or both" ;; esac
case "$EPILOGUE" in plain|fused|both) ;; *) die "--epilogue $EPILOGUE is not plain, fused or both" ;; esac
[[ "$E2E_REPLAYS" =~ ^[1-9][0-9]*$ ]] || die "--e2e-replays $E2E_REPLAYS is not a positive count"
[[ "$E2E_BUDGET" =~ ^[1-9][0-9]*$ ]] || die "--e2e-budget $E2E_BUDGET is not a positive number of seconds"
for phase in "${PHASES[@]}"; do
  case "$phase" in
    setup|prebuild|gpu-tests|bench-gemm|ncu|bench-scaled-mm|build-table|build-speed|profile|served|engine|e2e|e2e-tuned) ;;
    gpu-tests-fp8|bench-fp8|gpu-tests-quant|e2e-fp8|conv1d|bench-conv1d|conv2d|e2e-conv2d) ;;
    gpu-tests-residual|distributed|e2e-compile|e2e-compile-tuned|e2e-compile-fp8) ;;
    heldout-tuned|gpu-tests-families|gpu-tests-logsoftmax|bench-logsoftmax) ;;
    e2e-heads-tuned) ;;
    gpu-tests-recurrent|bench-recurrent) ;;
    gpu-tests-bmm|bench-bmm|gpu-tests-group|bench-group) ;;
    *) die "unknown phase $phase (see --help)" ;;
  esac
done

OUT=${OUT:-$PWD/h200-out}
SITE=$PWD/.gpu-site
export PYTHONUNBUFFERED=1 OASR_TUNE_USER_DB=off OASR_JIT_DIR=${OASR_JIT_DIR:-$PWD/.jit-h200}
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
GEMM_CENSUS=(--census benchmarks/census/conformer_offline.json
             --census benchmarks/census/conformer_streaming.json)
INT8_CENSUS=(--census benchmarks/census/conformer_offline_int8.json
             --census benchmarks/census/conformer_streaming_int8.json)
FP8_CENSUS=(--census benchmarks/census/conformer_offline_fp8.json
            --census benchmarks/census/conformer_streaming_fp8.json)
CONV_CENSUS=(--census benchmarks/census/conformer_offline_conv.json
             --census benchmarks/census/conformer_streaming_conv.json
             --census benchmarks/census/whisper_encoder_offline_conv.json
             --census benchmarks/census/whisper_encoder_small_batch_conv.json
             --census benchmarks/census/whisper_encoder_b1_conv.json
             --census benchmarks/census/whisper_encoder_b8_conv.json
             --census benchmarks/census/conformer_s_offline_conv.json
             --census benchmarks/census/conformer_l_offline_conv.json)
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s] $*"; }
oasr() { python3 -m oasr_core.cli "$@"; }
pdl_modes() { case "${PDL:-$1}" in both) echo on off ;; *) echo "${PDL:-$1}" ;; esac; }
tidy() { rm -f "$1"/*.lock; }  # build locks are not results

phase_setup() {
  local dir=$1 stamp
  [ -n "$(ls .whl/*.whl 2>/dev/null)" ] || die "no wheels in .whl (benchmarks/h200/prepare.sh wheels)"
  stamp=$(cat .whl/*.whl | sha256sum | cut -c1-16)
  if [ "$(cat "$SITE/.wheels" 2>/dev/null)" != "$stamp" ]; then
    el "installing .whl into $SITE"
    rm -rf "$SITE"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl \
      || die "pip install of .whl failed"
    echo "$stamp" > "$SITE/.wheels"
  fi
  if [ -f .jit-h200.tgz ]; then
    el "unpacking .jit-h200.tgz into $OASR_JIT_DIR"
    mkdir -p "$OASR_JIT_DIR" || die "cannot make $OASR_JIT_DIR"
    tar -C "$OASR_JIT_DIR" -xzf .jit-h200.tgz || die "bad .jit-h200.tgz"
  fi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv \
    | tee "$dir/gpu.txt"
  python3 -c "import torch, oasr_core; print('torch', torch.__version__, 'oasr_core', oasr_core.__file__)"
}

phase_prebuild() {
  local dir=$1
  el "prebuild: gemm's sm90 lane ${SUBSET:-whole space}, scaled_mm's lanes (cache hits expected)"
  timeout 540 python3 benchmarks/gemm_vs_torch.py --prebuild-only --jobs 16 \
    ${SUBSET:+--configs "$SUBSET"} 2>&1 | tee "$dir/prebuild_gemm.txt" | tail -4
  timeout 300 python3 -m oasr_core.cli tune prebuild --family scaled_mm --arch 9.0a --all \
    --jobs 16 --json > "$dir/prebuild_scaled_mm.json" 2>&1
  echo "scaled_mm prebuild rc=$?"; tail -c 400 "$dir/prebuild_scaled_mm.json"; echo
  prebuild_fp8 "$dir"
}

prebuild_fp8() {
  timeout 400 python3 -m oasr_core.cli tune prebuild --family scaled_mm_fp8 --arch 9.0a --all \
    --jobs 16 --json > "$1/prebuild_scaled_mm_fp8.json" 2>&1
  echo "scaled_mm_fp8 prebuild rc=$?"; tail -c 400 "$1/prebuild_scaled_mm_fp8.json"; echo
}

phase_gpu_tests_fp8() {
  local dir=$1
  prebuild_fp8 "$dir"
  el "GPU tests of the fp8 format: every config of both lanes on sm90"
  OASR_SCALED_MM_FP8_COMPILE_SET=all OASR_TUNE_SYSTEM_DB=off \
    timeout 540 python3 -m pytest -m "gpu and fp8" plugins/oasr_scaled_mm/tests -q -rs -s \
    -p no:cacheprovider 2>&1 | tee "$dir/gpu_tests_fp8.log" | tail -15
}

phase_bench_fp8() {
  local dir=$1
  prebuild_fp8 "$dir"
  el "scaled_mm_fp8 table from the fp8 Conformer censuses (every tile, torch, unquantized)"
  OASR_TUNE_SYSTEM_DB=off timeout 300 python3 -m oasr_core.cli tune build \
    --family scaled_mm_fp8 "${FP8_CENSUS[@]}" --thin --max-points 14 --no-progress --fresh \
    --out "$dir/scaled_mm_fp8.json" --log "$dir/scaled_mm_fp8.jsonl" \
    --checkpoint /tmp/oasr_ck_fp8.jsonl 2>&1 | tail -8
  el "offline replay of the log"
  python3 -m oasr_core.cli tune build --from-log "$dir/scaled_mm_fp8.jsonl" \
    --family scaled_mm_fp8 --thin --max-points 14 --fresh --out /tmp/oasr_fp8_replay.json \
    2>&1 | tail -2
  if cmp /tmp/oasr_fp8_replay.json "$dir/scaled_mm_fp8.json"; then
    echo "  replay: byte-identical"
  else
    echo "  replay: DIFFERS from the build"
  fi
  el "fp8_vs_torch: every tile and the served linear against torch._scaled_mm and bf16"
  timeout 420 python3 benchmarks/fp8_vs_torch.py --db "$dir/scaled_mm_fp8.json" \
    --out "$dir/h200_fp8.md" > "$dir/fp8_vs_torch.log" 2>&1
  echo "  rc=$?"; sed -n '/^## Against the goals/,$p' "$dir/h200_fp8.md" 2>/dev/null
  tail -3 "$dir/fp8_vs_torch.log"
  rm -f "$dir/fp8_vs_torch.log"
  tidy "$dir"
}

phase_gpu_tests_quant() {
  local dir=$1 log=$OUT/bench-fp8/h200_fp8.jsonl
  el "GPU tests of the int8 and fp8 activation quantizers (every kernel path)"
  OASR_TUNE_SYSTEM_DB=off timeout 400 python3 -m pytest -m gpu \
    plugins/oasr_scaled_mm/tests/test_w8a8_quantize_gpu.py tests/test_integration_normed_gpu.py \
    -q -rs -p no:cacheprovider 2>&1 \
    | tee "$dir/gpu_tests_quant.log" | tail -8
  el "quantizer_bandwidth: both quantizers against the bandwidth bound"
  timeout 400 python3 benchmarks/quantizer_bandwidth.py --out-dir "$dir" --dtypes bf16,fp16 \
    > "$dir/quantizer_bandwidth.log" 2>&1
  echo "  rc=$?"; sed -n '/^## Summary/,$p' "$dir/quantizer_bandwidth.md" 2>/dev/null
  tail -3 "$dir/quantizer_bandwidth.log"
  rm -f "$dir/quantizer_bandwidth.log"
  if [ -f "$log" ]; then
    el "the fp8 untuned route replayed on bench-fp8's log, refitted"
    python3 benchmarks/fp8_untuned_offline.py "$log" --fit --out "$dir/fp8_untuned_offline.md" \
      2>&1 | sed -n '3,22p'
  fi
  tidy "$dir"
}

phase_e2e_fp8() {
  local dir=$1 user table=$OUT/bench-fp8/scaled_mm_fp8.json
  # fp8 serves from its whole-space module (the carried library; the production set's kernels
  # are the same units), so only gemm's production module may need compiling here.
  el "production modules of gemm; scaled_mm_fp8's lanes whole"
  timeout 540 python3 -m oasr_core.cli tune prebuild --family gemm --arch 9.0a --jobs 16 \
    --json > "$dir/prebuild.json" 2>&1
  echo "  prebuild rc=$?"
  prebuild_fp8 "$dir"
  OASR_SCALED_MM_FP8_COMPILE_SET=all e2e_run "$dir" h200_e2e_conformer_fp8 \
    --workload conformer --batch 8 --frames 1024 --dtype bf16 --quantization fp8_w8a8
  # A wide Conformer no table covers (d_model 1024, FFN 4096; M ~ 4080 rows a linear): the
  # untuned route decides every layer; with the fused layer norm, then with torch's norm.
  local wide=(--workload conformer --param d_model=1024 --param ffn_dim=4096 --param heads=16
              --param layers=8 --batch 16 --frames 1024 --dtype bf16 --quantization fp8_w8a8)
  OASR_SCALED_MM_FP8_COMPILE_SET=all e2e_run "$dir" h200_e2e_conformer_wide_fp8 "${wide[@]}"
  OASR_SCALED_MM_FP8_COMPILE_SET=all e2e_run "$dir" h200_e2e_conformer_wide_fp8_torch_norm \
    "${wide[@]}" --param 'torch_layers=["LayerNorm"]'
  if [ -f "$table" ]; then
    user=$(mktemp -d /tmp/oasr-fp8-user.XXXXXX)
    mkdir -p "$user/sm90" && cp "$table" "$user/sm90/scaled_mm_fp8.json"
    OASR_TUNE_USER_DB=$user OASR_SCALED_MM_FP8_COMPILE_SET=all e2e_run "$dir" \
      h200_e2e_conformer_fp8_tuned --workload conformer --batch 8 --frames 1024 --dtype bf16 \
      --quantization fp8_w8a8
    rm -rf "$user"
  fi
  rm -f "$dir"/*.log
}

phase_gpu_tests() {
  local dir=$1
  el "GPU tests: every sm90 config of both plugins, graphs, PDL chains, autotune"
  OASR_GEMM_COMPILE_SET=all OASR_SCALED_MM_COMPILE_SET=all OASR_TUNE_SYSTEM_DB=off \
    timeout 540 python3 -m pytest -m "gpu and not fp8" plugins/oasr_gemm/tests \
    plugins/oasr_scaled_mm/tests \
    tests/test_integration_autotune_gpu.py tests/test_build_speed_memory_gpu.py -q -p no:cacheprovider \
    --ignore=plugins/oasr_gemm/tests/test_gemm_residual_gpu.py \
    --ignore=plugins/oasr_gemm/tests/test_gemm_log_softmax_gpu.py \
    --ignore=plugins/oasr_gemm/tests/test_gemm_bmm_gpu.py 2>&1 \
    | tee "$dir/gpu_tests.log" | tail -12
}

phase_gpu_tests_residual() {
  local dir=$1
  el "GPU tests of gemm_residual: fused-residual kernels of a subset of sm90 configs, the op"
  OASR_TUNE_SYSTEM_DB=off timeout 540 python3 -m pytest -m gpu \
    plugins/oasr_gemm/tests/test_gemm_residual_gpu.py -q -rs -p no:cacheprovider 2>&1 \
    | tee "$dir/gpu_tests_residual.log" | tail -15
}

phase_gpu_tests_logsoftmax() {
  local dir=$1 rc
  el "GPU tests of gemm_log_softmax: the row log-softmax, both lanes' configs composed with it, the op"
  OASR_TUNE_SYSTEM_DB=off timeout "${GPU_TESTS_LIMIT:-400}" python3 -m pytest -m gpu \
    plugins/oasr_gemm/tests/test_gemm_log_softmax_gpu.py -v -rfE --tb=short -p no:cacheprovider \
    --junitxml="$dir/gpu_tests_logsoftmax.xml" > "$dir/gpu_tests_logsoftmax.log" 2>&1
  rc=$?
  echo "  rc=$rc: $(grep -c ' PASSED' "$dir/gpu_tests_logsoftmax.log") passed," \
    "$(grep -c ' FAILED' "$dir/gpu_tests_logsoftmax.log") failed," \
    "$(grep -c ' SKIPPED' "$dir/gpu_tests_logsoftmax.log") skipped"
  grep -E " FAILED|^(FAILED|ERROR) " "$dir/gpu_tests_logsoftmax.log" | head -10
}

phase_gpu_tests_bmm() {
  local dir=$1 rc
  el "GPU tests of bmm: both lanes' batched launchers in both layouts, the op"
  OASR_TUNE_SYSTEM_DB=off timeout "${GPU_TESTS_LIMIT:-400}" python3 -m pytest -m gpu \
    plugins/oasr_gemm/tests/test_gemm_bmm_gpu.py -v -rfE --tb=short -p no:cacheprovider \
    --junitxml="$dir/gpu_tests_bmm.xml" > "$dir/gpu_tests_bmm.log" 2>&1
  rc=$?
  echo "  rc=$rc: $(grep -c ' PASSED' "$dir/gpu_tests_bmm.log") passed," \
    "$(grep -c ' FAILED' "$dir/gpu_tests_bmm.log") failed," \
    "$(grep -c ' SKIPPED' "$dir/gpu_tests_bmm.log") skipped"
  grep -E " FAILED|^(FAILED|ERROR) " "$dir/gpu_tests_bmm.log" | head -10
}

phase_gpu_tests_group() {
  local dir=$1 rc
  el "GPU tests of group_gemm: the 2.x lane's grouped launchers, the op's torch path"
  OASR_TUNE_SYSTEM_DB=off timeout "${GPU_TESTS_LIMIT:-400}" python3 -m pytest -m gpu \
    plugins/oasr_gemm/tests/test_gemm_group_gpu.py -v -rfE --tb=short -p no:cacheprovider \
    --junitxml="$dir/gpu_tests_group.xml" > "$dir/gpu_tests_group.log" 2>&1
  rc=$?
  echo "  rc=$rc: $(grep -c ' PASSED' "$dir/gpu_tests_group.log") passed," \
    "$(grep -c ' FAILED' "$dir/gpu_tests_group.log") failed," \
    "$(grep -c ' SKIPPED' "$dir/gpu_tests_group.log") skipped"
  grep -E " FAILED|^(FAILED|ERROR) " "$dir/gpu_tests_group.log" | head -10
}

phase_bench_group() {
  local dir=$1
  el "group_gemm vs the loop of torch linears: projections and uneven groups (separated)"
  timeout 540 python3 benchmarks/group_gemm_vs_torch.py --jobs 16 \
    ${GROUP_CONFIGS:+--configs "$GROUP_CONFIGS"} \
    --out "$dir/h200_group_gemm.md" > "$dir/bench_group.log" 2>&1
  echo "  rc=$?"; grep -E "^- (projections|experts):" "$dir/h200_group_gemm.md" 2>/dev/null
  tail -3 "$dir/bench_group.log"
}

phase_bench_bmm() {
  local dir=$1
  el "bmm vs torch.bmm: attention's shapes and a sweep (separated)"
  local configs=${BMM_CONFIGS:-ws_64x128x64_c1x1_s4,ws_64x16x128_c1x1_swap,pp_128x128x64_c1x1,ws_64x64x64_c1x1_s4,ws_64x32x128_c1x1_swap,ws_64x64x128_c1x1,ws_128x96x64_c1x1_s3,pp_128x192x64_c1x1,pp_128x96x64_c1x1,co_128x128x64_c1x1,co_128x256x64_c1x2,co_256x128x64_c1x1,co_128x144x64_c1x1_swap}
  [ "$configs" = all ] && configs=""
  timeout 540 python3 benchmarks/bmm_vs_torch.py --jobs 16 ${configs:+--configs "$configs"} \
    --out "$dir/h200_bmm.md" > "$dir/bench_bmm.log" 2>&1
  echo "  rc=$?"; grep -E "^- (attention|sweep):" "$dir/h200_bmm.md" 2>/dev/null
  tail -3 "$dir/bench_bmm.log"
}

phase_bench_logsoftmax() {
  local dir=$1
  el "gemm_log_softmax vs torch: the reference CTC heads and a sweep (separated)"
  local configs=${LOGSM_CONFIGS:-ws_64x128x64_c1x1_s4,ws_64x32x64_c1x1,pp_128x128x64_c1x1,co_128x256x64_c1x2,sk_128x64x64_c1x1,ws_64x16x128_c1x1_swap,co_128x144x64_c1x1_swap,ws_128x96x64_c1x1_s3,pp_128x192x64_c1x1,pp_128x96x64_c1x1,co_128x128x64_c1x1,co_256x128x64_c1x1}
  [ "$configs" = all ] && configs=""
  timeout 540 python3 benchmarks/gemm_log_softmax_vs_torch.py --jobs 16 \
    ${configs:+--configs "$configs"} \
    --out "$dir/h200_gemm_log_softmax.md" > "$dir/bench_log_softmax.log" 2>&1
  echo "  rc=$?"; grep -E "^- (reference|sweep):" "$dir/h200_gemm_log_softmax.md" 2>/dev/null
  tail -3 "$dir/bench_log_softmax.log"
  tidy "$dir"
}

phase_bench_gemm() {
  local dir=$1 pdl epi name args
  local epilogues=("$EPILOGUE"); [ "$EPILOGUE" = both ] && epilogues=(plain fused)
  for pdl in $(pdl_modes both); do
    for epi in "${epilogues[@]}"; do
      args=() name=h200_gemm
      [ -n "$SUBSET" ] && { args+=(--configs "$SUBSET"); name+=_subset; }
      [ "$BIAS" = 1 ] && { args+=(--bias); name+=_bias; }
      [ "$epi" = fused ] && { args+=(--fused-epilogue); name+=_fused; }
      # The eager section times the ops as served (PDL on, the whole space).
      [ "$pdl" = off ] && { args+=(--no-pdl); name+=_nopdl; }
      { [ "$pdl" = off ] || [ -n "$SUBSET" ]; } && args+=(--no-eager)
      el "gemm_vs_torch ${args[*]}"
      timeout 330 python3 benchmarks/gemm_vs_torch.py "${args[@]}" --out "$dir/$name.md" 2>&1 \
        | grep -E "^- |module|failed" | tail -12
    done
  done
  tidy "$dir"
}

phase_ncu() {
  local dir=$1 args=(--shapes "$NCU_SHAPE" --oasr "$NCU_OASR")
  [ -n "$SUBSET" ] && args+=(--subset "$SUBSET")
  el "ncu at $NCU_SHAPE: cuBLAS and $NCU_OASR"
  timeout 300 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis python3 benchmarks/h200/cublas_kernels.py "${args[@]}" \
    > "$dir/ncu_$NCU_SHAPE.txt" 2>&1
  grep -E "Duration|Warp Cycles Per Issued|No Eligible|Issued Warp|Achieved Occupancy|Stall" \
    "$dir/ncu_$NCU_SHAPE.txt" | head -40
}

phase_bench_scaled_mm() {
  local dir=$1 b=benchmarks/scaled_mm_vs_torch.py
  el "scaled_mm sweep"
  timeout 220 python3 $b sweep --out "$dir/h200_scaled_mm_sweep.md" 2>&1 | tail -8
  el "ladder fit"
  python3 $b fit --log "$dir/h200_scaled_mm_sweep.jsonl" --out-ladders "$dir/fitted_ladders.json" \
    --out "$dir/h200_scaled_mm_fit.md" 2>&1 | tail -25
  # The build and the served run read the fitted ladder where the plugin looks for it.
  cp "$dir/fitted_ladders.json" "$SITE/oasr_scaled_mm/fitted_ladders.json"
  el "scaled_mm table from the int8 censuses (fitted ladder)"
  OASR_TUNE_SYSTEM_DB=off timeout 200 python3 -m oasr_core.cli tune build --family scaled_mm \
    "${INT8_CENSUS[@]}" --thin --max-points 14 --no-progress --fresh --out "$dir/scaled_mm.json" \
    --log "$dir/scaled_mm.jsonl" --checkpoint /tmp/oasr_ck_smm.jsonl 2>&1 | tail -8
  el "served vs torch"
  timeout 150 python3 $b served "${INT8_CENSUS[@]}" --db "$dir/scaled_mm.json" \
    --ladders "$dir/fitted_ladders.json" --out "$dir/h200_scaled_mm.md" 2>&1 | tail -14
  tidy "$dir"
}

phase_build_table() {
  local dir=$1 run seed knobs=(--thin --max-points 14 --no-progress --fresh) tier=()
  # Pruning reads its prior from the system tier (the shipped tables); exhaustive builds see
  # no tier at all.
  if [ "$PRUNE" = 1 ]; then tier=(-u OASR_TUNE_SYSTEM_DB)
  else tier=(OASR_TUNE_SYSTEM_DB=off) knobs+=(--no-prune --budget-s "$BUDGET"); fi
  for run in a b; do
    seed=$([ $run = a ] && echo 0 || echo 1)
    el "gemm build $run (seed $seed; $([ "$PRUNE" = 1 ] && echo pruned || echo exhaustive))"
    env "${tier[@]}" python3 -m oasr_core.cli tune build --family gemm "${GEMM_CENSUS[@]}" "${knobs[@]}" \
      --seed "$seed" --out "$dir/gemm_$run.json" --log "$dir/gemm_$run.jsonl" \
      --checkpoint "/tmp/oasr_ck_$run.jsonl" 2>&1 | tail -3
  done
  OASR_TUNE_SYSTEM_DB=off python3 -m oasr_core.cli tune evaluate --log "$dir/gemm_a.jsonl" \
    --db a="$dir/gemm_a.json" --db b="$dir/gemm_b.json" > "$dir/evaluate.txt" 2>&1
  head -12 "$dir/evaluate.txt"
  gzip -9f "$dir/gemm_b.jsonl"
  tidy "$dir"
}

phase_build_speed() {
  local dir=$1 scratch
  scratch=$(mktemp -d /tmp/oasr-build-speed.XXXXXX)
  el "build-speed: default builds from empty JIT caches in $scratch, the exhaustive one on $OASR_JIT_DIR"
  # shellcheck disable=SC2086  # a list of census names
  timeout 570 python3 benchmarks/build_speed.py run --out-dir "$dir" --fresh-jit "$scratch" \
    --census ${BUILD_SPEED_CENSUS:-conformer speed14 speed14_reference} \
    2>&1 | grep -E "^\[build_speed\]|^\| |FAIL|Error" | head -40
  gzip -9f "$dir"/*.jsonl
  rm -rf "$scratch"
  tidy "$dir"
}

phase_served() {
  local dir=$1
  el "served out of the box vs torch at widths no table covers (separated)"
  timeout 400 python3 benchmarks/served_vs_torch.py --out "$dir/h200_served_vs_torch.md" \
    > "$dir/served.log" 2>&1
  echo "  rc=$?"; grep -E "^- |Error" "$dir/served.log" | head -12
}

phase_profile() {
  local dir=$1
  el "ArchProfile.measure"
  python3 - "$dir/h200_profile.json" <<'PY'
import json, sys
from oasr_core.arch import ArchProfile
profile = ArchProfile.measure(use_cache=False).to_json()
open(sys.argv[1], "w").write(json.dumps(profile, indent=1))
print(json.dumps(profile)[:400])
PY
}

phase_engine() {
  local dir=$1 pdl name
  for pdl in $(pdl_modes on); do
    name=h200_engine_integration$([ "$pdl" = off ] && echo _nopdl).txt
    el "engine example, PDL $pdl (user tier in a temporary directory)"
    env -u OASR_TUNE_USER_DB OASR_GEMM_PDL="$([ "$pdl" = on ] && echo 1 || echo 0)" \
      OASR_GEMM_COMPILE_SET=all timeout 260 python3 examples/engine_integration.py --budget 60 \
      --no-system-tier > "$dir/$name" 2>&1
    grep -E "prewarm:|eager|CUDA graph|max \|" "$dir/$name"
  done
}

# One benchmarks/e2e.py run: NAME then its arguments; writes $dir/NAME.md and NAME.json.
e2e_run() {
  local dir=$1 name=$2; shift 2
  local iters=${E2E_ITERS:-$((E2E_REPLAYS / 10 < 10 ? 10 : E2E_REPLAYS / 10))}
  el "e2e $name: $*"
  timeout 200 python3 benchmarks/e2e.py "$@" --replays "$E2E_REPLAYS" --iters "$iters" \
    --out "$dir/$name.md" > "$dir/$name.log" 2>&1
  echo "  rc=$?"; grep -E "^\| |^- (agreement|tuning)|^calls|^  [a-z_]+/|e2e:" "$dir/$name.log"
}

e2e_models() {
  local dir=$1 tag=$2
  e2e_run "$dir" "h200_e2e_conformer$tag" --workload conformer --batch 8 --frames 1024
  e2e_run "$dir" "h200_e2e_whisper_encoder$tag" --workload whisper_encoder --batch 8
}

phase_e2e() {
  local dir=$1
  # The production modules the shipped tables reference: cache hits when the carried cache
  # holds them, else compiled here first (minutes, on 16 cores).
  el "production modules of gemm and scaled_mm"
  timeout 540 python3 -m oasr_core.cli tune prebuild --family gemm --family scaled_mm \
    --arch 9.0a --jobs 16 --json > "$dir/prebuild.json" 2>&1
  echo "  prebuild rc=$?"
  e2e_models "$dir" ""
  e2e_run "$dir" h200_e2e_conformer_int8 --workload conformer --batch 8 --frames 1024 \
    --quantization int8_w8a8
  rm -f "$dir"/*.log
}

phase_e2e_conv2d() {
  local dir=$1
  el "production modules of gemm, conv1d and conv2d"
  timeout 300 python3 -m oasr_core.cli tune prebuild --family gemm --family conv1d \
    --family conv2d --arch 9.0a --jobs 16 --json > "$dir/prebuild.json" 2>&1
  echo "  prebuild rc=$?"
  e2e_run "$dir" h200_e2e_conformer_conv2d --workload conformer --batch 8 --frames 1024 \
    --param conv2d_frontend=true
  e2e_run "$dir" h200_e2e_conformer_ctc --workload conformer --batch 8 --frames 1024 \
    --param ctc_vocab=1024
  rm -f "$dir"/*.log
}

heads_models() {  # DIR TAG: the two models with their heads, one e2e run each
  e2e_run "$1" "h200_e2e_conformer_heads$2" --workload conformer --batch 8 --frames 1024 \
    --param conv2d_frontend=true --param ctc_vocab=1024
  e2e_run "$1" "h200_e2e_whisper_encoder_ctc$2" --workload whisper_encoder --batch 8 \
    --param ctc_vocab=1024
}

phase_e2e_heads_tuned() {
  local dir=$1 user=$1/tier family
  local censuses=(--census benchmarks/census/conformer_conv2d_ctc_offline.json
                  --census benchmarks/census/whisper_encoder_ctc_offline.json)
  mkdir -p "$user/sm90"
  el "production modules of gemm, conv1d and conv2d"
  timeout 300 python3 -m oasr_core.cli tune prebuild --family gemm --family conv1d \
    --family conv2d --arch 9.0a --jobs 16 --json > "$dir/prebuild.json" 2>&1
  echo "  prebuild rc=$?"
  heads_models "$dir" ""
  el "conv2d built from the heads' censuses into $user (budget ${E2E_BUDGET} s)"
  timeout $((E2E_BUDGET + 200)) python3 -m oasr_core.cli tune build --family conv2d \
    "${censuses[@]}" --thin --max-points 6 --budget-s "$E2E_BUDGET" --fresh --no-progress \
    --out "$user/sm90/conv2d.json" --log "$dir/conv2d_heads.jsonl" \
    --checkpoint /tmp/oasr_ck_heads_conv2d.jsonl 2>&1 | tail -4
  # The shipped gemm table covers the encoders' other linears: the heads' op alone, at the
  # censuses' widths and rows (Conformer 8 x 255 frames, Whisper 8 x 1500) and around them.
  el "gemm_log_softmax built at the heads' widths into $user (budget ${E2E_BUDGET} s)"
  timeout $((E2E_BUDGET + 200)) python3 -m oasr_core.cli tune build --family gemm \
    --widths "1024,256;1024,512" --op gemm_log_softmax --m-ladder 255,1020,2040,4080,8160,12000 \
    --budget-s "$E2E_BUDGET" --fresh --no-progress --out "$user/sm90/gemm.json" \
    --log "$dir/gemm_log_softmax_heads.jsonl" --checkpoint /tmp/oasr_ck_heads_gemm.jsonl \
    2>&1 | tail -4
  OASR_TUNE_USER_DB=$user heads_models "$dir" _tuned
  rm -f "$dir"/*.log
  tidy "$dir"
}

phase_e2e_compile() {
  local dir=$1
  el "production modules of gemm and conv1d"
  timeout 240 python3 -m oasr_core.cli tune prebuild --family gemm --family conv1d \
    --arch 9.0a --jobs 16 --json > "$dir/prebuild.json" 2>&1
  echo "  prebuild rc=$?"
  compile_arms "$dir" ""
}

compile_arms() {  # DIR TAG: e2e.py --compile of each E2E_COMPILE_MODELS model
  local dir=$1 tag=$2 name
  local -A args=([conformer]="--workload conformer --batch 8 --frames 1024"
                 [whisper_encoder]="--workload whisper_encoder --batch 8"
                 [library_conformer]="--model examples.library_conformer:build --batch 8 --frames 1024")
  for name in ${E2E_COMPILE_MODELS:-conformer whisper_encoder library_conformer}; do
    set -- $name ${args[$name]:?unknown model $name}
    el "e2e --compile $1$tag"
    PYTHONPATH=$PYTHONPATH:$PWD timeout 280 python3 benchmarks/e2e.py "${@:2}" --compile \
      --profile --no-eager --replays "$E2E_REPLAYS" --out "$dir/h200_compile_$1$tag.md" \
      > "$dir/h200_compile_$1$tag.log" 2>&1
    echo "  rc=$?"; grep -E "^\| |^compile|^sites|^- agreement|e2e:" "$dir/h200_compile_$1$tag.log"
  done
}

phase_e2e_compile_tuned() {
  local dir=$1 user=${E2E_COMPILE_TIER:-} name censuses=()
  if [ -z "$user" ]; then
    user=$dir/tier; mkdir -p "$user/sm90"
    for name in ${E2E_COMPILE_MODELS:-conformer whisper_encoder}; do
      censuses+=(--census "benchmarks/census/${name}_compile.json")
    done
    el "gemm and conv1d built from the compile censuses into $user (budget ${E2E_BUDGET} s each)"
    for family in gemm conv1d; do
      timeout $((E2E_BUDGET + 150)) python3 -m oasr_core.cli tune build --family $family \
        "${censuses[@]}" --thin --max-points 6 --budget-s "$E2E_BUDGET" --fresh \
        --out "$user/sm90/$family.json" --log "$dir/${family}_compile.jsonl" \
        --checkpoint "/tmp/oasr_ck_compile_$family.jsonl" 2>&1 | tail -3
    done
  fi
  OASR_TUNE_USER_DB=$user compile_arms "$dir" _tuned
  tidy "$dir"
}

phase_e2e_compile_fp8() {
  local dir=$1 name
  el "production modules of gemm and conv1d; scaled_mm_fp8's lanes whole"
  timeout 240 python3 -m oasr_core.cli tune prebuild --family gemm --family conv1d \
    --arch 9.0a --jobs 16 --json > "$dir/prebuild.json" 2>&1
  echo "  prebuild rc=$?"
  prebuild_fp8 "$dir"
  # torch.compile(backend=oc.backend(quantization="fp8_w8a8")) against Inductor alone on the
  # bf16 model: linears quantized where the shipped table or the untuned route says fp8 pays
  # (the Whisper encoder's widths: no entry, the route; the wide Conformer: d_model 1024,
  # FFN 4096), the rows after each LayerNorm quantized once in the fused norm.
  local -A args=([whisper_encoder]="--workload whisper_encoder --batch 8"
                 [conformer_wide]="--workload conformer --param d_model=1024 --param ffn_dim=4096 --param heads=16 --param layers=8 --batch 16 --frames 1024")
  for name in ${E2E_COMPILE_FP8_MODELS:-whisper_encoder conformer_wide}; do
    set -- $name ${args[$name]:?unknown model $name}
    el "e2e --compile --quantization fp8_w8a8 $1"
    PYTHONPATH=$PYTHONPATH:$PWD OASR_SCALED_MM_FP8_COMPILE_SET=all timeout 280 \
      python3 benchmarks/e2e.py "${@:2}" --dtype bf16 --quantization fp8_w8a8 --compile \
      --profile --no-eager --replays "$E2E_REPLAYS" --out "$dir/h200_compile_$1_fp8.md" \
      > "$dir/h200_compile_$1_fp8.log" 2>&1
    echo "  rc=$?"; grep -E "^\| |^compile|^sites|^- agreement|e2e:" "$dir/h200_compile_$1_fp8.log"
  done
  tidy "$dir"
}

phase_e2e_tuned() {
  local dir=$1 user model frames
  user=$(mktemp -d /tmp/oasr-e2e-user.XXXXXX)
  for model in conformer whisper_encoder; do
    frames=(--max-frames 1024); [ $model = whisper_encoder ] && frames=()
    el "census of $model (offline, batch 8)"
    python3 -m oasr_core.cli tune census --workload $model --service-mode offline \
      --max-batch-size 8 --batch-buckets 8 "${frames[@]}" --out "$dir/census_$model.json" \
      2>&1 | tail -1
  done
  el "gemm build from both censuses into $user (budget ${E2E_BUDGET} s)"
  timeout $((E2E_BUDGET + 200)) python3 -m oasr_core.cli tune build --family gemm \
    --census "$dir/census_conformer.json" --census "$dir/census_whisper_encoder.json" \
    --thin --max-points 14 --budget-s "$E2E_BUDGET" --fresh --out "$user/sm90/gemm.json" \
    --log "$dir/gemm_e2e.jsonl" --checkpoint /tmp/oasr_ck_e2e.jsonl 2>&1 | tail -3
  cp "$user/sm90/gemm.json" "$dir/gemm_e2e.json"
  # The user tier's configs are in the whole-space module of the carried cache (a user's
  # production module would link them after a rebuild).
  OASR_TUNE_USER_DB=$user OASR_GEMM_COMPILE_SET=all e2e_models "$dir" _tuned
  rm -rf "$user" "$dir"/*.log
  tidy "$dir"
}

prebuild_conv1d() {
  el "conv1d: whole-space modules of both lanes on sm90"
  timeout 400 python3 benchmarks/conv1d_vs_torch.py --prebuild-only --lanes sm90_conv1d,sm80_conv1d \
    --jobs 16 > "$1/prebuild_conv1d.log" 2>&1
  echo "  rc=$?"; tail -4 "$1/prebuild_conv1d.log"
}

phase_conv1d() {
  local dir=$1
  prebuild_conv1d "$dir"
  el "GPU tests of the conv1d plugin (every depthwise config, ops, graphs, torch.compile)"
  OASR_TUNE_SYSTEM_DB=off timeout 540 python3 -m pytest -m gpu plugins/oasr_conv1d/tests -q -rs \
    -p no:cacheprovider 2>&1 | tee "$dir/gpu_tests_conv1d.log" | tail -15
  el "conv1d table from the conv censuses (Conformer depthwise, Whisper front end)"
  OASR_TUNE_SYSTEM_DB=off timeout 500 python3 -m oasr_core.cli tune build --family conv1d \
    "${CONV_CENSUS[@]}" --thin --max-points 14 --no-progress --fresh --out "$dir/conv1d.json" \
    --log "$dir/conv1d.jsonl" --checkpoint /tmp/oasr_ck_conv1d.jsonl 2>&1 | tail -8
  el "offline replay of the log"
  python3 -m oasr_core.cli tune build --from-log "$dir/conv1d.jsonl" --family conv1d --thin \
    --max-points 14 --fresh --out /tmp/oasr_conv1d_replay.json 2>&1 | tail -2
  if cmp /tmp/oasr_conv1d_replay.json "$dir/conv1d.json"; then
    echo "  replay: byte-identical"
  else
    echo "  replay: DIFFERS from the build"
  fi
  tidy "$dir"
}

phase_bench_conv1d() {
  local dir=$1 user table=$OUT/conv1d/conv1d.json
  prebuild_conv1d "$dir"
  if [ ! -f "$table" ]; then
    el "conv1d_vs_torch out of the box (served = torch where no table covers a shape)"
    OASR_TUNE_SYSTEM_DB=off timeout 280 python3 benchmarks/conv1d_vs_torch.py \
      --sets conformer,whisper,wav2vec2,sweep --out "$dir/conv1d_vs_torch.md" \
      > "$dir/conv1d_vs_torch.log" 2>&1
    echo "  rc=$?"; sed -n '/^## Summary/,/^## Points/p' "$dir/conv1d_vs_torch.md" 2>/dev/null
  else
    user=$(mktemp -d /tmp/oasr-conv1d-user.XXXXXX)
    mkdir -p "$user/sm90" && cp "$table" "$user/sm90/conv1d.json"
    el "conv1d_vs_torch served from the conv1d phase's table"
    OASR_TUNE_USER_DB=$user OASR_TUNE_SYSTEM_DB=off timeout 280 python3 benchmarks/conv1d_vs_torch.py \
      --sets conformer,whisper,wav2vec2,sweep --reps 5 --out "$dir/conv1d_vs_torch_tuned.md" \
      > "$dir/conv1d_vs_torch_tuned.log" 2>&1
    echo "  rc=$?"; sed -n '/^## Summary/,/^## Points/p' "$dir/conv1d_vs_torch_tuned.md" 2>/dev/null
    rm -rf "$user"
  fi
  tail -3 "$dir"/conv1d_vs_torch*.log; rm -f "$dir"/conv1d_vs_torch*.log
  tidy "$dir"
}

phase_heldout_tuned() {
  local dir=$1 user=$1/tier family name censuses=()
  mkdir -p "$user/sm90"
  for name in whisper zipformer wav2vec2; do
    censuses+=(--census "benchmarks/census/heldout_${name}_offline.json")
  done
  for family in gemm conv1d; do
    el "$family built from the held-out censuses into $user (budget ${E2E_BUDGET} s)"
    timeout $((E2E_BUDGET + 200)) python3 -m oasr_core.cli tune build --family $family \
      "${censuses[@]}" --thin --max-points 6 --budget-s "$E2E_BUDGET" --fresh --no-progress \
      --out "$user/sm90/$family.json" --log "$dir/${family}_heldout.jsonl" \
      --checkpoint "/tmp/oasr_ck_heldout_$family.jsonl" 2>&1 | tail -4
  done
  local -A args=([whisper]="--model heldout_encoders:whisper_like --input B,80,T --batch 8 --frames 1000"
                 [zipformer]="--model heldout_encoders:zipformer_like --batch 32 --frames 256"
                 [wav2vec2]="--model heldout_encoders:wav2vec2_like --input B,T,512 --batch 8 --frames 500")
  for name in whisper zipformer wav2vec2; do
    # Host-bound eager forwards move by several percent from one to the next: 200 of each.
    # shellcheck disable=SC2086
    OASR_TUNE_USER_DB=$user E2E_ITERS=${E2E_ITERS:-200} e2e_run "$dir" \
      "h200_e2e_heldout_${name}_tuned" ${args[$name]}
  done
  rm -f "$dir"/*.log
  tidy "$dir"
}

phase_gpu_tests_families() {
  local dir=$1 family rc
  local -A paths=([gemm]="plugins/oasr_gemm/tests --ignore=plugins/oasr_gemm/tests/test_gemm_residual_gpu.py --ignore=plugins/oasr_gemm/tests/test_gemm_log_softmax_gpu.py --ignore=plugins/oasr_gemm/tests/test_gemm_bmm_gpu.py"
                  [conv1d]="plugins/oasr_conv1d/tests" [conv2d]="plugins/oasr_conv2d/tests"
                  [int8]="plugins/oasr_scaled_mm/tests -m 'gpu and not fp8'"
                  [fp8]="plugins/oasr_scaled_mm/tests plugins/oasr_scaled_mm_fp8/tests -m 'gpu and fp8'")
  for family in ${GPU_TESTS_FAMILIES:-gemm conv1d conv2d int8 fp8}; do
    el "GPU tests: $family"
    # shellcheck disable=SC2086
    eval OASR_TUNE_SYSTEM_DB=off timeout "${GPU_TESTS_LIMIT:-300}" python3 -m pytest -m gpu \
      ${paths[$family]:?unknown family $family} -v -rfE --tb=short -p no:cacheprovider \
      --junitxml="$dir/gpu_tests_$family.xml" > "$dir/gpu_tests_$family.log" 2>&1
    rc=$?
    echo "  rc=$rc: $(grep -c ' PASSED' "$dir/gpu_tests_$family.log") passed," \
      "$(grep -c ' FAILED' "$dir/gpu_tests_$family.log") failed," \
      "$(grep -c ' SKIPPED' "$dir/gpu_tests_$family.log") skipped"
    grep -E " FAILED|^(FAILED|ERROR) " "$dir/gpu_tests_$family.log" | head -10
  done
}

phase_distributed() {
  local dir=$1 work=/tmp/oasr-distributed arm t0 t1 t2 rc
  # scaled_mm's sm80 lane (it runs on sm90): every config at every point (no cost model) from
  # its whole-space module, which the carried cache holds, so nothing compiles here.
  local family=${DISTRIBUTED_FAMILY:-scaled_mm} lane=${DISTRIBUTED_LANE:-sm80_int8_mma}
  local census=${DISTRIBUTED_CENSUS:-benchmarks/census/conformer_offline_int8.json}
  local build=(tune build --family "$family" --lane "$lane" --census "$census" --thin
               --max-points 2 --fresh --seed 0 --no-progress --json)
  rm -rf "$work" && mkdir -p "$work/plain" "$work/dask"
  export OASR_SCALED_MM_COMPILE_SET=all OASR_CONV1D_COMPILE_SET=all  # production = carried
  # Both arms find the lane's whole-space module compiled, so their wall times compare.
  el "distributed: $family's whole space (cache hits when carried)"
  timeout 300 python3 -m oasr_core.cli tune prebuild --family "$family" --all --arch 9.0a \
    --jobs 16 --no-progress > /dev/null 2>&1; echo "  prebuild rc=$?"
  el "distributed: $family ($lane) from $census on this GPU, no scheduler"
  t0=$(date +%s.%N)
  timeout 200 python3 -m oasr_core.cli "${build[@]}" --out "$work/plain/$family.json" \
    > "$work/plain.json" 2> "$work/plain.err"; rc=$?
  t1=$(date +%s.%N)
  echo "  rc=$rc"; tail -3 "$work/plain.err"
  el "distributed: the same census through --scheduler local --gpus 1"
  timeout 240 python3 -m oasr_core.cli "${build[@]}" --out "$work/dask/$family.json" \
    --scheduler local --gpus 1 > "$work/dask.json" 2> "$work/dask.err"; rc=$?
  t2=$(date +%s.%N)
  echo "  rc=$rc"; tail -6 "$work/dask.err"
  for arm in plain dask; do
    mkdir -p "$work/$arm/replay"
    python3 -m oasr_core.cli tune build --from-log "$work/$arm/measurements/$family.jsonl" \
      --family "$family" --effort default --thin --max-points 2 --fresh \
      --out "$work/$arm/replay/$family.json" --json > "$work/${arm}_replay.json" 2>&1
    if cmp -s "$work/$arm/$family.json" "$work/$arm/replay/$family.json"; then
      echo "$arm: the table is its log's replay, byte for byte" | tee -a "$work/replays.txt"
    else
      echo "$arm: the table DIFFERS from its log's replay" | tee -a "$work/replays.txt"
    fi
  done
  python3 -m oasr_core.cli tune diff "$work/plain/$family.json" "$work/dask/$family.json" \
    > "$work/diff.txt" 2>&1
  python3 benchmarks/distributed_build.py summary --work "$work" --seconds "$t0" "$t1" "$t2" \
    --what "$family ($lane) from $census, --thin --max-points 2" --out "$dir/distributed.md"
  tar -C "$work" -czf "$dir/distributed_logs.tgz" plain dask plain.json dask.json plain.err \
    dask.err diff.txt replays.txt
  if [ -n "${DISTRIBUTED_GPUS:-}" ]; then
    el "distributed: benchmarks/distributed_build.py on $DISTRIBUTED_GPUS GPU worker count(s)"
    timeout 400 python3 benchmarks/distributed_build.py run --gpus "$DISTRIBUTED_GPUS" --kill \
      --family "$family" --lane "$lane" --census "$census" --out "$dir/distributed_build.md" \
      2>&1 | tail -25
  fi
  tidy "$dir"
}

phase_conv2d() {
  local dir=$1 user census=benchmarks/census/conformer_conv2d_offline.json
  # The ops serve from the whole-space module too: one library, the carried one.
  local -x OASR_CONV2D_COMPILE_SET=all
  el "conv2d: the lane's whole-space module on sm90 (cache hits when carried)"
  timeout 300 python3 benchmarks/conv2d_vs_torch.py --prebuild-only --jobs 16 \
    > "$dir/prebuild_conv2d.log" 2>&1
  echo "  rc=$?"; tail -3 "$dir/prebuild_conv2d.log"; rm -f "$dir/prebuild_conv2d.log"
  el "GPU tests of the conv2d plugin (every config, ops, tiers, graphs, the Conformer front end)"
  OASR_TUNE_SYSTEM_DB=off timeout 240 python3 -m pytest -m gpu plugins/oasr_conv2d/tests -q -rs \
    -p no:cacheprovider 2>&1 | tee "$dir/gpu_tests_conv2d.log" | tail -8
  el "conv2d_vs_torch out of the box (served = torch: no table ships)"
  OASR_TUNE_SYSTEM_DB=off timeout 300 python3 benchmarks/conv2d_vs_torch.py \
    --out "$dir/conv2d_vs_torch.md" > "$dir/conv2d_vs_torch.log" 2>&1
  echo "  rc=$?"; sed -n '/^## Summary/,/^## Points/p' "$dir/conv2d_vs_torch.md" 2>/dev/null
  tail -2 "$dir/conv2d_vs_torch.log"
  el "conv2d table from the Conformer conv2d-front-end census (quick effort)"
  OASR_TUNE_SYSTEM_DB=off timeout 240 python3 -m oasr_core.cli tune build --family conv2d \
    --census "$census" --effort quick --thin --max-points "${CONV2D_POINTS:-3}" --no-progress \
    --fresh --out "$dir/conv2d.json" --log "$dir/conv2d.jsonl" \
    --checkpoint /tmp/oasr_ck_conv2d.jsonl 2>&1 | tail -8
  if [ -f "$dir/conv2d.json" ]; then
    user=$(mktemp -d /tmp/oasr-conv2d-user.XXXXXX)
    mkdir -p "$user/sm90" && cp "$dir/conv2d.json" "$user/sm90/conv2d.json"
    el "conv2d_vs_torch's Conformer set served from that table"
    OASR_TUNE_USER_DB=$user OASR_TUNE_SYSTEM_DB=off timeout 240 python3 \
      benchmarks/conv2d_vs_torch.py --sets conformer --reps 3 \
      --out "$dir/conv2d_vs_torch_tuned.md" > "$dir/conv2d_vs_torch_tuned.log" 2>&1
    echo "  rc=$?"; sed -n '/^## Summary/,/^## Points/p' "$dir/conv2d_vs_torch_tuned.md" 2>/dev/null
    rm -rf "$user" "$dir/conv2d_vs_torch_tuned.jsonl"
  fi
  rm -f "$dir"/conv2d_vs_torch*.log
  rm -rf "$dir/.locks"
  tidy "$dir"
}

phase_gpu_tests_recurrent() {
  local dir=$1
  local -x OASR_RECURRENT_COMPILE_SET=all
  el "recurrent: the lane's whole-space module on sm90"
  timeout 300 python3 benchmarks/recurrent_vs_torch.py --prebuild-only --jobs 16 \
    > "$dir/prebuild_recurrent.log" 2>&1
  echo "  rc=$?"; tail -3 "$dir/prebuild_recurrent.log"; rm -f "$dir/prebuild_recurrent.log"
  el "GPU tests of the recurrent plugin (every config, graphs, the op through the tiers, a routed LSTM and RNN)"
  OASR_TUNE_SYSTEM_DB=off timeout "${GPU_TESTS_LIMIT:-300}" python3 -m pytest -m gpu \
    plugins/oasr_recurrent/tests -v -rfE --tb=short -p no:cacheprovider \
    > "$dir/gpu_tests_recurrent.log" 2>&1
  echo "  rc=$?: $(grep -c ' PASSED' "$dir/gpu_tests_recurrent.log") passed," \
    "$(grep -c ' FAILED' "$dir/gpu_tests_recurrent.log") failed," \
    "$(grep -c ' SKIPPED' "$dir/gpu_tests_recurrent.log") skipped"
  grep -E " FAILED|^(FAILED|ERROR) " "$dir/gpu_tests_recurrent.log" | head -10
  tidy "$dir"
}

phase_bench_recurrent() {
  local dir=$1
  local -x OASR_RECURRENT_COMPILE_SET=all
  el "recurrent_vs_torch (served = torch untuned: no table ships)"
  # RECURRENT_ARGS: more options for the script (e.g. --ops, --batches); one device call
  # holds 600 s, so the run is limited to 540 s and every point is in the JSONL as measured.
  OASR_TUNE_SYSTEM_DB=off timeout 540 python3 benchmarks/recurrent_vs_torch.py --jobs 16 \
    ${RECURRENT_ARGS:-} --out "$dir/recurrent_vs_torch.md" > "$dir/recurrent_vs_torch.log" 2>&1
  echo "  rc=$?"; sed -n '/^## Eager host cost/,/^## Build/p' "$dir/recurrent_vs_torch.md" \
    2>/dev/null
  tail -2 "$dir/recurrent_vs_torch.log"; rm -f "$dir/recurrent_vs_torch.log"
  tidy "$dir"
}

run_phase() {
  local dir=$OUT/$1
  mkdir -p "$dir" || die "cannot write $dir"
  el "== $1"
  "phase_${1//-/_}" "$dir"
}

run_phase setup
for phase in "${PHASES[@]}"; do
  [ "$phase" = setup ] || run_phase "$phase"
done
el "done"
