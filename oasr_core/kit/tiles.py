"""CUTLASS tile shapes as config ids spell them, and tile lists written as those spellings.

Every CUTLASS family names a 2.x (mma.sync) config by its CTA tile, warp tile and stage count,
``b{M}x{N}x{K}_w{M}x{N}x{K}_s{stages}`` (:func:`mma_name`), and a 3.x (TMA + wgmma) config by
its schedule's tag, CTA tile and cluster, ``{tag}_{M}x{N}x{K}_c{M}x{N}``, with ``_s{stages}``
when the stage count is fixed (:func:`wgmma_name`); a family adds its own prefix or suffix.
A family's list of 2.x tiles is written as those spellings, one per line or space apart
(:func:`mma_tiles`), so the list reads as the ids it makes. Config ids are what tuning files
hold: these functions spell them, they never change them. Importing this module imports no
torch.
"""

from __future__ import annotations

import re

Shape = tuple[int, int, int]
MmaTile = tuple[Shape, Shape, int]
"""``(CTA tile, warp tile, stages)`` of a 2.x config."""

_MMA = re.compile(r"b(\d+)x(\d+)x(\d+)_w(\d+)x(\d+)x(\d+)_s(\d+)")


def mma_name(tile: Shape, warp: Shape, stages: int) -> str:
    """``b{tile}_w{warp}_s{stages}``, e.g. ``b128x128x64_w64x64x64_s5``."""
    return "b{}x{}x{}_w{}x{}x{}_s{}".format(*tile, *warp, stages)


def wgmma_name(tag: str, tile: Shape, cluster: tuple[int, int], stages: int = 0) -> str:
    """``{tag}_{tile}_c{cluster}`` and ``_s{stages}`` unless ``stages`` is 0 (as many stages as
    shared memory allows), e.g. ``pp_128x128x128_c1x2``."""
    name = "{}_{}x{}x{}_c{}x{}".format(tag, *tile, *cluster)
    return f"{name}_s{stages}" if stages else name


def mma_tiles(names: str) -> tuple[MmaTile, ...]:
    """The ``(tile, warp, stages)`` of each :func:`mma_name` in ``names`` (white space apart),
    in order. Raises ``ValueError`` naming a word that is not one."""
    tiles = []
    for word in names.split():
        match = _MMA.fullmatch(word)
        if match is None:
            raise ValueError(f"{word!r} is not a 2.x tile name (b<M>x<N>x<K>_w<M>x<N>x<K>_s<n>)")
        v = tuple(int(g) for g in match.groups())
        tiles.append(((v[0], v[1], v[2]), (v[3], v[4], v[5]), v[6]))
    return tuple(tiles)
