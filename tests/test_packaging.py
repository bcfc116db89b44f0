"""Packaging: the shipped system tier is found from a wheel install and from a checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

PROBE = (
    "import json, oasr_core, oasr_core.database as d; "
    "r = d.system_root(); "
    "print(json.dumps({'pkg': oasr_core.__file__, 'root': str(r) if r else None}))"
)


def _probe(env_extra: dict[str, str], cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    """oasr-core built as a wheel and installed (no deps) into a fresh target directory."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp),
                    str(REPO)], check=True, timeout=600)
    wheel = next(tmp.glob("oasr_core-*.whl"))
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(wheel)], check=True, timeout=600)
    return wheel, site


def test_wheel_carries_db_and_console_script(wheel_site):
    wheel, _ = wheel_site
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        eps = zf.read(entry_points).decode()
    assert "oasr_core/db/README.md" in names
    assert "oasr = oasr_core.cli:run" in eps
    shipped = sorted(str(p.relative_to(REPO)) for p in REPO.glob("db/*/*.json"))
    assert shipped, "the checkout ships at least one tuning table"
    for table in shipped:
        assert f"oasr_core/{table}" in names
    # the tables' measurement logs and lock files are replay evidence, not package data
    assert not [n for n in names if "/measurements/" in n or n.endswith(".lock")]


def test_non_editable_install_finds_its_packaged_db(wheel_site, tmp_path):
    _, site = wheel_site
    got = _probe({"PYTHONPATH": str(site)}, cwd=tmp_path)
    assert Path(got["pkg"]).is_relative_to(site)
    assert Path(got["root"]) == site / "oasr_core" / "db"


def test_checkout_finds_repo_db(tmp_path):
    got = _probe({"PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert Path(got["pkg"]).is_relative_to(REPO)
    assert Path(got["root"]) == REPO / "db"


def test_env_override_wins(wheel_site, tmp_path):
    _, site = wheel_site
    mine = tmp_path / "mydb"
    mine.mkdir()
    got = _probe({"PYTHONPATH": str(site), "OASR_TUNE_SYSTEM_DB": str(mine)}, cwd=tmp_path)
    assert Path(got["root"]) == mine
