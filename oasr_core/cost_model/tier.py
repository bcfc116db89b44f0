"""The runtime cost-model tier: serves aligned GEMM shapes that no tuning entry covers.

:class:`ModelTier` implements ``oasr_model_select`` (``trylast``, so a family's own model
answers first). It answers only when all of these hold:

- ``OASR_TUNE_MODEL_FALLBACK`` is unset or ``auto`` (``0`` turns the tier off; any other
  value is a :class:`~oasr_core.errors.ConfigurationError` naming the variable);
- the tuning file ships a model payload (:meth:`CostModel.to_json`) for this lane, and the
  call's op is among its ``ops``;
- the family is GEMM-like (static dims ``N`` and ``K``, both multiples of 8) and the lane
  describes its configs (``Lane.cost_features``);
- the model's pick beats the lane default by the gate: ``t(pick) * 1.05 <= t(default)``
  (a default that cannot run the shape loses to any pick).

It ranks with the payload's ``serve`` mode, which ``oasr tune build`` chose on held-out
signatures (:func:`oasr_core.cost_model.build_model`); with no evidence that is the
structure. A malformed payload or a lane's malformed features is warned about once and the
next tier serves.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from oasr_core import hookimpl
from oasr_core.arch import ArchProfile
from oasr_core.cost_model.features import CostFeatures, features_of
from oasr_core.cost_model.model import CostModel
from oasr_core.errors import ConfigurationError, OasrWarning, PluginError

ENV = "OASR_TUNE_MODEL_FALLBACK"
GATE = 1.05
"""The pick must be predicted at least this much faster than the default."""
ALIGN = 8


def model_fallback_enabled() -> bool:
    """Whether ``OASR_TUNE_MODEL_FALLBACK`` lets the model tier serve (``auto``) or not (``0``)."""
    value = os.environ.get(ENV)
    if value is None or value.strip().lower() == "auto":
        return True
    if value.strip() == "0":
        return False
    raise ConfigurationError(f"{ENV}={value!r} is not understood: use 'auto' (the default: "
                             "serve uncovered GEMM shapes from the cost model) or '0' (off)")


class ModelTier:
    """Hook implementation of the runtime cost-model tier (see the module docstring).

    ``live`` is the running device's profile, or a callable returning it, called once on
    first use (``ModelTier(live=ArchProfile.query)`` touches the GPU only when a shape first
    reaches the tier; a ``ConfigurationError`` from it, as on a CPU machine, means "none").
    Its queried facts (SMs, shared memory) replace the build machine's; the benchmarked ones
    are kept. Register an instance on the runtime's plugin manager.
    """

    def __init__(self, live: ArchProfile | Callable[[], ArchProfile] | None = None, *,
                 gate: float = GATE) -> None:
        self._live = live
        self.gate = gate
        self._parsed: dict[int, tuple[Mapping[str, Any], CostModel | None]] = {}
        self._warned: set[str] = set()
        self._feats: dict[tuple[str, str], CostFeatures | None] = {}

    @property
    def live(self) -> ArchProfile | None:
        """The running device's profile (resolved on first use), or None."""
        if callable(self._live):
            try:
                self._live = self._live()
            except (ConfigurationError, RuntimeError):
                self._live = None
        return self._live

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, OasrWarning, stacklevel=3)

    def model_for(self, payload: Mapping[str, Any]) -> CostModel | None:
        """The parsed payload (memoised per payload object), or None when malformed."""
        hit = self._parsed.get(id(payload))
        if hit is not None and hit[0] is payload:
            return hit[1]
        try:
            model: CostModel | None = CostModel.from_json(payload)
        except ConfigurationError as exc:
            self._warn(f"payload:{id(payload)}", f"oasr: cost model tier skipped: {exc}")
            model = None
        live = self.live
        if model is not None and live is not None and live.arch == model.profile.arch:
            model = model.on(model.profile.with_live(live))
        if len(self._parsed) >= 64:  # payloads of earlier epochs: let them go
            self._parsed.clear()
        self._parsed[id(payload)] = (payload, model)
        return model

    def _features(self, lane, config):
        key = (lane.name, config.id)
        if key not in self._feats:
            self._feats[key] = features_of(config, lane.cost_features, lane.name)
        return self._feats[key]

    @hookimpl(trylast=True)
    def oasr_model_select(self, family, lane, problem, candidates, model):
        """Pick the predicted-fastest candidate if it beats the default by the gate."""
        if model is None or not model_fallback_enabled():
            return None
        if lane.cost_features is None or not {"N", "K"} <= set(family.dims):
            return None
        n, k = problem.dim("N"), problem.dim("K")
        if n % ALIGN or k % ALIGN:
            return None
        cm = self.model_for(model)
        if cm is None or problem.op not in cm.ops or cm.lane not in (None, lane.name):
            return None
        best, t_best, t_default = None, math.inf, math.inf
        try:
            for config in candidates:
                f = self._features(lane, config)
                if f is None:
                    if config.id == lane.default_config:
                        return None  # no prediction for the default: nothing to gate on
                    continue
                t = cm.predict(config.id, f, problem.m, n, k, problem.dtype)
                if config.id == lane.default_config:
                    t_default = t
                if t < t_best:
                    best, t_best = config, t
        except PluginError as exc:
            self._warn(f"lane:{lane.name}", f"oasr: cost model tier skipped: {exc}")
            return None
        if best is None or best.id == lane.default_config or t_best * self.gate > t_default:
            return None
        return best
