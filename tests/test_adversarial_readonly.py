"""Read-only commands write nothing anywhere; what writers create is bounded and never
follows a link planted in a tier.

Each command runs through the CLI with its own home, cache, user tier, JIT directory and
working directory, all empty (in process: the commands resolve every one of them from the
environment when they run); every file under them is listed before and after.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from oasr_core import runtime

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "db/sm90/measurements/gemm.jsonl"
SMALL_LOG_LINES = 120
"""Rows of the shipped log the writers here replay (one signature's points: well under 1 s)."""
SELECT = ["tune", "select", "--family", "gemm", "--op", "gemm", "--dtype", "fp16",
          "--dim", "N=256", "--dim", "K=1024", "--m", "700", "--arch", "sm90"]
READ_ONLY = {
    "select": SELECT,
    "status": ["tune", "status", "--arch", "sm90"],
    "doctor": ["doctor", "--arch", "sm90"],
    "plugins": ["plugins"],
    "diff": ["tune", "diff", str(ROOT / "db/sm90/gemm.json"), str(ROOT / "db/sm90/gemm.json")],
    "evaluate": ["tune", "evaluate", "--log", str(LOG), "--db", f"x={ROOT}/db/sm90/gemm.json"],
}


@pytest.fixture
def home(tmp_path, monkeypatch):
    places = {name: tmp_path / name for name in ("home", "cache", "user", "cwd", "jit")}
    for place in places.values():
        place.mkdir()
    monkeypatch.setenv("HOME", str(places["home"]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(places["cache"]))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(places["user"]))
    monkeypatch.setenv("OASR_JIT_DIR", str(places["jit"]))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(ROOT / "db"))
    monkeypatch.chdir(places["cwd"])
    places["log"] = tmp_path / "small.jsonl"
    places["log"].write_bytes(b"".join(LOG.read_bytes().splitlines(keepends=True)
                                       [:SMALL_LOG_LINES]))
    return places


def _oasr(home, *args):
    from oasr_core.cli import CliState, main

    runtime.install_runtime(None)
    got = CliRunner().invoke(main, list(args), obj=CliState())
    assert got.exception is None or isinstance(got.exception, SystemExit), got.exception
    return SimpleNamespace(returncode=got.exit_code, stderr=got.stderr, stdout=got.stdout)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_a_read_only_command_writes_nothing(home, tmp_path, command):
    before = _files(tmp_path)
    proc = _oasr(home, *READ_ONLY[command])
    assert proc.returncode == 0, proc.stderr
    assert _files(tmp_path) == before


def test_a_user_tier_written_by_oasr_is_read_lazily_and_reading_writes_nothing(home,
                                                                               tmp_path):
    out = _oasr(home, "tune", "build", "--from-log", str(home["log"]), "--out", "user", "--arch",
                "sm90")
    assert out.returncode == 0, out.stderr
    marks = list((home["user"] / ".validated").rglob("*/*"))
    assert len(marks) == 1  # the writer marked what it wrote
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    for command in ("select", "status", "doctor"):
        assert _oasr(home, *READ_ONLY[command]).returncode == 0
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before
    again = _oasr(home, "tune", "build", "--from-log", str(home["log"]), "--out", "user", "--arch",
                  "sm90", "--fresh")
    assert again.returncode == 0, again.stderr
    assert len(list((home["user"] / ".validated").rglob("*/*"))) == 1  # the old mark swept


@pytest.mark.parametrize("link", [".validated", "sm90/.locks"])
def test_a_planted_link_is_never_followed(home, tmp_path, link):
    victim = tmp_path / "victim"
    victim.mkdir()
    planted = home["user"] / link
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(victim)
    for command in ("select", "status", "doctor"):
        assert _oasr(home, *READ_ONLY[command]).returncode == 0
    build = _oasr(home, "tune", "build", "--from-log", str(home["log"]), "--out", "user", "--arch",
                  "sm90")
    assert list(victim.iterdir()) == []
    if link == ".validated":
        assert build.returncode == 0, build.stderr  # written; only the mark is not
    else:
        assert build.returncode == 2 and "Traceback" not in build.stderr
        [line] = [x for x in build.stderr.splitlines() if x.startswith("error:")]
        assert str(planted) in line and "symbolic link" in line


def test_the_validated_index_is_bounded(tmp_path, monkeypatch):
    from oasr_core.database import validated

    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    monkeypatch.setattr(validated, "MAX_MARKS", 5)
    for i in range(12):
        validated.record(f"{i:064x}")
    assert len(list((tmp_path / ".validated").rglob("*/*"))) == 5
    assert validated.is_marked(f"{11:064x}") and not validated.is_marked(f"{0:064x}")


def test_system_tier_locks_are_swept(tmp_path, monkeypatch):
    import filelock

    from oasr_core.database import paths

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    system = tmp_path / "system"
    system.mkdir()
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(system))
    locks = [paths.lock_path(system / f"sm{90 + i}" / "gemm.json") for i in range(6)]
    old = time.time() - 2 * paths.SYSTEM_LOCK_IDLE_S
    for lock in locks:
        lock.touch()
        os.utime(lock, (old, old))
    held = filelock.FileLock(str(locks[0]))
    with held:
        os.utime(locks[0], (old, old))
        fresh = paths.lock_path(system / "sm100" / "gemm.json")
        left = sorted(p.name for p in fresh.parent.iterdir())
    assert left == [locks[0].name]  # held: kept; idle: swept; the new one not made yet
    assert locks[0].parent == tmp_path / "cache" / "oasr" / "locks"


def test_fresh_builds_keep_a_bounded_number_of_replaced_files(home):
    for _ in range(5):
        time.sleep(0.002)  # distinct names to the microsecond
        proc = _oasr(home, "tune", "build", "--from-log", str(home["log"]), "--out", "user",
                     "--arch", "sm90", "--fresh")
        assert proc.returncode == 0, proc.stderr
    kept = list((home["user"] / "sm90").glob("gemm.json.replaced-*"))
    assert len(kept) == 3
    json.loads((home["user"] / "sm90" / "gemm.json").read_text())


@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_a_read_only_command_starts_no_subprocess(home, monkeypatch, command):
    import subprocess

    from oasr_core import stamps

    stamps.reset_caches()  # no nvcc answer left over from an earlier test in this process
    started = []
    real = subprocess.Popen.__init__

    def spy(self, args, *rest, **kwargs):
        started.append(args)
        return real(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    proc = _oasr(home, *READ_ONLY[command])
    assert proc.returncode == 0, proc.stderr
    assert started == []


FAKE_NVCC = """#!/bin/sh
touch "$0.ran"
echo "Cuda compilation tools, release 13.0, V13.0.88"
echo "Build cuda_13.0.r13.0/compiler.1_0"
"""


def test_doctor_and_status_report_the_nvcc_a_build_recorded_without_running_it(home,
                                                                              monkeypatch):
    from oasr_core import stamps
    from oasr_core.jit import compiler, toolchains

    nvcc = home["home"] / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(0o755)
    ran = home["home"] / "nvcc.ran"
    monkeypatch.setenv("OASR_NVCC", str(nvcc))
    stamps.reset_caches()
    assert "version unknown until a build records it" in _oasr(home, "doctor").stdout
    assert stamps.nvcc_version(probe=False) is None

    toolchains.record(home["jit"], compiler.toolchain())  # what a link does
    ran.unlink()
    stamps.reset_caches()
    text = _oasr(home, "doctor").stdout
    assert f"nvcc      13.0.88 at {nvcc} (recorded by a build)" in text
    assert stamps.nvcc_version(probe=False) == "13.0.88"
    assert _oasr(home, "tune", "status", "--arch", "sm90").returncode == 0
    assert not ran.exists()

    nvcc.write_text(FAKE_NVCC.replace("V13.0.88", "V13.0.99"))  # another nvcc at that path
    assert "version unknown" in _oasr(home, "doctor").stdout
    assert not ran.exists()
    assert "nvcc      13.0.99 at" in _oasr(home, "doctor", "--probe-nvcc").stdout
    assert ran.exists()
