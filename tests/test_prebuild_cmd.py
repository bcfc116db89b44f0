"""``oasr tune prebuild``: compiles a lane's modules with no GPU; a second run is all cache hits."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import oasr_core
from oasr_core import cli
from oasr_core.plugins import make_plugin_manager
from oasr_core.types import Config, Family, Lane

KERNEL = """
static __global__ void tp_scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
OASR_EXPORT int tp_launch_%(name)s(float* x, float a, int n) {
    tp_scale<<<(n + 255) / 256, 256>>>(x, a, n);
    return (int)cudaGetLastError();
}
"""


def _specs(arch_family: str, scope: str):
    from oasr_core import jit

    names = ("one", "two") if scope == "all" else ("one",)
    units = tuple(jit.TranslationUnit(name=n, source=KERNEL % {"name": n},
                                      exports=(f"tp_launch_{n}",)) for n in names)
    return [jit.JitSpec(name=f"tp_{scope}", arch=arch_family[2:] + "a", units=units,
                        cutlass=False)]


class TinyLanePlugin:
    @oasr_core.hookimpl
    def oasr_register_families(self):
        return [Family(name="tp", ops=("op",), dims=("N",), dtypes=("fp32",))]

    @oasr_core.hookimpl
    def oasr_register_lanes(self):
        return [Lane(name="tp_lane", family="tp", arch_families=("sm90",), default_on=("sm90",),
                     config_space=[Config(id="one", lane="tp_lane")], default_config="one",
                     jit_specs=_specs)]


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit"))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(TinyLanePlugin())
    state = cli.CliState(plugin_manager=pm)

    def invoke(*args):
        return CliRunner().invoke(cli.main, ["tune", "prebuild", *args], obj=state)

    return invoke


def test_prebuild_builds_then_hits_the_cache(run):
    first = run("--family", "tp", "--arch", "9.0a", "--all", "--json")
    assert first.exit_code == 0, first.output
    mod = json.loads(first.stdout)["modules"][0]
    assert json.loads(first.stdout)["arch"] == "90a"
    assert {u["status"] for u in mod["units"].values()} == {"built"}
    assert set(mod["units"]) == {"one", "two"}
    second = run("--family", "tp", "--arch", "90a", "--all", "--json")
    mod2 = json.loads(second.stdout)["modules"][0]
    assert {u["status"] for u in mod2["units"].values()} == {"cached"}
    assert mod2["path"] == mod["path"]
    text = run("--family", "tp", "--arch", "90a")
    assert text.exit_code == 0 and "tp_production" in text.stdout


def test_a_prebuild_that_links_nothing_still_records_its_nvcc(run, tmp_path):
    from oasr_core import jit
    from oasr_core.jit import toolchains

    assert run("--family", "tp", "--arch", "9.0a", "--all").exit_code == 0
    toolchains.record_path(tmp_path / "jit").unlink()  # a cache made before the record
    again = run("--family", "tp", "--arch", "9.0a", "--all", "--json")
    assert {u["status"] for u in json.loads(again.stdout)["modules"][0]["units"].values()} \
        == {"cached"}
    assert toolchains.known().toolchain == jit.toolchain()


def test_prebuild_reads_the_arch_from_the_environment(run, monkeypatch):
    monkeypatch.setenv("OASR_CUDA_ARCH_LIST", "9.0")
    res = run("--family", "tp", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["arch"] == "90a"


@pytest.mark.parametrize("args, needle", [
    (("--family", "nope", "--arch", "90a"), "nope"),
    (("--family", "tp", "--arch", "banana"), "banana"),
    (("--family", "tp", "--arch", "80"), "no lane"),
])
def test_prebuild_bad_input(run, args, needle):
    res = run(*args)
    assert res.exit_code == 2
    assert needle in res.output and "Traceback" not in res.output
