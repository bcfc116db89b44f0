"""The C++ side of the plugin kit: what every kernel family's JIT units share.

The headers under ``include/oasr_kit/`` (on every module's include path, see
:func:`oasr_core.jit.spec.plan`) hold the C-ABI launcher boilerplate: the call record, status
codes, launch flags, the per-kernel cache of prepared parameters, and the launch helpers of
CUTLASS 2.x (``oasr_kit/sm80.cuh``) and 3.x (``oasr_kit/sm90.cuh``) kernels. This module holds
their Python halves: the ctypes mirror of the call record, the status names, CUTLASS's 3.x
schedule names, :func:`c_abi_unit`, the text of one generated translation unit,
:func:`config_unit`, the unit of a one-unit config, and :func:`impl_inputs` /
:func:`impl_hash`, a family's implementation hash. A family's codegen supplies only its kernel
types, its operand list and its header.

Importing it imports neither torch nor CUTLASS.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from oasr_core.errors import PluginError

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
"""The include dir holding ``oasr_kit/*.cuh``."""
CONV_DIR = INCLUDE_DIR / "oasr_kit" / "conv"
"""The convolution families' shared C++ (``oasr_kit/conv/*.cuh``: call codes, the run-time
activation, a dense launch's checks and call key, the CUTLASS 2.x implicit-GEMM kernel type),
included inside each family's namespace. Not among :func:`headers`: only a family whose units
include them hashes them (``hash_headers(digest, [..., CONV_DIR])``)."""

STATUS = {
    0: "ok", 1: "dtype not compiled in", 2: "shape not implementable", 3: "bad split-K factor",
    4: "workspace too small", 5: "parameter preparation failed", 6: "launch failed",
    7: "no CUDA device",
}
"""Launcher return codes (``oasr_kit::Status``) and what they mean."""

FLAG_PDL = 1
"""``CallArgs.flags`` bit: launch with programmatic dependent launch (``kFlagPdl``)."""
FLAG_FAMILY = 2
"""The first ``CallArgs.flags`` bit a family may define for itself (``kFlagFamily``)."""

SM90_MAINLOOP = {
    "ws": "cutlass::gemm::KernelTmaWarpSpecialized",
    "pingpong": "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
    "cooperative": "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
}
"""CUTLASS 3.x main-loop schedule per config ``schedule`` value."""
SM90_EPILOGUE = {
    "ws": "cutlass::epilogue::TmaWarpSpecialized",
    "pingpong": "cutlass::epilogue::TmaWarpSpecialized",
    "cooperative": "cutlass::epilogue::TmaWarpSpecializedCooperative",
}
"""CUTLASS 3.x epilogue schedule per config ``schedule`` value."""


def sm90_scheduler(stream_k: bool) -> str:
    """The 3.x tile scheduler type: Stream-K or the schedule's default (``void``)."""
    return "cutlass::gemm::StreamKScheduler" if stream_k else "void"


class CallArgs(ctypes.Structure):
    """The per-shape call record of the C ABI (``oasr_kit::CallArgs``, field by field).

    Prepared once per call shape and passed by address, so a launch crosses the FFI with a
    handful of pointer-sized arguments. ``dtype`` is the unit's dtype code (the output dtype
    of a scaled GEMM); ``act`` and ``split`` are 0 and 1 where a family has neither.
    """

    _fields_ = [
        ("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
        ("dtype", ctypes.c_int32), ("act", ctypes.c_int32), ("split", ctypes.c_int32),
        ("flags", ctypes.c_int32), ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64), ("semaphores", ctypes.c_void_p),
        ("semaphore_bytes", ctypes.c_int64),
    ]


def headers() -> list[Path]:
    """The kit's headers, sorted: a family's implementation hash covers them."""
    return sorted((INCLUDE_DIR / "oasr_kit").glob("*.cuh"))


def hash_headers(digest: hashlib._Hash, dirs: Iterable[Path]) -> None:
    """Feed every ``*.cuh`` under ``dirs`` and the kit's headers into ``digest`` (name and
    bytes, in a fixed order): the header part of a family's ``impl_hash``."""
    for header in [*(h for d in dirs for h in sorted(Path(d).glob("*.cuh"))), *headers()]:
        digest.update(header.name.encode())
        digest.update(header.read_bytes())


def canonical_impl_hash(digest: str, equivalents: Path) -> str:
    """``digest``, or the earlier implementation hash it is recorded as equivalent to.

    ``equivalents`` is a family's JSON file (beside its codegen) mapping an implementation
    hash to ``{"same_as": <earlier hash>, "checked": <how>}``: implementations whose kernels
    compile to the same machine code as an earlier one (``benchmarks/device_code_diff.py``
    compares the cubins' text sections) keep that one's name, so tables measured under it stay
    current. Any further change to a unit, flag or header gives a digest the file does not
    list, and the tables read as stale again. A missing file maps nothing; a malformed one is
    a :class:`~oasr_core.errors.PluginError` naming it.
    """
    import json

    if not equivalents.is_file():
        return digest
    try:
        table = json.loads(equivalents.read_text())
        hit = table.get(digest)
        return digest if hit is None else str(hit["same_as"])
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise PluginError(f"{equivalents}: malformed implementation equivalences ({exc})") from None


def config_unit(config: Any, source: str, symbol: str) -> list:
    """The :class:`oasr_core.jit.TranslationUnit` list of a family with one unit per config:
    the unit ``config.params["unit"]`` of text ``source``, exporting the launcher ``symbol``
    and its workspace query ``symbol + "_workspace"``."""
    from oasr_core.jit import TranslationUnit

    return [TranslationUnit(name=config.params["unit"], source=source,
                            exports=(symbol, symbol + "_workspace"))]


def impl_inputs(*, flags: Iterable[str], units: Iterable[tuple[str, str, str]],
                headers: Iterable[Path], root: Path) -> tuple[tuple[str, bytes], ...]:
    """What defines a family's binaries, as ``(name, bytes)`` pairs in a fixed order: its
    extra nvcc ``flags`` (named ``flags``), each ``(lane, config id, unit text)`` of ``units``
    (``unit:<lane>:<id>``) and each of its ``headers`` (``header:<path below root>``); the
    family's ``impl_hash`` digests them."""
    items: list[tuple[str, bytes]] = [("flags", " ".join(flags).encode())]
    items += [(f"unit:{lane}:{cid}", text.encode()) for lane, cid, text in units]
    items += [(f"header:{h.relative_to(root)}", h.read_bytes()) for h in headers]
    return tuple(items)


def impl_hash(inputs: Iterable[tuple[str, bytes]], header_dirs: Iterable[Path],
              equivalents: Path | None = None) -> str:
    """A family's implementation hash: 16 hex digits of ``inputs`` (``(name, bytes)`` pairs,
    :func:`impl_inputs`) and the headers under ``header_dirs`` and the kit's
    (:func:`hash_headers`), named as ``equivalents`` records it (:func:`canonical_impl_hash`;
    None: as it is). A tuning entry measured under another hash is stale."""
    digest = hashlib.sha256()
    for name, data in inputs:
        digest.update(name.encode())
        digest.update(data)
    hash_headers(digest, header_dirs)
    short = digest.hexdigest()[:16]
    return short if equivalents is None else canonical_impl_hash(short, equivalents)


def unit_dtypes(dtypes: Iterable[str], codes: Mapping[str, int]) -> tuple[str, ...]:
    """``dtypes``, the dtypes a unit compiles kernels for, as a tuple: a non-empty subset of
    the names in ``codes`` (the family's dtype codes), else a ``ValueError`` naming both."""
    dtypes = tuple(dtypes)
    if not dtypes or any(d not in codes for d in dtypes):
        raise ValueError(f"dtypes {dtypes!r} must be a non-empty subset of {tuple(codes)}")
    return dtypes


def c_abi_unit(*, title: str, generator: str, header: str, kernels: Mapping[int, str],
               symbol: str, operands: str, run: str, workspace_params: str,
               workspace_switch: str, workspace: str, prologue: str = "",
               prelude: str = "") -> str:
    """The text of one generated translation unit exporting a launcher and its workspace query.

    ``kernels`` maps each compiled dtype code to its C++ kernel type (aliased ``K<code>``);
    the launcher ``symbol(const oasr_kit::CallArgs* c, <operands>, void* stream)`` switches on
    ``c->dtype`` and returns ``K<code>::<run>``; ``symbol_workspace(<workspace_params>)``
    switches on ``workspace_switch`` and returns ``K<code>::<workspace>`` (-1 for a dtype not
    compiled in). ``prologue`` is C++ run before the switch (e.g. packing operands);
    ``prelude`` goes before the ``#include`` of the family's lane ``header``.
    """
    aliases = "\n".join(f"using K{code} = {kind};" for code, kind in kernels.items())
    run_cases = "\n".join(f"    case {code}: return K{code}::{run};" for code in kernels)
    ws_cases = "\n".join(f"    case {code}: return K{code}::{workspace};" for code in kernels)
    return f"""// {title}
// generated by {generator}; edit the generator, not this file.
{prelude}#include "{header}"

namespace {{
{aliases}
}}  // namespace

OASR_EXPORT int32_t {symbol}(const oasr_kit::CallArgs* c, {operands}, void* stream) {{
  if (c == nullptr) {{
    return oasr_kit::kErrShape;
  }}
{prologue}  switch (c->dtype) {{
{run_cases}
    default: return oasr_kit::kErrDtype;
  }}
}}

OASR_EXPORT int64_t {symbol}_workspace({workspace_params}) {{
  switch ({workspace_switch}) {{
{ws_cases}
    default: return -1;
  }}
}}
"""
