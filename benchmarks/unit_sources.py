"""Hashes of every conv unit's preprocessed translation unit, to prove device code unchanged.

For every lane of the conv1d and conv2d families, on every arch it builds for, this script takes
the units of the whole-space module and of the production module (:func:`full_spec`,
:func:`production_spec`), writes each unit's ``.cu`` the way the JIT does (the export prelude,
then the generated source), preprocesses it with ``nvcc -E -x cu -arch=sm_90a`` and the JIT's
include dirs and flags (:func:`oasr_core.jit.spec.plan`), strips the line markers and hashes the
text. Two checkouts whose hash lists are identical compile identical translation units, hence
identical machine code: run it before and after a host-side refactor and diff the outputs.

    python benchmarks/unit_sources.py --jobs 2 > before.txt

``--tokens`` hashes the unit's C++ token stream instead (:func:`tokens`: the preprocessed text
split into identifiers, numbers, literals and punctuators, maximal munch, each directive line
such as ``#pragma unroll`` one token): what the compiler parses, without the white space and
line breaks that depend on where a header put the text. Code moved between headers, or
spelled through a macro, keeps its token hash exactly when nvcc sees the same program.

Needs nvcc and the nvidia-cutlass headers, no GPU; it times nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from oasr_core.jit.spec import COMPILE_FLAGS, PRELUDE, plan

FAMILIES = ("oasr_conv1d", "oasr_conv2d")
ARCHES = ("sm80", "sm90")
_LINE_MARKER = re.compile(rb"^#(?: |line ).*\n", re.MULTILINE)
_PUNCT = sorted(
    ["%:%:", "...", "<<=", ">>=", "->*", "<=>", "::", "->", "++", "--", "<<", ">>", "<=", ">=",
     "==", "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", ".*", "##", "<:",
     ":>", "<%", "%>", "%:"], key=len, reverse=True)
_TOKEN = re.compile(
    r"""(?:u8|[uUL])?R"(?P<delim>[^(\s]*)\((?:.|\n)*?\)(?P=delim)"  # raw string
    |(?:u8|[uUL])?"(?:\\.|[^"\\\n])*"                         # string literal
    |(?:u8|[uUL])?'(?:\\.|[^'\\\n])*'                         # character literal
    |\.?[0-9](?:[eEpP][+-]|[\w.'])*                              # pp-number
    |[A-Za-z_$][\w$]*                                          # identifier or keyword
    |""" + "|".join(re.escape(p) for p in _PUNCT) + r"""
    |\S                                                        # any other single character
    """, re.VERBOSE)


def _specs():
    """``(label, JitSpec)`` of every lane's whole-space and production module on each arch."""
    import importlib

    for package in FAMILIES:
        jit = importlib.import_module(f"{package}.jit")
        lanes = importlib.import_module(f"{package}.geometry").LANES
        for lane in lanes:
            for arch in ARCHES:
                for scope, make in (("all", jit.MODULES.full_spec),
                                    ("production", jit.MODULES.production_spec)):
                    try:
                        spec = make(lane, arch)
                    except ValueError:  # the lane builds nothing for this arch
                        continue
                    yield f"{package}/{lane}/{arch}/{scope}", spec


def tokens(text: str) -> list[str]:
    """The C++ tokens of preprocessed ``text`` (line markers already dropped), in order: each
    directive line left by the preprocessor (``#pragma ...``) is one token, white space folded."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.lstrip().startswith("#"):
            out.append(" ".join(line.split()))
            continue
        pos = 0
        while True:
            while pos < len(line) and line[pos].isspace():
                pos += 1
            if pos == len(line):
                break
            match = _TOKEN.match(line, pos)
            out.append(match.group(0))
            pos = match.end()
    return out


def _digest(text: bytes, by_tokens: bool) -> str:
    if by_tokens:
        text = "\n".join(tokens(text.decode())).encode()
    return hashlib.sha256(text).hexdigest()


def _preprocess(job: tuple[str, str, list[str], bool]) -> tuple[str, str]:
    name, source, flags, by_tokens = job
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.cu"
        path.write_text(PRELUDE + source)
        out = subprocess.run(["nvcc", "-E", "-x", "cu", "-arch=sm_90a", *flags, str(path)],
                             capture_output=True, check=False)
    if out.returncode:
        sys.exit(f"{name}: nvcc -E failed:\n{out.stderr.decode(errors='replace')}")
    return name, _digest(_LINE_MARKER.sub(b"", out.stdout), by_tokens)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tokens", action="store_true",
                        help="hash the C++ token stream instead of the text (see module doc)")
    args = parser.parse_args()
    jobs: dict[tuple[str, str, tuple[str, ...]], str] = {}
    listing: list[tuple[str, tuple[str, str, tuple[str, ...]]]] = []
    for label, spec in _specs():
        resolved = plan(spec)
        flags = [f for f in COMPILE_FLAGS if f.startswith("-D") or f.startswith("-std")]
        flags += [f"-I{d}" for d in resolved.include_dirs] + list(spec.extra_flags)
        for unit in spec.units:
            key = (unit.name, unit.source, tuple(flags))
            jobs.setdefault(key, unit.name)
            listing.append((label, key))
    keys = list(jobs)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        digests = dict(zip(keys, (d for _, d in pool.map(
            _preprocess, [(k[0], k[1], list(k[2]), args.tokens) for k in keys])), strict=True))
    for label, key in sorted(listing, key=lambda row: (row[0], row[1][0])):
        print(f"{label} {key[0]} {digests[key]}")
    print(f"# {len(listing)} units in modules, {len(keys)} distinct", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
