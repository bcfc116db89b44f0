"""Test plugins and helpers shared by the core's selection and CLI tests."""

from __future__ import annotations

from pathlib import Path

import oasr_core
from oasr_core import database, runtime
from oasr_core.types import Config, Family, Lane, Sentinel

ARCH = "sm90"


def _split_ok(config: Config, problem) -> bool:
    split = config.params.get("split", 1)
    return problem.dim("K") // 64 >= split


def _avail(config: Config) -> bool:
    return not config.params.get("uncompiled", False)


class GemmLike:
    """A gemm-shaped family with a main lane and a second lane on the same arch."""

    @oasr_core.hookimpl
    def oasr_register_families(self):
        return [Family(name="tg", ops=("gemm", "gemm_activation"), dims=("N", "K"),
                       dtypes=("fp16", "bf16"), dtype_classes={"half": ("fp16", "bf16")},
                       sentinels={Sentinel.DEFAULT, Sentinel.TORCH})]

    @oasr_core.hookimpl
    def oasr_register_lanes(self):
        main = [Config(id=i, lane="tg_main", params=p) for i, p in (
            ("a", {"tile": [32, 64]}), ("b", {"tile": [64, 64]}), ("d", {"tile": [128, 128]}),
            ("split8", {"tile": [64, 64], "split": 8}),
            ("uncompiled", {"tile": [16, 64], "uncompiled": True}))]
        other = [Config(id="x", lane="tg_other", params={"tile": [8, 8]})]
        return [
            Lane(name="tg_main", family="tg", arch_families=("sm80", "sm90"), default_on=("sm90",),
                 config_space=main, default_config="d", supports=_split_ok, is_available=_avail),
            Lane(name="tg_other", family="tg", arch_families=("sm90",), config_space=other,
                 default_config="x"),
        ]


def _ladder(problem, lane):
    return lane.config("small" if problem.m <= 64 else "big")


class QuantLike:
    """A scaled_mm-shaped family: no dtype in keys, a heuristic fallback."""

    @oasr_core.hookimpl
    def oasr_register_families(self):
        return [Family(name="tq", ops=("scaled_mm",), dims=("N", "K"), dtypes=("int8",),
                       key_dtype=False, sentinels={Sentinel.HEURISTIC},
                       fallback=Sentinel.HEURISTIC, sentinel_heuristic=_ladder)]

    @oasr_core.hookimpl
    def oasr_register_lanes(self):
        cfgs = [Config(id=i, lane="tq_lane", params={}) for i in ("small", "big", "sk")]
        return [Lane(name="tq_lane", family="tq", arch_families=("sm90",), default_on=("sm90",),
                     config_space=cfgs, default_config="big")]


class ConvLike:
    """A conv1d-shaped family with exact points."""

    @oasr_core.hookimpl
    def oasr_register_families(self):
        return [Family(name="tc", ops=("conv1d",), dims=("Cin", "Cout"), dtypes=("fp16",),
                       exact_points=True)]

    @oasr_core.hookimpl
    def oasr_register_lanes(self):
        cfgs = [Config(id=i, lane="tc_lane", params={}) for i in ("p", "r", "dflt")]
        return [Lane(name="tc_lane", family="tc", arch_families=("sm90",), default_on=("sm90",),
                     config_space=cfgs, default_config="dflt")]


def write(root: Path, family: str, entries: dict, lane: str | None = None) -> None:
    """Write ``{(op, dt, dims): regions-or-Entry}`` into the family's file under ``root``."""
    rt = runtime.get_runtime()
    fam = rt.registry.family(family)
    lane_rec = rt.registry.lane(lane) if lane else rt.registry.active_lane(family, ARCH)
    out, used = {}, set()
    for (op, dt, dims), value in entries.items():
        entry = value if isinstance(value, database.Entry) else database.Entry(
            regions=tuple(tuple(r) for r in value))
        used.update(c for _, c in entry.regions)
        used.update(entry.points.values())
        out[database.signature_key(fam, op, dt, dims)] = entry
    configs = {}
    for cid in used:
        if Sentinel.parse(cid) is None:
            found = [ln.config(cid) for ln in rt.registry.lanes_of(family) if ln.config(cid)]
            configs[cid] = found[0]
    database.write_entries(database.tier_path(root, ARCH, fam), family=fam, arch=ARCH,
                           lane=lane_rec.name, entries=out, configs=configs, soft={})
    rt.reload()


