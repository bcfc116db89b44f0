"""Integration: every config a loaded tier serves is in the production module (no compiler).

The tiers are loaded as a process loads them, user > system > cost model: a user tier whose
entries name explicit configs, ``default`` and ``heuristic`` regions over the shipped system
tier (``db/``) with its cost-model payload. For every installed family with an sm90 lane,
every choice those tiers serve at every region bound and point of every entry, and the cost
model's picks at uncovered shapes, must be a unit of the production module the lane would
load: a config missing there serves torch with a warning ("is not in this process's ...
module"), which a shipped table once hit through a ``default`` region of ``gemm_residual``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oasr_core import database, runtime, stamps
from oasr_core.database import parse_signature_key
from oasr_core.selection import clear_memo, resolve_tiers
from oasr_core.types import Problem, Sentinel

ROOT = Path(__file__).resolve().parents[1]
ARCH = "sm90"
RESIDUAL = "gemm_residual"


def _units(lane) -> set[str]:
    """The units the production modules compile (a bundle's members each)."""
    from oasr_core.jit.bundles import members_of

    return {name for spec in lane.jit_specs(ARCH, "production") for u in spec.units
            for name in members_of(u)}


def _unit_of(config, op: str) -> str:
    unit = config.params.get("unit", config.id)
    if op == RESIDUAL:
        from oasr_gemm import codegen

        return codegen.residual_unit(config)
    return unit


def _problems(family, key: str, entry):
    parsed = parse_signature_key(key)
    dims = tuple((n, int(v)) for n, v in parsed.dims)
    dtype = family.dtype_classes.get(parsed.dtype, (parsed.dtype,))[0] \
        if parsed.dtype is not None else family.dtypes[0]
    low = 1
    for region in entry.regions:
        high = region.m_hi if region.m_hi is not None else 2 * low
        for m in {low, high}:
            yield Problem(family=family.name, op=parsed.op, dtype=dtype, dims=dims, m=m)
        low = (region.m_hi or low) + 1
    for point in entry.points:
        b, t = (int(v) for v in point.split("x"))
        yield Problem(family=family.name, op=parsed.op, dtype=dtype, dims=dims, m=b * t,
                      point=point)


def _user_tier(root: Path, rt) -> dict[str, list[str]]:
    """A user tier per family over the first shipped entry of each op: an explicit config
    that is not always linked, ``default``, and ``heuristic`` where the family has one."""
    written: dict[str, list[str]] = {}
    for name in sorted(rt.registry.families):
        family = rt.registry.family(name)
        lane = rt.registry.active_lane(name, ARCH)
        system = rt.tiers(family, ARCH).system
        if lane is None or system is None:
            continue
        entries, first = {}, {}
        for key in system.entries:
            first.setdefault(parse_signature_key(key).op, key)
        for key in first.values():
            problem = next(_problems(family, key, system.entries[key]))
            usable = [c for c in lane.config_space if lane.supports(c, problem)]
            if not usable:
                continue
            tail = Sentinel.HEURISTIC.value if Sentinel.HEURISTIC in family.sentinels \
                else usable[len(usable) // 2].id
            middle = Sentinel.DEFAULT.value if Sentinel.DEFAULT in family.sentinels \
                else usable[0].id
            regions = ((64, usable[-1].id), (2048, middle), (None, tail))
            entries[key] = database.Entry(regions=regions)
        if entries:
            database.write_entries(database.tier_path(root, ARCH, family), family=family,
                                   arch=ARCH, lane=lane, entries=entries,
                                   configs={c.id: c for c in lane.config_space},
                                   soft=stamps.current_soft_validators(family))
            written[name] = sorted(entries)
    return written


@pytest.fixture
def tiers(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(ROOT / "db"))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
    monkeypatch.delenv("OASR_TUNE_MODEL_FALLBACK", raising=False)
    for env in ("OASR_GEMM_COMPILE_SET", "OASR_CONV1D_COMPILE_SET"):
        monkeypatch.delenv(env, raising=False)
    runtime.reload()
    rt = runtime.get_runtime()
    written = _user_tier(tmp_path / "user", rt)
    runtime.reload()
    clear_memo()
    yield runtime.get_runtime(), written
    runtime.reload()
    clear_memo()


def test_every_config_a_loaded_tier_serves_is_in_the_production_module(tiers):
    rt, written = tiers
    assert {"gemm", "conv1d"} <= set(written), written
    checked = missing = 0
    problems = []
    for name in sorted(rt.registry.families):
        family = rt.registry.family(name)
        lane = rt.registry.active_lane(name, ARCH)
        if lane is None or lane.jit_specs is None:
            continue
        units = _units(lane)
        loaded = rt.tiers(family, ARCH)
        for tf in (loaded.user, loaded.system):
            if tf is None:
                continue
            for key in tf.entries:
                for problem in _problems(family, key, tf.entries[key]):
                    sel = resolve_tiers(family, lane, ARCH, problem)
                    if sel.config is None:
                        continue
                    checked += 1
                    if _unit_of(sel.config, problem.op) not in units:
                        missing += 1
                        problems.append(f"{key} M={problem.m}: {sel.tier.value} serves "
                                        f"{sel.config.id}, not in {lane.name}'s module")
    assert checked > 100
    assert not missing, "\n".join(problems[:20])


def test_the_cost_model_tier_serves_only_production_configs(tiers):
    rt, _ = tiers
    family = rt.registry.family("gemm")
    lane = rt.registry.active_lane("gemm", ARCH)
    units = _units(lane)
    served = 0
    for n, k in ((512, 2048), (384, 1536), (2048, 512)):
        for m in (16, 416, 4096, 16384):
            problem = Problem(family="gemm", op="gemm", dtype="fp16", dims=(("N", n), ("K", k)),
                              m=m)
            sel = resolve_tiers(family, lane, ARCH, problem)
            if sel.config is not None:
                served += 1
                assert _unit_of(sel.config, "gemm") in units, (n, k, m, sel)
    assert served


def test_a_default_region_of_gemm_residual_links_the_default_residual_unit(tiers):
    rt, _ = tiers
    from oasr_gemm import jit

    lane = rt.registry.active_lane("gemm", ARCH)
    assert lane.default_config in jit.residual_referenced(lane.name, ARCH)
    assert f"{lane.default_config}_res" in _units(lane)
