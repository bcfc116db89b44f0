"""The JIT loader trusts a cached library only when no other user can change it and its
bytes are the ones its build recorded; every refusal is one line and nothing is loaded.

One real host-only module is built once (nvcc, about a second); the cache is then
tampered with the ways another user sharing it could.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from oasr_core import jit
from oasr_core.errors import JitBuildError
from oasr_core.jit import cache, trust

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")

UNIT = jit.TranslationUnit("adv", "OASR_EXPORT int adv_value(void) { return 7; }\n",
                           ("adv_value",))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("jit-pristine") / "jit"
    spec = jit.JitSpec(name="t_adv", arch="90a", cutlass=False, units=(UNIT,))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OASR_JIT_DIR", str(root))
        jit.build(spec, jobs=1)
    return spec, root


@pytest.fixture
def built(pristine, tmp_path, monkeypatch):
    """A private copy of the built cache, as OASR_JIT_DIR."""
    spec, root = pristine
    copy = tmp_path / "jit"
    shutil.copytree(root, copy, symlinks=True)
    monkeypatch.setenv("OASR_JIT_DIR", str(copy))
    key = jit.spec.plan(spec).key
    return spec, copy, cache.library_path(copy, spec.name, key)


def test_a_private_cache_loads(built):
    spec, _, library = built
    module = jit.load(spec, build_missing=False)
    assert module.function("adv_value")() == 7
    manifest = json.loads((library.parent / "manifest.json").read_text())
    assert manifest[trust.HASH_FIELD] == trust.file_sha256(library)


@pytest.mark.parametrize("where", ["library_dir", "root", "obj", "library"])
def test_a_place_others_can_write_is_refused(built, where):
    spec, root, library = built
    place = {"library_dir": library.parent, "root": root, "obj": root / "obj",
             "library": library}[where]
    os.chmod(place, stat.S_IMODE(os.stat(place).st_mode) | stat.S_IWOTH)
    with pytest.raises(JitBuildError) as info:
        jit.load(spec, build_missing=False)
    text = str(info.value)
    assert "\n" not in text and "refusing to load" in text and str(place) in text
    assert "writable by others" in text


def test_a_sticky_shared_directory_is_fine(built):
    spec, root, _ = built
    os.chmod(root, 0o1777)
    assert jit.load(spec, build_missing=False).function("adv_value")() == 7


def test_a_library_owned_by_another_user_is_refused(built, monkeypatch):
    spec, _, library = built
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 4242)
    if real == 0:  # root-owned files are trusted: pretend the file is someone else's
        original = os.stat

        def stat_as_other(path, *args, **kwargs):
            st = original(path, *args, **kwargs)
            if os.fspath(path) == str(library):
                return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 999,
                                       *st[5:]))
            return st
        monkeypatch.setattr(os, "stat", stat_as_other)
    with pytest.raises(JitBuildError, match="is owned by uid"):
        jit.load(spec, build_missing=False)


def test_a_swapped_library_is_refused(built):
    spec, _, library = built
    with open(library, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(JitBuildError, match="sha256 .* is not the .* its build recorded"):
        jit.load(spec, build_missing=False)


@pytest.mark.parametrize("recorded", ["absent", None, 123, "not-a-hash"])
def test_a_manifest_without_the_hash_is_never_trusted_on_first_load(built, recorded):
    """The hash is recorded by the build, never at a first load: a truncated library whose
    manifest records none is not opened (dlopen of it is a SIGBUS): refused without a
    build, relinked with one."""
    spec, root, library = built
    manifest_path = library.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if recorded == "absent":
        del manifest[trust.HASH_FIELD]
    else:
        manifest[trust.HASH_FIELD] = recorded
    manifest_path.write_text(json.dumps(manifest))
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 2])
    with pytest.raises(JitBuildError, match="not built"):
        jit.load(spec, build_missing=False)
    assert manifest_path.read_text() == json.dumps(manifest)  # nothing recorded
    with pytest.warns(jit.NotPrebuiltWarning):
        module = jit.load(spec)
    assert module.function("adv_value")() == 7
    assert json.loads(manifest_path.read_text())[trust.HASH_FIELD] == trust.file_sha256(library)


def test_a_truncated_library_never_signals_in_a_fresh_process(built, tmp_path):
    """The trial's SIGBUS reproduction, in a subprocess: it exits with a one-line refusal."""
    spec, root, library = built
    manifest_path = library.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest[trust.HASH_FIELD]
    manifest_path.write_text(json.dumps(manifest))
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 2])
    code = ("from oasr_core import jit\n"
            f"u = jit.TranslationUnit('adv', {UNIT.source!r}, ('adv_value',))\n"
            "s = jit.JitSpec(name='t_adv', arch='90a', cutlass=False, units=(u,))\n"
            "try:\n    jit.load(s, build_missing=False)\n"
            "except Exception as e:\n    print('refused:', type(e).__name__, e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "OASR_JIT_DIR": str(root)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused:") and "not built" in proc.stdout


def test_a_damaged_library_is_rebuilt(built):
    spec, _, library = built
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 2])
    with pytest.warns(jit.NotPrebuiltWarning, match="damaged"):
        assert jit.load(spec).function("adv_value")() == 7
    assert jit.build(spec).status is jit.BuildStatus.CACHED


def test_a_damaged_object_is_compiled_again(built):
    """A truncated cached object (or one without its recorded hash) is compiled again, not
    linked into a failing build on every run."""
    spec, root, library = built
    objects = sorted((root / "obj").glob("*/*.o"))
    assert objects
    for obj in objects:
        with open(obj, "r+b") as handle:
            handle.truncate(100)
    shutil.rmtree(library.parent)
    result = jit.build(spec, jobs=1)
    assert result.status is jit.BuildStatus.BUILT, result.error
    assert all(u.compiled for u in result.units.values())
    assert jit.load(spec, build_missing=False).function("adv_value")() == 7


@pytest.mark.parametrize("truncate", [False, True])
def test_an_object_from_before_hashes_is_adopted_when_whole(built, truncate):
    """An object without a recorded hash (compiled by an older oasr) is kept when it is a
    complete ELF file (its hash recorded now) and compiled again when truncated."""
    spec, root, library = built
    objects = sorted((root / "obj").glob("*/*.o"))
    for obj in objects:
        obj.with_name(obj.name + ".sha256").unlink()
        if truncate:
            with open(obj, "r+b") as handle:
                handle.truncate(obj.stat().st_size // 2)
    shutil.rmtree(library.parent)
    result = jit.build(spec, jobs=1)
    assert result.status is jit.BuildStatus.BUILT, result.error
    assert all(u.compiled is truncate for u in result.units.values())
    assert all(obj.with_name(obj.name + ".sha256").is_file() for obj in objects)
    assert jit.load(spec, build_missing=False).function("adv_value")() == 7


@pytest.mark.parametrize("units", [[], {}, {"adv": []}, {"adv": {"status": "linked"}},
                                   {"adv": {"status": 3, "exports": []}}])
def test_a_malformed_manifest_is_an_incomplete_build(built, units):
    spec, root, library = built
    manifest_path = library.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["units"] = units
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(JitBuildError, match="not built"):
        jit.load(spec, build_missing=False)
    with pytest.warns(jit.NotPrebuiltWarning):
        assert jit.load(spec).function("adv_value")() == 7


@pytest.mark.parametrize("text", ["[]", '{"units": [1]}', "[" * 5000 + "]" * 5000, ""])
def test_doctor_reports_a_malformed_manifest_in_one_line(built, text):
    from click.testing import CliRunner

    from oasr_core.cli import main

    spec, root, library = built
    (library.parent / "manifest.json").write_text(text)
    result = CliRunner().invoke(main, ["doctor", "--arch", "sm90"])
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    assert "Traceback" not in result.output
    assert "1 damaged modules" in result.output


def test_a_cache_built_under_umask_002_loads(tmp_path, monkeypatch):
    """What oasr itself writes passes its own trust check whatever the umask."""
    spec = jit.JitSpec(name="t_adv", arch="90a", cutlass=False, units=(UNIT,))
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit-umask"))
    old = os.umask(0o002)
    try:
        assert jit.build(spec, jobs=1).status is jit.BuildStatus.BUILT
    finally:
        os.umask(old)
    assert jit.load(spec, build_missing=False).function("adv_value")() == 7
    for place in (tmp_path / "jit-umask").rglob("*"):
        assert not os.stat(place).st_mode & stat.S_IWOTH, place


def test_a_private_group_may_write_but_a_shared_group_may_not(built, monkeypatch):
    spec, root, library = built
    os.chmod(library.parent, 0o775)
    monkeypatch.setattr(trust, "private_group", lambda gid: True)
    assert jit.load(spec, build_missing=False).function("adv_value")() == 7
    monkeypatch.setattr(trust, "private_group", lambda gid: False)
    with pytest.raises(JitBuildError, match="writable by its group"):
        jit.load(spec, build_missing=False)


def test_each_library_is_hashed_once_per_process(built, monkeypatch):
    spec, _, _ = built
    jit.load(spec, build_missing=False)
    calls = []
    monkeypatch.setattr(trust, "file_sha256", lambda p: calls.append(p) or "x")
    jit.load(spec, build_missing=False)
    assert calls == []


def test_a_link_does_not_hide_a_writable_parent(built, tmp_path, monkeypatch):
    spec, root, _ = built
    shared = tmp_path / "shared"
    shared.mkdir()
    moved = shared / "jit"
    root.rename(moved)
    link = tmp_path / "jit-link"
    link.symlink_to(moved)
    monkeypatch.setenv("OASR_JIT_DIR", str(link))
    assert jit.load(spec, build_missing=False).function("adv_value")() == 7
    os.chmod(shared, 0o777)
    with pytest.raises(JitBuildError, match=f"{shared} is writable by"):
        jit.load(spec, build_missing=False)
