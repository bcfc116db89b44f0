"""Integration: a user's own model on the command line, in a real ``oasr`` process.

The README's "Your own model" block (run for real by ``tests/test_readme_commands.py``)
checks the import from the current directory, ``--quantization`` routing the model's linears
and the keys printed whole; this checks the error when the package is not there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _oasr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")
           and k not in ("PYTHONPATH", "COLUMNS")}
    env.update(OASR_TUNE_USER_DB="off")
    return subprocess.run([sys.executable, "-m", "oasr_core.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_model_outside_the_folder_names_where_it_was_looked_for(tmp_path):
    res = _oasr("tune", "census", "--model", "myasr_pkg.encoder:build", "--service-mode",
                "offline", "--max-batch-size", "1", "--out", str(tmp_path / "c.json"),
                cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "current directory and on PYTHONPATH" in res.stderr
