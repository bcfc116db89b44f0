"""Write the two translation units bundle_compile_cost.sh compiles (one sm90 gemm unit, and
that unit with a second one as a bundle, fp16) and their nvcc command lines into a directory.

It times no kernel (no separator applies): bundle_compile_cost.sh times the nvcc commands with
``/usr/bin/time``."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
from oasr_gemm import jit
from oasr_gemm.config_space import LANE_SM90

from oasr_core.jit import bundles
from oasr_core.jit.spec import plan
from oasr_core.runtime import get_runtime


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lane = get_runtime().registry.lane(LANE_SM90)
    a, b = lane.config("pp_128x128x64_c1x1"), lane.config("ws_64x96x64_c1x1")
    one = plan(jit.module_spec(LANE_SM90, "sm90", [a], dtypes=("fp16",)))
    pair = bundles.bundle("pair", [jit.unit(a, ("fp16",)), jit.unit(b, ("fp16",))])
    two = plan(attrs.evolve(one.spec, units=(pair,)))
    for name, planned in (("single", one), ("bundle2", two)):
        src = out / f"{name}.cu"
        src.write_text(planned.units[0].text)
        command = planned.compile_command(src, out / f"{name}.o")
        (out / f"{name}.sh").write_text(" ".join(command) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
