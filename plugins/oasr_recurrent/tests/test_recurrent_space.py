"""The config space as data: ids, feasibility, per-problem support, the production set, the
generated units and the implementation hash."""

from __future__ import annotations

import pytest
from oasr_core.types import Config

from oasr_recurrent import codegen, jit, lanes, space
from oasr_recurrent.ops_names import CELL_OPS, LANE
from oasr_recurrent.space import config, make_problem


def test_the_space_is_a_dozen_feasible_configs_with_the_default_among_them():
    configs = lanes.space(LANE)
    ids = [c.id for c in configs]
    assert 10 <= len(ids) <= 16 and len(set(ids)) == len(ids)
    assert configs == space.listed(), "every listed config is feasible"
    assert space.DEFAULT in ids and lanes.config(LANE, space.DEFAULT).id == space.DEFAULT
    for c in configs:
        p = c.params
        assert c.id == f"u{p['units']}_r{p['rows']}_t{p['threads']}_s{p['ksplit']}" == p["unit"]
        assert Config.from_json(c.id, c.to_json()) == c
    assert {c.params["rows"] for c in configs} >= {1, 4, 16}, "small and large batch tiles"
    assert {c.params["ksplit"] for c in configs} > {1}, "a K split across warps"


@pytest.mark.parametrize(("params", "why"), [
    ((4, 4, 128, 3), "ksplit 3 is not a power of two"),
    ((4, 4, 96, 1), "96 threads: not a listed block size"),
    ((1, 4, 512, 1), "16 warp groups for 4 gate rows"),
    ((2, 4, 128, 8), "ksplit 8 does not divide 4 warps"),
    ((3, 4, 128, 1), "3 units per CTA"),
    ((4, 32, 128, 1), "32 rows per CTA"),
])
def test_static_feasibility_rejects(params, why):
    assert not space.is_feasible(config(*params)), why


def test_a_config_of_another_lane_is_infeasible_and_unknown():
    other = Config(id="u4_r4_t128_s1", lane="sm90_other", params=config(4, 4, 128, 1).params)
    assert not space.is_feasible(other) and not space.fits_arch(other, "sm90")
    with pytest.raises(KeyError, match="not a recurrent lane"):
        space.listed("sm90_other")
    with pytest.raises(KeyError, match="not a recurrent lane"):
        lanes.symbol(other)


def test_support_needs_16_byte_rows_and_the_staged_rows_within_shared_memory():
    default = lanes.config(LANE, space.DEFAULT)
    assert space.supports(default, make_problem(640, 640, 1))
    assert not space.supports(default, make_problem(644, 640, 1)), "I not a multiple of 8"
    assert not space.supports(default, make_problem(640, 636, 1)), "H not a multiple of 8"
    wide = lanes.config(LANE, "u8_r16_t256_s1")
    assert space.smem(wide, 1024, 1024) == 16 * 2048 * 2 + 32 * 16 * 4
    assert space.supports(wide, make_problem(1024, 1024, 64))
    assert not space.supports(wide, make_problem(2048, 2048, 64)), "131 KiB of staged rows"
    assert space.supports(default, make_problem(2048, 2048, 64))


def test_every_lane_arch_runs_every_config():
    for arch in ("sm80", "sm86", "sm89", "sm90"):
        assert jit.lane_configs(LANE, arch) == lanes.space(LANE)
    assert jit.lane_configs(LANE, "sm75") == ()


def test_the_production_set_is_the_default_and_what_the_tiers_reference(monkeypatch):
    assert jit.PRODUCTION.ids(LANE, "sm90") == (space.DEFAULT,)
    assert jit.PRODUCTION.ids(LANE, "sm90", {"u8_r8_t256_s1", "nonexistent"}) == (
        space.DEFAULT, "u8_r8_t256_s1")
    monkeypatch.setenv(jit.COMPILE_SET_ENV, "all")
    assert [c.id for c in jit.PRODUCTION.configs(LANE, "sm90")] == [c.id for c in lanes.space(LANE)]


def test_a_unit_exports_its_launcher_and_workspace_query_for_both_dtypes():
    c = lanes.config(LANE, "u4_r8_t256_s2")
    text = codegen.unit_source(c)
    assert '#include "oasr_recurrent/lstm_step.cuh"' in text
    assert "using K0 = oasr_recurrent::LstmStep<0, 4, 8, 256, 2>;" in text
    assert "using K1 = oasr_recurrent::LstmStep<1, 4, 8, 256, 2>;" in text
    assert "OASR_EXPORT int32_t oasr_recurrent_sm80_u4_r8_t256_s2(" in text
    assert "OASR_EXPORT int64_t oasr_recurrent_sm80_u4_r8_t256_s2_workspace(" in text
    assert "K1" not in codegen.unit_source(c, ["fp16"])
    (unit,) = codegen.jit_units(c)
    assert unit.exports == ("oasr_recurrent_sm80_u4_r8_t256_s2",
                            "oasr_recurrent_sm80_u4_r8_t256_s2_workspace")
    with pytest.raises(ValueError, match="non-empty subset"):
        codegen.unit_source(c, ["fp32"])


def _cell_units():
    return sum(space.cell_feasible(c, cell) for c in lanes.space(LANE) for cell in CELL_OPS)


def test_the_modules_link_one_unit_per_config_and_cell():
    full = jit.MODULES.full_spec(LANE, "sm90")
    assert full.name == "recurrent_sm80" and len(full.units) == _cell_units() == 14 + 2 * 9 + 14
    (prod,) = jit.MODULES.lane_specs(LANE, "sm90", "production")
    assert [u.name for u in prod.units] == [space.DEFAULT]
    one = jit.RecurrentKernelModule(lanes.config(LANE, "u2_r1_t256_s2"), "sm90").spec()
    assert [u.name for u in one.units] == ["u2_r1_t256_s2", "gru_step_u2_r1_t256_s2"]
    two = jit.RecurrentKernelModule(lanes.config(LANE, "u1_r1_t128_s4"), "sm90").spec()
    assert [u.name for u in two.units] == ["u1_r1_t128_s4", "rnn_tanh_step_u1_r1_t128_s4",
                                           "rnn_relu_step_u1_r1_t128_s4",
                                           "gru_step_u1_r1_t128_s4"]


def test_the_production_module_links_each_ops_configs():
    """Per op, the configs the tiers name for it: the LSTM step's with the lane default (the
    module an LSTM-only tier had before), an RNN step's alone, a config that does not build
    for the cell dropped."""
    lstm_only = jit.MODULES.production_spec(LANE, "sm90", {"lstm_step": ["u8_r16_t256_s1"]})
    assert [u.name for u in lstm_only.units] == [space.DEFAULT, "u8_r16_t256_s1"]
    lstm_units = [u for cid in (space.DEFAULT, "u8_r16_t256_s1")
                  for u in codegen.jit_units(lanes.config(LANE, cid))]
    assert lstm_only.name == "recurrent_sm80" and list(lstm_only.units) == lstm_units
    spec = jit.MODULES.production_spec(
        LANE, "sm90", {"rnn_tanh_step": ["u1_r1_t128_s4", "u2_r1_t256_s2"],
                       "rnn_relu_step": ["u1_r1_t128_s4"]})
    assert [u.name for u in spec.units] == [space.DEFAULT, "rnn_tanh_step_u1_r1_t128_s4",
                                            "rnn_relu_step_u1_r1_t128_s4"]
    cells = jit.production_cells(LANE, "sm90", {"rnn_relu_step": ["u1_r1_t128_s4"]})
    assert {op: [c.id for c in cs] for op, cs in cells.items()} == {
        "lstm_step": [space.DEFAULT], "rnn_tanh_step": [], "rnn_relu_step": ["u1_r1_t128_s4"],
        "gru_step": []}


def test_the_libraries_want_each_ops_units(monkeypatch):
    """A loaded module is kept while it holds every (op, config) the epoch wants."""
    from oasr_recurrent import launch

    monkeypatch.setattr(jit, "referenced", lambda lane, arch: {
        "lstm_step": frozenset(), "rnn_tanh_step": frozenset({"u1_r1_t128_s4"})})
    wanted = set(jit.wanted(LANE, "sm90"))
    assert wanted == {("lstm_step", space.DEFAULT), ("rnn_tanh_step", "u1_r1_t128_s4")}
    assert launch.held({space.DEFAULT: {"lstm_step": 1}, "u1_r1_t128_s4": {
        "rnn_tanh_step": 1}}) >= wanted
    assert not launch.held({space.DEFAULT: {"lstm_step": 1}, "u1_r1_t128_s4": {
        "rnn_relu_step": 1}}) >= wanted
    monkeypatch.setenv(jit.COMPILE_SET_ENV, "all")
    assert jit.wanted(LANE, "sm90") == ()
    assert len(jit.MODULES.production_spec(LANE, "sm90").units) == _cell_units()


def test_the_implementation_hash_covers_the_header():
    first = jit.impl_hash()
    assert len(first) == 16 and first == jit.soft_validators()["impl_hash"]
    names = [name for name, _data in jit.MODULES.impl_inputs(codegen.headers())]
    assert "header:oasr_recurrent/lstm_step.cuh" in names
    assert sum(n.startswith("unit:") for n in names) == _cell_units()
