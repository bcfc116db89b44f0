"""One signature as a unit of work: what a worker measures it from, the rows it returns, and
the shared directory where each finished signature's rows wait for the driver.

A sharded build (:mod:`oasr_core.build.distributed`) plans like a live build
(:func:`oasr_core.build.plan_live`), then hands each signature to a worker as a
:class:`SignatureJob`. The worker (:func:`measure`) opens its device once per process (a
:class:`Device`: the installed plugins and this GPU's timer, or a scripted one in tests),
installs the signature's module, runs the same per-signature code a one-GPU build runs
(:func:`oasr_core.build.pipeline.tune_signature` over a :class:`~oasr_core.build.LiveSource`)
with the log rows kept in memory, writes them to ``<shared>/<run>/<digest>.json`` (atomically)
and returns them. Only the driver writes the measurement log, the checkpoint and the tuning
file: it replays each signature's rows through :class:`ShardSource`, which answers as a log
does, so its decisions are those of the same log replayed. A task run again (its worker was
lost after finishing it, or a driver resumes the run) finds the shared file and measures
nothing.

Nothing here imports Dask: the functions are what Dask runs.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from oasr_core import jit
from oasr_core.bench import BenchOptions, CudaGraphTimer, Timer
from oasr_core.jit.builder import build_plan
from oasr_core.jit.cache import atomic_write
from oasr_core.jit.spec import plan
from oasr_core.runtime import get_runtime
from oasr_core.stamps import current_soft_validators
from oasr_core.types import Config, Family, Lane

from .compiling import modules_for
from .decide import Measured
from .inputs import PlannedPoint, Signature
from .model import build_profile
from .pipeline import BuildOptions, tune_signature
from .sources import LiveSource, LogSource, Ranker, resolve_choice


class Device(Protocol):
    """What a worker measures with, made on the worker (so it pickles as a few names)."""

    def records(self) -> tuple[Family, Lane]:
        """The family and lane records (a compile worker needs nothing else)."""

    def open(self) -> tuple[Family, Lane, Timer]:
        """The records and this worker's timer (its GPU)."""

    def arch(self) -> str:
        """The arch family of this worker's GPU (``sm90``)."""


_OPENED: dict[Any, Any] = {}
"""Per worker process: each device's records and timer, made once."""


@attrs.frozen
class RegistryDevice:
    """The installed plugins' ``family`` and ``lane`` measured on this process's GPU with a
    :class:`~oasr_core.bench.CudaGraphTimer` (one worker per GPU: ``CUDA_VISIBLE_DEVICES``)."""

    family: str
    lane: str

    def records(self) -> tuple[Family, Lane]:
        registry = get_runtime().registry
        return registry.family(self.family), registry.lane(self.lane)

    def open(self) -> tuple[Family, Lane, Timer]:
        if self not in _OPENED:
            _OPENED[self] = (*self.records(), CudaGraphTimer())
        return _OPENED[self]

    def arch(self) -> str:
        arch = get_runtime().device_arch()
        if arch is None:
            raise RuntimeError(f"worker {worker_name()}: no CUDA device in this process")
        return arch


@attrs.frozen
class ModuleJob:
    """The JIT module a signature measures from: its own subset module (a lane with
    ``bench_modules``), or the lane's whole-space module number ``index`` (key ``*``)."""

    key: str
    arch: str
    op: str | None = None
    configs: tuple[Config, ...] = attrs.field(default=(), converter=tuple)
    dtypes: tuple[str, ...] | None = None
    groups: tuple[Any, ...] | None = None
    index: int = 0

    @property
    def whole(self) -> bool:
        return self.key.startswith("*")

    def spec(self, lane: Lane) -> Any:
        """The module's ``JitSpec`` (None: the lane compiles nothing)."""
        if self.whole:
            specs = list(lane.jit_specs(self.arch, "all")) if lane.jit_specs else []
            return specs[self.index] if self.index < len(specs) else None
        return modules_for(lane, self.op).spec(self.arch, self.configs, self.dtypes,
                                               self.groups)

    def install(self, lane: Lane) -> str | None:
        """Measure from this module from now on (None) or why not; a whole-space module is
        what ``make_bench`` loads by itself."""
        if self.whole:
            return None
        return modules_for(lane, self.op).install(self.arch, self.configs, self.dtypes,
                                                  self.groups)


@attrs.frozen
class SignatureJob:
    """Everything a worker needs to measure one signature as a one-GPU build would."""

    run: str
    arch: str
    signature: Signature
    digest: str
    options: BuildOptions
    bench: BenchOptions
    """The build's bench options, without ``resolve`` and ``l2_bytes`` (the worker's)."""
    soft: Mapping[str, Any]
    top_k: int
    candidates: frozenset[str] | None = None
    """The signature's pooled candidate set (None: each point's own top-k of ``rankers``)."""
    rankers: tuple[Ranker, ...] = ()
    modules: tuple[ModuleJob, ...] = ()


class RowBuffer:
    """A measurement log kept in memory (what :class:`LiveSource` appends to on a worker)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.rows.extend(dict(r) for r in rows)


def worker_name() -> str:
    """This process's Dask worker name (host and pid outside a worker)."""
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def result_path(shared: str | os.PathLike[str], run: str, digest: str) -> Path:
    """Where the finished signature of ``digest`` in ``run`` leaves its rows."""
    return Path(shared) / run / f"{digest}.json"


def read_result(path: Path) -> dict[str, Any] | None:
    """A finished signature's result file, or None (absent, or torn: measured again)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("rows"), list) else None


def _write_result(path: Path, doc: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False))


def probe(device: Device, profile: bool) -> dict[str, Any]:
    """This worker's GPU: arch family, device name, L2 bytes, the soft stamps a write of its
    measurements carries (its SKU and nvcc: the driver may run on another machine), and
    (``profile``) the arch profile a cost model is fitted on."""

    family, lane, timer = device.open()
    arch = device.arch()
    prof = build_profile(arch) if profile else None
    return {"arch": arch, "device": getattr(timer, "name", None), "l2_bytes": timer.l2_bytes,
            "profile": prof.to_json() if prof is not None else None,
            "soft": current_soft_validators(family), "worker": worker_name(),
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}


def compile_module(job: ModuleJob, device: Device, jobs: int) -> dict[str, Any]:
    """Compile (never load) one module into the shared JIT cache, with ``jobs`` nvcc
    processes: the first stage, on a CPU worker."""
    _family, lane = device.records()
    started = time.perf_counter()
    spec = job.spec(lane)
    if spec is None:
        return {"key": job.key, "module": None, "status": "none", "worker": worker_name()}
    report = build_plan(plan(spec), jobs=jobs)
    return {"key": job.key, "module": spec.name, "units": len(spec.units),
            "status": getattr(report.status, "value", str(report.status)),
            "failed": sorted(report.failed), "seconds": round(time.perf_counter() - started, 3),
            "landed": time.time(), "worker": worker_name()}


def _install(modules: Sequence[ModuleJob], lane: Lane) -> tuple[list[str], list[str]]:
    """Install a signature's modules on this GPU worker: (modules it had to compile itself,
    problems). A module the first stage left unbuilt is compiled here (and named)."""
    compiled, problems = [], []
    for job in modules:
        try:
            spec = job.spec(lane)
        except Exception as exc:  # noqa: BLE001 - its arms are then rejected as not compiled
            problems.append(f"{job.key}: no module spec ({type(exc).__name__}: {exc})")
            continue
        if spec is None:
            continue
        if not jit.is_prebuilt(spec):
            compiled.append(spec.name)
            jit.build(spec)
        why = job.install(lane)
        if why is not None:
            problems.append(f"{job.key}: its module did not load ({why}); its arms are "
                            "rejected")
    return compiled, problems


def measure(job: SignatureJob, device: Device, shared: str,
            compiled: Sequence[Any] = ()) -> dict[str, Any]:
    """Measure one signature on this worker's GPU and return its log rows (module docstring).

    ``compiled`` are the first stage's reports for its modules (Dask passes them once they
    land; unused here but for ordering). A signature whose result file exists is returned
    from it, unmeasured.
    """
    del compiled
    path = result_path(shared, job.run, job.digest)
    have = read_result(path)
    if have is not None:
        return {**have, "measured": False}
    family, lane, timer = device.open()
    began, started = time.time(), time.perf_counter()
    gpu_compiled, problems = _install(job.modules, lane)
    buffer = RowBuffer()
    bench = attrs.evolve(job.bench, l2_bytes=timer.l2_bytes,
                         resolve=functools.partial(resolve_choice, family, lane))
    source = LiveSource(family=family, lane=lane, timer=timer, options=bench, log=buffer,
                        run=job.run, arch=job.arch, soft=job.soft, rankers=job.rankers,
                        top_k=job.top_k,
                        sets=None if job.candidates is None else {
                            job.signature.key: job.candidates})
    tune_signature(job.signature, source, family, job.options)
    doc = {"key": job.signature.key, "digest": job.digest, "run": job.run,
           "rows": buffer.rows, "worker": worker_name(), "began": began,
           "seconds": round(time.perf_counter() - started, 6),
           "gpu_compiled": gpu_compiled, "problems": problems}
    doc = json.loads(json.dumps(doc, allow_nan=False))  # the rows as the log will hold them
    _write_result(path, doc)
    return {**doc, "measured": True}


class ShardSource:
    """The measurement source of the driver's merge: the rows one worker returned for the
    signature being merged, answered as a :class:`LogSource` replay of them."""

    def __init__(self) -> None:
        self.current = LogSource([])

    def load(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """The rows of the next signature merged."""
        self.current = LogSource(rows)

    def main(self, sig: Signature, point: PlannedPoint, keep: Collection[str]) -> Measured:
        return self.current.main(sig, point, keep)

    def cross(self, sig: Signature, point: PlannedPoint, arms: Sequence[str]) -> Measured:
        return self.current.cross(sig, point, arms)


def gpu_arch() -> str | None:
    """The arch family of this worker's GPU (None: it sees none), from the installed core."""
    return get_runtime().device_arch()
