"""The scaled_mm plugin against the core's family contract suite, plus its own record checks."""

from __future__ import annotations

from pathlib import Path

from oasr_core.testing import FamilyContract
from oasr_core.types import Problem, Sentinel

import oasr_scaled_mm.hooks
from oasr_scaled_mm import config_space as cs


def _problems():
    out = []
    for op in cs.OPS:
        for n, k in ((768, 256), (760, 256), (3072, 768), (256, 16384)):
            for m in (1, 16, 100, 2152):
                out.append(Problem(cs.FAMILY, op, "int8", (("N", n), ("K", k)), m))
    return tuple(out)


class TestScaledMmContract(FamilyContract):
    plugin = oasr_scaled_mm.hooks
    entry_point = ("scaled_mm", "oasr_scaled_mm.hooks")
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    problems = _problems()
    modules = ("oasr_scaled_mm", "oasr_scaled_mm.config_space", "oasr_scaled_mm.feasibility",
               "oasr_scaled_mm.heuristic", "oasr_scaled_mm.codegen", "oasr_scaled_mm.jit",
               "oasr_scaled_mm.launch", "oasr_scaled_mm.numerics", "oasr_scaled_mm.recorder",
               "oasr_scaled_mm.bench", "oasr_scaled_mm.quantize")
    # Not ops/reference: they import torch at module level, and importing torch (2.13) runs
    # `ldconfig -p`, which the suite's no-subprocess probe would report.


def test_family_record():
    (family,) = oasr_scaled_mm.hooks.oasr_register_families()
    assert family.name == "scaled_mm" and family.ops == ("scaled_mm", "scaled_mm_quant")
    assert family.dims == ("N", "K") and family.dtypes == ("int8",)
    assert family.key_dtype is False and family.key_dtypes("int8") == (None,)
    assert family.sentinels == {Sentinel.HEURISTIC, Sentinel.TORCH, Sentinel.UNQUANTIZED}
    assert family.fallback is Sentinel.HEURISTIC and family.sentinel_heuristic is not None
    assert family.make_bench is not None and family.recorder_patches is not None
    soft = family.soft_validators()
    assert set(soft) == {"impl_hash", "cutlass", "heuristic"} and len(soft["impl_hash"]) == 16
    assert soft["cutlass"] == "4.2.0"


def test_keys_carry_no_dtype():
    from oasr_core import database

    (family,) = oasr_scaled_mm.hooks.oasr_register_families()
    assert database.signature_key(family, "scaled_mm", None, (768, 256)) == \
        "scaled_mm|op=scaled_mm|N=768|K=256"


def test_lane_records():
    lanes = {lane.name: lane for lane in oasr_scaled_mm.hooks.oasr_register_lanes()}
    assert set(lanes) == {cs.LANE_SM80, cs.LANE_SM90}
    assert lanes[cs.LANE_SM90].default_on == ("sm90",)
    assert lanes[cs.LANE_SM80].arch_families == ("sm80", "sm86", "sm89", "sm90")
    assert "sm90" not in lanes[cs.LANE_SM80].default_on
    assert lanes[cs.LANE_SM90].default.id == cs.SM90_DEFAULT
    assert lanes[cs.LANE_SM80].default.id == cs.SM80_DEFAULT
    for lane in lanes.values():
        specs = lane.jit_specs(lane.arch_families[-1], "production")
        assert len(specs) == 2 and specs[0].units
        assert specs[1].name == "scaled_mm_quantize_rows"  # the activation quantizer
