"""``oasr tune prebuild``: compile every JIT module a build or the production path would load.

No GPU is needed: the target comes from ``--arch`` or ``OASR_CUDA_ARCH_LIST``, and the JIT
cache key has no device in it, so a GPU machine with the same toolchain and a copy of the
cache (``OASR_JIT_DIR``) finds every library. Modules compile concurrently, never load, with
the job budget split by translation-unit count.
"""

from __future__ import annotations

import json

import click

from oasr_core.cli import CliState, handle_errors
from oasr_core.errors import ConfigurationError


def arch_family_of(arch: str) -> str:
    """``"90a"`` -> ``"sm90"``: the arch family tuning files and lanes are keyed by."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return f"sm{digits}"


def collect_specs(registry, families: tuple[str, ...], arch: str, scope: str) -> list:
    """The JIT specs of every lane of ``families`` that runs on ``arch`` (a canonical arch)."""
    arch_f = arch_family_of(arch)
    specs, seen = [], set()
    for name in families:
        registry.family(name)
        lanes = registry.lanes_of(name, arch_f)
        if not lanes:
            raise ConfigurationError(f"family {name!r} has no lane for {arch_f} (arch {arch})")
        for lane in lanes:
            if lane.jit_specs is None:
                continue
            for spec in lane.jit_specs(arch_f, scope):
                if spec.key not in seen:
                    seen.add(spec.key)
                    specs.append(spec)
    return specs


@click.command("prebuild")
@click.option("--family", "families", multiple=True,
              help="Family to compile (repeat; default: every installed family).")
@click.option("--arch", default=None,
              help="Target, e.g. 9.0a or 90a (default: OASR_CUDA_ARCH_LIST, else this GPU).")
@click.option("--all", "all_configs", is_flag=True,
              help="Compile each lane's whole space (what a build measures), not only the "
              "production set.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Concurrent nvcc processes (default: CPU count).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
@handle_errors
def prebuild_cmd(state: CliState, families: tuple[str, ...], arch: str | None,
                 all_configs: bool, jobs: int | None, as_json: bool) -> None:
    """Compile every JIT module the production path (or, with --all, a build) would load."""
    from oasr_core import jit

    registry = state.runtime().registry
    if arch is not None:
        try:
            target = jit.normalize_arch(arch)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--arch") from None
    else:
        target = jit.target_arch()
    names = families or tuple(sorted(registry.families))
    specs = collect_specs(registry, names, target, "all" if all_configs else "production")
    if not specs:
        raise ConfigurationError(f"no lane of {', '.join(names)} has JIT modules for {target}")
    jit.toolchain().check_arch(target)
    builds = jit.prebuild(specs, jobs=jobs)
    rows = [b.to_json() for b in builds]
    if as_json:
        click.echo(json.dumps({"arch": target, "modules": rows}, indent=1, default=str))
    else:
        for b in builds:
            counts: dict[str, int] = {}
            for u in b.units.values():
                counts[u.status.value] = counts.get(u.status.value, 0) + 1
            detail = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            click.echo(f"{b.name:<32} {b.status.value:<7} {b.seconds:7.1f}s  units: {detail}")
            for uname, u in sorted(b.units.items()):
                if u.status.value == "failed":
                    first = (u.error or "").strip().splitlines()[:1]
                    click.echo(f"  † {uname}: {first[0] if first else 'failed'}")
    if any(b.status.value == "failed" for b in builds):
        raise SystemExit(1)
