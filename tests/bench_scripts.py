"""The repository's benchmark scripts as modules, for the tests that check them off the GPU."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"


def script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` (or ``benchmarks/h200/<name>.py``) imported as ``name``; the
    two folders go on ``sys.path`` once, as the scripts import each other by name."""
    for path in (BENCH, BENCH / "h200"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    return importlib.import_module(name)
