"""The one cattrs converter oasr persists documents with.

:func:`make_converter` builds a JSON converter that is strict where cattrs' defaults are
lenient: ``"12"`` is not an int, ``true`` is not an int, ``"abc"`` is not a list of
strings, and unknown keys are refused. A persisted document that does not match its schema
is an error with a path (``$.entries['gemm|...'].regions``), never a silent coercion.
Each document's module adds its own hooks to a converter made here (tuning files:
:mod:`oasr_core.database.codec`, ShapeSets, the autotune cache), so this module sits below
every document and imports none of them; plugins add theirs through an
``oasr_configure_converter(converter)`` hook when their plugin manager provides one.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from typing import Any, NewType

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn
from cattrs.preconf.json import make_converter as _make_json_converter
from cattrs.v import format_exception as _cattrs_format_exception

from oasr_core.types import freeze, thaw

JsonValue = NewType("JsonValue", object)
"""Any JSON value, stored deep-frozen (read-only mappings, tuples)."""

JsonObject = NewType("JsonObject", object)
"""A JSON object (string keys), stored as a read-only mapping."""


class Invalid(ValueError):
    """A value that breaks a persisted document's schema.

    Raised by structure hooks and record validators; its message is shown to the user as
    is, prefixed by the path of the offending value.
    """


def _strict_int(value: Any, _type: Any) -> int:
    if type(value) is not int:
        raise Invalid(f"expected an integer, got {_kind(value)}")
    return value


def _strict_float(value: Any, _type: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise Invalid(f"expected a finite number, got {_kind(value)}")
    return float(value)


def _strict_str(value: Any, _type: Any) -> str:
    if not isinstance(value, str):
        raise Invalid(f"expected a string, got {_kind(value)}")
    return value


def _strict_bool(value: Any, _type: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"expected true or false, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def check_json(value: Any, where: str = "$") -> None:
    """Raise :class:`Invalid` unless ``value`` is plain JSON data (finite numbers, str keys)."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if item is None or isinstance(item, (bool, int, str)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise Invalid(f"{path}: {item!r} is not a JSON number")
        elif isinstance(item, Mapping):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise Invalid(f"{path}: key {k!r} is not a string")
                stack.append((v, f"{path}.{k}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
        else:
            raise Invalid(f"{path}: {type(item).__name__} is not JSON data")


def _structure_json_value(value: Any, _type: Any) -> Any:
    check_json(value)
    return freeze(value)


def _structure_json_object(value: Any, _type: Any) -> Any:
    if not isinstance(value, Mapping):
        raise Invalid(f"expected an object, got {_kind(value)}")
    check_json(value)
    return freeze(value)


def _is_homogeneous_tuple(type_: Any) -> bool:
    args = typing.get_args(type_)
    return typing.get_origin(type_) is tuple and len(args) == 2 and args[1] is Ellipsis


def _tuple_hook_factory(converter: cattrs.Converter) -> Callable[[Any], Callable]:
    def factory(type_: Any) -> Callable[[Any, Any], tuple]:
        item_type = typing.get_args(type_)[0]
        item_hook = converter.get_structure_hook(item_type)

        def structure(value: Any, _type: Any) -> tuple:
            if not isinstance(value, list):
                raise Invalid(f"expected a list, got {_kind(value)}")
            return tuple(item_hook(v, item_type) for v in value)

        return structure

    return factory


def _attrs_hook_factory(converter: cattrs.Converter) -> Callable[[Any], Callable]:
    def factory(cls: Any) -> Callable[[Any, Any], Any]:
        inner = make_dict_structure_fn(cls, converter)

        def structure(value: Any, type_: Any) -> Any:
            if not isinstance(value, Mapping):
                raise Invalid(f"expected an object, got {_kind(value)}")
            return inner(value, type_)

        return structure

    return factory


def make_converter(pm: Any = None) -> cattrs.Converter:
    """A fresh strict JSON converter with the plugins' hooks registered (a document's own
    hooks are its module's: :func:`oasr_core.database.codec.configure_converter`, ...).

    ``pm`` is the plugin manager; when it offers an ``oasr_configure_converter`` hook, each
    plugin's implementation is called with the converter so it can register its own
    per-family payload types. Build one after plugins load; never use cattrs' global one.
    """
    converter = _make_json_converter(forbid_extra_keys=True)
    for type_, hook in ((int, _strict_int), (float, _strict_float), (str, _strict_str),
                        (bool, _strict_bool), (JsonValue, _structure_json_value),
                        (JsonObject, _structure_json_object)):
        converter.register_structure_hook(type_, hook)
    converter.register_unstructure_hook(JsonValue, thaw)
    converter.register_unstructure_hook(JsonObject, thaw)
    converter.register_structure_hook_factory(_is_homogeneous_tuple,
                                              _tuple_hook_factory(converter))
    converter.register_structure_hook_factory(attrs.has, _attrs_hook_factory(converter))
    hook = getattr(getattr(pm, "hook", None), "oasr_configure_converter", None)
    if hook is not None:
        hook(converter=converter)
    return converter


def _format_exception(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, Invalid):
        return str(exc)
    return _cattrs_format_exception(exc, type_)


def describe_structure_error(exc: BaseException, path: str = "$") -> list[str]:
    """One line per problem in a failed ``structure`` call, each ending ``@ <path>``.

    Wraps ``cattrs.transform_error`` so :class:`Invalid` messages are kept verbatim.
    """
    if isinstance(exc, cattrs.BaseValidationError):
        return cattrs.transform_error(exc, path=path, format_exception=_format_exception)
    return [f"{_format_exception(exc, None)} @ {path}"]
