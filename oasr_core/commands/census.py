"""``oasr tune census``: write the ShapeSet of a deployment (what ``oasr tune build`` tunes).

The workload is a registered one (``--workload conformer``) or any importable factory
(``--model package.module:factory`` with ``--input`` descriptions); the engine flags decide
which keys exist and which are captured; a manifest or a concurrency histogram weights them;
``--capture`` merges recordings made with ``OASR_CAPTURE``. Bad input is one line on stderr
and exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from oasr_core.census import capture as cap
from oasr_core.census import shapeset as ss
from oasr_core.census.choices import describe, offered
from oasr_core.census.engine import EngineConfig, Ladder, Traffic, parse_concurrency, read_manifest
from oasr_core.census.probe import run_census
from oasr_core.census.recorder import patches_of
from oasr_core.census.workloads import ReferenceFactory, find_workload
from oasr_core.cli import CliState, check_parent, completer, handle_errors, name_value
from oasr_core.database.codec import MAX_DEPTH, parse_text
from oasr_core.errors import ConfigurationError, DatabaseError
from oasr_core.types import thaw

PARAM_SCALE = 16
"""How far ``--param`` may scale a workload's integer default: 1 to 16 times it."""


def _params(values: tuple[str, ...]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs; the value is JSON when it parses (``4``, ``false``), else text.
    JSON goes through the one reader's guards (depth limit), so a deep value is one line."""
    out: dict[str, Any] = {}
    for item in values:
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier():
            raise ConfigurationError(f"--param {item[:60]!r}: expected NAME=VALUE")
        try:
            out[name] = parse_text(text.encode("utf-8", "replace"), origin=f"--param {name}")
        except DatabaseError as exc:
            if "nested" in str(exc):
                raise ConfigurationError(f"--param {name}: its value nests deeper than "
                                         f"{MAX_DEPTH} levels") from None
            out[name] = text
    return out


def _check_params(workload: Any, params: dict[str, Any]) -> None:
    """Refuse ``--param`` values the workload's own defaults rule out: its dtype parameter
    (``--dtype`` sets it), and for a parameter whose default is an integer, anything but an
    integer from 1 to :data:`PARAM_SCALE` times the default (``heads=0`` divides by zero,
    ``layers=20000`` probes without end)."""
    dtype_param = getattr(workload, "dtype_param", None)
    if dtype_param is not None and dtype_param in params:
        raise ConfigurationError(f"--param {dtype_param}: set it with --dtype")
    for name, value in params.items():
        default = workload.params.get(name)
        if not isinstance(default, int) or isinstance(default, bool) or default < 1:
            continue
        top = PARAM_SCALE * default
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
            raise ConfigurationError(
                f"--param {name}={str(value)[:40]}: workload {workload.name!r} takes an "
                f"integer from 1 to {top} ({PARAM_SCALE}x its default {default})")


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigurationError(f"{option} {text!r}: expected integers like 1,2,4,8") from None
    if not values or min(values) < 1:
        raise ConfigurationError(f"{option} {text!r}: expected positive integers")
    return values


def _workload(state: CliState, name: str | None, model: str | None, inputs: tuple[str, ...],
              fixed_frames: int | None, frames_per_second: float | None = None):
    return find_workload(state.runtime().registry.pm, name, model, inputs, fixed_frames,
                         frames_per_second)


GRANULARITY_FRAMES = 64
"""Default ``--frame-granularity`` in 10 ms feature frames (0.64 s)."""
MAX_FRAMES = 4096
"""Default ``--max-frames`` in 10 ms feature frames (40.96 s)."""


def _scaled(value: int | None, default: int, scale: float) -> int:
    """``value`` as given, else ``default`` feature frames in the input's ``T`` steps."""
    return value if value is not None else max(1, round(default * scale))


def _check_scheme(state: CliState, dtype: str, quantization: str) -> None:
    """``click.BadParameter`` unless an installed family offers ``quantization`` at ``dtype``
    (:mod:`oasr_core.census.choices`); the message lists what the plugins offer."""
    registry = state.runtime().registry
    choices = offered(registry.families.values())
    failed = registry.failures
    tail = f"; plugins that failed to load: {', '.join(sorted({f.plugin for f in failed}))}" \
        if failed else ""
    if quantization not in choices:
        raise click.BadParameter(
            f"{quantization!r} is not a scheme an installed plugin serves; offered: "
            f"{', '.join(choices)} (see `oasr plugins`){tail}", param_hint="--quantization")
    if dtype not in choices[quantization]:
        raise click.BadParameter(
            f"{dtype!r} is not a dtype the installed plugins serve with --quantization "
            f"{quantization}; offered: {describe(choices)}{tail}", param_hint="--dtype")


def _engine(mode: str, max_batch: int, chunk: int, ladder: str, buckets: str | None,
            preferred: int | None, granularity: int, max_frames: int, no_graphs: bool):
    width_ladder: Any
    if ladder in ("padded", "exact"):
        width_ladder = Ladder(ladder)
    else:
        width_ladder = _ints(ladder, "--ladder")
    try:
        return EngineConfig(
            service_mode=mode, max_batch_size=max_batch, chunk_size=chunk,
            width_ladder=width_ladder, preferred_batch_size=preferred,
            batch_buckets=_ints(buckets, "--batch-buckets") if buckets else None,
            frame_granularity=granularity, max_graph_frames=max_frames,
            use_graphs=not no_graphs)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def _traffic(mode: str, manifest: Path | None, audio_root: Path | None,
             concurrency: str | None):
    if mode == "offline" and concurrency is not None:
        raise ConfigurationError("--concurrency weights streaming cohorts; offline mode takes "
                                 "--manifest")
    if mode == "streaming" and manifest is not None:
        raise ConfigurationError("--manifest weights offline batches; streaming mode takes "
                                 "--concurrency")
    if manifest is not None:
        return Traffic(durations_s=read_manifest(manifest, audio_root=audio_root),
                       source=f"manifest:{manifest}")
    if concurrency is not None:
        return Traffic(concurrency=parse_concurrency(concurrency),
                       source=f"concurrency:{concurrency}")
    return Traffic()


@click.command("census", epilog="""\b
Examples:
  oasr tune census --workload conformer --service-mode offline --max-batch-size 32 \\
      --out offline.json
  oasr tune census --workload conformer --service-mode streaming --max-batch-size 64 \\
      --chunk-size 16 --out streaming.json
  oasr tune census --model mypkg.asr:build_encoder --input B,T,80 --service-mode offline \\
      --max-batch-size 16 --quantization int8_w8a8 --out int8.json""")
@click.option("--workload", "workload_name", default=None, metavar="NAME",
              shell_complete=completer("workloads"),
              help="A registered workload (built in: conformer, whisper_encoder).")
@click.option("--model", default=None, metavar="PACKAGE.MODULE:FACTORY",
              help="Census any torch module built by this factory instead.")
@click.option("--input", "inputs", multiple=True, metavar="DIMS",
              help="--model input per positional argument: dims of B, T and integers "
              "('B,T,80', 'B,80,T') or 'lengths'. Default B,T,80.")
@click.option("--fixed-frames", type=click.IntRange(min=1), default=None,
              help="--model: a fixed-window front end's frame count (keyed exactly).")
@click.option("--frames-per-second", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="RATE", help="--model: the rate of its inputs' T axis, samples per "
              "second for raw audio ('--input B,T --frames-per-second 16000'); default: 10 ms "
              "feature frames. Frame counts of the engine options scale with it.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              callback=name_value("layers=4"),
              help="Factory keyword argument, JSON value (layers=4, family_ops=false).")
@click.option("--service-mode", type=click.Choice(["offline", "streaming"]), required=True,
              help="offline: whole utterances batched; streaming: fixed chunks per step.")
@click.option("--max-batch-size", type=click.IntRange(min=1), required=True,
              help="Largest offline batch / streaming cohort.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Streaming chunk in encoder frames.")
@click.option("--manifest", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Offline traffic: JSONL with 'duration' or an audio path per line.")
@click.option("--audio-root", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder the manifest's audio paths are relative to.")
@click.option("--concurrency", default=None, metavar="N:W,...|FILE",
              help="Streaming traffic: active streams -> weight (default: uniform).")
@click.option("--ladder", default="padded", show_default=True, metavar="padded|exact|W,W,..",
              help="Streaming cohort widths.")
@click.option("--batch-buckets", default=None, metavar="B,B,..",
              help="Captured offline batch widths (default: powers of two and the maximum).")
@click.option("--preferred-batch-size", type=click.IntRange(min=1), default=None,
              help="Offline micro-batch width (default: --max-batch-size).")
@click.option("--frame-granularity", type=click.IntRange(min=1), default=None,
              help="Offline frame counts round up to a multiple of this (default: 64 feature "
              "frames, 0.64 s, in the input's T steps).")
@click.option("--max-frames", type=click.IntRange(min=1), default=None,
              help="Longest offline key captured in a graph (default: 4096 feature frames, "
              "40.96 s, in the input's T steps).")
@click.option("--no-graphs", is_flag=True, help="The engine captures no graphs (all eager).")
@click.option("--coverage", type=click.FloatRange(0, 1, min_open=True), default=0.97,
              show_default=True, help="Keep must-tune points and this share of weight/calls.")
@click.option("--capture", "captures", multiple=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="Merge an OASR_CAPTURE recording (repeatable).")
@click.option("--capture-share", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.5, show_default=True, help="Share of traffic each recording stands for.")
@click.option("--dtype", default="fp16", show_default=True, metavar="DTYPE",
              help="The deployment's activation dtype: one the installed families serve "
              "(fp16, bf16 with oasr-gemm).")
@click.option("--quantization", default="none", show_default=True, metavar="SCHEME",
              help="none, or a scheme a family serves (int8_w8a8 with oasr-scaled-mm): the "
              "model's linear layers are quantized through the plugin providing it (a "
              "--model's nn.Linear layers routed as `oasr tune bench` does; its factory "
              "receives only --param).")
@click.option("--probe-device", type=click.Choice(["meta", "cpu"]), default="meta",
              show_default=True, help="meta: shapes only, no arithmetic.")
@click.option("--probe-limit", type=click.IntRange(min=1), default=None,
              help="Probe only the heaviest N keys.")
@click.option("--compile", "compiled", is_flag=True,
              help="Record what torch.compile(model, backend=\"oasr\") runs: every GEMM/conv "
                   "site of the graph compiled at each engine key's shapes (probes on the "
                   "CPU; a reference workload without the families' ops, as users compile it; "
                   "with --quantization, the backend's option: the scheme's quantized linears).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="Where to write the ShapeSet JSON.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
@handle_errors
def census_cmd(state: CliState, workload_name: str | None, model: str | None,
               inputs: tuple[str, ...], fixed_frames: int | None,
               frames_per_second: float | None, params: tuple[str, ...],
               service_mode: str, max_batch_size: int, chunk_size: int, manifest: Path | None,
               audio_root: Path | None, concurrency: str | None, ladder: str,
               batch_buckets: str | None, preferred_batch_size: int | None,
               frame_granularity: int | None, max_frames: int | None, no_graphs: bool,
               coverage: float,
               captures: tuple[Path, ...], capture_share: float, dtype: str, quantization: str,
               probe_device: str, probe_limit: int | None, compiled: bool, out: Path,
               as_json: bool) -> None:
    """Enumerate the shapes a deployment runs, weight them by traffic, write a ShapeSet."""
    check_parent(out, "--out")
    given = click.get_current_context().get_parameter_source("chunk_size")
    if service_mode == "offline" and given is click.core.ParameterSource.COMMANDLINE:
        raise click.BadParameter("an offline census has no chunks (it is a streaming "
                                 "engine's); drop it or pass --service-mode streaming",
                                 param_hint="--chunk-size")
    workload = _workload(state, workload_name, model, inputs, fixed_frames, frames_per_second)
    scale = workload.time_scale
    config = _engine(service_mode, max_batch_size, chunk_size, ladder, batch_buckets,
                     preferred_batch_size, _scaled(frame_granularity, GRANULARITY_FRAMES, scale),
                     _scaled(max_frames, MAX_FRAMES, scale), no_graphs)
    traffic = _traffic(service_mode, manifest, audio_root, concurrency)
    factory_params = _params(params)
    _check_params(workload, factory_params)
    routed = "none"
    if quantization != "none" and not compiled:
        if isinstance(workload.factory, ReferenceFactory):
            factory_params["quantization"] = quantization
        else:
            routed = quantization
    recordings = [(path, ss.load(path)) for path in captures]
    registry = state.runtime().registry
    patches = patches_of(registry)
    if not patches:
        raise ConfigurationError("no installed family provides recorder patches, so no call "
                                 "can be recorded; install a family plugin such as oasr-gemm")
    _check_scheme(state, dtype, quantization)
    with _Progress() as advance:
        result = run_census(workload, config, traffic, patches, dtype=dtype,
                            params=factory_params, probe_device=probe_device,
                            probe_limit=probe_limit, strict=registry.strict, progress=advance,
                            registry=registry, route_quantization=routed,
                            compiled=compiled,
                            compile_quantization=quantization if compiled else "none")
    result = result.with_provenance(quantization=quantization)
    for path, recording in recordings:
        result = cap.merge_capture(result, recording, share=capture_share, origin=str(path))
    if not result.points:
        seen = list(result.provenance.get("skipped") or ())
        why = f"; the calls seen were skipped, first {seen[0]['reason']!r}" if seen else ""
        raise ConfigurationError(f"workload {workload.name!r} made no call any installed "
                                 f"family records; nothing to tune{why}")
    selected = result.select(coverage)
    ss.dump(selected, out)
    _summary(selected, out, as_json)


class _Progress:
    """A rich progress bar over probed keys on stderr (silent when stderr is not a terminal)."""

    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        console = Console(stderr=True)
        self.bar = Progress(TextColumn("probing {task.description}"), BarColumn(),
                            MofNCompleteColumn(), console=console, transient=True,
                            disable=not console.is_terminal)
        self.bar.__enter__()
        self.task = self.bar.add_task("keys", total=None)
        return self.advance

    def advance(self, key, done: int, total: int) -> None:
        self.bar.update(self.task, description=key.label, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)


def summary_rows(shapeset) -> list[dict[str, Any]]:
    """One row per signature: points, must-tune points, M range, calls and weight share."""
    total = shapeset.total_weight or 1.0
    rows: dict[str, dict[str, Any]] = {}
    for p in shapeset.points:
        row = rows.setdefault(p.signature, {"signature": p.signature, "points": 0, "must": 0,
                                            "m_min": p.m, "m_max": p.m, "calls": 0.0,
                                            "weight_share": 0.0})
        row["points"] += 1
        row["must"] += int(p.must)
        row["m_min"], row["m_max"] = min(row["m_min"], p.m), max(row["m_max"], p.m)
        row["calls"] += p.calls
        row["weight_share"] += p.weight / total
    return sorted(rows.values(), key=lambda r: -r["weight_share"])


def _summary(shapeset, out: Path, as_json: bool) -> None:
    rows = summary_rows(shapeset)
    prov = shapeset.provenance
    skipped = list(thaw(prov.get("skipped") or ()))
    totals = {"signatures": len(rows), "points": len(shapeset.points), "skipped": skipped,
              "points_seen": prov.get("points_seen"), "weight_covered": prov.get("weight_covered"),
              "must": sum(p.must for p in shapeset.points),
              "working_set_bytes": shapeset.working_set_bytes, "out": str(out)}
    if as_json:
        click.echo(json.dumps({"signatures": rows, **totals}, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"census: {prov.get('workload')} ({prov.get('service_mode')})")
    for column in ("signature", "points", "must", "M range", "calls/unit", "weight"):
        table.add_column(column, justify="left" if column == "signature" else "right",
                         no_wrap=column == "signature")
    for r in rows:
        table.add_row(r["signature"], str(r["points"]), str(r["must"]),
                      f"{r['m_min']}..{r['m_max']}", f"{r['calls']:.3g}",
                      f"{100 * r['weight_share']:.1f}%")
    # The keys are what the table exists to show: never cut, piped or on a narrow terminal
    # (the table is as wide as its longest key needs; the terminal wraps it if it must).
    widest = max((len(r["signature"]) for r in rows), default=10)
    console = Console(width=max(100, Console().width, widest + 60))
    console.print(table)
    covered = totals["weight_covered"]
    console.print(f"{totals['signatures']} signatures, {totals['points']} points (of "
                  f"{totals['points_seen']} seen), {totals['must']} must-tune, weight covered "
                  f"{100 * (covered or 0):.1f}%, working set "
                  f"{shapeset.working_set_bytes / 2**20:.1f} MiB; wrote {out}", highlight=False,
                  soft_wrap=True)
    for line in skipped_lines(skipped):
        console.print(line, highlight=False, soft_wrap=True, markup=False)


def skipped_lines(skipped) -> list[str]:
    """One line per reason a call seen was not made a point (provenance ``skipped``)."""
    lines = []
    for item in skipped:
        examples = item.get("examples") or ()
        tail = f" (e.g. {'; '.join(examples)})" if examples else ""
        lines.append(f"skipped {item['calls']} call(s): {item['reason']}{tail}")
    return lines
