"""Concurrent writer processes and writers killed mid-write (real processes, real files)."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from oasr_core import database

DBKIT = Path(__file__).parent / "data" / "db" / "dbkit.py"
_spec = importlib.util.spec_from_file_location("oasr_dbkit_concurrency", DBKIT)
kit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kit)

REPO = Path(database.__file__).resolve().parents[2]
WRITERS, PER_WRITER = 16, 20


def _spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, str(DBKIT), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_concurrent_writer_processes_lose_nothing(tmp_path):
    path = tmp_path / "user" / "sm90" / "gemm.json"
    procs = [_spawn("write", str(path), str(w), str(PER_WRITER)) for w in range(WRITERS)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    tf = kit.load(path)
    assert len(tf.entries) == WRITERS * PER_WRITER
    written = {(e.evidence["writer"], e.evidence["i"]) for e in tf.entries.values()}
    assert written == {(str(w), i) for w in range(WRITERS) for i in range(PER_WRITER)}
    assert set(tf.configs) == {kit.A, kit.B}
    assert path.read_text() == tf.dumps()
    assert not list(path.parent.glob(".*.tmp")) and not list(path.parent.glob("*.corrupt-*"))
    assert not list(path.parent.glob("*.lock")), "locks live in .locks/, not beside the file"


def test_writers_killed_mid_write_leave_a_valid_file(tmp_path):
    path = tmp_path / "user" / "sm90" / "gemm.json"
    rng = random.Random(20261129)
    seen = 0
    for _ in range(8):
        proc = _spawn("churn", str(path))
        try:
            assert proc.stdout.readline(), proc.stderr.read()
            deadline = time.monotonic() + rng.uniform(0.05, 0.6)
            while time.monotonic() < deadline:
                assert len(kit.load(path).entries) >= 1
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            proc.stdout.close()
            proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL
        tf = kit.load(path)
        assert path.read_text() == tf.dumps()
        assert len(tf.entries) >= seen
        seen = len(tf.entries)
        assert not list(path.parent.glob("*.corrupt-*"))
    final = kit.write(path, {kit.gemm_key(99999): kit.example_entry()}, lock_timeout=10)
    assert len(final.entries) == seen + 1
    assert not list(path.parent.glob(".*.tmp"))


def test_a_storm_of_sixteen_writers_killed_at_random_leaves_a_valid_file(tmp_path):
    path = tmp_path / "user" / "sm90" / "gemm.json"
    rng = random.Random(20261201)
    procs = [_spawn("churn", str(path)) for _ in range(WRITERS)]
    try:
        for proc in procs:
            assert proc.stdout.readline(), proc.stderr.read()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            victim = rng.choice(procs)
            if victim.poll() is None and rng.random() < 0.3:
                victim.send_signal(signal.SIGKILL)
            assert len(kit.load(path).entries) >= 1
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            proc.stdout.close()
            proc.stderr.close()
    assert path.read_text() == kit.load(path).dumps()
    kit.write(path, {kit.gemm_key(99999): kit.example_entry()}, lock_timeout=10)
    assert not list(path.parent.glob(".*.tmp")), "the next writer sweeps killed temps"
    assert not list(path.parent.glob("*.corrupt-*"))
