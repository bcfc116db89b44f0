"""Writers keep what they replace and leave no litter: ``--fresh`` keeps the replaced file
aside, and locks live in ``.locks/`` (the system tier's in the user cache). The 16-process
concurrent-writer and SIGKILL tests are in ``test_database_concurrency.py``.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest

from oasr_core import database, files

DBKIT = Path(__file__).parent / "data" / "db" / "dbkit.py"
_spec = importlib.util.spec_from_file_location("oasr_dbkit_adversarial", DBKIT)
kit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kit)

@pytest.fixture
def path(tmp_path):
    return tmp_path / "user" / "sm90" / "gemm.json"


def test_fresh_keeps_the_replaced_file_aside(path):
    kit.write(path, {kit.gemm_key(512): kit.example_entry()})
    before = path.read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kit.write(path, {kit.gemm_key(768): kit.example_entry()}, fresh=True)
    [aside] = path.parent.glob("gemm.json.replaced-*")
    assert aside.read_bytes() == before
    assert any(aside.name in str(w.message) for w in caught)
    assert set(kit.load(path).entries) == {kit.gemm_key(768)}


def test_writes_leave_no_lock_beside_the_file(path, tmp_path, monkeypatch):
    kit.write(path, {kit.gemm_key(512): kit.example_entry()})
    assert sorted(p.name for p in path.parent.iterdir()) == [".locks", "gemm.json"]
    system = tmp_path / "system"
    cache = tmp_path / "cache"
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(system))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    (system / "sm90").mkdir(parents=True)
    shipped = system / "sm90" / "gemm.json"
    kit.write(shipped, {kit.gemm_key(512): kit.example_entry()})
    assert sorted(p.name for p in shipped.parent.iterdir()) == ["gemm.json"]
    assert database.paths.lock_path(shipped).parent.is_relative_to(cache)


def test_lock_beside_gathers_locks(tmp_path):
    lock = files.lock_beside(tmp_path / "a" / "x.jsonl")
    assert lock == tmp_path / "a" / ".locks" / "x.jsonl.lock" and lock.parent.is_dir()
