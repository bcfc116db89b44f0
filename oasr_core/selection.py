"""Runtime resolution: user ▸ system ▸ cost model ▸ heuristic/default, memoised per epoch.

:func:`select` is what an op calls on every invocation. After the first resolution of a shape
in an epoch it is one dict lookup. A resolution walks the tiers of the active lane:

1. the user tier, then the system tier: the signature's entry (an exact ``dt=`` entry before a
   dtype-class one such as ``dt=half``); its exact point, else the first region whose upper
   bound is at or above ``m``. A region with no catch-all that ends below ``m`` is a miss and
   the next tier answers. A config that names another lane, is infeasible for the shape, or is
   not in this process's compiled set is warned about once and skipped to the next tier;
2. the cost-model tier (the ``oasr_model_select`` hook), when a plugin gives one, asked to
   choose among the lane's configs that this process has compiled (``Lane.production``) and
   can run the shape;
3. the family's untuned selector (``Family.untuned_choice``): torch, the shape heuristic, or
   the active lane's default.

Every resolution is counted under its tier (:func:`oasr_core.report.tuning_report`).

While an autotune session is active (:func:`oasr_core.autotune`, installed with
:func:`set_session`), a memo miss asks the session first: it serves a result it holds for the
shape, or measures the shape and serves the winner (counted under the user tier, where it is
published); when it cannot, the tiers answer as usual. Outside a session the memoised path is
unchanged: one dict lookup. The memo table and the session belong to the process runtime
(:mod:`oasr_core.runtime`): a reload or a new runtime starts with an empty table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from oasr_core.cost_model.tier import reason_for
from oasr_core.database import signature_key
from oasr_core.epoch import EpochMemo
from oasr_core.errors import ConfigurationError, DatabaseError, UnknownFamilyError
from oasr_core.runtime import current_runtime, get_runtime
from oasr_core.sentinels import file_sentinel_config, sentinel_config
from oasr_core.types import Config, Family, Lane, Problem, Selection, Sentinel, Tier

_MEMO = EpochMemo("oasr_core.selection")
"""Selections of the current epoch by call key; the table lives on the runtime's epoch."""


def clear_memo() -> None:
    """Forget every memoised selection of the current epoch (the epoch goes on)."""
    _MEMO.bind(get_runtime().state)
    _MEMO.clear()


def set_session(session: Any) -> Any:
    """Install ``session`` as the resolver asked before the tiers (None: none); returns the
    previous one.

    ``session.resolve(runtime, family, lane, arch, problem)`` returns a :class:`Selection`
    or None (the tiers answer). The session is held by the process runtime; the memo is
    cleared both ways, so a selection made outside a session never hides a miss inside one,
    and a session's answer never outlives it.
    """
    rt = get_runtime()
    old, rt.session = rt.session, session
    clear_memo()
    return old


def active_session() -> Any:
    """The installed autotune session, or None."""
    rt = current_runtime()
    return rt.session if rt is not None else None


def select(
    family: str,
    op: str,
    dtype: str,
    dims: Sequence[int] | Mapping[str, int],
    m: int,
    arch: str | None = None,
    *,
    point: str | None = None,
    lane: str | None = None,
) -> Selection:
    """The config serving ``op`` of ``family`` at this shape, and the tier that chose it.

    ``dims`` are the family's static dims, as a tuple in the family's order (fast path) or a
    mapping by name; ``m`` is the dynamic axis; ``arch`` an arch family like ``sm90`` (default:
    the current CUDA device); ``point`` an exact-point key for families that use them
    (conv1d's ``"1x3000"``); ``lane`` overrides the arch's active lane.
    """
    try:
        return _MEMO.table[(family, op, dtype, dims, m, arch, point, lane)]
    except (KeyError, TypeError):
        pass
    return _resolve_and_memoise(family, op, dtype, dims, m, arch, point, lane)


def _resolve_and_memoise(family, op, dtype, dims, m, arch, point, lane) -> Selection:
    rt = get_runtime()
    epoch = _MEMO.bind(rt.state)
    registry = rt.registry
    fam = registry.family(family)
    dims_t = _normalise_dims(fam, dims)
    hit = _MEMO.table.get((family, op, dtype, dims_t, m, arch, point, lane))
    if hit is not None:
        return hit
    if op not in fam.ops:
        raise UnknownFamilyError(f"family {family!r} has no op {op!r} (ops: {', '.join(fam.ops)})")
    if dtype not in fam.dtypes:
        raise ConfigurationError(
            f"family {family!r} does not serve dtype {dtype!r} (dtypes: {', '.join(fam.dtypes)})")
    if not isinstance(m, int) or m < 1:
        raise ConfigurationError(f"{fam.dynamic_axis}={m!r} must be a positive integer")
    arch_f = arch or rt.device_arch()
    active = _lane_for(registry, fam, arch_f, lane)
    problem = Problem(family=family, op=op, dtype=dtype,
                      dims=tuple(zip(fam.dims, dims_t, strict=True)), m=m, point=point)
    session = rt.session
    sel = None if session is None else session.resolve(rt, fam, active, arch_f, problem)
    if sel is None:
        sel = _resolve(rt, fam, active, arch_f, problem)
    rt.count(family, op, sel.tier)
    key = (family, op, dtype, dims, m, arch, point, lane)
    try:
        _MEMO.store(key, sel, epoch)
    except TypeError:  # a mapping of dims: memoise under the tuple form
        _MEMO.store((family, op, dtype, dims_t, m, arch, point, lane), sel, epoch)
    return sel


def torch_at_every_m(family: str, op: str, dtype: str, dims: Sequence[int],
                     arch: str | None = None) -> bool:
    """Whether :func:`select` answers torch for ``op`` of ``family`` at ``dims`` at every M,
    under the tiers in force: what lets a caller serve that signature from torch's own code
    with no per-call plan (a routed layer's own forward, :func:`oasr_core.route`).

    True only where no tier can answer a config at any M: no CUDA arch (``arch`` None and no
    device) or no lane on it; else no user or system entry for the signature (any key dtype,
    whatever its regions say), the family's untuned selector is ``torch``, no autotune
    session is installed, and every cost-model tier is silent for the signature whatever M
    is (``may_answer`` of the core's :class:`~oasr_core.cost_model.tier.ModelTier`: no
    calibration there, or no pick at any M of its sweep among what :func:`model_candidates`
    offers; another plugin's model tier counts as answering). False, so the per-M plan
    decides, otherwise; also for a family, op or dtype the registry does not know. Not
    memoised: it reads the tiers of the current epoch (loaded once per epoch), and callers
    re-ask on a reload.
    """
    rt = get_runtime()
    try:
        fam = rt.registry.family(family)
        dims_t = _normalise_dims(fam, dims)
    except (UnknownFamilyError, ConfigurationError):
        return False
    if op not in fam.ops or dtype not in fam.dtypes or rt.session is not None:
        return False
    arch = arch or rt.device_arch()
    lane = _lane_for(rt.registry, fam, arch, None)
    if arch is None or lane is None:
        return True
    if fam.untuned_choice is not Sentinel.TORCH:
        return False
    tiers = rt.tiers(fam, arch)
    for tf in (tiers.user, tiers.system):
        if tf is None:
            continue
        for dt in fam.key_dtypes(dtype):
            try:
                if tf.entries.get(signature_key(fam, op, dt, dims_t)) is not None:
                    return False
            except DatabaseError:  # a malformed entry: select warns and skips it
                return False
    impls = rt.pm.hook.oasr_model_select.get_hookimpls()
    if not impls:
        return True
    model = next((tf.model for tf in (tiers.user, tiers.system)
                  if tf is not None and tf.model), None)
    def offered(problem: Problem) -> tuple[Config, ...]:
        return model_candidates(lane, arch, problem)

    return not any(not hasattr(i.plugin, "may_answer")
                   or i.plugin.may_answer(fam, lane, op, dtype, dims_t, model, offered)
                   for i in impls)


def _normalise_dims(fam: Family, dims: Sequence[int] | Mapping[str, int]) -> tuple[int, ...]:
    if isinstance(dims, Mapping):
        if set(dims) != set(fam.dims):
            raise ConfigurationError(
                f"family {fam.name!r} is keyed by dims {', '.join(fam.dims)}; "
                f"got {', '.join(dims)}")
        values = tuple(dims[d] for d in fam.dims)
    else:
        values = tuple(dims)
        if len(values) != len(fam.dims):
            raise ConfigurationError(
                f"family {fam.name!r} is keyed by {len(fam.dims)} dims ({', '.join(fam.dims)}); "
                f"got {len(values)}")
    for name, v in zip(fam.dims, values, strict=True):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ConfigurationError(f"dim {name}={v!r} must be an integer")
    return values


def _lane_for(registry, fam: Family, arch: str | None, lane: str | None) -> Lane | None:
    if lane is not None:
        chosen = registry.lane(lane)
        if chosen.family != fam.name:
            raise UnknownFamilyError(
                f"lane {lane!r} belongs to family {chosen.family!r}, not {fam.name!r}")
        if arch is not None and arch not in chosen.arch_families:
            raise ConfigurationError(
                f"lane {lane!r} does not run on {arch} (runs on {', '.join(chosen.arch_families)})")
        return chosen
    if arch is None:
        return None
    return registry.active_lane(fam.name, arch)


def resolve_tiers(family: Family, lane: Lane | None, arch: str | None,
                  problem: Problem) -> Selection:
    """What the tiers serve for ``problem``, down to the fallback: not memoised, not counted,
    no session asked. Autotune measures against this answer (the incumbent)."""
    return _resolve(get_runtime(), family, lane, arch, problem)


def _resolve(rt, fam: Family, lane: Lane | None, arch: str | None, problem: Problem) -> Selection:
    if arch is not None and lane is not None:
        tiers = rt.tiers(fam, arch)
        sel = _from_tiers(rt, fam, lane, tiers, problem) or _from_model(rt, fam, lane, tiers,
                                                                        problem)
        if sel is not None:
            return sel
    return _fallback(rt, fam, lane, problem)


def _from_tiers(rt, fam: Family, lane: Lane, tiers, problem: Problem) -> Selection | None:
    for tier, tf in ((Tier.USER, tiers.user), (Tier.SYSTEM, tiers.system)):
        if tf is not None:
            sel = _from_file(rt, fam, lane, tier, tf, problem)
            if sel is not None:
                return sel
    return None


def from_tiers(family: Family, lane: Lane | None, arch: str | None,
               problem: Problem) -> Selection | None:
    """What the user, then the system tier serves at ``problem`` on ``lane``, resolved as
    :func:`select` resolves it (unusable configs warned about once and skipped); None when
    neither covers it. Neither memoised nor counted: for reports, not for op calls."""
    if arch is None or lane is None:
        return None
    rt = get_runtime()
    return _from_tiers(rt, family, lane, rt.tiers(family, arch), problem)


def _from_file(rt, fam: Family, lane: Lane, tier: Tier, tf, problem: Problem) -> Selection | None:
    dims = tuple(v for _, v in problem.dims)
    for dt in fam.key_dtypes(problem.dtype):
        key = signature_key(fam, problem.op, dt, dims)
        try:
            entry = tf.entries.get(key)
        except DatabaseError as exc:  # a lazily read entry that is malformed
            rt.warn_once(f"{tier.value}:entry:{exc}", f"oasr: {tier.value} tier entry skipped: "
                         f"{exc}; the next tier serves")
            continue
        if entry is None:
            continue
        choice_id = entry.lookup(problem.m, problem.point)
        if choice_id is None:
            continue
        sentinel = Sentinel.parse(choice_id)
        if sentinel is not None:
            sel = _from_file_sentinel(rt, fam, lane, tier, tf, key, sentinel, problem)
            if sel is not None:
                return sel
            continue
        config = tf.configs[choice_id]
        why = lane.unusable_reason(config, problem)
        if why is None:
            # The lane's own record, never the file's parameters under that id: it is what
            # the predicates judged and what the launcher runs (a file whose parameters
            # differ is reported stale for this entry by ``oasr tune status``).
            own = lane.config(config.id)
            return Selection(choice=own, tier=tier, lane=lane.name, config=own,
                             reason=f"{tier.value} tier entry {key}")
        rt.warn_once(f"{tier.value}:{tf.lane}:{config.lane}:{config.id}:{why}",
                     f"oasr: {tier.value} tier entry {key} names config {config.id!r} "
                     f"({config.lane}), which {why}; skipped, the next tier serves")
    return None


def _from_sentinel(fam: Family, lane: Lane | None, tier: Tier, sentinel: Sentinel,
                   problem: Problem) -> Selection:
    return Selection(choice=sentinel, tier=tier, lane=lane.name if lane is not None else None,
                     config=sentinel_config(fam, lane, sentinel, problem))


def _from_file_sentinel(rt, fam: Family, lane: Lane, tier: Tier, tf, key: str,
                        sentinel: Sentinel, problem: Problem) -> Selection | None:
    """A file's sentinel region on ``lane`` (:func:`oasr_core.sentinels.file_sentinel_config`);
    None, after one warning, when it cannot serve here."""
    config, why = file_sentinel_config(fam, lane, sentinel, problem, file_lane=tf.lane,
                                       stamp=tf.entry_soft(key))
    if why is None:
        return Selection(choice=sentinel, tier=tier, lane=lane.name, config=config,
                         reason=f"{tier.value} tier entry {key}")
    rt.warn_once(f"{tier.value}:{tf.lane}:{sentinel.value}:{why}",
                 f"oasr: {tier.value} tier entry {key} names {sentinel.value!r} ({tf.lane}), "
                 f"which {why}; skipped, the next tier serves")
    return None


def model_candidates(lane: Lane, arch: str, problem: Problem) -> tuple[Config, ...]:
    """What the cost-model tier may choose from: the lane's configs in this process's
    production set on ``arch`` (``Lane.production``; all when the lane gives none) that are
    usable for ``problem``. A config outside the production set is not in the loaded module,
    so serving it would only fall to torch at call time."""
    space = lane.config_space
    if lane.production is not None:
        compiled = {c.id for c in lane.production(arch)}
        space = tuple(c for c in space if c.id in compiled)
    return tuple(c for c in space if lane.unusable_reason(c, problem) is None)


def _from_model(rt, fam: Family, lane: Lane, tiers, problem: Problem) -> Selection | None:
    impls = rt.pm.hook.oasr_model_select.get_hookimpls()
    if not impls:
        return None
    model = None
    for tf in (tiers.user, tiers.system):
        if tf is not None and tf.model:
            model = tf.model
            break
    candidates = model_candidates(lane, tiers.arch, problem)
    if not candidates:
        return None
    picked = rt.pm.hook.oasr_model_select(
        family=fam, lane=lane, problem=problem, candidates=candidates, model=model)
    if picked is None or picked not in candidates:
        return None
    return Selection(choice=picked, tier=Tier.MODEL, lane=lane.name, config=picked,
                     reason=_model_reason(rt, lane, problem) or "a plugin's cost model")


def _model_reason(rt, lane: Lane | None, problem: Problem) -> str | None:
    return None if rt is None or lane is None else reason_for(rt.pm, lane.name, problem)


def _fallback(rt, fam: Family, lane: Lane | None, problem: Problem) -> Selection:
    choice = fam.untuned_choice
    tier = Tier.HEURISTIC if choice is Sentinel.HEURISTIC else Tier.DEFAULT
    sel = _from_sentinel(fam, lane, tier, choice, problem)
    why = _model_reason(rt, lane, problem)
    reason = f"no user or system entry covers it; the family's untuned selector is {choice.value}"
    if sel.config is not None and not lane.supports(sel.config, problem):
        # A fallback answers only what the shape can run: else no lane config (torch).
        reason += f", whose {sel.config.id} cannot run this shape, so no lane config serves"
        sel = attrs.evolve(sel, config=None)
    elif sel.config is not None and fam.untuned_gate is not None and not fam.untuned_gate(
            sel.config, problem):
        reason += (f", whose {sel.config.id} does not beat torch at this shape (the family's "
                   "untuned gate), so no lane config serves")
        sel = attrs.evolve(sel, config=None)
    elif sel.config is None and choice is Sentinel.HEURISTIC and lane is not None:
        reason += ", which has no config that can run this shape, so no lane config serves"
    return attrs.evolve(sel, reason=f"{reason}; cost model: {why}" if why else reason)
