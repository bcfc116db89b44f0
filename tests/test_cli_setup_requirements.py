"""The one setup command keeps a user's CUDA torch of a tested version and gives a fresh venv
the local CPU build (checked here statically; `pip install --dry-run -r requirements-dev.txt`
in a fresh venv and in one holding torch 2.11.0+cu130 shows it in full)."""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REQS = Path(__file__).resolve().parents[1] / "requirements-dev.txt"


def _torch() -> Requirement:
    lines = [line.strip() for line in REQS.read_text().splitlines()]
    found = [Requirement(line) for line in lines
             if line and not line.startswith(("#", "-")) and line.startswith("torch")]
    assert len(found) == 1, found
    return found[0]


def test_an_installed_cuda_torch_of_a_tested_version_is_kept():
    spec = _torch().specifier
    for installed in ("2.11.0+cu130", "2.12.1+cu128", "2.13.0+cu130", "2.13.0+cpu"):
        assert Version(installed) in spec, installed
    assert Version("2.10.0+cu126") not in spec


def test_a_fresh_venv_resolves_to_the_local_cpu_build():
    spec = _torch().specifier
    candidates = ["2.11.0", "2.12.1", "2.13.0", "2.13.0+cpu", "2.14.1", "2.15.0"]
    best = max(Version(v) for v in candidates if Version(v) in spec)
    assert str(best) == "2.13.0+cpu"

