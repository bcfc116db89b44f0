"""The conv2d plugin against the core's family contract suite, plus its own record checks."""

from __future__ import annotations

from oasr_core.testing import check_activation_family, family_contract
from oasr_core.types import Sentinel

import oasr_conv2d.hooks
from oasr_conv2d.geometry import LANE
from oasr_conv2d.ops_names import DIMS
from oasr_conv2d.space import make_problem


def problem(op, cin, cout, width, k, stride, pad, groups, batch, height):
    return make_problem(op, cin, cout, width, batch, height, kernel=(k, k),
                        stride=(stride, stride), padding=(pad, pad), groups=groups)


PROBLEMS = (
    problem("conv2d_relu", 1, 256, 80, 3, 2, 0, 1, 8, 1024),       # Conformer (M) first conv
    problem("conv2d_relu", 256, 256, 39, 3, 2, 0, 1, 8, 511),      # its C -> C conv
    problem("conv2d_relu", 1, 176, 80, 3, 2, 0, 1, 1, 200),        # Conformer (S) width
    problem("conv2d", 256, 256, 20, 3, 2, 1, 256, 4, 256),          # FastConformer depthwise
    problem("conv2d_relu", 256, 256, 10, 1, 1, 0, 1, 4, 128),      # ... and its pointwise 1x1
    problem("conv2d_silu", 6, 10, 33, 3, 1, 1, 1, 2, 17),          # odd widths
)


TestConv2dContract = family_contract(
    oasr_conv2d.hooks, "conv2d", __file__, problems=PROBLEMS,
    submodules="geometry lanes jit launch numerics recorder codegen space")
"""The core's contract suite; these modules import without compiling."""


def test_family_record():
    family = check_activation_family(oasr_conv2d.hooks, "conv2d")
    assert family.dims == DIMS and family.zero_dims == {"ph", "pw"}
    assert family.untuned_choice is Sentinel.TORCH and family.fallback is Sentinel.HEURISTIC


def test_lane_record():
    (lane,) = oasr_conv2d.hooks.oasr_register_lanes()
    assert lane.name == LANE and set(lane.default_on) == {"sm80", "sm86", "sm89", "sm90"}
    assert lane.default_config == "ig_b128x128x32_w64x64x32_s3"
    kinds = {c.params.get("algorithm", c.params.get("kind")) for c in lane.config_space}
    assert kinds == {"optimized", "few_channels", "analytic", "direct"}
    assert lane.jit_specs is not None and lane.production is not None
