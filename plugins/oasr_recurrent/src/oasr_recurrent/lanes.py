"""The recurrent family's lane ``sm80_recurrent``: its cached spaces and the launcher symbols.

The core serves one lane per (family, arch) (``Registry.active_lane``); the family has one,
CUDA-core kernels that run unchanged from sm80 to sm90 and are the default on each. Why no
tensor-core lane: a decoding step multiplies a few rows (B = 1..64) by the weights, which it
reads once; its cost is the weight bytes, which 16-byte loads on CUDA cores already stream at
the memory's rate (README).
"""

from __future__ import annotations

from oasr_core.kit.lanes import LaneSpaces

from oasr_recurrent.ops_names import CELL_OPS, FAMILY, LANES

# The lane's data and predicates, as the kit's lane_records reads them from this module.
from oasr_recurrent.space import (  # noqa: F401
    ARCHES,
    DEFAULT,
    DEFAULT_ON,
    DEFAULTS,
    fits_arch,
    is_feasible,
    listed,
    supports,
)

ALWAYS = (DEFAULT,)
"""The configs linked into every production module (the lane default)."""
SPACES = LaneSpaces.from_listed(FAMILY, LANES, listed, is_feasible)
"""The lane's listed and feasible space (cached once per process)."""
space = SPACES.space
config = SPACES.config


def symbol(config, cell: str = "lstm_step") -> str:
    """The launcher symbol of ``config`` for ``cell`` (one of ``CELL_OPS``; the LSTM step's
    names no cell); the workspace query's is this plus ``_workspace``."""
    if config.lane not in LANES:
        raise KeyError(f"config {config.id!r} belongs to lane {config.lane!r}, not a "
                       f"{FAMILY} lane")
    if cell not in CELL_OPS:
        raise KeyError(f"cell {cell!r} is not one of {CELL_OPS}")
    prefix = "" if cell == "lstm_step" else f"{cell}_"
    return f"oasr_recurrent_sm80_{prefix}{config.params['unit']}"
