"""The conv1d plugin against the core's family contract suite, plus its own record checks."""

from __future__ import annotations

from oasr_core.testing import check_activation_family, family_contract
from oasr_core.types import Problem, Sentinel

import oasr_conv1d.hooks
from oasr_conv1d.geometry import LANE_SM80, LANE_SM90
from oasr_conv1d.recorder import DIMS


def _problem(op, cin, cout, k, stride, pad, groups, batch, t_in):
    t_out = (t_in + 2 * pad - (k - 1) - 1) // stride + 1
    return Problem(family="conv1d", op=op, dtype="fp16",
                   dims=tuple(zip(DIMS, (cin, cout, k, stride, pad, 1, groups), strict=True)),
                   m=batch * t_out, point=f"{batch}x{t_in}")


PROBLEMS = (
    _problem("conv1d_silu", 256, 256, 31, 1, 15, 256, 16, 256),
    _problem("conv1d_silu", 144, 144, 31, 1, 15, 144, 1, 50),
    _problem("conv1d_gelu", 80, 512, 3, 1, 1, 1, 8, 3000),
    _problem("conv1d_gelu", 512, 512, 3, 2, 1, 1, 8, 3000),
    _problem("conv1d", 1, 512, 10, 5, 0, 1, 4, 16000),
    _problem("conv1d", 768, 768, 128, 1, 64, 16, 2, 100),
    _problem("conv1d", 6, 6, 5, 2, 2, 6, 3, 77),
)


TestConv1dContract = family_contract(
    oasr_conv1d.hooks, "conv1d", __file__, problems=PROBLEMS,
    submodules="geometry lanes jit launch numerics recorder depthwise depthwise.codegen")
"""The core's contract suite; these modules import without compiling."""


def test_family_record():
    family = check_activation_family(oasr_conv1d.hooks, "conv1d")
    assert family.dims == ("Cin", "Cout", "k", "stride", "pad", "dil", "groups")
    assert family.untuned_choice is Sentinel.HEURISTIC and family.fallback is Sentinel.HEURISTIC
    assert family.untuned_gate is not None
    assert dict(family.dtype_classes) == {"half": ("fp16", "bf16")}


def test_lane_records():
    lanes = {lane.name: lane for lane in oasr_conv1d.hooks.oasr_register_lanes()}
    assert set(lanes) == {LANE_SM80, LANE_SM90}
    assert lanes[LANE_SM90].default_on == ("sm90",)
    assert "sm90" in lanes[LANE_SM80].arch_families
    assert set(lanes[LANE_SM80].default_on) == {"sm80", "sm86", "sm89"}
    for lane in lanes.values():
        kinds = {c.params.get("kind", "dense") for c in lane.config_space}
        assert kinds == {"dense", "depthwise"}, lane.name
        assert lane.jit_specs is not None and lane.production is not None
