"""The sharded build (``oasr tune build --scheduler``) measured: scaling, agreement, a lost worker.

Its figures are build wall times and per-signature times of whole builds; each kernel inside a
build is timed by the build's own measurement protocol (a separator kernel after every call, its
cost subtracted), and ``--scripted`` replaces those timings with scripted per-arm costs.

Two subcommands:

``run``
    One local Dask cluster of GPU workers (one per GPU, ``CUDA_VISIBLE_DEVICES`` each) and CPU
    compile workers; the census built once in this process on one GPU with no scheduler (the
    reference), then sharded over 1, 2, ... of the GPU workers (``--gpus 1,2,4``; counts above
    the GPUs visible are skipped and said so), then (``--kill``) once more on every worker
    with one GPU worker SIGKILLed while it measures. For each build: wall time, per
    signature, the workers' measuring seconds, the driver's overhead per signature, the
    modules a GPU worker had to compile, and whether its table is byte for byte its own
    log's replay (the one decision code); the tables' agreement with the reference (regions
    per signature). ``--scripted`` rehearses it all on a CPU with the test suite's scripted
    GPUs (``tests/dask_kit.py``: four workers, each arm costing wall time). Writes ``--out``
    (markdown) and the same name with ``.json``.

``summary``
    The markdown of ``benchmarks/h200/run.sh distributed``'s CLI builds (one with no
    scheduler, one through ``--scheduler local --gpus 1``) from their ``--json`` outputs.

Examples::

    python3 benchmarks/distributed_build.py run --gpus 1,2,4 --kill --out distributed_build.md
    python3 benchmarks/distributed_build.py run --scripted --gpus 1,2,4 --kill --out /tmp/r.md
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
CENSUS = [ROOT / "benchmarks" / "census" / "conformer_offline_int8.json"]


def _table_regions(path: Path) -> dict[str, list]:
    doc = json.loads(path.read_text())
    return {k: e.get("regions") for k, e in doc["entries"].items()}


def _agreement(a: Path, b: Path) -> str:
    ra, rb = _table_regions(a), _table_regions(b)
    same = sum(1 for k in ra if ra.get(k) == rb.get(k))
    return f"{same}/{len(set(ra) | set(rb))}"


class _Records:
    """A registry of one family and lane (the scripted rehearsal's replays)."""

    def __init__(self, family, lane) -> None:
        self._family, self._lane = family, lane

    def family(self, name):
        return self._family

    def lane(self, name):
        return self._lane


def _setup(args):
    """(device, family, lane, census, options, registry, reference builder, GPU names)."""
    from oasr_core import build

    options = build.BuildOptions(effort="default", thin=True, max_points=args.max_points,
                                 fresh=True)
    if args.scripted:
        sys.path.insert(0, str(ROOT / "tests"))
        from build_speed_kit import by_size
        from dask_kit import ScriptedDevice

        from oasr_core.arch import ArchProfile
        from oasr_core.testing import ScriptedBench

        device = ScriptedDevice(arm_s=args.arm_s)
        family, lane = device.records()
        census = build.census_from_widths(
            family, "512,256;1024,512;2048,512;768,256;1536,384;256,128;4096,1024;640,320",
            "16,256,4096")
        profile = ArchProfile.synthetic("sm90")
        extra = {"rankers": (by_size,), "profile": profile, "soft": {"impl_hash": "bench"}}

        def reference(out: Path):
            bench = ScriptedBench(sigma_rel=0.0)
            fam = attrs.evolve(family, make_bench=bench.make_bench)
            # the scripted GPU's per-arm wall cost, as its workers pay it
            inner = bench.make_bench

            def costed(problem, choices, opts):
                time.sleep(args.arm_s * len(choices))
                return inner(problem, choices, opts)

            fam = attrs.evolve(fam, make_bench=costed)
            return build.build_live(census, family=fam, lane=lane, arch="sm90", out=out,
                                    timer=bench.timer, options=options, **extra)

        return (device, family, lane, census, options, _Records(family, lane), reference,
                ["0", "1", "2", "3"], extra)
    from oasr_core.build.distributed import visible_gpus
    from oasr_core.build.shards import RegistryDevice
    from oasr_core.runtime import get_runtime

    registry = get_runtime().registry
    family = registry.family(args.family)
    arch = get_runtime().device_arch()
    lane = registry.lane(args.lane) if args.lane else registry.active_lane(family.name, arch)
    census = build.read_censuses([Path(c) for c in args.census], family)
    device = RegistryDevice(family.name, lane.name)

    def reference(out: Path):
        return build.build_live(census, family=family, lane=lane, arch=arch, out=out,
                                options=options)

    return device, family, lane, census, options, registry, reference, visible_gpus(), {}


def _replay_same(registry, family, out: Path, work: Path, options, extra: dict) -> bool:
    """Whether ``out`` is byte for byte the replay of its own log (the same knobs and effort
    level, so the replay keeps the rows that level measured)."""
    from oasr_core import build

    log = out.parent / "measurements" / f"{family.name}.jsonl"
    again = work / "replay" / out.parent.parent.name / out.name
    build.build_from_log([log], registry=registry, out=str(again), family=family.name,
                         options=options, rankers=extra.get("rankers"))
    return again.read_bytes() == out.read_bytes()


def _killer(client, ckpt: Path, pools, done: threading.Event, record: dict) -> None:
    """SIGKILL one GPU worker while it measures, once the first signature is checkpointed."""
    pids = client.run(os.getpid, workers=list(pools.gpu))
    while not done.is_set():
        if ckpt.exists() and ckpt.read_text().strip():
            busy = {a: ks for a, ks in client.processing(workers=list(pools.gpu)).items()
                    if any(str(k).startswith("oasr-measure-") for k in ks)}
            if busy:
                addr = sorted(busy)[0]
                record.update(worker=pools.names[addr], pid=pids[addr],
                              signatures=[str(k) for k in busy[addr]], at=time.time())
                os.kill(pids[addr], signal.SIGKILL)
                return
        time.sleep(0.05)


def run(args) -> int:
    from distributed import Client

    from oasr_core.build import distributed
    from oasr_core.build.shards import probe
    from oasr_core.jit.cache import cache_dir

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    (device, family, lane, census, options, registry, reference, gpus,
     extra) = _setup(args)
    counts = sorted({int(n) for n in args.gpus.split(",")})
    usable = [n for n in counts if n <= len(gpus)]
    skipped = [n for n in counts if n > len(gpus)]
    rows, notes = [], []
    ref_out = work / "reference" / "sm90" / f"{family.name}.json"
    t0 = time.perf_counter()
    ref = reference(ref_out)
    ref_wall = time.perf_counter() - t0
    n_sigs = len(ref.entries)
    rows.append({"build": "one GPU, no scheduler", "workers": 1, "wall_s": ref_wall,
                 "per_signature_s": ref_wall / max(1, n_sigs), "worker_s": None,
                 "overhead_ms": None, "gpu_compiled": [],
                 "replay_identical": _replay_same(registry, family, ref_out, work, options, extra),
                 "agreement": f"{n_sigs}/{n_sigs}"})
    if usable:
        started = time.perf_counter()
        env = {"OASR_JIT_DIR": str(cache_dir())}
        cluster = distributed.local_cluster(gpus[:max(usable)],
                                            compile_workers=args.compile_workers,
                                            compile_threads=args.compile_threads, env=env)
        with cluster, Client(cluster) as client:
            client.wait_for_workers(max(usable) + args.compile_workers)
            # Each GPU worker opens its device once (torch, the plugins, the timer) before
            # any build is timed: the scaling rows compare measuring, not process warm-up.
            every = distributed.Pools.of(client)
            client.gather([client.submit(probe, device, False, workers=[a], pure=False)
                           for a in every.gpu])
            notes.append(f"cluster start and device warm-up: "
                         f"{time.perf_counter() - started:.1f} s ({max(usable)} GPU "
                         f"worker(s), {args.compile_workers} compile worker(s))")
            plan = [(n, False) for n in usable] + ([(max(usable), True)] if args.kill else [])
            for n, kill in plan:
                name = f"w{n}" + ("-kill" if kill else "")
                out = work / name / "sm90" / f"{family.name}.json"
                pools = distributed.Pools.of(client, [f"gpu{i}" for i in range(n)])
                killed: dict = {}
                done = threading.Event()
                watcher = None
                if kill:
                    ckpt = out.parent / "measurements" / f"{family.name}.checkpoint.jsonl"
                    watcher = threading.Thread(target=_killer,
                                               args=(client, ckpt, pools, done, killed))
                    watcher.start()
                result, report, _ = distributed.build_distributed(
                    census, family=family, lane=lane, device=device, client=client, out=out,
                    options=options, gpu_workers=[f"gpu{i}" for i in range(n)], **extra)
                done.set()
                if watcher is not None:
                    watcher.join()
                rows.append({
                    "build": f"sharded, {n} GPU worker(s)" + (", one killed" if kill else ""),
                    "workers": n, "wall_s": report.wall_s,
                    "per_signature_s": report.wall_s / max(1, n_sigs),
                    "worker_s": report.worker_s, "overhead_ms": report.overhead_ms(),
                    "gpu_compiled": list(report.gpu_compiled),
                    "measured": dict(report.measured),
                    "replay_identical": _replay_same(registry, family, out, work, options, extra),
                    "agreement": _agreement(ref_out, out), "killed": killed or None,
                    "messages": list(result.messages)})
                client.wait_for_workers(max(usable) + args.compile_workers, timeout=120)
    if skipped:
        notes.append(f"not run: {', '.join(map(str, skipped))} GPU worker(s); this machine "
                     f"has {len(gpus)} GPU(s)")
    doc = {"date": time.strftime("%Y-%m-%d"), "scripted": args.scripted,
           "family": family.name, "lane": lane.name, "signatures": n_sigs,
           "points": ref.points, "gpus_visible": len(gpus), "rows": rows, "notes": notes}
    _write(Path(args.out), doc)
    return 0 if all(r["replay_identical"] for r in rows) else 1


def _write(out: Path, doc: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    what = "scripted GPUs (CPU rehearsal)" if doc["scripted"] else "GPUs"
    lines = [f"# The sharded build on {doc['gpus_visible']} {what}, {doc['date']}", "",
             f"Family {doc['family']} (lane {doc['lane']}): {doc['signatures']} signature(s), "
             f"{doc['points']} point(s). Agreement: signatures whose regions equal the "
             "one-GPU build's; replay: the table is byte for byte its own log's replay.", "",
             "| build | wall s | s / signature | workers measuring s | driver overhead ms "
             "/ signature | replay identical | agreement | GPU compiled |",
             "|---|---:|---:|---:|---:|---|---|---|"]
    for r in doc["rows"]:
        def num(v, f="{:.2f}"):
            return "-" if v is None else f.format(v)

        lines.append(f"| {r['build']} | {num(r['wall_s'])} | {num(r['per_signature_s'], '{:.3f}')}"
                     f" | {num(r['worker_s'])} | {num(r['overhead_ms'], '{:.1f}')} | "
                     f"{'yes' if r['replay_identical'] else 'NO'} | {r['agreement']} | "
                     f"{', '.join(r['gpu_compiled']) or 'none'} |")
    for r in doc["rows"]:
        if r.get("killed"):
            k = r["killed"]
            lines += ["", f"Killed: worker {k['worker']} (pid {k['pid']}) while measuring "
                      f"{', '.join(k['signatures'])}; signatures measured per worker: "
                      f"{r['measured']}."]
    lines += ["", *[f"- {n}" for n in doc["notes"]]]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def summary(args) -> int:
    """The run.sh phase's markdown (module docstring)."""
    work = Path(args.work)
    t0, t1, t2 = (float(t) for t in args.seconds)

    def doc(name: str) -> dict:
        try:
            return json.loads((work / f"{name}.json").read_text())
        except (OSError, ValueError):
            return {}

    plain, dask = doc("plain"), doc("dask")
    lines = [f"# One GPU worker through the scheduler against the same census without it, "
             f"{time.strftime('%Y-%m-%d')}", "",
             f"{args.what}: built on this GPU with `oasr tune build` and with `--scheduler "
             "local --gpus 1` (one GPU worker, one CPU compile worker); wall = the CLI "
             "process, start to exit.",
             "", "| build | wall s | build elapsed s | points | entries |",
             "|---|---:|---:|---:|---:|"]
    for name, d, wall in (("no scheduler", plain, t1 - t0),
                          ("--scheduler local --gpus 1", dask, t2 - t1)):
        lines.append(f"| {name} | {wall:.1f} | {d.get('elapsed_s', float('nan')):.1f} | "
                     f"{d.get('points', '-')} | {len(d.get('entries', []))} |")
    lines += ["", f"Overhead of the scheduler: {(t2 - t1) - (t1 - t0):+.1f} s wall "
              "(cluster start, worker processes importing torch and the plugins, tasks "
              "shipped, rows merged).", "", "Decisions:", ""]
    lines += [f"- {line}" for line in (work / "replays.txt").read_text().splitlines()] \
        if (work / "replays.txt").exists() else ["- no replay ran"]
    diff = (work / "diff.txt").read_text().strip() if (work / "diff.txt").exists() else ""
    lines += ["", "`oasr tune diff` of the two tables (two measurements of the same census):",
              "", "```", diff or "(no output)", "```", "", "The sharded build's notes:", ""]
    lines += [f"- {m}" for m in dask.get("messages", [])]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="scaling, agreement and a killed worker")
    r.add_argument("--gpus", default="1,2,4", help="GPU worker counts (comma list)")
    r.add_argument("--family", default="scaled_mm")
    r.add_argument("--lane", default=None, help="default: the family's active lane here")
    r.add_argument("--census", nargs="+", default=[str(c) for c in CENSUS])
    r.add_argument("--max-points", type=int, default=2)
    r.add_argument("--kill", action="store_true", help="one more build, a GPU worker killed")
    r.add_argument("--compile-workers", type=int, default=1)
    r.add_argument("--compile-threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    r.add_argument("--scripted", action="store_true", help="CPU rehearsal, scripted GPUs")
    r.add_argument("--arm-s", type=float, default=0.01, help="--scripted: wall s per arm")
    r.add_argument("--work", default="/tmp/oasr-distributed-build")
    r.add_argument("--out", required=True)
    s = sub.add_parser("summary", help="run.sh distributed's markdown")
    s.add_argument("--work", required=True)
    s.add_argument("--seconds", nargs=3, required=True, metavar=("T0", "T1", "T2"))
    s.add_argument("--what", default="The census", help="what was built, for the text")
    s.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("OASR_TUNE_USER_DB", "off")
    return run(args) if args.command == "run" else summary(args)


if __name__ == "__main__":
    sys.exit(main())
