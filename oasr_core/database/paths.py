"""Where the two tiers live, and the file of one (arch family, kernel family) in a tier.

The **system** tier is shipped and changed only by review: ``OASR_TUNE_SYSTEM_DB`` when set,
else the package data directory ``oasr_core/db`` (a wheel force-includes the repository's
``db/`` there), else the checkout's ``db/`` beside the ``oasr_core`` package. The **user**
tier is this machine's: ``OASR_TUNE_USER_DB`` when set (``off`` and friends disable it,
as the test suite does), else ``<user cache>/oasr/tune/v2``.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from oasr_core import files
from oasr_core.errors import ConfigurationError
from oasr_core.types import ARCH_RE, Family

SYSTEM_ENV = "OASR_TUNE_SYSTEM_DB"
"""Environment variable overriding the system tier's root directory."""
USER_ENV = "OASR_TUNE_USER_DB"
"""Environment variable moving (or, with ``off``, disabling) the user tier."""
DISABLED_VALUES = frozenset({"", "0", "off", "none", "false", "no"})
"""Values (case-insensitive, stripped) that disable a tier."""
USER_LAYOUT = "v2"
"""Layout version of the user-cache directory. It is not the file schema: files carry
their own ``schema_version`` and migrate in place, so a schema bump keeps tuned data."""

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _disabled(value: str) -> bool:
    return value.strip().lower() in DISABLED_VALUES


def _env_dir(name: str, value: str, *, must_exist: bool) -> Path:
    if "\x00" in value:
        raise ConfigurationError(f"{name}={value!r}: not a usable path")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"{name}={value!r} is not a directory; point it at a "
                                 f"directory or unset it")
    if must_exist and not path.is_dir():
        raise ConfigurationError(f"{name}={value!r} does not exist; point it at the directory "
                                 f"holding sm<NN>/<family>.json files, or unset it")
    return path


def default_system_root(package_dir: Path = _PACKAGE_DIR) -> Path | None:
    """The system tier without the environment override, for ``package_dir`` (oasr_core).

    The installed package data (``<package>/db``) wins; a checkout's ``<repo>/db`` is used
    only when the package's parent holds ``pyproject.toml``, so an unrelated ``db`` folder
    in ``site-packages`` is never taken for the tuning database.
    """
    installed = package_dir / "db"
    if installed.is_dir():
        return installed
    checkout = package_dir.parent
    if (checkout / "db").is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout / "db"
    return None


def system_root() -> Path | None:
    """The system tier's root, or None when there is none (or ``OASR_TUNE_SYSTEM_DB=off``).

    Raises ``ConfigurationError`` when ``OASR_TUNE_SYSTEM_DB`` names no directory.
    """
    value = os.environ.get(SYSTEM_ENV)
    if value is None:
        return default_system_root()
    if _disabled(value):
        return None
    return _env_dir(SYSTEM_ENV, value, must_exist=True)


def user_root() -> Path | None:
    """The user tier's root (created on first write), or None when it is disabled.

    Raises ``ConfigurationError`` when ``OASR_TUNE_USER_DB`` names an existing non-directory.
    """
    value = os.environ.get(USER_ENV)
    if value is None:
        return platformdirs.user_cache_path("oasr") / "tune" / USER_LAYOUT
    if _disabled(value):
        return None
    return _env_dir(USER_ENV, value, must_exist=False)


def tier_path(root: str | os.PathLike[str], arch: str, family: Family) -> Path:
    """The tuning file of ``family`` on ``arch`` under ``root``: ``<root>/sm90/gemm.json``."""
    if not isinstance(arch, str) or not ARCH_RE.match(arch):
        raise ConfigurationError(f"arch family {arch!r} is not like 'sm90'")
    return Path(root) / arch / f"{family.stem}.json"


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file of the tuning file at ``path`` (created directories included).

    A file of the system tier (shipped, often a checkout or a read-only install) is locked
    in this user's cache, ``<user cache>/oasr/locks/<hash of its path>-<name>.lock``, so a
    write never leaves anything in the tier's directory; any other file in the ``.locks/``
    directory beside it (:func:`oasr_core.files.lock_beside`). The user-cache locks are
    swept as they are made (:func:`sweep_system_locks`), so they do not pile up one per path
    ever written. A lock directory or lock file that is a symbolic link is refused.
    """
    import hashlib

    path = Path(path).absolute()
    roots = {r.absolute() for r in (default_system_root(), _system_env_root()) if r is not None}
    if any(path.is_relative_to(root) for root in roots):
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
        locks = platformdirs.user_cache_path("oasr") / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        files.refuse_link(locks)
        lock = locks / f"{digest}-{path.name}.lock"
        files.refuse_link(lock)
        sweep_system_locks(locks, keep=lock)
        return lock
    return files.lock_beside(path)


SYSTEM_LOCK_IDLE_S = 24 * 3600.0
"""A user-cache lock untouched this long, and not held, is removed by the next sweep."""


def sweep_system_locks(locks: Path, *, keep: Path) -> int:
    """Remove lock files under ``locks`` idle for :data:`SYSTEM_LOCK_IDLE_S` that no process
    holds (each is locked without waiting before it is unlinked); ``keep`` stays. Returns
    how many were removed. A removed lock is recreated by the next writer of its path."""
    import time

    import filelock

    removed = 0
    now = time.time()
    try:
        candidates = [p for p in locks.iterdir() if p.name.endswith(".lock") and p != keep]
    except OSError:
        return 0
    for old in candidates:
        try:
            st = os.lstat(old)
            if now - st.st_mtime < SYSTEM_LOCK_IDLE_S:
                continue
            if os.path.islink(old):
                old.unlink()
                removed += 1
                continue
            probe = filelock.FileLock(str(old), timeout=0)
            with probe.acquire(timeout=0):
                old.unlink()
            removed += 1
        except (OSError, filelock.Timeout):
            continue
    return removed


def _system_env_root() -> Path | None:
    try:
        return system_root()
    except ConfigurationError:
        return None
