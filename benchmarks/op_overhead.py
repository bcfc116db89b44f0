"""Host cost of one eager op call next to ``F.linear``: the gemm and scaled_mm ops' two served
kinds, under ``torch.no_grad()`` and ``torch.inference_mode()``, at M in {16, 256, 1000}.

Rows, per grad mode and M (fp16, N = K = ``--width``):

- ``F.linear``: torch's own call;
- ``gemm torch``: ``oasr_gemm.ops.gemm`` when its plan is the torch path (``F.linear`` plus
  the op's checks and memo lookup);
- ``gemm kernel``: ``oasr_gemm.ops.gemm`` when its plan is a prepared kernel;
- ``scaled_mm kernel``: ``oasr_scaled_mm.ops.scaled_mm`` (int8, fp32 bias) on a prepared
  kernel.

The ops are called through their module, bound once, as an engine would; reaching them as
``oasr_gemm.gemm`` goes through the package's lazy ``__getattr__`` on every access (a few
hundred nanoseconds more).

Without CUDA the kernel rows measure the Python side of the kernel path alone: the operands
are CPU tensors that report a CUDA device (``torch.Tensor``'s ``is_cuda`` and ``get_device``
overridden in Python while the op rows run: two Python-level lookups dearer than torch's), the plan holds a real
:class:`~oasr_core.kit.calls.PreparedCall` whose launcher is a no-op C function (compiled here
with ``cc``) taking the family's argument list, and the stream lookups are stubbed; nothing
else of the op is changed. ``F.linear`` and the torch path then include CPU math, so on a CPU
the comparison that holds is the torch row minus ``F.linear`` (the op's own overhead), and
the kernel rows against ``F.linear`` at the smallest M (nearly all host cost). With
CUDA every row runs on the GPU with real launchers (kernels compiled in this process's
production module; a shape the module cannot serve prints ``n/a``).

Each figure is the best of ``--repeat`` loops of ``--number`` calls (microseconds per call):
the loop least disturbed by other work on the host. Run:
``python benchmarks/op_overhead.py [--markdown]``.
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
        self._saved = torch.Tensor.__dict__.get("is_cuda"), torch.Tensor.__dict__.get("get_device")
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


def _stub_plans(lib: ctypes.CDLL) -> None:
    """Serve every shape from a no-op prepared kernel (CPU harness; see the docstring)."""
    from oasr_core.kit import calls

    from oasr_gemm import launch as gemm_launch
    from oasr_gemm import ops as gemm_ops
    from oasr_gemm.config_space import LANE_SM90, SM90_DEFAULT
    from oasr_gemm.config_space import SPACES as GEMM_SPACES
    from oasr_scaled_mm import launch as smm_launch
    from oasr_scaled_mm import ops as smm_ops
    from oasr_scaled_mm import config_space as smm_space

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


def _torch_plans() -> None:
    """Serve every gemm shape from the torch path (its plan is the kit's TORCH)."""
    from oasr_core.kit import TORCH

    from oasr_gemm import ops as gemm_ops

    gemm_ops._plan = lambda key: gemm_ops.SERVING.plans.store(key, TORCH)


def _rows(width: int, number: int, repeat: int, cuda: bool) -> list[tuple[str, str, int, Any]]:
    from oasr_gemm import ops as gemm_ops
    from oasr_scaled_mm import ops as smm_ops

    device = "cuda" if cuda else "cpu"
    rows: list[tuple[str, str, int, Any]] = []
    real_plan = gemm_ops._plan
    for mode in (torch.no_grad, torch.inference_mode):
        for m in MS:
            with mode():
                a = torch.randn(m, width, device=device).half()
                w = torch.randn(width, width, device=device).half()
                b = torch.randn(width, device=device).half()
                qa = torch.randint(-127, 127, (m, width), dtype=torch.int8, device=device)
                qw = torch.randint(-127, 127, (width, width), dtype=torch.int8, device=device)
                sa = torch.rand(m, device=device)
                sw = torch.rand(width, device=device)
                qb = torch.rand(width, device=device)

                def timed(fn: Callable[[], Any]) -> float:
                    if cuda:
                        return _best_us(fn, number, repeat)
                    with _CudaLike():
                        return _best_us(fn, number, repeat)

                name = mode.__name__
                rows.append((name, "F.linear", m, _best_us(lambda: F.linear(a, w, b), number,
                                                           repeat)))
                gemm_ops.clear_memo()
                _torch_plans()
                rows.append((name, "gemm torch", m, timed(lambda: gemm_ops.gemm(a, w, b))))
                gemm_ops._plan = real_plan
                gemm_ops.clear_memo()
                if not cuda:
                    _stub_plans(_LIB)
                served = _kernel_served(gemm_ops, lambda: gemm_ops.gemm(a, w, b), cuda)
                rows.append((name, "gemm kernel", m,
                             timed(lambda: gemm_ops.gemm(a, w, b)) if served else None))
                smm_ops.clear_memo()
                served = _kernel_served(
                    smm_ops, lambda: smm_ops.scaled_mm(qa, qw, sa, sw, qb), cuda)
                rows.append((name, "scaled_mm kernel", m, timed(
                    lambda: smm_ops.scaled_mm(qa, qw, sa, sw, qb)) if served else None))
                gemm_ops._plan = real_plan
    return rows


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
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    args.width = args.width or (1024 if cuda else 16)
    args.number = args.number or (20_000 if cuda else 2_000)
    torch.set_num_threads(1)  # CPU math on one thread: a busy host's pool spins otherwise
    with tempfile.TemporaryDirectory() as d:
        if not cuda:
            _LIB = _noop_library(Path(d))
        rows = _rows(args.width, args.number, args.repeat, cuda)
    where = (torch.cuda.get_device_name() if cuda else "CPU only: kernel rows launch a no-op "
             "C function")
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
