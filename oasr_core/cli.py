"""The ``oasr`` command line (click), resolving plugins at invocation time, never at import.

Bad input (unknown family, malformed file, wrong env var, a misspelt option) gets one line on
stderr naming what is wrong and exit code 2; the traceback only with ``-v``, which may come
anywhere on the command line.
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

from oasr_core import database
from oasr_core.commands import complete
from oasr_core.commands.device import no_gpu_hint, seen_arch
from oasr_core.commands.state import CliState
from oasr_core.errors import OasrError
from oasr_core.plugins import ENTRY_POINT_GROUP
from oasr_core.report import tier_arches, tuning_report
from oasr_core.runtime import MODEL_TIER_PLUGIN
from oasr_core.selection import select
from oasr_core.types import ARCH_RE


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _closed_stdout() -> None:
    """The reader of stdout went away (``oasr tune status | head``): stop quietly, as a
    shell tool does, without a message about it (Python's documented recipe)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)


def handle_errors(fn: Callable) -> Callable:
    """Map OasrError to a one-line message and exit 2 (traceback with -v)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        state = click.get_current_context().find_object(CliState)
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            _closed_stdout()
        except OasrError as exc:
            if state is not None and state.verbose:
                traceback.print_exc()
            _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        except (OSError, ValueError) as exc:
            if state is not None and state.verbose:
                traceback.print_exc()
            _fail(f"{type(exc).__name__}: {exc}")

    return wrapper


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


VERBOSE_FLAGS = ("-v", "--verbose")


class RootGroup(LazyGroup):
    """The ``oasr`` group: ``-v`` anywhere before ``--``, and click's usage errors (unknown
    option, missing value) as the one ``error:`` line every other error gets."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        flags = [a for a in args[:end] if a in VERBOSE_FLAGS]
        rest = [a for a in args[:end] if a not in VERBOSE_FLAGS]
        return super().parse_args(ctx, flags[:1] + rest + args[end:])

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "oasr"
            message = " ".join(exc.format_message().split())
            _fail(f"{where}: {message} (see {where} -h)", exc.exit_code)
        except click.ClickException as exc:
            _fail(" ".join(exc.format_message().split()), exc.exit_code)
        except click.Abort:
            _fail("aborted", 1)
        sys.exit(code if isinstance(code, int) else 0)


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=RootGroup, lazy={"doctor": "oasr_core.commands.doctor:doctor_cmd"},
             context_settings=CONTEXT, epilog="""\b
Examples:
  oasr doctor                 what this machine has: GPU, nvcc, CUTLASS, JIT cache, tiers
  oasr plugins                families and lanes installed
  oasr tune status            tiers loaded, their files, staleness
  oasr tune -h                the tuning commands

Completion: eval "$(_OASR_COMPLETE=bash_source oasr)" (zsh_source, fish_source).""")
@click.version_option(None, "-V", "--version", package_name="oasr-core",
                      message="%(prog)s (oasr-core) %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="Tracebacks and plugin load details "
              "(anywhere on the command line).")
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
    if blocked:
        _check_blockable(blocked)
    state = ctx.ensure_object(CliState)
    state.verbose = state.verbose or verbose
    state.blocked = tuple(blocked)
    if verbose:
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")


def _check_blockable(names: list[str]) -> None:
    """``click.BadParameter`` for a ``-p no:NAME`` that names no installed plugin (a typo
    would otherwise block nothing and say "blocked")."""
    import difflib
    import importlib.metadata

    known = sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
                   | {MODEL_TIER_PLUGIN})
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise click.BadParameter(f"no installed plugin is named {name!r}{hint}; "
                                     f"installed: {', '.join(known)}", param_hint="-p")


def warning_line(text: object) -> str:
    """A warning as the CLI prints it: ``oasr warning: ...``, the prefix every oasr warning
    shares (the plugin manager's log lines too); a library warning's own ``oasr: `` goes."""
    return "oasr warning: " + str(text).removeprefix("oasr: ")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line on stderr, without the source location."""
    click.echo(warning_line(message), err=True)


def _emit(data: Any, as_json: bool, lines: list[str]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=1, sort_keys=True, default=str))
    else:
        for line in lines:
            click.echo(line)


JSON_HELP = "Print the result as JSON instead of text."


def name_value(example: str) -> Callable:
    """A ``callback`` for a repeatable ``NAME=VALUE`` option: each value must hold a name
    and ``=``, checked when click parses the option, before it complains about the rest of the
    line (``--dim N 256`` says ``--dim N=256``, not "unexpected extra argument (256)").
    ``example`` is a well-formed value shown in the message."""

    def check(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple:
        option = max(param.opts, key=len)
        for v in values:
            name, sep, _ = v.partition("=")
            if not sep or not name:
                raise click.BadParameter(
                    f"{v!r}: expected {param.metavar} as one argument, e.g. {option} "
                    f"{example}", param_hint=option)
        return values

    return check


def missing_files(paths: list[tuple[str, Path]]) -> None:
    """``click.BadParameter`` naming every path of ``paths`` (``(option, path)`` pairs) that
    is not a file, not only the first: one line, so one fix covers them all."""
    missing = [(opt, p) for opt, p in paths if not p.is_file()]
    if missing:
        what = "; ".join(f"{p}: {'a directory' if p.is_dir() else 'no such file'}"
                         for _, p in missing)
        raise click.BadParameter(what, param_hint=", ".join(dict.fromkeys(o for o, _ in missing)))


def existing_files(ctx: click.Context, param: click.Parameter, values: Any) -> Any:
    """A ``callback`` for a repeatable file option: every value that is not a file named
    at once (:func:`missing_files`)."""
    missing_files([(max(param.opts, key=len), Path(v)) for v in values])
    return values


def completer(name: str) -> Callable:
    """A ``shell_complete`` callback: :mod:`oasr_core.commands.complete`'s ``name``."""

    def call(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
        return getattr(complete, name)(ctx, param, incomplete)

    return call


def _plugin_lines(rows: list[dict[str, Any]], failures: list[dict[str, Any]],
                  verbose: bool = False) -> list[str]:
    """``oasr plugins`` as aligned columns; blocked plugins on a line of their own; with
    ``verbose`` (``oasr -v plugins``) each plugin's hooks under its row."""
    loaded = [r for r in rows if r.get("status") != "blocked"]
    table = []
    for row in loaded:
        if row.get("distribution"):
            origin = f"{row['distribution']} {row.get('version') or ''}".strip()
        else:
            origin = "oasr-core (built in)" if row["name"].startswith("oasr_core.") else "-"
        table.append((row["name"], origin, ", ".join(row.get("families", ())) or "-",
                      ", ".join(row.get("lanes", ())) or "-"))
    lines = []
    if table:
        head = ("plugin", "distribution", "families", "lanes")
        widths = [max(len(r[k]) for r in [head, *table]) for k in range(3)]
        lines.append("  ".join(c.ljust(w) for c, w in zip(head[:3], widths, strict=True))
                     + "  " + head[3])
        for r, row in zip(table, loaded, strict=True):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True))
                         + "  " + r[3])
            if verbose:
                lines.append(f"    hooks: {', '.join(row.get('hooks', ())) or 'none'}")
    for row in rows:
        if row.get("status") == "blocked":
            lines.append(f"blocked: {row['name']} (-p no:{row['name']})")
    for f in failures:
        lines.append(f"† {f['plugin']} ({f['distribution']}): {f['kind']}: {f['error']}")
    return lines


@main.command("plugins", epilog="\b\nExamples:\n  oasr plugins\n  oasr -p no:gemm plugins"
              "\n  OASR_PLUGINS=gemm oasr plugins --json")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@handle_errors
def plugins_cmd(state: CliState, as_json: bool) -> None:
    """List loaded plugins: distribution, version, hooks, families, lanes and failures."""
    registry = state.runtime().registry
    rows = registry.describe()
    failures = [attrs.asdict(f) for f in registry.failures]
    _emit({"plugins": rows, "failures": failures}, as_json,
          _plugin_lines(rows, failures, state.verbose) or ["no plugins loaded"])


TUNE_COMMANDS = {
    "bench": "oasr_core.commands.bench:bench_cmd",
    "build": "oasr_core.commands.build:build_cmd",
    "census": "oasr_core.commands.census:census_cmd",
    "evaluate": "oasr_core.commands.evaluate:evaluate_cmd",
    "prebuild": "oasr_core.commands.prebuild:prebuild_cmd",
}
"""Subcommands of ``oasr tune`` kept in their own modules: name -> ``module:command``."""


@main.group("tune", cls=LazyGroup, lazy=TUNE_COMMANDS, epilog="""\b
The main job, on a GPU machine:
  oasr tune census --workload conformer --service-mode offline --max-batch-size 32 \\
      --out offline.json
  oasr tune prebuild --family gemm --all
  oasr tune build --census offline.json --out user
  oasr tune evaluate --log ~/.cache/oasr/tune/v2/sm90/measurements/gemm.jsonl --plot gemm.png
""")
def tune() -> None:
    """Tuning database: census, build, evaluate, prebuild, status, diff, select; bench."""


@tune.command("status", epilog="\b\nExamples:\n  oasr tune status\n  oasr tune status "
              "--arch sm90 --json\n  oasr tune status --census "
              "benchmarks/census/conformer_offline_int8.json")
@click.option("--arch", default=None, metavar="SMNN", shell_complete=completer("arch_families"),
              help="Arch family, e.g. sm90 (default: this GPU, else every arch the tiers hold).")
@click.option("--census", "censuses", multiple=True, type=click.Path(path_type=Path),
              callback=existing_files, help="ShapeSet JSON (repeatable): also report, per "
              "heuristic-fallback family (the quantized GEMMs), its layers with a tuning entry "
              "and those on the shape heuristic.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@handle_errors
def status_cmd(state: CliState, arch: str | None, censuses: tuple[Path, ...],
               as_json: bool) -> None:
    """Which tiers are loaded, their paths, entries, stale files and entries, tier counts."""
    rt = state.runtime()
    if arch is not None:
        _known_arch(rt, arch)
    device = seen_arch(rt)
    report = tuning_report(arch=arch, census=list(censuses) or None)
    data = report.to_json()
    data["device_arch"] = device
    lines = report.lines()
    if arch is None and device is None:
        held = tier_arches()
        lines.insert(0, f"no GPU seen: showing every arch the tiers hold "
                        f"({', '.join(held) or 'none'}); pass --arch to choose one")
    _emit(data, as_json, lines)


def _load_any(path: Path):
    """Load a tuning file for diffing, validated against its own family's registration."""
    rt = click.get_current_context().find_object(CliState).runtime()
    tf = database.read_tuning_file(path)
    fam = rt.registry.family(tf.family)
    lanes = {lane.name: lane for lane in rt.registry.lanes_of(fam.name)}
    database.check_tuning_file(tf, family=fam, arch=tf.arch.family, lanes=lanes,
                               origin=str(path))
    return tf


@tune.command("diff", epilog="\b\nExample:\n  oasr tune diff db/sm90/gemm.json "
              "~/.cache/oasr/tune/v2/sm90/gemm.json")
@click.argument("a", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("b", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP + " (the same lines, as a "
              "list, with both paths).")
@click.pass_obj
@handle_errors
def diff_cmd(state: CliState, a: Path, b: Path, as_json: bool) -> None:
    """Per-signature changes of regions and points from tuning file A to B.

    Lines start with + (signature only in B), - (only in A) or ~ (changed).
    """
    missing_files([("A", a), ("B", b)])
    lines = database.diff_files(_load_any(a), _load_any(b))
    _emit({"a": str(a), "b": str(b), "identical": not lines, "changes": lines}, as_json,
          lines or ["no differences"])


def check_parent(path: Path, option: str) -> None:
    """``click.BadParameter`` unless the directory an output file goes into exists: a typo
    in an output path never creates directories anywhere."""
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise click.BadParameter(f"{path}: {parent} is not a directory", param_hint=option)
    if not parent.exists():
        raise click.BadParameter(f"{path}: no directory {parent} (create it first)",
                                 param_hint=option)


def _known_arch(rt: Any, arch: str) -> None:
    """``click.BadParameter`` unless ``arch`` is an arch family some installed lane runs on."""
    if not ARCH_RE.match(arch):
        raise click.BadParameter(f"{arch!r} is not an arch family like sm90", param_hint="--arch")
    runs_on = sorted({a for lane in rt.registry.lanes.values() for a in lane.arch_families})
    if arch not in runs_on:
        raise click.BadParameter(f"no installed lane runs on {arch} (lanes run on "
                                 f"{', '.join(runs_on) or 'nothing: no family plugin'})",
                                 param_hint="--arch")


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
        if dims[name] < 0:
            raise click.BadParameter(f"{v!r}: a dim is never negative", param_hint="--dim")
    return dims


def select_arch(rt: Any, family: str, arch: str | None, lane: str | None = None) -> str:
    """The arch family ``oasr tune select`` answers for: ``--arch`` (which ``lane``, else some
    installed lane of ``family``, must run on), else this GPU's; an error naming what to pass
    otherwise (an unknown ``lane`` first)."""
    if arch is not None and not ARCH_RE.match(arch):
        raise click.BadParameter(f"{arch!r} is not an arch family like sm90", param_hint="--arch")
    asked = rt.registry.lane(lane) if lane is not None else None
    arch = arch or seen_arch(rt)
    if arch is None:
        raise click.UsageError(no_gpu_hint(tier_arches()))
    if asked is not None:
        if arch not in asked.arch_families:
            raise click.BadParameter(f"lane {asked.name} runs on "
                                     f"{', '.join(asked.arch_families)}, not {arch}",
                                     param_hint="--arch")
    elif not rt.registry.lanes_of(family, arch):
        runs = ", ".join(f"{lane.name} on {'/'.join(lane.arch_families)}"
                         for lane in rt.registry.lanes_of(family)) or "none"
        raise click.BadParameter(f"no installed lane of family {family} runs on {arch} "
                                 f"(lanes: {runs})", param_hint="--arch")
    return arch


@tune.command("select", epilog="""\b
Examples:
  oasr tune select --family gemm --op gemm --dtype fp16 --dim N=256 --dim K=1024 \\
      --m 416 --arch sm90
  oasr tune select --family scaled_mm --op scaled_mm --dtype int8 --dim N=1024 \\
      --dim K=256 --m 2048 --arch sm90 --json""")
@click.option("--family", required=True, help="Kernel family, e.g. gemm.",
              shell_complete=completer("families"))
@click.option("--op", required=True, help="Op of the family, e.g. gemm, gemm_activation.")
@click.option("--dtype", required=True, help="Operand dtype, e.g. fp16, bf16, int8.")
@click.option("--dim", "dims", multiple=True, metavar="NAME=INT", callback=name_value("N=256"),
              help="Static dim of the signature (repeat: --dim N=512 --dim K=256).")
@click.option("--m", "m", type=click.IntRange(min=1), required=True,
              help="Size on the dynamic axis (M: tokens in the batch).")
@click.option("--arch", default=None, metavar="SMNN", shell_complete=completer("arch_families"),
              help="Arch family, e.g. sm90 (default: this GPU; required without one).")
@click.option("--point", default=None, help="Exact point key (conv1d: BxT).")
@click.option("--lane", default=None, shell_complete=completer("lanes"),
              help="Resolve for this lane instead of the arch's default lane.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@handle_errors
def select_cmd(state: CliState, family: str, op: str, dtype: str, dims: tuple[str, ...], m: int,
               arch: str | None, point: str | None, lane: str | None, as_json: bool) -> None:
    """Print the config id serving one shape and the tier that chose it."""
    rt = state.runtime()
    rt.registry.family(family)
    parsed = _parse_dims(dims)
    arch = select_arch(rt, family, arch, lane)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sel = select(family, op, dtype, parsed, m, arch, point=point, lane=lane)
    notes = []
    for w in caught:
        text = str(w.message)
        if lane is not None and f"not this process's lane '{lane}'" in text:
            # Asked for another lane by name: the tiers' entries for the arch's default lane
            # do not apply to it, as they should not; say so calmly, once.
            if not notes:
                notes.append(f"  note: the tier entries here were tuned for another lane, so "
                             f"they do not apply to lane {lane}; the next tier answers")
            continue
        click.echo(warning_line(text), err=True)
    data = {"family": family, "op": op, "dtype": dtype, "m": m, "arch": arch,
            "choice": sel.choice_id, "tier": sel.tier.value, "lane": sel.lane,
            "config": sel.config.id if sel.config else None,
            "params": sel.config.to_json() if sel.config else None, "reason": sel.reason}
    line = f"{sel.choice_id}  (tier {sel.tier.value}, lane {sel.lane or '-'}"
    if sel.config is not None and sel.config.id != sel.choice_id:
        line += f", runs {sel.config.id}"
    _emit(data, as_json, [line + ")"] + ([f"  why: {sel.reason}"] if sel.reason else [])
          + notes)


def run() -> None:
    """Console-script entry point: warnings as one line each, then the command group."""
    warnings.showwarning = _show_warning
    main(obj=CliState(), prog_name="oasr")


if __name__ == "__main__":
    # ``python -m oasr_core.cli``: run the imported module's group, so commands that look up
    # CliState find the same class as this process's other modules.
    from oasr_core.cli import run as _run

    _run()
