"""``oasr tune bench``: a whole model with oasr's ops against the same model in plain torch.

The model is a registered workload (``--workload conformer``) or any importable factory
(``--model package.module:factory``, its ``nn.Linear`` and ``nn.Conv1d`` layers routed to
oasr's ops by :func:`oasr_core.routing.route`);
:mod:`oasr_core.bench.e2e` builds both, checks that their outputs agree, times them in CUDA
graphs and eagerly, and counts which tier served the calls. Bad input is one line on stderr
and exit code 2; outputs that disagree are one line and exit code 1. It needs a CUDA device
(``--cpu`` runs the eager mode on a CPU, where no oasr kernel runs: the report says so).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from oasr_core.bench.e2e import E2EOptions, MismatchError, check_scheme, run_e2e
from oasr_core.census.workloads import find_workload
from oasr_core.cli import CliState, _fail, completer, handle_errors, name_value
from oasr_core.commands.census import _params
from oasr_core.errors import ConfigurationError
from oasr_core.plots import e2e_figure


@click.command("bench", epilog="""\b
Examples:
  oasr tune bench --workload conformer --batch 8 --frames 1024
  oasr tune bench --workload whisper_encoder --batch 8 --no-eager --json --out e2e.json
  oasr tune bench --workload conformer --batch 8 --frames 1024 --quantization int8_w8a8""")
@click.option("--workload", "workload_name", default=None, metavar="NAME",
              shell_complete=completer("workloads"),
              help="A registered workload (built in: conformer, whisper_encoder).")
@click.option("--model", default=None, metavar="PACKAGE.MODULE:FACTORY",
              help="Benchmark the torch module this factory builds instead (its nn.Linear "
              "and nn.Conv1d layers served by oasr; it is imported from the current "
              "directory or PYTHONPATH).")
@click.option("--input", "inputs", multiple=True, metavar="DIMS",
              help="--model input per positional argument, as for `oasr tune census` "
              "('B,T,80', 'B,80,T', 'lengths'). Default B,T,80.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              callback=name_value("layers=4"),
              help="Factory keyword argument, JSON value (layers=4).")
@click.option("--batch", type=int, required=True, help="Utterances per forward.")
@click.option("--frames", type=int, default=None,
              help="Feature frames per utterance (default: a fixed-window workload's own).")
@click.option("--dtype", default="fp16", show_default=True, metavar="DTYPE",
              help="Activation dtype (fp16, bf16).")
@click.option("--quantization", default="none", show_default=True, metavar="SCHEME",
              help="none, or a scheme a family serves (int8_w8a8): the oasr model is quantized, "
              "the baseline is the same model unquantized at --dtype.")
@click.option("--graph/--no-graph", default=True, show_default=True,
              help="Time one captured forward's replays.")
@click.option("--eager/--no-eager", default=True, show_default=True,
              help="Time eager forwards under torch.inference_mode().")
@click.option("--replays", type=int, default=200, show_default=True,
              help="Graph rounds (one replay of each model a round).")
@click.option("--iters", type=int, default=30, show_default=True,
              help="Eager rounds (one forward of each model a round).")
@click.option("--warmup", type=int, default=3, show_default=True,
              help="Warm-up forwards of each model before timing.")
@click.option("--tolerance", type=float, default=None,
              help="Bound of max|oasr - torch| / max|torch| (default: by dtype and scheme).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the weights and inputs (both models get the same).")
@click.option("--cpu", "on_cpu", is_flag=True,
              help="Run eagerly on the CPU in fp32: oasr's ops take their torch path, so no "
              "oasr kernel runs (a check that the model routes and agrees, not a speed).")
@click.option("--compile", "compiled", is_flag=True,
              help="Also time the torch model under torch.compile and under torch.compile("
                   "backend=\"oasr\"), in CUDA graphs, with their compile times.")
@click.option("--profile", is_flag=True,
              help="With --compile: GPU time by kernel class of each compiled forward.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the report here (markdown; JSON when it ends in .json).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Draw torch against oasr, graph and eager (PNG).")
@click.pass_obj
@handle_errors
def bench_cmd(state: CliState, workload_name: str | None, model: str | None,
              inputs: tuple[str, ...], params: tuple[str, ...], batch: int, frames: int | None,
              dtype: str, quantization: str, graph: bool, eager: bool, replays: int, iters: int,
              warmup: int, tolerance: float | None, seed: int, on_cpu: bool, compiled: bool,
              profile: bool, as_json: bool, out: Path | None, plot_path: Path | None) -> None:
    """Time a model with oasr's ops against plain torch, in CUDA graphs and eagerly."""
    rt = state.runtime()
    workload = find_workload(rt.pm, workload_name, model, inputs)
    check_scheme(rt.registry, dtype, quantization)
    if frames is None:
        if workload.fixed_frames is None:
            raise ConfigurationError(f"--frames: workload {workload.name!r} has no fixed "
                                     "window; give the frames per utterance")
        frames = workload.fixed_frames
    options = E2EOptions(batch=batch, frames=frames, dtype=dtype, quantization=quantization,
                         graph=graph and not on_cpu, eager=eager or on_cpu, replays=replays,
                         iters=iters, warmup=warmup, tolerance=tolerance,
                         device="cpu" if on_cpu else "cuda", params=_params(params),
                         seed=seed, compile=compiled, profile=profile)
    try:
        result = run_e2e(workload, options, name=workload_name or model)
    except MismatchError as exc:
        _fail(str(exc), 1)
    if out is not None:
        out.write_text(json.dumps(result.to_json(), indent=1) + "\n"
                       if out.suffix == ".json" else result.markdown())
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=1, sort_keys=True))
    else:
        click.echo(result.markdown(), nl=False)
    if plot_path is not None:
        click.echo(f"wrote {e2e_figure([result.to_json()], plot_path)}", err=as_json)
