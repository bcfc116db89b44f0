"""JSON form of tuning files: cattrs hooks, :func:`encode` and :func:`decode`.

The hooks (:func:`configure_converter`) are registered on a converter of
:func:`oasr_core.serialization.make_converter`, the strict one every document shares; the
serialization layer knows no tuning file. Regions travel as ``[m_hi, choice]`` pairs,
configs as ``{id: {"lane": ..., **params}}`` (``Config.to_json``), empty optional fields
of an entry are omitted, and ``model`` is omitted when absent.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from oasr_core.environment import MAX_FILE_ENV, max_file_bytes
from oasr_core.errors import DatabaseError
from oasr_core.serialization import Invalid, describe_structure_error, make_converter
from oasr_core.types import Config, Sentinel

from .migrations import migrate
from .schema import SCHEMA_VERSION, Entry, LazyEntries, Region, Source, TuningFile

_MAX_MESSAGES = 3


def _structure_region(value: Any, _type: Any) -> Region:
    if not isinstance(value, list) or len(value) != 2:
        raise Invalid("a region must be a [m_hi or null, choice] pair")
    return Region(value[0], value[1])


def _unstructure_region(region: Region) -> list[Any]:
    return [region.m_hi, region.choice]


def _structure_source(value: Any, _type: Any) -> Source:
    try:
        return Source(value)
    except ValueError:
        names = ", ".join(s.value for s in Source)
        raise Invalid(f"source {value!r} is not one of {names}") from None


def _structure_configs(value: Any, _type: Any) -> dict[str, Config]:
    if not isinstance(value, dict):
        raise Invalid("configs must be an object of config id -> parameters")
    configs = {}
    for config_id, params in value.items():
        if not isinstance(params, dict):
            raise Invalid(f"configs[{config_id!r}] must be an object")
        try:
            configs[config_id] = Config.from_json(config_id, params)
        except (TypeError, ValueError) as exc:
            raise Invalid(f"configs[{config_id!r}]: {exc}") from None
    return configs


def _unstructure_configs(configs: Mapping[str, Config]) -> dict[str, Any]:
    return {config_id: config.to_json() for config_id, config in configs.items()}


def configure_converter(converter: cattrs.Converter) -> None:
    """Register the tuning-file hooks on ``converter`` (a :func:`make_converter` one)."""
    converter.register_structure_hook(Region, _structure_region)
    converter.register_structure_hook(Source, _structure_source)
    converter.register_unstructure_hook(Region, _unstructure_region)
    converter.register_unstructure_hook(
        Entry, make_dict_unstructure_fn(Entry, converter, _cattrs_omit_if_default=True))
    converter.register_structure_hook(
        TuningFile,
        make_dict_structure_fn(TuningFile, converter,
                               configs=override(struct_hook=_structure_configs)))
    converter.register_unstructure_hook(
        TuningFile,
        make_dict_unstructure_fn(TuningFile, converter,
                                 configs=override(unstruct_hook=_unstructure_configs),
                                 model=override(omit_if_default=True)))


@functools.cache
def _converter() -> cattrs.Converter:
    converter = make_converter()
    configure_converter(converter)
    return converter


def encode(tuning_file: TuningFile) -> dict[str, Any]:
    """The JSON document of ``tuning_file``, with ``schema_version`` first."""
    return {"schema_version": SCHEMA_VERSION, **_converter().unstructure(tuning_file)}


def decode(raw: Any, *, origin: str) -> TuningFile:
    """Migrate and structure a parsed document; ``DatabaseError`` naming ``origin`` otherwise."""
    if not isinstance(raw, dict):
        raise DatabaseError(f"{origin}: expected a JSON object at the top level, "
                            f"got {type(raw).__name__}")
    return _structure(_migrated(raw, origin), origin)


def _migrated(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    try:
        return migrate(raw, origin)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise DatabaseError(f"{origin}: cannot migrate: {exc}") from None


def _structure(doc: dict[str, Any], origin: str) -> TuningFile:
    try:
        return _converter().structure(doc, TuningFile)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError, AttributeError,
            RecursionError) as exc:
        messages = describe_structure_error(exc)
        more = len(messages) - _MAX_MESSAGES
        text = "; ".join(messages[:_MAX_MESSAGES]) + (f" (+{more} more)" if more > 0 else "")
        raise DatabaseError(f"{origin}: malformed tuning file: {text}") from None


def decode_lazy(raw: Any, *, origin: str,
                check: Callable[[str, Entry], None] | None = None) -> TuningFile:
    """:func:`decode`, except that entries stay JSON until looked up (:class:`LazyEntries`).

    Everything but the entries is structured and checked now; each entry when it is first
    looked up, then also by ``check(key, entry)`` (raising ``DatabaseError``).
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("entries", {}), dict):
        return decode(raw, origin=origin)  # decode says what is wrong
    # The whole document is migrated, entries included (a version-0 entry's valid_m and
    # sentinel configs are rewritten), so the lazy and the eager reader read the same file.
    doc = _migrated(raw, origin)
    entries = doc.get("entries", {})
    if not isinstance(entries, dict):
        return decode(raw, origin=origin)
    head = _structure({**doc, "entries": {}}, origin)
    configs = head.configs

    def make(key: str, value: Any) -> Entry:
        try:
            entry = _converter().structure(value, Entry)
        except (cattrs.BaseValidationError, ValueError, TypeError, KeyError, AttributeError,
                RecursionError) as exc:
            messages = describe_structure_error(exc)
            raise DatabaseError(f"{origin}: malformed entry {key!r}: "
                                f"{'; '.join(messages[:_MAX_MESSAGES])}") from None
        for choice in sorted(entry.choices()):
            if choice not in configs and Sentinel.parse(choice) is None:
                raise DatabaseError(f"{origin}: entries[{key!r}] names {choice!r}, which is "
                                    "neither a config of this file nor a sentinel")
        if check is not None:
            check(key, entry)
        return entry

    return attrs.evolve(head, entries=LazyEntries(entries, make))


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


MAX_DEPTH = 64
"""Deepest nesting of arrays and objects any oasr JSON document may have. The deepest oasr
writes is 6 (a tuning file's evidence point); the limit keeps every recursive consumer
(structuring, freezing, rendering) far from the interpreter's recursion limit."""

_STRUCTURE = bytes(range(256)).translate(None, b"[]{}")
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_PAIR = re.compile(rb"\[\]|\{\}")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _nesting_within(brackets: bytes, limit: int) -> bool:
    """Whether the bracket skeleton ``brackets`` empties within ``limit`` rounds of removing
    innermost pairs, i.e. it is balanced and at most ``limit`` deep."""
    for _ in range(limit):
        if not brackets:
            return True
        brackets = _PAIR.sub(b"", brackets)
    return not brackets


def check_depth(data: bytes, *, origin: str, limit: int = MAX_DEPTH) -> None:
    """Raise ``DatabaseError`` when the JSON text ``data`` nests deeper than ``limit``.

    Runs at C speed on the bracket skeleton, before the parser recurses: first with strings
    left in (brackets inside strings can only make it look deeper), then, only when that is
    inconclusive, with the strings cut out.
    """
    if _nesting_within(data.translate(None, _STRUCTURE), limit):
        return
    skeleton = _STRING.sub(b"", data).translate(None, _STRUCTURE)
    if _nesting_within(skeleton, limit):
        return
    # One linear pass (repeating the pair removal would be quadratic in the depth).
    steps = skeleton.translate(_STEP)
    if max(itertools.accumulate(b - 1 for b in steps), default=0) > limit:
        raise DatabaseError(f"{origin}: not valid JSON (nested deeper than {limit} levels)")
    # unbalanced but shallow: the parser reports where


def read_bytes(path: str | os.PathLike[str], *, error: type[Exception] = DatabaseError,
               limit: int | None = None) -> bytes:
    """The bytes of the file at ``path`` if it is at most ``limit`` bytes (default: the
    ``OASR_MAX_FILE_MB`` limit); every problem one line naming the file, raised as ``error``."""
    origin = str(path)
    limit = max_file_bytes() if limit is None else limit
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise error(f"{origin}: {size / 2**20:.1f} MiB is over the {limit / 2**20:g} "
                            f"MiB limit on files oasr reads ({MAX_FILE_ENV}); raise it to "
                            "read this file")
            data = _read_at_most(handle, limit + 1, size)
    except FileNotFoundError:
        raise error(f"{origin}: no such file") from None
    except IsADirectoryError:
        raise error(f"{origin}: is a directory, not a file") from None
    except OSError as exc:
        raise error(f"{origin}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:  # grew while being read
        raise error(f"{origin}: over the {limit / 2**20:g} MiB limit on files oasr reads "
                    f"({MAX_FILE_ENV})")
    return data


def _read_at_most(handle: Any, cap: int, size: int) -> bytes:
    """Up to ``cap`` bytes of ``handle``, allocating no more than the file holds: a limit of
    ``OASR_MAX_FILE_MB=1e13`` must not allocate 10^13 bytes for a small file (``read(n)``
    reserves ``n`` up front). The first read takes the size the file had when opened; a file
    that grew since is read on in 16 MiB steps."""
    parts: list[bytes] = []
    total = 0
    step = min(cap, size + 1)
    while total < cap:
        block = handle.read(step)
        if not block:
            break
        parts.append(block)
        total += len(block)
        step = min(cap - total, 1 << 24)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_document(path: str | os.PathLike[str], *, error: type[Exception] = DatabaseError,
                  empty_ok: bool = False) -> Any:
    """Read and parse the JSON file at ``path`` (:func:`parse_text`), every problem one line
    naming the file, raised as ``error``: missing, unreadable, over the size limit
    (:func:`read_bytes`), empty (unless ``empty_ok``, which returns None), not UTF-8, not
    JSON, nested deeper than :data:`MAX_DEPTH`.

    Every JSON document oasr reads comes through here (or :func:`parse_text` for bytes it
    already holds, :func:`parse_lines` for JSONL), so every reader has the same guards.
    """
    data = read_bytes(path, error=error)
    if not data.strip():
        if empty_ok:
            return None
        raise error(f"{path}: empty file")
    try:
        return parse_text(data, origin=str(path))
    except DatabaseError as exc:
        if error is DatabaseError:
            raise
        raise error(str(exc)) from None


def parse_text(data: bytes, *, origin: str) -> Any:
    """Parse a file's bytes as strict JSON (UTF-8, no NaN, no duplicate keys, at most
    :data:`MAX_DEPTH` deep)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatabaseError(f"{origin}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    check_depth(data, origin=origin)
    # Parsing allocates one container per object and array and none of them can be garbage
    # yet: with the collector on, a large file pays for repeated full collections (3-4x).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates,
                          parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise DatabaseError(f"{origin}: not valid JSON ({exc.msg} at line {exc.lineno} "
                            f"column {exc.colno})") from None
    except ValueError as exc:
        raise DatabaseError(f"{origin}: not valid JSON ({exc})") from None
    except RecursionError:
        raise DatabaseError(f"{origin}: not valid JSON (nested too deeply)") from None
    finally:
        if collecting:
            gc.enable()


def parse_lines(path: str | os.PathLike[str], *, error: type[Exception] = DatabaseError
                ) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of the JSONL file at ``path``; value is
    :data:`BAD_LINE` for a line that is not strict JSON (torn, garbage, too deep). The whole
    file is under the size limit (:func:`read_bytes`) or nothing is yielded (``error``)."""
    data = read_bytes(path, error=error)
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, parse_text(line, origin=f"{path}:{number}")
        except DatabaseError:
            yield number, BAD_LINE


BAD_LINE = object()
"""What :func:`parse_lines` yields for a line it cannot parse."""
