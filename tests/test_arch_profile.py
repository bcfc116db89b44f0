"""ArchProfile: synthetic profiles, JSON round trip, the per-SKU cache in the user tier."""

from __future__ import annotations

import json

import pytest

from oasr_core import arch
from oasr_core.arch import SYNTHETIC_ARCHES, ArchProfile
from oasr_core.errors import ConfigurationError
from oasr_core.types import freeze

H200 = {"arch": "sm90", "sku": "NVIDIA H200", "sms": 132, "smem_per_block": 232448,
        "smem_per_sm": 233472, "regs_per_sm": 65536, "max_threads_per_sm": 2048,
        "l2_bytes": 62914560}


class FakeBench:
    """Stands in for the GPU micro-benchmarks and counts how often they run."""

    runs = 0

    def __init__(self, device, l2_bytes):
        self.l2_bytes = l2_bytes

    def run(self):
        type(self).runs += 1
        return {"dram_gbps": 4100.0, "l2_gbps": 9800.0,
                "tensor_tflops": {"half": 760.0, "int8": 1450.0, "fp8": 1400.0},
                "launch_us_eager": 5.6, "launch_us_graph": 0.85}


@pytest.fixture
def fake_device(monkeypatch):
    FakeBench.runs = 0
    monkeypatch.setattr(arch, "_query", lambda device: dict(H200))
    monkeypatch.setattr(arch, "_MicroBench", FakeBench)
    return FakeBench


def test_synthetic_profiles_cover_the_arch_families():
    assert set(SYNTHETIC_ARCHES) == {"sm80", "sm86", "sm89", "sm90", "sm100", "sm120"}
    for name in SYNTHETIC_ARCHES:
        p = ArchProfile.synthetic(name)
        assert p.arch == name and p.source == "synthetic"
        assert p.smem_per_block <= p.smem_per_sm
        assert p.l2_gbps > p.dram_gbps > 0
        assert p.launch_us_eager > p.launch_us_graph > 0
    hopper = ArchProfile.synthetic("sm90")
    assert (hopper.sms, hopper.smem_per_sm, hopper.l2_bytes) == (132, 228 * 1024, 60 << 20)
    assert set(hopper.tensor_tflops) == {"half", "int8", "fp8"}
    assert "fp8" not in ArchProfile.synthetic("sm80").tensor_tflops


def test_unknown_synthetic_arch_names_the_known_ones():
    with pytest.raises(ConfigurationError, match="sm90"):
        ArchProfile.synthetic("sm70")


def test_json_round_trip_and_refusals():
    p = ArchProfile.synthetic("sm89")
    raw = json.loads(json.dumps(p.to_json()))
    assert raw["schema_version"] == arch.SCHEMA_VERSION
    assert ArchProfile.from_json(raw) == p
    assert ArchProfile.from_json(freeze(raw)) == p  # a tuning file's read-only payload
    with pytest.raises(ConfigurationError, match="upgrade"):
        ArchProfile.from_json(dict(raw, schema_version=arch.SCHEMA_VERSION + 1))
    with pytest.raises(ConfigurationError, match="unknown fields: bogus"):
        ArchProfile.from_json(dict(raw, bogus=1))
    with pytest.raises(ConfigurationError, match="malformed"):
        ArchProfile.from_json(dict(raw, sms=0))
    with pytest.raises(ValueError, match="dtype class"):
        ArchProfile(**H200, dram_gbps=1.0, l2_gbps=1.0, tensor_tflops={"tf32": 1.0},
                    launch_us_eager=1.0, launch_us_graph=1.0)


def test_with_live_takes_queried_facts_and_keeps_benchmarks():
    built = ArchProfile.synthetic("sm90")
    live = ArchProfile.from_json({**built.to_json(), "sms": 114, "sku": "NVIDIA H100 PCIe",
                                  "dram_gbps": 1.0})
    merged = built.with_live(live)
    assert (merged.sms, merged.sku) == (114, "NVIDIA H100 PCIe")
    assert merged.dram_gbps == built.dram_gbps


def test_nearest_family_for_archs_without_a_table():
    assert [arch._nearest(a) for a in ("sm90", "sm87", "sm103", "sm121", "sm75")] == \
        ["sm90", "sm80", "sm100", "sm120", "sm80"]


def test_measure_caches_per_sku_in_the_user_tier(tmp_path, monkeypatch, fake_device):
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    first = ArchProfile.measure()
    assert first.source == "device" and fake_device.runs == 1
    path = tmp_path / "arch" / "NVIDIA_H200_132.json"
    assert arch.cache_path("NVIDIA H200", 132) == path and path.exists()
    assert json.loads(path.read_text())["tensor_tflops"]["half"] == 760.0
    second = ArchProfile.measure()
    assert second.source == "cache" and fake_device.runs == 1
    assert attrs_equal_but_source(first, second)
    ArchProfile.measure(refresh=True)
    assert fake_device.runs == 2
    ArchProfile.measure(use_cache=False)
    assert fake_device.runs == 3


def test_stale_or_foreign_cache_is_measured_again(tmp_path, monkeypatch, fake_device):
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    ArchProfile.measure()
    path = tmp_path / "arch" / "NVIDIA_H200_132.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps(dict(raw, protocol=arch.PROTOCOL + 1)))
    assert ArchProfile.measure().source == "device"
    path.write_text(json.dumps(dict(raw, smem_per_sm=1024)))  # another driver's facts
    assert ArchProfile.measure().source == "device"
    path.write_text("{not json")
    assert ArchProfile.measure().source == "device" and fake_device.runs == 4


def test_user_tier_off_disables_the_cache(monkeypatch, fake_device):
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    assert arch.cache_path("NVIDIA H200", 132) is None
    ArchProfile.measure()
    ArchProfile.measure()
    assert fake_device.runs == 2


def attrs_equal_but_source(a: ArchProfile, b: ArchProfile) -> bool:
    return {**a.to_json(), "source": None} == {**b.to_json(), "source": None}


def test_query_without_a_device_says_what_to_use_instead():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(ConfigurationError, match="synthetic"):
        ArchProfile.query()


@pytest.mark.gpu
def test_measure_on_the_device_gives_plausible_numbers():
    p = ArchProfile.measure(use_cache=False)
    assert p.source == "device" and p.sms > 0
    assert p.l2_gbps > p.dram_gbps > 100
    assert p.tensor_tflops["half"] > 10
    assert 0 < p.launch_us_graph < p.launch_us_eager < 100
    assert ArchProfile.from_json(p.to_json()) == p
