"""Bundles: several generated units as one file (``oasr_core.jit.bundles``), and the groups a
build cuts its units into, one per nvcc slot."""

from __future__ import annotations

import pytest

from oasr_core.jit import TranslationUnit, bundles


def _unit(name: str, prelude: str = "", header: str = "lane.cuh") -> TranslationUnit:
    return TranslationUnit(name, f"// unit {name}\n// generated\n{prelude}#include \"{header}\"\n\n"
                                 f"namespace {{\nusing K0 = Kernel<{len(name)}>;\n}}\n"
                                 f"OASR_EXPORT int {name}_run(void) {{ return K0::run(); }}\n",
                           (f"{name}_run",))


def test_a_bundle_holds_every_body_in_its_own_namespace_under_one_head():
    tu = bundles.bundle("a+1", [_unit("a"), _unit("bb")])
    assert tu.name == "a+1" and tu.exports == ("a_run", "bb_run")
    assert tu.source.count('#include "lane.cuh"') == 1
    assert tu.source.index('#include') < tu.source.index("namespace oasr_bundle_0 {")
    assert "namespace oasr_bundle_1 {  // unit bb" in tu.source
    assert tu.source.count("using K0 =") == 2  # each in its own namespace: no clash


def test_a_single_unit_is_its_own_bundle_and_preludes_must_match():
    one = _unit("a")
    assert bundles.bundle("x", [one]) is one
    with pytest.raises(ValueError, match="different preprocessor preludes"):
        bundles.bundle("x", [_unit("a"), _unit("b", "#undef GDC\n")])
    with pytest.raises(ValueError, match="no units"):
        bundles.bundle("x", [])
    assert bundles.head_of(_unit("b", "#undef GDC\n")) == '#undef GDC\n#include "lane.cuh"'
    assert bundles.prelude_of(_unit("b", "#undef GDC\n")) == "#undef GDC"


def test_units_whose_heads_differ_in_includes_only_share_a_file_that_includes_both():
    plain, fused = _unit("a"), _unit("a_res", header="lane_residual.cuh")
    tu = bundles.bundle("a+1", [plain, fused])
    head = tu.source[: tu.source.index("namespace oasr_bundle_0")]
    assert head.count('#include "lane.cuh"') == 1
    assert head.count('#include "lane_residual.cuh"') == 1
    assert tu.exports == ("a_run", "a_res_run")
    out = bundles.bundles_of([plain, fused])
    assert out["a_res"] is out["a"]
    # A prelude line is not an include: a unit with one keeps its own file.
    with pytest.raises(ValueError, match="preludes"):
        bundles.bundle("x", [plain, _unit("b", "#define OASR_NO_GDC 1\n", "lane_residual.cuh")])


@pytest.mark.parametrize(("items", "slots", "sizes"), [
    (30, 15, [2] * 15),
    (41, 15, [3] * 11 + [2] * 4),
    (10, 15, [1] * 10),
    (133, 15, [4] * 31 + [3] * 3),  # capped at MAX_BUNDLE: more groups than slots
    (0, 15, []),
])
def test_groups_fill_the_slots_in_priority_order(items, slots, sizes):
    groups = bundles.plan_groups(list(range(items)), slots)
    assert [len(g) for g in groups] == sizes
    assert [i for g in groups for i in g] == list(range(items))


def test_groups_need_a_slot():
    with pytest.raises(ValueError, match="slots"):
        bundles.plan_groups([1], 0)


def test_units_are_bundled_per_prelude_and_each_maps_to_its_bundle():
    a, b, c = _unit("a"), _unit("b"), _unit("c", "#undef GDC\n")
    out = bundles.bundles_of([a, b, c])
    assert out["a"] is out["b"] and out["a"].name == "a+1"
    assert out["c"] is c  # alone under its prelude


def test_a_config_s_variants_share_its_file_and_other_configs_stay_apart():
    from oasr_core.jit import JitSpec
    from oasr_core.kit.production import bundled
    from oasr_core.types import Config

    units = [_unit("a"), _unit("a_e64"), _unit("a_res", header="lane_residual.cuh"),
             _unit("a_e64_res", header="lane_residual.cuh"), _unit("b_quant"), _unit("c"),
             _unit("c_odd", "#undef GDC\n")]
    primaries = {"a", "a_e64", "c", "b"}  # a_e64 is a config of its own; b is not compiled
    got = bundles.variant_bundles(units, primaries)
    assert [u.name for u in got] == ["a+1", "a_e64+1", "b_quant", "c", "c_odd"]
    assert [bundles.members_of(u) for u in got[:2]] == [("a", "a_res"), ("a_e64", "a_e64_res")]
    assert bundles.members_of(units[0]) == ("a",)
    # Through the kit: a subset of the lane's space is bundled, the whole space is not (it is
    # what prebuild --all compiles unit by unit).
    space = [Config(id=n, lane="l", params={"unit": n}) for n in ("a", "a_e64", "c")]
    spec = JitSpec(name="m", arch="90a", units=tuple(units[:4]), cutlass=False)
    assert [u.name for u in bundled(spec, space).units] == ["a+1", "a_e64+1"]
    whole = JitSpec(name="m", arch="90a", units=(*units[:4], units[5]), cutlass=False)
    assert bundled(whole, space) is whole
