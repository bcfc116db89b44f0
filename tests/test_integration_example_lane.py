"""A third-party lane package: installed, it is discovered, listed and selectable; removed, gone.

``tests/example_lane`` is a separate distribution (``oasr-example-lane``) adding the lane
``example_simt`` to the ``gemm`` family through one entry point. It is installed with pip into
a temporary directory, and the checks run in real subprocesses whose ``PYTHONPATH`` does or
does not contain that directory, so discovery goes through ``importlib.metadata`` exactly as in
a user's environment. Where the real ``gemm`` family is not available, a stand-in family
registered in-process lets the lane be exercised; the checks against the real oasr-gemm plugin
skip until it is installed or present in ``plugins/oasr_gemm``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from oasr_core import hookimpl
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import check_family_contract
from oasr_core.types import Family

pytest_plugins = [] if any(
    ep.value == "oasr_core.testing" for ep in entry_points(group="pytest11")) else [
    "oasr_core.testing"]

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "tests" / "example_lane"
GEMM_SOURCE = REPO / "plugins" / "oasr_gemm"
LANE = "example_simt"
DEFAULT = "simt_64x64x8_w4"
SELECT = ("tune", "select", "--family", "gemm", "--op", "gemm", "--dtype", "fp16",
          "--dim", "N=512", "--dim", "K=256", "--m", "416", "--arch", "sm90",
          "--lane", LANE, "--json")

STAND_IN_GEMM = """
from oasr_core import hookimpl
from oasr_core.types import Family

class StandInGemm:
    @hookimpl
    def oasr_register_families(self):
        return [Family(name="gemm", ops=("gemm",), dims=("N", "K"), dtypes=("fp16", "bf16"),
                       dtype_classes={"half": ("fp16", "bf16")})]
"""

LIST_LANES = STAND_IN_GEMM + """
import json
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Registry

pm = make_plugin_manager()
pm.register(StandInGemm(), name="gemm_stand_in")
registry = Registry.from_plugin_manager(pm)
print(json.dumps({
    "lanes": {name: {"provider": list(map(str, (p.plugin, p.distribution, p.version))),
                     "arch_families": list(lane.arch_families),
                     "default_on": list(lane.default_on),
                     "configs": [c.id for c in lane.config_space],
                     "default": lane.default_config}
              for name, lane in registry.lanes.items()
              for p in [registry.provider("lane", name)]},
    "plugins": sorted(name for name, _ in pm.list_name_plugin()),
    "failures": [f.error for f in registry.failures],
}))
"""


class StandInGemm:
    """A ``gemm`` family for checks that must not depend on the oasr-gemm plugin."""

    @hookimpl
    def oasr_register_families(self):
        return [Family(name="gemm", ops=("gemm",), dims=("N", "K"), dtypes=("fp16", "bf16"),
                       dtype_classes={"half": ("fp16", "bf16")})]


def pip_install(source: Path, target: Path) -> Path:
    """Install ``source`` into ``target`` without touching the environment or the network."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--quiet", "--target", str(target),
         str(source)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"pip install {source} failed:\n{proc.stderr}"
    return target


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pip_install(EXAMPLE, tmp_path_factory.mktemp("example-site"))


@pytest.fixture(scope="module")
def real_gemm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    """Extra PYTHONPATH entries that provide the real oasr-gemm plugin (skips without one)."""
    if any(ep.name == "gemm" for ep in entry_points(group="oasr")):
        return ()
    if not (GEMM_SOURCE / "pyproject.toml").exists():
        pytest.skip("oasr-gemm is neither installed nor present in plugins/oasr_gemm")
    return (pip_install(GEMM_SOURCE, tmp_path_factory.mktemp("gemm-site")),)


@pytest.fixture(scope="module")
def empty_system_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("empty-system-db")


def run(args: list[str], *paths: Path, system_db: Path, **env: str) -> subprocess.CompletedProcess:
    """Run ``python <args>`` with only ``paths`` (and this checkout) importable."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OASR_", "PYTHON"))}
    clean.update(PYTHONPATH=os.pathsep.join(map(str, (*paths, REPO))), OASR_TUNE_USER_DB="off",
                 OASR_TUNE_SYSTEM_DB=str(system_db), **env)
    return subprocess.run([sys.executable, *args], env=clean, capture_output=True, text=True,
                          timeout=300, check=False)


def run_json(args: list[str], *paths: Path, system_db: Path, **env: str):
    proc = run(args, *paths, system_db=system_db, **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def example_on_path(example_site: Path, monkeypatch: pytest.MonkeyPatch,
                    empty_system_db: Path) -> Iterator[Path]:
    """The installed example on this process's ``sys.path``, hermetic tiers and plugin set."""
    monkeypatch.syspath_prepend(str(example_site))
    monkeypatch.setenv("OASR_PLUGINS", "example_lane")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(empty_system_db))
    yield example_site
    for name in [m for m in sys.modules if m.split(".")[0] == "oasr_example_lane"]:
        del sys.modules[name]


def test_installed_lane_is_listed_by_the_registry(example_site, empty_system_db) -> None:
    data = run_json(["-c", LIST_LANES], example_site, system_db=empty_system_db,
                    OASR_PLUGINS="example_lane")
    assert data["failures"] == []
    assert "example_lane" in data["plugins"]
    assert data["lanes"][LANE] == {
        "provider": ["example_lane", "oasr-example-lane", "0.1.0"],
        "arch_families": ["sm80", "sm86", "sm89", "sm90"],
        "default_on": [],
        "configs": ["simt_32x64x8_w2", DEFAULT, "simt_128x64x8_w8", "simt_128x128x8_w8"],
        "default": DEFAULT,
    }


def test_removed_lane_is_gone(empty_system_db) -> None:
    data = run_json(["-c", LIST_LANES], system_db=empty_system_db, OASR_PLUGINS="example_lane")
    assert LANE not in data["lanes"] and "example_lane" not in data["plugins"]
    assert data["failures"] == []


def test_oasr_plugins_lists_the_distribution(example_site, empty_system_db) -> None:
    data = run_json(["-m", "oasr_core.cli", "plugins", "--json"], example_site,
                    system_db=empty_system_db, OASR_PLUGINS="example_lane")
    [row] = [row for row in data["plugins"] if row["name"] == "example_lane"]
    assert (row["distribution"], row["version"], row["status"], row["hooks"]) == (
        "oasr-example-lane", "0.1.0", "loaded", ["oasr_register_lanes"])
    gone = run_json(["-m", "oasr_core.cli", "plugins", "--json"], system_db=empty_system_db)
    assert "example_lane" not in [row["name"] for row in gone["plugins"]]


def test_lane_passes_the_contract_suite(example_on_path) -> None:
    import oasr_example_lane.hooks

    contract = check_family_contract(oasr_example_lane.hooks, requires=(StandInGemm(),))
    assert [lane.name for lane in contract.lanes] == [LANE]
    assert contract.plugin == "oasr_example_lane.hooks"


def test_selectable_by_name(example_on_path, cli_runner) -> None:
    pm = make_plugin_manager(strict=True)
    pm.register(StandInGemm(), name="gemm_stand_in")
    result = cli_runner(*SELECT, plugin_manager=pm)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["lane"], data["config"], data["tier"]) == (LANE, DEFAULT, "default")


def test_not_selectable_once_removed(cli_runner, empty_system_db, monkeypatch) -> None:
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(empty_system_db))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(StandInGemm(), name="gemm_stand_in")
    result = cli_runner(*SELECT, plugin_manager=pm)
    assert result.exit_code == 2
    assert f"no plugin registers lane {LANE!r}" in result.stderr


def test_with_the_real_gemm_plugin(example_site, real_gemm, empty_system_db) -> None:
    listed = run_json(["-m", "oasr_core.cli", "plugins", "--json"], example_site, *real_gemm,
                      system_db=empty_system_db)
    [row] = [row for row in listed["plugins"] if row["name"] == "example_lane"]
    assert row["lanes"] == [LANE] and row["failures"] == []
    selected = run_json(["-m", "oasr_core.cli", *SELECT], example_site, *real_gemm,
                        system_db=empty_system_db)
    # The lane is the active one; the real gemm family serves an uncovered shape with torch.
    assert (selected["lane"], selected["choice"], selected["tier"]) == (LANE, "torch", "default")
    removed = run(["-m", "oasr_core.cli", *SELECT], *real_gemm, system_db=empty_system_db)
    assert removed.returncode == 2 and LANE in removed.stderr
