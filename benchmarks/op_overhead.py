"""Host cost of one eager op call next to ``F.linear``: the gemm and scaled_mm ops' two served
kinds, under ``torch.no_grad()`` and ``torch.inference_mode()``, at M in {16, 256, 1000}.

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
  kernel.

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

Each figure is the best of ``--repeat`` loops of ``--number`` calls (microseconds per call):
the loop least disturbed by other work on the host. Run:
``python benchmarks/op_overhead.py [--stub]``.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

MS = (16, 256, 1000)
_NOOP_C = """
#include <stdint.h>
int32_t noop_gemm(const void* c, const void* a, const void* w, const void* b, void* d,
                  void* s) { return 0; }
int32_t noop_scaled_mm(const void* c, const void* a, const void* w, const void* as,
                       const void* ws, const void* b, const void* osp, float os, void* d,
                       void* s) { return 0; }
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


def _best_us(fn: Callable[[], Any], number: int, repeat: int) -> float:
    for _ in range(min(number, 500)):
        fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / number)
    return best / 1000.0


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
            gemm_ops._DTYPES[tdtype], m, n, k, activation))

    def smm_plan(key: tuple) -> Any:
        op, out_dtype, n, k, m, _dev = key
        return smm_ops.SERVING.plans.store(key, smm_kernel.prepare(
            smm_ops._OUT_NAMES[out_dtype], m, n, k))

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

    gemm_ops._plan = lambda key: gemm_ops.SERVING.plans.store(key, TORCH)


def _rows(width: int, number: int, repeat: int, cuda: bool,
          stub: bool) -> list[tuple[str, str, int, Any]]:
    rows: list[tuple[str, str, int, Any]] = []
    for mode in (torch.no_grad, torch.inference_mode):
        for m in MS:
            with mode():
                rows += [(mode.__name__, path, m, us)
                         for path, us in _at(m, width, number, repeat, cuda, stub)]
    return rows


def _at(m: int, width: int, number: int, repeat: int, cuda: bool,
        stub: bool) -> list[tuple[str, Any]]:
    """The four rows at one M, under the caller's grad mode."""
    from oasr_gemm import ops as gemm_ops
    from oasr_scaled_mm import ops as smm_ops

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

    def timed(fn: Callable[[], Any]) -> float:
        if cuda:
            return _best_us(fn, number, repeat)
        with _CudaLike():
            return _best_us(fn, number, repeat)

    rows: list[tuple[str, Any]] = [("F.linear", _best_us(lambda: F.linear(a, w, b), number,
                                                         repeat))]
    real_plans = gemm_ops._plan, smm_ops._plan
    try:
        gemm_ops.clear_memo()
        _torch_plans()
        rows.append(("gemm torch", timed(gemm)))
        gemm_ops._plan, smm_ops._plan = real_plans
        gemm_ops.clear_memo()
        smm_ops.clear_memo()
        if stub:
            _stub_plans(_LIB, streams=not cuda)
        elif not _kernel_served(gemm_ops, gemm, cuda):
            gemm_ops.clear_memo()
            _default_plans()
        served = _kernel_served(gemm_ops, gemm, cuda)
        rows.append(("gemm kernel", timed(gemm) if served else None))
        if served:
            rows.append(("gemm launch only", timed(_launch_only(gemm_ops, a, w, b))))
        rows.append(("scaled_mm kernel", timed(scaled_mm)
                     if _kernel_served(smm_ops, scaled_mm, cuda) else None))
    finally:
        gemm_ops._plan, smm_ops._plan = real_plans
        gemm_ops.clear_memo()
        smm_ops.clear_memo()
    return rows


def _launch_only(ops: Any, a: torch.Tensor, w: torch.Tensor,
                 b: torch.Tensor) -> Callable[[], Any]:
    """The served plan's prepared call on preallocated tensors: the ctypes call, the
    launcher's host side and the launch, without the op's checks, lookup and allocation."""
    shape = ("gemm", None, a.dtype, w.shape[0], w.shape[1], a.shape[0])
    (dev, plan), = ((key[-1], plan) for key, plan in ops.SERVING.plans.table.items()
                    if key[:-1] == shape)
    out = a.new_empty((a.shape[0], w.shape[0]))
    ptrs = (a.data_ptr(), w.data_ptr(), b.data_ptr(), out.data_ptr())
    return lambda: plan(dev, *ptrs)


def _kernel_served(ops: Any, call: Callable[[], Any], cuda: bool) -> bool:
    """Whether ``call`` is served by a kernel (no torch-path fallback counted)."""
    ops.reset_stats()
    if cuda:
        call()
        call()
    else:
        with _CudaLike():
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
                    help="calls per loop (default 20000 on a GPU, 2000 on a CPU)")
    ap.add_argument("--repeat", type=int, default=5, help="loops; the best is reported")
    ap.add_argument("--stub", action="store_true",
                    help="with CUDA: launch a no-op C function instead of the kernels (the "
                         "Python side on real CUDA tensors; always so without CUDA)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    args.width = args.width or (1024 if cuda else 16)
    args.number = args.number or (20_000 if cuda else 2_000)
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
          f"{where}; N = K = {args.width}, fp16 / int8; best of {args.repeat} x "
          f"{args.number} calls)\n")
    linear = {(mode, m): us for mode, path, m, us in rows if path == "F.linear"}
    print("| grad mode | path | M | us per call | vs F.linear |")
    print("|---|---|---:|---:|---:|")
    for mode, path, m, us in rows:
        if us is None:
            print(f"| {mode} | {path} | {m} | n/a | |")
            continue
        print(f"| {mode} | {path} | {m} | {us:.2f} | {us / linear[(mode, m)]:.2f}x |")


if __name__ == "__main__":
    main()
