"""The plugin manager: finds plugins through entry points, loads each in isolation.

There is no module-level manager. :func:`make_plugin_manager` builds one when something needs
plugins (the CLI stores it on ``ctx.obj``; the runtime builds one per process), so importing
``oasr_core`` loads nothing. A plugin that fails to import or register is recorded as a
:class:`~oasr_core.types.PluginLoadFailure` and reported once on stderr (through the
``oasr_core.plugins`` logger) with its name and distribution; the others keep working.

Operator switches, read when a manager is built:

``OASR_PLUGINS=gemm,conv1d``
    load only these entry points (set but empty: load none).
``OASR_DISABLE_PLUGIN_AUTOLOAD=1``
    load no entry point, except those ``OASR_PLUGINS`` names.
``OASR_STRICT_PLUGINS=1``
    every plugin warning becomes an error (:class:`~oasr_core.errors.PluginLoadError` for a
    plugin that does not load or loads slowly, :class:`~oasr_core.errors.PluginError` for
    the rest), raised while the plugins load: a family's conflicting default-lane claims
    included (:meth:`oasr_core.registry.Registry.from_plugin_manager`), not only when the
    family's lane is first resolved.
``OASR_TRACE_PLUGINS=1``
    log every hook call at DEBUG level (pluggy tracing).

Names in the ``oasr-<name>`` namespace: the distribution named ``oasr-<name>`` (compared as
:pep:`503` normalises names, so ``oasr-scaled-mm`` for ``scaled_mm``) owns the entry-point
name, family name and lanes of family ``<name>`` (:func:`namespace_owner`). An environment
holds one distribution per name (installing another replaces it), so no package installed
later can take such a name over, whatever it calls itself. When several distributions
declare one entry-point name, the namespace owner's is loaded, else the first by
distribution name; the others are skipped with one warning naming them all (an error under
``OASR_STRICT_PLUGINS=1``).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import os
import re
import time
from collections.abc import Collection, Iterable
from typing import Any

import pluggy

from oasr_core import hookspecs
from oasr_core.environment import parse_bool
from oasr_core.errors import ConfigurationError, PluginError, PluginLoadError
from oasr_core.types import PluginLoadFailure
from oasr_core.variables import check_environment

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "oasr"
SLOW_IMPORT_S = 5.0
"""An entry point whose import takes longer than this many seconds is reported (an error
under ``OASR_STRICT_PLUGINS=1``): every oasr command and process waits for it. The
first-party plugins import in under 0.1 s (their hooks import torch and CUTLASS lazily);
the bound leaves a loaded machine with a cold file cache fifty times that."""


def env_flag(name: str) -> bool:
    """Read a boolean environment switch; a malformed value is a ConfigurationError."""
    return parse_bool(name, os.environ.get(name, ""))


def env_plugin_names() -> frozenset[str] | None:
    """The entry-point names ``OASR_PLUGINS`` selects, or None when it is unset."""
    raw = os.environ.get("OASR_PLUGINS")
    if raw is None:
        return None
    return frozenset(n.strip() for n in raw.split(",") if n.strip())


def describe_distribution(dist: importlib.metadata.Distribution | None) -> str:
    """``"name version"`` of a distribution, or ``"?"`` when the plugin has none."""
    if dist is None:
        return "?"
    return f"{dist.metadata['Name']} {dist.version}"


def who(plugin: str, distribution: str) -> str:
    """How messages name a plugin: ``plugin 'gemm' (oasr-gemm 0.1.0)``."""
    where = "registered in-process" if distribution == "?" else distribution
    return f"plugin {plugin!r} ({where})"


def normalized(name: str) -> str:
    """``name`` as :pep:`503` compares distribution names (``Scaled_MM`` -> ``scaled-mm``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def namespace_owner(name: str, distribution: str | None) -> bool:
    """Whether ``distribution`` is ``oasr-<name>``, the one distribution that owns ``name``
    (an entry-point, family or lane-family name; see the module docstring)."""
    return distribution is not None and normalized(distribution) == "oasr-" + normalized(name)


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    return name.lower() if isinstance(name, str) else ""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class OasrPluginManager(pluggy.PluginManager):
    """A pluggy manager for project ``oasr`` with isolated entry-point loading.

    Build it with :func:`make_plugin_manager`. ``failures`` lists the plugins that could not
    be loaded; ``strict`` makes every failure raise instead; ``verbose`` adds tracebacks to the
    warnings.
    """

    def __init__(self, *, strict: bool = False, verbose: bool = False) -> None:
        super().__init__("oasr")
        self.add_hookspecs(hookspecs)
        self.strict = strict
        self.verbose = verbose
        self.failures: list[PluginLoadFailure] = []
        self._reported: set[str] = set()
        # Which installed distribution provided each entry-point plugin, by plugin name. The
        # host keeps this map itself (pluggy's own record of it is private and changes between
        # releases); plugins registered in-process have no entry.
        self._distributions: dict[str, importlib.metadata.Distribution] = {}

    def get_canonical_name(self, plugin: object) -> str:
        """A readable default name (module or class name) for a plugin registered directly."""
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
        if self.has_plugin(name):
            return f"{name}@{id(plugin):x}"
        return name

    def distribution(self, plugin_name: str) -> str:
        """``"name version"`` of the distribution that provided ``plugin_name``, or ``"?"``."""
        if self.get_plugin(plugin_name) is None:
            return "?"
        return describe_distribution(self._distributions.get(plugin_name))

    def plugin_distributions(self) -> list[tuple[str, importlib.metadata.Distribution]]:
        """``(plugin name, distribution)`` of every registered entry-point plugin, in load order."""
        return [(name, dist) for name, dist in self._distributions.items()
                if self.get_plugin(name) is not None]

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        """Unregister a plugin (pluggy's call) and forget the distribution it came from."""
        if name is None and plugin is not None:
            name = self.get_name(plugin)
        removed = super().unregister(plugin, name)
        if name is not None:
            self._distributions.pop(name, None)
        return removed

    def report(
        self,
        message: str,
        *,
        exc: BaseException | None = None,
        level: int = logging.WARNING,
    ) -> None:
        """Log a plugin problem once per manager: one line, the traceback only when verbose."""
        if message in self._reported:
            return
        self._reported.add(message)
        severity = "error" if level >= logging.ERROR else "warning"
        if exc is not None and self.verbose:
            log.log(level, "oasr %s: %s", severity, message, exc_info=exc)
            return
        log.log(level, "oasr %s: %s", severity, message)
        if exc is not None:
            log.debug("traceback of the failure above", exc_info=exc)

    def load_entrypoints(
        self, group: str = ENTRY_POINT_GROUP, *, only: Collection[str] | None = None
    ) -> int:
        """Load and register every entry point of ``group``, each in isolation.

        ``only`` restricts loading to these entry-point names (unknown names are reported).
        Blocked names are skipped. Returns the number of plugins registered by this call.
        """
        by_name: dict[str, list[importlib.metadata.EntryPoint]] = {}
        for ep in importlib.metadata.entry_points(group=group):
            by_name.setdefault(ep.name, []).append(ep)
        if only is not None:
            self._check_selection(only, by_name, group)
        loaded = 0
        # Sorted by (distribution, entry-point name), not sys.path order, so registration
        # order, and with it every order the registry reports, is the same on every machine.
        for name, eps in sorted(by_name.items(), key=lambda item: (
                min(_dist_name(ep) for ep in item[1]), item[0])):
            if (only is not None and name not in only) or self.is_blocked(name):
                continue
            if self.get_plugin(name) is not None:
                continue
            if len(eps) > 1:
                eps = self._entry_point_conflict(name, eps)
            loaded += self._load_one(eps[0])
        return loaded

    def _check_selection(
        self, only: Collection[str], by_name: dict[str, Any], group: str
    ) -> None:
        missing = sorted(set(only) - set(by_name))
        if not missing:
            return
        installed = ", ".join(sorted(by_name)) or "none"
        message = (
            f"OASR_PLUGINS names {', '.join(map(repr, missing))}, but no installed "
            f"{group!r} entry point has that name (installed: {installed})"
        )
        if self.strict:
            raise ConfigurationError(message)
        self.report(message)

    def _entry_point_conflict(
        self, name: str, eps: list[importlib.metadata.EntryPoint]
    ) -> list[importlib.metadata.EntryPoint]:
        """Order the entry points sharing ``name``: the namespace owner's first, then by
        distribution name; report the others (skipped) in one line naming every one."""
        eps = sorted(eps, key=lambda ep: (not namespace_owner(name, _dist_name(ep)),
                                          _dist_name(ep)))
        kept = describe_distribution(eps[0].dist)
        others = [describe_distribution(ep.dist) for ep in eps[1:]]
        why = (f"it is the {name!r} namespace owner" if namespace_owner(name, _dist_name(eps[0]))
               else "it sorts first by distribution name")
        message = (
            f"plugin name {name!r} is provided by {kept} and {' and '.join(others)}; {kept} is "
            f"loaded ({why}) and {' and '.join(others)} skipped. Please report the conflict to "
            "the plugin authors"
        )
        if self.strict:
            raise PluginLoadError(message)
        for dist in others:
            self.failures.append(PluginLoadFailure(name, dist, message, "duplicate"))
        self.report(message, level=logging.ERROR)
        return eps

    def _load_one(self, ep: importlib.metadata.EntryPoint) -> int:
        dist = describe_distribution(ep.dist)
        try:
            started = time.perf_counter()
            plugin = ep.load()
            seconds = time.perf_counter() - started
            self.register(plugin, name=ep.name)
        except (Exception, SystemExit) as exc:  # a plugin calling sys.exit() must not end the host
            if self.has_plugin(ep.name):
                self.unregister(name=ep.name)  # register() fails midway on a bad signature
            self._load_failure(ep.name, dist, exc, "failed to load")
            return 0
        unknown = self._unknown_hooks(plugin)
        if unknown:
            self.unregister(plugin)
            self._load_failure(ep.name, dist, PluginError(unknown), "is invalid")
            return 0
        if ep.dist is not None:
            self._distributions[ep.name] = ep.dist
        if seconds > SLOW_IMPORT_S:
            self._slow(ep.name, dist, seconds)
        return 1

    def _slow(self, name: str, dist: str, seconds: float) -> None:
        """Report a plugin whose import took ``seconds`` (over :data:`SLOW_IMPORT_S`); under
        strict, unregister it and raise."""
        what = (f"{who(name, dist)} took {seconds:.1f} s to import (the bound is "
                f"{SLOW_IMPORT_S:g} s): every oasr command waits for it")
        if self.strict:
            self.unregister(name=name)
            raise PluginLoadError(f"{what}; it is refused (OASR_STRICT_PLUGINS=1)")
        self.report(f"{what}; make its import lazy (OASR_STRICT_PLUGINS=1 refuses it; "
                    f"-p no:{name} or OASR_PLUGINS leave it out)")

    def _load_failure(self, name: str, dist: str, exc: BaseException, what: str) -> None:
        error = _one_line(exc)
        message = (
            f"{who(name, dist)} {what} and is skipped: {error} "
            f"(OASR_STRICT_PLUGINS=1 makes this an error; -p no:{name} or OASR_PLUGINS "
            "leave it out)"
        )
        if self.strict:
            raise PluginLoadError(f"{who(name, dist)} {what}: {error}") from exc
        self.failures.append(PluginLoadFailure(name, dist, error, "load"))
        self.report(message, exc=exc)

    def _unknown_hooks(self, plugin: object) -> str:
        """Why ``plugin`` implements hooks no spec declares ('' when it does not)."""
        problems = []
        for caller in self.get_hookcallers(plugin) or ():
            if caller.has_spec():
                continue
            impls = [i for i in caller.get_hookimpls() if i.plugin is plugin]
            if all(i.optionalhook for i in impls):
                continue
            hint = difflib.get_close_matches(caller.name, self._spec_names(), n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            problems.append(f"unknown hook {caller.name!r}{did_you_mean}")
        return "; ".join(problems)

    def _spec_names(self) -> list[str]:
        return [name for name in vars(hookspecs) if name.startswith("oasr_")]

    def check_pending(self) -> None:
        """Verify that every registered hook implementation has a spec.

        Raises :class:`~oasr_core.errors.PluginError` naming the plugin, its distribution and
        the unknown hook (with the closest hook name, which is usually the intended one).
        """
        for name, plugin in self.list_name_plugin():
            if plugin is None:
                continue
            problem = self._unknown_hooks(plugin)
            if problem:
                raise PluginError(
                    f"{who(name, self.distribution(name))}: {problem}; every oasr hook is "
                    "listed in oasr_core.hookspecs"
                )
        try:
            super().check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(_one_line(exc)) from exc


def make_plugin_manager(
    *,
    load_entrypoints: bool = True,
    block: Iterable[str] = (),
    strict: bool | None = None,
    verbose: bool = False,
) -> OasrPluginManager:
    """Build a plugin manager and (unless told not to) load the ``oasr`` entry points.

    :param load_entrypoints: load installed plugins; ``False`` gives an empty manager (tests,
        embedding). ``OASR_DISABLE_PLUGIN_AUTOLOAD=1`` has the same effect, except that names
        listed in ``OASR_PLUGINS`` are still loaded.
    :param block: plugin names never to register (the CLI's ``-p no:<name>``).
    :param strict: raise on any plugin failure; ``None`` reads ``OASR_STRICT_PLUGINS``.
    :param verbose: include tracebacks in failure warnings (the CLI's ``-v``).
    :raises ConfigurationError: a malformed ``OASR_*`` variable
        (:func:`oasr_core.variables.check_environment`).
    :raises PluginLoadError: in strict mode, a plugin that does not load.
    """
    check_environment()  # every OASR_* variable, before anything reads one
    if strict is None:
        strict = env_flag("OASR_STRICT_PLUGINS")
    trace = env_flag("OASR_TRACE_PLUGINS")
    autoload = not env_flag("OASR_DISABLE_PLUGIN_AUTOLOAD")
    only = env_plugin_names()
    pm = OasrPluginManager(strict=strict, verbose=verbose)
    for name in block:
        pm.set_blocked(name)
    if trace:
        pm.trace.root.setwriter(log.debug)
        pm.enable_tracing()
    if load_entrypoints and (autoload or only):
        pm.load_entrypoints(ENTRY_POINT_GROUP, only=only)
    pm.check_pending()
    return pm
