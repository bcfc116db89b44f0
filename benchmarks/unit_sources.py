"""Preprocessed translation units of a kernel family, hashed: proof that a host-side or header
refactor leaves what nvcc compiles unchanged.

``--family`` names what to emit (repeat it for several):

- ``conv``: every unit of every conv1d and conv2d lane's whole-space and production module
  (:func:`full_spec`, :func:`production_spec`) on sm80 and sm90, as the JIT builds them.
- ``w8a8``: every unit of both W8A8 families (int8 ``scaled_mm``, fp8 ``scaled_mm_fp8``):
  each lane, each arch family the lane targets, each config of the lane's whole space (the
  production configs are among them), each op the config serves, once with all of the op's
  output dtypes and once per single output dtype.

One code path for both: each unit's generated source is written to a ``.cu`` file and
preprocessed with ``nvcc -E`` under the JIT's own compile command for its module
(:meth:`oasr_core.jit.spec.Plan.compile_command`, ``-c``/``-o`` swapped for ``-E``: the lane's
``-gencode``, ``sm_90a`` for the Hopper lanes, the JIT's flags, defines and include dirs); the
line markers (``# 123 "file"``) are dropped, white space is folded to what separates tokens
(:func:`tokens`) and the rest is hashed. The JIT's export prelude, the same text before every
unit, is left out. Identical preprocessed units compile to identical machine code.

    python benchmarks/unit_sources.py --family conv --out /tmp/before.json   # on the old tree
    python benchmarks/unit_sources.py --family conv --out /tmp/after.json --compare /tmp/before.json

The hashes of main are committed: ``benchmarks/results/conv_unit_hashes.json`` (``--family
conv``) and ``benchmarks/results/w8a8_unit_hashes_after.json`` (``--family w8a8``), so
``--compare`` against them checks a change without a run on the old tree.

Needs nvcc and the nvidia-cutlass headers, no GPU; it times nothing. ``--jobs`` nvcc processes
(default 1), ``--limit`` configs per W8A8 lane (default all). Without ``--out`` the JSON goes to
stdout. Exit status 0 when every unit of ``--compare`` is present and identical and none is new.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from oasr_core.jit import JitSpec, TranslationUnit
from oasr_core.jit.spec import plan

CONV = ("oasr_conv1d", "oasr_conv2d")
CONV_ARCHES = ("sm80", "sm90")
W8A8 = ("oasr_scaled_mm", "oasr_scaled_mm_fp8")
_SPACE = re.compile(r"\s+")
_LOOSE = re.compile(r"(?<!\w) | (?!\w)")
_MARKER = re.compile(r"^\s*#\s*(line\s+)?\d+(\s+\"[^\"]*\")?[\s\d]*$")

#: ``(unit id, generated source, the JitSpec whose compile command builds it)``
Unit = tuple[str, str, JitSpec]


def conv_units(limit: int | None = None) -> Iterator[Unit]:
    """Every unit of every conv lane's whole-space and production module on each arch.

    ``limit`` is accepted for a uniform signature; the conv modules are emitted whole."""
    del limit
    for package in CONV:
        jit = importlib.import_module(f"{package}.jit")
        for lane in importlib.import_module(f"{package}.geometry").LANES:
            for arch in CONV_ARCHES:
                for scope, make in (("all", jit.MODULES.full_spec),
                                    ("production", jit.MODULES.production_spec)):
                    try:
                        spec = make(lane, arch)
                    except ValueError:  # the lane builds nothing for this arch
                        continue
                    for unit in spec.units:
                        yield f"{package}/{lane}/{arch}/{scope}/{unit.name}", unit.source, spec


def w8a8_units(limit: int | None = None) -> Iterator[Unit]:
    """Every W8A8 unit (see the module doc), ``limit`` configs per lane."""
    for package in W8A8:
        cs = importlib.import_module(f"{package}.config_space")
        codegen = importlib.import_module(f"{package}.codegen")
        jit = importlib.import_module(f"{package}.jit")
        fmt = importlib.import_module(f"{package}.format")
        record = next(v for v in vars(fmt).values()
                      if type(v).__name__ == "Format" and v.package == package)
        for lane_format in record.lanes:
            lane = lane_format.name
            configs = list(cs.space(lane))[:limit]
            for arch in lane_format.arch_families:
                spec = JitSpec(name="probe", arch=jit.jit_arch(arch),
                               units=(TranslationUnit(name="probe", source="",
                                                      exports=("probe",)),),
                               include_dirs=codegen.include_dirs(),
                               extra_flags=jit.EXTRA_FLAGS)
                for config in configs:
                    for op in record.ops:
                        if not cs.serves(config, op):
                            continue
                        dtypes = codegen.OP_OUT_DTYPES[op]
                        subsets = [dtypes] + ([(d,) for d in dtypes] if len(dtypes) > 1 else [])
                        for subset in subsets:
                            uid = f"{package}/{lane}/{arch}/{config.id}/{op}/{'+'.join(subset)}"
                            yield uid, codegen.unit_source(config, op, subset), spec


FAMILIES = {"conv": conv_units, "w8a8": w8a8_units}


def command(spec: JitSpec, source: Path) -> list[str]:
    """The JIT's compile command for ``source`` in ``spec``'s module, as ``nvcc -E`` to stdout."""
    cmd = plan(spec).compile_command(source, Path("/dev/null"))
    i = cmd.index("-c")
    return [cmd[0], "-E", *cmd[i + 1:i + 2], *cmd[i + 4:]]


def preprocess_hash(cmd: list[str]) -> str:
    """The sha256 of ``nvcc -E``'s output without line markers, white space folded."""
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


def hashes(units: list[Unit], jobs: int) -> dict[str, str]:
    """``unit id -> hash``; units with the same source and command are preprocessed once."""
    planned: dict[int, tuple[str, ...]] = {}  # one plan per module spec, not per unit
    keys = {}
    for uid, source, spec in units:
        if id(spec) not in planned:
            planned[id(spec)] = tuple(command(spec, Path("unit.cu")))
        keys[uid] = (source, planned[id(spec)])
    distinct = list(dict.fromkeys(keys.values()))
    with tempfile.TemporaryDirectory(prefix="oasr-units-") as tmp:
        cmds = []
        for n, (source, cmd) in enumerate(distinct):
            path = Path(tmp) / f"u{n}.cu"
            path.write_text(source)
            cmds.append([str(path) if a == "unit.cu" else a for a in cmd])
        digests: dict[tuple[str, tuple[str, ...]], str] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(preprocess_hash, cmd): key
                       for key, cmd in zip(distinct, cmds, strict=True)}
            for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
                digests[futures[future]] = future.result()
                if n % 50 == 0:
                    print(f"{n}/{len(distinct)} units", file=sys.stderr, flush=True)
    print(f"{len(keys)} units, {len(distinct)} distinct", file=sys.stderr)
    return {uid: digests[key] for uid, key in keys.items()}


def compare(now: dict[str, str], before: dict[str, str]) -> int:
    """Print how ``now`` stands against ``before``; 0 when every unit is present and the same."""
    same = sum(1 for uid, h in before.items() if now.get(uid) == h)
    differ = sorted(uid for uid, h in before.items() if uid in now and now[uid] != h)
    missing = sorted(set(before) - set(now))
    added = sorted(set(now) - set(before))
    print(f"{same} of {len(before)} units identical; {len(differ)} differ, "
          f"{len(missing)} missing, {len(added)} new", file=sys.stderr)
    for uid in differ[:20] + missing[:20] + added[:20]:
        print(f"  {uid}", file=sys.stderr)
    return 0 if same == len(before) and not added else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", required=True, choices=sorted(FAMILIES),
                        help="whose units to hash (repeatable)")
    parser.add_argument("--out", type=Path, help="JSON of unit id -> hash (default: stdout)")
    parser.add_argument("--compare", type=Path, help="an earlier --out to compare against")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None,
                        help="configs per W8A8 lane (default all)")
    args = parser.parse_args(argv)

    units = [u for family in dict.fromkeys(args.family) for u in FAMILIES[family](args.limit)]
    now = dict(sorted(hashes(units, args.jobs).items()))
    text = json.dumps(now, indent=0) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
    print(f"{len(now)} units hashed -> {args.out or 'stdout'}", file=sys.stderr)
    if args.compare is None:
        return 0
    return compare(now, json.loads(args.compare.read_text()))


if __name__ == "__main__":
    sys.exit(main())
