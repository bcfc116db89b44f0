"""Every compiled config of each recurrent op and the served ops against torch's cells, in one
run.

The RNN-T prediction network decodes one token step at a time, B hypotheses together. Per
op (``--ops``: ``lstm_step``, ``rnn_tanh_step``, ``rnn_relu_step``, ``gru_step``) and point
(a layer's widths ``I x H`` and a batch ``B``; ``--widths``, ``--batches``), fp16 by
default:

- every config of the lane that supports the problem is first run once and checked by the
  family's numerics gate (a failing config is reported and dropped);
- arms timed as CUDA graphs of ``--graph-calls`` calls, in the same process: each config's
  prepared launch, ``torch`` (the op's torch path: ``torch.lstm_cell``, ``torch.rnn_tanh_cell``,
  ``torch.rnn_relu_cell``, ``torch.gru_cell``), ``module`` (a one-layer ``nn.LSTM`` /
  ``nn.RNN`` / ``nn.GRU`` of the same
  widths over one time step with its state: what a decoder calls without oasr, cuDNN on the
  GPU) and ``served`` (the op as the loaded tiers serve it: torch where no entry covers the
  shape). A screening round over all arms, then ``--reps`` interleaved, shuffled rounds of the
  ``--top`` fastest configs and the fixed arms; medians per call. Each call is followed by a
  tiny unrelated kernel whose separately measured cost is subtracted (``graph_timing.py``;
  ``--back-to-back`` turns that off). Ratios are torch / x (> 1: faster than torch).

Then the eager host cost per decoding step (``--host-steps`` steps of the reference
prediction networks' LSTMs, 1 x 640 and 2 x 320, at each batch): wall microseconds per step
of an eager loop, synchronised once at the end, of ``nn.LSTM(x_t, state)`` against the routed
module stepping through the op with a user tier naming ``--host-config`` for its widths (so
every layer step launches the kernel), and the Python issue time of one step (the call's
return, no synchronisation).

Usage (H200)::

    python benchmarks/recurrent_vs_torch.py --prebuild-only --arch sm90 --jobs 16   # no GPU
    python benchmarks/recurrent_vs_torch.py --out $OUT/recurrent_vs_torch.md

The report is markdown; every point is also a JSON line beside it (``.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import vs_torch
from graph_timing import GraphArms, mode_line

WIDTHS = "320x320,640x640,640x1024,256x320,512x1024,1024x1024"
BATCHES = "1,4,16,64"
PREDICTORS = (("rnnt_predictor 1x640", 640, 640, 1), ("rnnt_predictor_2x320", 320, 320, 2))
OPS = "lstm_step,rnn_tanh_step,rnn_relu_step,gru_step"
TORCH_CELL = {"lstm_step": "torch.lstm_cell", "rnn_tanh_step": "torch.rnn_tanh_cell",
              "rnn_relu_step": "torch.rnn_relu_cell", "gru_step": "torch.gru_cell"}
"""The op's torch path, as the report names it."""
MODULE = {"lstm_step": "nn.LSTM", "rnn_tanh_step": "nn.RNN", "rnn_relu_step": "nn.RNN",
          "gru_step": "nn.GRU"}
"""The module whose one step the op computes, as the report names it."""


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vs_torch.add_run_arguments(p, graph_calls=16)
    p.add_argument("--widths", default=WIDTHS, help="comma list of IxH")
    p.add_argument("--batches", default=BATCHES, help="comma list of B")
    p.add_argument("--ops", default=OPS, help="comma list of the ops timed")
    p.add_argument("--host-steps", type=int, default=2000)
    p.add_argument("--host-config", default="u4_r4_t128_s1",
                   help="the config a user tier names for the host-cost loop")
    return p.parse_args(argv)


def _specs(arch):
    """The lane's whole space on ``arch``, one module."""
    from oasr_recurrent import jit
    from oasr_recurrent.ops_names import LANE

    return [jit.MODULES.full_spec(LANE, arch)]


def _kernels(specs, arch):
    """Every compiled config's launchers per op (``{id: {op: Kernel}}``); installed as the
    ops' library so ``served`` runs from it."""
    from oasr_recurrent import jit, launch
    from oasr_recurrent.ops_names import LANE

    from oasr_core import jit as core_jit

    (spec,) = specs
    kernels = launch.bind_module(core_jit.load(spec, build_missing=False),
                                 jit.lane_configs(LANE, arch))
    launch.LIBRARIES.install(LANE, arch, kernels)
    return kernels


def _points(run, args):
    """Each point of ``--widths`` x ``--batches`` timed (:func:`_point`), printed and added
    to the JSONL as it is measured."""
    import torch

    points = []
    with torch.no_grad():
        for op in args.ops.split(","):
            for width in args.widths.split(","):
                input_size, hidden = (int(v) for v in width.split("x"))
                for batch in (int(b) for b in args.batches.split(",")):
                    p = _point(run.kernels, op, input_size, hidden, batch, args, run.rng,
                               run.timer)
                    points.append(p)
                    print(f"{op} I={input_size} H={hidden} B={batch}: torch "
                          f"{p['torch_us']:.2f} us, module {p['module_us']:.2f} us, best "
                          f"{p['best']} {p['best_us'] or float('nan'):.2f} us, served "
                          f"{p['served']} {p['served_us']:.2f} us", flush=True)
                    run.jsonl.add(p)
    return points


def _module(op, input_size, hidden, tdtype, w_ih, w_hh, b_ih, b_hh):
    """A one-layer ``nn.LSTM`` / ``nn.RNN`` / ``nn.GRU`` of ``op``'s cell holding the given
    weights."""
    import torch

    if op in ("lstm_step", "gru_step"):
        module = getattr(torch.nn, MODULE[op][3:])(input_size, hidden, 1)
    else:
        module = torch.nn.RNN(input_size, hidden, 1, nonlinearity=op.split("_")[1])
    module = module.cuda().to(tdtype).eval()
    with torch.no_grad():
        module.weight_ih_l0.copy_(w_ih)
        module.weight_hh_l0.copy_(w_hh)
        module.bias_ih_l0.copy_(b_ih)
        module.bias_hh_l0.copy_(b_hh)
    return module


def _served(op):
    """``op`` as a function of the family's operands ``(x, h, c, w_ih, w_hh, b_ih, b_hh)``."""
    from oasr_recurrent import gru, ops, rnn

    if op == "lstm_step":
        return ops.lstm_step
    if op == "gru_step":
        return lambda x, h, _c, *weights: gru.gru_step(x, h, *weights)
    nonlinearity = op.split("_")[1]
    return lambda x, h, _c, *weights: rnn.rnn_step(x, h, *weights, nonlinearity=nonlinearity)


def _point(kernels, op, input_size, hidden, batch, args, rng, timer):
    import torch
    from oasr_recurrent import launch, numerics, ops, space

    import oasr_core

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    problem = space.make_problem(input_size, hidden, batch, args.dtype, op=op)
    operands = numerics.make_operands(batch, input_size, hidden, args.dtype, device="cuda",
                                      seed=args.seed + batch * 31 + hidden, op=op)
    x, h, c, w_ih, w_hh, b_ih, b_hh = operands
    ref = numerics.reference(*operands, op=op)
    base = numerics.judged(numerics.torch_cell(op, *operands))
    dev = torch.cuda.current_device()
    out = torch.empty((2, batch, hidden), dtype=tdtype, device="cuda")
    outputs = (out[0], out[1] if c is not None else None)
    arms, failed = {}, []
    for cid, cells in kernels.items():
        kernel = cells.get(op)
        if kernel is None or not space.supports(kernel.config, problem):
            continue
        try:
            verdict = numerics.numerics_gate(numerics.judged(kernel.run(*operands)), base,
                                             ref, dtype=args.dtype)
        except launch.LaunchError as exc:
            failed.append(f"{cid}: {exc}")
            continue
        if not verdict:
            failed.append(f"{cid}: {verdict.reason}")
            continue
        prepared = kernel.prepare(batch, input_size, hidden, args.dtype)
        ptrs = launch.pointers(*operands, *outputs)
        arms[cid] = (lambda pc=prepared, q=ptrs: pc.launch(
            dev, torch._C._cuda_getCurrentRawStream(dev), *q))
    module = _module(op, input_size, hidden, tdtype, w_ih, w_hh, b_ih, b_hh)
    x_seq = x.unsqueeze(0)
    state = (h.unsqueeze(0), c.unsqueeze(0)) if c is not None else h.unsqueeze(0)
    served = _served(op)
    ops.reset_stats()
    served_gate = numerics.numerics_gate(numerics.judged(served(*operands)), base, ref,
                                         dtype=args.dtype)
    served_on = "torch" if ops.stats() else oasr_core.select(
        "recurrent", op, args.dtype, (input_size, hidden), batch).choice_id
    graphs = GraphArms(args.graph_calls, back_to_back=args.back_to_back, timer=timer)
    graphs.add("torch", lambda: numerics.torch_cell(op, *operands))
    graphs.add("module", lambda: module(x_seq, state))
    graphs.add("served", lambda: served(*operands))
    for cid, fn in arms.items():
        graphs.add(cid, fn)
    screen, per_call, best = graphs.screened(("torch", "module", "served"), args.top,
                                             args.reps, rng)
    graphs.release()
    weight_bytes = (w_ih.numel() + w_hh.numel()) * w_ih.element_size()
    return {
        "op": op, "I": input_size, "H": hidden, "B": batch, "dtype": args.dtype,
        "torch_us": per_call["torch"], "module_us": per_call["module"],
        "served_us": per_call["served"], "served": served_on, "served_gate": bool(served_gate),
        "best": best, "best_us": per_call.get(best) if best else None,
        "best_gbps": weight_bytes / (per_call[best] * 1e3) if best else None,
        "candidates": len(arms), "failed": failed, "screen_us": screen,
        "timing": "back_to_back" if args.back_to_back else "separated",
    }


def _user_tier(root, widths, config_id, arch):
    """A user tier naming ``config_id`` at every batch for each ``(I, H)`` of ``widths``."""
    from oasr_recurrent import hooks, lanes
    from oasr_recurrent.ops_names import LANE

    (family,) = hooks.oasr_register_families()
    raw = {"schema_version": 2, "family": "recurrent", "family_schema_version": 1,
           "arch": {"family": arch, "lane": LANE},
           "validators": {"soft": dict(family.soft_validators())},
           "configs": {config_id: lanes.config(LANE, config_id).to_json()},
           "entries": {f"recurrent|op=lstm_step|dt=half|I={i}|H={h}":
                       {"regions": [[None, config_id]]} for i, h in widths}}
    path = Path(root) / arch / "recurrent.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw))


def _host_cost(args, arch):
    """Eager microseconds per decoding step: nn.LSTM against the routed module through the op
    (wall per step of a synchronised-once loop, and issue time of one step)."""
    import torch
    from oasr_recurrent import ops

    import oasr_core
    from oasr_core.routing import route, unroute

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    root = tempfile.mkdtemp(prefix="oasr-recurrent-host.")
    widths = {(i if layer == 0 else h, h) for _n, i, h, layers in PREDICTORS
              for layer in range(layers)}
    _user_tier(root, widths, args.host_config, arch)
    previous = os.environ.get("OASR_TUNE_USER_DB")
    os.environ["OASR_TUNE_USER_DB"] = root
    oasr_core.reload()
    rows = []
    try:
        for name, input_size, hidden, layers in PREDICTORS:
            torch.manual_seed(0)
            plain = torch.nn.LSTM(input_size, hidden, layers, batch_first=True).cuda()
            plain = plain.to(tdtype).eval()
            routed = torch.nn.Sequential(torch.nn.LSTM(input_size, hidden, layers,
                                                       batch_first=True))
            routed = routed.cuda().to(tdtype).eval()
            routed[0].load_state_dict(plain.state_dict())
            route(routed, dtype=args.dtype, linear=False, conv1d=False)
            for batch in (int(b) for b in args.batches.split(",")):
                x = torch.randn(batch, 1, input_size, device="cuda", dtype=tdtype)
                row = {"model": name, "B": batch}
                for arm, module in (("nn.LSTM", plain), ("oasr", routed[0])):
                    with torch.no_grad():
                        state = None
                        for _ in range(20):
                            _y, state = module(x, state)
                        torch.cuda.synchronize()
                        ops.reset_stats()
                        t0 = time.perf_counter()
                        for _ in range(args.host_steps):
                            _y, state = module(x, state)
                        issued = time.perf_counter()
                        torch.cuda.synchronize()
                        done = time.perf_counter()
                    row[f"{arm}_issue_us"] = (issued - t0) * 1e6 / args.host_steps
                    row[f"{arm}_wall_us"] = (done - t0) * 1e6 / args.host_steps
                    if arm == "oasr":
                        row["oasr_fallbacks"] = ops.stats()
                rows.append(row)
                print(f"host {name} B={batch}: nn.LSTM {row['nn.LSTM_wall_us']:.1f} us/step, "
                      f"oasr {row['oasr_wall_us']:.1f} us/step", flush=True)
            unroute(routed)
    finally:
        if previous is None:
            os.environ.pop("OASR_TUNE_USER_DB", None)
        else:
            os.environ["OASR_TUNE_USER_DB"] = previous
        oasr_core.reload()
    return rows


def _report(points, host, header, build_lines, gpu):
    lines = [f"# recurrent steps vs torch ({gpu})", "", *header, "", "## Eager host cost per "
             "decoding step", "", "| model | B | nn.LSTM wall us | oasr wall us | nn.LSTM / oasr |"
             " nn.LSTM issue us | oasr issue us | oasr fallbacks |", "|---|---|---|---|---|---|"
             "---|---|"]
    for r in host:
        lines.append(f"| {r['model']} | {r['B']} | {r['nn.LSTM_wall_us']:.2f} | "
                     f"{r['oasr_wall_us']:.2f} | "
                     f"{vs_torch.ratio(r['nn.LSTM_wall_us'], r['oasr_wall_us']):.2f}x | "
                     f"{r['nn.LSTM_issue_us']:.2f} | {r['oasr_issue_us']:.2f} | "
                     f"{r['oasr_fallbacks'] or 'none'} |")
    ops = list(dict.fromkeys(p["op"] for p in points))
    lines += ["", "## Summary (GPU time per call, CUDA graphs)", ""]
    for op in ops:
        mine = [p for p in points if p["op"] == op]
        cell, module = TORCH_CELL[op], MODULE[op]
        best = [p["torch_us"] / p["best_us"] for p in mine if p["best_us"]]
        vs_module = [p["module_us"] / p["best_us"] for p in mine if p["best_us"]]
        served = [p["torch_us"] / p["served_us"] for p in mine]
        lines += [f"- {op}: best config / {cell}: geomean {vs_torch.geomean(best):.3f}x, min "
                  f"{min(best, default=float('nan')):.3f}x, max "
                  f"{max(best, default=float('nan')):.3f}x",
                  f"- {op}: best config / {module} one step: geomean "
                  f"{vs_torch.geomean(vs_module):.3f}x",
                  f"- {op}: served / {cell}: geomean {vs_torch.geomean(served):.3f}x"]
    lines += ["", "## Build", "", *build_lines, "", "## Points", ""]
    for op in ops:
        lines += [f"### {op}", "",
                  "| I x H | B | torch us | module us | best | best us | best/torch | "
                  "best/module | weights GB/s | served | served us | gated out |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in (p for p in points if p["op"] == op):
            lines.append(
                f"| {p['I']}x{p['H']} | {p['B']} | {p['torch_us']:.2f} | "
                f"{p['module_us']:.2f} | {p['best']} | {p['best_us'] or float('nan'):.2f} | "
                f"{vs_torch.ratio(p['torch_us'], p['best_us']):.3f}x | "
                f"{vs_torch.ratio(p['module_us'], p['best_us']):.3f}x | "
                f"{p['best_gbps'] or float('nan'):.0f} | "
                f"{p['served']}{'' if p['served_gate'] else ' (GATE FAILED)'} | "
                f"{p['served_us']:.2f} | {len(p['failed'])} |")
        lines.append("")
    lines += vs_torch.refused_section(points,
                                      lambda p: f"{p['op']} {p['I']}x{p['H']} B={p['B']}")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
    args = _args(argv)
    import torch

    run = vs_torch.start(args, _specs, _kernels)
    if isinstance(run, int):
        return run
    points = _points(run, args)
    host = _host_cost(args, run.arch)
    for row in host:
        run.jsonl.add({"host": row})
    header = [mode_line(args.back_to_back),
              f"- lane sm80_recurrent on {run.arch}; dtype {args.dtype}; graph of "
              f"{args.graph_calls} calls, L2 warm (one weight copy); {args.reps} rounds for "
              f"the top {args.top} + torch, the module (nn.LSTM / nn.RNN / nn.GRU), served; ops "
              f"{args.ops}",
              f"- eager host loop: {args.host_steps} steps per arm, synchronised once; the "
              f"routed LSTM's tier names {args.host_config}",
              f"- torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
              f"{torch.backends.cudnn.version()}); wall {time.perf_counter() - run.started:.0f} s"]
    text = _report(points, host, header, run.build_lines, torch.cuda.get_device_name())
    vs_torch.write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
