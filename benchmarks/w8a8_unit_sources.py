"""Preprocessed translation units of every W8A8 lane, hashed: proof that a change to the W8A8
headers or unit writer leaves what nvcc compiles unchanged.

For each W8A8 family (int8 ``scaled_mm``, fp8 ``scaled_mm_fp8``), every lane, every arch family
the lane targets, every config of the lane's whole space (the production configs are among
them) and every op the config serves, this emits the unit's generated ``.cu`` once with all of
the op's output dtypes and once per single output dtype, preprocesses it with ``nvcc -E`` under
the flags, include dirs and defines the JIT passes (:meth:`oasr_core.jit.spec.Plan.
compile_command`, ``-c``/``-o`` swapped for ``-E``; the lane's own ``-gencode``, which is
``sm_90a`` for the Hopper lanes), drops the line markers (``# 123 "file"``), folds white space
to what separates tokens (:func:`tokens`) and hashes the rest. Identical preprocessed units compile to identical machine code.

    python benchmarks/w8a8_unit_sources.py --out /tmp/before.json          # on the old tree
    python benchmarks/w8a8_unit_sources.py --out /tmp/after.json --compare /tmp/before.json

Needs nvcc and the nvidia-cutlass headers, no GPU; it times nothing. ``--jobs`` nvcc
processes (default 1), ``--limit`` units per lane (default: all). Exit status 0 when every
unit of ``--compare`` is present and identical.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

FAMILIES = ("oasr_scaled_mm", "oasr_scaled_mm_fp8")
_SPACE = re.compile(r"\s+")
_LOOSE = re.compile(r"(?<!\w) | (?!\w)")
_MARKER = re.compile(r"^\s*#\s*(line\s+)?\d+(\s+\"[^\"]*\")?[\s\d]*$")


def units(limit: int | None) -> list[tuple[str, str, str]]:
    """``(unit id, generated source, arch family)`` of every W8A8 unit (see module doc)."""
    out = []
    for package in FAMILIES:
        cs = importlib.import_module(f"{package}.config_space")
        codegen = importlib.import_module(f"{package}.codegen")
        fmt = importlib.import_module(f"{package}.format")
        record = next(v for v in vars(fmt).values()
                      if type(v).__name__ == "Format" and v.package == package)
        for lane_format in record.lanes:
            lane = lane_format.name
            configs = list(cs.space(lane))[:limit]
            for arch in lane_format.arch_families:
                for config in configs:
                    for op in record.ops:
                        if not cs.serves(config, op):
                            continue
                        dtypes = codegen.OP_OUT_DTYPES[op]
                        subsets = [dtypes] + ([(d,) for d in dtypes] if len(dtypes) > 1 else [])
                        for subset in subsets:
                            uid = f"{package}/{lane}/{arch}/{config.id}/{op}/{'+'.join(subset)}"
                            out.append((uid, codegen.unit_source(config, op, subset), arch))
    return out


def command(arch: str, source: Path, package: str) -> list[str]:
    """The JIT's compile command for ``source`` on ``arch``, as ``nvcc -E`` to stdout."""
    from oasr_core.jit import JitSpec, TranslationUnit
    from oasr_core.jit.spec import plan

    jit = importlib.import_module(f"{package}.jit")
    codegen = importlib.import_module(f"{package}.codegen")
    spec = JitSpec(name="probe", arch=jit.jit_arch(arch),
                   units=(TranslationUnit(name="probe", source="", exports=("probe",)),),
                   include_dirs=include_dirs(codegen), extra_flags=jit.EXTRA_FLAGS)
    cmd = plan(spec).compile_command(source, Path("/dev/null"))
    i = cmd.index("-c")
    return [cmd[0], "-E", *cmd[i + 1:i + 2], *cmd[i + 4:]]


def include_dirs(codegen) -> tuple[str, ...]:
    """The family's include dirs as its JIT specs name them (older trees: its csrc alone)."""
    named = getattr(codegen, "include_dirs", None)
    return named() if named else (str(codegen.csrc_dir()),)


def preprocess_hash(cmd: list[str]) -> str:
    """The sha256 of ``nvcc -E``'s output without line markers and blank lines."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc -E failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    text = " ".join(line for line in proc.stdout.splitlines() if not _MARKER.match(line))
    return hashlib.sha256(tokens(text).encode()).hexdigest()


def tokens(text: str) -> str:
    """``text`` with white space kept only between two word characters (``int x`` stays,
    ``a + b`` becomes ``a+b``): the token stream, not how a header wraps or indents it."""
    text = _SPACE.sub(" ", text).strip()
    return _LOOSE.sub("", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON of unit id -> hash")
    parser.add_argument("--compare", type=Path, help="an earlier --out to compare against")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="configs per lane (default all)")
    args = parser.parse_args(argv)

    todo = units(args.limit)
    hashes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="oasr-units-") as tmp:
        cmds = {}
        for n, (uid, source, arch) in enumerate(todo):
            path = Path(tmp) / f"u{n}.cu"
            path.write_text(source)
            cmds[uid] = command(arch, path, uid.split("/")[0])
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(preprocess_hash, c): uid for uid, c in cmds.items()}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                hashes[futures[future]] = future.result()
                if done % 50 == 0:
                    print(f"{done}/{len(cmds)} units", file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(dict(sorted(hashes.items())), indent=0) + "\n")
    print(f"{len(hashes)} units hashed -> {args.out}")
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())
    same = sum(1 for uid, h in before.items() if hashes.get(uid) == h)
    differ = sorted(uid for uid, h in before.items() if uid in hashes and hashes[uid] != h)
    missing = sorted(set(before) - set(hashes))
    added = sorted(set(hashes) - set(before))
    print(f"{same} of {len(before)} units identical; {len(differ)} differ, "
          f"{len(missing)} missing, {len(added)} new")
    for uid in differ[:20] + missing[:20]:
        print(f"  {uid}")
    return 0 if same == len(before) and not added else 1


if __name__ == "__main__":
    sys.exit(main())
