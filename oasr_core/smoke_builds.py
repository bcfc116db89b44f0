"""The default suite's real nvcc compiles, started early: a pytest plugin the oasr test kit
(:mod:`oasr_core.testing`, pytest11 entry point ``oasr``) loads, so a family's own test suite,
run alone from its plugin directory, has it as the whole repository's suite does.

A test module proving that its lanes compile on this machine (nvcc and the CUTLASS headers,
no GPU) defines ``SMOKE_UNITS``, a function returning the :class:`oasr_core.jit.JitSpec` of
each lane's smallest real unit, and takes the ``smoke_builds`` fixture
(:func:`oasr_core.kernel_testing.compiled_module` builds such a module's fixtures). As soon as
collection ends, one background process prebuilds the specs of every collected such module
together (``jobs=2``: the lanes share the cores) into a session JIT directory, so nvcc runs
while the rest of the suite does; ``smoke_builds`` waits for it. A run that selects none of
those tests (a single file, ``-m "not nvcc"``) starts no compile.

So that no test sits waiting on nvcc while other tests could run, the tests that take
``smoke_builds`` run last, and the compile runs at a lower CPU priority (``nice``) than the
tests: on a 2-core machine it takes what the single-process suite leaves idle. The terminal
summary says how long the compile took and how long the suite waited for it.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs
import pytest

from oasr_core.jit.builder import ModuleBuild, UnitStatus

SMOKE_JOBS = 2
SMOKE_NICE = 10
_CHILD = """
import json, os, pickle, sys
if hasattr(os, "nice"):
    os.nice(int(sys.argv[4]))  # nvcc inherits it: the tests come first
from oasr_core import jit
with open(sys.argv[1], "rb") as f:
    specs = pickle.load(f)
reports = jit.prebuild(specs, jobs=int(sys.argv[3]))
with open(sys.argv[2], "w") as f:
    json.dump([r.to_json() for r in reports], f)
"""
_KEY = pytest.StashKey["SmokeBuild"]()


@attrs.define
class SmokeBuild:
    """The background prebuild of the collected ``SMOKE_UNITS``: its process and files."""

    jit_dir: Path
    specs: list
    process: subprocess.Popen
    reports_path: Path
    log_path: Path
    started: float
    reports: dict | None = None
    finished: float | None = None
    waited: float = 0.0

    def wait(self) -> dict:
        """Each spec's name -> its first build report (``BUILT`` when nvcc ran); fails the
        requesting test with the builder's output if the process failed."""
        if self.reports is None:
            before = time.monotonic()
            rc = self.process.wait()
            self.waited = time.monotonic() - before
            self.finished = time.monotonic()
            if rc != 0 or not self.reports_path.is_file():
                tail = self.log_path.read_text(errors="replace")[-4000:]
                pytest.fail(f"the smoke prebuild exited {rc}:\n{tail}")
            built = json.loads(self.reports_path.read_text())
            self.reports = {s.name: _module_build(r)
                            for s, r in zip(self.specs, built, strict=True)}
        return self.reports


def _module_build(report: dict):
    """A :class:`oasr_core.jit.ModuleBuild` back from its ``to_json()``."""
    units = {n: UnitStatus(status=u["status"], key=u["key"], seconds=u["seconds"],
                           error=u["error"], compiled=u["status"] == "built")
             for n, u in report["units"].items()}
    path = Path(report["path"]) if report["path"] else None
    return ModuleBuild(name=report["name"], key=report["key"], arch=report["arch"], path=path,
                       status=report["status"], units=units, seconds=report["seconds"],
                       error=report["error"], peak_child_rss_mib=report["peak_child_rss_mib"])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that wait for the background compile run last (in their collected order)."""
    waiting = [i for i in items if "smoke_builds" in getattr(i, "fixturenames", ())]
    if waiting:
        rest = [i for i in items if "smoke_builds" not in getattr(i, "fixturenames", ())]
        items[:] = rest + waiting


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the background prebuild of the selected modules' ``SMOKE_UNITS``, if any."""
    modules = {id(m): m for m in (getattr(i, "module", None) for i in session.items)
               if m is not None and hasattr(m, "SMOKE_UNITS")}
    if not modules or session.config.option.collectonly:
        return
    specs = [s for m in modules.values() for s in m.SMOKE_UNITS()]
    specs.sort(key=lambda s: s.arch, reverse=True)  # the slower Hopper units start first
    work = Path(tempfile.mkdtemp(prefix="oasr-smoke-"))
    (work / "specs.pkl").write_bytes(pickle.dumps(specs))
    log = work / "prebuild.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(work / "specs.pkl"), str(work / "reports.json"),
             str(SMOKE_JOBS), str(SMOKE_NICE)],
            env={**os.environ, "OASR_JIT_DIR": str(work / "jit"),
                 "XDG_CACHE_HOME": str(work / "cache")}, stdout=out, stderr=subprocess.STDOUT)
    session.config.stash[_KEY] = SmokeBuild(jit_dir=work / "jit", specs=specs, process=process,
                                            reports_path=work / "reports.json", log_path=log,
                                            started=time.monotonic())


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """How long the background compile ran, and how long the suite waited for it."""
    smoke = config.stash.get(_KEY, None)
    if smoke is not None and smoke.finished is not None:
        terminalreporter.write_line(
            f"background nvcc prebuild: {len(smoke.specs)} modules in "
            f"{smoke.finished - smoke.started:.0f} s; the tests waited {smoke.waited:.0f} s "
            "for it")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop a prebuild nobody waited for and remove its directory."""
    smoke = session.config.stash.get(_KEY, None)
    if smoke is None:
        return
    if smoke.process.poll() is None:
        smoke.process.kill()
        smoke.process.wait()
    shutil.rmtree(smoke.jit_dir.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def smoke_builds(request: pytest.FixtureRequest) -> SmokeBuild:
    """The finished background prebuild (``.wait()`` gives the reports, ``.jit_dir`` the
    cache they are in)."""
    smoke = request.config.stash.get(_KEY, None)
    if smoke is None:
        pytest.fail("smoke_builds needs a module-level SMOKE_UNITS in the requesting module")
    smoke.wait()
    return smoke
