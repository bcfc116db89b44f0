"""Every ``OASR_*`` environment variable oasr reads, validated in one place.

:func:`check_environment` runs when a process first reads oasr's configuration (building a
plugin manager: the CLI, :func:`oasr_core.runtime.get_runtime`, hence the first
``oasr_core.select``), so a bad value fails at start, before any shape is resolved, with one
line naming the variable, its value and what is allowed, and not later in whichever code
path happens to read it (the CLI exits 2 on it). The modules that use a variable still read
it where they use it, through the same parsers, so the two can never disagree.

Families' own switches follow two patterns: ``OASR_<FAMILY>_COMPILE_SET`` (``tuned`` or
``all``) and ``OASR_<FAMILY>_PDL`` (a boolean). A variable oasr does not know is left
alone: it may belong to a newer plugin.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

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


def _bad(name: str, value: str, allowed: str) -> ConfigurationError:
    return ConfigurationError(f"{name}={value!r} is not allowed; expected {allowed}")


def parse_bool(name: str, value: str) -> bool:
    """A boolean switch's value (unset reads as ``""``: false)."""
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise _bad(name, value, BOOLEAN)


def parse_max_file_mb(name: str, value: str) -> float:
    """``OASR_MAX_FILE_MB``: a positive number of MiB."""
    try:
        mb = float(value)
    except ValueError:
        mb = -1.0
    if not mb > 0 or mb != mb or mb == float("inf"):
        raise _bad(name, value, "a positive number of MiB (default "
                   f"{MAX_FILE_MB_DEFAULT:g})")
    return mb


def max_file_bytes() -> int:
    """The size limit of every JSON document oasr reads (``OASR_MAX_FILE_MB``)."""
    raw = os.environ.get(MAX_FILE_ENV)
    mb = MAX_FILE_MB_DEFAULT if raw is None else parse_max_file_mb(MAX_FILE_ENV, raw)
    return int(mb * 1024 * 1024)


def _choice(*allowed: str, default: str | None = None) -> Callable[[str, str], object]:
    def check(name: str, value: str) -> str:
        v = value.strip().lower()
        if not v and default is not None:
            return default
        if v not in allowed:
            raise _bad(name, value, " or ".join(repr(a) for a in allowed))
        return v
    return check


def _path(name: str, value: str) -> str:
    if "\x00" in value:
        raise _bad(name, value, "a path (it holds a NUL byte)")
    return value


def _tier_dir(must_exist: bool) -> Callable[[str, str], object]:
    def check(name: str, value: str) -> object:
        from oasr_core.database import paths

        if paths._disabled(value):
            return None
        return paths._env_dir(name, value, must_exist=must_exist)
    return check


def _arch_list(name: str, value: str) -> object:
    from oasr_core.jit.compiler import target_arches

    return target_arches()


def _plugin_names(name: str, value: str) -> object:
    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_.\-]+", n)]
    if bad:
        raise _bad(name, value, "a comma-separated list of plugin (entry-point) names")
    return names


def _model_fallback(name: str, value: str) -> object:
    from oasr_core.cost_model.tier import model_fallback_enabled

    return model_fallback_enabled()


VARIABLES: Mapping[str, Callable[[str, str], object]] = {
    "OASR_TUNE_USER_DB": _tier_dir(must_exist=False),
    "OASR_TUNE_SYSTEM_DB": _tier_dir(must_exist=True),
    "OASR_TUNE_MODEL_FALLBACK": _model_fallback,
    "OASR_PLUGINS": _plugin_names,
    "OASR_STRICT_PLUGINS": parse_bool,
    "OASR_DISABLE_PLUGIN_AUTOLOAD": parse_bool,
    "OASR_TRACE_PLUGINS": parse_bool,
    "OASR_CUDA_ARCH_LIST": _arch_list,
    "OASR_JIT_DIR": _path,
    "OASR_NVCC": _path,
    "OASR_CAPTURE": _path,
    MAX_FILE_ENV: parse_max_file_mb,
}
"""Each variable oasr itself reads, with the parser that validates its value."""

PATTERNS: tuple[tuple[re.Pattern[str], Callable[[str, str], object]], ...] = (
    (re.compile(r"OASR_[A-Z0-9_]+_COMPILE_SET"), _choice("tuned", "all", default="tuned")),
    (re.compile(r"OASR_[A-Z0-9_]+_PDL"), parse_bool),
)
"""Families' switches, by name pattern."""


def check_environment() -> None:
    """Validate every ``OASR_*`` variable set in this process's environment.

    Raises :class:`ConfigurationError` with one line for the first bad one, in sorted order.
    """
    for name in sorted(k for k in os.environ if k.startswith("OASR_")):
        check = VARIABLES.get(name)
        if check is None:
            check = next((c for pattern, c in PATTERNS if pattern.fullmatch(name)), None)
        if check is not None:
            check(name, os.environ[name])
