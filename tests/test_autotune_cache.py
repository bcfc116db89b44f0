"""The autotune cache file: versions 1 to 3, the arch validator, env warnings, bad files, and
concurrent writer processes merging into one file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from autotune_kit import ARCH, K, N, ScriptedDevice, install

import oasr_core
from oasr_core import runtime
from oasr_core.autotuning import (
    AutotuneWarning,
    CacheArchError,
    CacheFileError,
    CacheTooNewError,
    Result,
    ResultIndex,
    Timing,
    load_cache,
    read_cache,
    write_cache,
)
from oasr_core.autotuning.cache import dumps
from oasr_core.types import Tier

KEY = "fake|op=fake|dt=fp16|N=512|K=256"
CONFIG = {"lane": "fake_lane", "split_k": 1, "stages": 4, "tile_k": 32, "tile_n": 64}
KIT = Path(__file__).with_name("autotune_kit.py")


def write_json(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def tune(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    device = ScriptedDevice()
    install(device)
    yield device
    runtime.install_runtime(None)


def pick(m):
    return oasr_core.select("fake", "fake", "fp16", (N, K), m, ARCH)


def test_version_3_round_trips_deterministically(tmp_path):
    path = tmp_path / "c.json"
    ours = [Result(key=KEY, bucket=104, m=100, choice="n64_k32_s1", lane="fake_lane",
                   config=CONFIG, ms=0.0025, timing=Timing.EAGER,
                   evidence={"n64_k32_s1": [0.0025, 0.0, 12]}, env={"torch": "2.13.0"}),
            Result(key=KEY, bucket=2048, m=1100, choice="torch", lane="fake_lane")]
    written = write_cache(path, arch=ARCH, results=ours)
    again = read_cache(path)
    assert again == written and set(again.results) == set(ours)
    assert path.read_text() == dumps(again)
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 3 and doc["arch"] == ARCH
    assert [r["M"] for r in doc["results"]] == [100, 1100]


def test_version_2_results_serve_their_whole_bucket_and_are_never_published(tmp_path, tune):
    path = write_json(tmp_path / "v2.json", {
        "schema_version": 2, "arch": ARCH, "env": {"torch": "0.1"},
        "configs": {"n64_k32_s1": CONFIG},
        "results": {f"{KEY}|bucket=104": "n64_k32_s1", f"{KEY}|bucket=2048": "torch"}})
    cache = read_cache(path)
    assert {(r.bucket, r.m, r.choice) for r in cache.results} == {
        (104, None, "n64_k32_s1"), (2048, None, "torch")}
    assert all(r.env == {"torch": "0.1"} for r in cache.results)
    index = ResultIndex(cache.results)
    assert index.lookup(KEY, 97).choice == index.lookup(KEY, 104).choice == "n64_k32_s1"
    assert index.lookup(KEY, 1025).choice == "torch" and index.lookup(KEY, 96) is None
    with pytest.warns(AutotuneWarning, match="torch 0.1 != "), \
            oasr_core.autotune(path, arch=ARCH, timer=tune.timer) as session:
        assert pick(104).choice_id == "n64_k32_s1" and pick(1500).choice_id == "torch"
    assert tune.benched == [] and session.results == ()


def test_version_1_exact_shapes_become_measured_results(tmp_path, tune):
    path = write_json(tmp_path / "v1.json", {
        "schema_version": 1, "arch": ARCH, "configs": {"n64_k32_s1": CONFIG},
        "results": {f"{KEY}|M=100": "n64_k32_s1", f"{KEY}|M=3000": "torch"}})
    cache = read_cache(path)
    assert {(r.bucket, r.m, r.choice) for r in cache.results} == {
        (104, 100, "n64_k32_s1"), (4096, 3000, "torch")}
    with oasr_core.autotune(path, arch=ARCH, timer=tune.timer, publish=False):
        assert pick(100).choice_id == "n64_k32_s1" and pick(2500).choice_id == "torch"
        assert tune.benched == []
        pick(101)  # above the exact shape: a miss, measured
    assert tune.benched == [((N, K), 101)]
    assert json.loads(path.read_text())["schema_version"] == 3  # rewritten as version 3
    assert {(r.m, r.choice) for r in read_cache(path).results} >= {
        (100, "n64_k32_s1"), (3000, "torch")}


def test_a_file_tuned_on_another_arch_is_refused_and_left_alone(tmp_path, tune):
    path = tmp_path / "c.json"
    write_cache(path, arch="sm80", results=[Result(key=KEY, bucket=104, m=100, choice="torch")])
    before = path.read_bytes()
    with pytest.raises(CacheArchError, match="tuned on sm80.*sm90"):
        load_cache(path, ARCH)
    with pytest.warns(AutotuneWarning, match="tuned on sm80"), \
            oasr_core.autotune(path, arch=ARCH, timer=tune.timer, publish=False):
        assert pick(100).tier is Tier.USER  # measured: the sm80 result is not served
    assert tune.benched == [((N, K), 100)]
    assert path.read_bytes() == before
    with pytest.raises(CacheArchError):
        write_cache(path, arch=ARCH, results=[])


def test_other_environment_differences_warn_and_still_serve(tmp_path, tune):
    path = tmp_path / "c.json"
    write_cache(path, arch=ARCH, results=[Result(
        key=KEY, bucket=104, m=100, choice="torch", lane="fake_lane",
        env={"torch": "1.0.0", "device": "NVIDIA H100", "oasr": oasr_core.__version__})])
    with pytest.warns(AutotuneWarning, match=r"another environment \(torch 1\.0\.0 != "), \
            oasr_core.autotune(path, arch=ARCH, timer=tune.timer, publish=False):
        assert pick(100).choice_id == "torch"
    assert tune.benched == []


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not valid JSON"),
    ("", "empty file"),
    ('{"schema_version": 3, "kind": "oasr-autotune-cache", "arch": "sm90", "results": '
     '[{"key": "fake|op=fake|dt=fp16|N=512|K=256", "bucket": 104, "M": 0, "choice": "torch"}]}',
     "M 0 is not a positive integer"),
    ('{"schema_version": 3, "kind": "oasr-autotune-cache", "arch": "sm90", "results": '
     '[{"key": "fake|op=fake|dt=fp16|N=512|K=256", "bucket": 104, "M": 100, "choice": "cfg"}]}',
     "has no 'config'"),
    ('{"schema_version": 3, "kind": "oasr-autotune-cache", "arch": "sm90", "results": '
     '[{"key": "fake|op=fake|dt=fp16|N=512|K=256", "bucket": 96, "M": 100, "choice": "torch"}]}',
     "above its bucket"),
    ('{"schema_version": 1, "arch": "sm90", "results": {"fake|op=fake|N=1": "torch"}}',
     "does not end in |M=<int>"),
    ('[1, 2]', "expected a JSON object"),
])
def test_a_malformed_file_names_itself_and_the_problem(tmp_path, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(CacheFileError) as info:
        read_cache(path)
    message = str(info.value)
    assert message.startswith(str(path)) and problem in message and "\n" not in message


def test_a_malformed_file_is_moved_aside_never_lost(tmp_path, tune):
    path = tmp_path / "c.json"
    path.write_text('{"schema_version": 3, "arch": "sm90", "results": [{"key": 7}]}')
    before = path.read_bytes()
    with pytest.warns(AutotuneWarning) as record, \
            oasr_core.autotune(path, arch=ARCH, timer=tune.timer, publish=False):
        pick(100)
    messages = [str(r.message) for r in record]
    assert any("autotune cache skipped" in m and str(path) in m for m in messages)
    assert any("moved it aside" in m for m in messages)
    asides = list(tmp_path.glob("c.json.corrupt-*"))
    assert len(asides) == 1 and asides[0].read_bytes() == before
    assert [r.m for r in read_cache(path).results] == [100]


def test_a_file_from_a_newer_oasr_is_refused_and_untouched(tmp_path, tune):
    path = write_json(tmp_path / "c.json", {"schema_version": 99, "results": []})
    before = path.read_bytes()
    with pytest.raises(CacheTooNewError, match="newer oasr"):
        read_cache(path)
    with pytest.warns(AutotuneWarning, match="newer oasr"), \
            oasr_core.autotune(path, arch=ARCH, timer=tune.timer, publish=False):
        pick(100)
    assert path.read_bytes() == before


def test_write_merges_with_what_another_writer_wrote(tmp_path):
    path = tmp_path / "c.json"
    a = Result(key=KEY, bucket=104, m=100, choice="torch", lane="fake_lane", ms=0.5)
    b = Result(key=KEY, bucket=128, m=128, choice="torch", lane="fake_lane")
    write_cache(path, arch=ARCH, results=[a, b])
    newer_a = Result(key=KEY, bucket=104, m=100, choice="n64_k32_s1", lane="fake_lane",
                     config=CONFIG)
    written = write_cache(path, arch=ARCH, results=[newer_a])
    assert set(written.results) == {newer_a, b}


def test_concurrent_writer_processes_lose_no_result(tmp_path):
    path = tmp_path / "shared" / "cache.json"
    writers, each = 6, 12
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(KIT.parent), os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen([sys.executable, str(KIT), "cache", str(path), str(w), str(each)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(writers)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    cache = read_cache(path)
    got = {(r.key, r.m, r.env["writer"]) for r in cache.results}
    assert got == {(f"fake|op=fake|dt=fp16|N={8 * (w + 1)}|K={K}", 8 * (i + 1), w)
                   for w in range(writers) for i in range(each)}
    assert path.read_text() == dumps(cache)
    assert not list(path.parent.glob(".*.tmp")) and not list(path.parent.glob("*.corrupt-*"))


@pytest.mark.parametrize("version, suffix", [(1, "M"), (2, "bucket")])
@pytest.mark.parametrize("digits", ["9" * 5000, "1" * 19, "\uff11\uff12"])
def test_a_legacy_size_beyond_int64_is_a_malformed_cache_moved_aside(tmp_path, tune, version,
                                                                      suffix, digits):
    """A 5000-digit (or non-ASCII-digit) size in a legacy key is one CacheFileError line from
    the reader, and autotune() and write_cache move the file aside and carry on."""
    path = write_json(tmp_path / "c.json", {
        "schema_version": version, "arch": "sm90", "configs": {},
        "results": {f"{KEY}|{suffix}={digits}": "torch"}})
    before = path.read_bytes()
    with pytest.raises(CacheFileError, match=f"does not end in \\|{suffix}=<int>") as info:
        read_cache(path)
    assert "\n" not in str(info.value) and len(str(info.value)) < 6000
    with pytest.warns(AutotuneWarning, match="moved it aside"), \
            oasr_core.autotune(path, arch=ARCH, timer=tune.timer, publish=False):
        pick(100)
    asides = list(tmp_path.glob("c.json.corrupt-*"))
    assert len(asides) == 1 and asides[0].read_bytes() == before
    write_cache(path, arch=ARCH, results=[])
    read_cache(path)
