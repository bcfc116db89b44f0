"""``oasr tune evaluate``: regret of selectors against the oracle of a measurement log.

Example::

    oasr tune evaluate --log db/sm90/measurements/gemm.jsonl \\
        --db new=$HOME/.cache/oasr/tune/v2/sm90/gemm.json --plot gemm.png
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from oasr_core import database, plots
from oasr_core import evaluate as ev
from oasr_core.cli import CliState, completer, existing_files, handle_errors, name_value
from oasr_core.commands.logs import read_checked
from oasr_core.errors import ConfigurationError


def _parse_db(values: tuple[str, ...]) -> list[tuple[str, Path]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise ConfigurationError(f"--db {v!r}: expected NAME=PATH")
        out.append((name, Path(path)))
    return out


def _tables(fam, arch: str, dbs: tuple[str, ...], no_system: bool) -> list[tuple[str, Any]]:
    """(name, tuning file) to score: the system tier's file unless ``no_system``, then each
    ``--db``; a file named twice (``--db shipped=db/sm90/gemm.json`` is the system tier's) is
    scored once, under the last name given."""
    named: list[tuple[str, Path]] = []
    if not no_system:
        root = database.system_root()
        path = database.tier_path(root, arch, fam) if root is not None else None
        if path is not None and path.exists():
            named.append(("system", path))
    parsed = _parse_db(dbs)
    missing = [f"--db {name}={path}" for name, path in parsed if not path.is_file()]
    if missing:
        raise ConfigurationError(f"{', '.join(missing)}: no such file")
    for name, path in parsed:
        if any(n == name for n, _ in named):
            raise ConfigurationError(f"--db {name}: the name is used twice")
        same = next((k for k, (_, p) in enumerate(named) if p.resolve() == path.resolve()), None)
        if same is not None:
            click.echo(f"note: --db {name} is the same file as {named[same][0]} ({path}); "
                       f"scored once, as {name}", err=True)
            named.pop(same)
        named.append((name, path))
    tables = [(name, database.read_tuning_file(path)) for name, path in named]
    for (name, table), (_, path) in zip(tables, named, strict=True):
        if table.family != fam.name or table.arch.family != arch:
            raise ConfigurationError(f"--db {name}={path}: a {table.family} file for "
                                     f"{table.arch.family}; the log measured {fam.name} on "
                                     f"{arch}")
    return tables


@click.command("evaluate", epilog="""\b
Examples:
  oasr tune evaluate --log db/sm90/measurements/gemm.jsonl
  oasr tune evaluate --log ~/.cache/oasr/tune/v2/sm90/measurements/gemm.jsonl \\
      --db mine=~/.cache/oasr/tune/v2/sm90/gemm.json --plot gemm.png
\b
Selectors: default (the family's fallback config), torch, the system tier, each --db, and
the cost model when its provenance shows it was not fitted on this log. Regret at a point
is time(choice) / time(best measured there) - 1. --plot writes PNG (per signature: torch,
the oracle and the served choice against M, the served regions shaded) and PNG's stem +
_regret.png (the regret CDF per selector).""")
@click.option("--log", "logs", multiple=True, required=True,
              type=click.Path(path_type=Path), callback=existing_files,
              help="Measurement log (repeatable).")
@click.option("--db", "dbs", multiple=True, metavar="NAME=PATH",
              callback=name_value("new=gemm.json"), help="A tuning file to score "
              "(repeatable), named NAME in the table.")
@click.option("--family", default=None, shell_complete=completer("families"),
              help="Family (default: the log's only one).")
@click.option("--arch", default=None, shell_complete=completer("arch_families"),
              help="Arch family rows to use (default: all).")
@click.option("--no-system", is_flag=True, help="Do not score the system tier.")
@click.option("--census-only", is_flag=True, help="Score census points only (no fill points).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Draw the served choice against torch and the oracle (PNG), "
              "and the regret CDF beside it (<stem>_regret.png).")
@click.option("--plot-table", default=None, metavar="NAME", help="The table whose choice and "
              "regions --plot draws (default: the last --db, else the system tier).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of text.")
@click.pass_obj
@handle_errors
def evaluate_cmd(state: CliState, logs, dbs, family, arch, no_system, census_only, plot_path,
                 plot_table, as_json) -> None:
    """Geomean / p95 / max regret and missing points per selector and signature."""
    rt = state.runtime()
    _runs, rows = read_checked(list(logs))
    fams = sorted({str(r.get("family")) for r in rows})
    if family is None:
        if len(fams) != 1:
            raise ConfigurationError(f"the log holds families {', '.join(fams)}; pass --family")
        family = fams[0]
    fam = rt.registry.family(family)
    rows = [r for r in rows if r.get("family") == fam.name and (arch is None
                                                                or r.get("arch") == arch)]
    if not rows:
        raise ConfigurationError(f"the log holds no measurement of family {fam.name}"
                                 + (f" on {arch}" if arch else ""))
    archs = sorted({str(r.get("arch")) for r in rows})
    if len(archs) != 1:
        raise ConfigurationError(f"the log holds arches {', '.join(archs)}; pass --arch")
    arch = archs[0]
    selectors: list = [ev.FixedSelector(fam.fallback.value, fam.fallback.value)]
    if any(r.get("config") == "torch" for r in rows):
        selectors.append(ev.FixedSelector("torch", "torch"))
    tables = _tables(fam, arch, dbs, no_system)
    names = [name for name, _ in tables]
    if plot_table is not None and plot_table not in names:
        raise ConfigurationError(f"--plot-table {plot_table}: no such table (scored: "
                                 f"{', '.join(names) or 'none'})")
    selectors += [ev.TableSelector(name, table, fam) for name, table in tables]
    model = next((t.model for _, t in tables if t.model), None)
    lane = rt.registry.lanes.get(str(rows[0].get("lane")))
    if model is not None and lane is not None and \
            rt.pm.hook.oasr_model_select.get_hookimpls():
        selectors.append(ev.hook_model_selector(rt.pm, fam, lane, model))
    report = ev.evaluate(rows, fam, selectors, census_only=census_only)
    pairs = {f"{a} vs {b}": ev.agreement(report, a, b) for i, a in enumerate(names)
             for b in names[i + 1:]}
    if as_json:
        data = report.to_json()
        data["agreement"] = {k: (None if v != v else v) for k, v in pairs.items()}
        click.echo(json.dumps(data, indent=1, sort_keys=True))
    else:
        for line in report.lines():
            click.echo(line)
        for pair, frac in pairs.items():
            click.echo(f"agreement {pair}: {100 * frac:.1f}% of weighted census points "
                       "(same choice, or measured within 1%)")
    if plot_path is not None:
        shown = plot_table or (names[-1] if names else None)
        where = f"{fam.name} on {arch}, {', '.join(str(p) for p in logs)}"
        served = plots.served_figure(report, plot_path, table=shown, title=(
            f"{where}: time per call; shaded: the regions of {shown}" if shown else where))
        cdf = plots.regret_figure(report, plot_path.with_name(plot_path.stem + "_regret.png"),
                                  title=f"regret per selector: {where}")
        click.echo(f"wrote {served} and {cdf}", err=as_json)
