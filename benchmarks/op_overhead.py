"""Host cost of one eager op call next to ``F.linear`` and ``F.conv1d``: the gemm, scaled_mm
and conv1d ops' two served kinds, under ``torch.no_grad()`` and ``torch.inference_mode()``, at
M in {16, 256, 1000}.

It measures host (CPU) time per call with the host clock, not GPU time, so no kernel is
timed and there is no separator; ``--stub`` replaces the launcher with a no-op C function so
that only the Python side of the call is counted (a deliberate harness, not a placeholder).

Rows, per grad mode and M (fp16, N = K = ``--width``):

- ``F.linear``: torch's own call;
- ``gemm torch``: ``oasr_gemm.ops.gemm`` when its plan is the torch path (``F.linear`` plus
  the op's checks and memo lookup);
- ``gemm kernel``: ``oasr_gemm.ops.gemm`` when its plan is a prepared kernel (with CUDA, the
  table's config, or the sm90 lane default where no entry covers the width);
- ``gemm launch only``: that plan's prepared call alone on preallocated tensors (the ctypes
  call, the launcher's host side and the launch: what the op adds its Python side to);
- ``scaled_mm kernel``: ``oasr_scaled_mm.ops.scaled_mm`` (int8, fp32 bias) on a prepared
  kernel;
- ``nn.Linear``: the torch model's layer called (``Module.__call__``, its forward reading
  ``self.weight`` and ``self.bias`` through ``Module.__getattr__``, ``F.linear``);
- ``routed nn.Linear torch``: the same layer routed (:func:`oasr_core.route`, what ``oasr
  tune bench`` does to a model it did not write) at a width no tier serves a kernel at, at
  any M (N = K = ``--width``: no shipped entry, outside the cost model's calibrated widths;
  every width without a CUDA device): it keeps its module's own forward, so this row is
  the ``nn.Linear`` row's call (its ratio to ``nn.Linear`` is the host's noise);
- ``routed nn.Linear per-M torch``: a routed layer at a width some tier may serve at another
  M, so its forward is the family's linear with its per-layer plan, here torch at this M
  (``F.linear`` on its parameter dict after one lookup): against ``nn.Linear``.

Conv1d rows (fp16 depthwise, channels = ``--width``, kernel 15, same padding, batch 1,
T = M; the input a transposed channels-last tensor, as speech encoders hand it to their
convolutions), each against ``F.conv1d`` on that input:

- ``nn.Conv1d``: the torch model's layer called;
- ``routed nn.Conv1d torch``: the same layer routed (:func:`oasr_core.route`; the family's
  channels-first forward) where the op's plan is torch: the layer plan's ``F.conv1d``;
- ``conv1d op torch`` / ``conv1d layer torch``: ``oasr_conv1d.ops.conv1d`` and the family's
  layer (``oasr_layer("Conv1d")``'s answer, what the reference models call) on the
  channels-last data where the plan is torch (transpose, ``F.conv1d``, transpose back to a
  contiguous output: the op's contract);
- ``conv1d kernel`` / ``routed nn.Conv1d kernel``: the op and the routed layer on a prepared
  depthwise kernel (with CUDA and no ``--stub``, only where the tiers serve the shape by one).

The ops are called through their module, bound once, as an engine would; reaching them as
``oasr_gemm.gemm`` goes through the package's lazy ``__getattr__`` on every access (a few
hundred nanoseconds more).

Without CUDA the kernel rows measure the Python side of the kernel path alone: the operands
are CPU tensors that report a CUDA device (``torch.Tensor``'s ``is_cuda`` and
``get_device`` overridden in Python while the op rows run, each a little dearer than torch's
own), the plan holds a real
:class:`~oasr_core.kit.calls.PreparedCall` whose launcher is a no-op C function (compiled here
with ``cc``) taking the family's argument list, and the stream lookups are stubbed; nothing
else of the op is changed. ``F.linear`` and the torch path then include CPU math, so on a CPU
the comparison that holds is the torch row minus ``F.linear`` (the op's own overhead), and
the kernel rows against ``F.linear`` at the smallest M (nearly all host cost). With
CUDA every row runs on the GPU with real launchers (kernels compiled in this process's
production module; a shape the module cannot serve prints ``n/a``), or with ``--stub`` real
CUDA tensors and the no-op launcher (the op's Python side on that host, no compile needed).

The paths are timed in turn, ``--repeat`` rounds of ``--number`` calls each (a round times
every path once), so that a host whose speed drifts (the H200 machine's moved 30% between
runs) slows every path alike: each row gives the best loop (microseconds per call), and the
median over the rounds of the path's time over, and less, its F call's (``F.linear`` or
``F.conv1d``) in the same round. A CPU convolution costs 50-70 us whatever its size (against
~5 us for a small ``F.linear``), so on a CPU the conv rows' differences in microseconds, not
their ratios, tell the Python side apart. Run:
``python benchmarks/op_overhead.py [--stub]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

MS = (16, 256, 1000)
_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_NOOP_C = """
#include <stdint.h>
int32_t noop_gemm(const void* c, const void* a, const void* w, const void* b, void* d,
                  void* s) { return 0; }
int32_t noop_scaled_mm(const void* c, const void* a, const void* w, const void* as,
                       const void* ws, const void* b, const void* osp, float os, void* d,
                       void* s) { return 0; }
int32_t noop_conv1d(const void* c, const void* g, const void* x, const void* w, const void* b,
                    void* o, void* s) { return 0; }
"""


class _CudaLike:
    """While entered, every tensor reports CUDA device 0 to ``is_cuda`` and ``get_device``
    (``torch.Tensor``'s Python class gets two overriding attributes; torch's C++ code never
    reads them, so CPU math and allocation are unchanged)."""

    def __enter__(self) -> None:
        saved = torch.Tensor.__dict__
        self._saved = saved.get("is_cuda"), saved.get("get_device")
        torch.Tensor.is_cuda = property(lambda self: True)
        torch.Tensor.get_device = lambda self: 0

    def __exit__(self, *exc: Any) -> None:
        for name, saved in zip(("is_cuda", "get_device"), self._saved, strict=True):
            if saved is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, saved)


def _loop_us(fn: Callable[[], Any], number: int) -> float:
    """Microseconds per call over one loop of ``number`` calls."""
    start = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return (time.perf_counter_ns() - start) / number / 1000.0


def _noop_library(tmp: Path) -> ctypes.CDLL:
    src, lib = tmp / "noop.c", tmp / "noop.so"
    src.write_text(_NOOP_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return ctypes.CDLL(str(lib))


def _stub_plans(lib: ctypes.CDLL, streams: bool) -> None:
    """Serve every shape from a no-op prepared kernel (see the docstring); ``streams`` also
    stubs the stream lookups (a CPU-only torch has none)."""
    from oasr_gemm import launch as gemm_launch
    from oasr_gemm import ops as gemm_ops
    from oasr_gemm.config_space import LANE_SM90, SM90_DEFAULT
    from oasr_gemm.config_space import SPACES as GEMM_SPACES
    from oasr_scaled_mm import config_space as smm_space
    from oasr_scaled_mm import launch as smm_launch
    from oasr_scaled_mm import ops as smm_ops

    from oasr_core.kit import calls

    if streams:
        calls._current_stream = lambda device: 0
        calls._current_device = lambda: 0
    gemm_kernel = gemm_launch.Kernel.bind(_Exports(lib, "noop_gemm"),
                                          GEMM_SPACES.config(LANE_SM90, SM90_DEFAULT))
    smm_kernel = smm_launch.Kernel.bind(_Exports(lib, "noop_scaled_mm"),
                                        smm_space.SPACES.config(smm_space.LANE_SM90,
                                                                smm_space.SM90_DEFAULT))

    def gemm_plan(key: tuple) -> Any:
        op, activation, tdtype, n, k, m, _dev = key
        return gemm_ops.SERVING.plans.store(key, gemm_kernel.prepare(
            gemm_ops._DTYPES[tdtype], m, n, k, activation), gemm_ops.SERVING.bind())

    def smm_plan(key: tuple) -> Any:
        op, out_dtype, n, k, m, _dev = key
        return smm_ops.SERVING.plans.store(key, smm_kernel.prepare(
            smm_ops._OUT_NAMES[out_dtype], m, n, k), smm_ops.SERVING.bind())

    gemm_ops._plan = gemm_plan
    smm_ops._plan = smm_plan


class _Exports:
    """A loaded-module stand-in whose every symbol is one no-op C function."""

    def __init__(self, lib: ctypes.CDLL, name: str) -> None:
        self._lib, self._name = lib, name

    def function(self, symbol: str) -> Any:
        if symbol.endswith("_workspace"):
            return ctypes.CFUNCTYPE(ctypes.c_int64)(lambda *args: 0)
        return getattr(ctypes.CDLL(self._lib._name), self._name)


def _default_plans() -> None:
    """Serve every gemm shape from the sm90 lane's default config in this process's
    production module (a real kernel where no table entry covers the width)."""
    from oasr_gemm import ops as gemm_ops
    from oasr_gemm.config_space import LANE_SM90, SM90_DEFAULT
    from oasr_gemm.config_space import SPACES as GEMM_SPACES

    from oasr_core.runtime import device_arch_of

    def plan(key: tuple) -> Any:
        op, activation, tdtype, n, k, m, dev = key
        dtype = gemm_ops._DTYPES[tdtype]
        return gemm_ops.SERVING.plan(
            key, device_arch_of(dev), select=lambda: GEMM_SPACES.config(LANE_SM90, SM90_DEFAULT),
            kernel_key=lambda config: config.id,
            prepare=lambda kernel: kernel.prepare(dtype, m, n, k, activation),
            what=f"op={op} {dtype} N={n} K={k}")

    gemm_ops._plan = plan


def _torch_plans() -> None:
    """Serve every gemm shape from the torch path (its plan is the kit's TORCH)."""
    from oasr_gemm import ops as gemm_ops

    from oasr_core.kit import TORCH

    gemm_ops._plan = lambda key: gemm_ops.SERVING.plans.store(key, TORCH,
                                                              gemm_ops.SERVING.bind())


def _rows(width: int, number: int, repeat: int, cuda: bool,
          stub: bool) -> list[tuple[str, str, int, Any, Any]]:
    rows: list[tuple[str, str, int, Any, Any]] = []
    for mode in (torch.no_grad, torch.inference_mode):
        for m in MS:
            with mode():
                rows += [(mode.__name__, path, m, best, ratio)
                         for path, best, ratio in _at(m, width, number, repeat, cuda, stub)]
                rows += [(mode.__name__, path, m, best, ratio)
                         for path, best, ratio in _conv_at(m, width, number, repeat, cuda,
                                                           stub)]
    return rows


def _at(m: int, width: int, number: int, repeat: int, cuda: bool,
        stub: bool) -> list[tuple[str, Any, Any]]:
    """The rows at one M, under the caller's grad mode: ``(path, best us, median ratio to
    F.linear over the rounds)``; every round times each path once, in turn."""
    from oasr_gemm import linear as gemm_linear
    from oasr_gemm import ops as gemm_ops
    from oasr_scaled_mm import ops as smm_ops
    from oasr_scaled_mm.quantize import QUANTIZATION as INT8
    from oasr_scaled_mm.quantize import layer_norm as int8_norm
    from oasr_scaled_mm.w8a8.scaled_ops import ROUTE

    from oasr_core.census.workloads import served_linear
    from oasr_core.kit import TORCH
    from oasr_core.routing import route
    from oasr_core.runtime import get_runtime

    int8_linear = served_linear(get_runtime().pm, dtype="fp16", quantization=INT8)
    device = "cuda" if cuda else "cpu"
    a = torch.randn(m, width, device=device).half()
    w = torch.randn(width, width, device=device).half()
    b = torch.randn(width, device=device).half()
    qa = torch.randint(-127, 127, (m, width), dtype=torch.int8, device=device)
    qw = torch.randint(-127, 127, (width, width), dtype=torch.int8, device=device)
    sa, sw, qb = torch.rand(m, device=device), torch.rand(width, device=device), \
        torch.rand(width, device=device)

    def gemm() -> Any:
        return gemm_ops.gemm(a, w, b)

    def scaled_mm() -> Any:
        return smm_ops.scaled_mm(qa, qw, sa, sw, qb)

    layer = _layer(w, b)
    routed = _layer(w, b)
    route(routed, dtype=_DTYPE_NAMES[w.dtype], conv1d=False)
    # The per-M plan's form, bound as route binds a layer some tier may serve at some M.
    per_m = _layer(w, b)
    per_m.forward = functools.partial(gemm_linear.forward, per_m)

    real_plans = gemm_ops._plan, smm_ops._plan
    context = contextlib.nullcontext() if cuda else _CudaLike()
    try:
        with context:
            gemm_ops.clear_memo()
            smm_ops.clear_memo()
            if stub:
                _stub_plans(_LIB, streams=not cuda)
            elif not _kernel_served(gemm_ops, gemm):
                gemm_ops.clear_memo()
                _default_plans()
            paths: dict[str, Callable[[], Any] | None] = {
                "F.linear": lambda: F.linear(a, w, b), "gemm torch": gemm, "gemm kernel": None,
                "gemm launch only": None, "scaled_mm kernel": None}
            paths["nn.Linear"] = lambda: layer(a)
            paths["routed nn.Linear torch"] = lambda: routed(a)
            paths["routed nn.Linear per-M torch"] = lambda: per_m(a)
            plans: dict[str, Any] = {"gemm torch": TORCH, "routed nn.Linear torch": TORCH,
                                     "routed nn.Linear per-M torch": TORCH}
            if _kernel_served(gemm_ops, gemm):
                (key, plan), = gemm_ops.SERVING.plans.table.items()
                paths["gemm kernel"], plans["gemm kernel"] = gemm, plan
                paths["gemm launch only"] = _launch_only(key, plan, a, w, b)
            if _kernel_served(smm_ops, scaled_mm):
                paths["scaled_mm kernel"] = scaled_mm
            # The int8 W8A8 linear where its route says unquantized (a tuning entry's
            # UNQUANTIZED, or the untuned route), the gemm op's plan torch: routed, as the
            # reference models call it, and after the family's deferred layer norm.
            dev = 0 if cuda else None  # the route is keyed by x.device.index
            for normed in (False, True):
                smm_ops.SERVING.plans.store((ROUTE, width, width, m, dev, normed), True,
                                            smm_ops.SERVING.bind())
            routed_q, layer_q = _layer(w, b), _layer(w, b)
            route(routed_q, dtype="fp16", quantization=INT8, conv1d=False)
            norm = torch.nn.LayerNorm(width, device=device, dtype=a.dtype).eval()
            paths["F.layer_norm + F.linear"] = \
                lambda: F.linear(F.layer_norm(a, norm.normalized_shape, norm.weight, norm.bias,
                                              norm.eps), w, b)
            paths["routed int8 nn.Linear unquantized"] = lambda: routed_q(a)
            paths["int8 linear unquantized"] = lambda: int8_linear(a, layer_q)
            paths["int8 norm + linear unquantized"] = \
                lambda: int8_linear(int8_norm(a, norm), layer_q)
            plans.update(dict.fromkeys(("routed int8 nn.Linear unquantized",
                                        "int8 linear unquantized",
                                        "int8 norm + linear unquantized"), TORCH))
            times = _timed(paths, plans, gemm_ops.SERVING.plans, key, number, repeat)
    finally:
        gemm_ops._plan, smm_ops._plan = real_plans
        gemm_ops.clear_memo()
        smm_ops.clear_memo()
    return _summary(paths, times, "F.linear")


CONV_KERNEL = 15
"""The conv rows' kernel: a Conformer's depthwise convolution (groups = channels = width)."""


def _conv_at(m: int, width: int, number: int, repeat: int, cuda: bool,
             stub: bool) -> list[tuple[str, Any, Any]]:
    """The conv1d rows at one M (batch 1, T = M, depthwise, kernel :data:`CONV_KERNEL`, same
    padding), under the caller's grad mode: ``(path, best us, median ratio to F.conv1d)``.
    The input is a transposed channels-last tensor, as speech encoders call their convs."""
    from oasr_conv1d import ops as conv_ops
    from oasr_conv1d.layer import conv_layer

    from oasr_core.kit import TORCH
    from oasr_core.routing import route

    device = "cuda" if cuda else "cpu"
    pad = CONV_KERNEL // 2
    xl = torch.randn(1, m, width, device=device).half()  # channels-last (B, T, C)
    xf = xl.transpose(1, 2)  # what the model hands nn.Conv1d
    conv = torch.nn.Conv1d(width, width, CONV_KERNEL, padding=pad, groups=width,
                           device=device, dtype=torch.float16).requires_grad_(False).eval()
    w, b = conv.weight, conv.bias
    routed_torch, routed_kernel, layer_torch = (_conv_copy(conv) for _ in range(3))
    for module in (routed_torch, routed_kernel):
        route(module, dtype="fp16", linear=False)
    key = ("conv1d", xl.dtype, 1, m, width, width, CONV_KERNEL, 1, pad, 1, width,
           0 if cuda or stub else -1)

    def op() -> Any:
        return conv_ops.conv1d(xl, w, b, 1, pad, 1, width)

    real_plan = conv_ops._plan
    context = contextlib.nullcontext() if cuda else _CudaLike()
    times: dict[str, list[float]] = {}
    try:
        with context:
            conv_ops.clear_memo()
            if stub:
                _stub_conv_plans(_LIB, streams=not cuda)
            paths: dict[str, Callable[[], Any] | None] = {
                "F.conv1d": lambda: F.conv1d(xf, w, b, 1, pad, 1, width),
                "nn.Conv1d": lambda: conv(xf),
                "routed nn.Conv1d torch": lambda: routed_torch(xf),
                "conv1d op torch": op,
                "conv1d layer torch": lambda: conv_layer(xl, layer_torch),
                "conv1d kernel": None, "routed nn.Conv1d kernel": None}
            plans: dict[str, Any] = {p: TORCH for p in ("routed nn.Conv1d torch",
                                                        "conv1d op torch",
                                                        "conv1d layer torch")}
            if _kernel_served(conv_ops, op):
                plans["conv1d kernel"] = plans["routed nn.Conv1d kernel"] = \
                    conv_ops.SERVING.plans.table[key]
                paths["conv1d kernel"] = op
                paths["routed nn.Conv1d kernel"] = lambda: routed_kernel(xf)
            times = _timed(paths, plans, conv_ops.SERVING.plans, key, number, repeat)
    finally:
        conv_ops._plan = real_plan
        conv_ops.clear_memo()
    return _summary(paths, times, "F.conv1d")


def _summary(paths: dict[str, Any], times: dict[str, list[float]],
             base: str) -> list[tuple[str, Any, Any]]:
    """Per path ``(path, best us, (median ratio, median difference in us) to its F call's
    time in the same round)`` (:func:`_base`, ``base`` by default); ``(path, None, None)`` for
    a path not timed."""
    out: list[tuple[str, Any, Any]] = []
    for path in paths:
        if path not in times:
            out.append((path, None, None))
            continue
        f = times[_base(path, base)]
        out.append((path, min(times[path]),
                    (statistics.median(t / b for t, b in zip(times[path], f, strict=True)),
                     statistics.median(t - b for t, b in zip(times[path], f, strict=True)))))
    return out


def _base(path: str, default: str) -> str:
    """The torch call a row is compared with: the norm rows' ``F.layer_norm + F.linear``, the
    conv rows' ``F.conv1d``, else ``default``."""
    if "norm" in path:
        return "F.layer_norm + F.linear"
    return "F.conv1d" if "onv1d" in path else default


def _timed(paths: dict[str, Callable[[], Any] | None], plans: dict[str, Any], memo: Any,
           key: tuple, number: int, repeat: int) -> dict[str, list[float]]:
    """Warm every path up, then time each in turn over ``repeat`` rounds (us per call); a path
    in ``plans`` runs with that op plan stored under ``key`` in ``memo`` (a routed layer's
    plan follows the op's at its first call, in the warm-up)."""
    for path, fn in paths.items():
        if fn is not None:
            if path in plans:
                memo.table[key] = plans[path]
            for _ in range(min(number, 500)):
                fn()
    times: dict[str, list[float]] = {p: [] for p, fn in paths.items() if fn}
    for _ in range(repeat):
        for path in times:
            if path in plans:
                memo.table[key] = plans[path]
            times[path].append(_loop_us(paths[path], number))
    return times


def _conv_copy(conv: torch.nn.Conv1d) -> torch.nn.Conv1d:
    """A new ``nn.Conv1d`` like ``conv``, its weight and bias copied."""
    other = torch.nn.Conv1d(conv.in_channels, conv.out_channels, conv.kernel_size,
                            padding=conv.padding, groups=conv.groups, device=conv.weight.device,
                            dtype=conv.weight.dtype)
    with torch.no_grad():
        other.weight.copy_(conv.weight)
        other.bias.copy_(conv.bias)
    return other.requires_grad_(False).eval()


def _stub_conv_plans(lib: ctypes.CDLL, streams: bool) -> None:
    """Serve every conv1d shape from a no-op prepared depthwise kernel (see the docstring)."""
    from oasr_conv1d import launch as conv_launch
    from oasr_conv1d import ops as conv_ops
    from oasr_conv1d.depthwise.space import DEFAULT
    from oasr_conv1d.geometry import LANE_SM90, geometry
    from oasr_conv1d.lanes import config

    from oasr_core.kit import calls

    if streams:  # and the capture query the weight cache asks before packing
        calls._current_stream = lambda device: 0
        calls._current_device = lambda: 0
        torch.cuda.is_current_stream_capturing = lambda: False
    kernel = conv_launch.Kernel.bind(_Exports(lib, "noop_conv1d"), config(LANE_SM90, DEFAULT))

    def plan(key: tuple, t_out: int) -> Any:
        op, _tdtype, batch, t_in, cin, cout, k, s, p, d, groups, _dev = key
        return conv_ops.SERVING.plans.store(key, kernel.prepare(
            geometry(batch, t_in, cin, cout, k, s, p, d, groups), "fp16", None),
            conv_ops.SERVING.bind())

    conv_ops._plan = plan


def _layer(w: torch.Tensor, b: torch.Tensor) -> torch.nn.Linear:
    """An ``nn.Linear`` holding ``w`` and ``b`` (on their device, in their dtype)."""
    layer = torch.nn.Linear(w.shape[1], w.shape[0], device=w.device, dtype=w.dtype)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    return layer.requires_grad_(False).eval()


def _launch_only(key: tuple, plan: Any, a: torch.Tensor, w: torch.Tensor,
                 b: torch.Tensor) -> Callable[[], Any]:
    """The served plan's prepared call on preallocated tensors: the ctypes call, the
    launcher's host side and the launch, without the op's checks, lookup and allocation."""
    out = a.new_empty((a.shape[0], w.shape[0]))
    dev, ptrs = key[-1], (a.data_ptr(), w.data_ptr(), b.data_ptr(), out.data_ptr())
    return lambda: plan(dev, *ptrs)


def _kernel_served(ops: Any, call: Callable[[], Any]) -> bool:
    """Whether ``call`` is served by a kernel (no torch-path fallback counted)."""
    ops.reset_stats()
    call()
    call()
    return not ops.stats()


_LIB: Any = None


def main() -> None:
    global _LIB
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=None,
                    help="N = K (default 1024 on a GPU, 16 on a CPU: little CPU math)")
    ap.add_argument("--number", type=int, default=None,
                    help="calls per loop (default 2000)")
    ap.add_argument("--repeat", type=int, default=15,
                    help="rounds, each timing every path once in turn (default 15)")
    ap.add_argument("--stub", action="store_true",
                    help="with CUDA: launch a no-op C function instead of the kernels (the "
                         "Python side on real CUDA tensors; always so without CUDA)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    args.width = args.width or (1024 if cuda else 16)
    args.number = args.number or 2_000
    torch.set_num_threads(1)  # CPU math on one thread: a busy host's pool spins otherwise
    stub = args.stub or not cuda
    with tempfile.TemporaryDirectory() as d:
        if stub:
            _LIB = _noop_library(Path(d))
        rows = _rows(args.width, args.number, args.repeat, cuda, stub)
    where = torch.cuda.get_device_name() if cuda else "CPU only"
    if stub:
        where += ", kernel rows launch a no-op C function"
    print(f"# op host overhead ({platform.python_implementation()} "
          f"{platform.python_version()}, torch {torch.__version__}, {platform.machine()}, "
          f"{where}; N = K = {args.width}, fp16 / int8; {args.repeat} rounds of "
          f"{args.number} calls per path, the paths in turn)\n")
    print("| grad mode | path | M | best us per call | best vs best F call | "
          "median of the rounds' ratios to the F call | median of the rounds' differences "
          "to the F call, us |")
    print("|---|---|---:|---:|---:|---:|---:|")
    base = {(mode, path, m): best for mode, path, m, best, _ in rows if path.startswith("F.")}
    for mode, path, m, best, ratio in rows:
        if best is None:
            print(f"| {mode} | {path} | {m} | n/a | | | |")
            continue
        f_call = _base(path, "F.linear")
        print(f"| {mode} | {path} | {m} | {best:.2f} | {best / base[(mode, f_call, m)]:.2f}x | "
              f"{ratio[0]:.2f}x | {ratio[1]:+.2f} |")


if __name__ == "__main__":
    main()
