"""A synthetic measurement log, for tests and for running the quality benchmark without a GPU.

The "truth" is deliberately not the model: it uses other constants (:data:`TRUTH_KNOBS`), a
slower L2 and faster tensor cores than the profile says, a hidden per-config efficiency
(lognormal, fixed per config id), a penalty when the weights spill out of L2, clock boost
on partial waves, and lognormal timing noise. Numbers from it test the machinery (parsing,
fitting, leave-one-signature-out, reports); they say nothing about a real GPU.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from oasr_core.arch import ArchProfile
from oasr_core.cost_model.features import CostFeatures, operand_bytes
from oasr_core.cost_model.structure import Knobs, combine, geometry, tile_cost

LANE = "synthetic_wgmma"
DEFAULT = "pp_128x128x64_c1x1"
WIDTHS = ((256, 256), (1024, 256), (256, 1024), (512, 512), (2048, 512), (512, 2048),
          (1536, 384), (3072, 768), (768, 3072), (640, 2560))
"""(N, K) signatures: the GPU.md widths plus Conformer-like feed-forward shapes."""
M_LADDER = (16, 32, 64, 128, 256, 416, 768, 1024, 1500, 2152, 4096, 8192, 16384)
TRUTH_KNOBS = Knobs(load_latency_us=0.7, cta_overhead_us=0.35, persistent_overhead_us=0.9,
                    sync_latency_us=0.6, sm_feed_cap=2.5, pingpong_overlap=0.7)


_WARP_SPECIALIZED = {"producer_warps": 4, "epilogue_smem": True, "fp32_partials": True}
_KINDS: dict[str, dict[str, Any]] = {
    "ws": {"kind": "ws", "warps": 8, **_WARP_SPECIALIZED},
    "pp": {"kind": "pp", "warps": 12, "persistent": True, "tiles_in_flight": 2,
           **_WARP_SPECIALIZED},
    "co": {"kind": "co", "warps": 12, "persistent": True, **_WARP_SPECIALIZED},
}
"""The synthetic lane's kernel structures, by config-id tag (``sk``: ``co`` with Stream-K)."""


def _params(tag: str, tile: tuple[int, int, int], cluster: tuple[int, int] = (1, 1),
            stages: int = 0, stream_k: bool = False, swap_ab: bool = False) -> dict[str, Any]:
    return {"tile": list(tile), "cluster": list(cluster), **_KINDS["co" if tag == "sk" else tag],
            "stages": stages, "stream_k": stream_k, "swap_ab": swap_ab, "split_k": 1}


def config_space() -> dict[str, dict[str, Any]]:
    """Config id -> params (feature names) of a Hopper-like lane of 40 configs."""
    space: dict[str, dict[str, Any]] = {}

    def add(tag: str, tile: tuple[int, int, int], cluster: tuple[int, int] = (1, 1),
            stages: int = 0, **kw: Any) -> None:
        cid = f"{tag}_{tile[0]}x{tile[1]}x{tile[2]}_c{cluster[0]}x{cluster[1]}"
        cid += f"_s{stages}" if stages else ""
        cid += "_swap" if kw.get("swap_ab") else ""
        space[cid] = _params(tag, tile, cluster, stages, stream_k=tag == "sk", **kw)

    for tn in (32, 64, 96, 128, 192, 256):
        add("ws", (64, tn, 64))
    for tn in (32, 64, 80, 96, 128, 160):
        add("ws", (128, tn, 64))
    for tile in ((64, 32, 128), (64, 64, 128), (128, 64, 128)):
        add("ws", tile)
    for tile in ((64, 64, 64), (128, 64, 64), (128, 96, 64)):
        add("ws", tile, stages=4)
    for tile in ((128, 64, 64), (128, 128, 64)):
        add("ws", tile, (2, 1))
    for tn in (64, 96, 128, 160, 192):
        add("pp", (128, tn, 64))
    for cluster in ((1, 2), (2, 1)):
        add("pp", (128, 128, 64), cluster)
    add("pp", (64, 128, 64))
    for tile, cluster in (((128, 128, 64), (1, 1)), ((128, 256, 64), (1, 1)),
                          ((256, 128, 64), (2, 1)), ((128, 128, 64), (1, 2))):
        add("co", tile, cluster)
    for tile in ((128, 128, 64), (128, 64, 64)):
        add("sk", tile)
    for tile in ((64, 16, 128), (64, 32, 128)):
        add("ws", tile, swap_ab=True)
    return space


def _hidden(config_id: str, salt: str, sigma: float) -> float:
    digest = hashlib.sha256(f"{salt}:{config_id}".encode()).digest()
    u1, u2 = (int.from_bytes(digest[i:i + 4], "big") / 2**32 for i in (0, 4))
    z = math.sqrt(-2 * math.log(max(u1, 1e-12))) * math.cos(2 * math.pi * u2)
    return math.exp(sigma * z)


@attrs.frozen
class Truth:
    """The synthetic GPU: a profile, constants and hidden per-config factors."""

    profile: ArchProfile
    knobs: Knobs = TRUTH_KNOBS
    hidden_sigma: float = 0.15
    noise: float = 0.015

    @classmethod
    def sm90(cls) -> Truth:
        base = ArchProfile.synthetic("sm90")
        return cls(profile=attrs.evolve(base, l2_gbps=base.l2_gbps * 0.85,
                                        tensor_tflops={"half": 820.0}, launch_us_graph=0.9))

    def time_us(self, config_id: str, params: dict[str, Any], m: int, n: int, k: int,
                dtype: str = "fp16") -> float:
        """Noise-free synthetic time in us (``inf`` when the config cannot run it)."""
        f = CostFeatures.from_mapping(params)
        tc = tile_cost(f, self.profile, dtype, self.knobs)
        geo = geometry(f, tc, m, n, k, self.profile, dtype, self.knobs) if tc else None
        if geo is None:
            return math.inf
        a = tc.a * _hidden(config_id, "a", self.hidden_sigma)
        b = tc.b * _hidden(config_id, "b", self.hidden_sigma)
        if n * k * operand_bytes(dtype) > self.profile.l2_bytes // 2:
            b *= 1.3
        if geo.waves == 1 and geo.ctas < self.profile.sms // 2:
            b *= 0.9
        return combine(geo, a, b, 1.0, self.profile.launch_us_graph)


def synthetic_log(*, family: str, op: str, widths: Sequence[tuple[int, int]] = WIDTHS,
                  ms: Sequence[int] = M_LADDER, truth: Truth | None = None, seed: int = 0,
                  dtype: str = "fp16", torch_arm: bool = True) -> Iterator[dict[str, Any]]:
    """Measurement-log rows (the fields :mod:`.calibrate` reads) of every config at every
    (width, M), plus a ``torch`` sentinel arm per point, written as rows of ``family``'s
    ``op`` (a GEMM-shaped op with static dims N and K)."""
    truth = truth or Truth.sm90()
    rng = random.Random(seed)
    space = config_space()
    for n, k in widths:
        for m in ms:
            best = math.inf
            for cid, params in space.items():
                t = truth.time_us(cid, params, m, n, k, dtype)
                if not math.isfinite(t):
                    continue
                t *= math.exp(rng.gauss(0.0, truth.noise))
                best = min(best, t)
                yield _row(cid, params, family, op, dtype, m, n, k, t, truth)
            if torch_arm and math.isfinite(best):
                t = best * math.exp(rng.gauss(0.05, 0.1))
                yield _row("torch", {"sentinel": "torch"}, family, op, dtype, m, n, k, t,
                           truth)


def _row(cid: str, params: dict[str, Any], family: str, op: str, dtype: str, m: int, n: int,
         k: int, t_us: float, truth: Truth) -> dict[str, Any]:
    return {"family": family, "op": op, "dtype": dtype, "N": n, "K": k, "M": m,
            "config": cid, "lane": LANE, "params": params, "median_ms": round(t_us / 1e3, 7),
            "sigma_ms": round(t_us * truth.noise / 1e3, 7), "contended": False,
            "arch": truth.profile.arch, "sku": truth.profile.sku}
