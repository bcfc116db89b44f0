"""Every ``OASR_*`` environment variable oasr reads, validated in one place.

:func:`check_environment` runs when a process first reads oasr's configuration (building a
plugin manager: the CLI, :func:`oasr_core.runtime.get_runtime`, hence the first
``oasr_core.select``), so a bad value fails at start, before any shape is resolved, with one
line naming the variable, its value and what is allowed, and not later in whichever code
path happens to read it (the CLI exits 2 on it). The modules that use a variable still read
it where they use it, through the same parsers (:mod:`oasr_core.environment`, the database's
paths, the JIT's target arches, the cost-model tier's switch), so the two can never
disagree.

Families' own switches follow two patterns: ``OASR_<FAMILY>_COMPILE_SET`` (``tuned`` or
``all``) and ``OASR_<FAMILY>_PDL`` (a boolean). A variable oasr does not know is left
alone: it may belong to a newer plugin.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

from oasr_core.cost_model.tier import model_fallback_enabled
from oasr_core.database import paths
from oasr_core.environment import MAX_FILE_ENV, bad_value, parse_bool, parse_max_file_mb
from oasr_core.jit.compiler import target_arches


def _choice(*allowed: str, default: str | None = None) -> Callable[[str, str], object]:
    def check(name: str, value: str) -> str:
        v = value.strip().lower()
        if not v and default is not None:
            return default
        if v not in allowed:
            raise bad_value(name, value, " or ".join(repr(a) for a in allowed))
        return v
    return check


def _path(name: str, value: str) -> str:
    if "\x00" in value:
        raise bad_value(name, value, "a path (it holds a NUL byte)")
    return value


def _storage_problem(path: str) -> str | None:
    """Why nothing can be stored under the existing directory ``path``: a pseudo file system
    with no blocks (``/proc``, ``/sys``: root's ``os.access`` says yes there, ``mkdir`` says
    no), else None. Asked with ``statvfs``, writing nothing."""
    try:
        fs = os.statvfs(path)
    except OSError as exc:
        return f"cannot inspect {path} ({exc.strerror or exc})"
    if fs.f_blocks == 0:
        return f"{path} is on a pseudo file system that stores no files"
    return None


def _jit_dir(name: str, value: str) -> str:
    """A directory on a file system that stores files (it may be read-only: a prebuilt cache
    loads from there), or a path whose nearest existing parent is a directory this user may
    create entries in, on a writable file system (the cache is made on first build; nothing
    is created here)."""
    _path(name, value)
    path = os.path.abspath(os.path.expanduser(value))
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise bad_value(name, value, "a directory (this is a file)")
        problem = _storage_problem(path)
        if problem is not None:
            raise bad_value(name, value, f"a directory for the JIT cache ({problem})")
        return value
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise bad_value(name, value, f"a directory oasr can create ({parent} is a file)")
    problem = _storage_problem(parent)
    if problem is None and (os.statvfs(parent).f_flag & os.ST_RDONLY
                            or not os.access(parent, os.W_OK | os.X_OK)):
        problem = f"{parent} is not writable"
    if problem is not None:
        raise bad_value(name, value, f"a directory oasr can create ({problem})")
    return value


def _tier_dir(must_exist: bool) -> Callable[[str, str], object]:
    def check(name: str, value: str) -> object:
        if paths._disabled(value):
            return None
        return paths._env_dir(name, value, must_exist=must_exist)
    return check


def _arch_list(name: str, value: str) -> object:
    return target_arches()


def _plugin_names(name: str, value: str) -> object:
    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_.\-]+", n)]
    if bad:
        raise bad_value(name, value, "a comma-separated list of plugin (entry-point) names")
    return names


def _model_fallback(name: str, value: str) -> object:
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
    "OASR_JIT_DIR": _jit_dir,
    "OASR_NVCC": _path,
    "OASR_CAPTURE": _path,
    "OASR_COMPILE_GATE": parse_bool,
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
