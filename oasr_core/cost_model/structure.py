"""The uncalibrated structure of the cost model.

For a config c and a problem (M, N, K) the predicted time in microseconds is::

    T = W·r · (a_c + b_c · k_iters) + R_c + launches · L_graph,      T >= bytes / BW_dram

- ``a_c``: fixed time of one tile on one SM (CTA setup, pipeline fill, epilogue write);
- ``b_c``: time of one main-loop iteration of a lone CTA: the slowest of its MMA work at the
  SM's tensor rate, its operand bytes at a lone SM's L2 feed, and the load latency spread
  over ``stages - 1`` iterations in flight;
- ``W·r``: the sum over waves of the residency effect of the ``n`` CTAs (or in-flight
  tiles) that share an SM in that wave. They share its tensor cores and, with every other
  active SM, the L2 bandwidth, so ``r = max(1, n · thr / c)``: ``thr`` is one CTA's
  throughput-bound time for the term at its contended share (MMA work or operand bytes for
  ``b``; fill and epilogue bytes for ``a``) and ``c`` the term's lone-CTA coefficient; ``r``
  is evaluated per term, because fixed CTA costs overlap where the main loop contends.
  Two rules: a partial wave's CTAs spread one per SM before any SM takes a second
  (``n = ceil(tail / SMs)``, never the occupancy), and a split larger than the K-tile count
  is infeasible (no prediction);
- ``R_c``: split-K fix-ups or the parallel reduction, Stream-K peer fix-ups, and the setup of
  a persistent kernel; ``launches``: kernel nodes per call (a workspace memset counts).

Calibration keeps the geometry (``x1 = W·r``, ``x2 = W·r·k_iters``, ``x3 = R`` shape) and
refits ``a_c``, ``b_c`` and a multiplier ``rho_c`` of ``R`` (:mod:`.calibrate`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from oasr_core.arch import ArchProfile
from oasr_core.cost_model.features import OUT_BYTES, CostFeatures, dtype_class, operand_bytes
from oasr_core.errors import ConfigurationError

SYNC_MMA_EFFICIENCY = {"sm90": 0.6, "sm100": 0.5}
"""Fraction of the measured tensor rate (that of the arch's fastest, asynchronous tensor
instruction) a ``sync_mma`` main loop reaches; 1.0 on archs whose fastest tensor instruction
is ``mma.sync``."""


@attrs.frozen
class Knobs:
    """Constants of the structure, named and carried with every model (never hard-coded)."""

    load_latency_us: float = 0.5
    """Latency of one operand load from L2 (TMA or ``cp.async``)."""
    cta_overhead_us: float = 0.25
    """Launch, setup and teardown of one non-persistent CTA."""
    persistent_overhead_us: float = 0.6
    """Extra fixed cost of a persistent kernel (scheduler setup, producer warps)."""
    sync_latency_us: float = 0.4
    """One inter-CTA hand-off of a split-K or Stream-K partial tile."""
    sm_feed_cap: float = 3.0
    """How many fair shares of L2 bandwidth a lone SM can pull."""
    pingpong_overlap: float = 0.5
    """Fraction of a tile's epilogue hidden under the other tile's main loop when a persistent
    CTA has two tiles in flight (``tiles_in_flight=2``, the ping-pong kernels; the name is
    part of the persisted payload)."""
    reg_overhead: int = 64
    """Registers per thread besides the accumulators (estimate when a lane gives none)."""
    epilogue_smem: int = 8192
    """Shared memory an ``epilogue_smem`` epilogue reserves when a lane gives no ``smem``."""
    smem_reserved: int = 1024
    """Shared memory the system reserves per CTA."""
    max_ctas_per_sm: int = 32
    min_iters_per_sk_unit: int = 8
    """Stream-K: fewest K tiles a Stream-K unit takes (CUTLASS 3.x's heuristic)."""

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Knobs:
        """Inverse of :meth:`to_json`; ``ConfigurationError`` for an unknown knob or a value
        that is not a finite non-negative number (an integer where the default is one; at
        least 1 for the two counts the structure divides by)."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"cost model knobs must be an object, not "
                                     f"{type(raw).__name__}")
        fields = {a.name: a for a in attrs.fields(cls)}
        unknown = set(raw) - set(fields)
        if unknown:
            names = ", ".join(sorted(map(str, unknown)))
            raise ConfigurationError(f"cost model knobs: unknown {names}")
        values = {}
        for name, value in raw.items():
            integral = isinstance(fields[name].default, int)
            if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)) \
                    or not math.isfinite(value) or value < _KNOB_FLOOR.get(name, 0):
                kind = "an integer" if integral else "a finite number"
                raise ConfigurationError(f"cost model knobs: {name}={value!r} is not {kind} "
                                         f">= {_KNOB_FLOOR.get(name, 0)}")
            values[name] = value
        return cls(**values)


_KNOB_FLOOR = {"max_ctas_per_sm": 1, "min_iters_per_sk_unit": 1}
"""Knobs the structure divides by or takes as a count of CTAs: at least 1."""


DEFAULT_KNOBS = Knobs()
"""The knobs of an uncalibrated model."""


@attrs.frozen
class TileCost:
    """Problem-independent costs of one config on one profile and dtype."""

    a: float
    """Structure ``a_c`` (us per tile)."""
    b: float
    """Structure ``b_c`` (us per K iteration of a lone CTA)."""
    t_mma: float
    """MMA time of one K iteration at the SM's full tensor rate (us)."""
    bytes_iter: float
    """L2 operand bytes one CTA pulls per K iteration (after cluster multicast)."""
    bytes_fixed: float
    """L2 bytes of a tile's fixed part: the first stage's operands and the output tile."""
    t_partial: float
    """Folding one partial tile into another (split-K / Stream-K fix-up), us."""
    occupancy: int
    """CTAs resident per SM."""
    slots: int
    """Tiles in flight per SM (occupancy; a persistent kernel's ``tiles_in_flight``)."""
    stages: int
    smem: int


@attrs.frozen
class Geometry:
    """The problem-dependent terms of one (config, problem)."""

    x1: float
    """``W·r`` of the ``a`` term: residency-weighted waves (multiplies ``a_c``)."""
    x2: float
    """``W·r·k_iters`` of the ``b`` term (multiplies ``b_c``)."""
    x3: float
    """``R_c`` at ``rho = 1`` (us)."""
    launches: int
    floor_us: float
    """``bytes / BW_dram``: no config runs faster."""
    waves: int
    k_iters: int
    ctas: int


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_cost(f: CostFeatures, profile: ArchProfile, dtype: str,
              knobs: Knobs = DEFAULT_KNOBS) -> TileCost | None:
    """The structure coefficients of a config, or None when it cannot run on ``profile``
    (shared memory beyond the per-block limit, or a dtype class without tensor support)."""
    rate = profile.tensor_tflops.get(dtype_class(dtype))
    if rate is None:
        return None
    elem = operand_bytes(dtype)
    tm, tn, tk = f.tile_m, f.tile_n, f.tile_k
    flops_sm = rate * 1e12 / profile.sms
    if f.sync_mma:
        flops_sm *= SYNC_MMA_EFFICIENCY.get(profile.arch, 1.0)
    stage_bytes = (tm + tn) * tk * elem
    epi_smem = knobs.epilogue_smem if f.epilogue_smem else 0
    if f.stages:
        stages, smem = f.stages, f.smem or f.stages * stage_bytes + epi_smem
    else:  # the builder fills shared memory with stages, whatever smem the lane estimated
        stages = max(2, (profile.smem_per_block - epi_smem) // stage_bytes)
        smem = max(f.smem or 0, stages * stage_bytes + epi_smem)
    if smem > profile.smem_per_block:
        return None
    threads = f.threads
    if f.persistent:
        occupancy = 1
        slots = f.tiles_in_flight
    else:
        consumers = f.accumulating_threads
        regs = f.regs_per_thread or min(255, _cdiv(tm * tn // consumers + knobs.reg_overhead, 8)
                                        * 8)
        occupancy = max(1, min(profile.smem_per_sm // (smem + knobs.smem_reserved),
                               profile.max_threads_per_sm // threads,
                               profile.regs_per_sm // (regs * threads), knobs.max_ctas_per_sm))
        slots = occupancy
    bytes_iter = (tm / f.cluster_n + tn / f.cluster_m) * tk * elem  # multicast in a cluster
    feed_solo = profile.l2_gbps * 1e3 / profile.sms * knobs.sm_feed_cap
    t_mma = 2.0 * tm * tn * tk / flops_sm * 1e6
    t_load = bytes_iter / feed_solo
    b = max(t_mma, t_load, knobs.load_latency_us / max(1, stages - 1))
    out_bytes = 4 if f.parallel_split_k else OUT_BYTES
    epilogue = tm * tn * out_bytes / feed_solo + 0.5 * knobs.load_latency_us
    if f.persistent and f.tiles_in_flight > 1:
        epilogue *= 1.0 - knobs.pingpong_overlap
    a = (0.0 if f.persistent else knobs.cta_overhead_us) + knobs.load_latency_us + t_load \
        + epilogue
    partial_bytes = 4 if f.fp32_partials else OUT_BYTES
    t_partial = knobs.sync_latency_us + 2.0 * tm * tn * partial_bytes / feed_solo
    return TileCost(a=a, b=b, t_mma=t_mma, bytes_iter=bytes_iter,
                    bytes_fixed=bytes_iter + tm * tn * out_bytes, t_partial=t_partial,
                    occupancy=occupancy, slots=slots, stages=stages, smem=smem)


def geometry(f: CostFeatures, tc: TileCost, m: int, n: int, k: int, profile: ArchProfile,
             dtype: str, knobs: Knobs = DEFAULT_KNOBS) -> Geometry | None:
    """Waves, residency, K iterations and fixed terms of ``f`` on (m, n, k); None when the
    split is larger than the K-tile count (rule 1)."""
    rows, cols = (n, m) if f.swap_ab else (m, n)
    cm, cn = f.cluster_m, f.cluster_n
    tiles = _cdiv(_cdiv(rows, f.tile_m), cm) * cm * _cdiv(_cdiv(cols, f.tile_n), cn) * cn
    k_tiles = _cdiv(k, f.tile_k)
    if f.split_k > k_tiles:
        return None
    sms = profile.sms - profile.sms % (cm * cn)
    l2_per_us = profile.l2_gbps * 1e3
    feed_solo = l2_per_us / profile.sms * knobs.sm_feed_cap

    def residency(resident: int, active: int) -> tuple[float, float]:
        feed = min(feed_solo, l2_per_us / max(1, active))
        r_a = max(1.0, resident * tc.bytes_fixed / feed / tc.a)
        r_b = max(1.0, resident * max(tc.t_mma, tc.bytes_iter / feed) / tc.b)
        return r_a, r_b

    def data_parallel(units: int, k_iters: int) -> tuple[float, float, int]:
        per_wave = sms * tc.slots
        full, tail = divmod(units, per_wave)
        r_a, r_b = residency(tc.slots, sms)
        x1, x2 = full * r_a, full * r_b * k_iters
        if tail:
            r_a, r_b = residency(_cdiv(tail, sms), min(tail, sms))
            x1, x2 = x1 + r_a, x2 + r_b * k_iters
        return x1, x2, full + (1 if tail else 0)

    r_fixed = knobs.persistent_overhead_us if f.persistent else 0.0
    launches = 1
    split = f.split_k
    k_iters = _cdiv(k_tiles, split)
    ctas = tiles * split
    sk = _stream_k_split(tiles, k_tiles, sms * tc.slots, cm * cn, knobs) if f.stream_k else None
    if sk is None:
        x1, x2, waves = data_parallel(ctas, k_iters)
        if split > 1 and f.parallel_split_k:
            partials = split * m * n * 4
            bw = profile.l2_gbps if partials <= profile.l2_bytes // 2 else profile.dram_gbps
            r_fixed += (partials + m * n * OUT_BYTES) / (bw * 1e3)
            launches = 2
        elif split > 1:
            r_fixed += (split - 1) * tc.t_partial
            launches = 2
    else:
        dp_waves, sk_tiles, sk_units, k_unit, peers, segments = sk
        dp_a, dp_b = residency(tc.slots, sms)
        sk_a, sk_b = residency(1, min(sk_units, sms))
        x1 = dp_waves * dp_a + sk_a * segments
        x2 = dp_waves * dp_b * k_tiles + sk_b * k_unit
        waves, k_iters, ctas = dp_waves + 1, k_unit, min(tiles, sms * tc.slots)
        r_fixed += (peers - 1) * tc.t_partial
        launches = 2
    if f.launches is not None:
        launches = f.launches
    elem = operand_bytes(dtype)
    floor = ((m * k + n * k) * elem + m * n * OUT_BYTES) / (profile.dram_gbps * 1e3)
    return Geometry(x1=x1, x2=x2, x3=r_fixed, launches=launches, floor_us=floor, waves=waves,
                    k_iters=k_iters, ctas=ctas)


def _stream_k_split(tiles: int, k_tiles: int, per_wave: int, cluster: int, knobs: Knobs
                    ) -> tuple[int, int, int, int, int, float] | None:
    """The heuristic Stream-K decomposition (CUTLASS 3.x's), or None when it runs
    data-parallel.

    Returns (data-parallel waves, Stream-K tiles, Stream-K units, K tiles per unit, peers per
    tile, tile segments per unit).
    """
    full, tail = divmod(tiles, per_wave)
    if tail == 0 or k_tiles <= knobs.min_iters_per_sk_unit or 2 * tail >= per_wave:
        return None
    dp_waves = max(full - 1, 0)
    sk_tiles = tiles - dp_waves * per_wave
    sk_tiles -= sk_tiles % cluster
    sk_units = min(per_wave, k_tiles * sk_tiles // knobs.min_iters_per_sk_unit)
    sk_units -= sk_units % cluster
    if sk_units <= 0 or sk_tiles <= 0:
        return None
    if sk_units >= sk_tiles and sk_units % sk_tiles == 0:
        peers = sk_units // sk_tiles
        return dp_waves, sk_tiles, sk_units, _cdiv(k_tiles, peers), peers, 1.0
    aligned = sk_tiles % sk_units == 0
    peers = max(1, _cdiv(sk_units, sk_tiles)) + (0 if aligned else 1)
    segments = max(1.0, sk_tiles / sk_units) + (0.0 if aligned else 1.0)
    return dp_waves, sk_tiles, sk_units, _cdiv(k_tiles * sk_tiles, sk_units), peers, segments


def combine(geo: Geometry, a: float, b: float, rho: float, launch_us: float) -> float:
    """``max(W·r·(a + b·k) + rho·R + launches·L, floor)`` in us."""
    t = geo.x1 * a + geo.x2 * b + geo.x3 * rho + geo.launches * launch_us
    return t if t > geo.floor_us else geo.floor_us


def predict_structure(f: CostFeatures, m: int, n: int, k: int, profile: ArchProfile,
                      dtype: str = "fp16", knobs: Knobs = DEFAULT_KNOBS) -> float:
    """The uncalibrated prediction in us (``inf`` when infeasible)."""
    tc = tile_cost(f, profile, dtype, knobs)
    geo = geometry(f, tc, m, n, k, profile, dtype, knobs) if tc is not None else None
    if geo is None:
        return math.inf
    return combine(geo, tc.a, tc.b, 1.0, profile.launch_us_graph)
