"""The scaled_mm_fp8 plugin against the core's family contract suite, plus its records."""

from __future__ import annotations

from pathlib import Path

from oasr_core.testing import FamilyContract
from oasr_core.types import Problem, Sentinel

import oasr_scaled_mm_fp8.hooks
from oasr_scaled_mm_fp8 import config_space as cs


def _problems():
    return tuple(Problem(cs.FAMILY, op, cs.DTYPE, (("N", n), ("K", k)), m)
                 for op in cs.OPS for n, k in ((768, 256), (760, 256), (4096, 4096))
                 for m in (1, 100, 16384))


class TestFp8Contract(FamilyContract):
    plugin = oasr_scaled_mm_fp8.hooks
    entry_point = ("scaled_mm_fp8", "oasr_scaled_mm_fp8.hooks")
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    problems = _problems()
    modules = ("oasr_scaled_mm_fp8", "oasr_scaled_mm_fp8.config_space",
               "oasr_scaled_mm_fp8.feasibility", "oasr_scaled_mm_fp8.heuristic",
               "oasr_scaled_mm_fp8.codegen", "oasr_scaled_mm_fp8.jit",
               "oasr_scaled_mm_fp8.launch", "oasr_scaled_mm_fp8.numerics",
               "oasr_scaled_mm_fp8.recorder", "oasr_scaled_mm_fp8.bench",
               "oasr_scaled_mm_fp8.quantize", "oasr_scaled_mm_fp8.linear",
               "oasr_scaled_mm_fp8.quantize_kernel")


def test_family_record():
    (family,) = oasr_scaled_mm_fp8.hooks.oasr_register_families()
    assert family.name == "scaled_mm_fp8" and family.stem == "scaled_mm_fp8"
    assert family.ops == ("scaled_mm_fp8", "scaled_mm_fp8_quant")
    assert family.dims == ("N", "K") and family.dtypes == ("float8_e4m3fn",)
    assert family.key_dtype is False
    assert family.sentinels == {Sentinel.HEURISTIC, Sentinel.TORCH, Sentinel.UNQUANTIZED}
    assert family.fallback is Sentinel.HEURISTIC and family.untuned_choice is Sentinel.HEURISTIC
    assert dict(family.quantizations) == {"fp8_w8a8": ("bf16", "fp16")}
    soft = family.soft_validators()
    assert set(soft) == {"impl_hash", "cutlass", "heuristic"} and len(soft["impl_hash"]) == 16
    assert len(soft["heuristic"]) == 16


def test_keys():
    from oasr_core import database

    (family,) = oasr_scaled_mm_fp8.hooks.oasr_register_families()
    assert database.signature_key(family, "scaled_mm_fp8", None, (768, 256)) == \
        "scaled_mm_fp8|op=scaled_mm_fp8|N=768|K=256"
    assert database.signature_key(family, "scaled_mm_fp8_quant", None, (768, 256)) == \
        "scaled_mm_fp8|op=scaled_mm_fp8_quant|N=768|K=256"


def test_lane_records():
    lanes = {lane.name: lane for lane in oasr_scaled_mm_fp8.hooks.oasr_register_lanes()}
    assert set(lanes) == {cs.LANE_SM89, cs.LANE_SM90}
    assert lanes[cs.LANE_SM89].arch_families == ("sm89", "sm90")
    assert lanes[cs.LANE_SM89].default_on == ("sm89",)
    assert lanes[cs.LANE_SM90].default_on == ("sm90",)
    for lane in lanes.values():
        assert lane.default.id == cs.DEFAULTS[lane.name]
        specs = lane.jit_specs(lane.arch_families[-1], "production")
        assert len(specs) == 2 and specs[0].units
        assert specs[1].name == "scaled_mm_fp8_quantize_rows"
        assert len(lane.jit_specs("sm90", "all")[0].units) == 2 * len(lane.config_space)


def test_linear_hook_answers_fp8_w8a8_only():
    from oasr_scaled_mm_fp8 import linear

    assert oasr_scaled_mm_fp8.hooks.oasr_linear(dtype="bf16", quantization="fp8_w8a8") \
        is linear.linear
    assert oasr_scaled_mm_fp8.hooks.oasr_linear(dtype="fp32", quantization="fp8_w8a8") is None
    assert oasr_scaled_mm_fp8.hooks.oasr_linear(dtype="bf16", quantization="int8_w8a8") is None
