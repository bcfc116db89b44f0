"""The kit's registration records: a family's ``Family`` and ``Lane`` records built from its
sibling modules, checked against the recurrent plugin's real modules."""

from __future__ import annotations

import types

import pytest

from oasr_core.kit import LaneSpaces
from oasr_core.kit.registration import FAMILY_BEHAVIOUR, family_record, lane_records
from oasr_core.types import Config, Sentinel


def test_family_record_takes_the_behaviour_from_the_package_modules():
    from oasr_recurrent import bench, jit, numerics, recorder

    family = family_record("oasr_recurrent", name="recurrent", ops=("lstm_step",),
                           dims=("I", "H"), dtypes=("fp16",),
                           sentinels={Sentinel.DEFAULT}, fallback=Sentinel.DEFAULT)
    assert (family.numerics_gate, family.soft_validators, family.recorder_patches,
            family.make_bench) == (numerics.numerics_gate, jit.soft_validators,
                                   recorder.recorder_patches, bench.make_bench)
    assert set(FAMILY_BEHAVIOUR) == {"numerics_gate", "soft_validators", "recorder_patches",
                                     "make_bench"}


def test_family_record_keeps_a_field_the_caller_names():
    def gate(*_args, **_kwargs):
        return True

    family = family_record("oasr_recurrent", name="recurrent", ops=("lstm_step",),
                           dims=("I", "H"), dtypes=("fp16",), sentinels={Sentinel.DEFAULT},
                           fallback=Sentinel.DEFAULT, numerics_gate=gate)
    assert family.numerics_gate is gate


def test_family_record_of_a_package_without_the_modules_names_it():
    with pytest.raises(ModuleNotFoundError, match="oasr_no_such_family"):
        family_record("oasr_no_such_family", name="none", ops=("op",), dims=("N",))


def test_lane_records_read_the_lanes_module_and_the_kernel_modules_lane_specs():
    from oasr_recurrent import jit, lanes, launch
    from oasr_recurrent.ops_names import FAMILY, LANE

    (lane,) = lane_records(FAMILY, [LANE], lanes, jit_module=jit.RecurrentKernelModule,
                           is_available=launch.is_available, description={LANE: "one step"})
    assert (lane.name, lane.family, lane.description) == (LANE, FAMILY, "one step")
    assert lane.arch_families == tuple(lanes.ARCHES[LANE])
    assert lane.config_space == lanes.space(LANE) and lane.default_config == lanes.DEFAULTS[LANE]
    assert lane.is_feasible is lanes.is_feasible and lane.supports is lanes.supports
    assert lane.jit_specs.func == jit.MODULES.lane_specs and lane.jit_specs.args == (LANE,)
    assert lane.production.func == jit.PRODUCTION.configs and lane.production.args == (LANE,)
    (same,) = lane_records(FAMILY, [LANE], lanes, jit_module=jit.RecurrentKernelModule,
                           is_available=None, description="one step")
    assert same.description == "one step" and same.is_available is None


def test_lane_spaces_from_one_lister_cache_each_lane():
    calls = []

    def listed(lane):
        calls.append(lane)
        return [Config(id=f"{lane}{i}", lane=lane, params={"i": i}) for i in range(3)]

    spaces = LaneSpaces.from_listed("fam", ("a", "b"), listed, lambda c: c.params["i"] != 1)
    assert [c.id for c in spaces.space("b")] == ["b0", "b2"]
    assert spaces.space("b") is spaces.space("b") and calls == ["b"]
    assert spaces.config("a", "a2").lane == "a" and calls == ["b", "a"]
    with pytest.raises(KeyError, match="lane 'c' is not a fam lane"):
        spaces.full("c")


def test_lane_records_need_the_lanes_data():
    from oasr_recurrent import jit
    from oasr_recurrent.ops_names import FAMILY, LANE

    with pytest.raises(AttributeError, match="ARCHES"):
        lane_records(FAMILY, [LANE], types.SimpleNamespace(), jit_module=jit.RecurrentKernelModule,
                     is_available=None, description="x")
