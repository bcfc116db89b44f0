"""The GPU tests name only what exists: every ``module.attribute`` they read from a module they
import is defined there.

The ``gpu`` tests never run on a CPU machine, so a name a refactor moved away from a module
(``oasr_conv1d.launch.LaunchError``, 2026-12-03) surfaced only as an ``AttributeError`` on the
H200. This reads each GPU test file's syntax tree (nothing of it runs), resolves the modules it
imports (``import a.b as m``, ``from a import b`` where ``b`` is a module) and checks each
attribute it reads from them.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_TESTS = sorted([*ROOT.glob("plugins/*/tests/*gpu*.py"), *ROOT.glob("tests/*gpu*.py")])


def _imported_modules(tree: ast.Module) -> dict[str, ModuleType]:
    """Names bound to modules by the file's top-level imports of oasr packages."""
    bound: dict[str, ModuleType] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.startswith("oasr"):
            for alias in node.names:
                try:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    value = getattr(importlib.import_module(node.module), alias.name, None)
                if isinstance(value, ModuleType):
                    bound[alias.asname or alias.name] = value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.startswith("oasr"):
                    bound[alias.asname] = importlib.import_module(alias.name)
    return bound


@pytest.mark.parametrize("path", GPU_TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_gpu_test_reads_only_defined_names(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    modules = _imported_modules(tree)
    missing = sorted({f"{node.value.id}.{node.attr} (line {node.lineno})"
                      for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                      and node.value.id in modules
                      and not hasattr(modules[node.value.id], node.attr)})
    assert not missing, f"{path.name} reads names its modules do not define: {missing}"


def test_the_check_sees_a_missing_name(tmp_path):
    """The check itself: a file reading a name ``oasr_core.kit`` lacks is caught."""
    bad = tmp_path / "test_x_gpu.py"
    bad.write_text("from oasr_core import kit\n\ndef test_x():\n    kit.NoSuchName\n")
    with pytest.raises(AssertionError, match="kit.NoSuchName"):
        test_gpu_test_reads_only_defined_names(bad)
