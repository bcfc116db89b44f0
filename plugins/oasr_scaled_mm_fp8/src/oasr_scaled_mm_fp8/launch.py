"""ctypes binding of the scaled_mm_fp8 launchers: loaded lane libraries, prepared calls.

The C side caches prepared kernel parameters per call key (``csrc/oasr_scaled_mm_fp8/
common.cuh``); the Python side caches, per shape, the kit's
:class:`~oasr_core.kit.calls.PreparedCall` (bound launcher, output dtype code, scratch size),
so a call costs one ctypes call plus the launch on torch's current stream. The lanes have no
Stream-K; a persistent 3.x kernel's scheduler scratch (if any) comes from the kit's pool
(:func:`reserve_workspace` before capturing graphs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
from oasr_core.jit.kit import CallArgs
from oasr_core.kit import BufferKind, LaunchError, Serving, WorkspacePool
from oasr_core.types import Config
from oasr_scaled_mm.w8a8.scaled import ScaledAbi, ScaledKernel, out_scale_args, status_text
from oasr_scaled_mm.w8a8.scaled import bind_all as _bind_all

from oasr_scaled_mm_fp8 import codegen
from oasr_scaled_mm_fp8.config_space import OP_MM, OP_QUANT, OPS
from oasr_scaled_mm_fp8.feasibility import fits_arch

__all__ = ["CallArgs", "Kernel", "LaunchError", "SERVING", "WORKSPACES", "bind_all",
           "out_scale_args", "reserve_workspace", "status_text"]


@attrs.define(eq=False)
class Kernel(ScaledKernel):
    """One (config, op)'s launcher and workspace query in a loaded library (the kit's
    :class:`~oasr_scaled_mm.w8a8.scaled.ScaledKernel` with the fp8 family's ABI): ``prepare`` gives
    the per-shape prepared call, ``run`` launches on torch tensors (tests, benchmarks; bf16
    out by default, e4m3 for ``scaled_mm_fp8_quant``)."""

    ABI: ClassVar[ScaledAbi] = ScaledAbi(
        ops=OPS, symbol=codegen.symbol, workspace_symbol=codegen.workspace_symbol,
        out_codes=codegen.OUT_CODES, quant_op=OP_QUANT, quant_out="fp8",
        quant_torch="float8_e4m3fn", default_out="bfloat16", workspaces=lambda: WORKSPACES)


def reserve_workspace(scratch_bytes: int = 1 << 20, device: int | None = None,
                      stream: Any = None) -> None:
    """Grow the scheduler scratch of ``device``/``stream`` (default: current) before capture."""
    WORKSPACES.reserve((scratch_bytes,), device, stream)


Kernels = Mapping[tuple[str, str], Kernel]
"""Loaded kernels by ``(op, config id)``."""


def bind_all(module: Any, configs: Any) -> dict[tuple[str, str], Kernel]:
    """Every (op, config) launcher of ``configs`` present in a loaded module."""
    return _bind_all(Kernel, module, configs)


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
