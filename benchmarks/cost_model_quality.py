"""Held-out quality of the cost model on a measurement log, as markdown tables.

Leave-one-signature-out (fit on every other (op, dtype, N, K), score the held-out one point by
point; :mod:`oasr_core.cost_model.quality`) for the structure, the group-calibrated and the
calibrated model, the lane default, and nvMatmulHeuristics' ranking
(``pip install nvidia-matmul-heuristics==0.1.0.27``; runs on a CPU with its predefined
``H200_SXM`` hardware profile). Targets: held-out top-1 geomean regret <= 8 % for the mode
the build would serve; the pruned set (structure top-k ∪ calibrated top-k ∪ forced arms)
within 1 % of the exhaustive best at >= 99 % of points.

nvMatmulHeuristics returns its own ranked CUTLASS configs; each is mapped onto the configs
measured at the point: **exact** = same CTA tile (M, N, K) and cluster (3.x) or same tile,
warp count, stages and split-K (2.x); **tile** = same CTA tile only. Several measured configs
can share a tile and cluster (ws / ping-pong / cooperative): nvMMH does not model the
schedule, so they follow in a fixed order (ws, ping-pong, cooperative; no Stream-K first).
Swapped-operand configs are never matched. Coverage says how often the mapping found any.

Run::

    python benchmarks/cost_model_quality.py --log db/sm90/measurements/gemm.jsonl \\
        --profile PROFILE.json --out benchmarks/results/h200_cost_model.md
    python benchmarks/cost_model_quality.py --synthetic     # no GPU, no log: machinery only
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from oasr_core.arch import ArchProfile
from oasr_core.cost_model import evaluate_loso, parse_rows, read_log
from oasr_core.cost_model.quality import Point
from oasr_core.errors import OasrError

NVMMH_GPU = {"sm80": "A100_SXM_80GB", "sm86": "RTX_A6000", "sm89": "L40S", "sm90": "H200_SXM",
             "sm100": "B200", "sm120": "RTX_5090"}
_SCHEDULE_ORDER = {"ws": 0, "pingpong": 1, "cooperative": 2, "mma_sync": 0}


class NvMMH:
    """nvMatmulHeuristics' ranking mapped onto measured configs (see the module docstring)."""

    def __init__(self, gpu: str, count: int, cutlass2: bool) -> None:
        import nvMatmulHeuristics as nv

        self.nv = nv
        target = nv.NvMatmulHeuristicsTarget.CUTLASS if cutlass2 else \
            nv.NvMatmulHeuristicsTarget.CUTLASS3
        self.api = nv.NvMatmulHeuristicsInterface(target, precision="HSH")
        self.hw = self.api.createHardwareDescriptor()
        self.api.setHardwarePredefinedGpu(self.hw, nv.NvMatmulHeuristicsNvidiaGpu[gpu])
        self.layout = nv.NvMatmulHeuristicsMatmulLayout.NT_ROW_MAJOR  # D = A W^T, row-major
        self.api.loadInternalDiscoverySet(self.layout, self.hw)
        self.count, self.cutlass2 = count, cutlass2
        self._cache: dict[tuple[int, int, int], list[Any]] = {}
        self.coverage: dict[str, list[bool]] = defaultdict(list)
        self.mapped_share: dict[str, list[float]] = defaultdict(list)

    def close(self) -> None:
        """Free the descriptor and drop the handle: destroying the handle during interpreter
        teardown crashes 0.1.0.27."""
        self.api.destroyHardwareDescriptor(self.hw)
        self.api.handle = None

    def kernels(self, m: int, n: int, k: int) -> list[Any]:
        key = (m, n, k)
        if key not in self._cache:
            got = self.api.get_with_mnk(m, n, k, self.layout, self.count, self.hw)
            self._cache[key] = [g["kernel"] for g in got]
        return self._cache[key]

    def _keys(self, kern: Any, exact: bool) -> tuple:
        tile = (kern.cta_tile_m, kern.cta_tile_n, kern.cta_tile_k)
        if not exact:
            return tile
        if self.cutlass2:
            warps = (kern.cta_tile_m // kern.warp_tile_m) * (kern.cta_tile_n // kern.warp_tile_n) \
                * max(1, kern.cta_tile_k // kern.warp_tile_k)
            return (*tile, warps, kern.stages, kern.split_k)
        return (*tile, kern.cluster_m, kern.cluster_n)

    def _feature_key(self, f: Any, exact: bool) -> tuple:
        tile = (f.tile_m, f.tile_n, f.tile_k)
        if not exact:
            return tile
        if self.cutlass2:
            return (*tile, f.warps, f.stages, f.split_k)
        return (*tile, f.cluster_m, f.cluster_n)

    def ranker(self, exact: bool):
        name = "exact" if exact else "tile"

        def ranked(point: Point) -> list[str]:
            _, _, n, k = point.signature
            by_key: dict[tuple, list[str]] = defaultdict(list)
            order = sorted(point.features.items(), key=lambda kv: (
                _SCHEDULE_ORDER.get(kv[1].kind, 3), kv[1].stream_k, kv[1].split_k, kv[0]))
            for cid, f in order:
                if not f.swap_ab:
                    by_key[self._feature_key(f, exact)].append(cid)
            out: list[str] = []
            kernels = self.kernels(point.m, n, k)
            hits = 0
            for kern in kernels:
                found = by_key.get(self._keys(kern, exact), [])
                hits += bool(found)
                out.extend(c for c in found if c not in out)
            self.coverage[name].append(bool(out))
            self.mapped_share[name].append(hits / len(kernels) if kernels else 0.0)
            return out
        return ranked


def _lane_defaults(specs: list[str]) -> dict[str | None, str]:
    out: dict[str | None, str] = {}
    for spec in specs:
        lane, sep, cid = spec.partition("=")
        out[lane if sep else None] = cid if sep else lane
    return out


def _registered_lane(name: str):
    """The installed plugin's lane record, or None (features then come from ``params``)."""
    try:
        from oasr_core.plugins import make_plugin_manager
        from oasr_core.registry import Registry

        return Registry.from_plugin_manager(make_plugin_manager()).lane(name)
    except (OasrError, ImportError, KeyError):
        return None


def _load_profile(path: str | None, arch: str) -> ArchProfile:
    if path is None:
        return ArchProfile.synthetic(arch)
    raw = json.loads(Path(path).read_text())
    if "model" in raw and isinstance(raw["model"], dict):  # a tuning file
        raw = raw["model"]
    if "profile" in raw:  # a model payload
        raw = raw["profile"]
    return ArchProfile.from_json(raw)


def _section(lane: str, raw_rows: list[dict], args, profile: ArchProfile) -> list[str]:
    record = _registered_lane(lane) if args.features == "registry" else None
    features = getattr(record, "cost_features", None)
    defaults = _lane_defaults(args.default)
    default_id = defaults.get(lane) or defaults.get(None) or getattr(record, "default_config",
                                                                     None)
    configs = {c.id: c for c in record.config_space} if record is not None else None
    rows, skipped = parse_rows(raw_rows, arch=profile.arch, features=features, configs=configs)
    lines = [f"## Lane `{lane}`", "",
             f"{len(rows)} usable rows ({dict(skipped) or 'none skipped'}), "
             f"{len({r.config for r in rows if r.features is not None})} described configs, "
             f"features from {'the registered lane' if features else 'row params'}, "
             f"default `{default_id}`, profile `{profile.sku}` ({profile.source}).", ""]
    extra, nvmmh = {}, None
    if args.nvmmh:
        cutlass2 = any(r.features is not None and r.features.sync_mma for r in rows)
        try:
            nvmmh = NvMMH(args.nvmmh_gpu or NVMMH_GPU.get(profile.arch, "H200_SXM"),
                          args.nvmmh_count, cutlass2)
            extra = {"nvMMH exact": nvmmh.ranker(True), "nvMMH tile": nvmmh.ranker(False)}
        except (ImportError, OSError, KeyError, RuntimeError) as exc:
            lines += [f"nvMatmulHeuristics unavailable: {exc!r}", ""]
    report = evaluate_loso(rows, profile, default_id=default_id, extra=extra,
                           ks=args.k, prune_k=args.prune_k)
    lines += [report.to_markdown(), ""]
    if nvmmh is not None:
        for name in ("exact", "tile"):
            cov, share = nvmmh.coverage[name], nvmmh.mapped_share[name]
            lines.append(f"nvMMH {name} mapping: at least one measured config at "
                         f"{100 * sum(cov) / max(1, len(cov)):.1f}% of points; "
                         f"{100 * sum(share) / max(1, len(share)):.1f}% of its returned "
                         f"configs (top {args.nvmmh_count}) map on average.")
        nvmmh.close()
        lines.append("")
    held = report.rankers
    serve = "structure"
    for mode in ("group", "calibrated"):
        if held[mode].regret_geomean < held[serve].regret_geomean - 0.005:
            serve = mode
    regret = held[serve].regret_geomean
    lines += [f"Served mode (lowest held-out regret): **{serve}**, top-1 geomean regret "
              f"{100 * regret:.1f}% (target <= 8%: {'met' if regret <= 0.08 else 'NOT met'}); "
              f"pruned set {100 * report.pruned_hit:.1f}% (target >= 99%: "
              f"{'met' if report.pruned_hit >= 0.99 else 'NOT met'}).", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--log", action="append", help="measurement log (JSONL); repeatable")
    src.add_argument("--synthetic", action="store_true", help="generate a synthetic sm90 log")
    ap.add_argument("--arch", default="sm90", help="arch family of the rows to use")
    ap.add_argument("--profile", help="ArchProfile JSON, a model payload or a tuning file "
                                      "(default: the synthetic profile of --arch)")
    ap.add_argument("--lane", help="only this lane (default: every lane in the log)")
    ap.add_argument("--default", action="append", default=[],
                    help="lane default: ID or LANE=ID (default: the registered lane's)")
    ap.add_argument("--features", choices=("registry", "params"), default="registry")
    ap.add_argument("--k", type=lambda s: tuple(int(x) for x in s.split(",")),
                    default=(1, 4, 8, 16), help="recall@k cut-offs")
    ap.add_argument("--prune-k", type=int, default=28)
    ap.add_argument("--nvmmh", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--nvmmh-gpu", help="predefined nvMMH GPU (default by arch: H200_SXM...)")
    ap.add_argument("--nvmmh-count", type=int, default=64)
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args(argv)

    if args.synthetic:
        from oasr_core.cost_model.synthetic import DEFAULT, synthetic_log

        raw_rows = list(synthetic_log(family="gemm", op="gemm"))
        args.default = args.default or [DEFAULT]
        source = "synthetic log (oasr_core.cost_model.synthetic: tests the machinery only)"
    else:
        raw_rows = [r for path in args.log for r in read_log(path)]
        source = ", ".join(f"`{p}`" for p in args.log)
    profile = _load_profile(args.profile, args.arch)
    by_lane: dict[str, list[dict]] = defaultdict(list)
    for r in raw_rows:
        lane = str(r.get("lane") or "?")
        if args.lane is None or lane == args.lane:
            by_lane[lane].append(r)
    lines = ["# Cost model quality, leave-one-signature-out", "",
             f"Source: {source}; {len(raw_rows)} rows, lanes "
             f"{dict(Counter(str(r.get('lane') or '?') for r in raw_rows))}.", ""]
    for lane, rows in sorted(by_lane.items()):
        lines += _section(lane, rows, args, profile)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if by_lane else 1


if __name__ == "__main__":
    sys.exit(main())
