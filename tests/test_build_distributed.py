"""The sharded build on a real local Dask cluster (worker processes) with scripted GPUs.

One cluster of four scripted GPU workers serves the module (a cluster start costs seconds).
Every worker times an arm alike (:mod:`dask_kit`: noise-free scripted bench, each arm costing
wall time), so the tables of 1, 2 and 4 workers, and of the one-GPU build, must be equal; a
worker killed mid-signature and a driver killed mid-build must lose nothing and measure again
only what was unfinished.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import attrs
import pytest
from build_speed_kit import by_size, kill_at, modelled_lane
from dask_kit import ScriptedDevice, benched

from oasr_core import build
from oasr_core.arch import ArchProfile
from oasr_core.measurements import read_logs
from oasr_core.testing import ScriptedBench, fake_family_record

pytest.importorskip("distributed")

WIDTHS = "512,256;1024,512;2048,512;768,256"
LADDER = "16,256,4096"
SOFT = {"impl_hash": "dask-1"}
OPTIONS = build.BuildOptions(effort="default", max_points=3, fresh=True)
ARM_S = 0.004
"""Wall seconds each measured arm costs a scripted worker (the scaling test: ``SCALE_ARM_S``,
so measuring, not the 2-core CI host, dominates its wall times)."""
SCALE_ARM_S = 0.01


def _family(bench=None):
    bench = bench or ScriptedBench(sigma_rel=0.0)
    return attrs.evolve(fake_family_record(), make_bench=bench.make_bench)


def _census():
    return build.census_from_widths(_family(), WIDTHS, LADDER)


def _table(out: Path) -> dict:
    """A tuning file without the run ids it names (they differ between builds)."""
    doc = json.loads(out.read_text())
    doc.pop("provenance")
    doc["model"]["calibrated_on"].pop("runs")
    return doc


def _rows_per_key(log: Path) -> Counter:
    return Counter(r["key"] for r in read_logs([log])[1])


@pytest.fixture(scope="module")
def tiers(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiers")
    saved = {k: os.environ.get(k) for k in ("OASR_TUNE_USER_DB", "OASR_TUNE_SYSTEM_DB")}
    os.environ["OASR_TUNE_USER_DB"] = "off"
    os.environ["OASR_TUNE_SYSTEM_DB"] = str(root / "no-system")
    (root / "no-system").mkdir()
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def reference(tiers):
    """The one-GPU build of the census: its table, rows per signature and benches per width."""
    bench = ScriptedBench(sigma_rel=0.0)
    out = tiers / "one-gpu" / "sm90" / "fake.json"
    result = build.build_live(_census(), family=_family(bench), lane=modelled_lane(),
                              arch="sm90", out=out, timer=bench.timer, soft=SOFT,
                              profile=ArchProfile.synthetic("sm90"), rankers=(by_size,),
                              options=OPTIONS)
    widths = Counter((p.dim("N"), p.dim("K")) for p, _ in bench.benched)
    return {"table": _table(out), "rows": _rows_per_key(out.parent / "measurements"
                                                         / "fake.jsonl"),
            "widths": widths, "keys": list(result.entries)}


@pytest.fixture(scope="module")
def client(tiers):
    from distributed import Client

    from oasr_core.build import distributed

    jit_dir = tiers / "jit"
    with distributed.local_cluster(["0", "1", "2", "3"], compile_workers=1, compile_threads=2,
                                   env={"OASR_JIT_DIR": str(jit_dir)}) as cluster, \
            Client(cluster) as c:
        c.wait_for_workers(5)
        for module in ("dask_kit", "oasr_core.build.shards", "oasr_core.build.decide"):
            c.run(importlib.import_module, module)  # imports paid before any wall time
        yield c


def _build(client, out: Path, device, **kw):
    from oasr_core.build import distributed

    return distributed.build_distributed(
        _census(), family=_family(), lane=device.records()[1], device=device, client=client,
        out=out, options=OPTIONS, soft=SOFT, rankers=(by_size,),
        profile=ArchProfile.synthetic("sm90"), **kw)


def test_one_two_and_four_workers_build_the_one_gpu_table(client, reference, tmp_path):
    record = tmp_path / "benched.txt"
    device = ScriptedDevice(arm_s=SCALE_ARM_S, record=str(record))
    plan_out = tmp_path / "plan" / "sm90" / "fake.json"
    result, report, lines = _build(client, plan_out, device, plan_only=True)
    assert result is None and report is None
    assert not plan_out.parent.exists() and not record.exists()  # the plan spends nothing
    assert lines[0].endswith("4 signature(s), 0 finished in the checkpoint, 4 to measure")
    assert "gpu0, gpu1, gpu2, gpu3" in lines[1] and "compile on 1 CPU worker(s)" in lines[2]
    assert len([ln for ln in lines if ln.startswith("  fake|")]) == 4

    table = ["workers  wall_s  per_signature_s  worker_measure_s  driver_overhead_ms/sig"]
    for n in (1, 2, 4):
        out = tmp_path / f"w{n}" / "sm90" / "fake.json"
        result, report, _ = _build(client, out, device,
                                   gpu_workers=[f"gpu{i}" for i in range(n)])
        assert _table(out) == reference["table"], f"{n} worker(s)"
        assert _rows_per_key(out.parent / "measurements" / "fake.jsonl") == reference["rows"]
        assert report.signatures == 4 and sum(report.measured.values()) == 4
        assert set(report.measured) <= {f"gpu{i}" for i in range(n)}
        assert not (out.parent / "measurements" / "fake.shards" / report.run).exists()
        assert any(m.startswith("distributed: run ") for m in result.messages)
        table.append(f"{n:7d}  {report.wall_s:6.2f}  {report.wall_s / 4:15.3f}  "
                     f"{report.worker_s:16.2f}  {report.overhead_ms():22.1f}")
    print("\n" + "\n".join(table))


def test_a_worker_killed_mid_signature_loses_nothing(client, reference, tmp_path):
    census = _census()
    sig = next(s for s in build.plan(census, _family(), max_points=3)
               if dict(s.dims)["N"] == 1024)
    record, marker = tmp_path / "benched.txt", tmp_path / "worker.killed"
    device = ScriptedDevice(arm_s=ARM_S, record=str(record), kill_n=1024,
                            kill_m=sig.points[1].m, marker=str(marker))
    out = tmp_path / "killed" / "sm90" / "fake.json"
    result, report, _ = _build(client, out, device)
    assert marker.exists()  # a worker died measuring N=1024
    assert _table(out) == reference["table"]
    # nothing the dead worker measured reached the log twice, nothing is missing
    assert _rows_per_key(out.parent / "measurements" / "fake.jsonl") == reference["rows"]
    widths = Counter((n, k) for _pid, n, k, _m in benched(record))
    killed = (1024, 512)
    assert widths[killed] > reference["widths"][killed]  # measured again, from its start
    assert {w: c for w, c in widths.items() if w != killed} == {
        w: c for w, c in reference["widths"].items() if w != killed}
    assert report.signatures == 4


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_cpu_workers_compile_each_module_before_its_signature_is_measured(client, reference,
                                                                          tmp_path):
    out = tmp_path / "staged" / "sm90" / "fake.json"
    result, report, lines = _build(client, out, ScriptedDevice(arm_s=ARM_S, salt="staged"))
    assert _table(out) == reference["table"]
    statuses = [c["status"] for c in report.compiled]  # cached: a module another one built
    assert len(statuses) == 4 and "built" in statuses and set(statuses) <= {"built", "cached"}
    assert {c["worker"] for c in report.compiled} == {"compile0"}
    landed = {c["key"]: c["landed"] for c in report.compiled}
    assert all(report.began[key] >= landed[key] for key in report.began)
    assert report.gpu_compiled == ()
    assert "modules a GPU worker still had to compile: none" in result.messages

    # no compile stage: each GPU worker compiles what it measures from, and the report says so
    out = tmp_path / "unstaged" / "sm90" / "fake.json"
    result, report, _ = _build(client, out, ScriptedDevice(arm_s=ARM_S, salt="unstaged"),
                               compile_stage=False)
    assert _table(out) == reference["table"]
    assert report.compiled == () and report.gpu_compiled == ("dask_unstaged",)
    assert "modules a GPU worker still had to compile: dask_unstaged" in result.messages


CHILD = r"""
import sys
from pathlib import Path
from distributed import Client
import test_build_distributed as t
from dask_kit import ScriptedDevice
address, out, record = sys.argv[1:4]
with Client(address) as client:
    t._build(client, Path(out), ScriptedDevice(arm_s=0.02, record=record),
             gpu_workers=["gpu0"])
"""


def test_a_resumed_driver_measures_nothing_finished(client, reference, tmp_path):
    out = tmp_path / "resumed" / "sm90" / "fake.json"
    log = out.parent / "measurements" / "fake.jsonl"
    ckpt = out.parent / "measurements" / "fake.checkpoint.jsonl"
    record = tmp_path / "benched.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, client.scheduler.address, str(out),
                             str(record)], env=env, cwd=Path(__file__).parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    kill_at(proc, ckpt, timeout_s=120)  # the driver dies once a signature is merged
    run = read_logs([log])[0][-1]["run"]
    time.sleep(0.5)
    checkpointed = {json.loads(line)["key"] for line in ckpt.read_text().splitlines()}
    shards = log.with_suffix(".shards") / run
    left = {json.loads(p.read_text())["key"] for p in shards.glob("*.json")}
    finished = checkpointed | left
    assert checkpointed and len(finished) < 4
    before = len(benched(record))

    result, report, _ = _build(client, out, ScriptedDevice(arm_s=0.02, record=str(record)),
                               run=run)
    assert set(result.reused) == checkpointed
    after = {(n, k) for _pid, n, k, _m in benched(record)[before:]}
    widths = {key: (int(key.split("|N=")[1].split("|")[0]), int(key.split("|K=")[1]))
              for key in reference["keys"]}
    assert not after & {widths[key] for key in finished}, "a finished signature was measured"
    assert _rows_per_key(log) == reference["rows"]  # each signature's rows once in the log
    assert _table(out) == reference["table"]
    assert report.run == run and sum(1 for r in read_logs([log])[0] if r["run"] == run) == 1


def test_without_a_scheduler_dask_is_never_imported(tmp_path):
    code = ("import sys\nfrom oasr_core.cli import main\n"
            "try:\n    main(sys.argv[1:], standalone_mode=False)\nexcept BaseException:\n"
            "    pass\n"
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', "
            "'distributed'))\n"
            "print('loaded:', loaded)\n")
    proc = subprocess.run([sys.executable, "-c", code, "tune", "build", "--family", "gemm",
                           "--widths", "512,256", "--m-ladder", "16,64",
                           "--out", str(tmp_path / "gemm.json")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OASR_TUNE_USER_DB": "off",
                               "CUDA_VISIBLE_DEVICES": ""})
    assert "loaded: []" in proc.stdout, proc.stdout + proc.stderr
    assert "no CUDA device" in proc.stderr  # the build got as far as it can without a GPU


@pytest.mark.parametrize("args, message", [
    (["--scheduler", "local:4"], "--scheduler 'local:4': expected local, local-cuda or a Dask "
     "scheduler address"),
    (["--plan"], "--plan shard a build over Dask workers: they need --scheduler"),
    (["--run-id", "r1", "--gpus", "2"], "--run-id, --gpus shard a build"),
])
def test_scheduler_options_refused_in_one_line(cli_runner, args, message):
    result = cli_runner("tune", "build", "--family", "gemm", "--widths", "512,256",
                        "--m-ladder", "16,64", *args)
    assert result.exit_code != 0
    assert message in result.output and len(result.output.strip().splitlines()) == 1
