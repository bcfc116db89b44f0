"""Writers (lock, re-read, merge, re-stamp, atomic replace), soft validators and tier paths."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from pathlib import Path

import attrs
import filelock
import pytest

from oasr_core import database, stamps
from oasr_core.database import paths as db_paths
from oasr_core.errors import ConfigurationError, DatabaseError
from oasr_core.types import Config

_spec = importlib.util.spec_from_file_location(
    "oasr_dbkit_writer", Path(__file__).parent / "data" / "db" / "dbkit.py")
kit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kit)

A, B, C = kit.GEMM_IDS
K1, K2, K3 = kit.gemm_key(512), kit.gemm_key(768), kit.gemm_key(1024)
S1 = {"impl_hash": "1111", "sku": {"name": "H200", "sms": 132, "l2": 62914560},
      "nvcc": "13.0.88"}
S2 = {**S1, "impl_hash": "2222"}


@pytest.fixture
def path(tmp_path) -> Path:
    return tmp_path / "user" / "sm90" / "gemm.json"


def _aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.corrupt-*"))


# --- writing and merging ------------------------------------------------------------------

def test_a_write_creates_a_canonical_loadable_file(path):
    written = kit.write(path, {K1: kit.example_entry()}, provenance={"tool": "test"})
    assert kit.load(path) == written
    assert path.read_text() == written.dumps()
    assert written.soft == kit.IMPL and written.provenance == {"tool": "test"}
    assert written.family_schema_version == 1 and written.lane == "sm90_wgmma"
    assert set(written.configs) == {A, B}
    assert not list(path.parent.glob(".*.tmp"))


def test_writers_keep_each_others_entries(path):
    kit.write(path, {K1: kit.example_entry()})
    kit.write(path, {K2: database.Entry(regions=((None, C),), source="jit")})
    tf = kit.load(path)
    assert sorted(tf.entries) == sorted([K1, K2])
    assert set(tf.configs) == {A, B, C}
    kit.write(path, {K1: None, K3: None})
    tf = kit.load(path)
    assert list(tf.entries) == [K2] and set(tf.configs) == {C}


def test_an_update_function_sees_the_entry_on_disk(path):
    kit.write(path, {K1: kit.example_entry(regions=((512, A),))})
    seen = []

    def grow(entry):
        seen.append(entry)
        return (entry or database.Entry(regions=((64, B),))).with_region(4096, C)

    kit.write(path, {K1: grow, K2: grow})
    tf = kit.load(path)
    assert seen[0].regions[0].choice == A and seen[1] is None
    assert [tuple(r) for r in tf.entries[K1].regions] == [(512, A), (4096, C)]
    assert [tuple(r) for r in tf.entries[K2].regions] == [(64, B), (4096, C)]
    kit.write(path, {K2: lambda entry: None})
    assert list(kit.load(path).entries) == [K1]


def test_coverage_basis_model_and_provenance_are_kept_unless_given(path):
    kit.write(path, {K1: database.Entry(regions=((None, A),))}, coverage_basis=[C],
              model={"gemm": {"a": 1}}, provenance={"run": 1})
    tf = kit.write(path, {K1: database.Entry(regions=((None, B),))})
    assert tf.coverage_basis == (C,) and tf.model == {"gemm": {"a": 1}}
    assert tf.provenance == {"run": 1} and set(tf.configs) == {B, C}
    tf = database.write_entries(path, family=kit.gemm_family(), arch="sm90",
                                lane="sm90_wgmma", entries={}, configs={}, soft=kit.IMPL,
                                coverage_basis=(), model=None, provenance={"run": 2})
    assert tf.coverage_basis == () and tf.model is None and tf.provenance == {"run": 2}
    assert set(tf.configs) == {B}


def test_fresh_replaces_the_whole_file(path):
    kit.write(path, {K1: kit.example_entry(), K2: kit.example_entry()})
    tf = kit.write(path, {K3: database.Entry(regions=((None, C),))}, fresh=True)
    assert list(kit.load(path).entries) == [K3] == list(tf.entries)
    assert set(tf.configs) == {C}


def test_a_conflicting_config_is_refused_and_nothing_is_written(path):
    kit.write(path, {K1: kit.example_entry()})
    before = path.read_bytes()
    changed = Config(A, "sm90_wgmma", {"tile": [999, 1, 1]})
    with pytest.raises(DatabaseError, match=f"config '{A}' is in the file with other"):
        database.write_entries(path, family=kit.gemm_family(), arch="sm90",
                               lane="sm90_wgmma", entries={K2: kit.example_entry()},
                               configs={A: changed}, soft=kit.IMPL)
    assert path.read_bytes() == before


def test_a_config_only_replaced_entries_named_may_be_redefined(path):
    kit.write(path, {K1: kit.example_entry()})
    moved = Config(A, "sm90_wgmma", {"tile": [999, 1, 1]})
    tf = database.write_entries(path, family=kit.gemm_family(), arch="sm90", lane="sm90_wgmma",
                                entries={K1: database.Entry(regions=((None, A),))},
                                configs={A: moved}, soft=kit.IMPL)
    assert tf.configs[A].params["tile"] == (999, 1, 1)
    with pytest.raises(DatabaseError, match="already|other parameters"):
        database.write_entries(path, family=kit.gemm_family(), arch="sm90",
                               lane="sm90_wgmma", entries={K1: lambda e: e.with_region(8, A)},
                               configs=kit.configs(), soft=kit.IMPL)


@pytest.mark.parametrize("entries, configs, needle", [
    ({K1: database.Entry(regions=((None, "ghost"),))}, {}, "'ghost'"),
    ({"gemm|op=bmm|dt=half|N=1|K=1": kit.example_entry()}, None, "not an op"),
    ({K1: "torch"}, None, "expected an Entry"),
    ({K1: lambda entry: 42}, None, "produced a int"),
    ({K1: database.Entry(regions=((None, "heuristic"),))}, None, "does not allow"),
    ({K1: database.Entry(points={"1x3000": A})}, None, "exact points"),
    ({}, {"x": kit.configs()[A]}, "not a Config with that id"),
])
def test_bad_changes_raise_before_anything_is_written(path, entries, configs, needle):
    kit.write(path, {K3: kit.example_entry()})
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=needle):
        database.write_entries(path, family=kit.gemm_family(), arch="sm90", lane="sm90_wgmma",
                               entries=entries, soft=kit.IMPL,
                               configs=kit.configs() if configs is None else configs)
    assert path.read_bytes() == before


def test_a_lane_of_another_family_is_refused(path):
    with pytest.raises(DatabaseError, match="lane conv_lane is a lane of conv1d"):
        database.write_entries(path, family=kit.gemm_family(), arch="sm90",
                               lane=kit.lanes()["conv_lane"], entries={}, configs={},
                               soft={})


# --- corrupt, foreign and newer files -----------------------------------------------------

@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe\x00garbage",
                                     b'{"schema_version": 1}', b"[1, 2, 3]"])
def test_a_corrupt_file_is_moved_aside_never_dropped(path, content):
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.warns(database.TuningDatabaseWarning, match="moved it aside"):
        tf = kit.write(path, {K1: kit.example_entry()})
    (aside,) = _aside(path)
    assert aside.read_bytes() == content
    assert list(kit.load(path).entries) == [K1] == list(tf.entries)


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d["arch"].update(family="sm80"), "arch family sm80"),
    (lambda d: d["arch"].update(lane="sm80_mma"), "lane sm80_mma"),
    (lambda d: d.update(family="conv1d"), "'conv1d' file"),
])
def test_a_file_of_another_arch_lane_or_family_is_moved_aside(path, mutate, needle):
    doc = kit.write(path, {K1: kit.example_entry()}).to_json()
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.warns(database.TuningDatabaseWarning, match=needle):
        kit.write(path, {K2: kit.example_entry()})
    assert len(_aside(path)) == 1 and list(kit.load(path).entries) == [K2]


def test_a_file_from_a_newer_oasr_is_left_alone(path):
    doc = kit.write(path, {K1: kit.example_entry()}).to_json()
    doc["schema_version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(database.SchemaTooNewError, match="upgrade"):
        kit.write(path, {K2: kit.example_entry()})
    assert json.loads(path.read_text())["schema_version"] == 99 and not _aside(path)


def test_leftover_temp_files_of_a_killed_writer_are_swept(path):
    kit.write(path, {K1: kit.example_entry()})
    litter = path.parent / f".{path.name}.abc123.tmp"
    litter.write_text('{"half": ')
    kit.write(path, {K2: kit.example_entry()})
    assert not litter.exists() and len(kit.load(path).entries) == 2


def test_the_file_mode_is_kept_across_replacements(path):
    kit.write(path, {K1: kit.example_entry()})
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    path.chmod(0o664)
    kit.write(path, {K2: kit.example_entry()})
    assert stat.S_IMODE(path.stat().st_mode) == 0o664


def test_a_held_lock_times_out_with_a_clear_error(path):
    kit.write(path, {K1: kit.example_entry()})
    with filelock.FileLock(str(database.paths.lock_path(path))):
        with pytest.raises(DatabaseError, match="held its lock"):
            kit.write(path, {K2: kit.example_entry()}, lock_timeout=0.2)
    assert list(kit.load(path).entries) == [K1]


# --- soft validators and re-stamping ------------------------------------------------------

def test_stale_reasons():
    assert database.stale_reasons(S1, S1) == []
    assert database.stale_reasons(S1, S2) == ["impl_hash 1111 != 2222"]
    assert database.stale_reasons({**S1, "impl_hash": "*"}, S2) == []
    assert database.stale_reasons({**S1, "impl_hash": None}, S2) == []
    assert database.stale_reasons(S1, {**S2, "impl_hash": None}) == []
    assert database.stale_reasons({"nvcc": "12.8.93"}, {"nvcc": "13.0.88", "cutlass": "x"}) \
        == ["nvcc 12.8.93 != 13.0.88"]
    renamed = {**S1, "sku": {**S1["sku"], "name": "H200 NVL"}}
    assert database.stale_reasons(S1, renamed) == []
    smaller = {**S1, "sku": {"name": "H20", "sms": 78, "l2": 62914560}}
    assert database.stale_reasons(S1, smaller) == [
        "sku H200 (sms=132, l2=62914560) != H20 (sms=78, l2=62914560)"]
    assert database.stale_reasons(S1, {**S1, "sku": None}) == []
    assert database.stale_reasons({"cutlass": {"v": 1}}, {"cutlass": {"v": 2}}) == [
        'cutlass {"v":1} != {"v":2}']


def test_soft_mismatch_loads_and_reports_stale_entries(path):
    kit.write(path, {K1: kit.example_entry()}, soft=S1)
    tf = kit.load(path)
    assert database.stale_reasons(tf.soft, S2) == ["impl_hash 1111 != 2222"]
    assert database.stale_entries(tf, S2) == {K1: ["impl_hash 1111 != 2222"]}
    assert database.stale_entries(tf, S1) == {}


def test_restamping_keeps_each_entry_measured_stamp(path):
    kit.write(path, {K1: kit.example_entry()}, soft=S1)
    tf = kit.write(path, {K2: kit.example_entry()}, soft=S2)
    assert tf.soft == S2 and tf.entries[K1].soft == S1 and tf.entries[K2].soft is None
    assert tf.entry_soft(K1) == S1 and tf.entry_soft(K2) == S2
    assert list(database.stale_entries(tf, S2)) == [K1]
    assert list(database.stale_entries(tf, S1)) == [K2]
    tf = kit.write(path, {K3: kit.example_entry()}, soft=S1)
    assert tf.entries[K1].soft is None and tf.entries[K2].soft == S2
    assert list(database.stale_entries(kit.load(path), S1)) == [K2]


def test_an_extended_entry_keeps_its_older_stamp_and_stays_stale(path):
    kit.write(path, {K1: kit.example_entry(regions=((512, A),))}, soft=S1)
    tf = kit.write(path, {K1: lambda e: e.with_region(4096, C)}, soft=S2)
    assert [tuple(r) for r in tf.entries[K1].regions] == [(512, A), (4096, C)]
    assert database.stale_entries(tf, S2) == {K1: ["impl_hash 1111 != 2222"]}
    rebuilt = kit.write(path, {K1: database.Entry(regions=((None, C),), source="aot")},
                        soft=S2)
    assert database.stale_entries(rebuilt, S2) == {}


def _fake_nvcc(tmp_path: Path, text: str) -> Path:
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\nprintf '%s\\n' '{text}'\n")
    nvcc.chmod(0o755)
    return home


def test_current_soft_validators_add_sku_and_nvcc_to_the_family_stamps(tmp_path, monkeypatch):
    from oasr_core.jit import compiler

    home = _fake_nvcc(tmp_path, "Cuda compilation tools, release 13.0, V13.0.88")
    monkeypatch.delenv("OASR_NVCC", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(home))
    stamps.reset_caches()
    try:
        stamped = stamps.current_soft_validators(kit.gemm_family())
        assert stamped["impl_hash"] == "1234" and stamped["cutlass"] == "c0ffee"
        assert stamped["nvcc"] == "13.0.88"
        assert stamped["sku"] is None
        assert stamps.current_soft_validators(kit.conv_family()).keys() == {"sku", "nvcc"}
        monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        monkeypatch.setattr(compiler, "FALLBACK_NVCC", tmp_path / "nowhere" / "nvcc")
        stamps.reset_caches()
        assert stamps.current_soft_validators(kit.conv_family())["nvcc"] is None
    finally:
        stamps.reset_caches()


def _nvcc_on_path(folder: Path, build: str) -> Path:
    folder.mkdir(parents=True)
    nvcc = folder / "nvcc"
    nvcc.write_text("#!/bin/sh\nprintf '%s\\n' "
                    f"'Cuda compilation tools, release 12.8, V{build}' 'Build cuda_x'\n")
    nvcc.chmod(0o755)
    return nvcc


def test_the_nvcc_stamp_names_the_compiler_the_jit_builds_with(tmp_path, monkeypatch):
    """One discovery for both: a fake nvcc on PATH is stamped, and ``OASR_NVCC`` wins over
    PATH and ``CUDA_HOME`` for the stamp exactly as it does for the JIT's builds."""
    from oasr_core.jit import compiler

    on_path = _nvcc_on_path(tmp_path / "bin", "12.8.61")
    chosen = _nvcc_on_path(tmp_path / "chosen", "12.8.93")
    home = _fake_nvcc(tmp_path, "Cuda compilation tools, release 13.0, V13.0.88")
    monkeypatch.delenv("OASR_NVCC", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(on_path.parent))
    stamps.reset_caches()
    try:
        assert compiler.toolchain().nvcc == on_path
        assert stamps.nvcc_version() == "12.8.61"
        monkeypatch.setenv("CUDA_HOME", str(home))
        monkeypatch.setenv("OASR_NVCC", str(chosen))
        assert compiler.toolchain().nvcc == chosen
        assert stamps.current_soft_validators(kit.conv_family())["nvcc"] == "12.8.93"
        monkeypatch.delenv("OASR_NVCC")
        assert stamps.nvcc_version() == "13.0.88"
    finally:
        stamps.reset_caches()


def test_a_family_returning_non_json_stamps_is_a_plugin_error():
    from oasr_core.errors import PluginError

    with pytest.raises(PluginError, match="family gemm: soft_validators"):
        stamps.current_soft_validators(kit.gemm_family(soft_validators=lambda: {"x": {1}}))


# --- tiers --------------------------------------------------------------------------------

def test_tier_path():
    assert database.tier_path("/r", "sm90", kit.gemm_family()) == Path("/r/sm90/gemm.json")
    stemmed = kit.gemm_family(db_stem="gemm_v2")
    assert database.tier_path("/r", "sm100", stemmed) == Path("/r/sm100/gemm_v2.json")
    with pytest.raises(ConfigurationError, match="not like 'sm90'"):
        database.tier_path("/r", "../etc", kit.gemm_family())


@pytest.mark.parametrize("value", ["off", "OFF", "0", "none", "False", "no", "", " Off "])
def test_the_user_tier_can_be_disabled(monkeypatch, value):
    monkeypatch.setenv("OASR_TUNE_USER_DB", value)
    assert database.user_root() is None


def test_the_user_tier_moves_and_defaults_to_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "not-yet"))
    assert database.user_root() == tmp_path / "not-yet"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OASR_TUNE_USER_DB", "rel")
    assert database.user_root() == tmp_path / "rel"
    monkeypatch.delenv("OASR_TUNE_USER_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert database.user_root() == tmp_path / "xdg" / "oasr" / "tune" / "v2"


def test_the_system_tier_override_and_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    assert database.system_root() == tmp_path
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", "off")
    assert database.system_root() is None
    monkeypatch.delenv("OASR_TUNE_SYSTEM_DB")
    assert database.system_root() == database.default_system_root()

    package = tmp_path / "site" / "oasr_core"
    package.mkdir(parents=True)
    (tmp_path / "site" / "db").mkdir()
    assert database.default_system_root(package) is None
    (tmp_path / "site" / "pyproject.toml").write_text("")
    assert database.default_system_root(package) == tmp_path / "site" / "db"
    (package / "db").mkdir()
    assert database.default_system_root(package) == package / "db"
    repo = Path(db_paths.__file__).resolve().parents[2]
    if (repo / "db").is_dir() and not (repo / "oasr_core" / "db").is_dir():
        assert database.default_system_root() == repo / "db"


@pytest.mark.parametrize("var, make, needle", [
    ("OASR_TUNE_SYSTEM_DB", lambda p: p / "missing", "does not exist"),
    ("OASR_TUNE_SYSTEM_DB", lambda p: p / "file.txt", "is not a directory"),
    ("OASR_TUNE_USER_DB", lambda p: p / "file.txt", "is not a directory"),
    ("OASR_TUNE_USER_DB", lambda p: "a\x00b", "not a usable path"),
])
def test_env_misuse_names_the_variable_and_value(monkeypatch, tmp_path, var, make, needle):
    (tmp_path / "file.txt").write_text("x")
    value = str(make(tmp_path))
    if "\x00" in value:
        monkeypatch.setattr(os, "environ", {**os.environ, var: value})
    else:
        monkeypatch.setenv(var, value)
    root = database.system_root if var.endswith("SYSTEM_DB") else database.user_root
    with pytest.raises(ConfigurationError, match=needle) as err:
        root()
    assert var in str(err.value) and repr(value) in str(err.value)


def test_records_are_frozen():
    entry = kit.example_entry()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        entry.source = database.Source.JIT
    with pytest.raises(TypeError):
        entry.points["x"] = "y"
