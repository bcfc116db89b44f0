"""JSON form of tuning files: cattrs hooks, :func:`encode` and :func:`decode`.

The hooks are registered on the shared converter by
:func:`oasr_core.serialization.make_converter`. Regions travel as ``[m_hi, choice]`` pairs,
configs as ``{id: {"lane": ..., **params}}`` (``Config.to_json``), empty optional fields
of an entry are omitted, and ``model`` is omitted when absent.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from oasr_core.errors import DatabaseError
from oasr_core.serialization import Invalid, describe_structure_error, make_converter
from oasr_core.types import Config

from .migrations import migrate
from .schema import SCHEMA_VERSION, Entry, Region, Source, TuningFile

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
    """Register the tuning-file hooks on ``converter`` (called by ``make_converter``)."""
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
    return make_converter()


def encode(tuning_file: TuningFile) -> dict[str, Any]:
    """The JSON document of ``tuning_file``, with ``schema_version`` first."""
    return {"schema_version": SCHEMA_VERSION, **_converter().unstructure(tuning_file)}


def decode(raw: Any, *, origin: str) -> TuningFile:
    """Migrate and structure a parsed document; ``DatabaseError`` naming ``origin`` otherwise."""
    if not isinstance(raw, dict):
        raise DatabaseError(f"{origin}: expected a JSON object at the top level, "
                            f"got {type(raw).__name__}")
    try:
        doc = migrate(raw, origin)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise DatabaseError(f"{origin}: cannot migrate: {exc}") from None
    try:
        return _converter().structure(doc, TuningFile)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError, AttributeError,
            RecursionError) as exc:
        messages = describe_structure_error(exc)
        more = len(messages) - _MAX_MESSAGES
        text = "; ".join(messages[:_MAX_MESSAGES]) + (f" (+{more} more)" if more > 0 else "")
        raise DatabaseError(f"{origin}: malformed tuning file: {text}") from None


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_document(path: str | os.PathLike[str], *, error: type[Exception] = DatabaseError,
                  empty_ok: bool = False) -> Any:
    """Read and parse the JSON file at ``path`` (:func:`parse_text`), every problem one line
    naming the file, raised as ``error``: missing, unreadable, empty (unless ``empty_ok``,
    which returns None), not UTF-8, not JSON, nested too deeply."""
    origin = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{origin}: no such file") from None
    except OSError as exc:
        raise error(f"{origin}: cannot read ({exc.strerror or exc})") from None
    if not data.strip():
        if empty_ok:
            return None
        raise error(f"{origin}: empty file")
    try:
        return parse_text(data, origin=origin)
    except DatabaseError as exc:
        if error is DatabaseError:
            raise
        raise error(str(exc)) from None


def parse_text(data: bytes, *, origin: str) -> Any:
    """Parse a file's bytes as strict JSON (UTF-8, no NaN, no duplicate keys)."""
    try:
        text = data.decode("utf-8")
        return json.loads(text, object_pairs_hook=_reject_duplicates,
                          parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise DatabaseError(f"{origin}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    except json.JSONDecodeError as exc:
        raise DatabaseError(f"{origin}: not valid JSON ({exc.msg} at line {exc.lineno} "
                            f"column {exc.colno})") from None
    except ValueError as exc:
        raise DatabaseError(f"{origin}: not valid JSON ({exc})") from None
    except RecursionError:
        raise DatabaseError(f"{origin}: not valid JSON (nested too deeply)") from None
