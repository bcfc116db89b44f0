"""``oasr tune evaluate``: regret of selectors against the oracle of a measurement log.

Example::

    oasr tune evaluate --log db/sm90/measurements/gemm.jsonl \\
        --db new=$HOME/.cache/oasr/tune/v2/sm90/gemm.json --plot gemm.png
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from oasr_core.cli import CliState, handle_errors
from oasr_core.errors import ConfigurationError


def _parse_db(values: tuple[str, ...]) -> list[tuple[str, Path]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise ConfigurationError(f"--db {v!r}: expected NAME=PATH")
        out.append((name, Path(path)))
    return out


@click.command("evaluate")
@click.option("--log", "logs", multiple=True, required=True,
              type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Measurement log (repeatable).")
@click.option("--db", "dbs", multiple=True, metavar="NAME=PATH", help="A tuning file to score.")
@click.option("--family", default=None, help="Family (default: the log's only one).")
@click.option("--arch", default=None, help="Arch family rows to use (default: all).")
@click.option("--no-system", is_flag=True, help="Do not score the system tier.")
@click.option("--census-only", is_flag=True, help="Score census points only (no fill points).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Draw measured times and chosen regions (PNG).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
@handle_errors
def evaluate_cmd(state: CliState, logs, dbs, family, arch, no_system, census_only, plot_path,
                 as_json) -> None:
    """Geomean / p95 / max regret and missing points per selector and signature."""
    from oasr_core import database
    from oasr_core import evaluate as ev
    from oasr_core.measurements import read_logs

    rt = state.runtime()
    _runs, rows, _bad = read_logs(logs)
    fams = sorted({str(r.get("family")) for r in rows})
    if family is None:
        if len(fams) != 1:
            raise ConfigurationError(f"the log holds families {', '.join(fams) or 'none'}; "
                                     "pass --family")
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
    tables = []
    if not no_system:
        root = database.system_root()
        path = database.tier_path(root, arch, fam) if root is not None else None
        if path is not None and path.exists():
            tables.append(("system", database.read_tuning_file(path)))
    for name, path in _parse_db(dbs):
        tables.append((name, database.read_tuning_file(path)))
    selectors += [ev.TableSelector(name, table, fam) for name, table in tables]
    model = next((t.model for _, t in tables if t.model), None)
    lane = rt.registry.lanes.get(str(rows[0].get("lane")))
    if model is not None and lane is not None and \
            rt.pm.hook.oasr_model_select.get_hookimpls():
        selectors.append(ev.hook_model_selector(rt.pm, fam, lane, model))
    report = ev.evaluate(rows, fam, selectors, census_only=census_only)
    if plot_path is not None:
        try:
            ev.plot(report, str(plot_path), regions_of=tables[0][0] if tables else None)
        except ImportError:
            raise ConfigurationError("--plot needs matplotlib (pip install matplotlib)") \
                from None
    names = [name for name, _ in tables]
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
