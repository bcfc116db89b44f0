"""The autotune cache file: results keyed by bucket, each with the shape it was measured at.

``oasr_core.autotune(cache=PATH)`` reads this file when it starts and merges its own results
into it when it ends. Version 3, the one written::

    {"schema_version": 3, "kind": "oasr-autotune-cache", "arch": "sm90",
     "results": [
      {"key": "gemm|op=gemm|dt=fp16|N=512|K=256", "bucket": 104, "M": 100,
       "lane": "sm90_wgmma", "choice": "ws_64x32x128_c1x1_swap",
       "config": {"lane": "sm90_wgmma", "tile": [64, 32, 128], ...},
       "ms": 0.0041, "timing": "graph",
       "evidence": {"ws_64x32x128_c1x1_swap": [0.0041, 0.00002, 24], "torch": [...]},
       "env": {"oasr": "0.1.0", "torch": "2.13.0", "cuda": "12.8", "device": "NVIDIA H200",
               "impl_hash": "..."}}]}

A result is keyed by its signature key and the bucket of its dynamic size
(:func:`oasr_core.shapes.bucket`), and records ``M``, the exact size it was measured at: it
serves sizes of its bucket at or below ``M`` (the closest measured one at or above a call
wins); a larger size of the same bucket is a miss. An exact-point result (``"point":
"1x3000"``) serves that point only. ``timing`` says whether the arms were CUDA-graph replays
or eager calls (an op that cannot be captured). ``env`` is the environment the result was
measured under; a difference from this process's is warned about, never refused.

The arch is the hard validator: a file of another arch family is neither loaded nor written.

Older versions migrate on the raw mapping before structuring:

- **1** ``{"schema_version": 1, "arch": ..., "configs": {id: {"lane": ..., ...}},
  "results": {"<key>|M=<m>": "<choice>"}}``: exact shapes. Each becomes a result measured at
  that ``M``.
- **2** ``{"schema_version": 2, "arch": ..., "env": {...}, "configs": {...},
  "results": {"<key>|bucket=<edge>": "<choice>"}}``: bucket keys without a shape. Each
  becomes a result with ``M`` null, which serves its whole bucket (it is never published:
  nobody knows the size it was measured at).

Version 1 migrates straight to 3: version 2 has no place for the shape version 1 records.
"""

from __future__ import annotations

import enum
import functools
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
import filelock
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from oasr_core import __version__, files
from oasr_core.database import parse_signature_key
from oasr_core.database.codec import read_document
from oasr_core.database.schema import canonical_json
from oasr_core.errors import DatabaseError, OasrWarning
from oasr_core.serialization import (
    Invalid,
    JsonObject,
    check_json,
    describe_structure_error,
    make_converter,
)
from oasr_core.shapes import bucket
from oasr_core.stamps import current_sku
from oasr_core.types import ARCH_RE, Sentinel, freeze, thaw
from oasr_core.versions import Migrations, Step

CACHE_SCHEMA_VERSION = 3
"""The ``schema_version`` this code writes."""
KIND = "oasr-autotune-cache"
_LOCK_POLL_S = 0.002


class CacheFileError(DatabaseError):
    """An autotune cache file that is malformed, too new, of another arch, or unwritable."""


class CacheTooNewError(CacheFileError):
    """The cache file was written by a newer oasr: neither read nor overwritten."""


class CacheArchError(CacheFileError):
    """The cache file holds results of another arch family: neither loaded nor overwritten."""


class AutotuneWarning(OasrWarning):
    """Autotune skipped something (a cache file, a publish, a measurement); slower, never wrong."""


class Timing(enum.Enum):
    """How a result's arms were timed."""

    GRAPH = "graph"
    """CUDA-graph replays of separated calls (the bench protocol's normal path)."""
    EAGER = "eager"
    """Eager calls: the op could not be captured in a CUDA graph."""


def _positive(_inst: Any, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        name = "M" if attribute.name == "m" else attribute.name
        raise Invalid(f"{name} {value!r} is not a positive integer")


def _key(_inst: Any, _attribute: attrs.Attribute, value: str) -> None:
    try:
        parse_signature_key(value)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def _optional_json(value: Any) -> Any:
    if value is None:
        return None
    check_json(value)
    return freeze(value)


def _json(value: Any) -> Any:
    check_json(value)
    return freeze(value)


@attrs.frozen
class Result:
    """One measured winner: what serves its signature's bucket up to the size ``m``."""

    key: str = attrs.field(validator=_key)
    """Signature key with the exact operand dtype (``gemm|op=gemm|dt=fp16|N=512|K=256``)."""
    bucket: int = attrs.field(validator=_positive)
    """The bucket edge of ``m`` (for a legacy result: the only thing known)."""
    m: int | None = attrs.field(validator=_positive)
    """The dynamic size it was measured at (``M`` in JSON); None: a legacy version-2 result
    serving its whole bucket."""
    choice: str = attrs.field()
    """A config id of ``lane``, or a sentinel's value (``torch``)."""
    lane: str | None = None
    """The lane it was measured on (None: a sentinel measured without one)."""
    point: str | None = None
    """An exact-point key (conv1d's ``"1x3000"``); the result serves that point only."""
    config: JsonObject | None = attrs.field(default=None, converter=_optional_json, hash=False)
    """The config's parameters as measured (``Config.to_json``), for a config choice."""
    ms: float | None = None
    """The winner's time per call."""
    timing: Timing = attrs.field(default=Timing.GRAPH, converter=Timing)
    evidence: JsonObject = attrs.field(factory=dict, converter=_json, hash=False)
    """The best arms (and the incumbent): ``name -> [ms, sigma_ms, rounds]``."""
    env: JsonObject = attrs.field(factory=dict, converter=_json, hash=False)
    """The environment it was measured under (see :func:`env_differences`)."""

    @choice.validator
    def _check_choice(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise Invalid(f"choice {value!r} is not a non-empty string")
        if Sentinel.parse(value) is None and self.config is None:
            raise Invalid(f"choice {value!r} is a config but the result has no 'config'")

    def __attrs_post_init__(self) -> None:
        if self.m is not None and self.point is None and self.m > self.bucket:
            raise Invalid(f"M {self.m} is above its bucket {self.bucket}")

    @property
    def identity(self) -> tuple:
        """Results with equal identities replace each other when merged."""
        return (self.key, self.point or "", self.m or 0, self.bucket if self.m is None else 0)

    @property
    def slot(self) -> tuple:
        """Where lookups find it: (key, point, bucket); a point result is keyed by its point."""
        return (self.key, self.point, None if self.point is not None else self.bucket)

    @property
    def legacy(self) -> bool:
        """A result without a measured shape (version 2): serves its whole bucket."""
        return self.m is None


def rekeyed(result: Result) -> Result:
    """``result`` keyed by this code's bucket of its measured size (edges may have moved)."""
    if result.m is None or result.point is not None or bucket(result.m) == result.bucket:
        return result
    return attrs.evolve(result, bucket=bucket(result.m))


@attrs.frozen
class CacheFile:
    """A parsed cache file: the arch it was tuned on and its results."""

    arch: str = attrs.field()
    results: tuple[Result, ...] = attrs.field(converter=tuple)
    kind: str = attrs.field(default=KIND)

    @arch.validator
    def _check_arch(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not ARCH_RE.match(value):
            raise Invalid(f"arch {value!r} is not an arch family like 'sm90'")

    @kind.validator
    def _check_kind(self, _attribute: attrs.Attribute, value: str) -> None:
        if value != KIND:
            raise Invalid(f"kind {value!r} is not {KIND!r}")


class ResultIndex:
    """Results by (key, point, bucket), answering the measured-shape serving rule."""

    def __init__(self, results: Iterable[Result] = ()) -> None:
        self._slots: dict[tuple, dict[tuple, Result]] = {}
        for result in results:
            self.add(result)

    def add(self, result: Result) -> None:
        """Add ``result``, replacing one of the same identity."""
        result = rekeyed(result)
        self._slots.setdefault(result.slot, {})[result.identity] = result

    def lookup(self, key: str, m: int, point: str | None = None) -> Result | None:
        """The result serving size ``m`` (or exact ``point``) of ``key``, or None (a miss).

        The closest result measured at or above ``m`` in ``m``'s bucket; else a legacy
        result of that bucket; else nothing: a larger size than any measured is a miss.
        """
        if point is not None:
            found = self._slots.get((key, point, None))
            return next(iter(found.values()), None) if found else None
        found = self._slots.get((key, None, bucket(m)))
        if not found:
            return None
        best = None
        for result in found.values():
            if result.m is not None and result.m >= m and (best is None or result.m < best.m):
                best = result
        if best is not None:
            return best
        return next((r for r in found.values() if r.m is None), None)

    def __iter__(self) -> Iterator[Result]:
        for slot in self._slots.values():
            yield from slot.values()

    def __len__(self) -> int:
        return sum(len(s) for s in self._slots.values())


# ---------------------------------------------------------------------------- migrations


def _split_suffix(text: str, name: str, origin: str) -> tuple[str, int]:
    key, sep, value = text.rpartition(f"|{name}=")
    # ASCII digits only, at most 18 (an int64): int() of a 5000-digit string raises.
    if not sep or not re.fullmatch(r"[0-9]{1,18}", value) or int(value) < 1:
        raise CacheFileError(f"{origin}: result key {text!r} does not end in |{name}=<int>")
    return key, int(value)


def _legacy_result(origin: str, text: str, choice: Any, configs: Mapping[str, Any],
                   **fields: Any) -> dict[str, Any]:
    if not isinstance(choice, str) or not choice:
        raise CacheFileError(f"{origin}: result {text!r}: choice {choice!r} is not a string")
    out: dict[str, Any] = {**fields, "choice": choice}
    if Sentinel.parse(choice) is None:
        config = configs.get(choice)
        if not isinstance(config, dict) or not isinstance(config.get("lane"), str):
            raise CacheFileError(f"{origin}: result {text!r} names config {choice!r}, which "
                                 "'configs' does not define with a lane")
        out.update(lane=config["lane"], config=config)
    return out


def _legacy_parts(raw: dict[str, Any], origin: str) -> tuple[Mapping, Mapping]:
    results, configs = raw.get("results", {}), raw.get("configs", {})
    if not isinstance(results, dict) or not isinstance(configs, dict):
        raise CacheFileError(f"{origin}: version {raw['schema_version']} 'results' and "
                             "'configs' must be objects")
    return results, configs


def _migrate_v1_to_v3(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    """Exact shapes (``<key>|M=<m>``) become results measured at that M."""
    results, configs = _legacy_parts(raw, origin)
    out = []
    for text, choice in results.items():
        key, m = _split_suffix(text, "M", origin)
        out.append(_legacy_result(origin, text, choice, configs, key=key, bucket=bucket(m),
                                  M=m))
    return {"schema_version": 3, "kind": KIND, "arch": raw.get("arch"), "results": out}


def _migrate_v2_to_v3(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    """Bucket keys (``<key>|bucket=<edge>``) become whole-bucket results (``M`` null)."""
    results, configs = _legacy_parts(raw, origin)
    env = raw.get("env") if isinstance(raw.get("env"), dict) else {}
    out = []
    for text, choice in results.items():
        key, edge = _split_suffix(text, "bucket", origin)
        out.append(_legacy_result(origin, text, choice, configs, key=key, bucket=edge, M=None,
                                  env=env))
    return {"schema_version": 3, "kind": KIND, "arch": raw.get("arch"), "results": out}


MIGRATIONS = Migrations(kind="autotune cache", current=CACHE_SCHEMA_VERSION,
                        steps=(Step(1, 3, _migrate_v1_to_v3), Step(2, 3, _migrate_v2_to_v3)),
                        error=CacheFileError, too_new=CacheTooNewError,
                        hint="upgrade oasr or use another cache")
"""Raw-document migrations to the current version (:mod:`oasr_core.versions`)."""


# ---------------------------------------------------------------------------- codec


@functools.cache
def _converter() -> cattrs.Converter:
    conv = make_converter()
    conv.register_structure_hook(
        Result, make_dict_structure_fn(Result, conv, m=override(rename="M")))
    conv.register_unstructure_hook(
        Result, make_dict_unstructure_fn(Result, conv, _cattrs_omit_if_default=True,
                                         m=override(rename="M", omit_if_default=False)))
    return conv


def decode(raw: Any, *, origin: str) -> CacheFile:
    """Check the version, migrate and structure a parsed document (:class:`CacheFileError`)."""
    if not isinstance(raw, dict):
        raise CacheFileError(f"{origin}: expected a JSON object, got {type(raw).__name__}")
    version = raw.get("schema_version")
    if type(version) is not int or version < 1:
        raise CacheFileError(f"{origin}: no valid schema_version; not an oasr autotune cache")
    doc = MIGRATIONS.migrate(raw, version, origin)
    try:
        return _converter().structure(doc, CacheFile)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        problems = describe_structure_error(exc)
        more = f" (+{len(problems) - 2} more)" if len(problems) > 2 else ""
        raise CacheFileError(f"{origin}: malformed autotune cache: "
                             f"{'; '.join(problems[:2])}{more}") from None


def encode(cache: CacheFile) -> dict[str, Any]:
    """The version-3 document, results in a stable order."""
    ordered = sorted(cache.results, key=lambda r: (r.key, r.point or "", r.bucket, r.m or 0))
    return {"schema_version": CACHE_SCHEMA_VERSION, "kind": cache.kind, "arch": cache.arch,
            "results": [_converter().unstructure(r) for r in ordered]}


def dumps(cache: CacheFile) -> str:
    """The canonical text of ``cache`` (deterministic)."""
    return canonical_json(encode(cache))


def read_cache(path: str | os.PathLike[str]) -> CacheFile:
    """Read the cache file at ``path``; :class:`CacheFileError` names the file and problem."""
    return decode(read_document(path, error=CacheFileError), origin=str(path))


def load_cache(path: str | os.PathLike[str], arch: str) -> CacheFile:
    """:func:`read_cache`, refusing a file of another arch family (:class:`CacheArchError`)."""
    cache = read_cache(path)
    if cache.arch != arch:
        raise CacheArchError(f"{path}: tuned on {cache.arch}, this process runs {arch}; not "
                             "loaded (the arch is a hard validator); use another cache path")
    return cache


# ---------------------------------------------------------------------------- writing


def _move_aside(path: Path, reason: str) -> Path:
    aside = files.move_aside(path)
    warnings.warn(f"oasr: {reason}; moved it aside to {aside.name} and started a fresh cache",
                  AutotuneWarning, stacklevel=4)
    return aside


def _reread(path: Path, arch: str) -> CacheFile | None:
    if not path.exists():
        return None
    try:
        return load_cache(path, arch)
    except (CacheTooNewError, CacheArchError):
        raise
    except CacheFileError as exc:
        _move_aside(path, str(exc))
        return None


def write_cache(path: str | os.PathLike[str], *, arch: str, results: Iterable[Result],
                lock_timeout: float = 120.0) -> CacheFile:
    """Merge ``results`` into the cache file at ``path`` and return the file as written.

    Takes the file's lock, re-reads it, keeps every result another process wrote (a result
    of the same identity, same key, point and M, is replaced by ours), and replaces the file
    atomically. A corrupt file is moved aside (``<name>.corrupt-<time>``) with a warning; a
    file of another arch (:class:`CacheArchError`) or from a newer oasr
    (:class:`CacheTooNewError`) is left alone and nothing is written.
    """
    path = Path(path)
    ours = list(results)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(files.lock_beside(path)), timeout=lock_timeout)
        with lock.acquire(poll_interval=_LOCK_POLL_S):
            files.sweep_temps(path)
            current = _reread(path, arch)
            merged = {r.identity: r for r in (current.results if current else ())}
            merged.update((r.identity, r) for r in ours)
            cache = CacheFile(arch=arch, results=tuple(merged.values()))
            files.atomic_write(path, dumps(cache))
    except filelock.Timeout:
        raise CacheFileError(f"{path}: another writer has held its lock for over "
                             f"{lock_timeout:g} s; is an oasr process stuck?") from None
    except OSError as exc:
        raise CacheFileError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return cache


# ---------------------------------------------------------------------------- environment


def base_env() -> dict[str, Any]:
    """The environment stamp of this process: oasr, torch and CUDA versions, the device."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            torch = None
    sku = current_sku()
    return {"oasr": __version__,
            "torch": getattr(torch, "__version__", None) if torch else None,
            "cuda": getattr(getattr(torch, "version", None), "cuda", None) if torch else None,
            "device": sku.get("name") if sku else None}


def env_differences(stamped: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``name stamped != current`` for every field both know that differs (None: unknown)."""
    out = []
    for name in sorted(set(stamped) & set(current)):
        s, c = thaw(stamped[name]), thaw(current[name])
        if s is not None and c is not None and s != c:
            out.append(f"{name} {s} != {c}")
    return out
