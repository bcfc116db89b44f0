"""Integration: a user's own model on the command line, as the README's "Your own model"
section runs it, with the real plugins, in a real ``oasr`` process started from the folder
that holds the user's package (which is on no path).

- ``--model pkg.module:factory`` imports from the current directory;
- ``--quantization`` means the same for a ``--model`` in the census as in ``oasr tune bench``:
  the factory gets only its ``--param`` keywords, and oasr routes the ``nn.Linear`` layers
  through the scheme's quantized linear, so the census records that family's calls;
- the census table shows every key whole when piped (no terminal width to fit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

MODEL = textwrap.dedent("""
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self, d, ffn):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)
            self.conv = nn.Conv1d(d, d, 15, padding=7, groups=d)

        def forward(self, x):
            x = x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
            return x + self.conv(x.transpose(1, 2)).transpose(1, 2)


    class Encoder(nn.Module):
        def __init__(self, d, ffn, layers):
            super().__init__()
            self.inp = nn.Linear(80, d)
            self.blocks = nn.ModuleList(Block(d, ffn) for _ in range(layers))

        def forward(self, feats):
            x = self.inp(feats)
            for block in self.blocks:
                x = block(x)
            return x


    def build(d=256, ffn=1024, layers=2):
        return Encoder(d, ffn, layers)
""")


def _oasr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")
           and k not in ("PYTHONPATH", "COLUMNS")}
    env.update(OASR_TUNE_USER_DB="off")
    return subprocess.run([sys.executable, "-m", "oasr_core.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _package(root: Path) -> Path:
    pkg = root / "myasr_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "encoder.py").write_text(MODEL)
    return root


def test_census_of_a_user_model_from_its_folder_quantized_as_bench_quantizes(tmp_path):
    cwd = _package(tmp_path)
    out = tmp_path / "int8.json"
    res = _oasr("tune", "census", "--model", "myasr_pkg.encoder:build", "--param", "layers=1",
                "--service-mode", "offline", "--max-batch-size", "2",
                "--quantization", "int8_w8a8", "--out", str(out), cwd=cwd)
    assert res.returncode == 0, res.stderr
    points = json.loads(out.read_text())["points"]
    families = {p["family"] for p in points}
    assert families == {"scaled_mm", "conv1d"}, families
    conv = next(p for p in points if p["family"] == "conv1d")
    key = (f"conv1d|op=conv1d|dt=fp16|Cin=256|Cout=256|k=15|stride=1|pad=7|dil=1|"
           f"groups={conv['dims']['groups']}")
    assert key in res.stdout, res.stdout  # piped: the longest key printed whole
    assert "…" not in res.stdout


def test_a_model_outside_the_folder_names_where_it_was_looked_for(tmp_path):
    res = _oasr("tune", "census", "--model", "myasr_pkg.encoder:build", "--service-mode",
                "offline", "--max-batch-size", "1", "--out", str(tmp_path / "c.json"),
                cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "current directory and on PYTHONPATH" in res.stderr
