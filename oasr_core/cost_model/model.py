"""A cost model (structure plus optional calibration), its JSON payload, and the ranking API.

The JSON payload is what ``oasr tune build`` writes into a tuning file's ``model`` field::

    {"kind": "oasr-cost-model", "schema_version": 1,
     "lane": "sm90_wgmma", "arch": "sm90", "ops": ["gemm", "gemm_activation"],
     "serve": "structure" | "group" | "calibrated",   # what the runtime tier ranks with
     "profile": {ArchProfile JSON}, "knobs": {Knobs JSON},
     "groups": {"ws_dp": {"a": 1.1, "b": 0.9, "rho": 1.0, "rows": 812}, ...},
     "configs": {"<config id>": {"a": us, "b": us, "rho": x, "rows": 14}, ...},
     "fallbacks": {"torch": {"gemm": {"fixed_us": .., "us_per_k64": .., "compute": ..,
                                      "traffic": .., "rows": 56, "signatures": 4}}},
     "evidence": {... held-out quality, rows, signatures ...}}

``groups`` are multipliers of the structure's (a, b, rho) shared by a kernel kind and K
decomposition (``CostFeatures.group``); ``configs`` are per-config coefficients shrunk toward
the group-scaled structure. ``serve`` picks the predictor: ``structure`` ignores both,
``group`` applies only the multipliers, ``calibrated`` applies both.
``fallbacks`` are the rooflines of the sentinel arms the log measured
(:mod:`.fallback`), what the runtime tier compares a config with when the family's untuned
selector is such an arm; a payload without them (written before they existed) calibrates
none, and the tier does not answer for such a family.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from oasr_core.arch import ArchProfile
from oasr_core.cost_model.fallback import FallbackModel
from oasr_core.cost_model.features import CostFeatures, FeatureSource, features_of
from oasr_core.cost_model.structure import Knobs, TileCost, combine, geometry, tile_cost
from oasr_core.errors import ConfigurationError
from oasr_core.types import Config, Problem, freeze, thaw

KIND = "oasr-cost-model"
SCHEMA_VERSION = 1
SERVE_MODES = ("structure", "group", "calibrated")


@attrs.frozen
class Coeffs:
    """Calibrated ``(a, b, rho)`` of one config or multipliers of one group, with its rows."""

    a: float
    b: float
    rho: float = 1.0
    rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"a": round(self.a, 6), "b": round(self.b, 6), "rho": round(self.rho, 6),
                "rows": self.rows}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Coeffs:
        """Inverse of :meth:`to_json`; ``ConfigurationError`` unless ``a``, ``b`` and ``rho``
        are finite non-negative numbers and ``rows`` a non-negative integer."""
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"coefficients must be an object, not {type(raw).__name__}")
        return cls(a=number(raw.get("a"), "a"), b=number(raw.get("b"), "b"),
                   rho=number(raw.get("rho", 1.0), "rho"),
                   rows=count(raw.get("rows", 0), "rows"))


def number(value: Any, what: str) -> float:
    """``value`` as a float when it is a finite non-negative JSON number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{what}={value!r} is not a finite non-negative number")
    return float(value)


def count(value: Any, what: str) -> int:
    """``value`` when it is a non-negative JSON integer (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{what}={value!r} is not a non-negative integer")
    return value


def _table(raw: Any, what: str) -> dict[str, Coeffs]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"{what} must be an object of name -> coefficients, not "
                                 f"{type(raw).__name__}")
    out = {}
    for name, value in raw.items():
        try:
            out[name] = Coeffs.from_json(value)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{what}[{name!r}]: {exc}") from None
    return out


_UNIT = Coeffs(1.0, 1.0, 1.0)


@attrs.frozen
class CostModel:
    """The structure on one profile, plus (optionally) a calibration; see the module doc."""

    profile: ArchProfile
    knobs: Knobs = Knobs()
    lane: str | None = None
    ops: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """The family's ops the model is stored for (the build writes the ops of the rows it
    fitted); the runtime tier serves only calls of these ops. Ranking ignores it."""
    serve: str = attrs.field(default="structure")
    groups: Mapping[str, Coeffs] = attrs.field(factory=dict, converter=MappingProxyType)
    configs: Mapping[str, Coeffs] = attrs.field(factory=dict, converter=MappingProxyType)
    evidence: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze)
    fallbacks: FallbackModel = attrs.field(factory=FallbackModel)
    """Calibrated sentinel arms (torch), see :mod:`.fallback`."""
    _tiles: dict[tuple[CostFeatures, str], TileCost | None] = attrs.field(
        factory=dict, init=False, eq=False, repr=False)
    """Tile costs computed so far (problem-independent, so the runtime tier pays once)."""

    @serve.validator
    def _check_serve(self, _attribute: attrs.Attribute, value: str) -> None:
        if value not in SERVE_MODES:
            raise ConfigurationError(f"cost model serve={value!r} is not one of {SERVE_MODES}")

    @property
    def calibrated(self) -> bool:
        """Whether any coefficient was fitted."""
        return bool(self.groups or self.configs)

    def using(self, serve: str) -> CostModel:
        """The same model predicting with ``serve`` (``structure``, ``group``, ``calibrated``)."""
        return attrs.evolve(self, serve=serve)

    def on(self, profile: ArchProfile) -> CostModel:
        """The same calibration on another profile (e.g. the live device's queried facts)."""
        return attrs.evolve(self, profile=profile)

    def coefficients(self, config_id: str, f: CostFeatures, a0: float, b0: float
                     ) -> tuple[float, float, float]:
        """``(a, b, rho)`` of a config whose structure coefficients are ``(a0, b0)``."""
        if self.serve == "structure":
            return a0, b0, 1.0
        if self.serve == "calibrated":
            own = self.configs.get(config_id)
            if own is not None:
                return own.a, own.b, own.rho
        g = self.groups.get(f.group, _UNIT)
        return a0 * g.a, b0 * g.b, g.rho

    def predict(self, config_id: str, f: CostFeatures, m: int, n: int, k: int,
                dtype: str = "fp16") -> float:
        """Predicted time in us of config ``config_id`` (features ``f``); ``inf`` when it
        cannot run this shape."""
        key = (f, dtype)
        if key not in self._tiles:
            self._tiles[key] = tile_cost(f, self.profile, dtype, self.knobs)
        tc = self._tiles[key]
        geo = geometry(f, tc, m, n, k, self.profile, dtype, self.knobs) if tc else None
        if geo is None:
            return math.inf
        a, b, rho = self.coefficients(config_id, f, tc.a, tc.b)
        return combine(geo, a, b, rho, self.profile.launch_us_graph)

    def predict_fallback(self, arm: str, op: str, m: int, n: int, k: int,
                         dtype: str = "fp16") -> float | None:
        """Predicted time in us of sentinel arm ``arm`` (``torch``) for ``op``; None when the
        payload calibrates no such arm for the op."""
        return self.fallbacks.predict(arm, op, m, n, k, dtype, self.profile)

    def to_json(self) -> dict[str, Any]:
        """The tuning file's ``model`` payload."""
        return {
            "kind": KIND, "schema_version": SCHEMA_VERSION, "lane": self.lane,
            "arch": self.profile.arch, "ops": list(self.ops), "serve": self.serve,
            "profile": self.profile.to_json(), "knobs": self.knobs.to_json(),
            "groups": {k: v.to_json() for k, v in sorted(self.groups.items())},
            "configs": {k: v.to_json() for k, v in sorted(self.configs.items())},
            "fallbacks": self.fallbacks.to_json(),
            "evidence": thaw(self.evidence),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CostModel:
        """Inverse of :meth:`to_json` (accepts the database's read-only mappings)."""
        if not isinstance(raw, Mapping) or raw.get("kind") != KIND:
            raise ConfigurationError(f"not an oasr cost model payload (kind={raw.get('kind')!r})"
                                     if isinstance(raw, Mapping) else "model payload is no "
                                     "mapping")
        version = raw.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ConfigurationError(f"cost model schema_version {version!r} is newer than this "
                                     f"oasr reads ({SCHEMA_VERSION}); upgrade oasr")
        data = thaw(raw)
        try:
            profile = data.get("profile")
            if not isinstance(profile, Mapping):
                raise ConfigurationError("profile must be an object")
            lane, ops, evidence = data.get("lane"), data.get("ops", []), data.get("evidence", {})
            if lane is not None and not isinstance(lane, str):
                raise ConfigurationError(f"lane={lane!r} is not a lane name")
            if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
                raise ConfigurationError(f"ops={ops!r} is not a list of op names")
            if not isinstance(evidence, Mapping):
                raise ConfigurationError("evidence must be an object")
            return cls(
                profile=ArchProfile.from_json(profile), knobs=Knobs.from_json(data.get("knobs")),
                lane=lane, ops=tuple(ops), serve=data.get("serve", "structure"),
                groups=_table(data.get("groups"), "groups"),
                configs=_table(data.get("configs"), "configs"),
                evidence=evidence, fallbacks=FallbackModel.from_json(data.get("fallbacks")))
        except ConfigurationError as exc:
            raise ConfigurationError(f"malformed cost model payload: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigurationError(f"malformed cost model payload: {exc!r}") from None


def _features(config: Config, features: FeatureSource | None, lane: Any) -> CostFeatures | None:
    source = features if features is not None else getattr(lane, "cost_features", None)
    return features_of(config, source, getattr(lane, "name", None))


def rank(candidates: Iterable[Config], problem: Problem, profile: ArchProfile | None = None,
         model: CostModel | None = None, *, lane: Any = None,
         features: FeatureSource | None = None) -> list[tuple[Config, float]]:
    """``[(config, predicted_us), ...]`` fastest first.

    ``model`` (default: the structure on ``profile``) predicts with its ``serve`` mode;
    ``profile`` replaces the model's profile when both are given. Features come from
    ``features``, else ``lane.cost_features``, else each config's ``params``. Configs the
    model cannot describe or that cannot run the shape (rule 1, shared memory) are left out.
    """
    if model is None:
        if profile is None:
            raise ConfigurationError("rank() needs a profile or a model")
        model = CostModel(profile=profile)
    elif profile is not None and profile is not model.profile:
        model = model.on(profile)
    n, k = problem.dim("N"), problem.dim("K")
    ranked = []
    for i, config in enumerate(candidates):
        f = _features(config, features, lane)
        if f is None:
            continue
        t = model.predict(config.id, f, problem.m, n, k, problem.dtype)
        if math.isfinite(t):
            ranked.append((t, i, config))
    ranked.sort(key=lambda row: (row[0], row[1]))
    return [(config, t) for t, _, config in ranked]


def top_k(candidates: Iterable[Config], problem: Problem, k: int,
          profile: ArchProfile | None = None, model: CostModel | None = None, *,
          lane: Any = None, features: FeatureSource | None = None) -> list[Config]:
    """The ``k`` configs :func:`rank` puts first."""
    return [c for c, _ in rank(candidates, problem, profile, model, lane=lane,
                               features=features)[:k]]


def prune(candidates: Sequence[Config], problem: Problem, k: int, model: CostModel, *,
          forced: Iterable[str] = (), lane: Any = None,
          features: FeatureSource | None = None) -> list[Config]:
    """What ``oasr tune build`` measures at one point: the structure's top-``k``, the
    calibrated model's top-``k`` (when it has a calibration), the ``forced`` ids and every
    config the model cannot describe; in ``candidates`` order."""
    keep = set(forced)
    for mode in ("structure", "calibrated") if model.calibrated else ("structure",):
        keep.update(c.id for c in top_k(candidates, problem, k, model=model.using(mode),
                                        lane=lane, features=features))
    keep.update(c.id for c in candidates if _features(c, features, lane) is None)
    return [c for c in candidates if c.id in keep]


def config_ranker(model: CostModel, *, lane: Any = None, features: FeatureSource | None = None
                  ) -> Callable[[Sequence[Config], Problem], list[Config]]:
    """``model`` as a ``(configs, problem) -> configs best first`` callable (the ranker
    interface of ``oasr tune build``). Configs the model cannot describe come first, so a
    top-k cut always measures them; infeasible ones are left out.
    """
    def ranked(configs: Sequence[Config], problem: Problem) -> list[Config]:
        unknown = [c for c in configs if _features(c, features, lane) is None]
        return unknown + [c for c, _ in rank(configs, problem, model=model, lane=lane,
                                             features=features)]
    def scored(configs: Sequence[Config], problem: Problem) -> list[tuple[Config, float]]:
        """The configs it can describe with their predicted microseconds, fastest first."""
        return rank(configs, problem, model=model, lane=lane, features=features)

    ranked.__qualname__ = f"cost_model.{model.serve}"
    ranked.scored = scored  # type: ignore[attr-defined]
    return ranked
