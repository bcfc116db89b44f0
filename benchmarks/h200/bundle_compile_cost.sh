#!/usr/bin/env bash
# One sm90 gemm unit (fp16) alone, then two units as one bundle (oasr_core.jit.bundles) alone:
# nvcc wall, CPU and peak RSS on this host. Run from the repository root with the environment
# run.sh sets (PYTHONPATH, the CUTLASS headers); prints three lines.
lscpu | grep -E "^CPU\(s\)|Thread|Core|Socket|Model name|MHz" ; free -g | head -2
D=/tmp/cscale; rm -rf $D; mkdir -p $D
python3 benchmarks/h200/emit_bundle_units.py $D
for f in single bundle2; do /usr/bin/time -f "$f wall %e s user %U s maxrss %M KB" bash $D/$f.sh 2>&1 | tail -1; done
