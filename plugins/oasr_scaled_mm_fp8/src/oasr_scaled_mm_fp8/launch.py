"""ctypes binding of the scaled_mm_fp8 launchers: loaded lane libraries, prepared calls.

The C side caches prepared kernel parameters per call key (``csrc/oasr_scaled_mm_fp8/
common.cuh``); the Python side caches, per shape, the kit's
:class:`~oasr_core.kit.calls.PreparedCall` (bound launcher, output dtype code, scratch size),
so a call costs one ctypes call plus the launch on torch's current stream. The lanes have no
Stream-K; a persistent 3.x kernel's scheduler scratch (if any) comes from the kit's pool
(:func:`reserve_workspace` before capturing graphs).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import attrs
from oasr_core.jit.kit import CallArgs
from oasr_core.kit import BufferKind, LaunchError, Serving, WorkspacePool
from oasr_core.kit.calls import PreparedCall
from oasr_core.types import Config

from oasr_scaled_mm_fp8 import codegen
from oasr_scaled_mm_fp8.config_space import OP_MM, OP_QUANT, OPS
from oasr_scaled_mm_fp8.feasibility import fits_arch

_LAUNCH_ARGTYPES = (*(ctypes.c_void_p,) * 7, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p)
_WORKSPACE_ARGTYPES = (ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32)
__all__ = ["CallArgs", "Kernel", "LaunchError", "SERVING", "bind_all", "reserve_workspace"]


@attrs.define(eq=False)
class Kernel:
    """One (config, op)'s launcher and workspace query in a loaded library."""

    config: Config
    op: str
    fn: Any
    workspace_fn: Any

    @classmethod
    def bind(cls, module: Any, config: Config, op: str = OP_MM) -> Kernel:
        """Bind the symbols of ``config`` for ``op`` in a loaded module (raises if absent)."""
        fn = module.function(codegen.symbol(config, op))
        fn.argtypes, fn.restype = _LAUNCH_ARGTYPES, ctypes.c_int32
        ws = module.function(codegen.workspace_symbol(config, op))
        ws.argtypes, ws.restype = _WORKSPACE_ARGTYPES, ctypes.c_int64
        return cls(config, op, fn, ws)

    def prepare(self, out_dtype: str, m: int, n: int, k: int) -> PreparedCall:
        """The per-shape prepared call; operands ``(a, w, a_scale, w_scale, bias,
        out_scale_ptr, out_scale, d)``."""
        code = codegen.OUT_CODES[out_dtype]
        scratch = self.workspace_fn(m, n, k, code)
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id} ({self.op}): workspace "
                              f"query refused m={m} n={n} k={k} {out_dtype}")
        args = CallArgs(m=m, n=n, k=k, dtype=code, split=1)
        return PreparedCall(self.fn, args, self.config, (int(scratch),), WORKSPACES)

    def run(self, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any = None, *,
            out_dtype: Any = None, out_scale: Any = None, out: Any = None) -> Any:
        """Run this kernel on contiguous CUDA tensors (no selection, no checks), into ``out``
        when given: tests and benchmarks. Raises :class:`LaunchError` when refused."""
        import torch

        n, k = w.shape
        m = a.numel() // k
        if self.op == OP_QUANT:
            tdtype, name = torch.float8_e4m3fn, "fp8"
        else:
            tdtype = out_dtype or torch.bfloat16
            name = {torch.float16: "fp16", torch.bfloat16: "bf16"}[tdtype]
        if out is None:
            out = torch.empty((*a.shape[:-1], n), dtype=tdtype, device=a.device)
        os_ptr, os_val = out_scale_args(out_scale)
        status = self.prepare(name, m, n, k)(
            a.get_device(), a.data_ptr(), w.data_ptr(), a_scale.data_ptr(), w_scale.data_ptr(),
            bias.data_ptr() if bias is not None else 0, os_ptr, os_val, out.data_ptr())
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} ({self.op}) refused m={m} "
                              f"n={n} k={k} {name}: {status_text(status)}")
        return out


def out_scale_args(out_scale: Any) -> tuple[int, float]:
    """``(pointer, value)`` of an out_scale: a device tensor's pointer, or a float's value."""
    if out_scale is None:
        return 0, 1.0
    if hasattr(out_scale, "data_ptr"):
        return out_scale.data_ptr(), 1.0
    return 0, float(out_scale)


def status_text(status: int) -> str:
    """What a launcher status code means."""
    return codegen.STATUS.get(status, f"unknown status {status}")


def reserve_workspace(scratch_bytes: int = 1 << 20, device: int | None = None,
                      stream: Any = None) -> None:
    """Grow the scheduler scratch of ``device``/``stream`` (default: current) before capture."""
    WORKSPACES.reserve((scratch_bytes,), device, stream)


Kernels = Mapping[tuple[str, str], Kernel]
"""Loaded kernels by ``(op, config id)``."""


def bind_all(module: Any, configs: Any) -> dict[tuple[str, str], Kernel]:
    """Every (op, config) launcher of ``configs`` present in a loaded module."""
    return {(op, c.id): Kernel.bind(module, c, op) for c in configs for op in OPS
            if codegen.symbol(c, op) in module.exports}


def _load(lane: str, arch: str) -> Kernels | None:
    from oasr_scaled_mm_fp8 import jit

    return SERVING.load(lane, arch, jit.production_spec,
                        lambda module: bind_all(module, jit.PRODUCTION.lane_configs(lane, arch)))


def _wanted(lane: str, arch: str) -> tuple[str, ...]:
    from oasr_scaled_mm_fp8 import jit

    return jit.PRODUCTION.wanted(lane, arch)


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config this process's loaded module lacks."""
    return SERVING.holds(config, (OP_MM, config.id), fits_arch)


SERVING = Serving("scaled_mm_fp8", load=_load,
                  ids=lambda kernels: {cid for _op, cid in kernels}, wanted=_wanted)
"""The fp8 ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = WorkspacePool((BufferKind("scratch", 1 << 16),), warn=lambda message: (
    SERVING.warn_once("capture-alloc", f"oasr_scaled_mm_fp8: {message} "
                      "(oasr_scaled_mm_fp8.reserve_workspace())")))
"""Scheduler scratch per (device, stream)."""
LIBRARIES = SERVING.libraries
OUT_DTYPE_OF_OP = {OP_QUANT: "fp8"}
