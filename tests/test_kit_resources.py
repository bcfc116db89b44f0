"""The kit's workspace pool, production set and lane helpers, on a CPU with real files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from oasr_core import database, runtime
from oasr_core.errors import ConfigurationError
from oasr_core.kit import BufferKind, LaneSpaces, ProductionSet, WorkspacePool, by_lane, fits_arch
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import FAKE_DEFAULT, FAKE_FAMILY, FAKE_LANE, FakeFamilyPlugin
from oasr_core.types import Config


def _cpu_pool(capturing=False, warned=None):
    def allocate(kind, nbytes, device):
        if kind.zeroed:
            return torch.zeros((nbytes + 3) // 4, dtype=torch.int32)
        return torch.empty(nbytes, dtype=torch.uint8)

    return WorkspacePool((BufferKind("scratch", 1024), BufferKind("sems", 64, zeroed=True)),
                         warn=(warned if warned is not None else []).append, allocate=allocate,
                         capturing=lambda: capturing)


def test_workspaces_are_kept_per_device_and_stream():
    pool = _cpu_pool()
    a = pool.get(0, 7, (10, 8))
    assert pool.sizes(0, 7) == (1024, 64), "a small first request gets the minimum"
    assert pool.get(0, 7, (100, 8)) == a, "a request that fits reuses the buffers"
    b = pool.get(0, 8, (10, 8))
    c = pool.get(1, 7, (10, 8))
    assert len({a[0], b[0], c[0]}) == 3, "each (device, stream) has its own scratch"
    assert pool.sizes(5, 5) == (0, 0)


def test_workspaces_grow_at_least_double_and_keep_the_outgrown_ones():
    pool = _cpu_pool()
    first = pool.get(0, 1, (1024, 64))
    grown = pool.get(0, 1, (1500, 64))
    assert pool.sizes(0, 1) == (2048, 64) and grown[2:] == first[2:]
    assert pool._retired and pool._retired[0].data_ptr() == first[0], "kept for old graphs"
    pool.get(0, 1, (10_000, 1000))
    assert pool.sizes(0, 1) == (10_000, 1000)


def test_growing_during_capture_is_warned():
    warned: list[str] = []
    pool = _cpu_pool(capturing=True, warned=warned)
    pool.get(0, 1, (8, 8))
    assert len(warned) == 1 and "during CUDA graph capture" in warned[0]
    pool.get(0, 1, (8, 8))
    assert len(warned) == 1, "no growth, no warning"


def test_a_pool_needs_buffers():
    with pytest.raises(ValueError, match="at least one buffer kind"):
        WorkspacePool((), warn=print)


@pytest.fixture
def fake_rt(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin())
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)
    return rt


def _production(rt, env="OASR_FAKE_COMPILE_SET"):
    lane = rt.registry.lane(FAKE_LANE)
    return ProductionSet(family=FAKE_FAMILY, compile_set_env=env,
                         space=lambda name: lane.config_space,
                         fits_arch=lambda c, arch: arch in lane.arch_families
                         and (arch == "sm90" or c.params["tile_n"] < 256),
                         always=lambda name, arch: (FAKE_DEFAULT, "n64_k32_s1"))


def _write_tier(root, rt, ids):
    fam, lane = rt.registry.family(FAKE_FAMILY), rt.registry.lane(FAKE_LANE)
    entries = {database.signature_key(fam, "fake", "half", (512, 256 * (i + 1))):
               database.Entry(regions=((None, cid),)) for i, cid in enumerate(ids)}
    path = database.tier_path(root, "sm90", fam)
    database.write_entries(path, family=fam, arch="sm90", lane=lane.name, entries=entries,
                           configs={c: lane.config(c) for c in ids}, soft={})
    return path


def test_the_production_set_follows_the_tier_files(fake_rt, tmp_path, monkeypatch):
    production = _production(fake_rt)
    assert production.ids(FAKE_LANE, "sm90") == (FAKE_DEFAULT, "n64_k32_s1")
    path = _write_tier(tmp_path, fake_rt, ["n256_k64_s8", "n128_k64_s2"])
    assert json.loads(path.read_text())["entries"], "a real tier file"
    runtime.reload()
    assert production.referenced(FAKE_LANE, "sm90") == {"n256_k64_s8", "n128_k64_s2"}
    assert production.wanted(FAKE_LANE, "sm90") == (FAKE_DEFAULT, "n64_k32_s1", "n128_k64_s2",
                                                    "n256_k64_s8")
    assert [c.id for c in production.configs(FAKE_LANE, "sm90")] == list(
        production.wanted(FAKE_LANE, "sm90"))
    # an id that does not fit the arch, or is not in the space, is dropped
    assert production.ids(FAKE_LANE, "sm80", ["n256_k64_s8", "nope"]) == (FAKE_DEFAULT,
                                                                          "n64_k32_s1")
    monkeypatch.setenv("OASR_FAKE_COMPILE_SET", "all")
    assert production.wanted(FAKE_LANE, "sm90") == ()
    assert len(production.configs(FAKE_LANE, "sm90")) == len(
        fake_rt.registry.lane(FAKE_LANE).config_space)
    monkeypatch.setenv("OASR_FAKE_COMPILE_SET", "some")
    with pytest.raises(ConfigurationError, match="OASR_FAKE_COMPILE_SET='some'"):
        production.compile_set()


def test_lane_spaces_cache_and_look_up():
    calls = []

    def listed():
        calls.append(1)
        return [Config(id=f"c{i}", lane="a", params={"i": i}) for i in range(4)]

    spaces = LaneSpaces("fam", {"a": listed}, lambda: (lambda c: c.params["i"] % 2 == 0))
    assert [c.id for c in spaces.space("a")] == ["c0", "c2"]
    assert len(spaces.full("a")) == 4 and spaces.space("a") is spaces.space("a")
    assert calls == [1] and spaces.config("a", "c2").params["i"] == 2
    with pytest.raises(KeyError, match="lane 'a' has no config 'c1'"):
        spaces.config("a", "c1")
    with pytest.raises(KeyError, match="lane 'b' is not a fam lane"):
        spaces.full("b")


def test_per_lane_predicates():
    small = Config(id="s", lane="old", params={"smem": 100})
    big = Config(id="b", lane="old", params={"smem": 200})
    new = Config(id="n", lane="new", params={"smem": 999})
    kwargs = dict(arches={"old": ("sm80", "sm90"), "new": ("sm90",)},
                  smem={"old": lambda c: c.params["smem"]}, limits={"sm80": 150, "sm90": 300})
    assert fits_arch(small, "sm80", **kwargs) and not fits_arch(big, "sm80", **kwargs)
    assert fits_arch(big, "sm90", **kwargs) and fits_arch(new, "sm90", **kwargs)
    assert not fits_arch(new, "sm80", **kwargs)
    assert by_lane({"old": lambda c: True}, small) and not by_lane({"old": lambda c: True}, new)


def test_hookimpl_comes_from_a_leaf_module():
    probe = ("import sys; from oasr_core import hookimpl; "
             "heavy = [m for m in ('oasr_core.runtime', 'oasr_core.selection', "
             "'oasr_core.report', 'oasr_core.registry', 'torch') if m in sys.modules]; "
             "print(repr(heavy), hookimpl.project_name)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["[]", "oasr"], f"importing hookimpl loaded {out[0]}"


def test_a_device_is_asked_once_per_runtime(fake_rt, monkeypatch):
    from oasr_core.runtime import DeviceFacts
    from oasr_core.testing import pretend_cuda_device

    asked = []
    monkeypatch.setattr(DeviceFacts, "query", classmethod(lambda cls, i: asked.append(i)))
    assert fake_rt.device(3) is None and fake_rt.device(3) is None and asked == [3]
    pretend_cuda_device(0, "sm90", 132)
    assert runtime.device_arch_of(0) == "sm90" and fake_rt.device(0).sm_count == 132
    fresh = runtime.Runtime(pm=make_plugin_manager(load_entrypoints=False))
    runtime.install_runtime(fresh)
    assert runtime.get_runtime().devices == {}, "a new runtime asks anew"


def test_lane_modules_name_every_unit_text_the_flags_and_the_headers(tmp_path):
    from oasr_core.jit import TranslationUnit
    from oasr_core.kit.production import LaneModules

    configs = {"a": [Config(id="c0", lane="a", params={}), Config(id="c1", lane="a", params={})],
               "b": [Config(id="c2", lane="b", params={})]}
    production = ProductionSet(family="fam", compile_set_env="OASR_FAM_COMPILE_SET",
                               space=configs.__getitem__, fits_arch=lambda c, arch: True,
                               always=lambda lane, arch: ())
    (tmp_path / "fam").mkdir()
    header = tmp_path / "fam" / "k.cuh"
    header.write_bytes(b"// k")

    def modules(flags):
        return LaneModules(production=production, prefix={"a": "fam_a", "b": "fam_b"},
                           units=lambda c, dtypes: [TranslationUnit(
                               name=c.id, source=f"{c.id} {'/'.join(dtypes)}", exports=())],
                           include_dir=str(tmp_path), flags=flags, dtypes=("fp16", "bf16"),
                           default_arch=lambda lane: "sm80")

    items = modules(lambda lane: ("-DX",)).impl_inputs([header])
    assert items == (("flags", b"-DX"), ("unit:a:c0", b"c0 fp16/bf16"),
                     ("unit:a:c1", b"c1 fp16/bf16"), ("unit:b:c2", b"c2 fp16/bf16"),
                     ("header:fam/k.cuh", b"// k"))
    with pytest.raises(ValueError, match="different flags"):
        modules(lambda lane: (lane,)).impl_inputs([header])
