"""oasr_core.kit.tiles: CUTLASS tile spellings and tile lists written as them."""

from __future__ import annotations

import pytest

from oasr_core.kit import tiles


def test_names_spell_the_ids_families_ship():
    assert tiles.mma_name((128, 128, 64), (64, 64, 64), 5) == "b128x128x64_w64x64x64_s5"
    assert tiles.wgmma_name("pp", (128, 128, 128), (1, 2)) == "pp_128x128x128_c1x2"
    assert tiles.wgmma_name("igh_ws", (64, 64, 64), (1, 1), 4) == "igh_ws_64x64x64_c1x1_s4"


def test_a_tile_list_reads_back_in_order():
    text = """
        b64x64x128_w32x32x128_s5   b128x256x64_w64x64x64_s3
        b256x128x64_w64x64x64_s3
    """
    got = tiles.mma_tiles(text)
    assert got == (((64, 64, 128), (32, 32, 128), 5), ((128, 256, 64), (64, 64, 64), 3),
                   ((256, 128, 64), (64, 64, 64), 3))
    assert " ".join(tiles.mma_name(*t) for t in got) == " ".join(text.split())
    assert tiles.mma_tiles("") == ()


@pytest.mark.parametrize("word", ["b64x64_w32x32x32_s3", "b64x64x64_w32x32x32", "ws_64x64x64_c1x1",
                                  "b64x64x64_w32x32x32_s3_sk"])
def test_a_word_that_is_not_a_tile_name_is_named(word):
    with pytest.raises(ValueError, match=f"'{word}' is not a 2.x tile name"):
        tiles.mma_tiles(f"b64x64x64_w32x32x32_s3 {word}")
