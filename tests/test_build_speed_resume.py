"""A killed pruned build resumes: it measures no finished signature again (the checkpoint)
and compiles no finished unit again (the JIT object cache), checked with a real subprocess
killed mid-build on the scripted CPU bench, whose lane compiles tiny real host-only units
through the real JIT (an nvcc wrapper logs every compile)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from build_speed_kit import kill_at

from oasr_core.measurements import read_logs

REAL_NVCC = shutil.which("nvcc")
pytestmark = [pytest.mark.nvcc,
              pytest.mark.skipif(REAL_NVCC is None, reason="needs nvcc on PATH")]

CHILD = r'''
import json, sys, time
from pathlib import Path

import attrs

from oasr_core import build, jit
from oasr_core.jit import bundles
from oasr_core.arch import ArchProfile
from oasr_core.testing import ScriptedBench, fake_family_record

from build_speed_kit import by_size, modelled_lane

root, mode, report = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])


class Modules:
    """A lane's bench_modules: one host-only unit per config, really compiled."""

    def spec(self, arch, configs, dtypes=None, groups=None):
        def unit(c):
            return jit.TranslationUnit(
                c.id, f"OASR_EXPORT int {c.id}_value(void) {{ return {len(c.id)}; }}\n",
                (f"{c.id}_value",))

        wanted = {c.id for c in configs}
        units = {}
        for group in groups or [(c,) for c in configs]:
            if wanted & {c.id for c in group}:
                tu = bundles.bundle(f"{group[0].id}+{len(group) - 1}", [unit(c) for c in group])
                units[tu.name] = tu
        return jit.JitSpec(name="speed_bench", arch="90a", cutlass=False,
                           units=tuple(units.values()))

    def install(self, arch, configs, dtypes=None, groups=None):
        module = jit.load(self.spec(arch, configs, dtypes, groups), build_missing=False)
        return None if module.exports else "empty module"

    def reset(self):
        pass


lane = modelled_lane(bench_modules=Modules())
bench = ScriptedBench()
fam = attrs.evolve(fake_family_record(), make_bench=bench.make_bench)
census = build.census_from_widths(fam, "1024,512;512,256;256,128", "16,256,4096")
signatures = build.plan(census, fam, max_points=4)
third = signatures[2].key
marker = report.with_suffix(".marker")
if mode == "block":
    def on_replay(label):
        if bench.benched and bench.benched[-1][0].dim("N") == signatures[2].dims[0][1]:
            marker.write_text("third")
            time.sleep(600)
    bench.timer.on_replay = on_replay
out = root / "sm90" / "fake.json"
result = build.build_live(census, family=fam, lane=lane, arch="sm90", out=out,
                          timer=bench.timer, soft={"impl_hash": "resume-1"},
                          profile=ArchProfile.synthetic("sm90"), rankers=(by_size,),
                          options=build.BuildOptions(effort="default", top_k=1, max_points=4),
                          jobs=2)
report.write_text(json.dumps({"reused": list(result.reused), "messages": list(result.messages),
                              "benched": [[p.dim("N"), p.m] for p, _ in bench.benched]}))
'''


def _compiles(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines() if " -c " in f" {line} "]


def _spawn(tmp_path: Path, mode: str, report: Path) -> subprocess.Popen:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path / "nvcc.log"}"\n'
                    f'exec "{REAL_NVCC}" "$@"\n')
    nvcc.chmod(0o755)
    env = {**os.environ, "OASR_TUNE_USER_DB": "off", "OASR_JIT_DIR": str(tmp_path / "jit"),
           "OASR_NVCC": str(nvcc), "OASR_TUNE_SYSTEM_DB": str(tmp_path / "no-system"),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    (tmp_path / "no-system").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "db"), mode,
                             str(report)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_a_killed_pruned_build_resumes_without_remeasuring_or_recompiling(tmp_path):
    first = tmp_path / "first.json"
    kill_at(_spawn(tmp_path, "block", first), first.with_suffix(".marker"))
    out = tmp_path / "db" / "sm90" / "fake.json"
    log = out.parent / "measurements" / "fake.jsonl"
    ckpt = out.parent / "measurements" / "fake.checkpoint.jsonl"
    finished = [json.loads(line)["key"] for line in ckpt.read_text().splitlines()]
    assert len(finished) == 2
    before = Counter(r["key"] for r in read_logs([log])[1])
    compiled_first = _compiles(tmp_path / "nvcc.log")
    assert compiled_first  # the first run compiled real units

    second = tmp_path / "second.json"
    proc = _spawn(tmp_path, "resume", second)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()[-3000:]
    report = json.loads(second.read_text())
    assert sorted(report["reused"]) == sorted(finished)
    keys = {r["key"] for r in read_logs([log])[1]}
    third, = keys - set(finished)
    assert {f"N={n}|" for n, _m in report["benched"]} == {third.split("|")[3] + "|"}
    after = Counter(r["key"] for r in read_logs([log])[1])
    assert all(after[k] == before[k] for k in finished)
    # every unit the killed run compiled is a cache hit now: no compile command ran again
    assert _compiles(tmp_path / "nvcc.log") == compiled_first
    # the units were compiled as bundles (jobs=2: two files), planned alike by both runs
    sources = [p.read_text() for p in (tmp_path / "jit").rglob("*.cu")]
    assert any("// bundle of" in s for s in sources)
    assert any(m.startswith("compile: ") for m in report["messages"])
