"""The recurrent plugin against the core's family contract suite, plus its own record checks."""

from __future__ import annotations

from oasr_core.testing import family_contract
from oasr_core.types import Sentinel

import oasr_recurrent.hooks
from oasr_recurrent.ops_names import DIMS, LANE, OPS
from oasr_recurrent.space import DEFAULT, make_problem

PROBLEMS = (
    make_problem(640, 640, 1),       # the reference Conformer's prediction network, B = 1
    make_problem(640, 640, 64),
    make_problem(320, 320, 16),      # a two-layer 320 network
    make_problem(640, 1024, 4),
    make_problem(256, 320, 3),
    make_problem(100, 36, 2),        # I not a multiple of 8: no config supports it
)

TestRecurrentContract = family_contract(
    oasr_recurrent.hooks, "recurrent", __file__, problems=PROBLEMS,
    submodules="ops_names space lanes codegen jit launch numerics recorder bench")
"""The core's contract suite; these modules import without compiling."""


def test_family_record():
    (family,) = oasr_recurrent.hooks.oasr_register_families()
    assert family.name == "recurrent" and family.ops == OPS
    assert OPS == ("lstm_step", "rnn_tanh_step", "rnn_relu_step", "gru_step")
    assert family.dims == DIMS == ("I", "H") and family.dynamic_axis == "M"
    assert not family.exact_points
    assert family.untuned_choice is Sentinel.TORCH and family.fallback is Sentinel.DEFAULT
    soft = family.soft_validators()
    assert set(soft) == {"impl_hash"} and len(soft["impl_hash"]) == 16


def test_lane_record():
    (lane,) = oasr_recurrent.hooks.oasr_register_lanes()
    assert lane.name == LANE and set(lane.default_on) == {"sm80", "sm86", "sm89", "sm90"}
    assert lane.default_config == DEFAULT and 10 <= len(lane.config_space) <= 16
    assert lane.jit_specs is not None and lane.production is not None
    assert lane.cost_features is None, "measured exhaustively: the GEMM cost model keys N, K"


def test_the_layer_hook_answers_lstm_in_half_precision_only():
    hooks = oasr_recurrent.hooks
    answer = hooks.oasr_layer(kind="LSTM", dtype="fp16", quantization="none")
    assert callable(answer) and callable(answer.forward) and callable(answer.torch_only)
    assert hooks.oasr_layer(kind="LSTM", dtype="bf16", quantization="none") is answer
    assert hooks.oasr_layer(kind="LSTM", dtype="fp32", quantization="none") is None
    assert hooks.oasr_layer(kind="LSTM", dtype="fp16", quantization="int8_w8a8") is None
    assert hooks.oasr_layer(kind="Conv1d", dtype="fp16", quantization="none") is None
