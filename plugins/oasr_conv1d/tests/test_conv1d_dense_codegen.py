"""The dense conv1d units' text: kernel types, the family ABI, symbols, hash inputs."""

from __future__ import annotations

import re

import pytest
from oasr_core.jit import TranslationUnit

from oasr_conv1d import dense
from oasr_conv1d.dense import codegen

SM80 = "ig_b128x128x32_w64x64x32_s3"
SM90 = "igh_ws_128x128x64_c1x1"


def _config(lane: str, cid: str):
    return dense.config(lane, cid)


def test_a_2x_unit_names_one_kernel_per_dtype_and_exports_the_family_abi():
    config = _config(dense.LANE_SM80, SM80)
    text = dense.unit_source(config)
    assert '#include "oasr_conv1d/dense/sm80.cuh"' in text
    assert ("using K0 = oasr_conv1d::dense::sm80::Kernel<cutlass::half_t, 128, 128, 32, 64, 64, "
            "32, 3, 1, 8, 8>;") in text
    assert "using K1 = oasr_conv1d::dense::sm80::Kernel<cutlass::bfloat16_t," in text
    sym = dense.symbol(config)
    assert sym == f"oasr_conv1d_dense_sm80_{SM80}"
    assert re.search(rf"OASR_EXPORT int32_t {sym}\(const oasr_kit::CallArgs\* c, "
                     r"const oasr_conv1d::Geometry\* geo, const void\* x, const void\* w, "
                     r"const void\* bias, void\* out, void\* stream\)", text)
    assert (f"OASR_EXPORT int64_t {sym}_workspace(const oasr_conv1d::Geometry* geo, "
            "int32_t dtype)") in text
    assert "K0::run(c, geo, x, w, bias, out, static_cast<cudaStream_t>(stream))" in text


def test_a_3x_unit_uses_the_hopper_header_and_the_warp_specialized_schedule():
    config = _config(dense.LANE_SM90, SM90)
    text = dense.unit_source(config, dtypes=("bf16",))
    assert '#include "oasr_conv1d/dense/sm90.cuh"' in text
    assert ("using K1 = oasr_conv1d::dense::sm90::Kernel<cutlass::bfloat16_t, 128, 128, 64, 1, 1, "
            "0, cutlass::gemm::KernelTmaWarpSpecialized, cutlass::epilogue::TmaWarpSpecialized>;"
            ) in text
    assert "using K0" not in text
    assert dense.pdl_capable(config) and "-DCUTLASS_ENABLE_GDC_FOR_SM90" in dense.flags(
        dense.LANE_SM90)


def test_narrow_configs_carry_their_iterator_and_access_widths():
    fc = _config(dense.LANE_SM80, "ig_b128x64x32_w64x32x32_s2_fc_a1x8")
    assert dense.kernel_type(fc, "fp16").endswith("64, 32, 32, 2, 2, 1, 8>")
    an = _config(dense.LANE_SM90, "ig_b64x64x32_w32x32x32_s2_an_a1x1")
    assert dense.kernel_type(an, "fp16").endswith("32, 32, 32, 2, 0, 1, 1>")
    assert not dense.pdl_capable(an)
    assert dense.symbol(an).startswith("oasr_conv1d_dense_sm90_")


@pytest.mark.parametrize("lane", dense.LANES)
def test_every_op_of_a_config_shares_one_unit_and_symbol(lane):
    for config in dense.space(lane):
        names = {dense.unit_name(config, op) for op in dense.OPS}
        symbols = {dense.symbol(config, op) for op in dense.OPS}
        assert len(names) == 1 and len(symbols) == 1
        assert dense.workspace_symbol(config) == dense.symbol(config) + "_workspace"
        assert {dense.unit_source(config, op) for op in dense.OPS} == {dense.unit_source(config)}


def test_jit_units_are_translation_units_with_both_exports():
    config = _config(dense.LANE_SM90, SM90)
    (unit,) = dense.jit_units(config)
    assert isinstance(unit, TranslationUnit) and unit.name == SM90
    assert unit.exports == (dense.symbol(config), dense.workspace_symbol(config))
    spec = dense.module_spec(dense.LANE_SM90, "sm90", [config], name="probe", dtypes=("fp16",))
    assert spec.arch == "90a" and spec.units[0].source == dense.unit_source(config,
                                                                             dtypes=("fp16",))
    assert str(dense.csrc_dir()) in spec.include_dirs


def test_bad_ops_dtypes_and_lanes_are_refused_by_name():
    config = _config(dense.LANE_SM80, SM80)
    with pytest.raises(ValueError, match="op 'conv2d'"):
        dense.symbol(config, "conv2d")
    with pytest.raises(ValueError, match="dtypes"):
        dense.unit_source(config, dtypes=("fp32",))
    with pytest.raises(ValueError, match="dtypes"):
        dense.unit_source(config, dtypes=())
    stray = type(config)(id="x", lane="sm80_mma", params=dict(config.params))
    with pytest.raises(KeyError, match="not a dense conv1d lane"):
        dense.symbol(stray)


def test_impl_inputs_cover_every_unit_flag_and_header_in_a_fixed_order():
    items = dense.impl_inputs()
    names = [name for name, _ in items]
    assert len(names) == len(set(names))
    for lane in dense.LANES:
        assert f"flags:{lane}" in names
        for config in dense.space(lane):
            assert f"unit:{lane}:{config.id}" in names
    headers = {name for name in names if name.startswith("header:")}
    assert headers == {"header:oasr_conv1d/dense/common.cuh", "header:oasr_conv1d/dense/sm80.cuh",
                       "header:oasr_conv1d/dense/sm90.cuh", "header:oasr_conv1d/geometry.cuh"}
    assert all(isinstance(data, bytes) and data for _, data in items)
    assert dense.headers() == sorted(dense.headers())


def test_the_headers_the_units_include_exist_in_the_include_dir():
    for header in codegen.HEADER.values():
        assert (dense.csrc_dir() / header).is_file()
