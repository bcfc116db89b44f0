"""The depthwise configs of both conv1d lanes, their feasibility and their weight layout.

A config names one instantiation of ``oasr_conv1d::depthwise::Kernel``:

- ``vec``: channels per thread, one 4/8/16-byte access per row (2, 4 or 8 16-bit values);
- ``cv`` x ``ty``: threads along C and along T (``cv * ty`` threads per CTA); the CTA tile is
  ``cv * vec`` channels by ``ty * tp`` output steps;
- ``tp``: consecutive output steps per thread (the register window's length);
- ``stage``: ``reg`` (rows straight from global memory into registers, the halo shared through
  L1) or ``smem`` (the CTA copies its input window, halo and zero padding included, into
  shared memory first);
- ``taps``: a fixed kernel size with stride 1 and dilation 1 (fully unrolled sliding window),
  or 0 for the general kernel (any kernel, stride, dilation).

The lists are written for the Conformer's kernel-31 convolution at C = 144..1024 (vector
widths 4 and 8, 64..256 threads, 4..16 steps per thread, both stagings), kernel 15 (smaller
Conformers) and the general kernel in a few shapes (vector width 2 for channel counts that
are not multiples of 4). Every config carries ``kind: depthwise``, which is how the lanes
tell them from the dense configs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oasr_core.types import Config, Problem

KIND = "depthwise"
STAGES = ("reg", "smem")
MAX_SMEM = 96 << 10
"""Shared memory a depthwise CTA may use (the kernels' ``kMaxSmem``; fits sm86/sm89 too)."""
MAX_REGISTER_FLOATS = 160
"""The fp32 accumulators and window values a thread may hold: more spills."""
DEFAULT = "dw31_v8_8x16_tp8_reg"
"""The depthwise config the family heuristic names for a kernel-31 problem it can run."""
GENERAL_DEFAULT = "dwg_v8_8x16_tp4_reg"
"""... and for any other depthwise problem whose channels are a multiple of 8."""
NARROW_DEFAULT = "dwg_v2_32x4_tp4_reg"
"""... and for channel counts that are only even."""


def config(lane: str, *, taps: int, vec: int, cv: int, ty: int, tp: int, stage: str) -> Config:
    """One depthwise config of ``lane`` (see the module docstring)."""
    if stage not in STAGES:
        raise ValueError(f"depthwise stage {stage!r} is not one of {STAGES}")
    tag = f"dw{taps}" if taps else "dwg"
    cid = f"{tag}_v{vec}_{cv}x{ty}_tp{tp}_{stage}"
    return Config(id=cid, lane=lane, params={
        "kind": KIND, "taps": taps, "vec": vec, "cv": cv, "ty": ty, "tp": tp, "stage": stage,
        "unit": cid})


def _listed() -> Iterable[dict[str, Any]]:
    for cv, ty in ((4, 32), (8, 16), (8, 32), (16, 8), (32, 4)):
        for tp in (4, 8):
            for stage in STAGES:
                yield dict(taps=31, vec=8, cv=cv, ty=ty, tp=tp, stage=stage)
    for cv, ty in ((8, 16), (16, 8), (16, 16), (32, 4)):
        for tp in (8, 16):
            for stage in STAGES:
                yield dict(taps=31, vec=4, cv=cv, ty=ty, tp=tp, stage=stage)
    for vec, cv, ty in ((8, 8, 16), (8, 16, 8), (4, 16, 8)):
        for stage in STAGES:
            yield dict(taps=15, vec=vec, cv=cv, ty=ty, tp=8, stage=stage)
    for vec, cv, ty, tp in ((8, 8, 16, 4), (4, 16, 8, 4), (2, 32, 4, 4), (8, 16, 8, 8)):
        for stage in STAGES:
            yield dict(taps=0, vec=vec, cv=cv, ty=ty, tp=tp, stage=stage)


def configs(lane: str) -> tuple[Config, ...]:
    """The listed depthwise configs of ``lane`` (before feasibility)."""
    return tuple(config(lane, **p) for p in _listed())


def is_depthwise(config: Config) -> bool:
    """Whether ``config`` is one of these kernels (rather than a dense config)."""
    return config.params.get("kind") == KIND


def is_feasible(config: Config) -> bool:
    """Static predicate: the instantiation builds and keeps its registers (no spills).

    32..1024 threads, a power-of-two vector width of 2..8, a C tile of at most 256 channels,
    and at most :data:`MAX_REGISTER_FLOATS` fp32 values of accumulators plus window per thread.
    """
    p = config.params
    threads = p["cv"] * p["ty"]
    if p["vec"] not in (2, 4, 8) or not 32 <= threads <= 1024 or p["cv"] * p["vec"] > 256:
        return False
    if p["tp"] < 1 or p["taps"] < 0 or p["stage"] not in STAGES:
        return False
    window = p["tp"] * p["vec"] if p["taps"] else p["vec"]
    return p["tp"] * p["vec"] + window <= MAX_REGISTER_FLOATS


def smem_bytes(config: Config, kernel: int, stride: int = 1, dilation: int = 1) -> int:
    """Shared memory of one CTA at this geometry: the fp32 weight tile, plus the staged input
    window for ``smem`` staging (``Kernel::smem_bytes``)."""
    p = config.params
    c_tile, t_tile = p["cv"] * p["vec"], p["ty"] * p["tp"]
    total = kernel * c_tile * 4
    if p["stage"] == "smem":
        total += ((t_tile - 1) * stride + (kernel - 1) * dilation + 1) * c_tile * 2
    return total


def problem_geometry(problem: Problem) -> tuple[int, int, int, int, int, int, int]:
    """``(Cin, Cout, k, stride, pad, dil, groups)`` of a conv1d problem."""
    return tuple(problem.dim(d) for d in ("Cin", "Cout", "k", "stride", "pad", "dil", "groups"))


def is_depthwise_problem(problem: Problem) -> bool:
    """groups == Cin == Cout."""
    cin, cout, _k, _s, _p, _d, groups = problem_geometry(problem)
    return groups == cin == cout


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: a depthwise problem whose channels divide by ``vec``, whose
    kernel, stride and dilation the config takes, and whose CTA fits shared memory; with an
    exact point (``BxT_in``), a grid within CUDA's limits."""
    if not is_depthwise_problem(problem):
        return False
    c, _cout, k, stride, pad, dil, _groups = problem_geometry(problem)
    p = config.params
    if c % p["vec"] or problem.m < 1:
        return False
    if p["taps"] and (k != p["taps"] or stride != 1 or dil != 1):
        return False
    if smem_bytes(config, k, stride, dil) > MAX_SMEM:
        return False
    if problem.point:
        batch, _t_in = (int(v) for v in problem.point.split("x"))
        t_out = problem.m // batch
        if batch > 65535 or -(-t_out // (p["ty"] * p["tp"])) > 65535:
            return False
    return True


def pack_weight(weight: Any) -> Any:
    """torch's depthwise weight ``(C, 1, k)`` as the kernels take it: ``(k, C)`` contiguous."""
    if weight.dim() != 3 or weight.shape[1] != 1:
        raise ValueError(f"depthwise weight must be (C, 1, k); got {tuple(weight.shape)}")
    return weight[:, 0, :].t().contiguous()


def heuristic(problem: Problem, lane: str) -> Config | None:
    """The depthwise config the family heuristic serves ``problem`` with (None: none runs)."""
    c = problem.dim("Cin")
    for cid in (DEFAULT, GENERAL_DEFAULT, NARROW_DEFAULT):
        cfg = next((x for x in configs(lane) if x.id == cid), None)
        if cfg is not None and is_feasible(cfg) and supports(cfg, problem) and c % 2 == 0:
            return cfg
    return None
