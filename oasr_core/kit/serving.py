"""The op-serving state of one kernel family: call plans per epoch, fallbacks, warnings.

A family's ops module keeps one :class:`Serving` (module level; it imports no torch) and
calls it from its op functions:

- ``serving.plans.table.get(key)`` on every call: the epoch's memo of resolved call shapes (a
  prepared launcher, or :data:`TORCH`); one dict lookup;
- :meth:`Serving.plan` on a miss: select a config, find its kernel in the lane's loaded
  library (:attr:`Serving.libraries`), prepare it for the shape; a selection error, a config
  the module lacks or a refused preparation is warned about once per epoch and memoised as
  :data:`TORCH`;
- :meth:`Serving.fallback` whenever the torch path serves, counted by reason
  (:meth:`Serving.stats`);
- :meth:`Serving.refused` when a launcher returns a non-zero status: the shape turns to torch
  for the rest of the epoch;
- ``serving.layers.table.get(key)``: the epoch's memo of per-layer plans (a family's layer
  call keyed by the layer object and its input's shape and dtype), :data:`TORCH` where the
  op's plan for that call is torch, so a layer's repeated call skips the op's key and
  checks; :meth:`Serving.layer_plan` fills it after the layer's first call.

The memo lives on the process runtime's epoch (:mod:`oasr_core.epoch`), so a reload or a
new runtime empties it with no call from here; on a reload the serving object also refreshes
its production libraries (a config the new tiers reference gets compiled in). Loaded
libraries and the fallback counters are per process: a library cannot be unloaded while a
captured graph may use it, and the counters are the process's totals until
:meth:`Serving.reset_stats`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from oasr_core import jit as core_jit
from oasr_core.epoch import EpochMemo
from oasr_core.errors import OasrError, OasrWarning
from oasr_core.jit.libraries import Kernels, Libraries
from oasr_core.kit.production import bundled
from oasr_core.runtime import get_runtime
from oasr_core.types import Config

TORCH = "torch"
"""The plan of a call shape that the torch path serves."""
OP = "op"
"""The per-layer plan of a layer call that the family's op serves (its checks and plan)."""


class LaunchError(OasrError):
    """A launcher or its workspace query refused (the message names the config and status)."""


class Serving:
    """One family's op-serving state (see the module docstring).

    ``family`` names the memo and prefixes warn-once keys; ``label`` starts every warning
    (default ``oasr_<family>``) and ``category`` is their class. ``load``/``ids``/``wanted``
    are the production libraries' (:class:`oasr_core.jit.libraries.Libraries`).
    """

    def __init__(self, family: str, *, load: Callable[[str, str], Kernels | None],
                 ids: Callable[[Kernels], Iterable[str]],
                 wanted: Callable[[str, str], Iterable[str]] | None = None,
                 label: str | None = None, category: type[Warning] = OasrWarning) -> None:
        self.family = family
        self.label = label or f"oasr_{family}"
        self.category = category
        self.plans = EpochMemo(f"{family}:plans")
        self.layers = EpochMemo(f"{family}:layers")
        self.libraries = Libraries(load=load, ids=ids, wanted=wanted)
        self.fallbacks: Counter = Counter()
        self._watched: Any = None
        self._lock = threading.Lock()

    # -- the torch path ---------------------------------------------------------------------

    def fallback(self, reason: str) -> None:
        """Count one call served by the torch path because of ``reason``."""
        self.fallbacks["torch:" + reason] += 1

    def stats(self) -> dict[str, int]:
        """Calls served by the torch path, by reason (``torch:cpu``, ``torch:selected``, ...)."""
        return dict(self.fallbacks)

    def reset_stats(self) -> None:
        """Zero the counters of :meth:`stats`."""
        self.fallbacks.clear()

    # -- epochs -----------------------------------------------------------------------------

    def bind(self) -> Any:
        """Bind the memo to the process runtime's current epoch; returns that epoch.

        The first bind to a runtime registers a reload listener with it that refreshes the
        production libraries (:meth:`Libraries.refresh`).
        """
        rt = get_runtime()
        if self._watched is not rt:
            with self._lock:
                if self._watched is not rt:
                    rt.add_reload_listener(self._reloaded)
                    self._watched = rt
        return self.plans.bind(rt.state)

    def _reloaded(self, epoch: int) -> None:
        self.libraries.refresh()

    def clear(self) -> None:
        """Forget this family's plans and layer plans of the current epoch (the epoch goes
        on)."""
        epoch = self.bind()
        self.plans.clear()
        self.layers.bind(epoch)
        self.layers.clear()

    def warn_once(self, key: str, message: str, stacklevel: int = 4) -> bool:
        """Warn ``message`` once per epoch for this family's ``key``; True if it warned."""
        epoch = self.plans.epoch
        if epoch is None or epoch.closed:
            epoch = self.bind()
        return epoch.warn_once(f"{self.family}:{key}", message, self.category,
                               stacklevel=stacklevel)

    # -- libraries --------------------------------------------------------------------------

    def load(self, lane: str, arch: str, spec_of: Callable[[str, str], Any],
             bind: Callable[[Any], Kernels]) -> Kernels | None:
        """Load ``lane``'s production module on ``arch`` (``spec_of(lane, arch)``, its units'
        variants bundled as ``Lane.jit_specs`` bundles them: :func:`oasr_core.kit.production.
        bundled`) and bind its kernels (``bind(module)``): the ``load`` of :attr:`libraries`.

        A module that cannot be built or loaded is warned about once and gives None (the ops
        serve from torch); units that failed to compile are warned about once and their
        configs are left to the next tier.
        """
        try:
            spec = bundled(spec_of(lane, arch), self._space(lane))  # as prebuild compiles it
            module = core_jit.load(spec)
        except Exception as exc:  # a broken toolchain or library must never take the op down
            self.warn_once(f"load:{lane}:{arch}", f"{self.label}: the {lane} module for {arch} "
                           f"is unavailable ({exc}); {self.family} calls take the torch path",
                           stacklevel=7)
            return None
        if module.failed:
            self.warn_once(f"failed:{lane}:{arch}", f"{self.label}: {len(module.failed)} "
                           f"unit(s) of {spec.name} failed to compile "
                           f"({', '.join(sorted(module.failed)[:5])}); their configs are "
                           "served by the next tier", stacklevel=7)
        return bind(module)

    @staticmethod
    def _space(lane: str) -> tuple[Config, ...]:
        """The registered config space of ``lane`` (empty when no plugin registers it)."""
        try:
            return get_runtime().registry.lane(lane).config_space
        except OasrError:
            return ()

    def holds(self, config: Config, key: Hashable,
              fits_arch: Callable[[Config, str], bool]) -> bool:
        """``Lane.is_available``: False only when a loaded module of ``config``'s lane on an
        arch it fits lacks ``key``. Before the module is loaded (and without a GPU) every
        config counts as available; the ops re-check at call time."""
        for (lane, arch), kernels in self.libraries.items():
            if lane == config.lane and kernels is not None and fits_arch(config, arch):
                return key in kernels
        return True

    # -- plans ------------------------------------------------------------------------------

    def plan(self, key: Hashable, arch: str, select: Callable[[], Config | None],
             kernel_key: Callable[[Config], Hashable], prepare: Callable[[Any], Any],
             what: str) -> Any:
        """Resolve one call shape and memoise the plan under ``key`` for this epoch.

        ``select()`` names the config (None: torch serves); ``kernel_key(config)`` is its key
        in the lane's loaded kernels on ``arch``; ``prepare(kernel)`` the per-shape launcher
        (raising :class:`LaunchError` when the shape is refused). ``what`` describes the
        signature in warnings (``op=gemm fp16 N=512 K=256``).
        """
        epoch = self.bind()
        plan: Any = TORCH
        try:
            config = select()
        except OasrError as exc:
            self.warn_once(f"select:{what}", f"{self.label}: selection failed for {what} "
                           f"({exc}); the torch path serves this signature", stacklevel=5)
            return self.plans.store(key, plan, epoch)
        if config is not None:
            kernels = self.libraries.get(config.lane, arch)
            kernel = kernels.get(kernel_key(config)) if kernels is not None else None
            if kernel is None and kernels is not None:
                self.warn_once(f"missing:{config.lane}:{kernel_key(config)}",
                               f"{self.label}: config {config.id} ({what}) is not in this "
                               f"process's {config.lane} module; the torch path serves it",
                               stacklevel=5)
            elif kernel is not None:
                try:
                    plan = prepare(kernel)
                except LaunchError as exc:
                    self.warn_once(f"prepare:{kernel_key(config)}",
                                   f"{self.label}: {exc}; torch serves", stacklevel=5)
        return self.plans.store(key, plan, epoch)

    def layer_plan(self, layer_key: Hashable, op_key: Hashable | None) -> str:
        """Memoise, for this epoch, how the layer call ``layer_key`` is served from now on:
        :data:`TORCH` when the op's plan under ``op_key`` (the op key of the call the layer
        just made; None: it has none) is torch, else :data:`OP` (the op serves: its checks
        run per call, a kernel launches or the reason is counted). Returns the plan.

        A torch plan is torch's own function on the layer's tensors, which takes anything:
        a later call under the same layer key on other operands (another device) is served
        right, at worst by torch where the op would have launched a kernel.
        """
        plan = TORCH if op_key is not None and self.plans.table.get(op_key) is TORCH else OP
        return self.layers.store(layer_key, plan, self.bind())

    def refused(self, key: Hashable, config: Config, status: str, what: str) -> None:
        """A launcher refused ``key``'s shape (``status`` says why): torch serves it from now
        on in this epoch, warned about once."""
        self.plans.store(key, TORCH, self.bind())
        self.warn_once(f"refused:{config.lane}:{config.id}:{status}",
                       f"{self.label}: {config.lane}/{config.id} refused {what} ({status}); "
                       "the torch path serves this shape", stacklevel=5)
