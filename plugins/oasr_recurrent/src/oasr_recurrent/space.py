"""The config space of the family's lane (one space for every cell op), as data, and its
feasibility rules.

Every config is an :class:`oasr_core.types.Config` whose ``params`` name each kernel
parameter (``csrc/oasr_recurrent/lstm_step.cuh`` says what each does), so a tuning file reads
without this module and a config rebuilds from its JSON:

- ``units``: hidden units per CTA; the CTA computes all four gate rows of each (i, f, g, o),
  so the pointwise update runs in the same launch;
- ``rows``: batch rows per CTA (the grid's second axis covers the batch in tiles of it);
- ``threads``: threads per CTA (whole warps);
- ``ksplit``: warps sharing one gate row's dot product, each taking an interleaved share of
  the 16-byte vectors of its ``K = I + H`` weights (1: a warp owns whole rows);
- ``unit``: the translation unit (one per config; it holds both dtypes).

The list is written out, not a cross product: few units and rows per CTA where the batch is
small (a B = 1 decoding step needs many CTAs over H to read the weights at full bandwidth),
more rows per CTA where the batch is large (each weight vector loaded serves every row of the
tile), and a K split where the rows are too few to keep every warp busy.

Static rules (:func:`is_feasible`): the parameters' ranges, ``ksplit`` dividing the warps,
and every warp group owning at least one gate row (``4 * units >= warps / ksplit``).

Per problem (:func:`supports`, whose ``op`` names the cell): the config building for the cell
(:func:`cell_feasible`), ``I`` and ``H`` multiples of 8 (16-byte rows of fp16/bf16 weights and
states), and the CTA's staged inputs (``rows`` rows of ``x`` and ``h``, fp16/bf16) plus its
fp32 partial sums (one per accumulated row of the cell) within :data:`SMEM_CAP`.
"""

from __future__ import annotations

from oasr_core.kit.lanes import CUTLASS2_ARCHES
from oasr_core.types import Config, Problem

from oasr_recurrent.ops_names import CELL_ROWS, FAMILY, GATES, LANE, LANES

ARCHES = {LANE: CUTLASS2_ARCHES}
"""Per lane: sm80, sm86, sm89 and sm90 (the kernels use only CUDA cores and 16-byte loads)."""
DEFAULT_ON = ARCHES
"""The lane is the family's only one, so it is the default wherever it runs."""
VECTOR = 8
"""Elements per 16-byte load of fp16/bf16: ``I`` and ``H`` must be multiples of it."""
SMEM_CAP = 96 * 1024
"""Shared memory a config may use per CTA: under the smallest opt-in limit of the lane's
arches (sm86/sm89: 99 KiB), so a config that supports a problem runs on every one of them."""
ELEMENT_BYTES = 2


def config(units: int, rows: int, threads: int, ksplit: int) -> Config:
    """The config ``u<units>_r<rows>_t<threads>_s<ksplit>`` of the lane."""
    cid = f"u{units}_r{rows}_t{threads}_s{ksplit}"
    return Config(id=cid, lane=LANE, params={"units": units, "rows": rows, "threads": threads,
                                             "ksplit": ksplit, "unit": cid})


_LISTED = (
    # (units, rows, threads, ksplit)
    (1, 1, 128, 1), (2, 1, 128, 1), (2, 1, 256, 2), (4, 1, 128, 1), (1, 1, 128, 4),
    (2, 2, 128, 1), (4, 2, 128, 1), (4, 4, 128, 1), (4, 4, 256, 2), (8, 4, 256, 1),
    (2, 8, 256, 2), (4, 8, 256, 2), (8, 8, 256, 1), (8, 16, 256, 1),
)
DEFAULT = "u4_r4_t128_s1"
"""The lane default: four units (16 gate rows over 4 warps) and four batch rows per CTA."""
DEFAULTS = {LANE: DEFAULT}


def listed(lane: str = LANE) -> tuple[Config, ...]:
    """Every config listed for ``lane``, before feasibility (KeyError for another lane)."""
    if lane != LANE:
        raise KeyError(f"lane {lane!r} is not a {FAMILY} lane ({', '.join(LANES)})")
    return tuple(config(*p) for p in _LISTED)


def is_feasible(config: Config) -> bool:
    """Static predicate: ``config`` is a config of the lane that builds and is right."""
    if config.lane not in LANES:
        return False
    p = config.params
    units, rows, threads, ksplit = (p.get(k) for k in ("units", "rows", "threads", "ksplit"))
    if units not in (1, 2, 4, 8, 16) or rows not in (1, 2, 4, 8, 16):
        return False
    if threads not in (64, 128, 256, 512) or ksplit not in (1, 2, 4, 8):
        return False
    warps = threads // 32
    return warps % ksplit == 0 and GATES * units >= warps // ksplit


def cell_feasible(config: Config, cell: str) -> bool:
    """Whether ``config`` builds for ``cell`` (one of ``CELL_OPS``): :func:`is_feasible` and
    every warp group owning one of the cell's accumulated rows (``rows * units >= warps /
    ksplit``, ``CELL_ROWS``; an RNN step has one per unit)."""
    if not is_feasible(config):
        return False
    p = config.params
    return CELL_ROWS[cell] * p["units"] >= p["threads"] // 32 // p["ksplit"]


def fits_arch(config: Config, arch: str) -> bool:
    """Whether ``config`` runs on arch family ``arch`` (the lane's arches)."""
    return is_feasible(config) and arch in ARCHES[config.lane]


def smem(config: Config, input_size: int, hidden: int, cell: str = "lstm_step") -> int:
    """Shared memory of ``config`` at ``(I, H)`` for ``cell``: its rows of ``x`` and ``h``
    (16-bit) and the fp32 partial sums of the cell's accumulated rows (one per K-split
    warp)."""
    p = config.params
    staged = p["rows"] * (input_size + hidden) * ELEMENT_BYTES
    partials = p["ksplit"] * CELL_ROWS[cell] * p["units"] * p["rows"] * 4
    return staged + partials


def shape_ok(input_size: int, hidden: int) -> bool:
    """Whether the kernels take widths ``(I, H)``: positive multiples of :data:`VECTOR`."""
    return (input_size > 0 and hidden > 0 and input_size % VECTOR == 0
            and hidden % VECTOR == 0)


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: ``config`` can run ``problem`` (its op a cell of ``CELL_ROWS``,
    dims ``I``, ``H``; ``m`` = B)."""
    i, h = problem.dim("I"), problem.dim("H")
    return (problem.m >= 1 and problem.op in CELL_ROWS and shape_ok(i, h)
            and cell_feasible(config, problem.op) and smem(config, i, h, problem.op) <= SMEM_CAP)


def make_problem(input_size: int, hidden: int, batch: int, dtype: str = "fp16",
                 op: str = "lstm_step") -> Problem:
    """The :class:`~oasr_core.types.Problem` of one ``op`` call (``m`` = the batch)."""
    from oasr_recurrent.ops_names import DIMS

    return Problem(family=FAMILY, op=op, dtype=dtype,
                   dims=tuple(zip(DIMS, (input_size, hidden), strict=True)), m=batch)
