"""ctypes binding of the scaled_mm launchers: loaded lane libraries, workspaces, prepared calls.

The C side caches prepared kernel parameters per call key (``csrc/oasr_scaled_mm/common.cuh``);
the Python side caches, per shape, the kit's :class:`~oasr_core.kit.calls.PreparedCall`
holding the bound launcher, the output dtype code and the scratch size, so a call costs one
ctypes call plus the launch, on torch's current stream.

Only Stream-K configs need scratch (int32 partials and barrier flags, which the launcher zeroes
before each launch). It comes from the kit's grow-only pool per (device, stream)
(:class:`oasr_core.kit.WorkspacePool`); call :func:`reserve_workspace` before capturing graphs
to keep the allocation out of the capture. The loaded production libraries and the call plans
are the kit's :class:`oasr_core.kit.Serving` (:data:`SERVING`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
from oasr_core.jit.kit import CallArgs
from oasr_core.kit import BufferKind, LaunchError, Serving, WorkspacePool
from oasr_core.types import Config

from oasr_scaled_mm import codegen
from oasr_scaled_mm.config_space import OP_MM, OP_QUANT, OPS, serves
from oasr_scaled_mm.feasibility import fits_arch
from oasr_scaled_mm.w8a8.scaled import ScaledAbi, ScaledKernel, out_scale_args, status_text
from oasr_scaled_mm.w8a8.scaled import bind_all as _bind_all

OUT_DTYPE_OF_OP = {OP_QUANT: "int8"}
__all__ = ["CallArgs", "Kernel", "LaunchError", "SERVING", "WORKSPACES", "bind_all",
           "out_scale_args", "reserve_workspace", "status_text"]


@attrs.define(eq=False)
class Kernel(ScaledKernel):
    """One (config, op)'s launcher and workspace query in a loaded library (the kit's
    :class:`~oasr_scaled_mm.w8a8.scaled.ScaledKernel` with the int8 family's ABI): ``prepare``
    gives the per-shape prepared call, ``run`` launches on torch tensors (tests, benchmarks;
    fp16 out by default, int8 for ``scaled_mm_quant``)."""

    ABI: ClassVar[ScaledAbi] = ScaledAbi(
        ops=OPS, symbol=codegen.symbol, workspace_symbol=codegen.workspace_symbol,
        out_codes=codegen.OUT_CODES, quant_op=OP_QUANT, quant_out="int8", quant_torch="int8",
        default_out="float16", workspaces=lambda: WORKSPACES)


def reserve_workspace(scratch_bytes: int = 64 << 20, device: int | None = None,
                      stream: Any = None) -> None:
    """Grow the Stream-K scratch of ``device``/``stream`` (default: current) before capture.

    ``stream`` is a ``torch.cuda.Stream`` or a raw handle; capture with
    ``torch.cuda.graph(g, stream=s)`` and reserve for ``s``.
    """
    WORKSPACES.reserve((scratch_bytes,), device, stream)


Kernels = Mapping[tuple[str, str], Kernel]
"""Loaded kernels by ``(op, config id)``."""


def bind_all(module: Any, configs: Any) -> dict[tuple[str, str], Kernel]:
    """Every (op, config) launcher of ``configs`` present in a loaded module."""
    return _bind_all(Kernel, module, configs, serves)


def _load(lane: str, arch: str) -> Kernels | None:
    from oasr_scaled_mm import jit

    return SERVING.load(lane, arch, jit.production_spec,
                        lambda module: bind_all(module, jit.PRODUCTION.lane_configs(lane, arch)))


def _wanted(lane: str, arch: str) -> tuple[str, ...]:
    from oasr_scaled_mm import jit

    return jit.PRODUCTION.wanted(lane, arch)


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config this process's loaded module lacks
    (before it is loaded, and without a GPU, every config counts as available)."""
    return SERVING.holds(config, (OP_MM, config.id), fits_arch)


SERVING = Serving("scaled_mm", load=_load, ids=lambda kernels: {cid for _op, cid in kernels},
                  wanted=_wanted)
"""The scaled_mm ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = WorkspacePool((BufferKind("scratch", 1 << 20),), warn=lambda message: (
    SERVING.warn_once("capture-alloc", f"oasr_scaled_mm: {message} "
                      "(oasr_scaled_mm.reserve_workspace())")))
"""Stream-K scratch per (device, stream)."""
LIBRARIES = SERVING.libraries
"""This process's scaled_mm kernel libraries by (lane, arch) (production modules, or a
harness's: ``install``; ``forget`` drops them all)."""
