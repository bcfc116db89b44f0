"""What a JIT module is made of, and the content keys that name its objects and library.

A :class:`JitSpec` is one shared library (one per lane and compile set): a list of
:class:`TranslationUnit` records, one generated ``.cu`` per kernel config. :func:`plan` resolves a
spec against the toolchain into the exact text each unit compiles and two kinds of key:

- an **object key** per unit: the compiled text, the portable compile flags, the bytes of the
  project headers it includes, nvcc's identity, NVCC_* environment flags and CUTLASS's
  ``version.h``; no device, no absolute path and no Python version, so a CPU machine and a GPU
  machine with the same toolchain compute the same keys;
- a **module key**: the unit names, object keys and exports plus the link flags.

Unlike a key over "every header of the project", only headers a unit actually includes (found by
scanning ``#include`` lines through the spec's own include dirs) or lists explicitly count, so
editing one plugin header rebuilds only the configs that include it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from oasr_core.errors import ConfigurationError
from oasr_core.jit.compiler import (
    Toolchain,
    cutlass_include_dirs,
    cutlass_stamp,
    gencode_flag,
    normalize_arch,
    toolchain,
)
from oasr_core.jit.kit import INCLUDE_DIR as KIT_INCLUDE_DIR
from oasr_core.types import NAME_RE

KEY_VERSION = 1
"""Bumped whenever the recipe of a key (or of the compiled text) changes."""
KEY_LENGTH = 20
"""Hex digits of sha256 kept in a key (80 bits)."""

EXPORT_MACRO = "OASR_EXPORT"
"""Macro generated sources put before each launcher: ``OASR_EXPORT int launch_x(...)``.

It expands to ``extern "C" __attribute__((visibility("default")))``; every other symbol is
hidden (``-fvisibility=hidden``, ``--exclude-libs,ALL``), so a library exports only its launchers
and never CUTLASS's or the CUDA runtime's process-wide statics."""
PRELUDE = (
    f"#ifndef {EXPORT_MACRO}\n"
    f'#define {EXPORT_MACRO} extern "C" __attribute__((visibility("default")))\n'
    "#endif\n"
)
"""Text put before every unit's source (a ``#line`` directive follows, so nvcc reports the unit's
own line numbers under the file name ``<unit>.cu``)."""

COMPILE_FLAGS = (
    "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-DNDEBUG",
    "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
)
"""Flags of every object after ``-gencode``. ``-DNDEBUG`` keeps device asserts out of Hopper
kernels (ptxas C7510 serialises wgmma otherwise)."""
LINK_FLAGS = (
    "-shared", "-cudart", "static", "-Xlinker", "--exclude-libs,ALL", "-Xlinker", "-z,defs",
)
"""Flags of every link: static CUDA runtime, its symbols hidden, undefined symbols an error at
link time (on the build machine) rather than at load time (on the GPU machine)."""
NVCC_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")
"""Environment variables nvcc reads that change what it compiles; they enter object keys."""

_UNIT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
_SYMBOL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.MULTILINE)


def _str_tuple(value: Iterable[str | os.PathLike[str]] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(os.fspath(v) for v in value)


@attrs.frozen
class TranslationUnit:
    """One generated ``.cu`` file: one kernel config and the launchers it exports."""

    name: str = attrs.field()
    """Unique within its module; nvcc reports errors under ``<name>.cu`` (a config id works)."""
    source: str = attrs.field(validator=attrs.validators.instance_of(str))
    """CUDA C++ text. Launchers are declared ``OASR_EXPORT`` (see :data:`EXPORT_MACRO`)."""
    exports: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """The C symbols of its launchers, as ``ctypes`` will look them up."""

    @name.validator
    def _check_name(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not _UNIT_RE.match(value):
            raise ValueError(
                f"translation unit name {value!r} must be letters, digits, '_', '.', '+' or '-'"
            )

    @exports.validator
    def _check_exports(self, _attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        for symbol in value:
            if not _SYMBOL_RE.match(symbol):
                raise ValueError(f"unit {self.name}: export {symbol!r} is not a C identifier")
        if len(set(value)) != len(value):
            raise ValueError(f"unit {self.name}: an export is listed twice in {value}")


@attrs.frozen
class JitSpec:
    """One shared library: its units, target arch, include dirs and extra flags.

    ``arch`` is canonicalised (``"sm_90a"``/``"9.0"`` -> ``"90a"``, see
    :func:`~oasr_core.jit.compiler.normalize_arch`). Pass project include dirs through
    ``include_dirs`` (never as ``-I`` in ``extra_flags``): their paths stay out of the key and the
    headers units include from them are hashed instead. ``headers`` lists further files whose
    bytes must invalidate the objects (e.g. a header reached through a macro ``#include``).
    ``cutlass`` adds the nvidia-cutlass wheel's include dirs and its version stamp.
    """

    name: str = attrs.field()
    """Library name (``gemm_sm90``): lower case, digits and '_'."""
    arch: str = attrs.field(converter=normalize_arch)
    """Target, canonical (``90a``); the only device-dependent input, and it is explicit."""
    units: tuple[TranslationUnit, ...] = attrs.field(converter=tuple)
    include_dirs: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    extra_flags: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """nvcc flags added after the defaults for every object (e.g. ``-lineinfo``); in the key."""
    headers: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """Header files (absolute, or relative to an include dir) every object's key covers."""
    link_flags: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """Extra link flags (e.g. ``-lcuda``); in the module key."""
    cutlass: bool = True

    @name.validator
    def _check_name(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not NAME_RE.match(value):
            raise ValueError(f"module name {value!r} must be lower case, digits and '_'")

    @units.validator
    def _check_units(self, _attribute: attrs.Attribute, value: tuple[TranslationUnit, ...]) -> None:
        if not value:
            raise ValueError(f"module {self.name}: no translation units")
        names: set[str] = set()
        owner: dict[str, str] = {}
        for unit in value:
            if not isinstance(unit, TranslationUnit):
                raise TypeError(f"module {self.name}: units holds a {type(unit).__name__}")
            if unit.name in names:
                raise ValueError(f"module {self.name}: unit {unit.name!r} appears twice")
            names.add(unit.name)
            for symbol in unit.exports:
                if symbol in owner:
                    raise ValueError(
                        f"module {self.name}: export {symbol!r} of unit {unit.name!r} is also "
                        f"exported by {owner[symbol]!r}"
                    )
                owner[symbol] = unit.name

    @property
    def key(self) -> str:
        """The module's content key (hex); computing it runs ``nvcc --version`` once a process."""
        return plan(self).key

    def unit_keys(self) -> Mapping[str, str]:
        """The object key of each unit, by unit name."""
        return MappingProxyType({u.unit.name: u.key for u in plan(self).units})


@attrs.frozen
class PlannedUnit:
    """A unit resolved for building: the text nvcc compiles and its object key."""

    unit: TranslationUnit
    text: str
    key: str


@attrs.frozen
class Plan:
    """A spec resolved against the toolchain: absolute include dirs, unit keys, module key."""

    spec: JitSpec
    toolchain: Toolchain
    include_dirs: tuple[str, ...]
    units: tuple[PlannedUnit, ...]
    key: str
    cutlass_version: str | None

    def compile_command(self, source: Path, output: Path) -> list[str]:
        """The nvcc command that compiles ``source`` into the object ``output``."""
        return [
            str(self.toolchain.nvcc), "-c", str(source), "-o", str(output),
            gencode_flag(self.spec.arch), *COMPILE_FLAGS,
            *(f"-I{d}" for d in self.include_dirs), *self.spec.extra_flags,
        ]

    def link_command(self, objects: Iterable[Path], output: Path) -> list[str]:
        """The nvcc command that links ``objects`` into the shared library ``output``."""
        return [
            str(self.toolchain.nvcc), *LINK_FLAGS, *self.spec.link_flags, "-o", str(output),
            *(str(o) for o in objects),
        ]


def plan(spec: JitSpec, tc: Toolchain | None = None) -> Plan:
    """Resolve ``spec``: find the toolchain (and CUTLASS if asked), hash units and headers.

    Every module's include path ends with the plugin kit's headers (``oasr_kit/*.cuh``,
    :data:`oasr_core.jit.kit.INCLUDE_DIR`); those a unit includes enter its key like its own.

    ``tc`` is the toolchain to key it for (default: the one :func:`toolchain` probes; a
    report passes the one a build recorded, :mod:`oasr_core.jit.toolchains`).

    Raises :class:`ToolchainError` when nvcc or CUTLASS is missing and
    :class:`ConfigurationError` when an include dir or listed header does not exist.
    """
    tc = toolchain() if tc is None else tc
    own_dirs = tuple(dict.fromkeys(
        (*(str(Path(d).resolve()) for d in spec.include_dirs), str(KIT_INCLUDE_DIR))))
    for d in own_dirs:
        if not Path(d).is_dir():
            raise ConfigurationError(f"module {spec.name}: include dir {d} does not exist")
    cutlass_dirs: tuple[str, ...] = ()
    stamp: tuple[str, str] | None = None
    if spec.cutlass:
        cutlass_dirs = cutlass_include_dirs()
        stamp = cutlass_stamp()
    scanner = _HeaderScanner(own_dirs)
    listed = [scanner.listed(spec.name, h) for h in spec.headers]
    portable_flags = [
        gencode_flag(spec.arch), *COMPILE_FLAGS,
        *(f"-I<include:{i}>" for i in range(len(own_dirs))),
        *(f"-I<cutlass:{i}>" for i in range(len(cutlass_dirs))),
        *spec.extra_flags,
    ]
    common = {
        "v": KEY_VERSION,
        "nvcc": tc.version,
        "flags": portable_flags,
        "env": {name: os.environ.get(name, "") for name in NVCC_ENV},
        "cutlass": list(stamp) if stamp else None,
    }
    units = []
    for unit in spec.units:
        text = f'{PRELUDE}#line 1 "{unit.name}.cu"\n{unit.source}'
        headers = sorted({*listed, *scanner.scan(unit.source)})
        material = {**common, "source": _sha(text.encode()), "headers": headers}
        units.append(PlannedUnit(unit=unit, text=text, key=_digest(material)))
    module = {
        "v": KEY_VERSION,
        "name": spec.name,
        "arch": spec.arch,
        "nvcc": tc.version,
        "link": [*LINK_FLAGS, *spec.link_flags],
        "units": [[u.unit.name, u.key, list(u.unit.exports)] for u in units],
    }
    return Plan(
        spec=spec, toolchain=tc, include_dirs=own_dirs + cutlass_dirs, units=tuple(units),
        key=_digest(module), cutlass_version=stamp[0] if stamp else None,
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(material: Mapping[str, Any]) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return _sha(text.encode())[:KEY_LENGTH]


class _HeaderScanner:
    """Finds the project headers a source includes, transitively, through given include dirs.

    Includes that do not resolve in those dirs (CUDA, CUTLASS, the C++ library) are not the
    project's: their identity is covered by the nvcc and CUTLASS stamps. Every ``#include`` line
    counts, even inside ``#if`` blocks: a superset only costs a spurious rebuild.
    """

    def __init__(self, include_dirs: tuple[str, ...]) -> None:
        self._dirs = tuple(Path(d) for d in include_dirs)
        self._digests: dict[Path, tuple[str, str]] = {}
        self._names: dict[Path, list[str]] = {}

    def listed(self, module: str, header: str) -> tuple[str, str]:
        path = Path(header)
        candidates = [path] if path.is_absolute() else [d / path for d in self._dirs]
        for candidate in candidates:
            if candidate.is_file():
                return self._digest(candidate.resolve())
        raise ConfigurationError(
            f"module {module}: header {header} is not a file"
            + ("" if path.is_absolute() else " under its include dirs")
        )

    def scan(self, source: str) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        pending: list[tuple[list[str], Path | None]] = [(_INCLUDE_RE.findall(source), None)]
        seen: set[Path] = set()
        while pending:
            names, here = pending.pop()
            for name in names:
                path = self._resolve(name.strip(), here)
                if path is None or path in seen:
                    continue
                seen.add(path)
                found.add(self._digest(path))
                pending.append((self._includes(path), path.parent))
        return found

    def _includes(self, path: Path) -> list[str]:
        if path not in self._names:
            self._names[path] = _INCLUDE_RE.findall(path.read_text(errors="replace"))
        return self._names[path]

    def _resolve(self, name: str, here: Path | None) -> Path | None:
        bases = ([here] if here is not None else []) + list(self._dirs)
        for base in bases:
            candidate = base / name
            if candidate.is_file():
                return candidate.resolve()
        return None

    def _digest(self, path: Path) -> tuple[str, str]:
        if path not in self._digests:
            rel = next(
                (str(path.relative_to(d.resolve())) for d in self._dirs
                 if path.is_relative_to(d.resolve())),
                path.name,
            )
            self._digests[path] = (rel, _sha(path.read_bytes()))
        return self._digests[path]
