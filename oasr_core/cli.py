"""The ``oasr`` command line (click), resolving plugins at invocation time, never at import.

Bad input (unknown family, malformed file, wrong env var) gets one line on stderr naming what
is wrong and exit code 2; the traceback only with ``-v``.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import click

from oasr_core.errors import OasrError


@attrs.define
class CliState:
    """What every command shares: the plugin manager (built lazily) and verbosity."""

    plugin_manager: Any = None
    verbose: bool = False
    blocked: tuple[str, ...] = ()

    def runtime(self):
        """The process runtime, built on this state's plugin manager."""
        from oasr_core import runtime as rt_mod

        if self.plugin_manager is None:
            from oasr_core.plugins import make_plugin_manager

            self.plugin_manager = make_plugin_manager(block=self.blocked)
        current = rt_mod._RUNTIME
        if current is None or current.pm is not self.plugin_manager:
            rt_mod.install_runtime(rt_mod.Runtime(pm=self.plugin_manager))
        return rt_mod.get_runtime()


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn: Callable) -> Callable:
    """Map OasrError to a one-line message and exit 2 (traceback with -v)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        state = click.get_current_context().find_object(CliState)
        try:
            return fn(*args, **kwargs)
        except OasrError as exc:
            if state is not None and state.verbose:
                traceback.print_exc()
            _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        except (OSError, ValueError) as exc:
            if state is not None and state.verbose:
                traceback.print_exc()
            _fail(f"{type(exc).__name__}: {exc}")

    return wrapper


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Tracebacks and plugin load details.")
@click.option("-p", "plugin_opts", multiple=True, metavar="no:NAME",
              help="Block the plugin NAME (repeatable), as pytest's -p no:NAME.")
@click.pass_context
def main(ctx: click.Context, verbose: bool, plugin_opts: tuple[str, ...]) -> None:
    """oasr: autotuned GPU kernels for speech-recognition inference."""
    blocked = []
    for opt in plugin_opts:
        if not opt.startswith("no:") or len(opt) == 3:
            raise click.BadParameter(f"{opt!r}: expected no:NAME", param_hint="-p")
        blocked.append(opt[3:])
    state = ctx.ensure_object(CliState)
    state.verbose = state.verbose or verbose
    state.blocked = tuple(blocked)
    if verbose:
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line on stderr, without the source location."""
    click.echo(f"warning: {message}", err=True)


def _emit(data: Any, as_json: bool, lines: list[str]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=1, sort_keys=True, default=str))
    else:
        for line in lines:
            click.echo(line)


@main.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
@handle_errors
def plugins_cmd(state: CliState, as_json: bool) -> None:
    """List loaded plugins: distribution, version, hooks, families, lanes and failures."""
    registry = state.runtime().registry
    rows = registry.describe()
    failures = [attrs.asdict(f) for f in registry.failures]
    lines = []
    for row in rows:
        fams = ", ".join(row.get("families", ())) or "-"
        lanes = ", ".join(row.get("lanes", ())) or "-"
        lines.append(f"{row['name']:<16} {row.get('distribution') or '-'} "
                     f"{row.get('version') or ''}  families: {fams}  lanes: {lanes}")
    for f in failures:
        lines.append(f"† {f['plugin']} ({f['distribution']}): {f['kind']}: {f['error']}")
    _emit({"plugins": rows, "failures": failures}, as_json, lines or ["no plugins loaded"])


class LazyGroup(click.Group):
    """A group whose heavier subcommands live in their own modules, imported when invoked."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            import importlib

            module, _, attr = self.lazy[name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


TUNE_COMMANDS = {
    "bench": "oasr_core.commands.bench:bench_cmd",
    "build": "oasr_core.commands.build:build_cmd",
    "census": "oasr_core.commands.census:census_cmd",
    "evaluate": "oasr_core.commands.evaluate:evaluate_cmd",
    "prebuild": "oasr_core.commands.prebuild:prebuild_cmd",
}
"""Subcommands of ``oasr tune`` kept in their own modules: name -> ``module:command``."""


@main.group("tune", cls=LazyGroup, lazy=TUNE_COMMANDS)
def tune() -> None:
    """Tuning database: census, build, evaluate, prebuild, status, diff, select; bench."""


@tune.command("status")
@click.option("--arch", default=None, help="Arch family (default: this GPU, else every arch "
              "the tiers hold).")
@click.option("--census", "censuses", multiple=True, type=click.Path(path_type=Path,
              dir_okay=False, exists=True), help="ShapeSet JSON (repeatable): also report, per "
              "heuristic-fallback family (the quantized GEMMs), its layers with a tuning entry "
              "and those on the shape heuristic.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
@handle_errors
def status_cmd(state: CliState, arch: str | None, censuses: tuple[Path, ...],
               as_json: bool) -> None:
    """Which tiers are loaded, their paths, entries, stale files and entries, tier counts."""
    from oasr_core.report import tuning_report

    state.runtime()
    report = tuning_report(arch=arch, census=list(censuses) or None)
    _emit(report.to_json(), as_json, report.lines())


def _load_any(path: Path):
    """Load a tuning file for diffing, validated against its own family's registration."""
    from oasr_core import database

    rt = click.get_current_context().find_object(CliState).runtime()
    tf = database.read_tuning_file(path)
    fam = rt.registry.family(tf.family)
    lanes = {lane.name: lane for lane in rt.registry.lanes_of(fam.name)}
    database.check_tuning_file(tf, family=fam, arch=tf.arch.family, lanes=lanes,
                               origin=str(path))
    return tf


@tune.command("diff")
@click.argument("a", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("b", type=click.Path(path_type=Path, dir_okay=False))
@click.pass_obj
@handle_errors
def diff_cmd(state: CliState, a: Path, b: Path) -> None:
    """Per-signature changes of regions and points from tuning file A to B."""
    from oasr_core import database

    lines = database.diff_files(_load_any(a), _load_any(b))
    for line in lines or ["no differences"]:
        click.echo(line)


def _parse_dims(values: tuple[str, ...]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for v in values:
        name, sep, num = v.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{v!r}: expected NAME=INT", param_hint="--dim")
        try:
            dims[name] = int(num)
        except ValueError:
            raise click.BadParameter(f"{v!r}: {num!r} is not an integer",
                                     param_hint="--dim") from None
    return dims


@tune.command("select")
@click.option("--family", required=True)
@click.option("--op", required=True)
@click.option("--dtype", required=True)
@click.option("--dim", "dims", multiple=True, metavar="NAME=INT", help="Static dim (repeat).")
@click.option("--m", "m", type=click.IntRange(min=1), required=True, help="Dynamic axis value.")
@click.option("--arch", default=None, help="Arch family, e.g. sm90 (default: this GPU).")
@click.option("--point", default=None, help="Exact point key (conv1d: BxT).")
@click.option("--lane", default=None, help="Resolve for this lane instead of the arch's default.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
@handle_errors
def select_cmd(state: CliState, family: str, op: str, dtype: str, dims: tuple[str, ...], m: int,
               arch: str | None, point: str | None, lane: str | None, as_json: bool) -> None:
    """Print the config id serving one shape and the tier that chose it."""
    from oasr_core.selection import select
    from oasr_core.types import ARCH_RE

    rt = state.runtime()
    if arch is not None and not ARCH_RE.match(arch):
        raise click.BadParameter(f"{arch!r} is not an arch family like sm90", param_hint="--arch")
    rt.registry.family(family)
    sel = select(family, op, dtype, _parse_dims(dims), m, arch, point=point, lane=lane)
    data = {"family": family, "op": op, "dtype": dtype, "m": m, "arch": arch or rt.device_arch(),
            "choice": sel.choice_id, "tier": sel.tier.value, "lane": sel.lane,
            "config": sel.config.id if sel.config else None,
            "params": sel.config.to_json() if sel.config else None, "reason": sel.reason}
    line = f"{sel.choice_id}  (tier {sel.tier.value}, lane {sel.lane or '-'}"
    if sel.config is not None and sel.config.id != sel.choice_id:
        line += f", runs {sel.config.id}"
    _emit(data, as_json, [line + ")"] + ([f"  why: {sel.reason}"] if sel.reason else []))


def run() -> None:
    """Console-script entry point: warnings as one line each, then the command group."""
    warnings.showwarning = _show_warning
    main(obj=CliState())


if __name__ == "__main__":
    run()
