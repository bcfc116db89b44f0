"""The plugin's hooks: only imports and returns records (the work is in :mod:`.lane`)."""

from __future__ import annotations

from oasr_core import hookimpl


@hookimpl
def oasr_register_lanes():
    """Add the ``example_simt`` lane to the ``gemm`` family."""
    from oasr_example_lane.lane import example_simt_lane

    return [example_simt_lane()]
