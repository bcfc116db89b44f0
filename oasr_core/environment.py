"""The parsers of oasr's ``OASR_*`` environment variables that the lowest layers read.

The database's readers and writer read ``OASR_MAX_FILE_MB`` (:func:`max_file_bytes`), the
plugin host reads its boolean switches (:func:`parse_bool`): this module imports nothing of
oasr but its errors, so any layer may use it. Checking every variable at start is
:mod:`oasr_core.variables`, which sits above the modules whose variables it checks.
"""

from __future__ import annotations

import os

from oasr_core.errors import ConfigurationError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
BOOLEAN = "a boolean: 1/0, true/false, yes/no, on/off"
MAX_FILE_ENV = "OASR_MAX_FILE_MB"
"""Largest JSON document oasr reads, in MiB (:func:`max_file_bytes`)."""
MAX_FILE_MB_DEFAULT = 128.0
"""The shipped tables are under 0.1 MiB and their measurement logs about 10 MiB; a user tier
of 300k entries (far beyond any deployment's census of thousands of signatures) is about
70 MiB. 128 MiB reads all of them and refuses a runaway file before parsing it."""


def bad_value(name: str, value: str, allowed: str) -> ConfigurationError:
    """The one-line error of variable ``name`` set to ``value`` (``allowed`` says what may be)."""
    return ConfigurationError(f"{name}={value!r} is not allowed; expected {allowed}")


def parse_bool(name: str, value: str) -> bool:
    """A boolean switch's value (unset reads as ``""``: false)."""
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise bad_value(name, value, BOOLEAN)


def parse_max_file_mb(name: str, value: str) -> float:
    """``OASR_MAX_FILE_MB``: a positive number of MiB."""
    try:
        mb = float(value)
    except ValueError:
        mb = -1.0
    if not mb > 0 or mb != mb or mb == float("inf"):
        raise bad_value(name, value, "a positive number of MiB (default "
                   f"{MAX_FILE_MB_DEFAULT:g})")
    return mb


def max_file_bytes() -> int:
    """The size limit of every JSON document oasr reads (``OASR_MAX_FILE_MB``)."""
    raw = os.environ.get(MAX_FILE_ENV)
    mb = MAX_FILE_MB_DEFAULT if raw is None else parse_max_file_mb(MAX_FILE_ENV, raw)
    return int(mb * 1024 * 1024)
