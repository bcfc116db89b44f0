"""The conv2d family's lane ``sm80_conv2d``: its cached spaces and the kernel symbol names.

The core serves one lane per (family, arch) (``Registry.active_lane``); the family has one,
CUTLASS 2.x implicit GEMM (``ImplicitGemmConvolution``, mma.sync), which runs on sm80..sm90 and
is the default on each. Why no CUTLASS 3.x (TMA) lane: the front end's first conv has one
input channel, which a TMA im2col descriptor cannot read (16-byte rows), and its C -> C conv
is a few-microsecond GEMM of K = 9 C where the 2.x tiles are measured first (README).
"""

from __future__ import annotations

from oasr_core.kit.lanes import LaneSpaces

from oasr_conv2d import space as space_mod
from oasr_conv2d.geometry import FAMILY, LANE, LANES

ARCHES = {LANE: space_mod.ARCHES}
DEFAULT_ON = {LANE: space_mod.DEFAULT_ON}
DEFAULTS = dict(space_mod.DEFAULTS)
ALWAYS = (space_mod.DEFAULT, space_mod.FEW_CHANNELS_DEFAULT, space_mod.ANY_WIDTH)
"""The configs the heuristic names, linked into every production module."""

SPACES = LaneSpaces.from_listed(FAMILY, LANES, space_mod.listed, space_mod.is_feasible)
"""The lane's listed and feasible space (cached once per process)."""
full_space = SPACES.full
space = SPACES.space
config = SPACES.config
is_feasible = space_mod.is_feasible
supports = space_mod.supports
fits_arch = space_mod.fits_arch
heuristic = space_mod.heuristic


def symbol(config) -> str:
    """The launcher symbol of ``config`` (every op of a config shares one); the workspace
    query's is this plus ``_workspace``."""
    if config.lane not in LANES:
        raise KeyError(f"config {config.id!r} belongs to lane {config.lane!r}, not a conv2d lane")
    return f"oasr_conv2d_sm80_{config.params['unit']}"
