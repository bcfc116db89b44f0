"""The config space as data, its feasibility rules, the heuristic, and the generated units."""

from __future__ import annotations

import ctypes
import re

import pytest
from oasr_core.types import Config

from oasr_conv2d import codegen, jit, lanes, space
from oasr_conv2d.geometry import CSRC, LANE, Geometry, call_args, geometry
from oasr_conv2d.space import make_problem

FIRST = make_problem("conv2d_relu", 1, 256, 80, 8, 1024, stride=(2, 2))
SECOND = make_problem("conv2d_relu", 256, 256, 39, 8, 511, stride=(2, 2))
DEPTHWISE = make_problem("conv2d", 256, 256, 20, 4, 256, stride=(2, 2), padding=(1, 1),
                         groups=256)
ODD = make_problem("conv2d_silu", 6, 10, 33, 2, 17, padding=(1, 1))


def test_space_ids_are_unique_and_rebuild_from_params():
    configs = lanes.space(LANE)
    assert len({c.id for c in configs}) == len(configs) == 19
    for c in configs:
        rebuilt = Config(id=c.id, lane=c.lane, params=dict(c.params))
        assert space.is_feasible(rebuilt) and c.params["unit"] == c.id


@pytest.mark.parametrize(("tile", "warp", "stages", "algo", "ain", "why"), [
    ((128, 16, 32), (64, 16, 32), 3, "optimized", 8, "N below 32"),
    ((128, 128, 32), (64, 64, 32), 3, "few_channels", 1, "cp.async needs 4 bytes"),
    ((128, 128, 32), (64, 64, 32), 3, "few_channels", 8, "few channels read 1..4"),
    ((256, 256, 64), (64, 64, 64), 4, "optimized", 8, "shared memory"),
    ((128, 128, 32), (32, 32, 32), 3, "optimized", 8, "16 warps"),
])
def test_infeasible_configs_are_refused(tile, warp, stages, algo, ain, why):
    assert not space.is_feasible(space.config(tile, warp, stages, algo, ain, 8)), why


def test_supports_follows_the_widths_and_the_kind():
    few = lanes.config(LANE, space.FEW_CHANNELS_DEFAULT)
    default = lanes.config(LANE, space.DEFAULT)
    anywidth = lanes.config(LANE, space.ANY_WIDTH)
    assert space.supports(few, FIRST) and not space.supports(default, FIRST)
    assert space.supports(default, SECOND) and not space.supports(few, SECOND)
    assert space.supports(anywidth, ODD) and not space.supports(default, ODD)
    assert not any(space.supports(c, DEPTHWISE) for c in lanes.space(LANE))


def test_direct_configs_take_few_input_channels_and_vector_widths():
    direct = lanes.config(LANE, "dc_c8_p8_t256")
    narrow = lanes.config(LANE, "dc_c4_p8_t256")
    assert space.is_direct(direct) and space.supports(direct, FIRST)
    assert not space.supports(direct, SECOND), "256 input channels: the implicit GEMM's"
    assert not space.supports(direct, ODD) and not space.supports(narrow, ODD)  # Cout 10
    assert not space.supports(direct, DEPTHWISE)
    wide = make_problem("conv2d_relu", 1, 1280, 80, 1, 64, stride=(2, 2))  # 45 KiB filter
    assert space.supports(direct, wide) and not space.supports(lanes.config(
        LANE, "dc_c8_p8_t128"), wide), "1280 / 8 channel groups exceed 128 threads"
    big = make_problem("conv2d", 8, 512, 80, 1, 64, kernel=(3, 3))  # 144 KiB of fp32 filter
    assert not space.supports(direct, big)
    text = codegen.unit_source(direct)
    assert '#include "oasr_conv2d/direct.cuh"' in text
    assert "oasr_conv2d::direct::Kernel<0, 8, 8, 256>" in text
    assert "oasr_conv2d::direct::Kernel<1, 8, 8, 256>" in text
    assert not space.is_feasible(space.direct_config(3, 8, 256))


def test_heuristic_names_the_kernel_that_runs_the_shape():
    lane = type("L", (), {"name": LANE})()
    assert space.heuristic(FIRST, lane).id == space.FEW_CHANNELS_DEFAULT
    assert space.heuristic(SECOND, lane).id == space.DEFAULT
    assert space.heuristic(ODD, lane).id == space.ANY_WIDTH
    assert set(lanes.ALWAYS) <= {c.id for c in lanes.space(LANE)}


def test_fits_arch_checks_the_arch_shared_memory():
    big = space.config((128, 128, 64), (64, 64, 64), 4)  # 128 KiB of stages
    assert space.is_feasible(big) and space.smem(big) == 131072
    assert space.fits_arch(big, "sm90") and not space.fits_arch(big, "sm86")
    listed = lanes.config(LANE, "ig_b128x256x32_w64x64x32_s3")
    assert all(space.fits_arch(listed, a) for a in ("sm80", "sm86", "sm89", "sm90"))
    assert not space.fits_arch(listed, "sm100")


def test_geometry_mirrors_the_header_field_by_field():
    text = (CSRC / "oasr_conv2d" / "geometry.cuh").read_text()
    body = re.search(r"struct Geometry \{(.*?)\};", text, re.S).group(1)
    fields = []
    for decl in body.strip().split(";"):
        if decl.strip():
            kind, names = decl.split(None, 1)
            fields += [(n.strip(), kind) for n in names.split(",")]
    ctype = {"int64_t": ctypes.c_int64, "int32_t": ctypes.c_int32}
    assert [(n, ctype[k]) for n, k in fields] == list(Geometry._fields_)
    g = geometry(8, 1024, 80, 1, 256, 3, 3, 2, 2)
    assert (g.h_out, g.w_out) == (511, 39)
    call = call_args(g, "fp16", "relu")
    assert (call.m, call.n, call.k, call.act) == (8 * 511 * 39, 256, 9, 1)
    with pytest.raises(ValueError, match="smaller than the window"):
        geometry(1, 2, 80, 1, 8, 3, 3)
    with pytest.raises(ValueError, match="groups=3"):
        geometry(1, 8, 8, 4, 8, 3, 3, groups=3)


def test_a_unit_names_both_dtypes_and_the_abi():
    c = lanes.config(LANE, space.FEW_CHANNELS_DEFAULT)
    text = codegen.unit_source(c)
    assert "oasr_conv2d::sm80::Kernel<cutlass::half_t, 128, 64, 32, 64, 32, 32, 2, 2, 1, 8>" in text
    assert "cutlass::bfloat16_t" in text and '#include "oasr_conv2d/sm80.cuh"' in text
    assert f"OASR_EXPORT int64_t {lanes.symbol(c)}_workspace(" in text
    (unit,) = codegen.jit_units(c, ("fp16",))
    assert unit.exports == (lanes.symbol(c), lanes.symbol(c) + "_workspace")
    assert "bfloat16" not in unit.source


def test_production_module_links_the_heuristics_configs():
    spec = jit.MODULES.production_spec(LANE, "sm90")
    assert {u.name for u in spec.units} == set(lanes.ALWAYS)
    assert str(CSRC) in spec.include_dirs
    whole = jit.MODULES.full_spec(LANE, "sm90")
    assert len(whole.units) == 19
    assert len(jit.MODULES.full_spec(LANE, "sm86").units) == 19  # every listed tile fits 99 KiB
    assert jit.impl_hash() == jit.impl_hash() and len(jit.impl_hash()) == 16
