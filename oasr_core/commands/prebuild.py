"""``oasr tune prebuild``: compile every JIT module a build or the production path would load.

No GPU is needed: the target comes from ``--arch`` or ``OASR_CUDA_ARCH_LIST``, and the JIT
cache key has no device in it, so a GPU machine with the same toolchain and a copy of the
cache (``OASR_JIT_DIR``) finds every library. Modules compile concurrently, never load, with
the job budget split by translation-unit count.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import click

from oasr_core import jit
from oasr_core.cli import CliState, completer, handle_errors
from oasr_core.errors import ConfigurationError
from oasr_core.gpu_probe import gpu_visible
from oasr_core.jit import cache, toolchains
from oasr_core.jit.spec import plan
from oasr_core.progress import ProgressMode, track


def arch_family_of(arch: str) -> str:
    """``"90a"`` -> ``"sm90"``: the arch family tuning files and lanes are keyed by."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return f"sm{digits}"


def collect_specs(registry, families: tuple[str, ...], arch: str, scope: str,
                  tc: jit.Toolchain | None = None) -> list:
    """The JIT specs of ``families`` on ``arch`` (a canonical arch), each once (by its key
    for toolchain ``tc``; default: the one :func:`oasr_core.jit.toolchain` probes).

    ``production``: the production modules of the lane that serves each family there
    (``Registry.active_lane``), the only modules a process loads to serve ops; the other
    lanes that could run on the arch (an sm80 lane on sm90) are never loaded, and compiling
    their production sets cost the H200 machine's 16 cores as much again. ``all``: every
    lane's whole space (what builds and benchmarks of any lane may load).
    """
    arch_f = arch_family_of(arch)
    specs, seen = [], set()
    for name in families:
        registry.family(name)
        lanes = registry.lanes_of(name, arch_f)
        if not lanes:
            runs_on = sorted({a for lane in registry.lanes_of(name) for a in lane.arch_families})
            example = jit.family_target(runs_on[-1]) if runs_on else None
            raise ConfigurationError(
                f"no lane of family {name!r} runs on {arch_f} (nvcc target {arch}); its lanes "
                f"run on {', '.join(runs_on) or 'nothing'}"
                + (f", e.g. --arch {example}" if example else ""))
        if scope == "production":
            active = registry.active_lane(name, arch_f)
            lanes = (active,) if active is not None else lanes
        for lane in lanes:
            if lane.jit_specs is None:
                continue
            for spec in lane.jit_specs(arch_f, scope):
                key = plan(spec, tc).key
                if key not in seen:
                    seen.add(key)
                    specs.append(spec)
    return specs


def resolve_target(arch: str | None) -> str:
    """The nvcc target: ``--arch``, else ``OASR_CUDA_ARCH_LIST``, else this GPU's; without any
    of them, an error saying to pass ``--arch`` (never a torch import on a machine with no
    GPU device node)."""
    if arch is not None:
        try:
            return jit.normalize_arch(arch)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--arch") from None
    if not jit.target_arches() and not gpu_visible():
        raise click.UsageError("no GPU seen and no target given: pass --arch, e.g. --arch 9.0a "
                               "(H100/H200) or --arch 8.0 (A100), or set OASR_CUDA_ARCH_LIST")
    try:
        return jit.target_arch()
    except ConfigurationError as exc:
        raise click.UsageError(f"{exc}; or pass --arch, e.g. --arch 9.0a") from None


@attrs.frozen
class CacheWatch:
    """The object keys of a prebuild, to count units as the cache fills (the JIT builder
    reports per module, at the end; a unit's object or failure marker appearing is the
    earliest sign it is done)."""

    root: Path
    keys: frozenset[str]

    @classmethod
    def of(cls, specs: list) -> CacheWatch:
        return cls(cache.cache_dir(), frozenset(u.key for s in specs for u in plan(s).units))

    def outcome(self, key: str) -> str | None:
        """``done`` (the object exists), ``failed`` (a failure marker) or None (pending)."""
        if cache.object_path(self.root, key).is_file():
            return "done"
        if cache.failure_path(self.root, key).is_file():
            return "failed"
        return None

    def settled(self, tracker: Any) -> set[str]:
        """Count the units already cached (or remembered as failed); return the others."""
        pending = set()
        for key in self.keys:
            got = self.outcome(key)
            if got is None:
                pending.add(key)
            else:
                tracker.advance("cached" if got == "done" else "failed")
        return pending

    def follow(self, tracker: Any, pending: set[str], stop: threading.Event,
               period_s: float = 0.5) -> None:
        """Count each of ``pending`` as it finishes, until all have or ``stop`` is set (then
        once more, so the units finished last are counted)."""
        while pending:
            stopping = stop.wait(period_s)
            for key in sorted(pending):
                got = self.outcome(key)
                if got is not None:
                    pending.discard(key)
                    tracker.advance("built" if got == "done" else "failed")
            if stopping:
                return


def unit_counts(builds: list) -> Counter:
    """Units per outcome over a prebuild's reports (a unit shared by modules counted once)."""
    seen: dict[str, str] = {}
    for b in builds:
        for u in b.units.values():
            seen.setdefault(u.key, u.status.value)
    return Counter(seen.values())


@click.command("prebuild", epilog="""\b
Examples:
  oasr tune prebuild                         the production modules, for this GPU
  oasr tune prebuild --arch 9.0a --all       every sm90 config, on a machine without a GPU
  OASR_JIT_DIR=/shared/jit oasr tune prebuild --family gemm --arch 9.0a --jobs 16

Time: ~1-2 min per CUTLASS 3.x unit per core. Every family's production set (44 units for
sm90) took 2 min 21 s on 16 cores from an empty cache; gemm --all is 185 units (~9 min on 16
cores, hours on 2). Units already in the cache (OASR_JIT_DIR) are not compiled again.""")
@click.option("--family", "families", multiple=True, shell_complete=completer("families"),
              help="Family to compile (repeat; default: every installed family).")
@click.option("--arch", default=None, shell_complete=completer("targets"),
              help="Target, e.g. 9.0a or 90a (default: OASR_CUDA_ARCH_LIST, else this GPU).")
@click.option("--all", "all_configs", is_flag=True,
              help="Compile each lane's whole space (what a build measures), not only the "
              "production set.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Concurrent nvcc processes (default: CPU count).")
@click.option("--progress/--no-progress", default=None,
              help="Progress on stderr: a bar when stdout is a terminal, else a line per "
              "tenth of the units (default); --no-progress: none.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of text.")
@click.pass_obj
@handle_errors
def prebuild_cmd(state: CliState, families: tuple[str, ...], arch: str | None,
                 all_configs: bool, jobs: int | None, progress: bool | None,
                 as_json: bool) -> None:
    """Compile every JIT module the production path (or, with --all, a build) would load."""
    registry = state.runtime().registry
    target = resolve_target(arch)
    names = families or tuple(sorted(registry.families))
    specs = collect_specs(registry, names, target, "all" if all_configs else "production")
    if not specs:
        raise ConfigurationError(f"no lane of {', '.join(names)} has JIT modules for {target}")
    jit.toolchain().check_arch(target)
    watch = CacheWatch.of(specs)
    mode = ProgressMode.choose(progress)
    with track("units", len(watch.keys), mode) as tracker:
        stop = threading.Event()
        follower = threading.Thread(target=watch.follow, daemon=True,
                                    args=(tracker, watch.settled(tracker), stop))
        follower.start()
        try:
            builds = jit.prebuild(specs, jobs=jobs)
        except OSError as exc:
            # The cache directory itself (a pseudo filesystem, a full or read-only disk).
            raise ConfigurationError(
                f"JIT cache {jit.cache_dir()} (OASR_JIT_DIR): cannot write {exc.filename or ''}"
                f" ({exc.strerror or exc}); point OASR_JIT_DIR at a writable directory"
            ) from None
        finally:
            stop.set()
            follower.join()
    # A cache whose modules were all built before (nothing linked now) still tells `doctor`
    # and `tune status` which nvcc it was made with.
    toolchains.record(jit.cache_dir(), jit.toolchain())
    counts = unit_counts(builds)
    rows = [b.to_json() for b in builds]
    if as_json:
        click.echo(json.dumps({"arch": target, "modules": rows,
                               "units": dict(sorted(counts.items()))}, indent=1, default=str))
    else:
        for b in builds:
            per: Counter = Counter(u.status.value for u in b.units.values())
            detail = ", ".join(f"{n} {s}" for s, n in sorted(per.items()))
            click.echo(f"{b.name:<32} {b.status.value:<7} {b.seconds:7.1f}s  units: {detail}")
            for uname, u in sorted(b.units.items()):
                if u.status.value == "failed":
                    first = (u.error or "").strip().splitlines()[:1]
                    click.echo(f"  † {uname}: {first[0] if first else 'failed'}")
        summary = ", ".join(f"{counts[k]} {k}" for k in ("built", "cached", "failed"))
        click.echo(f"prebuilt {len(builds)} module(s) for {target}: {sum(counts.values())} "
                   f"units ({summary}) in {tracker.summary().rsplit(', ', 1)[-1]}; "
                   f"cache {jit.cache_dir()}")
    if any(b.status.value == "failed" for b in builds):
        raise SystemExit(1)
