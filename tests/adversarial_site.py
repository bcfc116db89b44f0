"""Real distributions in a temporary site, and oasr run in a subprocess against it.

:func:`make_distribution` writes ``<name>-<version>.dist-info`` (METADATA, entry_points.txt)
and the distribution's modules into a site directory; a subprocess with that directory on
``PYTHONPATH`` finds it through ``importlib.metadata`` exactly as it finds an installed
package. :func:`oasr` runs the ``oasr`` CLI there with the repository's shipped system tier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_distribution(site: Path, name: str, *, version: str = "1.0",
                      entry_points: Mapping[str, str], modules: Mapping[str, str]) -> Path:
    """Write distribution ``name`` (its ``oasr`` entry points and modules) into ``site``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        "[oasr]\n" + "".join(f"{ep} = {target}\n" for ep, target in entry_points.items()))
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))
    return site


def oasr(site: Path | None, *args: str, system_db: Path | None = None, timeout: float = 120,
         **env: str) -> subprocess.CompletedProcess:
    """``oasr <args>`` in a subprocess with ``site`` first on ``PYTHONPATH``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")}
    path = [str(site)] if site is not None else []
    clean.update(PYTHONPATH=os.pathsep.join([*path, str(REPO)]), OASR_TUNE_USER_DB="off",
                 OASR_TUNE_SYSTEM_DB=str(system_db or REPO / "db"), **env)
    return subprocess.run([sys.executable, "-m", "oasr_core.cli", *args], env=clean,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def json_out(proc: subprocess.CompletedProcess) -> dict:
    """The JSON document a ``--json`` command printed (asserting it exited 0)."""
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
