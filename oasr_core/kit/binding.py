"""ctypes binding of a family's generated launchers, from their declared argument types.

Every generated unit (:func:`oasr_core.jit.kit.c_abi_unit`) exports a launcher
``int32_t <symbol>(const CallArgs* call, <the family's operands>, void* stream)`` and a
workspace query ``int64_t <symbol>_workspace(<the family's sizes>)``. A family declares the
argument types of both once (a tuple of ``ctypes`` types each) and binds a config's pair with
:func:`bind_launcher`; its ``Kernel`` record keeps the two functions and prepares per-shape
calls (:class:`~oasr_core.kit.calls.PreparedCall`); :class:`BoundKernel` is that record's
common part. :func:`status_text` reads a launcher's status code. Importing this module
imports no torch.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from oasr_core.jit.kit import STATUS
from oasr_core.types import Config

LAUNCH_RESTYPE = ctypes.c_int32
"""A launcher returns a status (0: launched; :data:`oasr_core.jit.kit.STATUS`)."""
WORKSPACE_RESTYPE = ctypes.c_int64
"""A workspace query returns the scratch bytes of a shape (-1: the unit refuses it)."""


def function(module: Any, symbol: str, argtypes: Sequence[Any], restype: Any) -> Any:
    """``symbol`` of a loaded module (:class:`oasr_core.jit.LoadedModule`) with its declared
    ``argtypes`` and ``restype`` set (raises the module's error when it lacks the symbol)."""
    fn = module.function(symbol)
    fn.argtypes, fn.restype = tuple(argtypes), restype
    return fn


def bind_launcher(module: Any, symbol: str, argtypes: Sequence[Any],
                  workspace_argtypes: Sequence[Any]) -> tuple[Any, Any]:
    """``(launcher, workspace query)`` of ``symbol`` and ``symbol + "_workspace"`` in a loaded
    module, bound from their declared argument types (see the module docstring)."""
    return (function(module, symbol, argtypes, LAUNCH_RESTYPE),
            function(module, symbol + "_workspace", workspace_argtypes, WORKSPACE_RESTYPE))


def status_text(status: int, table: Mapping[int, str] = STATUS) -> str:
    """What a launcher status code means."""
    return table.get(status, f"unknown status {status}")


@attrs.define(eq=False)
class BoundKernel:
    """One config's launcher and workspace query in a loaded library: a family's ``Kernel``
    subclasses it, declares :attr:`LAUNCH` and :attr:`WORKSPACE` (the ctypes argument types)
    and adds ``prepare`` (the per-shape :class:`~oasr_core.kit.calls.PreparedCall`)."""

    LAUNCH: ClassVar[tuple[Any, ...]] = ()
    """The launcher's argument types: the call record, the family's operands, the stream."""
    WORKSPACE: ClassVar[tuple[Any, ...]] = ()
    """The workspace query's argument types."""
    config: Config
    fn: Any
    workspace_fn: Any

    @classmethod
    def bind_symbol(cls, module: Any, config: Config, symbol: str) -> Any:
        """``config``'s launcher ``symbol`` and its workspace query in a loaded module
        (:class:`oasr_core.jit.LoadedModule`; raises if absent), bound as declared."""
        return cls(config, *bind_launcher(module, symbol, cls.LAUNCH, cls.WORKSPACE))
