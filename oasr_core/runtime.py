"""The process-wide selection state: plugins, tier snapshots, epochs, counters.

Nothing here runs at import. The first :func:`get_runtime` call builds the plugin manager and
registry; tier files are read once per (family, arch) per epoch; :func:`reload` starts a new
epoch (and tells registered listeners, e.g. an engine releasing captured graphs). Nothing else
changes a selection inside a process, so a captured graph and an eager call always run the
same kernel.

Everything an epoch must forget hangs off the runtime: its :class:`~oasr_core.epoch.Epoch`
(``Runtime.state``: the selection memo, every family's call plans, warn-once keys), the tier
snapshots, and the active autotune session. A reload replaces the epoch (the old one is closed,
which empties its tables); :func:`install_runtime` closes the outgoing runtime's epoch and
swaps. Families bind to it through :mod:`oasr_core.kit`; nothing reaches into other modules.
Per-process facts that never change (a device's arch and SM count) are cached here too.

One runtime per process is deliberate: an engine's op calls reach selection through
:func:`oasr_core.select` with no handle to pass around. Tests install their own with
:func:`install_runtime` (a fresh plugin manager, no autoload).
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from oasr_core import database, stamps
from oasr_core.arch import ArchProfile
from oasr_core.cost_model import ModelTier
from oasr_core.cost_model.model import KIND, CostModel
from oasr_core.epoch import Epoch
from oasr_core.errors import ConfigurationError, DatabaseError, OasrWarning
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Registry
from oasr_core.tier_configs import referenced_ids

if TYPE_CHECKING:
    from oasr_core.database import TuningFile
    from oasr_core.plugins import OasrPluginManager
    from oasr_core.registry import Registry
    from oasr_core.types import Family, Tier

_LOCK = threading.RLock()
_RUNTIME: Runtime | None = None


MODEL_TIER_PLUGIN = "oasr_core.model_tier"
"""The plugin name of the core's own cost-model tier (``oasr -p no:oasr_core.model_tier``)."""

@attrs.frozen
class TierFiles:
    """The two tier files of one (arch, family) as read in one epoch."""

    family: str
    arch: str
    user_path: Path | None
    system_path: Path | None
    user: TuningFile | None
    system: TuningFile | None
    problems: tuple[str, ...] = ()
    """One line per file that exists but was skipped (malformed, hard-validator mismatch)."""


@attrs.define(eq=False)
class Runtime:
    """Selection state of one process (see the module docstring)."""

    pm: OasrPluginManager
    epoch: int = 0
    counts: Counter = attrs.field(factory=Counter)
    """Resolutions per (family, op, tier value); memoised calls are not recounted."""
    state: Epoch = attrs.field(factory=Epoch)
    """This epoch's forgettable state: memo tables (selection, call plans), warn-once keys."""
    session: Any = None
    """The active autotune session, asked on a selection memo miss (None: none)."""
    _registry: Registry | None = None
    _tiers: dict[tuple[str, str], TierFiles] = attrs.field(factory=dict)
    _warned: set[str] = attrs.field(factory=set)
    _listeners: list[Callable[[int], None]] = attrs.field(factory=list)
    devices: dict[int | None, DeviceFacts | None] = attrs.field(factory=dict)
    """What each CUDA device was found to be (by index; None: the current one), asked once;
    a test may seed it to stand for a GPU."""

    def __attrs_post_init__(self) -> None:
        # The core's own cost-model tier answers oasr_model_select last (trylast), after any
        # plugin's; registered once per manager so tests may register their own instance.
        if not any(isinstance(p, ModelTier) for p in self.pm.get_plugins()):
            self.pm.register(ModelTier(live=ArchProfile.query), name=MODEL_TIER_PLUGIN)

    @property
    def registry(self) -> Registry:
        """The registry built from the plugin manager (once per runtime)."""
        if self._registry is None:
            with _LOCK:
                if self._registry is None:
                    self._registry = Registry.from_plugin_manager(self.pm)
        return self._registry

    def device_arch(self) -> str | None:
        """Arch family of the current CUDA device (``sm90``), or None without one."""
        facts = self.device(None)
        return facts.arch if facts is not None else None

    def device(self, index: int | None) -> DeviceFacts | None:
        """Arch family and SM count of CUDA device ``index`` (None: the device current at the
        first ask), asked of torch once per runtime; None without a CUDA device."""
        try:
            return self.devices[index]
        except KeyError:
            pass
        facts = DeviceFacts.query(index)
        self.devices[index] = facts
        return facts

    def warn_once(self, key: str, message: str) -> None:
        """Emit ``message`` as an :class:`OasrWarning` the first time ``key`` is seen."""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, OasrWarning, stacklevel=3)

    def tiers(self, family: Family, arch: str) -> TierFiles:
        """The user and system files of ``family`` on ``arch`` for this epoch."""
        key = (family.name, arch)
        got = self._tiers.get(key)
        if got is None:
            with _LOCK:
                got = self._tiers.get(key)
                if got is None:
                    got = self._load_tiers(family, arch)
                    self._tiers[key] = got
        return got

    def _load_tiers(self, family: Family, arch: str) -> TierFiles:
        lanes = {lane.name: lane for lane in self.registry.lanes_of(family.name)}
        files: dict[str, TuningFile | None] = {}
        paths: dict[str, Path | None] = {}
        problems: list[str] = []
        for tier, root in (("user", database.user_root()), ("system", database.system_root())):
            path = database.tier_path(root, arch, family) if root is not None else None
            paths[tier], files[tier] = path, None
            if path is None or not path.exists():
                continue
            try:
                files[tier] = database.open_tuning_file(path, family=family, arch=arch, lanes=lanes)
            except DatabaseError as exc:
                problems.append(f"{tier} tier skipped: {exc}")
                self.warn_once(f"skip:{path}:{self.epoch}",
                               f"oasr: {tier} tier file skipped: {exc}")
                continue
            why = _unusable_model(files[tier].model)
            if why is not None:
                # The entries stay in service; only the model tier loses this payload.
                files[tier] = attrs.evolve(files[tier], model=None)
                problems.append(f"{tier} tier model unusable: {path}: {why}")
                self.warn_once(f"model:{path}:{self.epoch}",
                               f"oasr: {tier} tier file {path}: its cost model is unusable "
                               f"({why}); the model tier skips it and the next tier serves")
        return TierFiles(family=family.name, arch=arch, user_path=paths["user"],
                         system_path=paths["system"], user=files["user"],
                         system=files["system"], problems=tuple(problems))

    def referenced_configs(self, family: str, arch: str, lane: str,
                           ops: frozenset[str] | set[str] | None = None) -> frozenset[str]:
        """Config ids of ``lane`` that this epoch's tier files can serve (entries and basis).

        A lane's production module compiles these plus its default and coverage basis, so
        that every config a loaded tier names is in the module. Besides the configs the
        entries name, a sentinel region counts for the config it launches there
        (:func:`oasr_core.tier_configs.sentinel_ids`: ``default`` the file's stamped default
        id, ``heuristic`` the shape heuristic's picks at the entry's region bounds and points).
        ``ops`` (None: every op) keeps the entries of those ops only, and the basis only when
        None: a family whose ops link different kernels (gemm's fused-residual units) asks
        per op.
        """
        fam = self.registry.family(family)
        tiers = self.tiers(fam, arch)
        own = next((x for x in self.registry.lanes_of(family) if x.name == lane), None)
        ids: set[str] = set()
        for tf in (tiers.user, tiers.system):
            if tf is not None:
                ids.update(referenced_ids(fam, own, lane, tf, ops))
        return frozenset(ids)

    def count(self, family: str, op: str, tier: Tier) -> None:
        """Count one resolution."""
        self.counts[(family, op, tier.value)] += 1

    def add_reload_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(new_epoch)`` after every :func:`reload` (e.g. drop captured graphs)."""
        self._listeners.append(listener)

    def remove_reload_listener(self, listener: Callable[[int], None]) -> None:
        """Undo :meth:`add_reload_listener`."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def reload(self) -> int:
        """Start a new epoch: files are re-read and every selection is resolved anew.

        The epoch state is swapped for a fresh one (the old is closed: its memo tables empty),
        then each reload listener is told the new epoch's number.
        """

        with _LOCK:
            self.epoch += 1
            old, self.state = self.state, Epoch(number=self.epoch)
            old.close()
            self._tiers.clear()
            stamps.reset_caches()  # the SKU and nvcc stamps: a new epoch may see new ones
            listeners = list(self._listeners)
        for listener in listeners:
            listener(self.epoch)
        return self.epoch


def _unusable_model(payload: Any) -> str | None:
    """Why a tuning file's ``model`` payload cannot be used, or None (absent, usable, or a
    payload of another kind, which belongs to the plugin that reads it)."""
    if payload is None:
        return None
    from collections.abc import Mapping

    if not isinstance(payload, Mapping):
        return f"the model payload is a {type(payload).__name__}, not an object"
    if payload.get("kind") != KIND:
        return None
    try:
        CostModel.from_json(payload)
    except ConfigurationError as exc:
        return str(exc)
    return None


def get_runtime() -> Runtime:
    """The process runtime, built on first use (this loads the installed plugins)."""
    global _RUNTIME
    rt = _RUNTIME
    if rt is None:
        with _LOCK:
            if _RUNTIME is None:
                _RUNTIME = Runtime(pm=make_plugin_manager())
            rt = _RUNTIME
    return rt


def install_runtime(runtime: Runtime | None) -> Runtime | None:
    """Make ``runtime`` the process runtime (None: build anew on next use); returns the old one.

    The outgoing runtime's epoch is closed, so no selection or call plan of it survives.
    """
    global _RUNTIME
    with _LOCK:
        old, _RUNTIME = _RUNTIME, runtime
        if old is not None and old is not runtime:
            old.state.close()
    return old


def current_runtime() -> Runtime | None:
    """The process runtime if one exists (never builds one)."""
    return _RUNTIME


def current_epoch() -> int:
    """The epoch of the process runtime (0 before it exists)."""
    rt = _RUNTIME
    return rt.epoch if rt is not None else 0


def reload() -> int:
    """Start a new epoch of the process runtime; returns its number."""
    return get_runtime().reload()


class ReloadHook:
    """A family's memo of call plans, kept in step with the process runtime.

    ``bind()`` (cheap; call it where a plan is made) registers ``listener`` with the current
    runtime once, calling ``listener(None)`` first when the runtime is new (a test installed
    one), so no plan made under another runtime survives; every later :func:`reload` calls
    ``listener(epoch)``.
    """

    def __init__(self, listener: Callable[[int | None], None]) -> None:
        self._listener = listener
        self._bound: Runtime | None = None
        self._lock = threading.Lock()

    def bind(self) -> None:
        """Register with the process runtime unless already registered with it."""
        rt = get_runtime()
        if self._bound is not rt:
            with self._lock:
                if self._bound is not rt:
                    self._listener(None)
                    rt.add_reload_listener(self._listener)
                    self._bound = rt


@attrs.frozen
class DeviceFacts:
    """What selection and the families' heuristics ask of a CUDA device, asked once."""

    index: int
    arch: str
    """Arch family, e.g. ``sm90``."""
    sm_count: int

    @classmethod
    def query(cls, index: int | None) -> DeviceFacts | None:
        """Ask torch about device ``index`` (None: the current one); None without CUDA."""
        import torch

        try:
            if not torch.cuda.is_available():
                return None
            index = torch.cuda.current_device() if index is None else index
            props = torch.cuda.get_device_properties(index)
        except (RuntimeError, AssertionError):
            return None
        return cls(index=index, arch=f"sm{props.major}{props.minor}",
                   sm_count=int(props.multi_processor_count))


def device_arch_of(index: int) -> str:
    """The arch family (``sm90``) of CUDA device ``index``, asked of torch once per runtime."""
    facts = get_runtime().device(index)
    if facts is None:
        raise RuntimeError(f"no CUDA device {index} in this process")
    return facts.arch
