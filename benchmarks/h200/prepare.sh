#!/usr/bin/env bash
# Makes, on a CPU machine (nvcc and the nvidia-cutlass headers, no GPU), what
# benchmarks/h200/run.sh needs on the H200 machine. Run from the repository root:
#
#   benchmarks/h200/prepare.sh [OPTIONS] STEP [STEP...]
#
#   wheels   .whl/: a wheel of the core and of each plugins/*/ project, plus the packages the
#            GPU machine lacks (one requirement a line in .gpu-requirements; CPython 3.12,
#            manylinux x86_64, no dependencies)
#   jit      compile the sm90 JIT modules into $OASR_JIT_DIR (default .jit-carry): gemm's sm90
#            lane whole (`gemm_vs_torch.py --prebuild-only`, ~55 min on 2 cores) or, with
#            --configs, the subset module `run.sh --subset` loads; every other family's lanes
#            whole (`oasr tune prebuild --all`). The cache key names no device, so the GPU
#            machine finds these libraries
#   gpu-tests  compile the modules the GPU tests load (gemm's sample, conv1d's depthwise and dense
#            test modules, the W8A8 whole spaces, conv2d, recurrent, gemm_log_softmax, group_gemm)
#            into $OASR_JIT_DIR: pytest under benchmarks/h200/compile_gpu_tests.py, which
#            answers as an sm90 device and compiles each module a test loads instead of running
#            it, so run.sh's GPU test phases only run tests
#   pack     .jit-h200.tgz: the newest library of each module in $OASR_JIT_DIR (lib/ only:
#            the objects stay here), gzipped; run.sh unpacks it into .jit-h200
# Options:
#   --family NAME   jit: compile this family (repeat; default gemm, scaled_mm, scaled_mm_fp8)
#   --configs GLOBS jit: comma list of gemm sm90 config-id globs (gemm_vs_torch.py --configs)
#   --jobs N        jit: nvcc processes (default: the CPU count)
# Carry .whl and .jit-h200.tgz to the GPU machine (64 MiB in all with the working tree).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "prepare.sh: $*" >&2; exit 2; }

FAMILIES=() CONFIGS="" JOBS=$(nproc) STEPS=()
while (($#)); do
  case "$1" in
    --family) FAMILIES+=("${2:?--family needs a name}"); shift ;;
    --configs) CONFIGS=${2:?--configs needs config-id globs}; shift ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    wheels|jit|gpu-tests|pack) STEPS+=("$1") ;;
    *) die "unknown step $1 (see --help)" ;;
  esac
  shift
done
((${#STEPS[@]})) || { usage >&2; exit 2; }
((${#FAMILIES[@]})) || FAMILIES=(gemm scaled_mm scaled_mm_fp8)
export OASR_JIT_DIR=${OASR_JIT_DIR:-$PWD/.jit-carry}

step_wheels() {
  local projects=(.) p extras=() plat=()
  for p in plugins/*/; do [ -f "$p/pyproject.toml" ] && projects+=("$p"); done
  mkdir -p .whl && rm -f .whl/*.whl
  echo "prepare.sh: building ${#projects[@]} wheel(s)"
  python3 -m pip wheel -q --no-deps -w .whl "${projects[@]}"
  [ -f .gpu-requirements ] && mapfile -t extras < <(grep -v '^\s*#' .gpu-requirements | sed '/^\s*$/d')
  if ((${#extras[@]})); then
    for p in 28 27 17; do plat+=(--platform "manylinux_2_${p}_x86_64"); done
    plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
    echo "prepare.sh: fetching ${extras[*]}"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${plat[@]}" -d .whl "${extras[@]}"
  fi
  find .whl -name '*.whl' -printf '  %10s  %f\n' | sort -k2
}

step_jit() {
  local f
  for f in "${FAMILIES[@]}"; do
    if [ "$f" = gemm ]; then
      # The sm90 lane's whole space, both dtypes (or the --configs subset): the modules the
      # benchmark, the table build and the GPU tests (OASR_GEMM_COMPILE_SET=all) all load.
      echo "prepare.sh: gemm sm90 ${CONFIGS:-whole space} into $OASR_JIT_DIR"
      python3 benchmarks/gemm_vs_torch.py --prebuild-only --arch sm90 --jobs "$JOBS" \
        ${CONFIGS:+--configs "$CONFIGS"}
    else
      echo "prepare.sh: $f, every lane's whole space on sm90, into $OASR_JIT_DIR"
      OASR_CUDA_ARCH_LIST=9.0a python3 -m oasr_core.cli tune prebuild --family "$f" \
        --arch 9.0a --all --jobs "$JOBS"
    fi
  done
}

step_gpu_tests() {
  local paths=(plugins/oasr_gemm/tests/test_gemm_gpu.py plugins/oasr_conv1d/tests
               plugins/oasr_conv2d/tests plugins/oasr_scaled_mm/tests plugins/oasr_recurrent/tests
               plugins/oasr_gemm/tests/test_gemm_log_softmax_gpu.py
               plugins/oasr_gemm/tests/test_gemm_group_gpu.py)
  echo "prepare.sh: the GPU tests' modules into $OASR_JIT_DIR (sm90, $JOBS nvcc processes)"
  OASR_CUDA_ARCH_LIST=9.0a OASR_COMPILE_JOBS=$JOBS PYTHONPATH=benchmarks/h200 \
    python3 -m pytest -m gpu -p compile_gpu_tests -q -p no:cacheprovider "${paths[@]}" \
    | sed -n '/^compile_gpu_tests:/,$p' || true
}

step_pack() {
  local lib=$OASR_JIT_DIR/lib module newest picked=()
  [ -d "$lib" ] || die "no libraries in $lib (run the jit step first)"
  for module in "$lib"/*/; do
    # The key directory whose manifest (written last, when the library is whole) is newest.
    newest=$(find "$module" -mindepth 2 -maxdepth 2 -name manifest.json -printf '%T@ %h\n' \
             | sort -n | tail -1 | cut -d' ' -f2-)
    [ -n "$newest" ] && picked+=("lib/${newest#"$lib"/}")
  done
  ((${#picked[@]})) || die "no complete module in $lib"
  printf '  %s\n' "${picked[@]}"
  tar -C "$OASR_JIT_DIR" -cf - "${picked[@]}" | gzip -9 > .jit-h200.tgz
  echo "prepare.sh: .jit-h200.tgz holds ${#picked[@]} module(s), $(du -h .jit-h200.tgz | cut -f1)"
}

for step in "${STEPS[@]}"; do "step_$step"; done
du -shc .whl .jit-h200.tgz 2>/dev/null | tail -1 | sed "s/^/prepare.sh: to carry (with the working tree, at most 64 MiB): /" || true
