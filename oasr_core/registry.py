"""Families and lanes by name and by arch, collected from a plugin manager.

:meth:`Registry.from_plugin_manager` calls each plugin's registration hooks on their own, so
every record is attributed to the plugin and distribution that returned it, and one broken
plugin costs only its own records.

Name ownership is deterministic and never silent, and a package installed later cannot take
a name over. When several plugins register one family name, its **owner** is, in this order:
the distribution named ``oasr-<family>`` (:func:`oasr_core.plugins.namespace_owner`: an
environment holds one distribution per name, so no other package can be it), then the plugin
whose entry-point name is the family's name (``gemm = "oasr_gemm.hooks"``), then the first by
(distribution name, plugin name); in-process plugins, which have no distribution, sort before
installed ones. A lane name registered several times goes to the registration from the
distribution (or in-process plugin) that owns the lane's family, then to a lane of a family
owned by its namespace distribution, then of a family named by its own entry point, then by
(distribution name, plugin name). So a third party that registers its own family with a lane
named like ``sm90_wgmma`` cannot take that lane from ``oasr-gemm``, whatever its distribution
is called. A plugin registering one name twice keeps its first record. Every refused
registration is reported in one line naming the owner and the refused provider (an error
under ``strict``), and the owner keeps working: a third-party package cannot disable a
family or lane by reusing its name. Among the lanes ``default_on`` an arch, the family
owner's lane is the default; other claims are refused the same way.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

from oasr_core.errors import PluginError, UnknownFamilyError
from oasr_core.plugins import OasrPluginManager, namespace_owner, who
from oasr_core.types import Family, Lane, PluginLoadFailure

Kind = Literal["family", "lane"]
_HOOKS: Mapping[Kind, str] = {"family": "oasr_register_families", "lane": "oasr_register_lanes"}
_RECORD: Mapping[Kind, type] = {"family": Family, "lane": Lane}


@attrs.frozen
class Provider:
    """Who registered a family or lane: plugin name, distribution and its version."""

    plugin: str
    """Plugin (entry-point) name."""
    distribution: str | None
    """Distribution name (``oasr-gemm``), or None for a plugin registered in-process."""
    version: str | None
    """Distribution version, or None with ``distribution``."""

    @property
    def label(self) -> str:
        """``"oasr-gemm 0.1.0"``, or ``"?"`` (the :class:`PluginLoadFailure` spelling)."""
        return f"{self.distribution} {self.version}" if self.distribution else "?"

    def __str__(self) -> str:
        return who(self.plugin, self.label)


def provider_of(pm: OasrPluginManager, plugin: object) -> Provider:
    """The :class:`Provider` of a plugin object registered on ``pm``."""
    name = pm.get_name(plugin) or repr(plugin)
    label = pm.distribution(name)
    if label == "?":
        return Provider(name, None, None)
    dist, _, version = label.rpartition(" ")
    return Provider(name, dist, version)


@attrs.define
class _Collector:
    """The mutable state of one registry build: the failures found."""

    pm: OasrPluginManager
    strict: bool
    failures: list[PluginLoadFailure] = attrs.Factory(list)

    def fail(
        self,
        providers: Iterable[Provider],
        kind: str,
        message: str,
        *,
        exc: BaseException | None = None,
        level: int = logging.WARNING,
    ) -> None:
        if self.strict:
            raise PluginError(message) from exc
        for p in dict.fromkeys(providers):
            self.failures.append(PluginLoadFailure(p.plugin, p.label, message, kind))
        self.pm.report(message, exc=exc, level=level)

    def collect(self, kind: Kind, owners: Mapping[str, Provider] | None = None
                ) -> dict[str, tuple[Any, Provider]]:
        """Call every implementation of ``kind``'s hook; keep the valid records, one per name
        (the module docstring says which). ``owners`` are the family owners, for lanes."""
        hook_name = _HOOKS[kind]
        kwargs: dict[str, Any] = {}
        found: list[tuple[Any, Provider]] = []
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            if impl.wrapper or impl.hookwrapper:
                continue
            provider = provider_of(self.pm, impl.plugin)
            try:
                result = impl.function(*[kwargs[arg] for arg in impl.argnames])
                records, problems = _check_result(result, kind)
            except Exception as exc:
                self.fail([provider], "record", f"{provider} hook {hook_name} raised "
                          f"{type(exc).__name__}: {' '.join(str(exc).split())}; none of its "
                          f"{kind} records are used", exc=exc)
                continue
            if problems:
                self.fail([provider], "record", f"{provider} hook {hook_name}: "
                          f"{'; '.join(problems)} (ignored; its valid records are kept)")
            found.extend((r, provider) for r in records)
        return self._unique(kind, found, owners or {})

    def _unique(self, kind: Kind, found: list[tuple[Any, Provider]],
                owners: Mapping[str, Provider]) -> dict[str, Any]:
        by_name: dict[str, list[tuple[int, Any, Provider]]] = {}
        for i, (record, provider) in enumerate(found):
            by_name.setdefault(record.name, []).append((i, record, provider))
        kept: dict[int, tuple[Any, Provider]] = {}
        for name, regs in by_name.items():
            ranked = sorted(regs, key=lambda r: (*_rank(kind, r[1], r[2], owners), r[0]))
            _, record, owner = ranked[0]
            kept[ranked[0][0]] = (record, owner)
            for _, _, refused in ranked[1:]:
                self.fail([refused], "duplicate", _conflict(kind, name, owner, refused),
                          level=logging.ERROR)
        return {found[i][0].name: kept[i] for i in sorted(kept)}


def same_source(a: Provider, b: Provider) -> bool:
    """Whether two providers are one distribution (or, in-process, one plugin)."""
    if a.distribution is None or b.distribution is None:
        return a.plugin == b.plugin and a.distribution == b.distribution
    return a.distribution == b.distribution


def _rank(kind: Kind, record: Any, provider: Provider,
          owners: Mapping[str, Provider]) -> tuple[Any, ...]:
    """Sort key of one registration of a name: lowest owns it (see the module docstring)."""
    order = (provider.distribution or "", provider.plugin)
    if kind == "family":
        return (not namespace_owner(record.name, provider.distribution),
                provider.plugin != record.name, *order)
    owner = owners.get(record.family)
    own = owner is not None and same_source(owner, provider)
    namespaced = owner is not None and namespace_owner(record.family, owner.distribution)
    canonical = owner is not None and owner.plugin == record.family
    return (not own, not namespaced, not canonical, *order)


def _conflict(kind: Kind, name: str, owner: Provider, refused: Provider) -> str:
    if owner == refused:
        return (f"{kind} {name!r} is registered more than once by {owner}; the first record "
                "is kept and the others are refused. Please report this to the plugin author")
    return (
        f"{kind} {name!r} is registered by {owner} and {refused}; {owner} owns it and the "
        f"registration of {refused} is refused. Please report this conflict to the plugin "
        "author(s); to silence it, uninstall one distribution or leave one plugin out "
        "(OASR_PLUGINS, or -p no:<plugin>)"
    )


def _check_result(result: Any, kind: Kind) -> tuple[list[Any], list[str]]:
    """Split a registration hook's return value into good records and problem descriptions."""
    expected = _RECORD[kind]
    if result is None:
        return [], []
    if isinstance(result, (str, bytes, Mapping)) or not isinstance(result, Iterable):
        problem = f"returned {_describe(result, kind)}"
        if not isinstance(result, (type, expected)):
            problem += f"; expects an iterable of oasr_core.types.{expected.__name__} instances"
        return [], [problem]
    records, problems = [], []
    for i, item in enumerate(result):
        if isinstance(item, expected):
            records.append(item)
        else:
            problems.append(f"item {i} is {_describe(item, kind)}")
    return records, problems


def _describe(value: Any, kind: Kind) -> str:
    """What a bad registration value is, phrased to follow "returned" or "item 3 is"."""
    expected = _RECORD[kind]
    if isinstance(value, type) and issubclass(value, expected):
        return (f"the class {value.__qualname__}: {_HOOKS[kind]} expects instances. "
                "Have you forgotten the `()`?")
    if isinstance(value, expected):
        return f"a single {expected.__name__}; return a list of them"
    for other_kind, other in _RECORD.items():
        if isinstance(value, other):
            return f"a {other.__name__}, which belongs in {_HOOKS[other_kind]}"
    text = repr(value)
    text = text[:57] + "..." if len(text) > 60 else text
    return f"{text} of type {type(value).__qualname__}, not a {expected.__name__}"


@attrs.frozen(eq=False)
class Registry:
    """The families and lanes of one plugin manager, by name, each with its provider.

    Immutable: a new set of plugins means a new registry (a new epoch for the runtime).
    """

    pm: OasrPluginManager
    """The manager the registry was built from."""
    families: Mapping[str, Family] = attrs.field(converter=MappingProxyType)
    """Registered families by name, in registration order."""
    lanes: Mapping[str, Lane] = attrs.field(converter=MappingProxyType)
    """Registered lanes by name, in registration order."""
    failures: tuple[PluginLoadFailure, ...] = attrs.field(converter=tuple)
    """Load failures of the manager, then the records this build rejected."""
    strict: bool = False
    """Whether a plugin's contract violation raises (else it is reported and ignored)."""
    _providers: Mapping[tuple[Kind, str], Provider] = attrs.field(
        factory=dict, converter=MappingProxyType)

    @classmethod
    def from_plugin_manager(cls, pm: OasrPluginManager, *, strict: bool | None = None) -> Registry:
        """Collect every plugin's families and lanes.

        :param strict: raise :class:`PluginError` on the first bad record or conflict instead
            of reporting it and dropping the records; ``None`` follows ``pm.strict``.
        """
        strict = bool(getattr(pm, "strict", False)) if strict is None else strict
        c = _Collector(pm, strict)
        families = c.collect("family")
        lanes = c.collect("lane", {n: p for n, (_, p) in families.items()})
        for name, (lane, provider) in list(lanes.items()):
            if lane.family in families:
                continue
            c.fail([provider], "record", f"{provider} registers lane {name!r} of family "
                   f"{lane.family!r}, which no loaded plugin registers; the lane is dropped "
                   f"(install or fix the plugin that provides {lane.family!r})")
            del lanes[name]
        providers = {("family", n): p for n, (_, p) in families.items()}
        providers.update({("lane", n): p for n, (_, p) in lanes.items()})
        registry = cls(
            pm=pm,
            families={n: r for n, (r, _) in families.items()},
            lanes={n: r for n, (r, _) in lanes.items()},
            failures=(*getattr(pm, "failures", ()), *c.failures),
            strict=strict,
            providers=providers,
        )
        if strict:
            registry.check_default_claims()
        return registry

    def check_default_claims(self) -> None:
        """Resolve every (family, arch) where several lanes claim ``default_on``: under
        ``strict`` a claim the family's owner does not make, or a tie nobody settles, raises
        :class:`PluginError` here, when the plugins load, and not first when a shape of that
        family is resolved (:meth:`active_lane`, which this calls)."""
        for family in self.families:
            lanes = self.lanes_of(family)
            for arch in sorted({a for lane in lanes for a in lane.default_on}):
                if sum(arch in lane.default_on for lane in lanes) > 1:
                    self.active_lane(family, arch)

    def family(self, name: str) -> Family:
        """The family ``name``; :class:`UnknownFamilyError` lists what is available."""
        try:
            return self.families[name]
        except KeyError:
            raise UnknownFamilyError(self._unknown("family", name)) from None

    def lane(self, name: str) -> Lane:
        """The lane ``name``; :class:`UnknownFamilyError` lists what is available."""
        try:
            return self.lanes[name]
        except KeyError:
            raise UnknownFamilyError(self._unknown("lane", name)) from None

    def lanes_of(self, family: str, arch: str | None = None) -> tuple[Lane, ...]:
        """The lanes of ``family`` (running on ``arch`` when given), in registration order."""
        self.family(family)
        return tuple(
            lane for lane in self.lanes.values()
            if lane.family == family and (arch is None or arch in lane.arch_families)
        )

    def active_lane(self, family: str, arch: str) -> Lane | None:
        """The lane that serves ``family`` on ``arch``, or None when no lane runs there.

        Asks the ``oasr_select_lane`` hook first; without an answer, the unique lane that is
        ``default_on`` the arch, else the only lane running on it.
        """
        fam = self.family(family)
        lanes = self.lanes_of(family, arch)
        answer = self.pm.hook.oasr_select_lane(family=fam, arch=arch, lanes=lanes)
        if answer is not None:
            chosen = next((lane for lane in lanes if lane.name == answer), None)
            if chosen is not None:
                return chosen
            self._bad_lane_answer(fam, arch, lanes, answer)
        defaults = [lane for lane in lanes if arch in lane.default_on]
        if len(defaults) > 1:
            defaults = self._owned_default(fam, arch, defaults)
        if len(defaults) > 1:
            named = " and ".join(f"lane {lane.name!r} of {self.provider('lane', lane.name)}"
                                 for lane in defaults)
            raise PluginError(
                f"{named} are all the default for family {family!r} on {arch}; please report "
                "this to the plugin author(s). Until then, leave one plugin out (OASR_PLUGINS, "
                "-p no:<plugin>) or pick a lane with an oasr_select_lane hook"
            )
        if defaults:
            return defaults[0]
        return lanes[0] if len(lanes) == 1 else None

    def _owned_default(self, fam: Family, arch: str, defaults: list[Lane]) -> list[Lane]:
        """The family owner's lane alone when exactly one of ``defaults`` is its (the other
        claims reported once each); else ``defaults`` unchanged."""
        owner = self._providers.get(("family", fam.name))
        owned = [lane for lane in defaults if owner is not None
                 and same_source(owner, self._providers["lane", lane.name])]
        if len(owned) != 1:
            return defaults
        for lane in defaults:
            if lane is not owned[0]:
                message = (f"lane {lane.name!r} of {self.provider('lane', lane.name)} claims to "
                           f"be the default for family {fam.name!r} on {arch}, as does lane "
                           f"{owned[0].name!r} of the family's owner {owner}; the owner's lane "
                           "is the default (pick another with an oasr_select_lane hook)")
                if self.strict:
                    raise PluginError(message)
                self.pm.report(message)
        return owned

    def _bad_lane_answer(
        self, fam: Family, arch: str, lanes: tuple[Lane, ...], answer: Any
    ) -> None:
        impls = self.pm.hook.oasr_select_lane.get_hookimpls()
        plugins = ", ".join(str(provider_of(self.pm, i.plugin)) for i in impls) or "none"
        names = ", ".join(lane.name for lane in lanes) or "none"
        got = f"a Lane object ({answer.name!r}); return its name" if isinstance(
            answer, Lane) else repr(answer)
        message = (
            f"oasr_select_lane answered {got} for family {fam.name!r} on {arch}, which is not "
            f"one of its lanes there ({names}); the answer is ignored. Implemented by: {plugins}"
        )
        if self.strict:
            raise PluginError(message)
        self.pm.report(message)

    def provider(self, kind: Kind, name: str) -> Provider:
        """Who registered the family or lane ``name`` (``kind`` is ``"family"`` or ``"lane"``)."""
        if kind not in _HOOKS:
            raise ValueError(f"kind must be 'family' or 'lane', not {kind!r}")
        try:
            return self._providers[kind, name]
        except KeyError:
            raise UnknownFamilyError(self._unknown(kind, name)) from None

    def describe(self) -> list[dict[str, Any]]:
        """One JSON-ready row per plugin (loaded, blocked or failed) for ``oasr plugins``."""
        rows = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:
                rows.append(self._row(name, Provider(name, None, None), "blocked", []))
                continue
            hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or ())
            rows.append(self._row(name, provider_of(self.pm, plugin), "loaded", hooks))
        listed = {row["name"] for row in rows}
        for failure in self.failures:
            if failure.plugin in listed:
                continue
            listed.add(failure.plugin)
            dist, _, version = failure.distribution.rpartition(" ")
            provider = Provider(failure.plugin, dist or None, version if dist else None)
            rows.append(self._row(failure.plugin, provider, "failed", []))
        return rows

    def _row(self, name: str, provider: Provider, status: str, hooks: list[str]) -> dict:
        return {
            "name": name,
            "distribution": provider.distribution,
            "version": provider.version,
            "status": status,
            "hooks": hooks,
            "families": self._names_of("family", name),
            "lanes": self._names_of("lane", name),
            "failures": [{"kind": f.kind, "error": f.error}
                         for f in self.failures if f.plugin == name],
        }

    def _names_of(self, kind: Kind, plugin: str) -> list[str]:
        return [n for (k, n), p in self._providers.items() if k == kind and p.plugin == plugin]

    def _unknown(self, kind: Kind, name: str) -> str:
        available = self.families if kind == "family" else self.lanes
        close = difflib.get_close_matches(str(name), list(available), n=1)
        text = f"no plugin registers {kind} {name!r}"
        if close:
            text += f" (did you mean {close[0]!r}?)"
        text += f"; available {'families' if kind == 'family' else 'lanes'}: "
        text += ", ".join(available) or "none"
        failed: dict[str, dict[str, None]] = {}
        for f in self.failures:
            failed.setdefault(who(f.plugin, f.distribution), {})[f.kind] = None
        if failed:
            text += "; plugins that failed: " + ", ".join(
                f"{plugin} [{', '.join(kinds)}]" for plugin, kinds in failed.items())
        return text + ". Run `oasr plugins` to see what is installed and loaded"
