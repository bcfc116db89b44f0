"""The gemm plugin against the core's family contract suite, plus its own record checks."""

from __future__ import annotations

from pathlib import Path

from oasr_core.testing import FamilyContract
from oasr_core.types import Sentinel

import oasr_gemm.hooks
from oasr_gemm import config_space as cs


class TestGemmContract(FamilyContract):
    plugin = oasr_gemm.hooks
    entry_point = ("gemm", "oasr_gemm.hooks")
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    modules = ("oasr_gemm", "oasr_gemm.config_space", "oasr_gemm.feasibility",
               "oasr_gemm.codegen", "oasr_gemm.jit", "oasr_gemm.launch", "oasr_gemm.numerics")


def test_family_record():
    (family,) = oasr_gemm.hooks.oasr_register_families()
    assert family.name == "gemm"
    assert family.ops == ("gemm", "gemm_activation", "gemm_residual", "gemm_log_softmax",
                          "bmm_tn", "bmm_nn", "group_gemm")
    assert family.dims == ("N", "K") and family.dtypes == ("fp16", "bf16")
    assert dict(family.dtype_classes) == {"half": ("fp16", "bf16")}
    assert family.sentinels == {Sentinel.DEFAULT, Sentinel.TORCH}
    assert family.fallback is Sentinel.DEFAULT
    soft = family.soft_validators()
    assert set(soft) == {"impl_hash", "cutlass"} and len(soft["impl_hash"]) == 16
    assert soft["cutlass"] == "4.2.0"


def test_lane_records():
    lanes = {lane.name: lane for lane in oasr_gemm.hooks.oasr_register_lanes()}
    assert set(lanes) == {cs.LANE_SM80, cs.LANE_SM90}
    assert lanes[cs.LANE_SM90].default_on == ("sm90",)
    assert "sm90" in lanes[cs.LANE_SM80].arch_families
    assert "sm90" not in lanes[cs.LANE_SM80].default_on
    assert lanes[cs.LANE_SM90].default.id == cs.SM90_DEFAULT
    assert lanes[cs.LANE_SM80].default.id == cs.SM80_DEFAULT
