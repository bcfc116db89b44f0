"""The recurrent family's lane ``sm80_recurrent``: its cached spaces and the launcher symbols.

The core serves one lane per (family, arch) (``Registry.active_lane``); the family has one,
CUDA-core kernels that run unchanged from sm80 to sm90 and are the default on each. Why no
tensor-core lane: a decoding step multiplies a few rows (B = 1..64) by the weights, which it
reads once; its cost is the weight bytes, which 16-byte loads on CUDA cores already stream at
the memory's rate (README).
"""

from __future__ import annotations

from oasr_core.kit.lanes import LaneSpaces

from oasr_recurrent import space as space_mod
from oasr_recurrent.ops_names import FAMILY, LANE, LANES

ARCHES = {LANE: space_mod.ARCHES}
DEFAULT_ON = {LANE: space_mod.DEFAULT_ON}
DEFAULTS = dict(space_mod.DEFAULTS)
ALWAYS = (space_mod.DEFAULT,)
"""The configs linked into every production module (the lane default)."""

SPACES = LaneSpaces(FAMILY, {lane: (lambda lane=lane: space_mod.listed(lane)) for lane in LANES},
                    lambda: space_mod.is_feasible)
"""The lane's listed and feasible space (cached once per process)."""
full_space = SPACES.full
space = SPACES.space
config = SPACES.config
is_feasible = space_mod.is_feasible
supports = space_mod.supports
fits_arch = space_mod.fits_arch


def symbol(config) -> str:
    """The launcher symbol of ``config``; the workspace query's is this plus
    ``_workspace``."""
    if config.lane not in LANES:
        raise KeyError(f"config {config.id!r} belongs to lane {config.lane!r}, not a "
                       f"{FAMILY} lane")
    return f"oasr_recurrent_sm80_{config.params['unit']}"
