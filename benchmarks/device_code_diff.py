"""Whether two checkouts of oasr compile the same machine code for sample configs.

A change that moves host-side code (launchers, parameter caches, codegen) changes a family's
``impl_hash`` and so marks every table measured before it stale, although the kernels are the
same. This script compiles the device code of sample units in both checkouts (``nvcc -cubin``,
the lane's flags) and compares the cubins' ``.text`` sections, the kernels' machine code, byte
for byte. Identical text for every sample is what a family's ``EQUIVALENT_IMPLS`` entry (its
codegen module) must cite. It times nothing, so no separator protocol applies.

    git worktree add /tmp/oasr-old <revision>
    python benchmarks/device_code_diff.py --old /tmp/oasr-old --jobs 2

Needs nvcc and the nvidia-cutlass headers, no GPU; it compiles and compares, it times
nothing. Exit status 0 when every sample matches.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = {
    "gemm": [("sm80_mma", "b64x64x64_w32x32x64_s3"), ("sm90_wgmma", "ws_64x32x64_c1x1"),
             ("sm90_wgmma", "sk_128x64x64_c1x1")],
    "scaled_mm": [("sm80_int8_mma", None), ("sm90_int8_wgmma", None),
                  ("sm90_int8_wgmma", "sk_128x128x128_c1x1")],
}
_EMIT = r"""
import json, sys
family, lane, cid = sys.argv[1], sys.argv[2], sys.argv[3]
if family == "gemm":
    from oasr_gemm import codegen, config_space as cs, jit
    c = cs.config(lane, cid)
    src = codegen.unit_source(c, ("fp16",))
    flags = list(jit.EXTRA_FLAGS + jit.LANE_FLAGS[lane])
    inc = [str(codegen.csrc_dir())]
else:
    from oasr_scaled_mm import codegen, config_space as cs, jit
    c = cs.config(lane, cid) if cid != "-" else next(iter(cs.space(lane)))
    src = codegen.unit_source(c, cs.OP_MM, ("fp16",))
    flags = list(jit.EXTRA_FLAGS)
    inc = list(getattr(codegen, "include_dirs", lambda: [str(codegen.csrc_dir())])())
print(json.dumps({"id": c.id, "source": src, "flags": flags, "include": inc}))
"""


def _text_sections(cubin: bytes) -> dict[str, bytes]:
    """The ``.text.*`` sections of an ELF cubin, by name."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name, _type, _flags, _addr, offset, size in headers:
        label = cubin[names_at + name:cubin.index(b"\0", names_at + name)].decode()
        if label.startswith(".text"):
            out[label] = cubin[offset:offset + size]
    return out


def _emit(root: Path, family: str, lane: str, cid: str | None) -> dict:
    paths = [str(root), str(root / "plugins" / "oasr_gemm" / "src"),
             str(root / "plugins" / "oasr_scaled_mm" / "src")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    out = subprocess.run([sys.executable, "-c", _EMIT, family, lane, cid or "-"], env=env,
                         capture_output=True, text=True, check=True, cwd=root).stdout
    import json

    return json.loads(out)


def _cubin(root: Path, unit: dict, arch: str, work: Path) -> bytes:
    from oasr_core.jit.compiler import cutlass_include_dirs

    src = work / f"{unit['id']}.cu"
    src.write_text('#define OASR_EXPORT extern "C" __attribute__((visibility("default")))\n'
                   + unit["source"])
    kit = root / "oasr_core" / "jit" / "include"
    includes = [*unit["include"], *([str(kit)] if kit.is_dir() else []), *cutlass_include_dirs()]
    cmd = ["nvcc", "-cubin", "-o", str(src.with_suffix(".cubin")), str(src),
           f"-gencode=arch=compute_{arch},code=sm_{arch}", "-O3", "-std=c++17",
           "--expt-relaxed-constexpr", "-DNDEBUG", *(f"-I{i}" for i in includes),
           *unit["flags"]]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return src.with_suffix(".cubin").read_bytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="checkout of the earlier revision")
    ap.add_argument("--new", type=Path, default=REPO, help="checkout to compare (default: this)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    jobs = []
    for family, samples in SAMPLES.items():
        for lane, cid in samples:
            arch = "80" if lane.startswith("sm80") else "90a"
            jobs.append((family, lane, cid, arch))
    worst = 0
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        def one(job, side, root):
            family, lane, cid, arch = job
            work = Path(tmp) / side / lane
            work.mkdir(parents=True, exist_ok=True)
            unit = _emit(root, family, lane, cid)
            return unit["id"], _text_sections(_cubin(root, unit, arch, work))

        futures = {(j, s): pool.submit(one, j, s, r) for j in jobs
                   for s, r in (("old", args.old), ("new", args.new))}
        for job in jobs:
            cid, old = futures[(job, "old")].result()
            _, new = futures[(job, "new")].result()
            same = old == new
            worst = worst or (0 if same else 1)
            size = sum(len(v) for v in new.values())
            print(f"{job[0]:10s} {job[1]:16s} {cid:28s} {len(new)} text section(s), "
                  f"{size} B: {'identical' if same else 'DIFFERENT'}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
