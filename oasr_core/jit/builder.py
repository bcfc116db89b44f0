"""Compiling units into cached objects and linking them into a module's library.

A unit that fails to compile fails alone: its error is kept (in the build report, the module's
manifest and a failure marker beside where its object would be) and the module links the rest.
A failure marker stops the same text from being recompiled by every later build unless
``retry_failed`` is passed; failures that say nothing about the source (nvcc killed, out of
memory or disk) leave no marker. Nothing here loads a library: prebuilding on a CPU machine
and loading on a GPU machine are separate steps (see :mod:`oasr_core.jit.loader`).
"""

from __future__ import annotations

import contextlib
import enum
import os
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from oasr_core.errors import OasrError, ToolchainError
from oasr_core.jit import cache, toolchains, trust
from oasr_core.jit.spec import LINK_FLAGS, JitSpec, Plan, PlannedUnit, plan

ERROR_HEAD = 2000
ERROR_TAIL = 6000
_TRANSIENT = (
    "died due to signal", "Killed", "No space left on device", "Cannot allocate memory",
    "std::bad_alloc", "out of memory",
)


class BuildStatus(str, enum.Enum):
    """Outcome of a unit or a module in one build; compares equal to its value."""

    BUILT = "built"
    """Compiled (unit) or linked (module) by this build."""
    CACHED = "cached"
    """Found in the cache; nvcc did not run."""
    FAILED = "failed"
    """Did not compile (unit) or no library could be made (module)."""


@attrs.frozen
class UnitStatus:
    """What became of one translation unit in a build."""

    status: BuildStatus = attrs.field(converter=BuildStatus)
    key: str
    """The unit's object key."""
    seconds: float = 0.0
    """nvcc wall time in this build (0 when nothing ran)."""
    error: str | None = None
    """Compiler output (head and tail) or the reason the unit is unusable; None unless FAILED."""
    compiled: bool = False
    """Whether nvcc ran for this unit in this build (False for a remembered failure)."""


@attrs.frozen
class ModuleBuild:
    """The build report of one module: its library and the fate of every unit."""

    name: str
    key: str
    arch: str
    path: Path | None
    """The library, or None when no unit compiled or the link failed."""
    status: BuildStatus = attrs.field(converter=BuildStatus)
    units: Mapping[str, UnitStatus] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))
    seconds: float
    """Wall time of this build call."""
    error: str | None = None
    """Why there is no library (link output, toolchain problem); None otherwise."""
    peak_child_rss_mib: float | None = None
    """Largest resident set of any child process (nvcc and its tools) this process has waited
    for so far; a process-wide peak, not this module's alone."""

    @property
    def failed(self) -> Mapping[str, str]:
        """Error text of each unit that failed, by unit name."""
        return MappingProxyType(
            {n: u.error or "" for n, u in self.units.items() if u.status is BuildStatus.FAILED})

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready report (for ``oasr tune prebuild``)."""
        return {
            "name": self.name, "key": self.key, "arch": self.arch, "status": self.status.value,
            "path": str(self.path) if self.path else None, "seconds": round(self.seconds, 3),
            "error": self.error, "peak_child_rss_mib": self.peak_child_rss_mib,
            "units": {n: {"status": u.status.value, "key": u.key, "seconds": round(u.seconds, 3),
                          "error": u.error} for n, u in self.units.items()},
        }


def default_jobs() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def build(spec: JitSpec, *, jobs: int | None = None, retry_failed: bool = False) -> ModuleBuild:
    """Compile the missing objects of ``spec`` with up to ``jobs`` nvcc processes, then link.

    Never loads the library. Returns the report; a unit's compile error never raises. Raises
    :class:`ToolchainError` when nvcc or CUTLASS is missing or the arch is not supported.
    """
    return build_plan(plan(spec), jobs=jobs, retry_failed=retry_failed)


def prebuild(
    specs: Sequence[JitSpec], *, jobs: int | None = None, retry_failed: bool = False
) -> list[ModuleBuild]:
    """Build several modules (never loading them); one report per spec, in order.

    Modules already built are reported ``cached`` at once. For the others, every unit still
    to compile, of every module, goes into one queue of ``jobs`` nvcc processes, the heaviest
    first (:func:`unit_weight`), and each module links as soon as the last of its units is
    done. One queue over all modules, rather than a share of ``jobs`` per module, leaves no
    core idle while one module still has units waiting (a module's share used to cap it: the
    gemm production set's 16 units went through 6 slots in three waves while the slots of
    modules that had finished stood empty), and heaviest-first keeps a long CUTLASS unit from
    starting last. A module whose arch this nvcc cannot target is reported ``failed`` with
    the reason; a missing nvcc or CUTLASS raises.
    """
    jobs = jobs or default_jobs()
    root = cache.cache_dir()
    plans = [plan(s) for s in specs]
    results: dict[str, ModuleBuild] = {}
    pending: dict[str, Plan] = {}
    for p in plans:
        done = _cached(p, root, retry_failed, time.perf_counter())
        if done is not None:
            results[p.key] = done
        else:
            pending.setdefault(p.key, p)
    if pending:
        results.update(_prebuild_pending(list(pending.values()), root, jobs, retry_failed))
    return [results[p.key] for p in plans]


def unit_weight(pu: PlannedUnit) -> tuple[bool, int, int]:
    """A sort key for how long ``pu`` compiles, heaviest largest: CUTLASS templates first
    (they are most of nvcc's time), then bundles by member count, then text length."""
    text = pu.unit.source
    return ("cutlass::" in text, text.count("namespace oasr_bundle_"), len(text))


def _prebuild_pending(pending: list[Plan], root: Path, jobs: int, retry_failed: bool
                      ) -> dict[str, ModuleBuild]:
    started = time.perf_counter()
    usable: list[Plan] = []
    out: dict[str, ModuleBuild] = {}
    for p in pending:
        try:
            p.toolchain.check_arch(p.spec.arch)
        except OasrError as exc:
            out[p.key] = _report(p, None, BuildStatus.FAILED, {}, started, error=str(exc))
            continue
        usable.append(p)
    owners: dict[str, list[Plan]] = {}
    first: dict[str, tuple[Plan, PlannedUnit]] = {}
    for p in usable:
        for pu in p.units:
            first.setdefault(pu.key, (p, pu))
            if p not in owners.setdefault(pu.key, []):
                owners[pu.key].append(p)
    remaining = {p.key: {pu.key for pu in p.units} for p in usable}
    statuses: dict[str, UnitStatus] = {}
    lock = threading.Lock()
    limiter = threading.BoundedSemaphore(jobs)
    order = sorted(first.values(), key=lambda item: unit_weight(item[1]), reverse=True)
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(order) or 1)),
                            thread_name_prefix="oasr-nvcc") as pool, \
            ThreadPoolExecutor(max_workers=max(1, len(usable)),
                               thread_name_prefix="oasr-link") as linker:
        links: dict[str, Any] = {}

        def link(p: Plan) -> ModuleBuild:
            try:
                return build_plan(p, jobs=1, retry_failed=retry_failed, known=statuses,
                                  started=started)
            except OasrError as exc:
                return _report(p, None, BuildStatus.FAILED, {}, started, error=str(exc))

        def compile_one(p: Plan, pu: PlannedUnit) -> None:
            try:
                status = _compile(p, root, pu, limiter, retry_failed)
            except OasrError as exc:
                status = UnitStatus(BuildStatus.FAILED, pu.key, error=str(exc))
            ready = []
            with lock:
                statuses[pu.key] = status
                for owner in owners[pu.key]:
                    left = remaining[owner.key]
                    left.discard(pu.key)
                    if not left and owner.key not in links:
                        links[owner.key] = None
                        ready.append(owner)
            for owner in ready:
                links[owner.key] = linker.submit(link, owner)

        futures = [pool.submit(compile_one, p, pu) for p, pu in order]
        for f in futures:
            f.result()
        for p in usable:  # a module with no unit to compile (all cached) links here
            if p.key not in links:
                links[p.key] = linker.submit(link, p)
        pool.shutdown(wait=True)
        for key, future in list(links.items()):
            out[key] = future.result()
    return out


def build_plan(
    p: Plan, *, jobs: int | None = None, retry_failed: bool = False,
    limiter: threading.BoundedSemaphore | None = None,
    on_unit: Callable[[str, UnitStatus], None] | None = None,
    known: Mapping[str, UnitStatus] | None = None, started: float | None = None,
) -> ModuleBuild:
    """:func:`build` for an already resolved spec (what :func:`~oasr_core.jit.loader.load` uses).

    ``on_unit(name, status)`` is called as each unit to compile settles (from a worker thread),
    for progress; units of a module already in the cache are not reported. ``known`` holds
    what became of units already compiled by the caller, by object key (a prebuild's shared
    queue), reported as they were; ``started`` is when the caller began (the report's time)."""
    started = time.perf_counter() if started is None else started
    root = cache.cache_dir()
    done = _cached(p, root, retry_failed, started)
    if done is not None:
        return done
    p.toolchain.check_arch(p.spec.arch)
    jobs = jobs or default_jobs()
    limiter = limiter or threading.BoundedSemaphore(jobs)
    lock = root / "lib" / p.spec.name / f"{p.key}.lock"
    with cache.locked(lock, f"module {p.spec.name} ({p.key})"):
        done = _cached(p, root, retry_failed, started)
        if done is not None:
            return done
        units = _compile_units(p, root, jobs, limiter, retry_failed, on_unit, known)
        return _link(p, root, units, started)


def _report(
    p: Plan, path: Path | None, status: BuildStatus, units: Mapping[str, UnitStatus],
    started: float, error: str | None = None,
) -> ModuleBuild:
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return ModuleBuild(
        name=p.spec.name, key=p.key, arch=p.spec.arch, path=path, status=status, units=units,
        seconds=time.perf_counter() - started, error=error,
        peak_child_rss_mib=round(rss / 1024, 1) if rss else None,
    )


def _cached(p: Plan, root: Path, retry_failed: bool, started: float) -> ModuleBuild | None:
    manifest = cache.read_manifest(root, p.spec.name, p.key)
    if manifest is None:
        return None
    path = cache.library_path(root, p.spec.name, p.key)
    if trust.content_problem(path, manifest) is not None:
        return None  # a damaged library: linked again
    recorded = manifest.get("units", {})
    if retry_failed and any(u.get("status") == "failed" for u in recorded.values()):
        return None
    units = {}
    for pu in p.units:
        entry = recorded.get(pu.unit.name, {})
        failed = entry.get("status") == "failed"
        units[pu.unit.name] = UnitStatus(
            status=BuildStatus.FAILED if failed else BuildStatus.CACHED, key=pu.key,
            error=entry.get("error") if failed else None,
        )
    return _report(p, path, BuildStatus.CACHED, units, started)


def object_intact(root: Path, key: str) -> bool:
    """Whether the cached object of ``key`` is there with the sha256 its compile recorded; a
    truncated or altered object is compiled again. An object compiled before hashes were
    recorded is adopted (its hash recorded now) when it is a complete ELF file: its section
    header table lies within the file, which a truncated copy fails."""
    obj = cache.object_path(root, key)
    if not obj.is_file():
        return False
    sidecar = cache.object_hash_path(root, key)
    try:
        recorded = sidecar.read_text().strip()
    except FileNotFoundError:
        if not _elf_complete(obj):
            return False
        with contextlib.suppress(OSError):
            cache.atomic_write(sidecar, trust.file_sha256(obj) + "\n")
        return True
    except (OSError, UnicodeDecodeError):
        return False
    try:
        return trust.cached_sha256(obj) == recorded
    except OSError:
        return False


def _elf_complete(path: Path) -> bool:
    """Whether ``path`` is an ELF file whose section header table ends within it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
            size = os.fstat(handle.fileno()).st_size
    except OSError:
        return False
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
        return False
    order = "little" if head[5] == 1 else "big"
    if head[4] == 2:
        if len(head) < 64:
            return False
        shoff = int.from_bytes(head[0x28:0x30], order)
        entsize, count = (int.from_bytes(head[i:i + 2], order) for i in (0x3A, 0x3C))
    else:
        shoff = int.from_bytes(head[0x20:0x24], order)
        entsize, count = (int.from_bytes(head[i:i + 2], order) for i in (0x2E, 0x30))
    return 0 < shoff and shoff + entsize * count <= size


def _compile_units(
    p: Plan, root: Path, jobs: int, limiter: threading.BoundedSemaphore, retry_failed: bool,
    on_unit: Callable[[str, UnitStatus], None] | None = None,
    known: Mapping[str, UnitStatus] | None = None,
) -> dict[str, UnitStatus]:
    by_key: dict[str, PlannedUnit] = {}
    for pu in p.units:
        by_key.setdefault(pu.key, pu)
    workers = max(1, min(jobs, len(by_key)))

    def compile_one(pu: PlannedUnit) -> UnitStatus:
        if known is not None and pu.key in known:
            return known[pu.key]
        status = _compile(p, root, pu, limiter, retry_failed)
        if on_unit is not None:
            on_unit(pu.unit.name, status)
        return status

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="oasr-nvcc") as pool:
        futures = {key: pool.submit(compile_one, pu) for key, pu in by_key.items()}
        outcome = {key: f.result() for key, f in futures.items()}
    return {pu.unit.name: outcome[pu.key] for pu in p.units}


def _compile(
    p: Plan, root: Path, pu: PlannedUnit, limiter: threading.BoundedSemaphore, retry_failed: bool
) -> UnitStatus:
    obj = cache.object_path(root, pu.key)
    marker = cache.failure_path(root, pu.key)
    found = _remembered(root, pu.key, retry_failed)
    if found is not None:
        return found
    with cache.locked(obj.with_suffix(".lock"), f"unit {pu.unit.name} ({pu.key})"):
        found = _remembered(root, pu.key, retry_failed)
        if found is not None:
            return found
        source = cache.source_path(root, pu.key)
        cache.atomic_write(source, pu.text)
        tmp = cache.temp_path(obj)
        command = p.compile_command(source, tmp)
        try:
            with limiter:
                started = time.perf_counter()
                proc = _run(command)
                seconds = time.perf_counter() - started
            if proc.returncode == 0 and tmp.stat().st_size > 0:
                digest = trust.file_sha256(tmp)
                os.replace(tmp, obj)
                cache.atomic_write(cache.object_hash_path(root, pu.key), digest + "\n")
                marker.unlink(missing_ok=True)
                return UnitStatus(BuildStatus.BUILT, pu.key, seconds, compiled=True)
        finally:
            tmp.unlink(missing_ok=True)
        output = (proc.stdout + proc.stderr).strip()
        error = _clip(f"nvcc exited with {proc.returncode}:\n{output}")
        if proc.returncode > 0 and not any(t in output for t in _TRANSIENT):
            cache.write_json(marker, {
                "unit": pu.unit.name, "error": error, "returncode": proc.returncode,
                "command": command, "nvcc": p.toolchain.version, "time": time.time(),
            })
    return UnitStatus(BuildStatus.FAILED, pu.key, seconds, error=error, compiled=True)


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, errors="replace",
                              check=False)
    except OSError as exc:
        raise ToolchainError(f"cannot run {command[0]}: {exc}; check OASR_NVCC/CUDA_HOME") from exc


def _remembered(root: Path, key: str, retry_failed: bool) -> UnitStatus | None:
    if object_intact(root, key):
        return UnitStatus(BuildStatus.CACHED, key)
    if not retry_failed:
        recorded = cache.read_json(cache.failure_path(root, key))
        if recorded is not None:
            return UnitStatus(BuildStatus.FAILED, key, error=str(recorded.get("error", "")))
    return None


def first_error(text: str) -> str:
    """The first line of compiler output that reports an error (else its last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower() and "exited with" not in line),
                lines[-1] if lines else "")


def _clip(text: str) -> str:
    if len(text) <= ERROR_HEAD + ERROR_TAIL:
        return text
    skipped = len(text) - ERROR_HEAD - ERROR_TAIL
    return f"{text[:ERROR_HEAD]}\n[... {skipped} characters ...]\n{text[-ERROR_TAIL:]}"


def _link(p: Plan, root: Path, units: dict[str, UnitStatus], started: float) -> ModuleBuild:
    good = [pu for pu in p.units if units[pu.unit.name].status is not BuildStatus.FAILED]
    if not good:
        return _report(p, None, BuildStatus.FAILED, units, started,
                       error=f"every unit of module {p.spec.name} failed to compile")
    library = cache.library_path(root, p.spec.name, p.key)
    tmp = cache.temp_path(library)
    try:
        command = p.link_command([cache.object_path(root, pu.key) for pu in good], tmp)
        proc = _run(command)
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).strip()
            return _report(p, None, BuildStatus.FAILED, units, started,
                           error=_clip(f"link failed (exit {proc.returncode}):\n{output}"))
        symbols = _dynamic_symbols(tmp)
        if symbols is not None:
            for pu in good:
                missing = [s for s in pu.unit.exports if s not in symbols]
                if missing:
                    units[pu.unit.name] = UnitStatus(
                        BuildStatus.FAILED, pu.key, units[pu.unit.name].seconds,
                        error=f"the library does not export {', '.join(missing)}: define each "
                              "launcher as `OASR_EXPORT <type> name(...)`",
                        compiled=units[pu.unit.name].compiled)
        os.chmod(tmp, 0o755)
        digest = trust.file_sha256(tmp)
        os.replace(tmp, library)
    finally:
        tmp.unlink(missing_ok=True)
    toolchains.record(root, p.toolchain)
    declared = {s for pu in good for s in pu.unit.exports}
    cache.write_json(cache.manifest_path(root, p.spec.name, p.key), {
        "schema_version": cache.MANIFEST_SCHEMA_VERSION,
        "name": p.spec.name, "key": p.key, "arch": p.spec.arch, "library": library.name,
        trust.HASH_FIELD: digest,
        "nvcc": p.toolchain.version, "cutlass": p.cutlass_version,
        "link_flags": [*LINK_FLAGS, *p.spec.link_flags],
        "undeclared_exports": sorted(symbols - declared) if symbols is not None else None,
        "units": {
            pu.unit.name: {
                "object": pu.key, "exports": list(pu.unit.exports),
                "status": "failed" if units[pu.unit.name].status is BuildStatus.FAILED
                else "linked",
                "error": units[pu.unit.name].error,
            } for pu in p.units
        },
    })
    return _report(p, library, BuildStatus.BUILT, units, started)


def _dynamic_symbols(library: Path) -> set[str] | None:
    nm = shutil.which("nm")
    if nm is None:
        return None
    proc = subprocess.run([nm, "-D", "--defined-only", "--format=posix", str(library)],
                          capture_output=True, text=True, errors="replace", check=False)
    if proc.returncode != 0:
        return None
    return {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
