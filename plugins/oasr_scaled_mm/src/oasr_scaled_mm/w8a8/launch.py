"""A W8A8 family's ctypes binding: its loaded lane libraries, workspaces and prepared calls.

The C side caches prepared kernel parameters per call key (the family's ``csrc/.../common.cuh``);
the Python side caches, per shape, the kit's :class:`~oasr_core.kit.calls.PreparedCall`
(bound launcher, output dtype code, scratch size), so a call costs one ctypes call plus the
launch on torch's current stream. Scratch (Stream-K partials, a persistent scheduler's state)
comes from the kit's grow-only pool per (device, stream): ``reserve_workspace`` before
capturing graphs keeps the allocation out of the capture. :func:`binding` builds all of it for
a :class:`~oasr_scaled_mm.w8a8.formats.Format` from the family's ``codegen`` (symbols, output
dtype codes), ``config_space.serves`` and ``jit`` (production modules); the family's
``launch`` module names what it returns. Importing this module imports no torch.
"""

from __future__ import annotations

from typing import Any

import attrs
from oasr_core.kit import BufferKind, Serving, WorkspacePool
from oasr_core.types import Config

from oasr_scaled_mm.w8a8.formats import Format
from oasr_scaled_mm.w8a8.scaled import ScaledAbi, ScaledKernel
from oasr_scaled_mm.w8a8.scaled import bind_all as _bind_all


@attrs.frozen
class Binding:
    """One family's launch side (see the module docstring): ``kernel`` its
    :class:`~oasr_scaled_mm.w8a8.scaled.ScaledKernel` subclass, ``serving`` its plans per epoch,
    fallback counters, warnings and production libraries, ``workspaces`` its scratch pool."""

    format: Format
    kernel: type[ScaledKernel]
    serving: Serving
    workspaces: WorkspacePool
    reserve_bytes: int

    def names(self) -> dict[str, Any]:
        """What a family's ``launch`` module names: ``BINDING`` (this), ``Kernel``,
        ``SERVING`` (the ops' plans per epoch, fallback counters, warnings and production
        libraries), ``WORKSPACES`` (scratch per (device, stream)), ``LIBRARIES`` (this
        process's kernel libraries by (lane, arch): production modules, or a harness's
        ``install``; ``forget`` drops them all), ``Kernels`` (loaded kernels by ``(op, config
        id)``), ``bind_all``, ``is_available``, ``reserve_workspace``, ``out_scale_args``,
        ``status_text``, ``CallArgs`` and ``LaunchError``."""
        from collections.abc import Mapping

        from oasr_core.jit.kit import CallArgs
        from oasr_core.kit import LaunchError

        from oasr_scaled_mm.w8a8.scaled import out_scale_args, status_text

        return {"BINDING": self, "Kernel": self.kernel, "SERVING": self.serving,
                "WORKSPACES": self.workspaces, "LIBRARIES": self.serving.libraries,
                "Kernels": Mapping[tuple[str, str], self.kernel], "bind_all": self.bind_all,
                "is_available": self.is_available, "reserve_workspace": self.reserve_workspace,
                "out_scale_args": out_scale_args, "status_text": status_text,
                "CallArgs": CallArgs, "LaunchError": LaunchError}

    def bind_all(self, module: Any, configs: Any) -> dict[tuple[str, str], ScaledKernel]:
        """Every (op, config) launcher of ``configs`` present in a loaded module."""
        return _bind_all(self.kernel, module, configs, self.format.module("config_space").serves)

    def is_available(self, config: Config) -> bool:
        """``Lane.is_available``: False only for a config this process's loaded module lacks
        (before it is loaded, and without a GPU, every config counts as available)."""
        return self.serving.holds(config, (self.format.op_mm, config.id),
                                  self.format.module("feasibility").fits_arch)

    def reserve_workspace(self, scratch_bytes: int | None = None, device: int | None = None,
                          stream: Any = None) -> None:
        """Grow the scratch of ``device``/``stream`` (default: current) before capture.

        ``stream`` is a ``torch.cuda.Stream`` or a raw handle; capture with
        ``torch.cuda.graph(g, stream=s)`` and reserve for ``s``.
        """
        self.workspaces.reserve((self.reserve_bytes if scratch_bytes is None else scratch_bytes,),
                                device, stream)


def binding(fmt: Format, *, default_out: str, scratch_bytes: int, reserve_bytes: int) -> Binding:
    """The launch side of ``fmt``'s family: ``default_out`` the torch dtype name ``Kernel.run``
    writes by default, ``scratch_bytes`` the pool's first buffer, ``reserve_bytes`` what
    ``reserve_workspace()`` grows it to by default."""
    codegen, cs = fmt.module("codegen"), fmt.module("config_space")
    made: list[Binding] = []

    def load(lane: str, arch: str) -> Any:
        jit = fmt.module("jit")
        return serving.load(lane, arch, jit.production_spec, lambda module: made[0].bind_all(
            module, jit.PRODUCTION.lane_configs(lane, arch)))

    def wanted(lane: str, arch: str) -> tuple[str, ...]:
        return fmt.module("jit").PRODUCTION.wanted(lane, arch)

    serving = Serving(fmt.family, load=load, ids=lambda kernels: {cid for _op, cid in kernels},
                      wanted=wanted)
    workspaces = WorkspacePool((BufferKind("scratch", scratch_bytes),), warn=lambda message: (
        serving.warn_once("capture-alloc", f"{fmt.package}: {message} "
                          f"({fmt.package}.reserve_workspace())")))
    abi = ScaledAbi(ops=cs.OPS, symbol=codegen.symbol, workspace_symbol=codegen.workspace_symbol,
                    out_codes=codegen.OUT_CODES, quant_op=fmt.op_quant, quant_out=fmt.element,
                    quant_torch=fmt.dtype, default_out=default_out,
                    workspaces=lambda: workspaces)
    kernel = attrs.define(eq=False)(type("Kernel", (ScaledKernel,), {
        "ABI": abi, "__module__": f"{fmt.package}.launch", "__qualname__": "Kernel",
        "__doc__": f"One (config, op)'s launcher and workspace query in a loaded {fmt.family} "
                   "library: ``prepare`` gives the per-shape prepared call, ``run`` launches on "
                   f"torch tensors (tests, benchmarks; {default_out} out by default, "
                   f"{fmt.element} for ``{fmt.op_quant}``)."}))
    made.append(Binding(fmt, kernel, serving, workspaces, reserve_bytes))
    return made[0]

