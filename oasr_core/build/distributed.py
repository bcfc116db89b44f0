"""A live build sharded over GPU workers with Dask distributed (``oasr tune build
--scheduler``).

The driver plans the census exactly as a one-GPU build does (:func:`oasr_core.build.plan_live`:
the same signatures, digests, candidate sets and run header), then submits one Dask task per
signature still to measure, heaviest first: :func:`oasr_core.build.shards.measure` on a worker
holding the ``GPU`` resource (one per GPU). Workers return the signature's log rows and leave
them in the shared directory too; the driver alone merges, in plan order, through the one
pipeline (:func:`oasr_core.build.pipeline.run_build`): it appends the rows to the measurement
log, takes the decisions from them (a log replay's), checkpoints the signature and writes its
entry with the locked merge. So:

* a lost worker's unfinished signatures are re-queued by Dask (its finished ones are in the
  shared directory, and the re-run task returns them unmeasured);
* a driver that dies loses nothing measured: ``--run-id`` resumes its run, reusing what the
  checkpoint finished and merging what the workers left in the shared directory;
* with workers holding the ``compile`` resource (CPU workers; a shared ``OASR_JIT_DIR``), each
  signature's module is compiled there first, nvcc jobs split by unit counts, and its
  measuring task waits only for its own module; a module a GPU worker still had to compile is
  named in the run report.

Dask is imported only here, and only when a build asks for a scheduler.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core.arch import ArchProfile
from oasr_core.errors import ConfigurationError
from oasr_core.gpu_probe import gpu_visible
from oasr_core.jit.builder import default_jobs
from oasr_core.jit.cache import cache_dir
from oasr_core.measurements import read_logs

from . import compiling, finish_notes, model, plan_live
from .inputs import Census
from .pipeline import BuildOptions, BuildResult, run_build, signature_digest
from .shards import (
    Device,
    ModuleJob,
    ShardSource,
    SignatureJob,
    compile_module,
    measure,
    probe,
)

GPU = "GPU"
"""The worker resource of a measuring worker (one per GPU)."""
COMPILE = "compile"
"""The worker resource of a compiling worker (one unit per concurrent module build)."""
LOCAL = ("local", "local-cuda")
ADDRESS_RE = re.compile(r"^(tcp|tls|ucx|inproc)://[^\s/]+(:\d+)?/?$")


def check_scheduler(value: str) -> str:
    """``local``, ``local-cuda`` or a scheduler address (``tcp://HOST:PORT``), else a
    :class:`ConfigurationError` naming the option."""
    if value in LOCAL or ADDRESS_RE.match(value):
        return value
    raise ConfigurationError(f"--scheduler {value!r}: expected local, local-cuda or a Dask "
                             "scheduler address like tcp://HOST:8786")


def _require_dask() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ConfigurationError("--scheduler needs Dask distributed: pip install "
                                 "'oasr-core[distributed]'") from None


def visible_gpus() -> list[str]:
    """This host's GPUs as ``CUDA_VISIBLE_DEVICES`` names them (its list when set, else
    ``0 .. n-1`` for the n devices torch sees)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    if not gpu_visible():
        return []
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def local_cluster(gpus: Sequence[str], *, compile_workers: int = 0, compile_threads: int = 1,
                  env: Mapping[str, str] | None = None) -> Any:
    """A Dask cluster of worker processes on this host: one measuring worker per entry of
    ``gpus`` (``CUDA_VISIBLE_DEVICES`` set to it, the ``GPU`` resource, one thread), and
    ``compile_workers`` CPU workers (no GPU visible, ``compile_threads`` modules at a time).
    ``env`` goes to every worker (the shared ``OASR_JIT_DIR``, ``OASR_CUDA_ARCH_LIST``)."""
    _require_dask()
    from distributed import Nanny, Scheduler, SpecCluster

    base = dict(env or {})
    common = {"silence_logs": logging.ERROR, "memory_limit": 0, "host": "127.0.0.1"}
    workers = {f"gpu{i}": {"cls": Nanny, "options": {
        **common, "nthreads": 1, "resources": {GPU: 1},
        "env": {**base, "CUDA_VISIBLE_DEVICES": gpu}}} for i, gpu in enumerate(gpus)}
    workers.update({f"compile{i}": {"cls": Nanny, "options": {
        **common, "nthreads": compile_threads, "resources": {COMPILE: compile_threads},
        "env": {**base, "CUDA_VISIBLE_DEVICES": ""}}} for i in range(compile_workers)})
    scheduler = {"cls": Scheduler, "options": {"dashboard": False, "host": "127.0.0.1"}}
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR)


@contextlib.contextmanager
def connect(scheduler: str, *, gpus: int | None = None, compile_workers: int = 1,
            compile_threads: int | None = None) -> Iterator[Any]:
    """A Dask client of ``scheduler``: ``local`` (:func:`local_cluster` over this host's GPUs,
    ``gpus`` of them at most, plus ``compile_workers``), ``local-cuda`` (dask-cuda's
    LocalCUDACluster, one worker per GPU; its GPU workers compile what they measure) or the
    address of a running scheduler."""
    check_scheduler(scheduler)
    _require_dask()
    from distributed import Client

    stack = contextlib.ExitStack()
    with stack:
        if scheduler == "local":
            found = visible_gpus()
            chosen = found[:gpus] if gpus else found
            if not chosen:
                raise ConfigurationError("--scheduler local: no CUDA device visible on this "
                                         "host")
            env = {"OASR_JIT_DIR": str(cache_dir())}
            if os.environ.get("OASR_CUDA_ARCH_LIST"):
                env["OASR_CUDA_ARCH_LIST"] = os.environ["OASR_CUDA_ARCH_LIST"]
            threads = compile_threads or max(1, default_jobs() - len(chosen))
            cluster = stack.enter_context(local_cluster(
                chosen, compile_workers=compile_workers, compile_threads=threads, env=env))
            client = stack.enter_context(Client(cluster))
        elif scheduler == "local-cuda":
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                raise ConfigurationError("--scheduler local-cuda needs dask-cuda: pip install "
                                         "dask-cuda (or use --scheduler local)") from None
            cluster = stack.enter_context(LocalCUDACluster(
                n_workers=gpus, threads_per_worker=1, resources={GPU: 1},
                dashboard_address=None, silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        else:
            client = stack.enter_context(Client(scheduler, timeout="30s"))
        yield client


@attrs.frozen
class Pools:
    """The cluster's workers by role: addresses and names of the GPU workers, and the
    compile workers' total slots."""

    gpu: tuple[str, ...]
    names: Mapping[str, str]
    compile: tuple[str, ...]
    compile_slots: int

    @classmethod
    def of(cls, client: Any, gpu_workers: Sequence[str] | None = None) -> Pools:
        """The pools of ``client``'s cluster (``gpu_workers``: only these GPU workers, by
        address or name)."""
        info = client.scheduler_info(n_workers=-1)["workers"]
        names = {addr: str(w.get("name", addr)) for addr, w in info.items()}
        gpu = sorted((a for a, w in info.items() if (w.get("resources") or {}).get(GPU)),
                     key=lambda a: names[a])
        if gpu_workers is not None:
            wanted = set(gpu_workers)
            gpu = [a for a in gpu if a in wanted or names[a] in wanted]
        comp = sorted(a for a, w in info.items() if (w.get("resources") or {}).get(COMPILE))
        slots = sum(int(info[a]["resources"][COMPILE]) for a in comp)
        return cls(tuple(gpu), names, tuple(comp), slots)


@attrs.frozen
class ShardReport:
    """What a sharded build did, for the run report and the scaling table."""

    run: str
    gpu_workers: int
    signatures: int
    """Signatures merged this run (reused from the checkpoint not counted)."""
    measured: Mapping[str, int]
    """Signatures each worker measured and returned this run."""
    from_shared: int
    """Signatures returned from the shared directory, unmeasured (finished before)."""
    wall_s: float
    worker_s: float
    """Seconds the workers spent measuring (their sum)."""
    driver_s: float
    """Seconds the driver spent merging (log, decisions, checkpoint, tuning file), waits for
    workers excluded."""
    gpu_compiled: tuple[str, ...] = ()
    compiled: tuple[Mapping[str, Any], ...] = ()
    """The compile stage's reports, one per module (``landed``: when, epoch seconds)."""
    began: Mapping[str, float] = attrs.field(factory=dict)
    """When each signature measured this run began on its worker (epoch seconds)."""

    def overhead_ms(self) -> float:
        """The driver's merging time per signature merged, in ms."""
        return 1000.0 * self.driver_s / max(1, self.signatures)

    def lines(self) -> list[str]:
        per = ", ".join(f"{w} {n}" for w, n in sorted(self.measured.items())) or "none"
        out = [f"distributed: run {self.run}: {self.signatures} signature(s) merged from "
               f"{self.gpu_workers} GPU worker(s) (measured: {per}; {self.from_shared} from "
               f"the shared directory) in {self.wall_s:.1f} s; workers measured "
               f"{self.worker_s:.1f} s; driver overhead {self.overhead_ms():.1f} ms per "
               f"signature (resume: --run-id {self.run})"]
        if self.compiled:
            built = sum(int(c.get("units") or 0) for c in self.compiled)
            secs = sum(float(c.get("seconds") or 0.0) for c in self.compiled)
            failed = [c["module"] for c in self.compiled if c.get("status") == "failed"]
            out.append(f"compile stage: {len(self.compiled)} module(s), {built} unit(s), "
                       f"{secs:.1f} s on CPU workers"
                       + (f"; failed: {', '.join(failed)}" if failed else ""))
        out.append("modules a GPU worker still had to compile: "
                   + (", ".join(self.gpu_compiled) if self.gpu_compiled else "none"))
        return out


def _module_jobs(lp: Any, pending: Sequence[Any], slots: int) -> dict[str, tuple[ModuleJob, ...]]:
    """Each pending signature's modules (as :func:`oasr_core.build.build_live` compiles them):
    its own subset module on a lane with ``bench_modules`` in a pooled build, else the
    lane's whole-space modules (shared by every signature)."""
    lane, arch = lp.lane, lp.arch
    if lp.pooled and lane.bench_modules is not None:
        lvl = lp.level
        dtypes = tuple(sorted({s.dtype for s in lp.signatures})) if lvl.measured_dtypes \
            else None
        all_sets = {s.key: tuple(lp.planned[s.key]) for s in lp.signatures}
        groups = tuple(compiling.bench_groups(lp.signatures, all_sets, max(1, slots))) \
            if dtypes is not None else None
        return {s.key: (ModuleJob(s.key, arch, s.op, all_sets[s.key], dtypes, groups),)
                if all_sets[s.key] else () for s in pending}
    whole = compiling.whole_space_items(lane, arch, pending, ())
    jobs = tuple(ModuleJob(item.key, arch, index=i) for i, item in enumerate(whole))
    return {s.key: jobs for s in pending}


def _unit_count(job: ModuleJob, lane: Any) -> int:
    try:
        spec = job.spec(lane)
    except Exception:  # noqa: BLE001 - the compile worker makes it again and reports why
        return max(1, len(job.configs))
    return len(spec.units) if spec is not None else 0


def build_distributed(census: Census, *, family: Any, lane: Any, device: Device, client: Any,
                      out: Path, arch: str | None = None, options: BuildOptions | None = None,
                      log_path: Path | None = None, checkpoint_path: Path | None = None,
                      bench_options: Any = None, soft: dict[str, Any] | None = None,
                      rankers: Any = None, profile: Any = None, run: str | None = None,
                      shared: Path | None = None, gpu_workers: Sequence[str] | None = None,
                      progress: Any = False, plan_only: bool = False,
                      compile_stage: bool = True,
                      clock: Callable[[], float] = time.perf_counter
                      ) -> tuple[BuildResult | None, ShardReport | None, list[str]]:
    """Build ``census`` on ``client``'s GPU workers into ``out`` (module docstring).

    ``device`` is what each worker measures with; ``run`` continues that run (``--run-id``);
    ``shared`` is the directory every worker and the driver see (default: ``<stem>.shards``
    beside the log); ``gpu_workers`` restricts measuring to those workers;
    ``compile_stage=False`` leaves the cluster's compile workers idle (each GPU worker then
    compiles the modules it measures from). Returns the
    build's result, its :class:`ShardReport`, and the plan's lines (``plan_only``: the plan
    alone, nothing compiled, measured or written).
    """
    started = clock()
    pools = Pools.of(client, gpu_workers)
    if not compile_stage:
        pools = attrs.evolve(pools, compile=(), compile_slots=0)
    if not pools.gpu:
        raise ConfigurationError("the Dask cluster has no worker with the GPU resource: start "
                                 "each GPU's worker with --resources GPU=1")
    facts = client.submit(probe, device, profile is None and model.modelled(lane),
                          workers=[pools.gpu[0]], pure=False).result()
    if arch is not None and arch != facts["arch"]:
        raise ConfigurationError(f"--arch {arch} but the GPU workers are {facts['arch']}")
    if profile is None and facts["profile"] is not None:
        profile = ArchProfile.from_json(facts["profile"])
    lp = plan_live(census, family=family, lane=lane, arch=facts["arch"], out=out, timer=None,
                   options=options, log_path=log_path, checkpoint_path=checkpoint_path,
                   rankers=rankers, bench_options=bench_options,
                   soft=facts["soft"] if soft is None else soft, profile=profile,
                   run=run, device_name=facts["device"], l2_bytes=facts["l2_bytes"],
                   write_header=not plan_only)
    options = lp.options
    fingerprint = lp.fingerprint
    pending = [s for s in lp.signatures if s.key not in lp.done]
    modules = _module_jobs(lp, pending, pools.compile_slots)
    distinct = {j.key: j for js in modules.values() for j in js}
    counts = {k: _unit_count(j, lane) for k, j in distinct.items()}
    shares = dict(zip(counts, compiling_jobs(list(counts.values()), pools.compile_slots),
                      strict=True))
    plan_lines = _plan_lines(lp, pending, pools, modules, counts, shares)
    if plan_only:
        return None, None, plan_lines
    shared = Path(shared) if shared is not None else lp.log.path.with_suffix(".shards")
    bench = attrs.evolve(lp.source.options, resolve=None, l2_bytes=None)
    staged = bool(pools.compile)
    comp_futs = {}
    if staged:
        for i, (key, job) in enumerate(distinct.items()):
            if counts[key]:
                comp_futs[key] = client.submit(
                    compile_module, job, device, shares[key], resources={COMPILE: 1},
                    key=f"oasr-compile-{lp.run}-{i}", priority=len(distinct) - i, pure=False)
    futures = {}
    for i, sig in enumerate(pending):
        digest = signature_digest(sig, options, fingerprint)
        sets = lp.planned.get(sig.key) if lp.pooled else None
        job = SignatureJob(run=lp.run, arch=lp.arch, signature=sig, digest=digest,
                           options=options, bench=bench, soft=dict(lp.soft),
                           top_k=options.top_k,
                           candidates=None if sets is None else frozenset(c.id for c in sets),
                           rankers=() if lp.pooled else tuple(lp.source.rankers),
                           modules=modules[sig.key])
        deps = [comp_futs[j.key] for j in modules[sig.key] if j.key in comp_futs]
        futures[sig.key] = client.submit(
            measure, job, device, str(shared), deps, resources={GPU: 1},
            workers=list(pools.gpu), key=f"oasr-measure-{lp.run}-{digest}",
            priority=len(pending) - i, pure=False)
    logged = _logged_keys(lp) if lp.log.path.exists() else set()
    source = ShardSource()
    docs: list[dict[str, Any]] = []
    waited = [0.0]

    def prepare(sig: Any) -> None:
        t0 = clock()
        try:
            doc = futures[sig.key].result()
        except Exception as exc:
            raise ConfigurationError(
                f"signature {sig.key}: its measuring task failed ({type(exc).__name__}: "
                f"{exc}); the signatures before it are merged; resume with --run-id "
                f"{lp.run}") from exc
        waited[0] += clock() - t0
        if sig.key not in logged:
            lp.log.append(doc["rows"])
        source.load(doc["rows"])
        docs.append(doc)

    merge_start = clock()
    try:
        result = run_build(lp.signatures, source, family=family, arch=lp.arch, lane=lane.name,
                           out=out, soft=lp.soft, options=options, checkpoint=lp.checkpoint,
                           fingerprint=fingerprint, progress=progress, fit_model=lp.fit_model,
                           prepare=prepare)
    finally:
        client.cancel([f for k, f in futures.items() if not f.done()])
    merge_s = clock() - merge_start
    compiled = tuple(f.result() for f in comp_futs.values() if f.done() and not f.exception())
    measured: dict[str, int] = {}
    for doc in docs:
        if doc.get("measured"):
            measured[doc["worker"]] = measured.get(doc["worker"], 0) + 1
    report = ShardReport(
        run=lp.run, gpu_workers=len(pools.gpu), signatures=len(docs), measured=measured,
        from_shared=sum(1 for d in docs if not d.get("measured")),
        wall_s=clock() - started, worker_s=sum(float(d.get("seconds") or 0) for d in docs
                                                if d.get("measured")),
        driver_s=max(0.0, merge_s - waited[0]),
        gpu_compiled=tuple(dict.fromkeys(m for d in docs for m in d.get("gpu_compiled", ()))),
        compiled=compiled,
        began={d["key"]: float(d["began"]) for d in docs if d.get("measured")})
    problems = [p for d in docs for p in d.get("problems", ())]
    notes = [*finish_notes(lp, result, None), *problems, *report.lines()]
    if not result.skipped:
        shutil.rmtree(shared / lp.run, ignore_errors=True)
    return attrs.evolve(result, messages=tuple(notes)), report, plan_lines


def compiling_jobs(counts: Sequence[int], slots: int) -> list[int]:
    """nvcc jobs of each module of the compile stage: the compile workers' ``slots`` shared
    by unit counts, ``max(1, min(n_i, round(slots * n_i / sum(n))))`` (a module gets at least
    one and never more than it has units)."""
    total, slots = sum(counts), max(1, slots)
    if total == 0:
        return [1] * len(counts)
    return [max(1, min(n, int(slots * n / total + 0.5))) for n in counts]


def _logged_keys(lp: Any) -> set[str]:
    """Signatures the log already holds rows of for this run (a driver died between
    appending them and checkpointing: not appended twice)."""
    return {str(r["key"]) for r in read_logs([lp.log.path])[1] if r.get("run") == lp.run}


def _plan_lines(lp: Any, pending: Sequence[Any], pools: Pools,
                modules: Mapping[str, Sequence[ModuleJob]], counts: Mapping[str, int],
                shares: Mapping[str, int]) -> list[str]:
    """What the build would run where (``--plan``)."""
    gpus = ", ".join(pools.names[a] for a in pools.gpu)
    lines = [f"plan: run {lp.run}, family {lp.family.name}, lane {lp.lane.name} on {lp.arch}: "
             f"{len(lp.signatures)} signature(s), {len(lp.done)} finished in the checkpoint, "
             f"{len(pending)} to measure",
             f"measure on {len(pools.gpu)} GPU worker(s): {gpus} (each signature on the first "
             "one free, heaviest first)"]
    if pools.compile:
        names = ", ".join(pools.names[a] for a in pools.compile)
        lines.append(f"compile on {len(pools.compile)} CPU worker(s) ({pools.compile_slots} "
                     f"slot(s)): {names}; each signature is measured once its module lands")
    else:
        lines.append("compile: no worker holds the compile resource; each GPU worker compiles "
                     "the modules it measures from")
    for sig in lp.signatures:
        if sig.key in lp.done:
            lines.append(f"  {sig.key}: finished (checkpoint), not measured")
            continue
        cands = lp.planned.get(sig.key)
        what = f"{len(cands)} candidate(s)" if cands is not None else "each point's top-k"
        mods = [f"{j.key if j.whole else 'own module'} {counts[j.key]} unit(s)"
                + (f" ({shares[j.key]} nvcc job(s))" if pools.compile else "")
                for j in modules[sig.key] if counts.get(j.key)]
        lines.append(f"  {sig.key}: {len(sig.points)} point(s), {what}; "
                     + ("; ".join(mods) if mods else "nothing to compile"))
    return lines
