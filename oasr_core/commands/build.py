"""``oasr tune build``: measure a census on this GPU (or replay a log) into a tuning file.

Examples::

    oasr tune build --census offline.json --census streaming.json --out user
    oasr tune build --family gemm --widths "512,256;2048,512" --m-ladder 16,64,256,1024 \\
        --out db/sm90/gemm.json
    oasr tune build --from-log db/sm90/measurements/gemm.jsonl --out /tmp/gemm.json

Without ``--family``, a census build measures every installed family the census holds points
of (a quantized model's census: gemm and scaled_mm, one tuning file each), and a log replay
rebuilds every family the log holds; ``--family`` restricts either to one. Several families
need ``--out`` to name a tier or a directory, not one ``.json`` file.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import click

from oasr_core import build
from oasr_core.bench import BenchOptions
from oasr_core.build import BuildOptions, distributed
from oasr_core.build.shards import RegistryDevice, gpu_arch
from oasr_core.census import shapeset
from oasr_core.census.shapeset import ShapeSet
from oasr_core.cli import CliState, check_parent, completer, handle_errors
from oasr_core.commands.logs import read_checked
from oasr_core.errors import ConfigurationError
from oasr_core.measurements import new_run_id
from oasr_core.progress import ProgressMode
from oasr_core.types import ARCH_RE


@attrs.frozen(kw_only=True)
class BuildRequest:
    """One ``oasr tune build``: where its points come from (a census, ``--widths``, or a log),
    where its entries go, and the build's knobs as one :class:`~oasr_core.build.BuildOptions`.

    Each field is the option of the same name (``--census`` is ``censuses``, ``--from-log``
    ``from_logs``, ``--log`` ``log_path``, ``--checkpoint`` ``checkpoint_path``, ``--json``
    ``as_json``); :meth:`from_cli` makes one from the parsed options.
    """

    family: str | None = None
    censuses: tuple[Path, ...] = attrs.field(default=(), converter=tuple)
    widths: str | None = None
    m_ladder: str | None = None
    op: str | None = None
    dtype: str | None = None
    alpha: float = 0.0
    working_set_bytes: int | None = None
    from_logs: tuple[Path, ...] = attrs.field(default=(), converter=tuple)
    out: str = "user"
    arch: str | None = attrs.field(default=None)
    lane: str | None = None
    log_path: Path | None = None
    checkpoint_path: Path | None = None
    seed: int = 0
    progress: bool | None = None
    as_json: bool = False
    scheduler: str | None = attrs.field(default=None)
    gpus: int | None = None
    compile_workers: int = 1
    run_id: str | None = None
    shared_dir: Path | None = None
    plan: bool = False
    options: BuildOptions = attrs.field(factory=BuildOptions)

    @arch.validator
    def _check_arch(self, _attribute: attrs.Attribute, value: str | None) -> None:
        if value is not None and not ARCH_RE.match(value):
            raise ConfigurationError(f"--arch {value!r} is not an arch family like sm90")

    @scheduler.validator
    def _check_scheduler(self, _attribute: attrs.Attribute, value: str | None) -> None:
        if value is not None:
            distributed.check_scheduler(value)
            return
        given = [name for name, on in (("--plan", self.plan), ("--run-id", self.run_id),
                                       ("--shared-dir", self.shared_dir), ("--gpus", self.gpus))
                 if on]
        if given:
            raise ConfigurationError(f"{', '.join(given)} shard a build over Dask workers: "
                                     "they need --scheduler")

    @classmethod
    def from_cli(cls, params: dict) -> BuildRequest:
        """The request of ``build_cmd``'s parsed options: the knobs go into ``options``
        (``--no-fill`` as ``fill=False``, ``--no-resume`` as ``resume=False``; a live build
        without ``--effort`` at the ``default`` level, a replay at none)."""
        params = dict(params)
        knobs = {name: params.pop(name) for name in KNOBS}
        knobs["fill"] = not params.pop("no_fill")
        knobs["resume"] = not params.pop("no_resume")
        if not params["from_logs"]:
            knobs["effort"] = knobs["effort"] or "default"
        return cls(**params, options=BuildOptions(**knobs))


KNOBS = ("min_speedup", "noise_k", "tie", "cover_eps", "uniform_share", "prefer_sentinels",
         "top_k", "max_units", "prune", "max_points", "thin", "exact_dtype", "budget_s",
         "fresh", "effort")
"""The options that :meth:`BuildRequest.from_cli` passes to :class:`BuildOptions` under
their own names."""


@click.command("build", epilog="""\b
Examples:
  oasr tune build --census offline.json --census streaming.json --out user
  oasr tune build --family gemm --widths "512,256;2048,512" --m-ladder 16,64,256,1024
  oasr tune build --from-log db/sm90/measurements/gemm.jsonl --fresh --out /tmp/gemm.json
      (no GPU: the shipped table, byte for byte)

Output: one line per signature, its regions as BOUND:CHOICE, each serving sizes up to
BOUND (* = every larger size), e.g. 128:ws_64x16x128 *:torch.""")
@click.option("--family", default=None, shell_complete=completer("families"),
              help="Kernel family to build (default: every "
              "installed family the census or log holds).")
@click.option("--census", "censuses", multiple=True, type=click.Path(path_type=Path,
              dir_okay=False), help="ShapeSet JSON from `oasr tune census` (repeatable).")
@click.option("--widths", default=None, metavar="N,K;N,K",
              help="Build without a census: the static dims of each signature.")
@click.option("--m-ladder", default=None, metavar="M,M,...", help="Sizes for --widths.")
@click.option("--op", default=None, help="Op for --widths (default: the family's first).")
@click.option("--dtype", default=None, help="Dtype for --widths (default: the family's first).")
@click.option("--alpha", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Eager fraction of every --widths point.")
@click.option("--working-set-bytes", type=click.IntRange(min=0), default=None,
              help="The served model's weight bytes (decides warm vs cold L2).")
@click.option("--from-log", "from_logs", multiple=True, type=click.Path(path_type=Path,
              dir_okay=False, exists=True), help="Rebuild from a measurement log, no GPU.")
@click.option("--out", default="user", show_default=True,
              help="user, system, a .json file, or a tier root directory.")
@click.option("--arch", default=None, shell_complete=completer("arch_families"),
              help="Arch family (live: must be this GPU's).")
@click.option("--lane", default=None, shell_complete=completer("lanes"),
              help="Lane to measure (default: the arch's active lane).")
@click.option("--log", "log_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Measurement log (default: measurements/ beside --out).")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(path_type=Path,
              dir_okay=False), default=None, help="Checkpoint (default: beside the log).")
@click.option("--fresh", is_flag=True, help="Replace the output file; ignore incumbents.")
@click.option("--no-resume", is_flag=True, help="Measure every signature, even those the "
              "checkpoint finished.")
@click.option("--min-speedup", type=click.FloatRange(min=1.0), default=1.05, show_default=True,
              help="A config replaces the family's fallback (torch, default) in a region only "
              "when it is at least this much faster there.")
@click.option("--noise-k", type=click.FloatRange(min=0.0), default=2.0, show_default=True,
              help="A win must exceed this many combined relative sigmas.")
@click.option("--tie", type=click.FloatRange(min=0.0), default=0.01, show_default=True,
              help="Within this fraction, the incumbent stays.")
@click.option("--cover-eps", type=click.FloatRange(min=0.0), default=0.03, show_default=True,
              help="The configs kept must serve every measured point within this fraction of "
              "its best (greedy set cover).")
@click.option("--uniform-share", type=click.FloatRange(min=0.0, max=1.0), default=0.5,
              show_default=True, help="Share of each signature's weight spread evenly over its "
              "measured sizes (the rest follows the census).")
@click.option("--prefer-sentinels/--no-prefer-sentinels", default=True, show_default=True,
              help="Within the tie band (or the noise), torch/fused win over configs, as an "
              "incumbent does: near-ties resolve the same way in every build.")
@click.option("--effort", type=click.Choice(["quick", "default", "exhaustive"]), default=None,
              help="How much a build compiles and measures (oasr_core.build.effort): quick, "
              "default (a live build's when not given) or exhaustive (--no-prune). A replay "
              "with it keeps only the rows that level would have measured.")
@click.option("--top-k", type=click.IntRange(min=1), default=None,
              help="Configs each cost model keeps per point when the build prunes (default: "
              "the effort level's).")
@click.option("--max-units", type=click.IntRange(min=0), default=None,
              help="Compile units the census's candidate sets may need at most, each point's "
              "best-ranked configs kept first (default: the effort level's; 0: no cap).")
@click.option("--prune/--no-prune", default=True, show_default=True,
              help="Prune to the top-k of the structure and of the calibrated model an "
              "earlier build shipped (the output file's, else the system tier's); without "
              "one every config is measured.")
@click.option("--max-points", type=click.IntRange(min=2), default=None,
              help="Points per signature, fill included (census points too with --thin; "
              "default: the effort level's).")
@click.option("--thin", is_flag=True, help="Thin dense censuses to --max-points.")
@click.option("--no-fill", is_flag=True, help="Measure census points only.")
@click.option("--exact-dtype", is_flag=True, help="Key by exact dtype, not dt=half.")
@click.option("--budget-s", type=click.FloatRange(min=0.0), default=None,
              help="Start no new signature after this many seconds.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the bench protocol's shuffled rounds and operands.")
@click.option("--progress/--no-progress", default=None,
              help="Progress on stderr: a bar when stdout is a terminal, else a line per "
              "tenth of the points (default); --no-progress: none.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary.")
@click.option("--scheduler", default=None, metavar="local|local-cuda|tcp://HOST:PORT",
              help="Shard the signatures over Dask workers, one per GPU (needs "
              "oasr-core[distributed]): local (a worker per GPU of this host, plus CPU "
              "compile workers), local-cuda (dask-cuda's), or a running scheduler's address "
              "(workers started with --resources GPU=1, or compile=N for CPU compile workers).")
@click.option("--gpus", type=click.IntRange(min=1), default=None,
              help="--scheduler local(-cuda): GPU workers (default: every visible GPU).")
@click.option("--compile-workers", type=click.IntRange(min=0), default=1, show_default=True,
              help="--scheduler local: CPU workers compiling each signature's module before "
              "a GPU worker measures it (0: the GPU workers compile).")
@click.option("--run-id", default=None, help="--scheduler: continue this run (printed by "
              "every sharded build) after its driver died: nothing finished is measured again.")
@click.option("--shared-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="--scheduler: where workers leave finished signatures, seen by every "
              "worker and the driver (default: beside the log).")
@click.option("--plan", is_flag=True, help="--scheduler: print what would run where; compile, "
              "measure and write nothing.")
@click.pass_context
@handle_errors
def build_cmd(ctx: click.Context, **params) -> None:
    """Measure each signature of a census and write its tuning entries (locked merge)."""
    request = BuildRequest.from_cli(params)
    show = ProgressMode.choose(request.progress)
    rt = ctx.find_object(CliState).runtime()
    if request.from_logs:
        results = _replay(ctx, rt, request, show)
    else:
        results = _live(rt, request, show)
    if request.plan and request.scheduler is not None:
        return
    _report(results, request.as_json, replay=bool(request.from_logs))


def _replay(ctx: click.Context, rt, request: BuildRequest, show) -> list:
    """``--from-log``: rebuild every family the log holds (or ``--family``), no GPU."""
    if request.censuses or request.widths:
        raise ConfigurationError("--from-log replays a log: it takes no --census/--widths")
    _runs, arms = read_checked(list(request.from_logs))
    held = sorted({str(r.get("family")) for r in arms})
    if request.family and held and request.family not in held:
        raise ConfigurationError(f"--family {request.family}: the log holds rows of family "
                                 f"{', '.join(held)}, none of {request.family}")
    families = [request.family] if request.family else held
    _check_out(request.out, families, "log")
    _note_live_only(ctx)
    return [build.build_from_log(list(request.from_logs), registry=rt.registry,
                                 out=request.out, family=name, arch=request.arch,
                                 options=request.options, progress=show)
            for name in families]


LIVE_ONLY = ("thin", "max_points", "no_fill", "budget_s", "seed", "top_k", "max_units", "prune",
             "alpha", "working_set_bytes", "lane", "log_path", "checkpoint_path", "no_resume",
             "scheduler", "gpus", "compile_workers", "run_id", "shared_dir", "plan")
"""Options that choose what a live build measures; a replay takes the log's points as they
are, so these change nothing there (except :data:`EFFORT_REPLAY` with ``--effort``)."""
EFFORT_REPLAY = ("thin", "max_points", "top_k", "max_units", "prune")
"""What a replay with ``--effort`` honours: it keeps the points and configs that level would
have measured."""


def _note_live_only(ctx: click.Context) -> None:
    ignored = set(LIVE_ONLY) - (set(EFFORT_REPLAY) if ctx.params.get("effort") else set())
    given = [p for p in ctx.command.params if p.name in ignored
             and ctx.get_parameter_source(p.name) is click.core.ParameterSource.COMMANDLINE]
    if given:
        names = ", ".join(p.opts[-1] for p in given)
        click.echo(f"note: {names} choose what a live build measures; a replay (--from-log) "
                   "takes the points the log holds, so they change nothing here", err=True)


def _check_out(out: str, families: list[str], what: str) -> None:
    if out.endswith(".json"):
        check_parent(Path(out), "--out")
    if len(families) > 1 and out not in ("user", "system") and out.endswith(".json"):
        raise ConfigurationError(f"--out {out} names one tuning file, but the {what} holds "
                                 f"families {', '.join(families)}: pass --family, or --out "
                                 "user, system or a directory")


def _census_families(rt, request: BuildRequest, shapes: ShapeSet) -> tuple[list[str], list[str]]:
    """The families a census build measures (``--family``, else every installed family the
    census holds points of), and the families of the census no plugin provides."""
    if request.family is not None:
        return [request.family], []
    named = sorted({p.family for p in shapes.points})
    installed = [name for name in named if name in rt.registry.families]
    if not installed:
        raise ConfigurationError(f"the census holds no point of an installed family (it "
                                 f"holds: {', '.join(named) or 'none'}; installed: "
                                 f"{', '.join(sorted(rt.registry.families)) or 'none'})")
    return installed, [name for name in named if name not in installed]


def _live(rt, request: BuildRequest, show) -> list:
    """A census or ``--widths`` build measured on this GPU, one result per family."""
    if bool(request.censuses) == bool(request.widths):
        raise ConfigurationError("give either --census FILE (repeatable) or --widths with "
                                 "--m-ladder")
    missing: list[str] = []
    if request.widths:
        if request.family is None:
            raise ConfigurationError("--family is required to measure --widths "
                                     "(e.g. --family gemm)")
        if not request.m_ladder:
            raise ConfigurationError("--widths needs --m-ladder (e.g. 16,64,256,1024)")
        fam = rt.registry.family(request.family)
        plans = [(fam, build.census_from_widths(
            fam, request.widths, request.m_ladder, op=request.op, dtype=request.dtype,
            alpha=request.alpha, working_set_bytes=request.working_set_bytes))]
    else:
        shapes = shapeset.load_all(request.censuses)
        names, missing = _census_families(rt, request, shapes)
        if request.lane is not None and len(names) > 1:
            raise ConfigurationError(f"--lane names a lane of one family; the census holds "
                                     f"{', '.join(names)}: pass --family too")
        _check_out(request.out, names, "census")
        plans = []
        for name in names:
            fam = rt.registry.family(name)
            census = build.census_of(shapes, fam, origin=", ".join(map(str, request.censuses)))
            if request.working_set_bytes is not None:
                census = attrs.evolve(census, working_set_bytes=request.working_set_bytes)
            plans.append((fam, census))
    for fam, census in plans:
        if not census.points:
            raise ConfigurationError(f"the census holds no point of family {fam.name}")
    if request.scheduler is not None:
        return _sharded(rt, request, plans, missing, show)
    device = rt.device_arch()
    if device is None:
        raise ConfigurationError("no CUDA device: measuring needs a GPU; rebuild from a "
                                 "measurement log with --from-log instead")
    if request.arch is not None and request.arch != device:
        raise ConfigurationError(f"--arch {request.arch} but this GPU is {device}")
    arch = device
    lanes = _lanes(rt, request, plans, arch, missing)
    return [build.build_live(census, family=fam, lane=chosen, arch=arch,
                             out=build.resolve_out(request.out, arch, fam),
                             options=request.options, log_path=request.log_path,
                             checkpoint_path=request.checkpoint_path,
                             bench_options=BenchOptions(seed=request.seed), progress=show)
            for (fam, census), chosen in zip(plans, lanes, strict=True)]


def _lanes(rt, request: BuildRequest, plans: list, arch: str, missing: list[str]) -> list:
    """Each family's lane on ``arch`` (``--lane``, else the active one); notes the census's
    families no plugin provides."""
    lanes = []
    for fam, _census in plans:
        chosen = (rt.registry.lane(request.lane) if request.lane
                  else rt.registry.active_lane(fam.name, arch))
        if chosen is None or chosen.family != fam.name or arch not in chosen.arch_families:
            raise ConfigurationError(f"no lane of family {fam.name} runs on {arch}"
                                     + (f" as {request.lane!r}" if request.lane else ""))
        lanes.append(chosen)
    for name in missing:
        click.echo(f"note: census points of family {name} skipped: no installed plugin "
                   "provides it", err=True)
    return lanes


def _sharded(rt, request: BuildRequest, plans: list, missing: list[str], show) -> list:
    """``--scheduler``: every family's signatures sharded over the cluster's GPU workers
    (:mod:`oasr_core.build.distributed`), one run id for all of them."""
    distributed.check_scheduler(request.scheduler)
    run = request.run_id or new_run_id()
    results = []
    with distributed.connect(request.scheduler, gpus=request.gpus,
                             compile_workers=request.compile_workers) as client:
        pools = distributed.Pools.of(client)
        if not pools.gpu:
            raise ConfigurationError("the Dask cluster has no worker with the GPU resource: "
                                     "start each GPU's worker with --resources GPU=1")
        arch = client.submit(gpu_arch, workers=[pools.gpu[0]], pure=False).result()
        if arch is None:
            raise ConfigurationError(f"GPU worker {pools.names[pools.gpu[0]]} sees no CUDA "
                                     "device")
        if request.arch is not None and request.arch != arch:
            raise ConfigurationError(f"--arch {request.arch} but the GPU workers are {arch}")
        lanes = _lanes(rt, request, plans, arch, missing)
        for (fam, census), chosen in zip(plans, lanes, strict=True):
            result, _report, lines = distributed.build_distributed(
                census, family=fam, lane=chosen, device=RegistryDevice(fam.name, chosen.name),
                client=client, out=build.resolve_out(request.out, arch, fam),
                options=request.options, log_path=request.log_path,
                checkpoint_path=request.checkpoint_path,
                bench_options=BenchOptions(seed=request.seed), run=run,
                shared=request.shared_dir, progress=show, plan_only=request.plan)
            if request.plan:
                for line in lines:
                    click.echo(line)
            else:
                results.append(result)
    return results


def _data(result) -> dict:
    return {"family": result.family, "out": str(result.out),
            "entries": sorted(k for k, e in result.entries.items() if e is not None),
            "reused": list(result.reused), "skipped": list(result.skipped),
            "points": result.points, "elapsed_s": round(result.elapsed_s, 3),
            "runs": list(result.runs), "messages": list(result.messages)}


def _report(results, as_json: bool, *, replay: bool = False) -> None:
    """One summary per family built (``--json``: that object, or ``{"builds": [...]}`` for
    several families); each entry as ``key  BOUND:CHOICE ...``, a legend line first."""
    datas = [_data(r) for r in results]
    if as_json:
        doc = datas[0] if len(datas) == 1 else {"builds": datas}
        click.echo(json.dumps(doc, indent=1, sort_keys=True))
        return
    if any(r.entries for r in results):
        click.echo("regions: BOUND:CHOICE serves sizes M <= BOUND (after the previous bound); "
                   "*:CHOICE every larger M; none: entry removed")
    for result, data in zip(results, datas, strict=True):
        for msg in result.messages:
            click.echo(f"note: {msg}", err=True)
        for key, entry in sorted(result.entries.items()):
            regions = "none" if entry is None else " ".join(
                f"{'*' if hi is None else hi}:{c}" for hi, c in entry.regions)
            click.echo(f"{key}  {regions}")
        n = len(data["entries"])
        work = (f"{result.points} point(s) replayed from the log" if replay else
                f"{result.points} point(s) measured")
        click.echo(f"wrote {n} entr{'y' if n == 1 else 'ies'} to {result.out} "
                   f"({len(result.reused)} reused from the checkpoint, "
                   f"{len(result.skipped)} skipped); {work} in {result.elapsed_s:.1f} s")
