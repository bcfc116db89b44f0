"""The conv2d config space of the family's lane, as data, and its feasibility rules.

Every config is an :class:`oasr_core.types.Config` whose ``params`` name each kernel parameter,
so a tuning file reads without this module and a config rebuilds from its JSON:

- ``tile`` (CTA M x N x K of the implicit GEMM, M = B * H_out * W_out, N = Cout,
  K = kh * kw * Cin), ``warp``, ``stages``;
- ``algorithm``: ``optimized``, ``analytic`` or ``few_channels`` (``csrc/oasr_conv2d/sm80.cuh``
  says what each iterator does);
- ``align_in`` / ``align_out``: elements per vector access of x and the weight (Cin must be a
  multiple) and of the output and bias (Cout must be a multiple);
- ``unit``: the translation unit (one per config; it holds both dtypes and every activation);
- direct configs (``kind: direct``, no GEMM: ``csrc/oasr_conv2d/direct.cuh``) name ``cpt``
  (output channels per thread), ``ppt`` (output pixels per thread) and ``threads`` instead.

The list is written out, not a cross product: 16-byte tiles for the front end's C -> C conv
(C = 144..512, K = 9 C) and the pointwise 1x1 of a depthwise-separable front end, few-channels
kernels for its first conv (one log-mel plane: Cin = 1, K = 9), an analytic kernel that
runs any widths, and direct kernels for inputs of few channels (the first conv computed as the
stencil it is).

Static rules (:func:`is_feasible`): warp tiles divide the CTA tile into 1..8 warps of
mma.sync m16n8k16 shapes; the CTA's N at least 32 (the 2.x tensor-op epilogue's thread map
does not cover a warp's lanes below that); an input access of one 16-bit element needs the
two-stage main loop (cp.async moves 4, 8 or 16 bytes); few-channels kernels read 1, 2 or 4
channels per access; the stages' shared memory within the arch's opt-in limit.

Per problem (:func:`supports`): groups == 1 (a depthwise or grouped conv runs on torch); Cin
a multiple of the input access width and Cout of the output one (CUTLASS's ``can_implement``
checks the same and the launcher answers ``kErrShape`` otherwise); the optimized iterator's
32 filter-tap mask bits per axis; few-channels kernels only for inputs of at most
:data:`FEW_CHANNELS_MAX` channels; tensors whose bytes fit the 2.x kernels' 32-bit offsets.
"""

from __future__ import annotations

from oasr_core.kit import lanes as kit_lanes
from oasr_core.types import Config, Problem

from oasr_conv2d.geometry import LANE, LANES

ALGORITHMS = ("optimized", "analytic", "few_channels")
_ALGO_TAG = {"optimized": "", "analytic": "_an", "few_channels": "_fc"}
ALIGNMENTS = (1, 2, 4, 8)
SMEM_LIMIT = kit_lanes.SMEM_LIMIT
ARCHES = kit_lanes.CUTLASS2_ARCHES
DEFAULT_ON = kit_lanes.CUTLASS2_ARCHES
"""The lane is the family's only one, so it is the default wherever it runs (sm90 included)."""
OPTIMIZED_MAX_TAPS = 32
"""Filter taps per axis the optimized activation iterator's masks hold (``R, S <= 32``)."""
FEW_CHANNELS_MAX = 16
"""Widest input a few-channels kernel is offered: it exists for the one-plane first conv, and
reading 1..4 channels per access is slower than the 16-byte kernels at widths those run."""
MAX_TENSOR_BYTES = (1 << 31) - 1
"""Largest activation, filter or output a 2.x conv kernel addresses (CUTLASS's check)."""
_ELEMENT_BYTES = 2


def config(tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int,
           algorithm: str = "optimized", align_in: int = 8, align_out: int = 8) -> Config:
    """A CUTLASS 2.x implicit-GEMM fprop config (``ig_b<tile>_w<warp>_s<stages>``, then
    ``_an`` / ``_fc`` for the analytic / few-channels iterators and ``_a<in>x<out>`` for
    accesses narrower than 16 bytes)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} is not one of {ALGORITHMS}")
    bm, bn, bk = tile
    wm, wn, wk = warp
    cid = f"ig_b{bm}x{bn}x{bk}_w{wm}x{wn}x{wk}_s{stages}{_ALGO_TAG[algorithm]}"
    if (align_in, align_out) != (8, 8):
        cid += f"_a{align_in}x{align_out}"
    return Config(id=cid, lane=LANE, params={
        "cutlass": 2, "tile": [bm, bn, bk], "warp": [wm, wn, wk], "stages": stages,
        "algorithm": algorithm, "align_in": align_in, "align_out": align_out, "unit": cid,
    })


_WIDE = (
    # (tile, warp, stages): 16-byte accesses, optimized iterator.
    ((128, 128, 32), (64, 64, 32), 3),
    ((128, 128, 64), (64, 64, 64), 3),
    ((256, 128, 32), (64, 64, 32), 3),
    ((128, 256, 32), (64, 64, 32), 3),
    ((128, 64, 32), (64, 32, 32), 4),
    ((64, 128, 32), (32, 64, 32), 4),
    ((64, 64, 64), (32, 32, 64), 4),
    ((64, 64, 32), (32, 32, 32), 5),
)
_NARROW = (
    # (tile, warp, stages, algorithm, align_in, align_out).
    ((128, 64, 32), (64, 32, 32), 2, "few_channels", 1, 8),
    ((128, 128, 32), (64, 64, 32), 2, "few_channels", 1, 8),
    ((64, 128, 32), (32, 64, 32), 2, "few_channels", 1, 8),
    ((128, 64, 32), (64, 32, 32), 3, "few_channels", 2, 8),
    ((128, 64, 32), (64, 32, 32), 3, "few_channels", 4, 8),
    ((64, 64, 32), (32, 32, 32), 2, "analytic", 1, 1),
)

DIRECT_MAX_CIN = 8
"""Widest input a direct config is offered: it exists for the front end's one-plane first conv
(a 9-tap stencil whose cost is its output), where the implicit GEMM spends a 32-deep K tile on
9 taps; from 8 channels on, the 16-byte implicit-GEMM tiles read whole vectors."""
DIRECT_MAX_FILTER_BYTES = 48 * 1024
"""The direct kernels stage the filter in fp32 in shared memory, within the default limit."""
_DIRECT = (
    # (channels per thread, pixels per thread, threads per block)
    (8, 4, 256), (8, 8, 256), (8, 16, 256), (8, 8, 128), (4, 8, 256),
)


def direct_config(cpt: int, ppt: int, threads: int) -> Config:
    """A direct config (``dc_c<cpt>_p<ppt>_t<threads>``): ``cpt`` output channels per thread
    (one vector store), ``ppt`` output pixels per thread, at most ``threads`` per block
    (``csrc/oasr_conv2d/direct.cuh``)."""
    cid = f"dc_c{cpt}_p{ppt}_t{threads}"
    return Config(id=cid, lane=LANE, params={"kind": "direct", "cpt": cpt, "ppt": ppt,
                                             "threads": threads, "unit": cid})


def is_direct(config: Config) -> bool:
    """Whether ``config`` is a direct kernel (not an implicit GEMM)."""
    return config.params.get("kind") == "direct"


DEFAULT = "ig_b128x128x32_w64x64x32_s3"
"""CUTLASS's own first sm80 fp16 conv tile: the build's baseline where it runs."""
FEW_CHANNELS_DEFAULT = "ig_b128x64x32_w64x32x32_s2_fc_a1x8"
"""The heuristic's pick for a one-plane input (Cin = 1)."""
ANY_WIDTH = "ig_b64x64x32_w32x32x32_s2_an_a1x1"
"""The config that runs any widths (element-wise accesses)."""
DEFAULTS = {LANE: DEFAULT}


def listed(lane: str = LANE) -> tuple[Config, ...]:
    """Every config listed for ``lane``, before feasibility (KeyError for another lane)."""
    if lane != LANE:
        raise KeyError(f"lane {lane!r} is not a conv2d lane ({', '.join(LANES)})")
    return (*(config(t, w, s) for t, w, s in _WIDE),
            *(config(t, w, s, a, i, o) for t, w, s, a, i, o in _NARROW),
            *(direct_config(*d) for d in _DIRECT))


def smem(config: Config) -> int:
    """Shared memory of a config's main loop: stages x (A tile + B tile), 16-bit; a direct
    config's bound on its staged filter."""
    if is_direct(config):
        return DIRECT_MAX_FILTER_BYTES
    bm, bn, bk = config.params["tile"]
    return config.params["stages"] * (bm + bn) * bk * _ELEMENT_BYTES


def is_feasible(config: Config) -> bool:
    """Static predicate: ``config`` is a config of the lane that builds and is right."""
    if config.lane not in LANES:
        return False
    p = config.params
    if is_direct(config):
        return (p.get("cpt") in (2, 4, 8) and p.get("ppt") in (1, 2, 4, 8, 16)
                and p.get("threads") in (64, 128, 256, 512))
    if p.get("cutlass") != 2:
        return False
    (bm, bn, bk), (wm, wn, wk) = p["tile"], p["warp"]
    if bm % wm or bn % wn or bk % wk or wm % 16 or wn % 8 or wk % 16:
        return False
    if not 1 <= (bm // wm) * (bn // wn) * (bk // wk) <= 8 or bn < 32:
        return False
    algorithm, align_in, align_out = p["algorithm"], p["align_in"], p["align_out"]
    if algorithm not in ALGORITHMS or align_in not in ALIGNMENTS or align_out not in ALIGNMENTS:
        return False
    if algorithm == "few_channels" and align_in == 8:
        return False
    if p["stages"] < 2 or (p["stages"] > 2 and align_in * _ELEMENT_BYTES < 4):
        return False
    return smem(config) <= SMEM_LIMIT["sm90"]


def fits_arch(config: Config, arch: str) -> bool:
    """Whether ``config`` runs on arch family ``arch`` (lane arches, shared memory)."""
    return (arch in ARCHES and is_feasible(config)
            and smem(config) <= SMEM_LIMIT.get(arch, 0))


def is_dense(problem: Problem) -> bool:
    """Whether ``problem`` is a dense conv (groups == 1), the only kind the kernels take."""
    return problem.dim("groups") == 1


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: ``config`` can run ``problem`` (dims of
    :data:`oasr_conv2d.ops_names.DIMS`; ``m = B * H_out * W_out``)."""
    p = config.params
    cin, cout, width = problem.dim("Cin"), problem.dim("Cout"), problem.dim("W")
    kh, kw = problem.dim("kh"), problem.dim("kw")
    if not is_dense(problem) or problem.m < 1 or min(cin, cout, width, kh, kw) < 1:
        return False
    if is_direct(config):
        return (cin <= DIRECT_MAX_CIN and cout % p["cpt"] == 0
                and cout // p["cpt"] <= p["threads"]
                and kh * kw * cin * cout * 4 <= DIRECT_MAX_FILTER_BYTES)
    if cin % p["align_in"] or cout % p["align_out"]:
        return False
    if p["algorithm"] == "optimized" and max(kh, kw) > OPTIMIZED_MAX_TAPS:
        return False
    if p["algorithm"] == "few_channels" and cin > FEW_CHANNELS_MAX:
        return False
    # Rows of the input are at most stride * rows out + the window: the bytes, bounded.
    sh, dh = problem.dim("sh"), problem.dim("dh")
    w_out = max(1, (width + 2 * problem.dim("pw") - problem.dim("dw") * (kw - 1) - 1)
                // problem.dim("sw") + 1)
    rows_in = (problem.m // w_out + 1) * sh + dh * (kh - 1) + 1
    if max(rows_in * width * cin, problem.m * cout, cout * kh * kw * cin) * _ELEMENT_BYTES \
            > MAX_TENSOR_BYTES:
        return False
    return True


def space(lane: str = LANE) -> tuple[Config, ...]:
    """The config space of ``lane``: the listed configs that are feasible."""
    return tuple(c for c in listed(lane) if is_feasible(c))


def find(lane: str, config_id: str) -> Config:
    """The config ``config_id`` of ``lane`` (KeyError when the space has none)."""
    for c in space(lane):
        if c.id == config_id:
            return c
    raise KeyError(f"lane {lane!r} has no conv2d config {config_id!r}")


def heuristic(problem: Problem, lane) -> Config:
    """``Family.sentinel_heuristic``: the config ``HEURISTIC`` names for ``problem`` on
    ``lane`` (a :class:`~oasr_core.types.Lane`): the lane default where it runs the shape,
    the few-channels default for a narrow input, else the first config that supports it."""
    name = lane.name
    for cid in (DEFAULT, FEW_CHANNELS_DEFAULT):
        pick = find(name, cid)
        if supports(pick, problem):
            return pick
    for candidate in space(name):
        if supports(candidate, problem):
            return candidate
    return find(name, DEFAULT)


def make_problem(op: str, cin: int, cout: int, width: int, batch: int, height: int, *,
                 kernel: tuple[int, int] = (3, 3), stride: tuple[int, int] = (1, 1),
                 padding: tuple[int, int] = (0, 0), dilation: tuple[int, int] = (1, 1),
                 groups: int = 1, dtype: str = "fp16") -> Problem:
    """The :class:`~oasr_core.types.Problem` of one conv2d call on ``(B, H, W, Cin)`` data,
    keyed as the op and the census key it (dims, ``m = B * H_out * W_out``, point ``BxH``)."""
    from oasr_conv2d.geometry import out_length
    from oasr_conv2d.ops_names import DIMS

    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    h_out, w_out = out_length(height, kh, sh, ph, dh), out_length(width, kw, sw, pw, dw)
    dims = (cin, cout, width, kh, kw, sh, sw, ph, pw, dh, dw, groups)
    return Problem(family="conv2d", op=op, dtype=dtype, dims=tuple(zip(DIMS, dims, strict=True)),
                   m=batch * h_out * w_out, point=f"{batch}x{height}")
