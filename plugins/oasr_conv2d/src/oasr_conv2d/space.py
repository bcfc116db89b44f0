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

Static rules (:func:`is_feasible`): CUTLASS's implicit-GEMM rules
(:func:`oasr_core.kit.implicit_gemm.is_feasible`: warp tiles of mma.sync shapes, the CTA's N
at least 32, cp.async access widths, few-channels accesses, the stages' shared memory within
the arch's opt-in limit); a direct config's threads and vector widths.

Per problem (:func:`supports`): groups == 1 (a depthwise or grouped conv runs on torch); for
the implicit GEMM, Cin a multiple of the input access width and Cout of the output one
(CUTLASS's ``can_implement`` checks the same and the launcher answers ``kErrShape``
otherwise), the optimized iterator's 32 filter-tap mask bits per axis, few-channels kernels
only for narrow inputs and tensors whose bytes fit the 2.x kernels' 32-bit offsets
(:func:`oasr_core.kit.implicit_gemm.supports`); for a direct kernel, a narrow input and a
filter that fits its shared memory.
"""

from __future__ import annotations

from oasr_core.kit import implicit_gemm
from oasr_core.kit import lanes as kit_lanes
from oasr_core.types import Config, Problem

from oasr_conv2d.geometry import LANE, LANES

SMEM_LIMIT = kit_lanes.SMEM_LIMIT
ARCHES = kit_lanes.CUTLASS2_ARCHES
DEFAULT_ON = kit_lanes.CUTLASS2_ARCHES
"""The lane is the family's only one, so it is the default wherever it runs (sm90 included)."""


def config(tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int,
           algorithm: str = "optimized", align_in: int = 8, align_out: int = 8) -> Config:
    """A CUTLASS 2.x implicit-GEMM fprop config of the lane
    (:func:`oasr_core.kit.implicit_gemm.config`: ``ig_b<tile>_w<warp>_s<stages>``, ``_an`` /
    ``_fc``, ``_a<in>x<out>``)."""
    return implicit_gemm.config(LANE, tile, warp, stages, algorithm, align_in, align_out)


_NARROW = (
    # (tile, warp, stages, algorithm, align_in, align_out): the kit's narrow tiles, with two
    # more one-channel tiles for the one-plane first conv after the first.
    implicit_gemm.NARROW_TILES[0],
    ((128, 128, 32), (64, 64, 32), 2, "few_channels", 1, 8),
    ((64, 128, 32), (32, 64, 32), 2, "few_channels", 1, 8),
    *implicit_gemm.NARROW_TILES[1:],
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
    return (*(config(t, w, s) for t, w, s in implicit_gemm.WIDE_TILES),
            *(config(t, w, s, a, i, o) for t, w, s, a, i, o in _NARROW),
            *(direct_config(*d) for d in _DIRECT))


def smem(config: Config) -> int:
    """Shared memory of a config's main loop: stages x (A tile + B tile), 16-bit; a direct
    config's bound on its staged filter."""
    return DIRECT_MAX_FILTER_BYTES if is_direct(config) else implicit_gemm.smem(config)


def is_feasible(config: Config) -> bool:
    """Static predicate: ``config`` is a config of the lane that builds and is right."""
    if config.lane not in LANES:
        return False
    p = config.params
    if is_direct(config):
        return (p.get("cpt") in (2, 4, 8) and p.get("ppt") in (1, 2, 4, 8, 16)
                and p.get("threads") in (64, 128, 256, 512))
    return p.get("cutlass") == 2 and implicit_gemm.is_feasible(config)


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
    # Rows of the input are at most stride * rows out + the window: the elements, bounded.
    sh, dh = problem.dim("sh"), problem.dim("dh")
    w_out = max(1, (width + 2 * problem.dim("pw") - problem.dim("dw") * (kw - 1) - 1)
                // problem.dim("sw") + 1)
    rows_in = (problem.m // w_out + 1) * sh + dh * (kh - 1) + 1
    return implicit_gemm.supports(config, cin, cout, max(kh, kw),
                                  (rows_in * width * cin, problem.m * cout, cout * kh * kw * cin))


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
