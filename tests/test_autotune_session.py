"""``oasr_core.autotune()`` on a scripted device: what is measured, what wins, what is served
and published, and writer processes publishing into one user tier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from autotune_kit import ARCH, LANE, K, N, ScriptedDevice, default_cost_ms, install

import oasr_core
from oasr_core import database, runtime
from oasr_core.autotuning import AutotuneWarning, EagerTimer, Timing, read_cache
from oasr_core.autotuning.measure import candidates
from oasr_core.bench import BenchCase, BenchOptions, measure
from oasr_core.errors import ConfigurationError
from oasr_core.types import Problem, Sentinel, Tier

KEY = "fake|op=fake|dt=fp16|N=512|K=256"
KIT = Path(__file__).with_name("autotune_kit.py")


@pytest.fixture
def user(tmp_path, monkeypatch):
    root = tmp_path / "user"
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(root))
    yield root
    runtime.install_runtime(None)


def pick(m, dims=(N, K), arch=ARCH):
    return oasr_core.select("fake", "fake", "fp16", dims, m, arch)


def fake_file(root):
    family = runtime.get_runtime().registry.family("fake")
    return database.tier_path(root, ARCH, family)


def best_by_cost(m, dims=(N, K)):
    problem = Problem("fake", "fake", "fp16", (("N", dims[0]), ("K", dims[1])), m)
    names = [c.value if isinstance(c, Sentinel) else c.id
             for c in candidates(runtime.get_runtime().registry.family("fake"), LANE,
                                 problem)]
    return min(names, key=lambda n: (default_cost_ms(n, problem), n))


def test_inside_each_new_shape_is_measured_once_outside_never(user):
    device = ScriptedDevice()
    rt = install(device)
    assert pick(100).tier is Tier.DEFAULT  # memoised before the session ...
    with oasr_core.autotune(arch=ARCH, timer=device.timer, publish=False) as session:
        first = pick(100)  # ... and still measured inside it
        assert (first.tier, first.choice_id) == (Tier.USER, best_by_cost(100))
        for m in (100, 99, 97):
            assert pick(m) == first
        pick(4000)
        pick(64, dims=(256, 128))
    assert device.benched == [((N, K), 100), ((N, K), 4000), ((256, 128), 64)]
    assert [r.m for r in session.results] == [100, 4000, 64]
    assert rt.counts[("fake", "fake", "user")] == 5
    for m in (100, 4000, 5000, 64):
        assert pick(m).tier is Tier.DEFAULT
    assert len(device.benched) == 3


def test_the_winner_is_the_fastest_arm_at_the_call_shape(user):
    device = ScriptedDevice()
    install(device)
    sizes = (8, 100, 1000, 4000, 30000)
    with oasr_core.autotune(arch=ARCH, timer=device.timer, publish=False) as session:
        got = {m: pick(m).choice_id for m in sizes}
    assert got == {m: best_by_cost(m) for m in sizes}
    assert len(set(got.values())) > 1
    for r in session.results:
        assert r.timing is Timing.GRAPH and r.ms == pytest.approx(
            default_cost_ms(r.choice, Problem("fake", "fake", "fp16",
                                              (("N", N), ("K", K)), r.m)), rel=1e-6)
        assert r.choice in r.evidence


def test_the_incumbent_keeps_its_place_within_the_tie_margin(user):
    # n64_k32_s1 and n64_k64_s1 cost the same at M=100: the user tier's choice stays
    device = ScriptedDevice()
    install(device)
    assert default_cost_ms("n64_k32_s1", Problem("fake", "fake", "fp16",
                                                 (("N", N), ("K", K)), 100)) == \
        default_cost_ms("n64_k64_s1", Problem("fake", "fake", "fp16", (("N", N), ("K", K)), 100))
    database.write_entries(fake_file(user), family=runtime.get_runtime().registry.family("fake"),
                           arch=ARCH, lane=LANE,
                           entries={KEY: database.Entry(regions=[(None, "n64_k64_s1")])},
                           configs={"n64_k64_s1": LANE.config("n64_k64_s1")}, soft={})
    runtime.reload()
    with oasr_core.autotune(arch=ARCH, timer=device.timer, publish=False):
        assert pick(100).choice_id == "n64_k64_s1"


def test_leaving_publishes_into_the_entry_on_disk_and_keeps_every_other(user):
    device = ScriptedDevice()
    install(device)
    family = runtime.get_runtime().registry.family("fake")
    other = "fake|op=fake|dt=half|N=1024|K=256"
    database.write_entries(fake_file(user), family=family, arch=ARCH, lane=LANE, entries={
        KEY: database.Entry(regions=[(512, "n128_k64_s2"), (None, "torch")],
                            evidence={"M=512": {"torch": [0.1, 0.0, 9]}}, source="aot"),
        other: database.Entry(regions=[(None, "torch")])},
        configs={"n128_k64_s2": LANE.config("n128_k64_s2")}, soft={})
    runtime.reload()
    with oasr_core.autotune(arch=ARCH, timer=device.timer) as session:
        winner = pick(100).choice_id
    assert session.published.published == 1 and session.published.skipped == ()
    tf = database.read_tuning_file(fake_file(user))
    entry = tf.entries[KEY]
    assert [tuple(r) for r in entry.regions] == [(100, winner), (512, "n128_k64_s2"),
                                                 (None, "torch")]
    assert entry.source is database.Source.AOT and "M=512" in entry.evidence
    assert entry.evidence["M=100"]["_timing"] == "graph"
    assert any(n.startswith(f"M=100: {winner} (autotune") for n in entry.notes)
    assert tf.entries[other].regions[0].choice == "torch"
    assert pick(100).tier is Tier.USER and pick(100).choice_id == winner
    assert pick(300).choice_id == "n128_k64_s2"


def test_with_the_user_tier_off_nothing_is_published_and_a_warning_says_so(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    device = ScriptedDevice()
    install(device)
    with pytest.warns(AutotuneWarning, match="user tier is disabled.*1 autotune result"), \
            oasr_core.autotune(arch=ARCH, timer=device.timer) as session:
        pick(100)
    assert session.published.written == ()
    assert pick(100).tier is Tier.DEFAULT
    assert not list(tmp_path.rglob("*.json"))


def test_an_op_that_cannot_be_captured_is_timed_eagerly(user):
    device = ScriptedDevice(uncapturable=True)
    install(device)
    with oasr_core.autotune(arch=ARCH, timer=device.timer,
                            eager_timer=device.eager_timer) as session:
        assert pick(100).tier is Tier.USER
    (result,) = session.results
    assert result.timing is Timing.EAGER
    assert device.eager_timer.replays and result.ms == pytest.approx(
        default_cost_ms(result.choice, device.problem) + 0.004)
    entry = database.read_tuning_file(fake_file(user)).entries[KEY]
    assert entry.evidence["M=100"]["_timing"] == "eager"


def test_eager_timer_warms_up_repeats_and_ranks_by_the_clock():
    now = [0.0]
    ran = []

    def arm(name, cost):
        def run(i):
            ran.append(name)
            now[0] += cost
            return name
        return run

    timer = EagerTimer(warmup=2, rep=3, clock=lambda: now[0])
    case = BenchCase(arms={"slow": arm("slow", 3e-5), "fast": arm("fast", 1e-5)},
                     gate=lambda out: True)
    result = measure(case, timer, BenchOptions(l2_bytes=None, stage_rounds=(2, 2, 4)))
    assert [a.name for a in result.ranked()] == ["fast", "slow"]
    assert result.arm("fast").median_ms == pytest.approx(0.01)
    assert result.arm("slow").median_ms == pytest.approx(0.03)
    with pytest.raises(ValueError, match="rep=0"):
        EagerTimer(rep=0)


def test_a_cache_file_carries_results_to_the_next_session(user, tmp_path):
    cache = tmp_path / "tune.json"
    device = ScriptedDevice()
    install(device)
    with oasr_core.autotune(cache, arch=ARCH, timer=device.timer, publish=False):
        pick(100)
    assert [r.m for r in read_cache(cache).results] == [100]
    device.benched.clear()
    with oasr_core.autotune(cache, arch=ARCH, timer=device.timer, publish=False) as session:
        assert pick(98).tier is Tier.USER
        pick(102)
    assert device.benched == [((N, K), 102)] and [r.m for r in session.results] == [102]
    assert sorted(r.m for r in read_cache(cache).results) == [100, 102]


def test_epochs_sessions_do_not_nest_and_other_archs_are_left_alone(user):
    device = ScriptedDevice()
    rt = install(device)
    seen = []
    rt.add_reload_listener(seen.append)
    with oasr_core.autotune(arch=ARCH, timer=device.timer, publish=False):
        with pytest.raises(ConfigurationError, match="already active"):
            with oasr_core.autotune(arch=ARCH, timer=device.timer):
                pass
        assert pick(100, arch="sm80").tier is Tier.DEFAULT
    assert seen == [1, 2] and device.benched == []


def test_a_shape_that_cannot_be_measured_is_warned_once_and_the_tiers_serve(user):
    device = ScriptedDevice(broken=True)
    install(device)
    with pytest.warns(AutotuneWarning, match="cannot measure.*no operands") as record, \
            oasr_core.autotune(arch=ARCH, timer=device.timer) as session:
        assert pick(100).tier is Tier.DEFAULT
        assert pick(200).tier is Tier.DEFAULT
    assert len([r for r in record if "cannot measure" in str(r.message)]) == 1
    assert session.results == () and not fake_file(user).exists()


def test_a_failing_block_still_saves_its_measurements(user):
    device = ScriptedDevice()
    install(device)
    with pytest.raises(RuntimeError, match="engine crashed"):
        with oasr_core.autotune(arch=ARCH, timer=device.timer):
            pick(100)
            raise RuntimeError("engine crashed")
    assert pick(100).tier is Tier.USER


def test_writer_processes_publishing_into_one_user_tier_lose_nothing(user):
    device = ScriptedDevice()
    install(device)
    writers, each = 5, 6
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(KIT.parent), os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen([sys.executable, str(KIT), "publish", str(user), str(w), str(each)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(writers)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    tf = database.read_tuning_file(fake_file(user))
    own = {f"fake|op=fake|dt=fp16|N={8 * (100 * w + i + 1)}|K={K}"
           for w in range(writers) for i in range(each)}
    assert own <= set(tf.entries) and len(tf.entries) == len(own) + 1
    shared = tf.entries[KEY]
    assert all(r.m_hi is not None for r in shared.regions)
    assert {f"M={8 * (w + 1)}" for w in range(writers)} <= set(shared.evidence)
    runtime.reload()
    for w in range(writers):
        assert pick(8 * (w + 1)).tier is Tier.USER
    assert pick(8 * writers + 1).tier is Tier.DEFAULT
