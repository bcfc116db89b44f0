"""Typed records that cross the core/plugin boundary.

Plugins return :class:`Family` records from ``oasr_register_families`` and :class:`Lane`
records from ``oasr_register_lanes`` (see :mod:`oasr_core.hookspecs`). Everything here is a
frozen attrs record: a plugin cannot mutate what the core holds, and a record is validated
when it is built, so a bad record fails in the plugin that made it.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from oasr_core.bench import BenchCase, BenchOptions

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
ARCH_RE = re.compile(r"^sm[0-9]{2,3}$")
POINT_RE = re.compile(r"[1-9][0-9]{0,9}(?:x[1-9][0-9]{0,9})*")
"""An exact point key (``Family.exact_points``): positive ASCII integers joined by ``x``,
such as conv1d's ``"1x3000"`` (batch x input length); checked with ``fullmatch``."""


class Sentinel(enum.Enum):
    """Choices that are not a config of a lane.

    ``DEFAULT`` is the active lane's default config, ``TORCH`` the torch (cuBLAS/cuDNN) path,
    ``FUSED`` a family's fused single-call kernel, ``HEURISTIC`` the family's shape heuristic
    (e.g. scaled_mm's tile ladder). ``UNQUANTIZED`` is a quantized family's "dequantize"
    answer: the layer runs in its activation dtype with ``F.linear`` on its high-precision
    weight, because that measured faster than every quantized arm (the family's linear holds
    that weight and serves it; the family's own ops cannot). In a tuning file they are spelled
    by their value.
    """

    DEFAULT = "default"
    TORCH = "torch"
    FUSED = "fused"
    HEURISTIC = "heuristic"
    UNQUANTIZED = "unquantized"

    @classmethod
    def parse(cls, text: str) -> Sentinel | None:
        """The sentinel spelled ``text``, or None when ``text`` names a config."""
        return _SENTINELS.get(text)


_SENTINELS = {s.value: s for s in Sentinel}


class Tier(enum.Enum):
    """Where a selection came from; every resolution is counted under one of these."""

    USER = "user"
    SYSTEM = "system"
    MODEL = "model"
    HEURISTIC = "heuristic"
    DEFAULT = "default"


def _check_name(_inst: object, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(
            f"{attribute.name}={value!r} is not a valid name (lower case, digits and '_', "
            "starting with a letter)"
        )


def _check_names(_inst: object, attribute: attrs.Attribute, value: Sequence[str]) -> None:
    for v in value:
        _check_name(_inst, attribute, v)


def _check_arches(_inst: object, attribute: attrs.Attribute, value: Sequence[str]) -> None:
    for v in value:
        if not isinstance(v, str) or not ARCH_RE.match(v):
            raise ValueError(f"{attribute.name}: {v!r} is not an arch family like 'sm90'")


def _check_optional_callable(_inst: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{attribute.name} must be callable or None, got {type(value).__name__}")


def freeze(value: Any) -> Any:
    """A deep, immutable copy of JSON-like data: dicts become read-only mappings, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The JSON-ready inverse of :func:`freeze` (mappings to dicts, tuples to lists)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@attrs.frozen
class Config:
    """One kernel configuration of a lane, as explicit parameters.

    Configs are data (serialisable, compared by lane and id), never import-time objects. ``id``
    is unique within its lane and is what a tuning file's regions name. Registered inside a
    :class:`Lane` by ``oasr_register_lanes``.
    """

    id: str = attrs.field()
    """Stable identifier, e.g. ``b128x128x64_c1x2_pp``; never a sentinel's name."""
    lane: str = attrs.field(validator=_check_name)
    """The lane this config belongs to."""
    params: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze, eq=False, hash=False)
    """Explicit kernel parameters (tile, warp, stages, cluster, schedule, ...), JSON types."""

    @id.validator
    def _check_id(self, _attribute: attrs.Attribute, value: str) -> None:
        if not isinstance(value, str) or not value or "|" in value or "=" in value:
            raise ValueError(f"config id {value!r} must be a non-empty string without '|' or '='")
        if Sentinel.parse(value) is not None:
            raise ValueError(f"config id {value!r} is a sentinel's name")

    def to_json(self) -> dict[str, Any]:
        """The tuning-file form: ``{"lane": ..., **params}``."""
        return {"lane": self.lane, **thaw(self.params)}

    @classmethod
    def from_json(cls, config_id: str, raw: Mapping[str, Any]) -> Config:
        """Inverse of :meth:`to_json`."""
        params = dict(raw)
        lane = params.pop("lane", None)
        if not isinstance(lane, str):
            raise ValueError(f"config {config_id!r} has no 'lane'")
        return cls(id=config_id, lane=lane, params=params)


Choice = Config | Sentinel
"""What a region or point of a tuning entry names."""


@attrs.frozen
class Problem:
    """One call shape of a family's op: static dims plus the dynamic axis value ``m``.

    ``point`` is an exact dynamic-shape key (``"1x3000"`` for conv1d's B x T) when the family
    uses exact points. Passed to lane feasibility predicates and heuristics.
    """

    family: str
    op: str
    dtype: str
    dims: tuple[tuple[str, int], ...] = attrs.field(converter=lambda d: tuple(
        d.items() if isinstance(d, Mapping) else d))
    m: int
    point: str | None = None

    def dim(self, name: str) -> int:
        """The static dimension ``name`` (``KeyError`` when the family has none)."""
        for k, v in self.dims:
            if k == name:
                return v
        raise KeyError(name)


def _as_str_tuple(value: Sequence[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@attrs.frozen
class Family:
    """A kernel family: its ops, signature, sentinels and family-wide behaviour.

    Returned by ``oasr_register_families``. One tuning file per (arch family, family) holds
    its entries, keyed ``<name>|op=<op>[|dt=<dtype>]|<dim>=<v>...`` in ``dims`` order.

    ``make_bench`` is how ``oasr tune build`` measures the family (see :mod:`oasr_core.bench`):
    ``make_bench(problem, choices, options) -> BenchCase`` allocates the operands of one
    problem (``options.copies_for(weight_bytes)`` weight copies, for L2 rotation), and returns
    one ``run(copy_index) -> output`` callable per choice it can launch (named by the config id
    or the sentinel's value), the numerics ``gate(output)`` bound to its reference, and the
    copies it made. A family without it can be rebuilt from a measurement log, not measured.
    """

    name: str = attrs.field(validator=_check_name)
    """Family name; also the tuning file's stem unless ``db_stem`` says otherwise."""
    ops: tuple[str, ...] = attrs.field(converter=_as_str_tuple, validator=_check_names)
    """Ops the family tunes, each keyed separately (``gemm``, ``gemm_activation``)."""
    dims: tuple[str, ...] = attrs.field(converter=_as_str_tuple)
    """Static signature fields in key order (``("N", "K")``)."""
    zero_dims: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset,
                                            kw_only=True)
    """Static dims whose value may be 0 because 0 means something there (conv1d's ``pad``);
    every other dim is a positive integer (:meth:`dims_problem`)."""
    dtypes: tuple[str, ...] = attrs.field(converter=_as_str_tuple)
    """Operand dtypes served (``("fp16", "bf16")``)."""
    dtype_classes: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, converter=freeze)
    """Keys serving several dtypes (``{"half": ("fp16", "bf16")}``); an exact entry wins."""
    key_dtype: bool = True
    """Whether signature keys carry ``dt=`` (scaled_mm's do not: its operands are int8)."""
    dynamic_axis: str = "M"
    """Name of the axis regions index (M = rows, or B*T_out for conv1d)."""
    sentinels: frozenset[Sentinel] = attrs.field(
        default=frozenset({Sentinel.DEFAULT, Sentinel.TORCH}), converter=frozenset)
    """Sentinels a tuning file of this family may name."""
    fallback: Sentinel = attrs.field(default=Sentinel.DEFAULT)
    """The build's baseline: ``DEFAULT`` (lane default) or ``HEURISTIC`` (shape heuristic).
    A tuning entry's regions are chosen against it, and it serves uncovered shapes unless
    :attr:`untuned` says otherwise."""
    untuned: Sentinel | None = attrs.field(default=None)
    """What serves a shape no user or system entry covers when the cost-model tier does not
    answer (None: :attr:`fallback`). ``TORCH`` makes the family never slower than torch
    untuned: the model tier then serves a config only where the tuning file's model payload
    predicts it beats its calibration of the torch arm by a margin."""
    untuned_gate: Callable[[Config, Problem], bool] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """Where the untuned selector's config may serve an uncovered shape (None: wherever its
    lane supports it); elsewhere no lane config serves (torch). A family whose shape heuristic
    is its untuned selector states here, from measurements, the shapes where that config does
    not beat torch, while its builds still partition against the heuristic everywhere."""
    exact_points: bool = False
    """Whether entries may hold exact ``points`` (conv1d's ``"1x3000"``)."""
    db_stem: str | None = None
    """Tuning file stem; defaults to ``name``."""
    schema_version: int = 1
    """``family_schema_version`` of this family's per-config payloads (owned by the plugin)."""
    recorder_patches: Callable[[], Sequence[Any]] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """Returns the patches the census shape recorder applies to see this family's calls."""
    numerics_gate: Callable[..., Any] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """Decides whether a candidate's output is acceptable against the reference."""
    sentinel_heuristic: Callable[[Problem, Lane], Config] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """The shape heuristic behind ``Sentinel.HEURISTIC``: (problem, lane) -> config."""
    soft_validators: Callable[[], Mapping[str, Any]] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """Current soft stamps the family owns (``impl_hash``, ``cutlass``); core adds sku, nvcc."""
    description: str = ""
    make_bench: Callable[[Problem, Sequence[Config | Sentinel], BenchOptions], BenchCase] | None = (
        attrs.field(default=None, validator=_check_optional_callable))
    """Builds the measurement case of one problem for the bench protocol (None: not measurable)."""
    quantizations: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, converter=freeze)
    """Quantization schemes whose linear layers this family's plugin serves through the
    ``oasr_linear`` hook, each with the activation dtypes it takes (scaled_mm:
    ``{"int8_w8a8": ("fp16", "bf16")}``). They are the ``--quantization`` values ``oasr tune
    census`` accepts besides ``none``, whose dtypes are the families' ``dtypes``."""

    @zero_dims.validator
    def _check_zero_dims(self, _attribute: attrs.Attribute, value: frozenset[str]) -> None:
        unknown = sorted(set(value) - set(self.dims))
        if unknown:
            raise ValueError(f"family {self.name}: zero_dims {unknown} are not among its dims "
                             f"({', '.join(self.dims)})")

    @quantizations.validator
    def _check_quantizations(self, _attribute: attrs.Attribute, value: Mapping[str, Any]) -> None:
        for scheme, dtypes in value.items():
            if not NAME_RE.match(scheme) or scheme == "none":
                raise ValueError(f"family {self.name}: quantization {scheme!r} is not a scheme "
                                 "name (lower case, digits and '_'; 'none' is implied)")
            if not isinstance(dtypes, tuple) or not dtypes or not all(
                    isinstance(d, str) and d for d in dtypes):
                raise ValueError(f"family {self.name}: quantization {scheme!r} needs a "
                                 "non-empty sequence of activation dtype names")

    @fallback.validator
    def _check_fallback(self, _attribute: attrs.Attribute, value: Sentinel) -> None:
        if value not in (Sentinel.DEFAULT, Sentinel.HEURISTIC):
            raise ValueError(f"family {self.name}: fallback must be DEFAULT or HEURISTIC")
        if value is Sentinel.HEURISTIC and self.sentinel_heuristic is None:
            raise ValueError(f"family {self.name}: a HEURISTIC fallback needs sentinel_heuristic")

    @untuned.validator
    def _check_untuned(self, _attribute: attrs.Attribute, value: Sentinel | None) -> None:
        if value is None or value in (Sentinel.DEFAULT, self.fallback):
            return
        if value is Sentinel.HEURISTIC:
            raise ValueError(f"family {self.name}: a HEURISTIC untuned selector needs a "
                             "HEURISTIC fallback (the shape heuristic)")
        if value is not Sentinel.TORCH or value not in self.sentinels:
            raise ValueError(f"family {self.name}: untuned must be None, DEFAULT, the fallback "
                             "or TORCH (with TORCH among the family's sentinels)")

    @property
    def untuned_choice(self) -> Sentinel:
        """The sentinel serving an uncovered shape when the model tier does not answer."""
        return self.untuned if self.untuned is not None else self.fallback

    @property
    def stem(self) -> str:
        """The tuning file's stem (``gemm`` -> ``gemm.json``)."""
        return self.db_stem or self.name

    def dims_problem(self, dims: Sequence[tuple[str, Any]]) -> str | None:
        """Why ``dims`` ((name, value) pairs) is not a static signature of this family, or
        None when it is: the family's dims in key order, each an integer, at least 1 (at
        least 0 for :attr:`zero_dims`)."""
        names = tuple(name for name, _ in dims)
        if names != self.dims:
            return (f"dims {', '.join(names) or 'none'} are not {self.name}'s "
                    f"({', '.join(self.dims)})")
        for name, value in dims:
            low = 0 if name in self.zero_dims else 1
            if type(value) is not int or value < low:
                kind = "a non-negative" if low == 0 else "a positive"
                return f"dim {name}={value!r} is not {kind} integer"
        return None

    def key_dtypes(self, dtype: str) -> tuple[str | None, ...]:
        """The ``dt=`` values to try for an operand dtype, most specific first."""
        if not self.key_dtype:
            return (None,)
        classes = tuple(c for c, members in self.dtype_classes.items() if dtype in members)
        return (dtype, *classes)


def _config_space(value: Sequence[Config] | Callable[[], Sequence[Config]]) -> tuple[Config, ...]:
    return tuple(value() if callable(value) else value)


def _always(*_args: Any) -> bool:
    return True


@attrs.frozen
class Lane:
    """A kernel generation of a family: its config space, feasibility and JIT module.

    Returned by ``oasr_register_lanes``. A lane may come from a different plugin than its
    family; that is how a third party adds kernels to an installed family.
    """

    name: str = attrs.field(validator=_check_name)
    family: str = attrs.field(validator=_check_name)
    arch_families: tuple[str, ...] = attrs.field(converter=_as_str_tuple, validator=_check_arches)
    """Arch families the lane runs on (``("sm80", "sm86", "sm89", "sm90")``)."""
    config_space: tuple[Config, ...] = attrs.field(converter=_config_space)
    """Every config of the lane, before feasibility (non-empty)."""
    default_config: str = attrs.field()
    """Id of the config ``Sentinel.DEFAULT`` means on this lane."""
    default_on: tuple[str, ...] = attrs.field(
        default=(), converter=_as_str_tuple, validator=_check_arches)
    """Arch families where this lane is the family's default lane."""
    is_feasible: Callable[[Config], bool] = attrs.field(default=_always)
    """Static predicate: does the config compile and fit (shared memory, thread maps)."""
    supports: Callable[[Config, Problem], bool] = attrs.field(default=_always)
    """Per-problem predicate: can the config run this shape (alignment, split vs K tiles)."""
    is_available: Callable[[Config], bool] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """Whether the config is in this process's compiled/production set (None: all are)."""
    jit_module: type | None = None
    """The lane's JIT module class, instantiated by the core (never at import)."""
    cost_features: Callable[[Config], Mapping[str, Any]] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """Cost-model features of a config (tile, warps/schedule, cluster, stages, split, smem)."""
    description: str = ""
    production: Callable[[str], Sequence[Config]] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """``(arch_family) -> configs`` this process's production module links (or will link once
    loaded) on the arch. The cost-model tier ranks only these, since a config outside it falls
    to torch at call time (None: every available config is compiled)."""
    jit_specs: Callable[[str, str], Sequence[Any]] | None = attrs.field(
        default=None, validator=_check_optional_callable)
    """``(arch_family, scope) -> [oasr_core.jit.JitSpec]``: the modules this lane loads on an
    arch; scope ``"production"`` (what the production path links) or ``"all"`` (the whole
    space, for builds). ``oasr tune prebuild`` compiles them without a GPU."""
    bench_modules: Any = None
    """Optional: lets a pruned build compile only the configs it times
    (:mod:`oasr_core.kit.bench_modules`: ``spec(arch_family, configs, dtypes)`` -> the
    ``JitSpec`` of a module of exactly ``configs``; ``install(arch_family, configs, dtypes)``
    makes ``make_bench`` measure from it; ``reset()``). None: the build compiles and measures
    from the whole-space module (``jit_specs(arch, "all")``), as before."""

    @config_space.validator
    def _check_space(self, _attribute: attrs.Attribute, value: tuple[Config, ...]) -> None:
        if not value:
            raise ValueError(f"lane {self.name}: config_space is empty")
        seen: set[str] = set()
        for c in value:
            if not isinstance(c, Config):
                raise TypeError(f"lane {self.name}: config_space holds a {type(c).__name__}, "
                                "expected oasr_core.types.Config")
            if c.lane != self.name:
                raise ValueError(f"lane {self.name}: config {c.id!r} says lane={c.lane!r}")
            if c.id in seen:
                raise ValueError(f"lane {self.name}: config id {c.id!r} appears twice")
            seen.add(c.id)

    @default_config.validator
    def _check_default(self, _attribute: attrs.Attribute, value: str) -> None:
        if all(c.id != value for c in self.config_space):
            raise ValueError(f"lane {self.name}: default_config {value!r} is not in config_space")

    @is_feasible.validator
    @supports.validator
    def _check_callable(self, attribute: attrs.Attribute, value: Any) -> None:
        if not callable(value):
            raise TypeError(f"lane {self.name}: {attribute.name} must be callable")

    def config(self, config_id: str) -> Config | None:
        """The config with this id, or None."""
        return self._by_id.get(config_id)

    @functools.cached_property
    def _by_id(self) -> Mapping[str, Config]:
        return MappingProxyType({c.id: c for c in self.config_space})

    @property
    def default(self) -> Config:
        """The default config record."""
        return self._by_id[self.default_config]

    def unusable_reason(self, config: Config, problem: Problem | None = None) -> str | None:
        """Why ``config`` cannot serve on this lane (and ``problem``), or None when it can:
        another lane's, not in the space, statically infeasible, not compiled in this
        process, or unable to run the shape."""
        if config.lane != self.name:
            return f"belongs to lane {config.lane!r}, not this process's lane {self.name!r}"
        own = self.config(config.id)
        if own is None:
            return f"is not in lane {self.name!r}'s config space"
        if not self.is_feasible(own):
            return "is statically infeasible"
        if self.is_available is not None and not self.is_available(own):
            return "is not in this process's compiled set"
        if problem is not None and not self.supports(own, problem):
            return "cannot run this shape"
        return None


@attrs.frozen
class Selection:
    """The answer of :func:`oasr_core.select`: what runs, and which tier said so."""

    choice: Config | Sentinel
    """What the serving tier named (a config, or a sentinel)."""
    tier: Tier
    """The tier that served it."""
    lane: str | None
    """The lane resolution ran for (None when no lane runs on the arch)."""
    config: Config | None
    """The config to launch: the choice itself, or what DEFAULT / HEURISTIC stand for;
    None for TORCH and FUSED (the family's own non-lane paths)."""
    reason: str = attrs.field(default="", eq=False)
    """Why the tier chose it, in words (``oasr tune select`` prints it); not compared."""

    @property
    def choice_id(self) -> str:
        """The choice as a tuning file spells it."""
        return self.choice.value if isinstance(self.choice, Sentinel) else self.choice.id


@attrs.frozen
class PluginLoadFailure:
    """A plugin that could not be loaded or whose records were rejected."""

    plugin: str
    """Entry-point (plugin) name."""
    distribution: str
    """``name version`` of the distribution that provides it, or ``?``."""
    error: str
    """One-line description of what failed."""
    kind: str = "load"
    """``load`` (import/register), ``record`` (bad return) or ``duplicate``."""
