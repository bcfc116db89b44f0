"""The runtime cost-model tier: serves aligned GEMM shapes that no tuning entry covers.

:class:`ModelTier` implements ``oasr_model_select`` (``trylast``, so a family's own model
answers first). It answers only when all of these hold:

- ``OASR_TUNE_MODEL_FALLBACK`` is unset or ``auto`` (``0`` turns the tier off; any other
  value is a :class:`~oasr_core.errors.ConfigurationError` naming the variable);
- the tuning file ships a model payload (:meth:`CostModel.to_json`) for this lane, and the
  call's op is among its ``ops``;
- the family is GEMM-like (static dims ``N`` and ``K``, both multiples of 8) and the lane
  describes its configs (``Lane.cost_features``);
- the model's pick among the candidates (the configs this process has compiled: selection
  passes only those) beats what would serve otherwise, the family's untuned selector
  (``Family.untuned_choice``), by a margin:

  - an untuned selector that launches no lane config (``torch``) is predicted by the
    payload's calibration of that arm (:mod:`.fallback`); the pick must satisfy
    ``t(pick) * MARGIN <= t(torch)``. A payload without that calibration (written before
    it existed, for an op no row measured, or at N or K outside the widths it was fitted
    on) means no answer: the untuned selector serves;
  - one that launches a config (the lane default, a shape heuristic's config) is predicted
    like any config: ``t(pick) * GATE <= t(that config)`` (one that cannot run the shape
    loses to any pick).

It ranks with the payload's ``serve`` mode, which ``oasr tune build`` chose on held-out
signatures (:func:`oasr_core.cost_model.build_model`); with no evidence that is the
structure. A malformed payload or a lane's malformed features is warned about once and the
next tier serves. Every decision's reason is kept (:func:`reason_for`) for
``oasr tune select``.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core import hookimpl
from oasr_core.arch import ArchProfile
from oasr_core.cost_model.features import CostFeatures, features_of
from oasr_core.cost_model.model import CostModel
from oasr_core.errors import ConfigurationError, OasrWarning, PluginError
from oasr_core.sentinels import sentinel_config
from oasr_core.types import Config, Problem, Sentinel


@attrs.frozen
class Decision:
    """What the tier decided for one shape, and why (in words)."""

    pick: Config | None
    reason: str

ENV = "OASR_TUNE_MODEL_FALLBACK"
GATE = 1.05
"""The pick must be predicted at least this much faster than an untuned selector's config."""
MARGIN = 1.30
"""The pick must be predicted at least this much faster than a calibrated untuned arm
(torch): chosen on held-out widths, ``benchmarks/results/untuned_tier_offline.md``."""
ALIGN = 8
_KEEP_REASONS = 4096
STEPS_PER_OCTAVE = 8
MAX_M = 1 << 20
""":meth:`ModelTier.may_answer` asks :meth:`~ModelTier.decide` at every M of a geometric
sweep from 1 to ``MAX_M``, ``STEPS_PER_OCTAVE`` to a doubling (161 M), and at every multiple
of 64 up to 8192, where tile quantisation moves the predictions most."""


def sweep_m() -> tuple[int, ...]:
    """The M values :meth:`ModelTier.may_answer` asks the model about (ascending)."""
    octaves = MAX_M.bit_length() - 1
    geometric = {round(2 ** (i / STEPS_PER_OCTAVE)) for i in range(octaves * STEPS_PER_OCTAVE + 1)}
    return tuple(sorted(geometric | set(range(64, 8193, 64))))


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
                 gate: float = GATE, margin: float = MARGIN) -> None:
        self._live = live
        self.gate = gate
        self.margin = margin
        self.reasons: dict[tuple[str, Any], str] = {}
        """The latest decision's reason per (lane name, problem)."""
        self._parsed: dict[int, tuple[Mapping[str, Any], CostModel | None]] = {}
        self._warned: set[str] = set()
        self._feats: dict[tuple[str, str], CostFeatures | None] = {}
        self._swept: dict[tuple, tuple[CostModel, bool]] = {}

    def live(self) -> ArchProfile | None:
        """The running device's profile (resolved on first use), or None.

        A method, not a property: pluggy's ``register`` reads every attribute of a plugin,
        and a property would probe the GPU (importing torch) whenever the tier is registered.
        """
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
        live = self.live()
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
        """The predicted-fastest candidate if it beats the untuned selector by the margin."""
        decision = self.decide(family, lane, problem, candidates, model)
        if len(self.reasons) >= _KEEP_REASONS:
            self.reasons.clear()
        self.reasons[(lane.name, problem)] = decision.reason
        return decision.pick

    def may_answer(self, family, lane, op: str, dtype: str, dims: Sequence[int],
                   model, candidates: Callable[[Problem], Sequence[Config]] | None = None
                   ) -> bool:
        """Whether :meth:`decide` may pick a config for ``op`` at static ``dims`` at some M:
        False where it refuses whatever M is (no payload, the tier turned off, a family
        that is not GEMM-shaped, a lane without cost features, N or K unaligned, an op or
        lane the payload does not model, or an untuned selector of torch the payload has no
        calibration of at these N and K), and, given ``candidates`` (what selection offers
        the tier at a problem), where against a calibrated torch arm it picks nothing at any
        M of :func:`sweep_m`. What :func:`oasr_core.selection.torch_at_every_m` asks, so a
        routed layer the model never serves keeps torch's own forward; a win the model would
        predict between two swept M is forgone there, and torch serves it as it would
        without oasr. The sweep's answer is kept per model (a payload of one epoch), lane, op,
        dtype and dims."""
        if model is None or not model_fallback_enabled() or lane.cost_features is None:
            return False
        if not {"N", "K"} <= set(family.dims):
            return False
        named = dict(zip(family.dims, dims, strict=True))
        n, k = named["N"], named["K"]
        if n % ALIGN or k % ALIGN:
            return False
        cm = self.model_for(model)
        if cm is None or op not in cm.ops or cm.lane not in (None, lane.name):
            return False
        untuned = family.untuned_choice
        if untuned is Sentinel.TORCH:
            fitted = cm.fallbacks.arms.get(untuned.value, {}).get(op)
            if fitted is None or not fitted.covers(n, k):
                return False
            if candidates is not None:
                return self._picks_in_sweep(family, lane, op, dtype, named, model, cm,
                                            candidates)
        return True

    def _picks_in_sweep(self, family, lane, op: str, dtype: str, dims: Mapping[str, int],
                        model, cm: CostModel,
                        candidates: Callable[[Problem], Sequence[Config]]) -> bool:
        key = (id(cm), lane.name, op, dtype, tuple(dims.items()))
        hit = self._swept.get(key)
        if hit is not None and hit[0] is cm:
            return hit[1]
        picks = False
        for m in sweep_m():
            problem = Problem(family=family.name, op=op, dtype=dtype, dims=dims, m=m)
            offered = tuple(candidates(problem))
            if offered and self.decide(family, lane, problem, offered, model).pick is not None:
                picks = True
                break
        if len(self._swept) >= 1024:
            self._swept.clear()
        self._swept[key] = (cm, picks)
        return picks

    def decide(self, family, lane, problem, candidates: Sequence[Config], model) -> Decision:
        """The tier's answer for ``problem`` (see the module docstring) with its reason."""
        if model is None:
            return Decision(None, "no tuning file ships a cost model for this lane")
        if not model_fallback_enabled():
            return Decision(None, f"{ENV}=0 turns the cost-model tier off")
        if not {"N", "K"} <= set(family.dims):
            return Decision(None, f"family {family.name} is not GEMM-shaped (no N and K dims)")
        if lane.cost_features is None:
            return Decision(None, f"lane {lane.name} describes no config to the cost model "
                            "(no cost_features)")
        n, k = problem.dim("N"), problem.dim("K")
        if n % ALIGN or k % ALIGN:
            return Decision(None, f"N={n} or K={k} is not a multiple of {ALIGN}")
        cm = self.model_for(model)
        if cm is None or problem.op not in cm.ops or cm.lane not in (None, lane.name):
            return Decision(None, f"the cost model serves no op {problem.op!r} on lane "
                            f"{lane.name!r}")
        untuned = family.untuned_choice
        try:
            stands = sentinel_config(family, lane, untuned, problem)
            if stands is None:
                t_fb = cm.predict_fallback(untuned.value, problem.op, problem.m, n, k,
                                           problem.dtype)
                if t_fb is None:
                    return Decision(None, f"the cost model has no calibration of the "
                                    f"{untuned.value} arm for op {problem.op!r} at N={n}, K={k}")
                margin, fb_name = self.margin, untuned.value
            else:
                f = self._features(lane, stands)
                if f is None:
                    return Decision(None, f"no prediction for {untuned.value} ({stands.id})")
                # Not among the candidates: it cannot serve here, so any pick beats it.
                t_fb = cm.predict(stands.id, f, problem.m, n, k, problem.dtype) \
                    if stands in candidates else math.inf
                margin, fb_name = self.gate, f"{untuned.value} ({stands.id})"
            best, t_best = None, math.inf
            for config in candidates:
                f = self._features(lane, config)
                if f is None:
                    continue
                t = cm.predict(config.id, f, problem.m, n, k, problem.dtype)
                if t < t_best:
                    best, t_best = config, t
        except PluginError as exc:
            self._warn(f"lane:{lane.name}", f"oasr: cost model tier skipped: {exc}")
            return Decision(None, f"the lane's cost features are malformed: {exc}")
        except (ArithmeticError, TypeError, ValueError, AttributeError) as exc:
            # A payload that passed from_json but still cannot predict (values no validator
            # anticipates): the model is unusable here, never a crash of the op call.
            text = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            self._warn(f"predict:{id(model)}", f"oasr: cost model tier skipped: the model "
                       f"payload cannot predict ({text}); the next tier serves")
            return Decision(None, f"the cost model cannot predict here ({text})")
        if best is None:
            return Decision(None, "no compiled candidate can run this shape")
        if stands is not None and best.id == stands.id:
            return Decision(None, f"predicts {fb_name} itself is fastest ({t_best:.2f} us)")
        if t_best * margin > t_fb:
            return Decision(None, f"predicts no win over {fb_name}: best compiled {best.id} "
                            f"{t_best:.2f} us x {margin:g} > {t_fb:.2f} us")
        return Decision(best, f"predicts {best.id} {t_best:.2f} us x {margin:g} <= {fb_name} "
                        f"{t_fb:.2f} us")


def reason_for(pm: Any, lane: str, problem: Any) -> str | None:
    """The reason the core's model tier (registered on ``pm``) gave for its latest decision
    on ``problem`` of ``lane``, or None when it decided nothing there."""
    for plugin in pm.get_plugins():
        if isinstance(plugin, ModelTier):
            found = plugin.reasons.get((lane, problem))
            if found is not None:
                return found
    return None
