"""The engine API: TuningConfig, coverage of must-tune points, prewarm within one budget,
strict mode, epochs and release callbacks, and the engine's report."""

from __future__ import annotations

import pytest
from autotune_kit import ARCH, LANE, K, N, ScriptedDevice, install
from oasr_test_plugins import QuantLike, write

import oasr_core
from oasr_core import database, runtime
from oasr_core.autotuning import AutotuneWarning
from oasr_core.census.shapeset import ShapePoint, ShapeSet, SignatureInfo
from oasr_core.errors import ConfigurationError, UncoveredShapesError
from oasr_core.tuner import TuningConfig, TuningMode
from oasr_core.types import Tier

PREWARM = TuningConfig(mode="prewarm", budget_s=60)


def point(m, *, n=N, must=True, weight=1.0, family="fake", op="fake", dtype="fp16"):
    return ShapePoint(family=family, op=op, dtype=dtype, dims={"N": n, "K": K}, m=m, must=must,
                      weight=weight, calls=1.0)


@pytest.fixture
def tiers(tmp_path, monkeypatch):
    user, system = tmp_path / "user", tmp_path / "system"
    system.mkdir()
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(user))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(system))
    device = ScriptedDevice()
    install(device, QuantLike())
    yield device, user, system
    runtime.install_runtime(None)


def census(*points, signatures=None):
    return ShapeSet(points=points, signatures=signatures or {}, working_set_bytes=1 << 20)


def test_tuning_config_reads_modes_and_checks_the_budget():
    assert TuningConfig().mode is TuningMode.OFF
    assert TuningConfig(mode="prewarm").mode is TuningMode.PREWARM
    assert TuningConfig(mode=TuningMode.PREWARM, budget_s=5).budget_s == 5
    with pytest.raises(ConfigurationError, match="'eager' is not 'off' or 'prewarm'"):
        TuningConfig(mode="eager")
    for bad in (0, -1, True, "60"):
        with pytest.raises(ConfigurationError, match="budget_s"):
            TuningConfig(budget_s=bad)


def test_strict_names_every_uncovered_must_tune_point(tiers):
    device, _, system = tiers
    write(system, "fake", {("fake", "half", (N, K)): [[1000, "n64_k32_s1"]]})
    shapes = census(point(100), point(3000), point(64, n=1024), point(5000, must=False),
                    point(64, family="gone", op="x"))
    tuner = oasr_core.Tuner(TuningConfig(strict=True), shapes, arch=ARCH)
    assert [str(u) for u in tuner.uncovered()] == [
        "fake/fake fake|op=fake|dt=fp16|N=512|K=256 M=3000",
        "fake/fake fake|op=fake|dt=fp16|N=1024|K=256 M=64",
        "gone/x gone|op=x|dt=fp16|N=512|K=256 M=64"]
    with pytest.raises(UncoveredShapesError) as info:
        tuner.prepare()
    message = str(info.value)
    assert "\n" not in message and message.startswith("3 must-tune point(s)")
    for u in info.value.points:
        assert str(u) in message
    assert "M=100" not in message and "M=5000" not in message
    assert device.benched == []


def test_prewarm_measures_only_uncovered_must_tune_points_into_the_user_tier(tiers):
    device, user, system = tiers
    write(system, "fake", {("fake", "half", (N, K)): [[1000, "n64_k32_s1"]]})
    epochs = []
    shapes = census(point(100, weight=5), point(3000, weight=9), point(64, n=1024, weight=1),
                    point(5000, must=False))
    tuner = oasr_core.Tuner(TuningConfig(mode="prewarm", budget_s=60, strict=True), shapes,
                            arch=ARCH, timer=device.timer, on_reload=epochs.append)
    result = tuner.prepare()  # strict passes after prewarm
    assert device.benched == [((N, K), 3000), ((1024, K), 64)]  # heaviest first
    assert [str(u) for u in result.measured] == [
        "fake/fake fake|op=fake|dt=fp16|N=512|K=256 M=3000",
        "fake/fake fake|op=fake|dt=fp16|N=1024|K=256 M=64"]
    assert result.failed == () and result.left == ()
    assert tuner.uncovered() == () and epochs == [runtime.get_runtime().epoch]
    tf = database.read_tuning_file(database.tier_path(
        user, ARCH, runtime.get_runtime().registry.family("fake")))
    assert [r.m_hi for r in tf.entries["fake|op=fake|dt=fp16|N=512|K=256"].regions] == [3000]
    assert oasr_core.select("fake", "fake", "fp16", (N, K), 3000, ARCH).tier is Tier.USER
    assert oasr_core.select("fake", "fake", "fp16", (N, K), 3001, ARCH).tier is Tier.DEFAULT


def test_one_budget_for_every_family_then_strict_lists_what_was_left(tiers):
    device, _, _ = tiers
    shapes = census(*(point(100 * (i + 1), weight=10 - i) for i in range(5)))
    clock = lambda: 10.0 * len(device.benched)  # each measurement takes 10 s  # noqa: E731
    tuner = oasr_core.Tuner(TuningConfig(mode="prewarm", budget_s=25, strict=True), shapes,
                            arch=ARCH, timer=device.timer, clock=clock)
    with pytest.raises(UncoveredShapesError, match="2 must-tune point") as info:
        tuner.prepare()
    assert [m for _, m in device.benched] == [100, 200, 300]
    assert [u.m for u in tuner.prewarmed.left] == [400, 500]
    assert [u.m for u in info.value.points] == [400, 500]
    assert "M=400" in str(info.value) and "M=500" in str(info.value)
    assert "3 point(s) measured" in tuner.prewarmed.line()


def test_prewarm_with_the_user_tier_off_measures_nothing_and_says_so(tiers, monkeypatch):
    device, _, _ = tiers
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    tuner = oasr_core.Tuner(PREWARM, census(point(100)), arch=ARCH, timer=device.timer)
    with pytest.warns(AutotuneWarning, match="prewarm skipped: the user tier is disabled"):
        result = tuner.prepare()
    assert result.skipped and [u.m for u in result.left] == [100] and device.benched == []


def test_a_shape_list_is_all_must_tune(tiers):
    device, _, _ = tiers
    shapes = [("fake", "fake", "fp16", (N, K), 100),
              ("fake", "fake", "fp16", {"N": 1024, "K": K}, 8),
              point(300, must=False)]
    tuner = oasr_core.Tuner(PREWARM, shapes, arch=ARCH, timer=device.timer)
    assert len(tuner.uncovered()) == 3
    tuner.prepare()
    assert sorted(device.benched) == [((N, K), 100), ((N, K), 300), ((1024, K), 8)]
    with pytest.raises(ConfigurationError, match="dims"):
        oasr_core.Tuner(PREWARM, [("fake", "fake", "fp16", (N,), 100)], arch=ARCH)
    with pytest.raises(ConfigurationError, match="not a ShapePoint"):
        oasr_core.Tuner(PREWARM, [42], arch=ARCH)


def test_every_epoch_change_calls_the_release_callbacks(tiers):
    device, _, _ = tiers
    released = []
    tuner = oasr_core.Tuner(TuningConfig(), census(point(100)), arch=ARCH,
                            on_reload=lambda e: released.append(("engine", e)))
    extra = lambda e: released.append(("extra", e))  # noqa: E731
    tuner.add_release_callback(extra)
    assert tuner.reload() == 1
    with oasr_core.autotune(arch=ARCH, timer=device.timer, publish=False):
        pass
    tuner.remove_release_callback(extra)
    oasr_core.reload()
    assert released == [("engine", 1), ("extra", 1), ("engine", 2), ("extra", 2),
                        ("engine", 3), ("extra", 3), ("engine", 4)]
    tuner.close()
    oasr_core.reload()
    assert len(released) == 7
    with pytest.raises(ConfigurationError, match="not callable"):
        tuner.add_release_callback("release")


def test_the_report_counts_tiers_lists_uncovered_points_and_quantized_layers(tiers):
    device, _, system = tiers
    write(system, "tq", {("scaled_mm", None, (768, 256)): [[None, "heuristic"]]})
    q = [ShapePoint(family="tq", op="scaled_mm", dtype="int8", dims={"N": n, "K": 256}, m=64,
                    must=True, calls=1.0) for n in (768, 1024)]
    signatures = {q[0].signature: SignatureInfo(1 << 16, 12),
                  q[1].signature: SignatureInfo(1 << 16, 4)}
    tuner = oasr_core.Tuner(PREWARM, census(point(100), *q, signatures=signatures), arch=ARCH,
                            timer=device.timer)
    tuner.prepare()
    oasr_core.select("fake", "fake", "fp16", (N, K), 100, ARCH)
    oasr_core.select("tq", "scaled_mm", "int8", (768, 256), 64, ARCH)
    report = tuner.report()
    text = str(report)
    assert "fake/fake: user=1" in text and "tq/scaled_mm: system=1" in text
    assert "prewarm: 1 point(s) measured" in text
    assert "tq: 16 quantized layer(s) over 2 signature(s): 12 with a tuning entry " \
           "(system=12), 4 on the shape heuristic" in text
    assert [str(u) for u in report.uncovered] == ["tq/scaled_mm tq|op=scaled_mm|N=1024|K=256 M=64"]
    assert "  tq/scaled_mm tq|op=scaled_mm|N=1024|K=256 M=64 (" in text
    doc = report.to_json()
    assert doc["quantized"] == list(report.quantized) and doc["uncovered"][0]["m"] == 64
    assert LANE.name in text


def test_without_a_device_or_an_arch_coverage_cannot_be_told(tiers):
    tuner = oasr_core.Tuner(TuningConfig(strict=True), census(point(100)))
    with pytest.raises(ConfigurationError, match="no CUDA device and was given no arch"):
        tuner.prepare()


def test_the_engine_api_is_exported_lazily_and_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, oasr_core, oasr_core.autotuning, oasr_core.tuner\n"
            "assert callable(oasr_core.autotune) and oasr_core.Tuner and oasr_core.TuningConfig\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "print(oasr_core.autotune.__module__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "oasr_core.autotuning.session"
