"""CUTLASS 2.x implicit-GEMM convolution configs (fprop, 16-bit operands), as data and rules.

A convolution family whose kernels are CUTLASS's ``ImplicitGemmConvolution`` (mma.sync, sm80
and later) names each config the same way and holds the same parameters, whatever the number
of spatial axes: ``cutlass`` (2), ``tile`` (CTA M x N x K of the implicit GEMM), ``warp``,
``stages``, ``algorithm`` (the activation iterator: ``optimized``, ``analytic`` or
``few_channels``), ``align_in`` / ``align_out`` (elements per vector access of x and the
weight, and of the output and bias) and ``unit`` (the translation unit). Config ids and params,
their order included, are what tuning files hold: :func:`config` writes them (the id is
``ig_`` and the kit's 2.x tile name, :func:`oasr_core.kit.tiles.mma_name`).

Static rules (:func:`is_feasible`): warp tiles divide the CTA tile into 1..8 warps of mma.sync
m16n8k16 shapes; the CTA's N at least 32 (the 2.x tensor-op epilogue's thread map does not
cover a warp's lanes below that, which the gemm family saw return wrong values at 16); the
multistage main loop copies with cp.async (4, 8 or 16 bytes), so an input access of one 16-bit
element needs the two-stage main loop; few-channels kernels read 1, 2 or 4 channels per access;
the stages' shared memory (:func:`smem`) within the largest opt-in limit.

Per problem (:func:`supports`): Cin a multiple of the input access width and Cout of the output
one (CUTLASS's ``can_implement`` checks the same); the optimized iterator's 32 filter-tap mask
bits per axis; few-channels kernels only for inputs of at most :data:`FEW_CHANNELS_MAX`
channels; tensors whose bytes fit the kernels' 32-bit offsets. Each family adds its own
(groups, strides, its other kinds of kernels) and lists its tiles; :data:`WIDE_TILES` and
:data:`NARROW_TILES` are the tiles every such family lists.

Importing this module imports no torch.
"""

from __future__ import annotations

from oasr_core.kit.lanes import SMEM_LIMIT
from oasr_core.kit.tiles import mma_name, mma_tiles
from oasr_core.types import Config

ALGORITHMS = ("optimized", "analytic", "few_channels")
"""The activation iterators CUTLASS 2.x builds for fprop."""
_ALGO_TAG = {"optimized": "", "analytic": "_an", "few_channels": "_fc"}
ALIGNMENTS = (1, 2, 4, 8)
"""Elements per vector access a config may name."""
OPTIMIZED_MAX_TAPS = 32
"""Filter taps per axis the optimized activation iterator's masks hold (``R, S <= 32``)."""
FEW_CHANNELS_MAX = 16
"""Widest input a few-channels kernel is offered: it exists for narrow inputs (raw audio, one
log-mel plane), and reading 1..4 channels per access is several times slower than the 16-byte
kernels at widths those can run."""
MAX_TENSOR_BYTES = (1 << 31) - 1
"""Largest activation, filter or output a 2.x conv kernel addresses (CUTLASS's check)."""
ELEMENT_BYTES = 2
"""Bytes of one operand element (fp16, bf16)."""

WIDE_TILES = mma_tiles("""
    b128x128x32_w64x64x32_s3 b128x128x64_w64x64x64_s3 b256x128x32_w64x64x32_s3
    b128x256x32_w64x64x32_s3 b128x64x32_w64x32x32_s4 b64x128x32_w32x64x32_s4
    b64x64x64_w32x32x64_s4 b64x64x32_w32x32x32_s5
""")
"""The 16-byte, optimized-iterator tiles of a convolution family's 2.x lane, as
``(tile, warp, stages)``."""
NARROW_TILES = (
    # (tile, warp, stages, algorithm, align_in, align_out).
    ((128, 64, 32), (64, 32, 32), 2, "few_channels", 1, 8),
    ((128, 64, 32), (64, 32, 32), 3, "few_channels", 2, 8),
    ((128, 64, 32), (64, 32, 32), 3, "few_channels", 4, 8),
    ((64, 64, 32), (32, 32, 32), 2, "analytic", 1, 1),
)
"""The tiles for what the 16-byte tiles cannot read: few-channels kernels for inputs of 1, 2
and 4 channels (one input element needs the two-stage main loop), and an element-wise
analytic kernel that runs any widths."""


def config(lane: str, tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int,
           algorithm: str = "optimized", align_in: int = 8, align_out: int = 8) -> Config:
    """A 2.x implicit-GEMM fprop config of ``lane`` (``ig_b<tile>_w<warp>_s<stages>``, then
    ``_an`` / ``_fc`` for the analytic / few-channels iterators and ``_a<in>x<out>`` for
    accesses narrower than 16 bytes)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} is not one of {ALGORITHMS}")
    cid = f"ig_{mma_name(tile, warp, stages)}{_ALGO_TAG[algorithm]}"
    if (align_in, align_out) != (8, 8):
        cid += f"_a{align_in}x{align_out}"
    return Config(id=cid, lane=lane, params={
        "cutlass": 2, "tile": list(tile), "warp": list(warp), "stages": stages,
        "algorithm": algorithm, "align_in": align_in, "align_out": align_out, "unit": cid,
    })


def smem(config: Config) -> int:
    """Shared memory of a config's main loop: stages x (A tile + B tile), 16-bit."""
    bm, bn, bk = config.params["tile"]
    return config.params["stages"] * (bm + bn) * bk * ELEMENT_BYTES


def is_feasible(config: Config) -> bool:
    """The static rules (module docstring) for a config :func:`config` wrote; the lane is the
    family's to check."""
    p = config.params
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
    if p["stages"] < 2 or (p["stages"] > 2 and align_in * ELEMENT_BYTES < 4):
        return False
    return smem(config) <= SMEM_LIMIT["sm90"]


def supports(config: Config, cin: int, cout: int, taps: int, elements: tuple[int, ...]) -> bool:
    """Per-problem rules (module docstring) of ``config`` for ``cin`` input and ``cout`` output
    channels, ``taps`` filter taps along the longest axis and the operands' ``elements``
    (activation, output, filter: the caller's bound on each)."""
    p = config.params
    if cin % p["align_in"] or cout % p["align_out"]:
        return False
    if p["algorithm"] == "optimized" and taps > OPTIMIZED_MAX_TAPS:
        return False
    if p["algorithm"] == "few_channels" and cin > FEW_CHANNELS_MAX:
        return False
    return max(elements) * ELEMENT_BYTES <= MAX_TENSOR_BYTES
