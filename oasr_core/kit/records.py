"""Kernels whose call shape is a ctypes record passed by address.

A family whose launcher reads a shape record (a ``ctypes.Structure`` mirroring a C struct of
the family's ABI header) declares, in one module (:attr:`RecordKernel.ABI`), its dtype codes,
how a shape becomes the kit's call record (:class:`~oasr_core.jit.kit.CallArgs`), the output's
shape and how a shape reads in a message; :func:`abi_unit` gives the matching part of
:func:`oasr_core.jit.kit.c_abi_unit`'s arguments. :class:`RecordKernel`
binds the launcher ``int32_t <symbol>(const CallArgs*, const Record*, const void* x,
const void* w, const void* bias, void* out, void* stream)`` with its workspace query
``int64_t <symbol>_workspace(const Record*, int32_t dtype)`` and prepares one call shape's
:class:`RecordPlan`: a call costs one Python frame, one ctypes call and the launch, on torch's
current stream. Importing this module imports no torch.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs

from oasr_core import jit as core_jit
from oasr_core.jit.libraries import Libraries
from oasr_core.kit.binding import BoundKernel, status_text
from oasr_core.kit.calls import PreparedCall
from oasr_core.kit.serving import LaunchError
from oasr_core.types import Config


@attrs.define(slots=True, eq=False)
class RecordPlan:
    """One call shape's launch: the prepared call and the shape record it points at."""

    prepared: PreparedCall
    record: Any
    address: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.address = ctypes.addressof(self.record)

    @property
    def config(self) -> Config:
        return self.prepared.config

    def __call__(self, device: int, x: int, w: int, bias: int, out: int) -> int:
        """Launch on ``device``'s current stream; the launcher's status (0 = ok)."""
        return self.prepared(device, self.address, x, w, bias, out)

    def operands(self, x: int, w: int, bias: int, out: int) -> tuple[int, ...]:
        """The launcher's operands after the call record (for ``PreparedCall.launch``)."""
        return (self.address, x, w, bias, out)


@attrs.define(eq=False)
class RecordKernel(BoundKernel):
    """One config's launcher and workspace query in a loaded library, called with a shape
    record. A family subclasses it and says what differs: :attr:`ABI`, :meth:`symbol_of`,
    its workspace pool (:meth:`pool`) and, for programmatic dependent launch,
    :meth:`launch_flags`."""

    LAUNCH = (ctypes.c_void_p,) * 7
    WORKSPACE = (ctypes.c_void_p, ctypes.c_int32)
    ABI: ClassVar[Any] = None
    """The family's record module: ``DTYPE_CODE`` (dtype name to the ABI's code),
    ``call_args(record, dtype, activation, flags)`` (the kit's call record),
    ``out_shape(record)`` and ``describe(record)`` (the shape in a message)."""

    @staticmethod
    def symbol_of(config: Config) -> str:
        """The config's launcher symbol."""
        raise NotImplementedError

    @staticmethod
    def pool() -> Any:
        """The family's :class:`~oasr_core.kit.workspace.WorkspacePool`."""
        raise NotImplementedError

    def launch_flags(self, pdl: bool | None) -> int:
        """The call record's flags (none unless the family launches with PDL)."""
        return 0

    @classmethod
    def bind(cls, module: Any, config: Config) -> Any:
        """Bind ``config``'s symbols in a :class:`oasr_core.jit.LoadedModule` (raises if absent)."""
        return cls.bind_symbol(module, config, cls.symbol_of(config))

    def prepare(self, record: Any, dtype: str, activation: str | None, *,
                pdl: bool | None = None) -> RecordPlan:
        """The per-shape plan (asks the workspace this shape needs, once); a
        :class:`LaunchError` when the unit cannot run the shape."""
        record = type(record).from_buffer_copy(record)
        scratch = self.workspace_fn(ctypes.addressof(record), self.ABI.DTYPE_CODE[dtype])
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: workspace query refused "
                              f"{self.ABI.describe(record)} {dtype}")
        args = self.ABI.call_args(record, dtype, activation, self.launch_flags(pdl))
        prepared = PreparedCall(self.fn, args, self.config,
                                (int(scratch),) if scratch else (), self.pool())
        return RecordPlan(prepared, record)

    def run(self, x: Any, w_packed: Any, bias: Any, record: Any,
            activation: str | None = None, out: Any = None) -> Any:
        """Run this config on torch tensors (no selection, no memo): tests and benchmarks.
        ``x`` contiguous fp16/bf16 on the current device, ``w_packed`` the weight in the
        config's layout; raises :class:`LaunchError` when the launcher refuses."""
        import torch

        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[x.dtype]
        if out is None:
            out = torch.empty(self.ABI.out_shape(record), dtype=x.dtype, device=x.device)
        plan = self.prepare(record, dtype, activation)
        status = plan(x.get_device(), x.data_ptr(), w_packed.data_ptr(),
                      bias.data_ptr() if bias is not None else 0, out.data_ptr())
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused "
                              f"{self.ABI.describe(record)} {dtype} {activation}: "
                              f"{status_text(status)}")
        return out


def abi_unit(record: str) -> dict[str, str]:
    """The record ABI's part of :func:`oasr_core.jit.kit.c_abi_unit`'s arguments, for the C
    record type ``record`` (``ns::Geometry``): a unit's kernel types provide ``static run(call,
    geo, x, w, bias, out, stream)`` and ``static workspace(geo)``."""
    return dict(
        operands=f"const {record}* geo, const void* x, const void* w, const void* bias, "
                 "void* out",
        run="run(c, geo, x, w, bias, out, static_cast<cudaStream_t>(stream))",
        workspace_params=f"const {record}* geo, int32_t dtype",
        workspace_switch="dtype", workspace="workspace(geo)")


def module_serving(family: str, *, modules: str, kernel: Any, category: type[Warning]) -> Any:
    """A family's :class:`~oasr_core.kit.Serving` over the production modules of its
    :class:`~oasr_core.kit.production.LaneModules` (``MODULES`` of the module named
    ``modules``, e.g. ``oasr_<family>.jit``, imported on first load),
    binding each config whose launcher a module exports as ``kernel.bind(module, config)``."""
    import importlib

    from oasr_core.kit.serving import Serving

    def lanes_of() -> Any:
        return importlib.import_module(modules).MODULES

    def load(lane: str, arch: str) -> Mapping[str, Any] | None:
        lanes = lanes_of()

        def bind(module: Any) -> dict[str, Any]:
            return {c.id: kernel.bind(module, c) for c in lanes.production.lane_configs(lane, arch)
                    if kernel.symbol_of(c) in module.exports}

        return serving.load(lane, arch, lanes.production_spec, bind)

    serving = Serving(family, load=load, ids=lambda kernels: kernels.keys(),
                      wanted=lambda lane, arch: lanes_of().production.wanted(lane, arch),
                      category=category)
    return serving


def module_full(*, modules: str, kernel: str) -> Libraries:
    """Every compiled config of a lane's whole-space module (``full_spec`` of the
    :class:`~oasr_core.kit.production.LaneModules` ``MODULES`` in the module named ``modules``)
    by id, bound as ``Kernel.bind(module, config)`` (``kernel``: ``"<module>:<class>"``, the
    family's :class:`RecordKernel`), loaded once per (lane, arch): a bench adapter's kernels.
    Both modules are imported at the first load; a config whose unit failed to compile is
    absent."""
    import importlib

    def load(lane: str, arch: str) -> Mapping[str, Any]:
        lanes = importlib.import_module(modules).MODULES
        where, _, name = kernel.partition(":")
        bound = getattr(importlib.import_module(where), name)
        module = core_jit.load(lanes.full_spec(lane, arch))
        return {c.id: bound.bind(module, c) for c in lanes.production.lane_configs(lane, arch)
                if bound.symbol_of(c) in module.exports}

    return Libraries(load=load)


def scratch_pool(serving: Any, label: str, hint: str = "", **options: Any) -> Any:
    """A record-kernel family's :class:`~oasr_core.kit.workspace.WorkspacePool`: one scratch
    buffer per (device, stream), grown from 1 MiB as the launchers' workspace queries ask,
    whose growth during graph capture warns once through ``serving`` as ``<label>: <message>``
    followed by `` (<hint>)`` where given (what to call before capturing). ``options`` go to
    the pool (``allocate``, ``capturing``: CUDA memory and torch's capture state by default)."""
    from oasr_core.kit.workspace import BufferKind, WorkspacePool

    suffix = f" ({hint})" if hint else ""
    return WorkspacePool(
        (BufferKind("scratch", 1 << 20),),
        warn=lambda message: serving.warn_once("capture-alloc", f"{label}: {message}{suffix}"),
        **options)


def availability(serving: Any, fits_arch: Callable[[Config, str], bool]
                 ) -> Callable[[Config], bool]:
    """``Lane.is_available`` of a family served by ``serving``: False only for a config that a
    module this process loaded for its lane lacks (:meth:`~oasr_core.kit.Serving.holds`)."""

    def is_available(config: Config) -> bool:
        """``Lane.is_available``: False only for a config this process's loaded module lacks."""
        return serving.holds(config, config.id, fits_arch)

    return is_available
