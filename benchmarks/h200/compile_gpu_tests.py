"""A pytest plugin that compiles, on a machine without a GPU, the JIT modules the GPU tests load.

The GPU tests name their modules in fixtures (a spread sample of gemm's configs, conv1d's
depthwise and dense test modules, the W8A8 whole spaces, ...), from the device's arch. Run
under this plugin, pytest sees an sm90 device: each module a test loads is compiled into
``OASR_JIT_DIR`` for ``OASR_CUDA_ARCH_LIST`` (set it to ``9.0a``) and the test is skipped
instead of run, so the GPU machine finds every library and only runs tests::

    OASR_CUDA_ARCH_LIST=9.0a OASR_JIT_DIR=.jit-carry python -m pytest -m gpu \\
        -p benchmarks.h200.compile_gpu_tests plugins/oasr_conv1d/tests

``benchmarks/h200/prepare.sh gpu-tests`` runs it on every family's GPU tests; ``pack`` then
carries the libraries. A test that touches the device before loading a module fails here
(no device); only the modules matter, and the summary line lists each one compiled. It
compiles and times nothing, so no separator protocol applies; each test it skips is skipped
on purpose (its module compiled, nothing to run without a device).
"""

from __future__ import annotations

import os

import pytest
import torch

from oasr_core import jit as core_jit

CAPABILITY = (9, 0)
_compiled: dict[str, str] = {}
_original_prebuild = core_jit.prebuild


def _pretend_sm90() -> None:
    """torch.cuda answers as one H200 would, for the questions the tests ask at collection."""
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_capability = lambda *args, **kwargs: CAPABILITY
    torch.cuda.get_device_name = lambda *args, **kwargs: "NVIDIA H200 (compile only)"


def _jobs(jobs: int | None) -> int:
    return int(os.environ.get("OASR_COMPILE_JOBS", jobs or os.cpu_count() or 1))


def _prebuild(specs, *args, jobs=None, **kwargs):
    specs = list(specs)
    for spec in specs:
        _compiled[spec.name] = spec.arch
    return _original_prebuild(specs, *args, jobs=_jobs(jobs), **kwargs)


def _load(spec, *, build_missing: bool = True, jobs: int | None = None):
    """Compile ``spec`` (a cache hit when a fixture prebuilt it), then skip: nothing can run."""
    builds = _prebuild([spec], jobs=jobs)
    failed = [b for b in builds if getattr(b, "failed", None)]
    pytest.skip(f"compiled {spec.name} for {spec.arch}"
                + (f" ({len(failed)} with failed units)" if failed else ""))


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("OASR_CUDA_ARCH_LIST"):
        raise pytest.UsageError("compile_gpu_tests: set OASR_CUDA_ARCH_LIST (e.g. 9.0a)")
    _pretend_sm90()
    core_jit.prebuild = _prebuild
    core_jit.load = _load


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.write_line(f"compile_gpu_tests: {len(_compiled)} module(s) compiled or "
                                f"found in {core_jit.cache_dir()}")
    for name, arch in sorted(_compiled.items()):
        terminalreporter.write_line(f"  {name} ({arch})")
